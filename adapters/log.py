"""The pack's one logger (ComfyUI shows it in its console and log file) and `log_once` for fallbacks that would
otherwise repeat on every step. Every layer above checks/ logs through here.

Every record of the pack's logger is one escaped line (`checks.problem.printable`): a node id, an input key or a
file name from a workflow can name itself anything, and nothing it holds may start a console line of its own
(a fake INFO line) or reach the terminal as an escape sequence. A traceback the pack logs on purpose
(`exc_info=True`) still follows its line. The CLI applies `one_line_records` to its log handler too, so a
library's record (urllib3's header warning) is one escaped line without its traceback."""

from __future__ import annotations

import logging

from ..checks.problem import printable

LOG = logging.getLogger("H3Kit")
MAX_LOG_LINE_CHARS = 4000  # one record: a summary of many adapted inputs is a few hundred characters
# Kept on the logger, which logging keeps once per process by its name: a host that imports the pack twice under
# two module names (the installable 0.12.1 fork does) still logs each line once.
_LOGGED_ONCE: set[str] = LOG.__dict__.setdefault("h3kit_logged_once", set())


class _OneLine(logging.Filter):
    """Rewrites each record's message to one escaped line; drops the traceback of a record from outside the
    pack (a library's warning: its message already names the problem)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except (TypeError, ValueError) as exc:  # arguments that do not fit the format: show both, never raise
            text = f"{record.msg!r} % {record.args!r} (could not be formatted: {exc})"
        record.msg, record.args = printable(text, MAX_LOG_LINE_CHARS), None
        if record.name != LOG.name and not record.name.startswith(LOG.name + "."):
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def one_line_records(target: logging.Logger | logging.Handler) -> None:
    """Make every record `target` (a logger, or a handler: every record it prints) lets through one escaped line."""
    if not any(isinstance(f, _OneLine) for f in target.filters):
        target.addFilter(_OneLine())


one_line_records(LOG)


def log_once(key: str, message: str, level: int = logging.WARNING) -> bool:
    """Log `message` the first time `key` is seen in this process; return True when it was logged."""
    if key in _LOGGED_ONCE:
        return False
    _LOGGED_ONCE.add(key)
    LOG.log(level, message)
    return True
