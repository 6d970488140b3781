"""A working fake ComfyUI for the pipelined runner's tier-(a) tests (issue 32): it queues prompts and "runs" them one
at a time (a sleep), lists outputs in /history, serves files through /view, stores /upload/image files with ComfyUI
0.33.0's naming rules (server.py image_upload: a taken name becomes "name (1).ext" unless the bytes are the same), and
can be killed mid-job. tests/fake_comfy.py is the hostile one; this one behaves.

What a job writes is a test's `render(server, prompt_id, graph) -> outputs` (default: a draft for a graph with
H3KitSaveDraft, a video for one with SaveVideo); `refuse(graph) -> error text or None` plays /prompt validation.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DRAFT_UI_KEY = "h3kit_drafts"


def draft_bytes(graph: dict) -> bytes:
    """What the fake's H3KitSaveDraft writes: the stage-1 graph's seeds and prompt, so a test can tell drafts apart."""
    seeds = {nid: node["inputs"].get("noise_seed") for nid, node in graph.items() if "noise_seed" in node["inputs"]}
    prompts = {nid: node["inputs"].get("prompt") for nid, node in graph.items()
               if isinstance(node["inputs"].get("prompt"), str)}
    return json.dumps({"seeds": seeds, "prompts": prompts}, sort_keys=True).encode()


class WorkingComfy:
    def __init__(self, object_info: dict, delay: float = 0.2, name: str = "fake"):
        self.object_info, self.delay, self.name = object_info, delay, name
        self.files: dict[tuple[str, str, str], bytes] = {}  # (type, subfolder, filename) -> bytes
        self.prompts: dict[str, dict] = {}  # prompt id -> graph
        self.history: dict[str, dict] = {}
        self.runs: list[tuple[str, float, float]] = []  # (prompt id, start, end) in monotonic seconds
        self.uploads: list[tuple[str, str, bytes]] = []  # (subfolder, stored name, bytes)
        self.pending: list[str] = []
        self.running: str | None = None
        self.refuse: Callable[[dict], str | None] = lambda graph: None
        self.render: Callable[[WorkingComfy, str, dict], dict] = default_render
        self.fail_execution: Callable[[dict], str | None] = lambda graph: None
        self.forget: Callable[[dict], bool] = lambda graph: False  # the job vanishes (a restart): "lost"
        self.upload_status: int | None = None  # answer /upload/image with this status instead
        self.lock = threading.Condition()
        self.alive = True
        self.count = 0
        self.connections: set = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one_request(self) -> None:
                fake.connections.add(self.connection)  # kill() cuts kept-alive connections too
                if not fake.alive:
                    self.close_connection = True
                    return
                super().handle_one_request()

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                route, query = parts.path, parse_qs(parts.query)
                if route == "/system_stats":
                    return fake.send(self, {"system": {"comfyui_version": "0.34.0"}, "devices": []})
                if route == "/object_info":
                    return fake.send(self, fake.object_info)
                if route == "/queue":
                    with fake.lock:
                        running = [[0, fake.running]] if fake.running else []
                        pending = [[i + 1, pid] for i, pid in enumerate(fake.pending)]
                    return fake.send(self, {"queue_running": running, "queue_pending": pending})
                if route.startswith("/history/"):
                    pid = route.removeprefix("/history/")
                    with fake.lock:
                        entry = fake.history.get(pid)
                    return fake.send(self, {pid: entry} if entry else {})
                if route == "/view":
                    key = tuple(query.get(k, [d])[0] for k, d in (("type", "output"), ("subfolder", ""), ("filename", "")))
                    data = fake.files.get(key)
                    return fake.send(self, data, 200 if data is not None else 404, raw=True)
                fake.send(self, {}, 404)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/prompt":
                    return fake.send(self, *fake.queue_prompt(json.loads(body)["prompt"]))
                if self.path == "/upload/image":
                    return fake.send(self, *fake.upload(self.headers.get("Content-Type", ""), body))
                fake.send(self, {}, 404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        threading.Thread(target=self.executor, daemon=True).start()

    # -- HTTP
    def send(self, handler: BaseHTTPRequestHandler, answer: Any, status: int = 200, raw: bool = False) -> None:
        data = (answer or b"") if raw else json.dumps(answer).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def queue_prompt(self, graph: dict) -> tuple[dict, int]:
        why = self.refuse(graph)
        if why:
            return {"error": {"message": why}, "node_errors": {}}, 400
        with self.lock:
            self.count += 1
            pid = f"{self.name}-p{self.count}"
            self.prompts[pid] = graph
            self.pending.append(pid)
            self.lock.notify_all()
        return {"prompt_id": pid, "number": self.count, "node_errors": {}}, 200

    def upload(self, content_type: str, body: bytes) -> tuple[dict, int]:
        if self.upload_status is not None:
            return {"error": "refused"}, self.upload_status
        message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        fields, name, data = {}, None, b""
        for part in message.iter_parts():
            key = part.get_param("name", header="content-disposition")
            if part.get_filename():
                name, data = part.get_filename(), part.get_payload(decode=True)
            else:
                fields[key] = part.get_payload(decode=True).decode()
        sub, folder = fields.get("subfolder", ""), fields.get("type", "input")
        stem, dot, ext = name.rpartition(".")
        stored, i = name, 1
        while (folder, sub, stored) in self.files and self.files[(folder, sub, stored)] != data:
            stored, i = f"{stem} ({i}).{ext}", i + 1
        self.files[(folder, sub, stored)] = data
        self.uploads.append((sub, stored, data))
        return {"name": stored, "subfolder": sub, "type": folder}, 200

    # -- execution
    def executor(self) -> None:
        while True:
            with self.lock:
                while not self.pending or not self.alive:
                    self.lock.wait(0.1)
                pid = self.pending.pop(0)
                self.running = pid
                graph = self.prompts[pid]
            start = time.monotonic()
            time.sleep(self.delay)
            if not self.alive:
                return
            if self.forget(graph):
                with self.lock:
                    self.running = None
                continue
            failure = self.fail_execution(graph)
            outputs = {} if failure else self.render(self, pid, graph)
            end = time.monotonic()
            stamp = int(time.time() * 1000)
            status = "error" if failure else "success"
            messages = [["execution_start", {"prompt_id": pid, "timestamp": stamp - int(self.delay * 1000)}],
                        ["execution_cached", {"nodes": [], "prompt_id": pid, "timestamp": stamp}]]
            messages.append(["execution_error", {"prompt_id": pid, "node_id": "1", "node_type": "X",
                                                 "exception_type": "RuntimeError", "exception_message": failure}]
                            if failure else ["execution_success", {"prompt_id": pid, "timestamp": stamp}])
            with self.lock:
                self.runs.append((pid, start, end))
                self.history[pid] = {"status": {"status_str": status, "completed": not failure, "messages": messages},
                                     "outputs": outputs}
                self.running = None

    def kill(self) -> None:
        """The server vanishes: every connection is refused from now on, the running job never finishes."""
        self.alive = False
        self.server.shutdown()
        self.server.server_close()
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self.alive:
            self.kill()


def default_render(server: WorkingComfy, prompt_id: str, graph: dict) -> dict:
    outputs = {}
    for nid, node in graph.items():
        if node["class_type"] == "H3KitSaveDraft":
            name = f"draft_{prompt_id}.safetensors"
            server.files[("output", "h3kit_drafts", name)] = draft_bytes(graph)
            outputs[nid] = {DRAFT_UI_KEY: [{"filename": name, "subfolder": "h3kit_drafts", "type": "output"}]}
        elif node["class_type"] == "SaveVideo":
            name = f"clip_{prompt_id}.mp4"
            draft = node_draft(server, graph)
            server.files[("output", "h3kit", name)] = b"video of " + draft
            outputs[nid] = {"images": [{"filename": name, "subfolder": "h3kit", "type": "output"}]}
    return outputs


def node_draft(server: WorkingComfy, graph: dict) -> bytes:
    """The bytes of the draft the graph's H3KitLoadDraft names (as the real node reads it from input/)."""
    for node in graph.values():
        if node["class_type"] == "H3KitLoadDraft":
            sub, _, name = node["inputs"]["draft"].rpartition("/")
            return server.files.get(("input", sub, name), b"missing draft " + node["inputs"]["draft"].encode())
    return b"no draft"
