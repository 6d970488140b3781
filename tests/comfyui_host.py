"""Real ComfyUI servers for tier (b)/(d): every host in COMFYUI_DIRS (or COMFYUI_DIR), each started on a free
loopback port with this pack linked into a temporary base directory's custom_nodes, and stopped by its PID.

Hosts are configuration, not code: tests ask a started server for a *capability* (a node it serves, the
layout of an input) and skip when it is missing, never for a version string. See docs/testing.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from re import compile as regex
from subprocess import Popen

import pytest
from h3kit.adapters.comfy_client import ComfyClient, ComfyError

PACK_ROOT = Path(__file__).resolve().parent.parent
PACK_LINK_NAME = "H3Kit"
# test-only nodes (stand-ins for what a test cannot load at real size), never part of the pack
STANDINS_DIR = Path(__file__).resolve().parent / "comfyui_standins"
STANDINS_LINK_NAME = "H3KitTestStandIns"
START_TIMEOUT_S = 420  # the installable 0.12.1 host needs 2-3 min on 2 loaded cores
LAUNCH_MAIN = "main"        # python main.py --base-directory ... (Comfy-Org layout)
LAUNCH_CONSOLE = "console"  # python -m comfy.cmd.main (installable layout; its main.py ignores --base-directory)

# Capabilities, each read from the running server's /object_info (never from its version string).
NATIVE_H3 = "native MiniMax-H3 nodes"
LTXAV = "the LTX-2 audio-video model (LTXAV) nodes"
_NODES_OF = {
    NATIVE_H3: ("MiniMaxH3ImageToVideo",),
    # the audio VAE loader exists only where the AV model does; the other two run stage 2
    LTXAV: ("LTXVAudioVAELoader", "LTXVLatentUpsampler", "LatentUpscaleModelLoader"),
}


def stop_process_group(process: Popen, grace_s: float = 10) -> None:
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


@dataclass(frozen=True)
class HostSpec:
    """One configured ComfyUI checkout and how to start it."""

    index: int
    comfyui_dir: Path
    python: str
    launch: str
    duplicate: bool = False  # another configured host has the same version: the test id adds the index
    tag: str = ""  # H3KIT_HOST_TAG_<n>: what tells two checkouts of one version apart (fork-commit)

    @property
    def name(self) -> str:
        """The test id: "comfyui-<the version this checkout serves>" (+ "-<tag>", or "#<n>" when two hosts share
        a version and have no tag)."""
        suffix = f"-{self.tag}" if self.tag else f"#{self.index}" if self.duplicate else ""
        return f"comfyui-{self.version}{suffix}"

    @property
    def version(self) -> str:
        return checkout_version(self.comfyui_dir) or f"unknown-{self.comfyui_dir.name}"

    def command(self, port: int, base_dir: Path) -> list[str]:
        entry = ["main.py"] if self.launch == LAUNCH_MAIN else ["-m", "comfy.cmd.main"]
        return [
            self.python, *entry, "--cpu", "--listen", "127.0.0.1", "--port", str(port),
            "--base-directory", str(base_dir), "--disable-auto-launch", "--database-url", "sqlite:///:memory:",
        ]


@dataclass(frozen=True)
class FrontendHost(HostSpec):
    """A configured host, optionally serving another frontend (--front-end-root)."""

    front_end_root: str | None = None

    def command(self, port: int, base_dir: Path) -> list[str]:
        extra = ["--front-end-root", self.front_end_root] if self.front_end_root else []
        return super().command(port, base_dir) + extra

    @property
    def label(self) -> str:
        return f"{self.name}-{'frontend-' + Path(self.front_end_root).name if self.front_end_root else 'own-frontend'}"


_VERSION_LINE = regex(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def checkout_version(comfyui_dir: Path) -> str | None:
    """The version string the server will serve as system_stats' comfyui_version, read from the checkout without
    starting it: comfyui_version.py (Comfy-Org) or comfy/__init__.py (the installable fork). The started server is
    checked against it (ComfyUIServer.start)."""
    for relative in ("comfyui_version.py", "comfy/__init__.py"):
        path = comfyui_dir / relative
        if path.is_file():
            found = _VERSION_LINE.search(path.read_text(errors="replace"))
            if found:
                return found.group(1)
    return None


def _default_launch(comfyui_dir: Path) -> str:
    """The installable layout (comfy/cmd/main.py) must be started as a module to honour --base-directory."""
    return LAUNCH_CONSOLE if (comfyui_dir / "comfy" / "cmd" / "main.py").is_file() else LAUNCH_MAIN


def configured_hosts(env: dict[str, str] | None = None) -> tuple[list[HostSpec], str]:
    """The hosts named by COMFYUI_DIRS (os.pathsep-separated) or COMFYUI_DIR, or ([], why none)."""
    env = os.environ if env is None else env
    raw = env.get("COMFYUI_DIRS") or env.get("COMFYUI_DIR")
    if not raw:
        return [], ("COMFYUI_DIRS / COMFYUI_DIR is not set: tier (b) needs a ComfyUI checkout "
                    "(see docs/testing.md)")
    hosts = []
    for index, entry in enumerate(part for part in raw.split(os.pathsep) if part.strip()):
        path = Path(entry).expanduser().resolve()
        if not (path / "main.py").is_file():
            return [], f"{entry} (in COMFYUI_DIRS/COMFYUI_DIR) has no main.py: point it at a ComfyUI checkout"
        python = env.get(f"H3KIT_HOST_PYTHON_{index}") or (
            env.get("COMFYUI_PYTHON") if index == 0 and not env.get("COMFYUI_DIRS") else None) or sys.executable
        launch = env.get(f"H3KIT_HOST_LAUNCH_{index}") or _default_launch(path)
        if launch not in (LAUNCH_MAIN, LAUNCH_CONSOLE):
            return [], f"H3KIT_HOST_LAUNCH_{index}={launch!r}: use {LAUNCH_MAIN!r} or {LAUNCH_CONSOLE!r}"
        hosts.append(HostSpec(index, path, python, launch, tag=env.get(f"H3KIT_HOST_TAG_{index}", "")))
    versions = [h.version for h in hosts]
    hosts = [HostSpec(h.index, h.comfyui_dir, h.python, h.launch, versions.count(h.version) > 1, h.tag)
             for h in hosts]
    return hosts, ""


def host_params() -> list[HostSpec | None]:
    """Parameters for a fixture that runs a probe in each host's own Python (no server): one per configured host,
    or [None] so that the fixture skips with the reason (host_checkout)."""
    return configured_hosts()[0] or [None]


def host_id(host: HostSpec | None) -> str:
    return host.name if host else "no-host"


def host_checkout(host: HostSpec | None) -> tuple[str, str]:
    """(checkout folder, its Python) of a host_params() parameter; skips when no host is configured."""
    if host is None:
        pytest.skip(configured_hosts()[1])
    return str(host.comfyui_dir), host.python


class ComfyUIServer:
    def __init__(self, host: HostSpec, with_pack: bool = True):
        """`with_pack` False: the host alone, as the oracle of what ComfyUI itself accepts."""
        self.host = host
        self.with_pack = with_pack
        self.comfyui_dir = host.comfyui_dir
        self.python = host.python
        self.base_dir = Path(tempfile.mkdtemp(prefix=f"h3kit-{host.name}-"))
        self.models_dir = self.base_dir / "models"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.base_dir / "server.log"
        self.process: Popen | None = None
        self._object_info: dict | None = None  # for capabilities only

    def start(self) -> None:
        for sub in ("custom_nodes", "input", "output", "temp", "user", "models"):
            (self.base_dir / sub).mkdir(exist_ok=True)
        if self.with_pack:
            (self.base_dir / "custom_nodes" / PACK_LINK_NAME).symlink_to(PACK_ROOT, target_is_directory=True)
            (self.base_dir / "custom_nodes" / STANDINS_LINK_NAME).symlink_to(STANDINS_DIR, target_is_directory=True)
        log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self._log_file = log
        self.process = Popen(
            self.host.command(self.port, self.base_dir), cwd=self.comfyui_dir, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ComfyUI exited with {self.process.returncode} during start:\n{self.log()[-4000:]}")
            try:
                stats = self.get("/system_stats", timeout=2)
            except ComfyError:
                time.sleep(0.5)
                continue
            self._check_served_version(stats)
            return
        self.stop()
        raise RuntimeError(f"ComfyUI did not answer within {START_TIMEOUT_S} s:\n{self.log()[-4000:]}")

    def _check_served_version(self, stats: object) -> None:
        """The test ids name the checkout's version: a server that serves another one would mislabel every result."""
        served = stats.get("system", {}).get("comfyui_version") if isinstance(stats, dict) else None
        if served != self.host.version:
            self.stop()
            raise RuntimeError(f"{self.comfyui_dir} serves ComfyUI {served!r}, but its checkout says "
                               f"{self.host.version!r} (the test id): is COMFYUI_DIRS pointing at another install?")

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
        """The served node schemas, read now (file combos change as tests add files)."""
        with self.client(120) as client:  # a large host (600+ nodes) takes seconds on a loaded machine
            return client.object_info()

    def served(self) -> dict:
        """/object_info read once: node classes and input layouts do not change while the server runs (file
        lists do: read `object_info()` for those)."""
        if self._object_info is None:
            self._object_info = self.object_info()
        return self._object_info

    def has(self, capability: str) -> bool:
        info = self.served()
        if capability in _NODES_OF:
            return all(node in info for node in _NODES_OF[capability])
        raise ValueError(f"unknown capability {capability!r}")

    def require(self, *capabilities: str) -> None:
        """Skip the calling test, naming the host and what it lacks, unless the server has every capability."""
        missing = [c for c in capabilities if not self.has(c)]
        if missing:
            pytest.skip(f"{self.host.name} lacks {', '.join(missing)}")

    def submit(self, graph: dict) -> tuple[int, dict]:
        return self.post("/prompt", {"prompt": graph, "client_id": uuid.uuid4().hex})

    def run_graph(self, graph: dict, timeout: float = 300) -> dict:
        """Queue `graph`, wait until its history entry completes, return that entry.

        The structured execution errors (node_id, node_type, exception_message) are taken from the /ws events
        of this prompt and stored under entry["ws_errors"]: hosts keep different amounts of them in /history
        (Comfy-Org: [event, body] pairs; the installable fork: "event: message" strings only)."""
        client_id = uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        with self.client() as client:
            events = client.websocket(client_id)
            try:
                status, body = client.post_json("/prompt", {"prompt": graph, "client_id": client_id})
                if status != 200:
                    raise AssertionError(f"/prompt rejected the graph ({status}): {json.dumps(body, indent=1)[:3000]}")
                prompt_id = body["prompt_id"]
                ws_errors = self._wait_for_prompt_events(events, prompt_id, deadline)
            finally:
                events.close()
        while time.monotonic() < deadline:
            entry = self.get(f"/history/{prompt_id}").get(prompt_id)
            if entry and entry.get("status", {}).get("status_str") in ("success", "error"):
                entry["ws_errors"] = ws_errors
                return entry
            time.sleep(0.3)
        raise AssertionError(f"prompt {prompt_id} did not finish within {timeout} s:\n{self.log()[-3000:]}")

    @staticmethod
    def _wait_for_prompt_events(events, prompt_id: str, deadline: float) -> list[dict]:
        """Read /ws until the prompt ends (success, error, or interruption); return its execution_error bodies."""
        errors: list[dict] = []
        while time.monotonic() < deadline:
            message = events.recv_event(deadline - time.monotonic())
            data = (message or {}).get("data") or {}
            if not isinstance(data, dict) or data.get("prompt_id") != prompt_id:
                continue
            kind = message.get("type")
            if kind == "execution_error":
                errors.append(data)
            if kind in ("execution_success", "execution_error", "execution_interrupted") or (
                    kind == "executing" and data.get("node") is None):
                break
        return errors

    def output_path(self, file_info: dict) -> Path:
        return self.base_dir / file_info.get("type", "output") / file_info.get("subfolder", "") / file_info["filename"]


def execution_errors(entry: dict) -> list[dict]:
    """The execution_error bodies of a finished prompt ({node_id, node_type, exception_message, ...})."""
    if entry.get("ws_errors"):
        return entry["ws_errors"]
    found = []
    for message in entry.get("status", {}).get("messages", []):
        if isinstance(message, (list, tuple)) and len(message) == 2 and message[0] == "execution_error":
            found.append(message[1])
        elif isinstance(message, str) and message.startswith("execution_error"):
            found.append({"exception_message": message.partition(": ")[2]})
    return found


def execution_error(entry: dict) -> dict:
    """The first execution_error of a prompt that must have failed."""
    errors = execution_errors(entry)
    assert errors, entry.get("status")
    return errors[0]


def combo_options(spec: list) -> list:
    """The options of a served combo input: classic [[...], opts] or V3 ["COMBO", {"options": [...]}]."""
    if isinstance(spec[0], list):
        return spec[0]
    assert spec[0] == "COMBO" and len(spec) > 1, spec
    return spec[1].get("options", [])
