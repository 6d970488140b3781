"""adapters/comfy_client.py, the one ComfyUI client, against local fake servers on 127.0.0.1: timeouts and
deadlines, same-origin redirects, size caps, safe names, websocket frame cap, and the exit codes it carries
(the README's numbers: 3 timeout, 4 unreachable)."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from h3kit.adapters import comfy_client as cc
from h3kit.checks.problem import printable
from hypothesis import given
from hypothesis import strategies as st


class Fake:
    """A loopback HTTP server whose GET answers come from `routes[path]` (a function of the handler)."""

    def __init__(self, routes: dict):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                route = routes.get(self.path.split("?")[0])
                if route is None:
                    return send(self, 404, b"{}")
                route(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def send(handler, status: int, body: bytes, headers: dict | None = None) -> None:
    handler.send_response(status)
    for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def fake():
    servers = []

    def make(routes):
        servers.append(Fake(routes))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


# --- addresses and names ------------------------------------------------------------------------

@pytest.mark.parametrize("given, url", [("127.0.0.1:8188", "http://127.0.0.1:8188"),
                                        ("http://host:8188/", "http://host:8188"),
                                        ("https://a.example/comfy/", "https://a.example/comfy")])
def test_server_address_without_scheme_gets_http(given, url):
    assert cc.normalise_server(given) == url


@pytest.mark.parametrize("given", ["ftp://host", "http://", "http://h:99999", "http://h/?x=1", "file:///etc"])
def test_bad_server_address_is_refused_as_invalid_input(given):
    with pytest.raises(cc.BadServerURL) as info:
        cc.normalise_server(given)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("value", ["../../../x", "/abs", "a/b", "..", "", 7, None, "x" * 200, "a\\b", "a\x00b"])
def test_server_prompt_id_must_be_a_plain_identifier(value):
    with pytest.raises(cc.BadResponse):
        cc.safe_id(value)


def test_uuid_prompt_ids_pass():
    assert cc.safe_id("9d0f9c3e-5b0a-4a52-9a0e-2d5f0b1c7a11") == "9d0f9c3e-5b0a-4a52-9a0e-2d5f0b1c7a11"


@pytest.mark.parametrize("name, expected", [("../../etc/passwd", "passwd"), ("..\\..\\win.ini", "win.ini"),
                                            (".bashrc", "_bashrc"), ("a\x1b[31m.mp4", "a_[31m.mp4"),
                                            ("sub/dir/v 1.mp4", "v 1.mp4")])
def test_server_file_names_become_plain_basenames(name, expected):
    assert cc.safe_basename(name) == expected


@pytest.mark.parametrize("name", ["", ".", "..", "a/..", 5, None, "a\x00.mp4"])
def test_server_file_names_that_name_nothing_are_refused(name):
    with pytest.raises(cc.BadResponse):
        cc.safe_basename(name)


def test_long_server_file_name_is_shortened_keeping_its_extension():
    name = cc.safe_basename("é" * 300 + ".mp4")
    assert len(name.encode()) <= 200 and name.endswith(".mp4")


@given(st.one_of(st.text(max_size=300), st.integers(), st.none()))
def test_any_server_file_name_is_a_plain_basename_or_refused(name):
    try:
        base = cc.safe_basename(name)
    except cc.BadResponse:
        return
    assert base not in ("", ".", "..") and not base.startswith(".") and len(base.encode()) <= 200
    assert "/" not in base and "\\" not in base and printable(base) == base


@given(st.text(max_size=200))
def test_any_server_id_is_a_plain_identifier_or_refused(value):
    try:
        ident = cc.safe_id(value)
    except cc.BadResponse:
        return
    assert ident == value and "/" not in ident and "\\" not in ident and ".." not in ident


@given(st.text(max_size=100))
def test_any_server_address_is_normalised_or_refused_as_invalid(text):
    try:
        url = cc.normalise_server(text)
    except cc.BadServerURL as exc:
        assert exc.exit_code == 2
        return
    assert url.startswith(("http://", "https://")) and cc.origin(url)[1]


def test_control_characters_from_a_server_are_not_printed():
    assert printable("ok\x1b[2J\x07\u202egnp.exe") == "ok\\x1b[2J\\x07\\u202egnp.exe"  # visible, never sent


# --- transport ----------------------------------------------------------------------------------

def test_unreachable_server_carries_exit_code_4():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(cc.Unreachable) as info:
        cc.ComfyClient(f"127.0.0.1:{port}").get_json("/system_stats")
    assert info.value.exit_code == 4 and "cannot reach ComfyUI" in str(info.value)


def test_silent_server_times_out_with_exit_code_3():
    with socket.socket() as listener:  # accepts the connection, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = cc.ComfyClient(f"127.0.0.1:{listener.getsockname()[1]}", read_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(cc.TimedOut) as info:
            client.get_json("/system_stats")
    assert info.value.exit_code == 3 and time.monotonic() - started < 5


def test_a_trickling_body_is_cut_at_the_deadline(fake):
    def trickle(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        for _ in range(1000):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)

    server = fake({"/history": trickle})
    client = cc.ComfyClient(server.url, read_timeout=30, deadline=cc.Deadline(1.0))
    started = time.monotonic()
    with pytest.raises(cc.TimedOut):
        client.get_json("/history")
    assert time.monotonic() - started < 3  # the read timeout (30 s) alone would wait for all 100 s


def test_json_larger_than_the_cap_is_refused(fake):
    server = fake({"/history": lambda h: send(h, 200, b"[" + b"0," * 5000 + b"0]")})
    with pytest.raises(cc.BadResponse, match="limit"):
        cc.ComfyClient(server.url).get_json("/history", cap=1000)


def test_declared_length_over_the_cap_is_refused_before_reading(fake):
    def huge(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(10**12))
        handler.end_headers()

    server = fake({"/view": huge})
    with pytest.raises(cc.BadResponse, match="over the limit"):
        cc.ComfyClient(server.url).get_json("/view", cap=10**6)


def test_deeply_nested_json_is_a_bad_response_not_a_crash(fake):
    server = fake({"/history": lambda h: send(h, 200, b"[" * 100000 + b"]" * 100000)})
    with pytest.raises(cc.BadResponse):
        cc.ComfyClient(server.url).get_json("/history")


def test_redirect_within_the_server_is_followed(fake):
    server = fake({"/old": lambda h: send(h, 302, b"", {"Location": "/new"}),
                   "/new": lambda h: send(h, 200, b'{"ok": true}')})
    assert cc.ComfyClient(server.url).get_json("/old") == {"ok": True}


def test_redirect_to_another_origin_is_refused(fake):
    other = fake({"/x": lambda h: send(h, 200, b'{"stolen": true}')})
    server = fake({"/view": lambda h: send(h, 302, b"", {"Location": other.url.replace("127.0.0.1", "localhost") + "/x"})})
    with pytest.raises(cc.BadResponse, match="another origin"):
        cc.ComfyClient(server.url).get_json("/view")


def test_download_stays_in_its_folder_and_never_overwrites(fake, tmp_path):
    server = fake({"/view": lambda h: send(h, 200, b"video")})
    out = tmp_path / "out"
    out.mkdir()
    (out / "evil.mp4").write_bytes(b"mine")
    path = cc.ComfyClient(server.url).download({"filename": "../../evil.mp4"}, out, "../../evil.mp4")
    assert path == out / "evil-1.mp4" and path.read_bytes() == b"video"
    assert (out / "evil.mp4").read_bytes() == b"mine" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_download_over_the_cap_leaves_no_file(fake, tmp_path):
    server = fake({"/view": lambda h: send(h, 200, b"x" * 5000)})
    with pytest.raises(cc.BadResponse):
        cc.ComfyClient(server.url).download({"filename": "a.mp4"}, tmp_path, "a.mp4", cap=1000)
    assert list(tmp_path.iterdir()) == []


# --- websocket ----------------------------------------------------------------------------------

def _ws_server(frame: bytes) -> tuple[socket.socket, str]:
    """A one-shot websocket server: handshake, then `frame` raw."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(4096)
        key = next(line.split(b":", 1)[1].strip() for line in request.split(b"\r\n")
                   if line.lower().startswith(b"sec-websocket-key"))
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n" + frame)
        time.sleep(2)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener, f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_websocket_event_is_read():
    payload = json.dumps({"type": "progress", "data": {"value": 1, "max": 3}}).encode()
    listener, url = _ws_server(bytes([0x81, len(payload)]) + payload)
    with listener:
        ws = cc.ComfyClient(url).websocket("c1")
        assert ws.recv_event(2.0) == {"type": "progress", "data": {"value": 1, "max": 3}}
        ws.close()


def test_websocket_frame_over_the_cap_is_refused_before_its_payload():
    listener, url = _ws_server(bytes([0x81, 127]) + struct.pack("!Q", 400 * 1024 * 1024))
    with listener:
        ws = cc.ComfyClient(url).websocket("c1")
        with pytest.raises(cc.BadResponse, match="websocket message"):
            ws.recv_event(2.0)
        ws.close()


def test_websocket_message_split_into_small_frames_is_capped_as_a_whole():
    piece = b"x" * 1000
    frames = bytes([0x01, 126]) + struct.pack("!H", 1000) + piece  # text, not final
    frames += (bytes([0x00, 126]) + struct.pack("!H", 1000) + piece) * 20  # continuation frames
    listener, url = _ws_server(frames)
    with listener:
        ws = cc.ComfyClient(url).websocket("c1", cap=5000)
        with pytest.raises(cc.BadResponse, match="websocket message"):
            ws.recv_event(2.0)
        ws.close()
