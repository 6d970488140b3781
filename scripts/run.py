"""Run an API-format workflow on ComfyUI over HTTP: validate, submit, follow, download, verify, time.

  python -m h3kit run WORKFLOW --server URL [--set NODE.INPUT=VALUE]... [--seed N|random]
                      [--upload NODE=PATH] [--out DIR] [--cold] [--timeout S] [--runs N]

Validates the graph against the server's /object_info before submitting, follows execution over the
websocket (falls back to /history polling), never gives up while the server still holds the job (F26),
downloads every output through /view and checks each video: frames decode, not black, not one solid
colour; the audio stream is there and not silent (F21); frame count and size are what the graph asks
for (F19, F20). Prints execution time = execution_success - execution_start from /history, the number
of cached nodes, and warns when the run was a cache hit (F17). Several --server: round-robin fan-out of
the same workflow with different seeds.

exit status: 0 ok; 1 execution error, lost job or an output failed verification; 2 rejected by
validation (H3Kit's or the server's); 3 timeout (the job may still be running: the message says so);
4 server unreachable
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .doctor import FAIL, PASS, WARN, Check

EXIT_OK, EXIT_EXEC_ERROR, EXIT_REJECTED, EXIT_TIMEOUT, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
SEED_INPUTS = ("seed", "noise_seed")
UPLOAD_FLAGS = ("image_upload", "audio_upload", "video_upload", "input_files")
UPLOAD_FALLBACK_INPUT = {"LoadImage": "image", "LoadAudio": "audio", "LoadVideo": "file"}
VIDEO_SUFFIXES = {".mp4", ".webm", ".mkv", ".mov", ".avi"}
UNREACHABLE_GRACE_S = 120.0  # consecutive connection failures while following before we call the server gone
POLL_INTERVAL_S = 0.5
MAX_SEED = 2**53 - 1  # JSON-safe and within every core seed widget's max


class Unreachable(RuntimeError):
    pass


class Rejected(RuntimeError):
    pass


# --- HTTP ---------------------------------------------------------------------------------------

class Client:
    """Minimal ComfyUI HTTP client. Connection failures raise Unreachable; HTTP errors raise HTTPError."""

    def __init__(self, server: str, timeout: float = 30.0):
        self.server = server.rstrip("/")
        self.timeout = timeout

    def _open(self, request: urllib.request.Request | str) -> bytes:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError) as exc:
            raise Unreachable(f"cannot reach ComfyUI at {self.server}: {exc}") from exc

    def get_json(self, route: str) -> Any:
        body = self._open(self.server + route)
        return json.loads(body) if body else None

    def get_bytes(self, route: str) -> bytes:
        return self._open(self.server + route)

    def post_json(self, route: str, payload: Any) -> tuple[int, Any]:
        request = urllib.request.Request(self.server + route, data=json.dumps(payload).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            body = self._open(request)
            return 200, (json.loads(body) if body else None)
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw) if raw else None
            except json.JSONDecodeError:
                return err.code, raw.decode(errors="replace")

    def upload(self, path: Path) -> dict:
        """POST /upload/image (ComfyUI's upload route for any input file); returns {name, subfolder, type}."""
        boundary = uuid.uuid4().hex
        data = Path(path).read_bytes()
        parts = [
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{Path(path).name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n",
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"type\"\r\n\r\ninput\r\n".encode(),
            f"--{boundary}--\r\n".encode(),
        ]
        request = urllib.request.Request(self.server + "/upload/image", data=b"".join(parts),
                                         headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        return json.loads(self._open(request))

    def ws_url(self, client_id: str) -> str:
        parts = urllib.parse.urlsplit(self.server)
        scheme = "wss" if parts.scheme == "https" else "ws"
        return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/ws",
                                        f"clientId={client_id}", ""))


# --- graph edits --------------------------------------------------------------------------------

def find_node(graph: dict, ref: str) -> str:
    """A node id from an id or a unique _meta.title."""
    if ref in graph:
        return ref
    titled = [nid for nid, n in graph.items() if isinstance(n, dict) and n.get("_meta", {}).get("title") == ref]
    if len(titled) == 1:
        return titled[0]
    if titled:
        raise Rejected(f"title '{ref}' names {len(titled)} nodes ({', '.join(titled)}); use a node id")
    raise Rejected(f"no node with id or title '{ref}' (ids: {', '.join(list(graph)[:20])})")


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, true/false, lists), else the raw string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_sets(graph: dict, sets: list[str]) -> None:
    for item in sets:
        target, sep, value = item.partition("=")
        ref, dot, input_name = target.partition(".")
        if not sep or not dot or not input_name:
            raise Rejected(f"--set '{item}': expected NODE.INPUT=VALUE (e.g. 12.noise_seed=7)")
        graph[find_node(graph, ref)].setdefault("inputs", {})[input_name] = parse_value(value)


def seed_inputs(graph: dict) -> list[tuple[str, str]]:
    return [(nid, name) for nid, node in graph.items() if isinstance(node, dict)
            for name in SEED_INPUTS if isinstance(node.get("inputs", {}).get(name), int)]


def job_seeds(graph: dict, seed: str | None, runs: int, rng: random.Random) -> list[int | None]:
    """The seed of each job: --seed N gives N, N+1, ...; random gives fresh ones; none keeps the graph's for
    job 0 and offsets the others so fanned-out runs differ."""
    if seed == "random":
        return [rng.randint(0, MAX_SEED) for _ in range(runs)]
    if seed is not None:
        try:
            base = int(seed)
        except ValueError:
            raise Rejected(f"--seed '{seed}': give a whole number or 'random'") from None
        return [base + i for i in range(runs)]
    found = seed_inputs(graph)
    if runs == 1 or not found:
        return [None] * runs
    base = graph[found[0][0]]["inputs"][found[0][1]]
    return [None] + [(base + i) % MAX_SEED for i in range(1, runs)]


def apply_seed(graph: dict, seed: int | None) -> list[str]:
    if seed is None:
        return []
    changed = []
    for nid, name in seed_inputs(graph):
        graph[nid]["inputs"][name] = seed
        changed.append(f"{nid}.{name}")
    return changed


def upload_input_name(object_info: dict, class_type: str) -> str | None:
    info = object_info.get(class_type, {}).get("input", {})
    for name, spec in {**info.get("required", {}), **info.get("optional", {})}.items():
        opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
        if any(opts.get(flag) for flag in UPLOAD_FLAGS):
            return name
    return UPLOAD_FALLBACK_INPUT.get(class_type)


def apply_uploads(client: Client, graph: dict, uploads: list[str], object_info: dict) -> None:
    for item in uploads:
        ref, sep, path = item.partition("=")
        if not sep or not path:
            raise Rejected(f"--upload '{item}': expected NODE=PATH")
        nid = find_node(graph, ref)
        if not Path(path).is_file():
            raise Rejected(f"--upload '{item}': {path} is not a file")
        name = upload_input_name(object_info, graph[nid].get("class_type", ""))
        if name is None:
            raise Rejected(f"--upload '{item}': node {nid} ({graph[nid].get('class_type')}) has no file input")
        saved = client.upload(Path(path))
        value = saved["name"] if not saved.get("subfolder") else f"{saved['subfolder']}/{saved['name']}"
        graph[nid].setdefault("inputs", {})[name] = value
        print(f"uploaded {path} -> input/{value} (node {nid}.{name})")


def validate_for_server(graph: Any, object_info: dict) -> list:
    from . import validate

    problems = validate.validate_graph(graph, object_info)
    if not any(p.severity == "error" for p in problems):
        for rule in validate.graph_rules():
            problems.extend(rule(graph, object_info))
    return problems


# --- following a job ----------------------------------------------------------------------------

@dataclass
class Outcome:
    state: str  # success | error | interrupted | timeout | lost | unreachable
    entry: dict | None = None
    note: str = ""


class Progress:
    """One status line per node and sampler step; rewritten in place on a terminal."""

    def __init__(self, graph: dict, prefix: str = "", stream: Any = None):
        self.graph, self.prefix = graph, prefix
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() and not prefix
        self.last = ""

    def _name(self, node: Any) -> str:
        node = str(node)
        info = self.graph.get(node, {})
        title = info.get("_meta", {}).get("title") if isinstance(info, dict) else None
        return f"{node} {title or info.get('class_type', '?')}" if isinstance(info, dict) else node

    def show(self, text: str) -> None:
        if text == self.last:
            return
        self.last = text
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(f"{self.prefix}{text}\n")
        self.stream.flush()

    def node(self, node: Any) -> None:
        self.show(f"running node {self._name(node)}")

    def step(self, value: int, maximum: int, node: Any) -> None:
        width = 20
        filled = int(width * value / maximum) if maximum else 0
        self.show(f"node {self._name(node)} [{'#' * filled}{'.' * (width - filled)}] step {value}/{maximum}")

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


def history_entry(client: Client, prompt_id: str) -> dict | None:
    body = client.get_json(f"/history/{prompt_id}") or {}
    entry = body.get(prompt_id) if isinstance(body, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("status"), dict):
        status = entry["status"]
        if status.get("completed") is not None or status.get("status_str") in ("success", "error"):
            return entry
    return None


def entry_state(entry: dict) -> str:
    events = {event for event, _ in message_pairs(entry)}
    if "execution_interrupted" in events:
        return "interrupted"
    if entry["status"].get("status_str") == "success" or "execution_success" in events:
        return "success"
    return "error"


def queue_holds(client: Client, prompt_id: str) -> str | None:
    """'running' or 'pending' when the server's queue still holds the job, else None."""
    queue = client.get_json("/queue") or {}
    for state, key in (("running", "queue_running"), ("pending", "queue_pending")):
        for item in queue.get(key, []):
            if isinstance(item, list) and len(item) > 1 and item[1] == prompt_id:
                return state
    return None


class Follower:
    """Waits for one prompt: websocket events when available, /history polling always as the safety net."""

    def __init__(self, client: Client, prompt_id: str, progress: Progress, timeout: float | None):
        self.client, self.prompt_id, self.progress = client, prompt_id, progress
        self.deadline = time.monotonic() + timeout if timeout else None
        self.finished_event: str | None = None
        self.transient_note = ""

    def on_message(self, message: dict) -> None:
        kind, data = message.get("type"), message.get("data") or {}
        if data.get("prompt_id") not in (None, self.prompt_id):
            return
        if kind == "executing" and data.get("node") is not None:
            self.progress.node(data["node"])
        elif kind == "progress":
            self.progress.step(int(data.get("value", 0)), int(data.get("max", 0)), data.get("node"))
        elif kind in ("execution_success", "execution_error", "execution_interrupted"):
            self.finished_event = kind
        elif kind == "executing" and data.get("node") is None and data.get("prompt_id") == self.prompt_id:
            self.finished_event = self.finished_event or "executing_done"

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def poll_once(self) -> dict | None:
        return history_entry(self.client, self.prompt_id)

    def wait(self, ws: Any = None) -> Outcome:
        failing_since: float | None = None
        last_poll = 0.0
        while True:
            if ws is not None:
                ws = self._pump(ws)
            now = time.monotonic()
            if ws is None or self.finished_event or now - last_poll > 5.0:
                last_poll = now
                try:
                    entry = self.poll_once()
                    failing_since = None
                    if entry is not None:
                        return Outcome(entry_state(entry), entry)
                except urllib.error.HTTPError as err:
                    # A proxy in front of ComfyUI may answer 502/504 while the backend renders on (F26).
                    self._note(f"/history answered HTTP {err.code}; the job may still be running, waiting on")
                except Unreachable as exc:
                    failing_since = failing_since or now
                    self._note(f"{exc}; retrying")
                    if now - failing_since > UNREACHABLE_GRACE_S:
                        return Outcome("unreachable", note=f"the server stopped answering for {UNREACHABLE_GRACE_S:.0f} s")
            if self.expired():
                return self._on_timeout()
            if ws is None:
                time.sleep(POLL_INTERVAL_S)

    def _pump(self, ws: Any) -> Any:
        try:
            raw = ws.recv()
        except Exception as exc:  # noqa: BLE001 - websocket timeouts and drops: fall back to polling
            if type(exc).__name__ in ("WebSocketTimeoutException", "TimeoutError", "timeout"):
                return ws
            self._note(f"websocket closed ({type(exc).__name__}); following by /history polling")
            return None
        if isinstance(raw, str):
            try:
                self.on_message(json.loads(raw))
            except json.JSONDecodeError:
                pass  # a malformed text frame carries nothing we need; /history is polled anyway
        return ws

    def _note(self, text: str) -> None:
        if text != self.transient_note:
            self.transient_note = text
            self.progress.show(text)

    def _on_timeout(self) -> Outcome:
        """F26: before giving up, ask the queue; a job the server still holds is not a failure."""
        try:
            entry = self.poll_once()
            if entry is not None:
                return Outcome(entry_state(entry), entry)
            held = queue_holds(self.client, self.prompt_id)
        except (urllib.error.HTTPError, Unreachable) as exc:
            return Outcome("timeout", note=f"stopped waiting; could not ask the server about the job ({exc})")
        if held:
            return Outcome("timeout", note=f"stopped waiting, but the server still holds the job ({held}): it is not "
                           f"a failure; its result will appear at {self.client.server}/history/{self.prompt_id}")
        return Outcome("lost", note="the server neither holds the job nor has a history entry for it "
                       "(restarted or cleared?)")


def open_websocket(client: Client, client_id: str) -> tuple[Any, str]:
    """(socket or None, note). websocket-client is optional: without it we poll /history and say so."""
    try:
        import websocket
    except ImportError:
        return None, "websocket-client is not installed: following by /history polling (pip install websocket-client)"
    try:
        ws = websocket.create_connection(client.ws_url(client_id), timeout=10)
        ws.settimeout(1.0)
        return ws, ""
    except Exception as exc:  # noqa: BLE001 - any connect failure: polling still works
        return None, f"websocket unavailable ({type(exc).__name__}: {exc}); following by /history polling"


# --- results ------------------------------------------------------------------------------------

def message_pairs(entry: dict) -> list[tuple[str, dict]]:
    pairs = []
    for item in entry.get("status", {}).get("messages", []) or []:
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], dict):
            pairs.append((str(item[0]), item[1]))
    return pairs


@dataclass
class Timing:
    seconds: float | None
    cached: list[str] = field(default_factory=list)
    error: dict | None = None


def timing_of(entry: dict) -> Timing:
    """execution_success - execution_start (ms timestamps in /history status messages), cached node ids."""
    stamps: dict[str, float] = {}
    timing = Timing(None)
    for event, data in message_pairs(entry):
        if "timestamp" in data:
            stamps[event] = float(data["timestamp"])
        if event == "execution_cached":
            timing.cached = [str(n) for n in data.get("nodes", [])]
        if event in ("execution_error", "execution_interrupted"):
            timing.error = {"event": event, **data}
    if "execution_start" in stamps and "execution_success" in stamps:
        timing.seconds = (stamps["execution_success"] - stamps["execution_start"]) / 1000.0
    return timing


def cache_checks(graph: dict, timing: Timing) -> list[Check]:
    total = sum(1 for n in graph.values() if isinstance(n, dict))
    shown = f"{timing.seconds:.3f} s" if timing.seconds is not None else "unknown (no start/success timestamps)"
    checks = [Check(PASS, "timing", f"execution time {shown} (execution_success - execution_start, from /history); "
                    f"cached nodes: {len(timing.cached)} of {total}")]
    if total and len(set(timing.cached)) >= total:
        checks.append(Check(WARN, "cache hit", f"all {total} nodes came from ComfyUI's cache: nothing was rendered and "
                            "the time above is not a render time (F17)",
                            "change the seed (--seed random) or an input; compare runs only when cached counts match"))
    return checks


def output_files(entry: dict) -> list[tuple[str, dict]]:
    files = []
    for node_id, ui in (entry.get("outputs") or {}).items():
        if not isinstance(ui, dict):
            continue
        for items in ui.values():
            if isinstance(items, list):
                files += [(str(node_id), item) for item in items if isinstance(item, dict) and item.get("filename")]
    return files


def unique_path(folder: Path, name: str) -> Path:
    """folder/name, or folder/name_1.ext ... when taken: never overwrite a user's file."""
    base = Path(name).name or "output"
    candidate = folder / base
    stem, suffix = Path(base).stem, Path(base).suffix
    n = 1
    while candidate.exists():
        candidate = folder / f"{stem}_{n}{suffix}"
        n += 1
    return candidate


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".h3kit-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def download(client: Client, item: dict, out_dir: Path) -> Path:
    query = urllib.parse.urlencode({"filename": item["filename"], "subfolder": item.get("subfolder", ""),
                                    "type": item.get("type", "output")})
    data = client.get_bytes(f"/view?{query}")
    path = unique_path(out_dir, item["filename"])
    write_atomic(path, data)
    return path


# --- expected output geometry -------------------------------------------------------------------

@dataclass
class Expect:
    width: int | None = None
    height: int | None = None
    frames: int | None = None
    audio: bool | None = None  # True: the graph muxes audio; False: it makes none; None: unknown


def _int(graph: dict, node: dict, name: str) -> int | None:
    from .lints import resolved

    value = resolved(graph, node, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _src(graph: dict, node: dict, name: str) -> tuple[str, int] | None:
    from .validate import is_link

    value = node.get("inputs", {}).get(name)
    return (str(value[0]), int(value[1])) if is_link(value) and str(value[0]) in graph else None


PASSTHROUGH = {"SamplerCustomAdvanced": "latent_image", "SamplerCustom": "latent_image", "KSampler": "latent_image",
               "VAEEncode": "pixels", "VAEDecode": "samples", "VAEDecodeTiled": "samples",
               "H3KitLatentGuard": "latent", "H3KitFrameGuard": "images", "LTXVSeparateAVLatent": "av_latent",
               "LTXVConcatAVLatent": "video_latent"}


def geometry(graph: dict, link: tuple[str, int] | None, depth: int = 0) -> Expect:
    """Pixel width, height and frame count that flow out of a node output (IMAGE or video LATENT)."""
    if link is None or depth > 64:
        return Expect()
    node = graph[link[0]]
    ct = node.get("class_type")
    if ct == "EmptyImage":
        return Expect(_int(graph, node, "width"), _int(graph, node, "height"), _int(graph, node, "batch_size"))
    if ct in ("MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo", "EmptyMiniMaxH3LatentAV",
              "EmptyLTXVLatentVideo", "LTXVImgToVideo"):
        return Expect(_int(graph, node, "width"), _int(graph, node, "height"), _int(graph, node, "length"))
    if ct == "LoadImage":
        return Expect(frames=1)
    if ct == "RepeatImageBatch":
        inner, amount = geometry(graph, _src(graph, node, "image"), depth + 1), _int(graph, node, "amount")
        return Expect(inner.width, inner.height, inner.frames * amount if inner.frames and amount else None)
    if ct == "ImageBatch":
        a, b = (geometry(graph, _src(graph, node, k), depth + 1) for k in ("image1", "image2"))
        return Expect(a.width, a.height, a.frames + b.frames if a.frames and b.frames else None)
    if ct == "ImageScale":
        inner = geometry(graph, _src(graph, node, "image"), depth + 1)
        w, h = _int(graph, node, "width"), _int(graph, node, "height")
        return Expect(w or None, h or None, inner.frames) if w and h else Expect(frames=inner.frames)
    if ct == "LTXVLatentUpsampler":
        inner = geometry(graph, _src(graph, node, "samples"), depth + 1)
        return Expect(inner.width * 2 if inner.width else None, inner.height * 2 if inner.height else None, inner.frames)
    if ct == "H3KitDraftToLTX" and link[1] == 0:
        return _draft_to_ltx(graph, node, depth)
    if ct in PASSTHROUGH:
        return geometry(graph, _src(graph, node, PASSTHROUGH[ct]), depth + 1)
    return Expect()


def _draft_to_ltx(graph: dict, node: dict, depth: int) -> Expect:
    from ..nodes import pipeline_math as pm

    inner = geometry(graph, _src(graph, node, "frames"), depth + 1)
    tw, th = _int(graph, node, "target_width"), _int(graph, node, "target_height")
    policy = node.get("inputs", {}).get("frame_policy", "trim_to_8n_plus_1")
    frames = None
    if inner.frames and policy in pm.FRAME_POLICIES:
        frames = pm.kept_frame_count(inner.frames, policy)
    return Expect(tw // 2 if tw else None, th // 2 if th else None, frames)


AUDIO_MAKERS = {"VAEDecodeAudio", "LoadAudio", "LTXVAudioVAEDecode"}


def expected_video(graph: dict, save_node: str) -> Expect:
    """What a SaveVideo node should have written: size and frames from its image chain, audio if muxed."""
    node = graph.get(save_node, {})
    video = _src(graph, node, "video")
    if video is None or graph[video[0]].get("class_type") != "CreateVideo":
        return Expect()
    create = graph[video[0]]
    expect = geometry(graph, _src(graph, create, "images"))
    makes_audio = any(isinstance(n, dict) and n.get("class_type") in AUDIO_MAKERS for n in graph.values())
    expect.audio = True if _src(graph, create, "audio") else (None if makes_audio else False)
    return expect


# --- video verification -------------------------------------------------------------------------

BLACK_MEAN = 8.0  # 0..255: darker than this on average and ...
BLACK_MAX = 24.0  # ... no pixel brighter than this = a black frame
SOLID_STD = 1.5  # pixel standard deviation below this = one solid colour
STILL_DIFF = 0.5  # mean absolute frame-to-frame difference below this = the same picture
SILENCE_DBFS = -60.0


def video_stats(path: Path) -> dict[str, Any]:
    import av
    import numpy as np

    stats: dict[str, Any] = {"frames": 0, "black": 0, "solid": 0, "still": 0, "width": None, "height": None,
                             "audio_streams": 0, "audio_rms_dbfs": None}
    with av.open(str(path)) as container:
        stats["audio_streams"] = len(container.streams.audio)
        if not container.streams.video:
            return stats
        previous = None
        for frame in container.decode(video=0):
            rgb = frame.to_ndarray(format="rgb24").astype(np.float32)
            stats["width"], stats["height"] = frame.width, frame.height
            stats["frames"] += 1
            stats["black"] += int(rgb.mean() < BLACK_MEAN and rgb.max() < BLACK_MAX)
            stats["solid"] += int(rgb.std() < SOLID_STD)
            if previous is not None:
                stats["still"] += int(np.abs(rgb - previous).mean() < STILL_DIFF)
            previous = rgb
    if stats["audio_streams"]:
        stats["audio_rms_dbfs"] = audio_rms_dbfs(path)
    return stats


def audio_rms_dbfs(path: Path) -> float:
    import av
    import numpy as np

    total, count = 0.0, 0
    with av.open(str(path)) as container:
        for frame in container.decode(audio=0):
            samples = frame.to_ndarray().astype(np.float64)
            if frame.format.name in ("s16", "s16p"):
                samples /= 32768.0
            elif frame.format.name in ("s32", "s32p"):
                samples /= 2147483648.0
            total += float(np.square(samples).sum())
            count += samples.size
    if count == 0:
        return float("-inf")
    rms = (total / count) ** 0.5
    return 20.0 * np.log10(rms) if rms > 0 else float("-inf")


def verify_video(path: Path, expect: Expect) -> list[Check]:
    try:
        stats = video_stats(path)
    except Exception as exc:  # noqa: BLE001 - any decode failure is the finding
        return [Check(FAIL, "video", f"{path.name} does not decode: {type(exc).__name__}: {exc}",
                      "check the server log; the file may be truncated")]
    name, n = path.name, stats["frames"]
    if n == 0:
        return [Check(FAIL, "video", f"{name} has no decodable video frames", "check the server log")]
    checks = []
    if stats["black"] == n:
        checks.append(Check(FAIL, "video", f"{name}: all {n} frames are black (a NaN latent or a broken refine, F10/F01)",
                            "run doctor --server; put H3KitLatentGuard after the sampler to see where it breaks"))
    elif stats["solid"] == n:
        checks.append(Check(FAIL, "video", f"{name}: every frame is one solid colour",
                            "check the sampler output (H3KitLatentGuard) and the VAE"))
    else:
        if stats["black"]:
            checks.append(Check(WARN, "video", f"{name}: {stats['black']} of {n} frames are black", "inspect those frames"))
        still = n > 1 and stats["still"] == n - 1
        checks.append(Check(WARN if still else PASS, "video", f"{name}: {n} frames decode, not black" +
                            ("; but every frame is the same picture (no motion)" if still else ", not constant"),
                            "a still video from a video model means the latent did not move: check the graph"))
    checks += geometry_checks(name, stats, expect)
    checks.append(audio_check(name, stats, expect))
    return checks


def geometry_checks(name: str, stats: dict, expect: Expect) -> list[Check]:
    checks = []
    if expect.width and expect.height:
        got, want = (stats["width"], stats["height"]), (expect.width, expect.height)
        checks.append(Check(PASS, "size", f"{name}: {got[0]}x{got[1]} as the graph asks") if got == want else
                      Check(FAIL, "size", f"{name}: {got[0]}x{got[1]}, but the graph asks for {want[0]}x{want[1]} (F19)",
                            "use sizes on the H3/LTX grids (multiples of 32; two-stage targets of 64)"))
    if expect.frames:
        checks.append(Check(PASS, "frames", f"{name}: {stats['frames']} frames as the graph asks")
                      if stats["frames"] == expect.frames else
                      Check(FAIL, "frames", f"{name}: {stats['frames']} frames, but the graph asks for {expect.frames} "
                            "(F20)", "use lengths on the grid: H3 17k+5, LTX 8n+1"))
    return checks


def audio_check(name: str, stats: dict, expect: Expect) -> Check:
    if not stats["audio_streams"]:
        if expect.audio is False:
            return Check(PASS, "audio", f"{name}: no audio stream (the graph muxes none)")
        why = ("the graph connects audio to CreateVideo" if expect.audio else
               "the graph decodes audio but CreateVideo.audio is not connected")
        return Check(FAIL, "audio", f"{name}: no audio stream, but {why} (F21)",
                     "wire VAEDecodeAudio (or the handoff's audio output) straight into CreateVideo.audio")
    level = stats["audio_rms_dbfs"]
    if level is None or level < SILENCE_DBFS:
        shown = "no samples" if level is None or level == float("-inf") else f"{level:.1f} dBFS"
        return Check(FAIL, "audio", f"{name}: the audio stream is silent ({shown} RMS, floor {SILENCE_DBFS:.0f}) (F21)",
                     "feed the decoded H3 audio (VAEDecodeAudio of the draft latent) into CreateVideo.audio")
    return Check(PASS, "audio", f"{name}: audio present, RMS {level:.1f} dBFS")


# --- one job ------------------------------------------------------------------------------------

@dataclass
class Job:
    server: str
    graph: dict
    seed: int | None
    label: str = ""


def say(label: str, text: str) -> None:
    print(f"{label}{text}", flush=True)


def submit(client: Client, graph: dict, client_id: str) -> str:
    status, body = client.post_json("/prompt", {"prompt": graph, "client_id": client_id})
    if status != 200:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        lines = [f"the server rejected the workflow (HTTP {status}): {error.get('message', body)}"]
        for nid, info in (body.get("node_errors") or {}).items() if isinstance(body, dict) else []:
            for err in info.get("errors", []):
                lines.append(f"  node {nid} ({info.get('class_type')}): {err.get('message')}: {err.get('details')}")
        raise Rejected("\n".join(lines))
    if body.get("node_errors"):
        say("", f"WARN  the server accepted the prompt but drops outputs that failed validation: "
            f"{json.dumps(body['node_errors'])[:500]}")
    return body["prompt_id"]


def run_job(job: Job, args: argparse.Namespace, object_info: dict) -> int:
    label = job.label
    client = Client(job.server)
    changed = apply_seed(job.graph, job.seed)
    if changed:
        say(label, f"seed {job.seed} -> {', '.join(changed)}")
    client_id = uuid.uuid4().hex
    ws, note = open_websocket(client, client_id)
    if note:
        say(label, note)
    try:
        prompt_id = submit(client, job.graph, client_id)
        say(label, f"queued prompt {prompt_id} on {job.server}")
        progress = Progress(job.graph, prefix=label)
        outcome = Follower(client, prompt_id, progress, args.timeout).wait(ws)
        progress.done()
    finally:
        if ws is not None:
            ws.close()
    return report_outcome(client, job, outcome, prompt_id, args)


def report_outcome(client: Client, job: Job, outcome: Outcome, prompt_id: str, args: argparse.Namespace) -> int:
    label = job.label
    if outcome.state == "timeout":
        say(label, f"TIMEOUT after {args.timeout} s: {outcome.note}")
        return EXIT_TIMEOUT
    if outcome.state == "unreachable":
        say(label, f"UNREACHABLE: {outcome.note}; prompt {prompt_id} may still finish: see /history/{prompt_id}")
        return EXIT_UNREACHABLE
    if outcome.state == "lost":
        say(label, f"FAIL  prompt {prompt_id}: {outcome.note}")
        return EXIT_EXEC_ERROR
    timing = timing_of(outcome.entry)
    if outcome.state != "success":
        err = timing.error or {}
        say(label, f"FAIL  execution {outcome.state}: node {err.get('node_id')} ({err.get('node_type')}): "
            f"{err.get('exception_type', '')}: {err.get('exception_message', '').strip()}")
        return EXIT_EXEC_ERROR
    checks = cache_checks(job.graph, timing)
    out_dir = Path(args.out) / prompt_id
    for node_id, item in output_files(outcome.entry):
        try:
            path = download(client, item, out_dir)
        except (urllib.error.HTTPError, Unreachable) as exc:
            checks.append(Check(FAIL, "download", f"{item['filename']}: {exc}", "fetch it from the server's output folder"))
            continue
        checks.append(Check(PASS, "download", f"node {node_id} -> {path}"))
        if path.suffix.lower() in VIDEO_SUFFIXES:
            checks += verify_video(path, expected_video(job.graph, node_id))
    for check in checks:
        say(label, check.line())
    return EXIT_EXEC_ERROR if any(c.status == FAIL for c in checks) else EXIT_OK


# --- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workflow", type=Path, help="API-format workflow JSON")
    parser.add_argument("--server", action="append", required=True,
                        help="ComfyUI URL, e.g. http://127.0.0.1:8188; repeat for round-robin fan-out")
    parser.add_argument("--set", action="append", default=[], metavar="NODE.INPUT=VALUE",
                        help="override an input (NODE = node id or _meta title; VALUE parsed as JSON when it can be)")
    parser.add_argument("--seed", help="N or 'random': set every seed/noise_seed input (job i gets N+i)")
    parser.add_argument("--upload", action="append", default=[], metavar="NODE=PATH",
                        help="upload a file to the server's input folder and point the loader node at it")
    parser.add_argument("--out", default="h3kit-out", help="download folder (a subfolder per prompt id)")
    parser.add_argument("--cold", action="store_true", help="POST /free (unload models, free memory) before each run")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait for a job (default: as long as the server holds it)")
    parser.add_argument("--runs", type=int, default=None,
                        help="number of jobs (default: one per --server); jobs go round-robin over the servers")
    parser.epilog = ("exit status: 0 ok; 1 execution error / lost job / output failed verification; "
                     "2 rejected by validation; 3 timeout (the job may still be running); 4 server unreachable")


def prepare(args: argparse.Namespace) -> tuple[dict, dict[str, dict]]:
    """The edited graph and each server's /object_info; raises Rejected or Unreachable."""
    try:
        graph = json.loads(Path(args.workflow).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise Rejected(f"cannot read {args.workflow}: {exc}") from exc
    if not isinstance(graph, dict):
        raise Rejected(f"{args.workflow} is not an API-format graph")
    apply_sets(graph, args.set)
    infos = {server: Client(server).get_json("/object_info") for server in dict.fromkeys(args.server)}
    return graph, infos


def server_graphs(graph: dict, infos: dict[str, dict], uploads: list[str]) -> dict[str, dict]:
    """One copy of the graph per server, with that server's names for the uploaded files. After uploading,
    the server's /object_info is read again (in place) so its file lists include the new files."""
    graphs = {}
    for server, info in infos.items():
        copy = json.loads(json.dumps(graph))
        if uploads:
            client = Client(server)
            apply_uploads(client, copy, uploads, info)
            infos[server] = client.get_json("/object_info")
        graphs[server] = copy
    return graphs


def run(args: argparse.Namespace) -> int:
    try:
        graph, infos = prepare(args)
        graphs = server_graphs(graph, infos, args.upload)
        for server, info in infos.items():
            problems = validate_for_server(graphs[server], info)
            for p in problems:
                print(f"{server}: {p}")
            if any(p.severity == "error" for p in problems):
                print(f"REJECTED: the workflow does not validate against {server}; nothing was submitted")
                return EXIT_REJECTED
        runs = args.runs or len(args.server)
        if runs < 1:
            raise Rejected(f"--runs {runs}: give at least 1")
        seeds = job_seeds(graph, args.seed, runs, random.Random())
    except Rejected as exc:
        print(f"REJECTED: {exc}")
        return EXIT_REJECTED
    except Unreachable as exc:
        print(f"UNREACHABLE: {exc}")
        return EXIT_UNREACHABLE
    servers = args.server
    jobs = [Job(servers[i % len(servers)], json.loads(json.dumps(graphs[servers[i % len(servers)]])), seeds[i],
                f"[job {i + 1}/{runs}] " if runs > 1 else "") for i in range(runs)]
    return run_jobs(jobs, args, infos)


def run_one_guarded(job: Job, args: argparse.Namespace, infos: dict[str, dict]) -> int:
    try:
        if args.cold:
            status, _ = Client(job.server).post_json("/free", {"unload_models": True, "free_memory": True})
            say(job.label, f"POST /free -> HTTP {status} (models unload before the next prompt)")
        return run_job(job, args, infos[job.server])
    except Rejected as exc:
        say(job.label, f"REJECTED: {exc}")
        return EXIT_REJECTED
    except Unreachable as exc:
        say(job.label, f"UNREACHABLE: {exc}")
        return EXIT_UNREACHABLE


def run_jobs(jobs: list[Job], args: argparse.Namespace, infos: dict[str, dict]) -> int:
    """Each server runs its jobs in order; servers run in parallel. Exit with the worst job's status."""
    by_server: dict[str, list[Job]] = {}
    for job in jobs:
        by_server.setdefault(job.server, []).append(job)
    codes: list[int] = []
    lock = threading.Lock()

    def worker(server_jobs: list[Job]) -> None:
        for job in server_jobs:
            code = run_one_guarded(job, args, infos)
            with lock:
                codes.append(code)

    threads = [threading.Thread(target=worker, args=(js,), daemon=True) for js in by_server.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(codes, default=EXIT_OK)
