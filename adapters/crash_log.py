"""Crash logs: the full traceback of an error nobody foresaw, written where the user can find it, so that the
terminal gets one line and nothing is lost.

A log is a new file `crash-<UTC time>-<pid>.log` (never overwriting: adapters/files.write_new, atomic) in the
per-user log folder of the OS: $H3KIT_LOG_DIR if set; Windows %LOCALAPPDATA%\\H3Kit\\Logs; macOS
~/Library/Logs/H3Kit; elsewhere $XDG_STATE_HOME/h3kit/logs (default ~/.local/state/h3kit/logs). When that
folder cannot be written, the system's temp folder is tried; `write_crash_log` returns None only when neither
works, and the caller then prints the traceback itself.
"""

from __future__ import annotations

import errno
import os
import platform
import sys
import tempfile
import traceback
from datetime import datetime, timezone
from pathlib import Path

from ..checks.facts import EXIT_FAILED, EXIT_INVALID
from ..checks.problem import printable
from .files import os_reason, write_new

ENV_DIR = "H3KIT_LOG_DIR"


def log_folder() -> Path:
    if os.environ.get(ENV_DIR):
        return Path(os.environ[ENV_DIR])
    home = Path.home()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local") / "H3Kit" / "Logs"
    if sys.platform == "darwin":
        return home / "Library" / "Logs" / "H3Kit"
    return Path(os.environ.get("XDG_STATE_HOME") or home / ".local" / "state") / "h3kit" / "logs"


def crash_report(what: str, exc: BaseException, version: str) -> str:
    """The log's text: when, where, what ran, and the whole traceback (chained causes included)."""
    lines = [f"H3Kit {version} crash log", f"time (UTC): {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
             f"while: {what}", f"command line: {sys.argv!r}",
             f"python: {sys.version.split()[0]} ({sys.executable}); {platform.platform()}", "",
             "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
    return "\n".join(lines)


def write_crash_log(what: str, exc: BaseException, version: str) -> Path | None:
    """The new log file's path, or None when no folder could take it."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    data = crash_report(what, exc, version).encode("utf-8", "backslashreplace")
    for folder in (log_folder(), Path(tempfile.gettempdir()) / "h3kit-logs"):
        try:
            return write_new(folder, f"crash-{stamp}-{os.getpid()}.log", [data])
        except OSError:
            continue  # a read-only or full home: the temp folder is the second place
    return None


# An OSError on these is a path the user gave that cannot be used (exit 2); any other is a failure (exit 1).
_PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EACCES,
                          errno.EPERM, errno.EINVAL})


def unexpected_error(what: str, exc: BaseException, version: str) -> tuple[str, int]:
    """(one line for the terminal, the exit code) for an error nobody caught, after its traceback went to a new
    crash log: what failed, what to do, where the details are. Without a writable log folder the line says so
    and the traceback follows it (nothing is lost)."""
    log = write_crash_log(what, exc, version)
    where = f"the full traceback is in {log}" if log else "no log folder was writable; the traceback follows"
    if isinstance(exc, OSError):
        name = f"{exc.filename} " if exc.filename else ""
        line = (f"{what}: {name}{os_reason(exc)}. Check the path, free space and permissions, then run it again "
                f"({where})")
        code = EXIT_INVALID if exc.errno in _PATH_ERRNOS else EXIT_FAILED
    elif isinstance(exc, MemoryError):
        line = f"{what}: ran out of memory. Close other programs or use a smaller input ({where})"
        code = EXIT_FAILED
    else:
        line = (f"{what}: unexpected {type(exc).__name__}: {printable(exc, 200)}. This is a bug in H3Kit or an input "
                f"it does not handle: please report it with the log ({where})")
        code = EXIT_FAILED
    line = printable(line)
    if log is None:
        line += "\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return line, code
