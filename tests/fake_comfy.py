"""A scriptable hostile ComfyUI on 127.0.0.1 for the issue-14 server tests and fuzz: every answer (/prompt,
/history, /queue, /view, /ws frames) is set per test, including malformed, huge, slow and redirecting ones. Request
bodies are drained, never kept (an upload of gigabytes costs the fake no memory)."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GRAPH = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
    "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "t"}},
}
OBJECT_INFO = {
    "EmptyImage": {"input": {"required": {"width": ["INT", {}], "height": ["INT", {}], "batch_size": ["INT", {}],
                                          "color": ["INT", {}]}}, "output": ["IMAGE"], "output_node": False},
    "SaveImage": {"input": {"required": {"images": ["IMAGE", {}], "filename_prefix": ["STRING", {}]}},
                  "output": [], "output_node": True},
}
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def history_entry(prompt_id: str = "p1", outputs: Any = None, messages: Any = None, status: str = "success") -> dict:
    """A well-formed finished /history answer for `prompt_id` (the base that tests and the fuzz mutate)."""
    if messages is None:
        messages = [["execution_start", {"prompt_id": prompt_id, "timestamp": 1000}],
                    ["execution_cached", {"nodes": [], "prompt_id": prompt_id, "timestamp": 1001}],
                    ["execution_success", {"prompt_id": prompt_id, "timestamp": 2000}]]
    if outputs is None:
        outputs = {"2": {"images": [{"filename": "t_00001_.png", "subfolder": "", "type": "output"}]}}
    return {prompt_id: {"status": {"status_str": status, "completed": status == "success", "messages": messages},
                        "outputs": outputs}}


def ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One unmasked server frame."""
    head = bytes([0x80 | opcode])
    if len(payload) < 126:
        return head + bytes([len(payload)]) + payload
    if len(payload) < 2**16:
        return head + bytes([126]) + struct.pack("!H", len(payload)) + payload
    return head + bytes([127]) + struct.pack("!Q", len(payload)) + payload


class Body:
    """An HTTP answer: status, headers and the body as chunks (each optionally after `delay` seconds)."""

    def __init__(self, status: int = 200, chunks: bytes | Iterable[bytes] = b"", headers: dict | None = None,
                 delay: float = 0.0, length: bool = True, close: bool = False):
        self.status, self.headers, self.delay, self.close = status, dict(headers or {}), delay, close
        self.chunks = [chunks] if isinstance(chunks, bytes) else chunks
        if length and isinstance(chunks, bytes):
            self.headers.setdefault("Content-Length", str(len(chunks)))


def as_body(answer: Any) -> Body:
    if isinstance(answer, Body):
        return answer
    return Body(200, answer if isinstance(answer, bytes) else json.dumps(answer).encode())


@dataclass
class Posted:
    """What a POST sent: its length, the SHA-256 of the body, the body's first 4 KiB and its Content-Type."""

    length: int
    sha256: str
    head: bytes
    content_type: str


class FakeComfy:
    """Routes answer from attributes a test sets: prompt, history, queue, view, object_info (JSON-able values,
    raw bytes or Body), ws_frames (raw bytes sent after the handshake; None = no websocket route), `uploaded` (the
    /upload/image answer) and `routes` ({path: answer}, asked first: /system_stats by default). Each POST body is
    read in pieces and recorded in `posted` ({path: Posted})."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.reset()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake.calls.append(self.path)
                if self.path.startswith("/ws"):
                    return fake.websocket(self)
                route = self.path.split("?")[0]
                if route in fake.routes:
                    return fake.send(self, fake.routes[route])
                if route == "/object_info":
                    return fake.send(self, fake.object_info)
                if route == "/queue":
                    return fake.send(self, fake.queue)
                if route.startswith("/history/"):
                    return fake.send(self, fake.history(route.removeprefix("/history/")) if callable(fake.history)
                                     else fake.history)
                if route == "/view":
                    return fake.send(self, fake.view)
                fake.send(self, Body(404, b"{}"))

            def do_POST(self) -> None:
                posted = fake.posted[self.path] = fake.receive(self)
                fake.received = posted.length
                fake.calls.append("POST " + self.path)
                route = self.path.split("?")[0]
                if route in fake.post_routes:
                    return fake.send(self, fake.post_routes[route])
                fake.send(self, fake.prompt if route == "/prompt" else fake.uploaded if route == "/upload/image"
                          else {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = quiet_disconnects(self.server.handle_error)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self) -> None:
        self.prompt: Any = {"prompt_id": "p1", "number": 0, "node_errors": {}}
        self.history: Any = history_entry()
        self.queue: Any = {"queue_running": [], "queue_pending": []}
        self.view: Any = Body(200, b"\x89PNG fake image")
        self.object_info: Any = OBJECT_INFO
        self.ws_frames: bytes | Callable[[], Iterable[bytes]] | None = None  # a callable: frames sent as made
        self.post_routes: dict[str, Any] = {}  # {path: answer} for POST routes other than /prompt
        self.received = 0  # bytes of the last request body
        self.routes: dict[str, Any] = {"/system_stats": {"system": {"comfyui_version": "0.34.0"}, "devices": []}}
        self.uploaded: Any = {"name": "uploaded.bin", "subfolder": "", "type": "input"}
        self.posted: dict[str, Posted] = {}
        self.calls.clear()

    @staticmethod
    def receive(handler: BaseHTTPRequestHandler) -> Posted:
        """Read a POST body in pieces (the fake never holds a large one): its length, SHA-256 and first 4 KiB."""
        length, digest, head = 0, hashlib.sha256(), b""
        for piece in body_pieces(handler):
            length += len(piece)
            digest.update(piece)
            head = head if len(head) >= 4096 else (head + piece)[:4096]
        return Posted(length, digest.hexdigest(), head, handler.headers.get("Content-Type", ""))

    def send(self, handler: BaseHTTPRequestHandler, answer: Any) -> None:
        body = as_body(answer() if callable(answer) else answer)  # a callable: a fresh answer per request
        try:
            handler.send_response(body.status)
            for key, value in body.headers.items():
                handler.send_header(key, value)
            if "Content-Length" not in body.headers or body.close:
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            for chunk in body.chunks:
                if body.delay:
                    time.sleep(body.delay)
                handler.wfile.write(chunk)
                handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (caps, deadlines): expected
            handler.close_connection = True

    def websocket(self, handler: BaseHTTPRequestHandler) -> None:
        if self.ws_frames is None:
            return self.send(handler, Body(404, b""))
        key = handler.headers.get("Sec-WebSocket-Key", "").encode()
        accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).decode()
        handler.send_response(101)
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "Upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept)
        handler.end_headers()
        try:
            for frame in self.ws_frames() if callable(self.ws_frames) else [self.ws_frames]:
                handler.wfile.write(frame)
                handler.wfile.flush()
            time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        handler.close_connection = True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def quiet_disconnects(report: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """The server's error report, silent for a client that hung up (caps and deadlines make clients do that)."""
    import sys

    def handle_error(request: Any, address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            report(request, address)
    return handle_error


def body_pieces(handler: BaseHTTPRequestHandler) -> Iterable[bytes]:
    """A request body (Content-Length or chunked) in pieces of at most 1 MiB: the fake never holds a large one."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    continue
                return
            left = size
            while left:
                piece = handler.rfile.read(min(left, 2**20))
                if not piece:
                    return
                left -= len(piece)
                yield piece
            handler.rfile.readline()
    left = int(handler.headers.get("Content-Length", 0) or 0)
    while left > 0:
        piece = handler.rfile.read(min(left, 2**20))
        if not piece:
            return
        left -= len(piece)
        yield piece


def silent_flac_mkv(path: Path, minutes: float) -> Path:
    """A small .mkv: 2 tiny video frames and `minutes` of silent FLAC (compresses to almost nothing)."""
    import av
    import numpy as np

    with av.open(str(path), "w", format="matroska") as box:
        video = box.add_stream("ffv1", rate=1)
        video.width, video.height, video.pix_fmt = 16, 16, "yuv420p"
        audio = box.add_stream("flac", rate=48_000)
        audio.layout = "mono"
        for i in range(2):
            frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), 60 * i + 40, np.uint8), format="rgb24")
            box.mux(video.encode(frame))
        box.mux(video.encode())
        silence = np.zeros((1, 48_000 * 10), np.int16)
        for second in range(0, int(minutes * 60), 10):
            frame = av.AudioFrame.from_ndarray(silence, format="s16", layout="mono")
            frame.sample_rate, frame.pts = 48_000, second * 48_000
            box.mux(audio.encode(frame))
        box.mux(audio.encode())
    return path


def repeat(chunk: bytes, total: int) -> Callable[[], Iterable[bytes]]:
    """`total` bytes as repeated `chunk`s, generated lazily (the server never holds them all)."""
    def chunks() -> Iterable[bytes]:
        sent = 0
        while sent < total:
            piece = chunk[: total - sent]
            sent += len(piece)
            yield piece
    return chunks
