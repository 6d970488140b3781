"""H3Kit in a subprocess under resource limits, for fuzz properties that assert time and memory on every example.

A worker is one long-lived process (importing torch per example would cost seconds), started with RLIMIT_AS
(address space) so that no example can take the machine; each example is one request to it, answered within a
wall-clock limit, and its memory is the process's peak resident size during that request alone (Linux resets
the peak, VmHWM, when "5" is written to /proc/PID/clear_refs). A request that does not answer in time is a
hang: the worker is killed (and started again for the next example).

Two kinds (run this file as a script):
  cli    reads one JSON line per request, {"argv": [...]}, runs `python -m h3kit` (scripts/cli.main) in-process
         and answers {"code", "out", "err"};
  route  serves the pack's routes (POST /h3kit/preflight on an offline host) on 127.0.0.1 and prints its port.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import sys
import tempfile
from pathlib import Path
from subprocess import PIPE, Popen
from typing import Any

ADDRESS_SPACE = 3 * 2**30  # RLIMIT_AS: importing torch and the pack maps about 0.7 GiB
HERE = Path(__file__).resolve().parent


class Hang(AssertionError):
    pass


def _limits() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Worker:
    def __init__(self, kind: str):
        self.kind = kind
        self.process: Popen | None = None
        self.port: int | None = None

    def start(self) -> None:
        logs = tempfile.mkdtemp(prefix="h3kit-worker-logs-")  # crash logs never go to the user's own folder
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]), "H3KIT_LOG_DIR": logs}
        self.process = Popen([sys.executable, str(Path(__file__)), self.kind], stdin=PIPE, stdout=PIPE, text=True,
                             env=env, preexec_fn=_limits if hasattr(os, "fork") else None)
        ready = self._line(120)
        if not ready.startswith("ready"):
            raise RuntimeError(f"the {self.kind} worker did not start: {ready!r}")
        self.port = int(ready.split()[1]) if self.kind == "route" else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            raise Hang(f"no answer within {timeout} s")
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"the worker died (exit {self.process.wait()}): out of its memory limit?")
        return line

    # -- memory of one example
    def reset_peak(self) -> None:
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def peak_bytes(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024

    def alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.start()

    def command(self, argv: list[str], timeout: float) -> dict[str, Any]:
        """Run `python -m h3kit ARGV` in the worker: {"code", "out", "err", "peak"} or Hang."""
        self.alive()
        self.reset_peak()
        self.process.stdin.write(json.dumps({"argv": argv}) + "\n")
        self.process.stdin.flush()
        try:
            answer = json.loads(self._line(timeout))
        except Hang:
            self.stop()
            raise
        answer["peak"] = self.peak_bytes()
        return answer


# ------------------------------------------------------------------------------------------ inside the worker
def _serve_cli() -> None:
    from h3kit.scripts import cli

    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(request["argv"])
            except SystemExit as exc:  # argparse's own exit (2 for bad arguments, 0 for --help), as in a shell
                code = exc.code if isinstance(exc.code, int) else 1
        sys.__stdout__.write(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}) + "\n")
        sys.__stdout__.flush()


def _serve_route() -> None:
    import asyncio

    import pytest
    from aiohttp import web
    from route_harness import app, routes

    async def main() -> None:
        with pytest.MonkeyPatch.context() as patch:
            runner = web.AppRunner(app(routes(patch)))
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]
            print(f"ready {port}", flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())


if __name__ == "__main__":
    import logging

    logging.disable(logging.CRITICAL)  # the worker's own log lines would mix into the answers
    {"cli": _serve_cli, "route": _serve_route}[sys.argv[1]]()
