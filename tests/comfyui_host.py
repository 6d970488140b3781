"""A real ComfyUI server for tier (b): started on a free loopback port from COMFYUI_DIR with this pack
linked into a temporary base directory's custom_nodes, and stopped by its PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from h3kit.adapters.comfy_client import ComfyClient, ComfyError

PACK_ROOT = Path(__file__).resolve().parent.parent
PACK_LINK_NAME = "H3Kit"
START_TIMEOUT_S = 180


def stop_process_group(process: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM the process group started with start_new_session=True; SIGKILL it after `grace_s`."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ComfyUIServer:
    def __init__(self, comfyui_dir: Path, python: str):
        self.comfyui_dir = comfyui_dir
        self.python = python
        self.base_dir = Path(tempfile.mkdtemp(prefix="h3kit-comfyui-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.base_dir / "server.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        for sub in ("custom_nodes", "input", "output", "temp", "user", "models"):
            (self.base_dir / sub).mkdir(exist_ok=True)
        (self.base_dir / "custom_nodes" / PACK_LINK_NAME).symlink_to(PACK_ROOT, target_is_directory=True)
        cmd = [
            self.python, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(self.port),
            "--base-directory", str(self.base_dir), "--disable-auto-launch",
            "--database-url", "sqlite:///:memory:",
        ]
        log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        self.process = subprocess.Popen(
            cmd, cwd=self.comfyui_dir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ComfyUI exited with {self.process.returncode} during start:\n{self.log()[-4000:]}")
            try:
                self.get("/system_stats", timeout=2)
                return
            except ComfyError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"ComfyUI did not answer within {START_TIMEOUT_S} s:\n{self.log()[-4000:]}")

    def stop(self) -> None:
        if self.process:
            stop_process_group(self.process, grace_s=20)
        if getattr(self, "_log_file", None):
            self._log_file.close()

    def cleanup(self) -> None:
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, timeout: float = 30) -> ComfyClient:
        """The pack's own HTTP client (adapters/comfy_client.py) pointed at this server."""
        return ComfyClient(self.url, connect_timeout=timeout, read_timeout=timeout)

    def get(self, route: str, timeout: float = 30) -> object:
        with self.client(timeout) as client:
            return client.get_json(route)

    def post(self, route: str, payload: dict, timeout: float = 30) -> tuple[int, object]:
        with self.client(timeout) as client:
            return client.post_json(route, payload)

    def object_info(self) -> dict:
        with self.client() as client:
            return client.object_info()

    def submit(self, graph: dict) -> tuple[int, dict]:
        return self.post("/prompt", {"prompt": graph, "client_id": uuid.uuid4().hex})

    def run_graph(self, graph: dict, timeout: float = 300) -> dict:
        """Queue `graph`, wait until its history entry completes, return that entry."""
        status, body = self.submit(graph)
        if status != 200:
            raise AssertionError(f"/prompt rejected the graph ({status}): {json.dumps(body, indent=1)[:3000]}")
        prompt_id = body["prompt_id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            entry = self.get(f"/history/{prompt_id}").get(prompt_id)
            if entry and entry.get("status", {}).get("completed") is not None:
                if entry["status"].get("status_str") in ("success", "error"):
                    return entry
            time.sleep(0.3)
        raise AssertionError(f"prompt {prompt_id} did not finish within {timeout} s:\n{self.log()[-3000:]}")

    def output_path(self, file_info: dict) -> Path:
        return self.base_dir / file_info.get("type", "output") / file_info.get("subfolder", "") / file_info["filename"]


def comfyui_dir_or_reason() -> tuple[Path | None, str]:
    raw = os.environ.get("COMFYUI_DIR")
    if not raw:
        return None, "COMFYUI_DIR is not set: tier (b) needs a ComfyUI checkout (see README, 'Tests against a real ComfyUI')"
    path = Path(raw).expanduser().resolve()
    if not (path / "main.py").is_file():
        return None, f"COMFYUI_DIR={raw} has no main.py: point it at a ComfyUI checkout"
    return path, ""


def comfyui_python() -> str:
    return os.environ.get("COMFYUI_PYTHON", sys.executable)
