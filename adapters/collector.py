"""Python's cyclic garbage collector paused while the pack works inside ComfyUI's process on a request.

A pass of the collector holds the interpreter lock, and so ComfyUI's event loop, for as long as it takes to walk
the objects of the generations it collects: a full pass over a running ComfyUI's objects takes 0.1-0.5 s on a
2-core machine (issue 33: 265-308 ms on yzkee/ComfyUI 783545f6, in the preflight worker, one pass). Which thread
pays for a pass is the one that allocates when one is due, so the pack's request work (the preflight worker's
parse and checks, the on-prompt handler) would pay for the server's own backlog, and its short-lived objects
would add to that backlog. With the collector paused for the whole work, and everything the work built freed
(by reference counting: a JSON tree, a report hold no cycle) before it resumes, no pass runs in the pack's work
and nothing it built is left for a later pass. The pause is bounded by the work's own time limit (the preflight's
CHECK_S, the handler's key caps), and process-wide, so counted: the last of several works running at once turns
the collector back on, and only if it was on. Between two works (one worker: they never overlap) the collector is
on, and the pass that came due meanwhile starts at the next allocation, in whichever thread: the server's cyclic
garbage waits at most one work's time limit.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pauses = 0
_paused_lock = threading.Lock()
_resume = False


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """No collector pass inside the block (in any thread); on again after it if it was on before the first of
    the blocks running at once. Free what the block built before it ends: an object alive at the end is
    collected later, in whichever thread then allocates."""
    global _pauses, _resume
    with _paused_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _paused_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()
