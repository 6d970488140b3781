"""A total time budget, and the one way CPU work on outside data stays inside it.

`Deadline(seconds)` is what `--timeout` becomes: the HTTP client cuts its exchanges at it (adapters/comfy_client.py),
and every walk over data a server or a file chose calls `check_time()` at its loop heads. While a deadline is
`applied()` (a context manager, per thread), `check_time()` raises its `error` once the time is spent; with none
applied it costs one lookup and does nothing. So parsing, schema checks, validation and rules on a hostile
/object_info end at `--timeout` like the network part does (issue 33: 150 s of CPU for `--timeout 60`).

Pure Python, no pack import beyond checks/: adapters give their own error class (the client's TimedOut, exit 3).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from contextvars import ContextVar

from .facts import EXIT_TIMEOUT

# Items a tight loop handles between two check_time() calls (each call is a context lookup and a clock read; a loop
# whose items each cost more, a graph node or a schema entry, checks at every item).
CHECK_EVERY = 1024


class OutOfTime(RuntimeError):
    """The time budget ran out during CPU work; `exit_code` is the documented timeout code."""

    exit_code = EXIT_TIMEOUT


class Deadline:
    """A total time budget; `None` seconds means no limit. Seconds must be a finite number >= 0 (NaN would never
    run out, which is how `--timeout nan` once meant "wait forever")."""

    error: type[Exception] = OutOfTime

    def __init__(self, seconds: float | None):
        if seconds is not None and (isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0):
            raise ValueError(f"a time limit must be a finite number of seconds >= 0, not {seconds!r}")
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + float(seconds)

    def remaining(self) -> float | None:
        return None if self.end is None else self.end - time.monotonic()

    def expired(self) -> bool:
        remaining = self.remaining()
        return remaining is not None and remaining <= 0

    def cap(self, seconds: float) -> float:
        remaining = self.remaining()
        return seconds if remaining is None else max(min(seconds, remaining), 0.01)

    def check(self, what: str = "the work") -> None:
        """Raise `self.error` when the time is spent."""
        if self.expired():
            raise self.error(f"the time limit of {self.seconds:g} s ran out while {what}")

    @contextlib.contextmanager
    def applied(self) -> Iterator[Deadline]:
        """Within the block (this thread), `check_time()` checks this deadline too."""
        token = _APPLIED.set((*_APPLIED.get(), self))
        try:
            yield self
        finally:
            _APPLIED.reset(token)


_APPLIED: ContextVar[tuple[Deadline, ...]] = ContextVar("h3kit_deadlines", default=())


def check_time(what: str = "checking") -> None:
    """Called at the loop heads of every walk over outside data: raises the applied deadline's error once it is
    spent (the innermost first), else returns at once."""
    for deadline in reversed(_APPLIED.get()):
        deadline.check(what)
