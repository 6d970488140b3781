"""The one stream rule of every command (README, section 'Exit codes and output'):

  stdout  the result: what the command made, found or checked and passed (PASS lines, INFO lines of what it
          adapted, listings, summaries, paths written, --json documents)
  stderr  every error and warning (FAIL / WARN / ERROR / REJECTED / TIMEOUT / UNREACHABLE lines and their
          fixes), progress bars and log lines

Each line is flushed as it is written, so a terminal (or `2>&1`) shows both streams in order. Text that came
from files or servers was made printable (one line, no terminal escapes) where it entered the message; here each
of H3Kit's own lines is made printable again, so nothing can redraw the terminal.
"""

from __future__ import annotations

import sys
import threading

from ..checks.problem import INFO, PASS, Check, printable_lines

_LOCK = threading.Lock()  # run's fan-out prints from one thread per server


def result(text: str = "") -> None:
    """A line of the command's result, on stdout."""
    _write(sys.stdout, text)


def problem(text: str) -> None:
    """An error or a warning, on stderr."""
    _write(sys.stderr, text)


def check(line: Check, label: str = "") -> None:
    """A PASS or INFO line is a result; a WARN or FAIL line (with its fix) is a problem."""
    (result if line.status in (PASS, INFO) else problem)(label + line.line())


def _write(stream, text: str) -> None:
    with _LOCK:
        print(printable_lines(text), file=stream, flush=True)
