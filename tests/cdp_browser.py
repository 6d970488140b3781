"""A headless Chromium driven over the Chrome DevTools Protocol (tier d), with websocket-client only.

Started with its own temporary profile on a free loopback debugging port and stopped by its PID."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from base64 import b64decode
from pathlib import Path
from subprocess import Popen

from comfyui_host import stop_process_group

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
START_TIMEOUT_S = 60


def find_chromium() -> str | None:
    explicit = os.environ.get("H3KIT_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


class Chromium:
    def __init__(self, binary: str, width: int = 1600, height: int = 1000):
        import websocket  # test extra; imported here so collection works without it

        self.profile = Path(tempfile.mkdtemp(prefix="h3kit-chromium-"))
        self.process = Popen(
            [
                binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
                "--remote-allow-origins=*", f"--window-size={width},{height}", "about:blank",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        port = self._debug_port()
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=120, suppress_origin=True)
        self._ids = itertools.count(1)
        self.events: list[dict] = []
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _debug_port(self) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(f"chromium exited with {self.process.returncode} during start")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.2)
        raise BrowserError(f"chromium did not open a debugging port within {START_TIMEOUT_S} s")

    def send(self, method: str, params: dict | None = None) -> dict:
        msg_id = next(self._ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expression: str, timeout_s: float = 60):
        """Value of a JS expression (awaited when it is a promise); page exceptions raise BrowserError."""
        result = self.send("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True, "timeout": int(timeout_s * 1000),
        })
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"page error: {text}")
        return result["result"].get("value")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def wait_for(self, expression: str, timeout_s: float = 60, what: str = "") -> object:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise BrowserError(f"timed out after {timeout_s} s waiting for {what or expression}")

    def screenshot(self, path: Path, fmt: str = "png") -> Path:
        data = self.send("Page.captureScreenshot", {"format": fmt})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        found = []
        for event in self.events:
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(event["params"]["exceptionDetails"].get("text", "exception"))
            elif event.get("method") == "Runtime.consoleAPICalled" and event["params"].get("type") == "error":
                found.append(" ".join(str(a.get("value", a.get("description", ""))) for a in event["params"]["args"]))
        return found

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            stop_process_group(self.process)
            shutil.rmtree(self.profile, ignore_errors=True)
