"""The workers of the editor's preflight route: a graph is parsed and checked in a worker thread, never on
ComfyUI's event loop, and a worker stops once nobody waits for its answer.

- At most WORKERS requests are worked on at once (one: each busy thread beside the loop is one more that the loop
  waits behind for the interpreter lock); at most WAITING more are admitted (their body still arriving, or waiting
  for the worker). The next request is answered 503 at once (`Busy`): the loop never
  waits for a worker, and memory is bounded by the admitted bodies (each within the route's byte cap).
- Each request's work carries a `StopFlag`. The route sets it when the request is answered, given up (its time
  limit) or its client has gone; the work calls it between its steps (before each JSON array and object of the
  parse, before each node of the walk, between the checks' stages) and it raises `Abandoned` there, so the worker
  takes the next request instead of finishing a graph nobody waits for.
- A worker's slot is freed when its work ends, not when its request is answered: a request given up while its
  worker is inside a step keeps its slot until that step ends, so `Busy` counts the threads really in use.

Everything here runs on the event loop except `fn` itself; nothing imports ComfyUI or aiohttp.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

WORKERS = 1  # graphs parsed and checked at once: a second busy thread beside the loop doubled its wait (121 ms)
WAITING = 4  # requests admitted beyond those: their body arriving, or waiting for a worker
POLL_S = 0.25  # how often a waiting request looks whether its client is still connected


class Busy(Exception):
    """Every worker is busy and the waiting line is full: answer 503 now."""

    def __init__(self, admitted: int):
        super().__init__(admitted)
        self.admitted = admitted


class Abandoned(Exception):
    """Raised in a worker by its StopFlag: the request it works for was answered, given up or left."""


class StopFlag:
    """Set by the route (event loop), called by the work (worker thread) between its steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def __call__(self) -> None:
        if self._event.is_set():
            raise Abandoned()


@dataclass
class Job:
    stop: StopFlag = field(default_factory=StopFlag)
    future: Future | None = None


class Workers:
    """The route's workers and its waiting line (one per server; tests make their own)."""

    def __init__(self, workers: int = WORKERS, waiting: int = WAITING):
        self.workers = workers
        self.capacity = workers + waiting
        self.admitted = 0  # requests holding a slot (freed from a worker thread, hence the lock)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def admit(self) -> Job:
        """A slot for one request (release it with `done`), or Busy."""
        with self._lock:
            if self.admitted >= self.capacity:
                raise Busy(self.admitted)
            self.admitted += 1
        return Job()

    def done(self, job: Job) -> None:
        """The request is answered (or failed): its work is told to stop (dropped if no worker took it yet), and
        the slot is freed once the work ends."""
        job.stop.set()
        if job.future is None:
            self._release()
            return
        job.future.cancel()
        job.future.add_done_callback(lambda _: self._release())  # at once when it is already done

    def _release(self) -> None:
        with self._lock:
            self.admitted -= 1

    async def run(self, job: Job, fn: Callable[..., Any], *args: Any, timeout: float,
                  gone: Callable[[], bool] = lambda: False) -> Any:
        """`fn(job.stop, *args)` in a worker; its result, or its exception. asyncio.TimeoutError past `timeout`
        seconds (waiting for a worker included), Abandoned when `gone()` says the client left."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="h3kit-preflight")
        job.future = self._pool.submit(fn, job.stop, *args)
        waiting = asyncio.wrap_future(job.future)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    raise asyncio.TimeoutError()
                finished, _ = await asyncio.wait({waiting}, timeout=min(POLL_S, left))
                if finished:
                    return waiting.result()
                if gone():
                    raise Abandoned()
        finally:
            if not waiting.done():
                waiting.cancel()  # never "exception was never retrieved" for work nobody waits for
