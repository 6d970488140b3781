"""Test-only: a timer task on ComfyUI's own event loop that measures how late the loop wakes it (tier (b),
tests/test_event_loop_comfyui.py). Measured inside the server, so a busy test client never counts.

GET /h3kit_test/loop_lag starts the timer on its first call (every TICK_S) and answers {"max_ms", "ticks",
"gc_max_ms", "gc_generation", "gc_pack_ms", "gc_host_ms", "handlers"}: the largest lateness of one tick since the
previous call, how many ticks that covers, the longest pass of Python's cyclic garbage collector in that window (any
thread's: a pass holds the interpreter lock, so it shows in the loop's lateness too) and its generation, the longest
pass that started in the pack's request work (`in_the_packs_work`) and the longest that started elsewhere, and the
longest run of each on-prompt handler
({"module.name": ms}: the handlers run on the loop inside POST /prompt, so this is a handler's own share of the
lateness). Each call starts a new window. A loop held for 3 s shows as a tick about 3,000 ms late."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time

TICK_S = 0.02
PACK_FILES = f"{os.sep}custom_nodes{os.sep}H3Kit{os.sep}"  # where the pack's code runs from in a test server


def in_the_packs_work() -> bool:
    """The paying thread is in the pack's request work: its preflight worker thread, or its on-prompt handler on
    the loop. (The route's coroutine on the loop only awaits the body and the worker; a pass it starts is the
    server's backlog, paid by whoever allocates next.)"""
    if threading.current_thread().name.startswith("h3kit-"):
        return True
    frame = sys._getframe(2)  # above this function and the gc callback
    while frame is not None:
        if frame.f_code.co_name == "adapt_queued_prompt" and PACK_FILES in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False
ROUTE = "/h3kit_test/loop_lag"


class LoopLag:
    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.max_s = 0.0
        self.ticks = 0
        self.gc_max_s = 0.0
        self.gc_generation = None
        self.gc_pack_s = self.gc_host_s = 0.0
        self._gc_started = 0.0
        self._gc_in_pack = False
        gc.callbacks.append(self._gc)
        self.handlers: dict[str, float] = {}

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started, self._gc_in_pack = time.monotonic(), in_the_packs_work()
            return
        seconds = time.monotonic() - self._gc_started
        if seconds > self.gc_max_s:
            self.gc_max_s, self.gc_generation = seconds, info.get("generation")
        if self._gc_in_pack:
            self.gc_pack_s = max(self.gc_pack_s, seconds)
        else:
            self.gc_host_s = max(self.gc_host_s, seconds)

    async def _tick(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(TICK_S)
            self.max_s = max(self.max_s, time.monotonic() - started - TICK_S)
            self.ticks += 1

    def timed(self, handler):
        name = f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"

        def run(json_data):
            started = time.monotonic()
            try:
                return handler(json_data)
            finally:
                self.handlers[name] = max(self.handlers.get(name, 0.0), time.monotonic() - started)

        run.h3kit_probe_timed = True
        return run

    def window(self, prompt_server) -> dict:
        if self.task is None:  # the first call: the loop runs, and every custom node has added its handlers
            self.task = asyncio.ensure_future(self._tick())
            handlers = getattr(prompt_server, "on_prompt_handlers", [])
            handlers[:] = [h if getattr(h, "h3kit_probe_timed", False) else self.timed(h) for h in handlers]
        answer = {"max_ms": round(self.max_s * 1000, 1), "ticks": self.ticks,
                  "gc_max_ms": round(self.gc_max_s * 1000, 1), "gc_generation": self.gc_generation,
                  "gc_pack_ms": round(self.gc_pack_s * 1000, 1), "gc_host_ms": round(self.gc_host_s * 1000, 1),
                  "handlers": {name: round(seconds * 1000, 1) for name, seconds in self.handlers.items()}}
        self.max_s, self.ticks, self.gc_max_s, self.gc_generation = 0.0, 0, 0.0, None
        self.gc_pack_s = self.gc_host_s = 0.0
        self.handlers = {}
        return answer


def register() -> None:
    """Add the route to the running ComfyUI (nothing outside one)."""
    try:
        from aiohttp import web
        from server import PromptServer
    except ImportError:
        return
    if getattr(PromptServer, "instance", None) is None:  # imported by a script in the host's Python, not a server
        return
    lag = LoopLag()

    @PromptServer.instance.routes.get(ROUTE)
    async def loop_lag(request):
        return web.json_response(lag.window(PromptServer.instance))
