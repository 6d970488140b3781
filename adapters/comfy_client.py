"""The one ComfyUI HTTP + websocket client (requests + websocket-client), used by `run`, `cond build`,
`validate --server`, `doctor --server` and the tier-b test harness.

What a server can do to us is bounded here, once:
- every call has a connect and a read timeout, and every exchange (a request with its whole answer, one
  download, one websocket message) a total time: MAX_ANSWER_S, the download time a caller allows, and the
  client's `Deadline` when one is set. When the time is up the socket is shut down (`_Watch`), so a server
  that trickles one byte a second, in its headers or its body, is cut off then, not when it finishes;
- redirects are followed only to the same origin (scheme, host, port); anything else is refused;
- JSON bodies and downloads are streamed with a byte cap; downloads go straight to disk through the
  atomic writer (adapters/files.py), never into memory; uploads stream from disk (MultipartUpload);
- a JSON answer builds at most MAX_JSON_VALUES values (/object_info: MAX_OBJECT_INFO_VALUES), counted in its
  bytes before it is parsed (adapters/bounded_json.py), and is parsed under the client's deadline;
- websocket frames larger than the cap are refused before their payload is read;
- ids and names the server chooses (prompt_id, filenames, subfolders) pass `safe_id` / `safe_basename`
  before they touch a path.
Errors are `ComfyError`s carrying the documented exit code (checks/facts.py): unreachable 4, timeout 3,
anything else the server did wrong 1.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from re import compile as regex
from typing import Any

from ..checks.deadline import Deadline as TimeBudget
from ..checks.deadline import OutOfTime
from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_TIMEOUT, EXIT_UNREACHABLE
from ..checks.problem import printable
from . import bounded_json
from .files import WINDOWS_RESERVED_NAMES, name_problem, write_new

CONNECT_TIMEOUT_S = 10.0
SERVER_CHECK_TIMEOUT_S = 60.0  # validate --server, doctor --server: their whole exchange (--timeout)
READ_TIMEOUT_S = 60.0  # one socket read
MAX_ANSWER_S = 300.0  # one JSON answer, headers and body (a 96 MiB /object_info at 1 MB/s takes 100 s)
MAX_WS_MESSAGE_S = 30.0  # one websocket message, once its first byte arrived
MAX_TRANSFER_S = 3600.0  # the output files of one job, or one upload, when no --timeout is given
MAX_JSON_BYTES = 32 * 1024 * 1024  # /history, /queue, /prompt answers (one prompt's entry is kilobytes)
MAX_OBJECT_INFO_BYTES = 96 * 1024 * 1024  # a host with many node packs answers 5-30 MB
# Values an answer may build when parsed (bounded_json.count_values, counted before parsing): bytes alone do not bound
# memory (a 95 MiB /object_info of `[]` took 3.5 GiB). The real ComfyUI 0.33.0 /object_info (866 node types, H3Kit
# installed; 1,566,053 bytes, measured 2026-12-02) counts 162,941: 9.6 bytes a value. MAX_OBJECT_INFO_VALUES is 25
# times that (a 38 MB answer of that density); /queue holds every queued prompt's graph, /history/<id> one.
MAX_OBJECT_INFO_VALUES = 4_000_000
MAX_JSON_VALUES = 2_000_000
MAX_DOWNLOAD_BYTES = 16 * 1024**3  # one output file; run --max-download overrides
MAX_WS_MESSAGE_BYTES = 8 * 1024 * 1024  # progress/status events are small; previews are binary and skipped
MAX_REDIRECTS = 5
CHUNK = 256 * 1024
SAFE_ID = regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
REDIRECT_CODES = {301, 302, 303, 307, 308}


class ComfyError(RuntimeError):
    """Something between us and the server went wrong; `exit_code` is the documented status."""

    exit_code = EXIT_FAILED


class Unreachable(ComfyError):
    exit_code = EXIT_UNREACHABLE


class TimedOut(ComfyError, OutOfTime):
    exit_code = EXIT_TIMEOUT


class BadServerURL(ComfyError, ValueError):
    exit_code = EXIT_INVALID


class BadResponse(ComfyError):
    """The server answered something we refuse: too large, not JSON, a foreign redirect, an unsafe name."""


class TooLarge(BadResponse):
    """An answer or download over its byte cap."""


class HTTPStatusError(ComfyError):
    def __init__(self, status: int, body: Any, url: str):
        super().__init__(f"HTTP {status} from {url}: {printable(body, 300)}")
        self.status, self.body = status, body


# --------------------------------------------------------------------------------------- names and URLs
def normalise_server(url: str) -> str:
    """'127.0.0.1:8188' -> 'http://127.0.0.1:8188'; only http(s), a host, no query: else BadServerURL."""
    text = str(url).strip()
    shown = printable(url, 100)
    if not text or printable(text) != text or " " in text:
        raise BadServerURL(f"'{shown}' is not a ComfyUI address; give http://HOST:PORT (e.g. http://127.0.0.1:8188)")
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise BadServerURL(f"'{shown}' is not a ComfyUI address ({exc}); give http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadServerURL(f"'{shown}' is not a ComfyUI address; give http://HOST:PORT (e.g. http://127.0.0.1:8188)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise BadServerURL(f"'{shown}': give the server's base URL without credentials or '?'/'#' parts")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def safe_id(value: Any, what: str = "prompt_id") -> str:
    """A server-chosen id used as an identifier (and possibly a folder name): letters, digits, . _ -,
    at most 128 characters, never '.', '..' or a path. Anything else is a BadResponse."""
    if isinstance(value, str) and SAFE_ID.fullmatch(value) and ".." not in value:
        return value
    raise BadResponse(f"the server sent {what} {printable(repr(value), 80)}, which is not a plain identifier; "
                      "refusing to use it")


_UNSAFE_NAME_CHARS = regex(r"[^\w .()+,=@\[\]-]")


def safe_basename(name: Any, what: str = "filename") -> str:
    """The last path component of a server-chosen file name, with anything unsafe replaced: it can only
    name a file inside the folder we chose. Empty, '.', '..' or non-text names are a BadResponse."""
    if not isinstance(name, str) or "\x00" in name:
        raise BadResponse(f"the server sent {what} {printable(repr(name), 80)}, which is not a file name")
    base = re.split(r"[\\/]", name)[-1].strip()
    base = _UNSAFE_NAME_CHARS.sub("_", base)  # control and separator characters too: never \\w
    if base in ("", ".", ".."):
        raise BadResponse(f"the server sent {what} {printable(repr(name), 80)}, which names no file")
    if base.startswith("."):
        base = "_" + base[1:]
    stem, dot, suffix = base.rpartition(".")
    if len(base.encode()) > 200:  # file systems allow 255 bytes; leave room for -1, -2 ... suffixes
        keep = suffix[:16] if dot else ""
        base = (stem if dot else base).encode()[:180].decode(errors="ignore") + (f".{keep}" if keep else "")
    base = base.rstrip(" .")  # Windows drops them: 'a.png.' would become another file's name
    if base.split(".")[0].rstrip(" ").upper() in WINDOWS_RESERVED_NAMES:
        base = "_" + base  # 'CON', 'nul.png', 'COM1.mp4' name devices on Windows, not files
    if name_problem(base) is not None:
        raise BadResponse(f"the server sent {what} {printable(repr(name), 80)}, which names no file")
    return base


def root_reason(exc: BaseException) -> str:
    """The operating system's words for a failed connection ('Connection refused', 'Name or service not
    known') from under the requests/urllib3 wrappers; their full text when there is none."""
    stack, seen = [exc], set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return printable(current.strerror, 200)
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        stack.extend(item for item in linked if isinstance(item, BaseException))
    return printable(exc, 200)


# ------------------------------------------------------------------------------------------- the client
class Deadline(TimeBudget):
    """checks.deadline.Deadline whose expiry, in an exchange or in CPU work under `applied()`, is TimedOut (exit 3)."""

    error = TimedOut


class _Watch:
    """Ends one exchange at a wall-clock time by shutting its socket down, so that a read blocked anywhere
    below us (requests, urllib3, http.client, websocket-client) returns at once. Socket timeouts alone bound
    each read, not the sum: a server sending one byte a second never trips them."""

    def __init__(self, ends_at: float, because_deadline: bool):
        self.started, self.ends_at, self.because_deadline = time.monotonic(), ends_at, because_deadline
        self.fired = False
        self._socket: Callable[[], Any] | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def arm(self, get_socket: Callable[[], Any]) -> None:
        """Watch the socket `get_socket()` returns (looked up when the time is up: it may not exist yet)."""
        with self._lock:
            self._socket = get_socket
            if self._timer is None:
                self._timer = threading.Timer(max(self.ends_at - time.monotonic(), 0.0), self._fire)
                self._timer.daemon = True
                self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            sock = self._socket() if self._socket is not None else None
            if sock is None:
                return
            self.fired = True
            with contextlib.suppress(OSError):  # already closed: nothing left to stop
                sock.shutdown(socket.SHUT_RDWR)

    def disarm(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._socket = None


_CURRENT = threading.local()  # the _Watch of the exchange this thread is starting (read by the connections)


def _watched_connection(base: type) -> type:
    """urllib3's connection class, reporting its socket to the current exchange's _Watch before it sends a
    request and before it reads the answer's headers."""

    class Watched(base):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            watch = getattr(_CURRENT, "watch", None)
            if watch is not None:  # a new connection has no socket yet: look it up when the time is up
                watch.arm(lambda: getattr(self, "sock", None))
            return super().request(*args, **kwargs)

        def getresponse(self, *args: Any, **kwargs: Any) -> Any:
            watch, sock = getattr(_CURRENT, "watch", None), getattr(self, "sock", None)
            if watch is not None and sock is not None:  # this socket: http.client drops self.sock when the
                watch.arm(lambda: sock)  # answer says "close", and the body is still read from it
            return super().getresponse(*args, **kwargs)

    return Watched


@lru_cache(maxsize=1)
def _watched_adapter() -> type:
    """requests' HTTPAdapter whose connection pools make _watched_connection()s (built once, on first use)."""
    from requests.adapters import HTTPAdapter
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class HTTPPool(HTTPConnectionPool):
        ConnectionCls = _watched_connection(HTTPConnectionPool.ConnectionCls)

    class HTTPSPool(HTTPSConnectionPool):
        ConnectionCls = _watched_connection(HTTPSConnectionPool.ConnectionCls)

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": HTTPPool, "https": HTTPSPool}

    return Adapter


def _watched_session():
    """A requests session whose connections report their sockets to the current _Watch."""
    import requests

    session = requests.Session()
    session.trust_env = False  # a proxy from the environment must not see or redirect local traffic
    for prefix in ("http://", "https://"):
        session.mount(prefix, _watched_adapter()())
    return session


class ComfyClient:
    def __init__(self, server: str, connect_timeout: float = CONNECT_TIMEOUT_S,
                 read_timeout: float = READ_TIMEOUT_S, deadline: Deadline | None = None):
        self.server = normalise_server(server)
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.deadline = deadline or Deadline(None)
        self.session = _watched_session()

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> ComfyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- low level
    def _timeouts(self) -> tuple[float, float]:
        if self.deadline.expired():
            raise TimedOut(f"the time limit ran out before asking {self.server}")
        return self.deadline.cap(self.connect_timeout), self.deadline.cap(self.read_timeout)

    def _watch_for(self, seconds: float) -> _Watch:
        """A _Watch ending `seconds` from now, or at the deadline when that comes first."""
        ends_at = time.monotonic() + max(seconds, 0.0)
        by_deadline = self.deadline.end is not None and self.deadline.end <= ends_at
        return _Watch(self.deadline.end if by_deadline else ends_at, by_deadline)

    def _cut_off(self, watch: _Watch, what: str, received: int | None = None) -> TimedOut:
        so_far = f" ({received:,} bytes so far)" if received is not None else ""
        if watch.because_deadline:
            return TimedOut(f"{what}: the time limit ran out while receiving{so_far}")
        return TimedOut(f"{what}: no complete answer within the {watch.ends_at - watch.started:.0f} s allowed for "
                        f"it{so_far}; the server sends too slowly")

    @contextlib.contextmanager
    def _exchange(self, method: str, route: str, seconds: float | None = None, **kwargs: Any) -> Iterator[Any]:
        """One request and its answer, streaming, all within `seconds` (default MAX_ANSWER_S) and the deadline;
        closed on exit."""
        watch = self._watch_for(MAX_ANSWER_S if seconds is None else seconds)
        try:
            with self._send(method, route, watch, **kwargs) as response:
                response.h3kit_watch = watch
                yield response
        finally:
            watch.disarm()
            if watch.fired:  # the cut connection must not go back to the pool
                self.session.close()
                self.session = _watched_session()

    def _send(self, method: str, route: str, watch: _Watch, **kwargs: Any):
        """One request with same-origin redirects only; returns the streaming response (caller closes it)."""
        import requests

        url = self.server + route
        for _ in range(MAX_REDIRECTS + 1):
            _CURRENT.watch = watch
            try:
                response = self.session.request(method, url, stream=True, allow_redirects=False,
                                                timeout=self._timeouts(), **kwargs)
            except requests.exceptions.RequestException as exc:
                if watch.fired:
                    raise self._cut_off(watch, f"{self.server}{route}") from exc
                raise self._request_error(route, exc) from exc
            finally:
                _CURRENT.watch = None
            if response.status_code not in REDIRECT_CODES:
                return response
            location = response.headers.get("Location", "")
            response.close()
            target = urllib.parse.urljoin(url, location)
            if origin(target) != origin(self.server):
                raise BadResponse(f"{self.server}{route} redirects to {printable(target, 200)}, another origin; "
                                  "refused (only redirects within the server's own address are followed)")
            url = target
            if response.status_code == 303:
                method, kwargs = "GET", {k: v for k, v in kwargs.items() if k not in ("data", "json", "files")}
        raise BadResponse(f"{self.server}{route}: more than {MAX_REDIRECTS} redirects")

    def _request_error(self, route: str, exc: Exception) -> ComfyError:
        import requests

        if isinstance(exc, requests.exceptions.ConnectTimeout):
            return Unreachable(f"cannot reach ComfyUI at {self.server}: no answer to the connection within "
                               f"{self.connect_timeout:g} s. Is the server running?")
        if isinstance(exc, requests.exceptions.Timeout):
            return TimedOut(f"{self.server}{route} did not answer in time")
        if isinstance(exc, requests.exceptions.ConnectionError):
            return Unreachable(f"cannot reach ComfyUI at {self.server}: {root_reason(exc)}. "
                               "Is the server running, and is the address right?")
        return BadResponse(f"{self.server}{route}: {printable(exc, 200)}")

    def _chunks(self, response, cap: int, what: str) -> Iterator[bytes]:
        """The body in chunks, total <= cap, within the exchange's time (a cut-off raises TimedOut)."""
        watch = response.h3kit_watch
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > cap:
            raise TooLarge(f"{what} is {int(declared):,} bytes, over the limit of {cap:,}")
        raw, total = response.raw, 0
        read = getattr(raw, "read1", None) or raw.read  # read1: what has arrived, not a loop until CHUNK bytes
        while True:
            try:
                chunk = read(CHUNK, decode_content=True)
            except Exception as exc:  # noqa: BLE001 - urllib3/socket errors mid-body all mean the same here
                if watch.fired:
                    raise self._cut_off(watch, what, total) from exc
                if "timed out" in str(exc).lower():
                    raise TimedOut(f"{what}: the server stopped sending (timeout)") from exc
                raise Unreachable(f"{what}: the connection broke: {printable(exc, 200)}") from exc
            if watch.fired:  # the cut socket reads as the end of a body without a length
                raise self._cut_off(watch, what, total)
            if not chunk:
                return
            total += len(chunk)
            if total > cap:
                raise TooLarge(f"{what} is larger than the limit of {cap:,} bytes; refused")
            yield chunk

    def _body(self, response, cap: int, what: str) -> bytearray:
        body = bytearray()  # grown in place: never the chunks and their join at once
        for chunk in self._chunks(response, cap, what):
            body += chunk
        return body

    def _parse(self, raw: bytes | bytearray, what: str, max_values: int = MAX_JSON_VALUES) -> Any:
        """The body as JSON within the pack's JSON bounds (values built, nesting, digits, UTF-8:
        adapters/bounded_json.py), parsed under the client's deadline."""
        if not raw:
            return None
        try:
            with self.deadline.applied():
                return bounded_json.loads(raw, what, max_values=max_values)
        except bounded_json.JSONLimitError as exc:
            raise BadResponse(printable(exc, 300)) from exc

    @staticmethod
    def _error_body(raw: bytes | bytearray) -> Any:
        try:
            return bounded_json.loads(raw, "the error body") if raw else None
        except bounded_json.JSONLimitError:
            return raw.decode("utf-8", errors="replace")

    # -- API
    def get_json(self, route: str, params: Mapping[str, Any] | None = None, cap: int = MAX_JSON_BYTES,
                 max_values: int = MAX_JSON_VALUES) -> Any:
        """GET route -> parsed JSON (at most `cap` bytes building at most `max_values` values). HTTP errors raise
        HTTPStatusError."""
        what = f"{self.server}{route}"
        with self._exchange("GET", route, params=params) as response:
            raw = self._body(response, cap, what)
        if response.status_code >= 400:
            raise HTTPStatusError(response.status_code, self._error_body(raw), what)
        return self._parse(raw, what, max_values)

    def object_info(self) -> dict:
        info = self.get_json("/object_info", cap=MAX_OBJECT_INFO_BYTES, max_values=MAX_OBJECT_INFO_VALUES)
        if not isinstance(info, dict):
            raise BadResponse(f"{self.server}/object_info is not a JSON object")
        return info

    def post_json(self, route: str, payload: Any, cap: int = MAX_JSON_BYTES) -> tuple[int, Any]:
        """POST JSON -> (HTTP status, parsed body or text). 4xx/5xx are returned, not raised: the caller
        reads ComfyUI's node_errors from them."""
        with self._exchange("POST", route, json=payload) as response:
            raw = self._body(response, cap, f"{self.server}{route}")
        return response.status_code, self._error_body(raw)

    def upload(self, path: Path, folder_type: str = "input", subfolder: str = "") -> dict:
        """POST /upload/image (ComfyUI's upload route for any input file: it stores the bytes as sent, under a new
        name when another file holds this one) -> {name, subfolder, type}. The file is streamed from disk
        (MultipartUpload): memory does not grow with its size."""
        fields = {"type": folder_type, **({"subfolder": subfolder} if subfolder else {})}
        body = MultipartUpload(fields, "image", Path(path))
        with self._exchange("POST", "/upload/image", MAX_TRANSFER_S, data=body,
                            headers={"Content-Type": body.content_type}) as response:
            raw = self._body(response, MAX_JSON_BYTES, f"{self.server}/upload/image")
        body = self._error_body(raw)
        if response.status_code >= 400 or not isinstance(body, dict):
            raise HTTPStatusError(response.status_code, body, self.server + "/upload/image")
        return body

    def download(self, params: Mapping[str, Any], folder: Path, name: str, cap: int = MAX_DOWNLOAD_BYTES,
                 seconds: float | None = None) -> Path:
        """GET /view?params streamed into folder/<safe name> (a free name: never overwrites), atomically, within
        `seconds` (and the deadline)."""
        local = safe_basename(name)
        with self._exchange("GET", "/view", MAX_TRANSFER_S if seconds is None else seconds, params=params) as response:
            if response.status_code >= 400:
                body = self._body(response, 64 * 1024, "/view error")
                raise HTTPStatusError(response.status_code, self._error_body(body), self.server + "/view")
            return write_new(folder, local, self._chunks(response, cap, f"{self.server}/view ({local})"))

    # -- websocket
    def ws_url(self, client_id: str) -> str:
        parts = urllib.parse.urlsplit(self.server)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path + "/ws",
                                        urllib.parse.urlencode({"clientId": client_id}), ""))

    def websocket(self, client_id: str | None = None, cap: int = MAX_WS_MESSAGE_BYTES) -> EventSocket:
        """An open /ws connection (raises ComfyError when it cannot be opened)."""
        return EventSocket(self.ws_url(client_id or uuid.uuid4().hex), self.deadline.cap(self.connect_timeout), cap)


class MultipartUpload:
    """A multipart/form-data body of text fields and one file, read from disk CHUNK bytes at a time as it is sent.
    requests sends an iterable that has a length as it is, under that Content-Length; given `files=` it would build
    the whole body in memory first (a 5 GiB upload took 5 GiB). Iterating again starts again from the file's first
    byte, so a same-origin 307/308 redirect sends it whole. The file must keep its size while it is sent."""

    def __init__(self, fields: Mapping[str, str], file_field: str, path: Path):
        from urllib3.fields import RequestField

        self.path, self.size = path, path.stat().st_size
        boundary = uuid.uuid4().hex
        self.content_type = f"multipart/form-data; boundary={boundary}"
        parts = []
        for name, value in fields.items():
            field = RequestField(name=name, data=value)
            field.make_multipart()
            parts.append(f"--{boundary}\r\n".encode() + field.render_headers().encode() + str(value).encode() + b"\r\n")
        file_part = RequestField(name=file_field, data=b"", filename=path.name)
        file_part.make_multipart(content_type="application/octet-stream")
        self.head = b"".join(parts) + f"--{boundary}\r\n".encode() + file_part.render_headers().encode()
        self.tail = f"\r\n--{boundary}--\r\n".encode()

    def __len__(self) -> int:
        return len(self.head) + self.size + len(self.tail)

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        sent = 0
        with open(self.path, "rb") as handle:
            while sent < self.size:
                chunk = handle.read(min(CHUNK, self.size - sent))
                if not chunk:
                    raise ComfyError(f"{self.path} shrank while it was uploaded ({sent:,} of {self.size:,} bytes "
                                     "sent); upload it again once nothing writes to it")
                sent += len(chunk)
                yield chunk
        yield self.tail


class EventSocket:
    """ComfyUI's /ws stream: JSON text events in, binary preview frames skipped, every frame size-capped, the
    handshake within the connect timeout and each message within MAX_WS_MESSAGE_S of the wait (a _Watch)."""

    def __init__(self, url: str, connect_timeout: float, cap: int = MAX_WS_MESSAGE_BYTES):
        try:
            import websocket
        except ImportError:
            raise ComfyError("websocket-client is not installed (pip install websocket-client)") from None
        # UTF-8 is checked by bounded_json's decoder (C); websocket-client's own check runs in Python, byte by byte
        # (about 1.4 MB/s here: 6 s of CPU for one 8 MiB message)
        self.ws = websocket.WebSocket(enable_multithread=False, skip_utf8_validation=True)
        self.last_bytes = 0  # the size of the last text message received (what keeping its event costs)
        watch = _Watch(time.monotonic() + connect_timeout, False)
        watch.arm(lambda: self.ws.sock)
        try:
            self.ws.connect(url, timeout=connect_timeout)
        except (OSError, websocket.WebSocketException) as exc:
            status = getattr(exc, "status_code", None)
            reason = ("the handshake did not finish in time" if watch.fired else
                      f"the handshake answered HTTP {status}" if status else printable(exc, 200))
            self.ws.close()
            raise Unreachable(f"websocket {url.split('?')[0]}: {reason}") from exc
        finally:
            watch.disarm()
        _cap_frames(self.ws, cap)

    def recv_event(self, wait_s: float) -> dict | None:
        """The next JSON event, or None when none came within wait_s (or it was a binary/unusable frame).
        Raises ComfyError when the socket is closed, a frame is over the cap, or a message that began
        arriving is not complete MAX_WS_MESSAGE_S later."""
        import websocket

        wait_s = max(wait_s, 0.01)
        self.ws.settimeout(wait_s)
        watch = _Watch(time.monotonic() + wait_s + MAX_WS_MESSAGE_S, False)
        watch.arm(lambda: self.ws.sock)
        try:
            opcode, data = self.ws.recv_data()
        except websocket.WebSocketTimeoutException:
            return None
        except FrameTooLarge as exc:
            raise BadResponse(str(exc)) from exc
        except (OSError, websocket.WebSocketException) as exc:
            if watch.fired:
                raise BadResponse(f"a websocket message did not arrive whole within {MAX_WS_MESSAGE_S:.0f} s "
                                  "(the server sends too slowly)") from exc
            raise Unreachable(f"websocket closed: {printable(exc, 200)}") from exc
        finally:
            watch.disarm()
        if opcode != websocket.ABNF.OPCODE_TEXT:
            return None
        self.last_bytes = len(data)
        try:
            event = bounded_json.loads(data, "a websocket event")
        except bounded_json.JSONLimitError:
            return None  # a malformed event carries nothing we need: /history is polled anyway
        return event if isinstance(event, dict) else None

    def close(self) -> None:
        self.ws.close()


class FrameTooLarge(ComfyError):
    pass


def _cap_frames(ws: Any, cap: int) -> None:
    """Refuse a frame, or a message of continuation frames, whose announced length is over `cap` before
    its payload is read.

    websocket-client has no size option; its frame reader reads the length field in `recv_length`, and
    this wraps that one method of this connection's reader (websocket-client 1.x)."""
    buffer = getattr(ws, "frame_buffer", None)
    original = getattr(buffer, "recv_length", None)
    if original is None:
        raise BadResponse("this websocket-client version has no frame reader to cap; "
                          "install websocket-client >= 1.6")
    message = {"bytes": 0}

    def recv_length() -> None:
        original()
        fin, opcode = buffer.header[0], buffer.header[4]
        if opcode < 0x8:  # data frames add up to one message; control frames (ping, close) stand alone
            message["bytes"] += buffer.length
        size = max(buffer.length, message["bytes"] if opcode < 0x8 else 0)
        if size > cap:
            raise FrameTooLarge(f"the server sent a websocket message of {size:,} bytes (limit {cap:,}); refused")
        if fin and opcode < 0x8:
            message["bytes"] = 0

    buffer.recv_length = recv_length
