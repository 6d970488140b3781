"""`python -m h3kit run`: output verifier on generated videos, job following against a fake ComfyUI, and
tier (b) end to end against a real ComfyUI."""

from __future__ import annotations

import argparse
import copy
import json
import threading
import wave
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import av
import numpy as np
import pytest
from h3kit.adapters import comfy_jobs
from h3kit.adapters.comfy_client import safe_basename
from h3kit.adapters.files import free_name
from h3kit.checks.expect import Expect, expected_video
from h3kit.checks.graph_edit import GraphEditError, apply_seed, apply_sets, job_seeds
from h3kit.checks.problem import FAIL, PASS, WARN
from h3kit.kernels.mux import read_mp4, verify_video
from h3kit.scripts import run as runmod

# --- generated videos ---------------------------------------------------------------------------


def make_video(path: Path, frames: np.ndarray, audio: np.ndarray | None = None, rate: int = 24,
               sample_rate: int = 16000) -> Path:
    """Write frames [N,H,W,3] uint8 (and mono float audio in [-1, 1]) as h264 + aac mp4."""
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=rate)
        video.width, video.height, video.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        audio_stream = None
        if audio is not None:
            audio_stream = container.add_stream("aac", rate=sample_rate)
            audio_stream.layout = "mono"
        for array in frames:
            for packet in video.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        if audio_stream is not None:
            chunk = 1024
            for start in range(0, len(audio), chunk):
                piece = audio[start:start + chunk].astype(np.float32)[None, :]
                frame = av.AudioFrame.from_ndarray(piece, format="fltp", layout="mono")
                frame.sample_rate, frame.pts, frame.time_base = sample_rate, start, Fraction(1, sample_rate)
                for packet in audio_stream.encode(frame):
                    container.mux(packet)
            for packet in audio_stream.encode():
                container.mux(packet)
    return path


def moving_frames(n: int = 9, size: tuple[int, int] = (64, 64)) -> np.ndarray:
    rng = np.random.default_rng(0)
    base = rng.integers(30, 220, size=(size[1], size[0], 3), dtype=np.uint8)
    return np.stack([np.roll(base, 4 * i, axis=1) for i in range(n)])


def tone(seconds: float = 9 / 24, sample_rate: int = 16000, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return amplitude * np.sin(2 * np.pi * 440 * t)


def statuses(checks, name: str) -> list[str]:
    return [c.status for c in checks if c.name == name]


GOOD = Expect(64, 64, 9, True)


def test_good_video_passes(tmp_path):
    checks = verify_video(make_video(tmp_path / "good.mp4", moving_frames(), tone()), GOOD)
    assert all(c.status == PASS for c in checks), [c.line() for c in checks]
    assert {c.name for c in checks} == {"video", "size", "frames", "audio"}


def test_f10_black_video_fails(tmp_path):
    frames = np.zeros((9, 64, 64, 3), np.uint8)
    checks = verify_video(make_video(tmp_path / "black.mp4", frames, tone()), GOOD)
    assert statuses(checks, "video") == [FAIL] and "black" in checks[0].detail


def test_solid_colour_video_fails(tmp_path):
    frames = np.full((9, 64, 64, 3), 128, np.uint8)
    checks = verify_video(make_video(tmp_path / "grey.mp4", frames, tone()), GOOD)
    assert statuses(checks, "video") == [FAIL] and "solid" in checks[0].detail


def test_still_video_warns(tmp_path):
    frames = np.repeat(moving_frames(1), 9, axis=0)
    checks = verify_video(make_video(tmp_path / "still.mp4", frames, tone()), GOOD)
    assert statuses(checks, "video") == [WARN] and "same picture" in checks[0].detail


def test_f21_silent_audio_fails(tmp_path):
    checks = verify_video(make_video(tmp_path / "silent.mp4", moving_frames(), np.zeros(6000)), GOOD)
    assert statuses(checks, "audio") == [FAIL] and "silent" in checks[-1].detail


def test_f21_missing_audio_stream_fails_when_the_graph_muxes_audio(tmp_path):
    path = make_video(tmp_path / "mute.mp4", moving_frames())
    assert statuses(verify_video(path, GOOD), "audio") == [FAIL]
    assert statuses(verify_video(path, Expect(64, 64, 9, False)), "audio") == [PASS]


def test_f19_f20_wrong_size_and_frame_count_fail(tmp_path):
    path = make_video(tmp_path / "small.mp4", moving_frames(8, (64, 32)), tone())
    checks = verify_video(path, GOOD)
    assert statuses(checks, "size") == [FAIL] and "F19" in [c for c in checks if c.name == "size"][0].detail
    assert statuses(checks, "frames") == [FAIL]


def test_undecodable_file_fails(tmp_path):
    path = tmp_path / "junk.mp4"
    path.write_bytes(b"not a video")
    assert statuses(verify_video(path, GOOD), "video") == [FAIL]


# --- expectations from the graph ----------------------------------------------------------------

def video_graph(audio: bool = True) -> dict:
    graph = {
        "1": {"class_type": "LoadImage", "inputs": {"image": "a.png"}},
        "2": {"class_type": "RepeatImageBatch", "inputs": {"image": ["1", 0], "amount": 10}},
        "3": {"class_type": "H3KitDraftToLTX", "inputs": {"frames": ["2", 0], "target_width": 128,
                                                          "target_height": 128, "frame_policy": "trim_to_8n_plus_1",
                                                          "fit": "cover_crop", "fps": 24.0}},
        "4": {"class_type": "CreateVideo", "inputs": {"images": ["3", 0], "fps": 24.0}},
        "5": {"class_type": "SaveVideo", "inputs": {"video": ["4", 0], "filename_prefix": "h3kit/t",
                                                    "format": "mp4", "codec": "h264"}},
    }
    if audio:
        graph["6"] = {"class_type": "LoadAudio", "inputs": {"audio": "tone.wav"}}
        graph["3"]["inputs"]["audio"] = ["6", 0]
        graph["4"]["inputs"]["audio"] = ["3", 1]
    return graph


def test_expected_geometry_follows_the_handoff():
    assert expected_video(video_graph(), "5") == Expect(64, 64, 9, True)
    assert expected_video(video_graph(audio=False), "5").audio is False


def test_f21_audio_decoded_but_not_muxed_is_expected():
    graph = video_graph()
    del graph["4"]["inputs"]["audio"]
    assert expected_video(graph, "5").audio is None  # decoded, not muxed: a missing stream FAILs


def test_two_stage_geometry_doubles_through_the_upsampler():
    graph = {
        "1": {"class_type": "MiniMaxH3ImageToVideo", "inputs": {"width": 672, "height": 384, "length": 124}},
        "2": {"class_type": "SamplerCustomAdvanced", "inputs": {"latent_image": ["1", 1]}},
        "3": {"class_type": "VAEDecode", "inputs": {"samples": ["2", 0]}},
        "4": {"class_type": "H3KitDraftToLTX", "inputs": {"frames": ["3", 0], "target_width": 1344,
                                                          "target_height": 768}},
        "5": {"class_type": "VAEEncode", "inputs": {"pixels": ["4", 0]}},
        "6": {"class_type": "LTXVLatentUpsampler", "inputs": {"samples": ["5", 0]}},
        "7": {"class_type": "SamplerCustomAdvanced", "inputs": {"latent_image": ["6", 0]}},
        "8": {"class_type": "VAEDecodeTiled", "inputs": {"samples": ["7", 0]}},
        "9": {"class_type": "CreateVideo", "inputs": {"images": ["8", 0], "fps": 24.0}},
        "10": {"class_type": "SaveVideo", "inputs": {"video": ["9", 0]}},
    }
    assert expected_video(graph, "10") == Expect(1344, 768, 121, False)


# --- graph edits --------------------------------------------------------------------------------

def test_set_and_seed_edits():
    graph = {"1": {"class_type": "RandomNoise", "inputs": {"noise_seed": 5}, "_meta": {"title": "noise"}},
             "2": {"class_type": "KSampler", "inputs": {"seed": 5, "steps": 4}}}
    apply_sets(graph, ["noise.noise_seed=9", "2.steps=8", "2.format.codec=h264"])
    assert graph["1"]["inputs"]["noise_seed"] == 9 and graph["2"]["inputs"]["steps"] == 8
    assert graph["2"]["inputs"]["format.codec"] == "h264"
    assert job_seeds(graph, "7", 3, None) == [7, 8, 9]
    assert job_seeds(graph, None, 2, None) == [None, 10]
    apply_seed(graph, 42)
    assert graph["1"]["inputs"]["noise_seed"] == 42 and graph["2"]["inputs"]["seed"] == 42
    with pytest.raises(GraphEditError):
        apply_sets(graph, ["nonode.x=1"])


def test_downloads_never_overwrite_and_never_leave_the_folder(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"mine")
    assert free_name(tmp_path, safe_basename("../a.mp4")) == tmp_path / "a-1.mp4"


def test_timing_and_cache_come_from_websocket_events_when_history_keeps_only_text():
    entry = {"status": {"status_str": "success", "completed": True,
                        "messages": ["execution_start", "execution_cached", "execution_success"]}}
    events = [("execution_start", {"prompt_id": "p", "timestamp": 1000}),
              ("execution_cached", {"prompt_id": "p", "nodes": ["1", "2"], "timestamp": 1001}),
              ("execution_success", {"prompt_id": "p", "timestamp": 3500})]
    timing = comfy_jobs.timing_of(entry, events)
    assert timing.seconds == 2.5 and timing.cached == ["1", "2"]
    error = {"status": {"status_str": "error", "messages": ["execution_error: CUDA out of memory"]}}
    assert comfy_jobs.timing_of(error).error["exception_message"] == "CUDA out of memory"


class _LateSocket:
    """A websocket that delivers a prompt's events only after /history already lists it as finished: the order the
    installable 0.12.1 produced for a full cache hit (it writes the entry, then its event loop sends the messages)."""

    def __init__(self, events: list):
        self.events = list(events)

    def recv_event(self, timeout: float):
        return self.events.pop(0) if self.events else None

    def close(self) -> None:
        pass


class _FinishedHistory:
    server = "http://127.0.0.1:9"

    def get_json(self, route: str) -> dict:
        return {"p": {"status": {"status_str": "success", "completed": True,
                                 "messages": ["execution_start", "execution_cached", "execution_success"]}}}


def test_f17_cached_nodes_are_still_counted_when_history_finishes_before_the_websocket_events():
    from h3kit.adapters.comfy_client import Deadline

    late = _LateSocket([None, {"type": "status", "data": {"status": {}}},
                        {"type": "execution_start", "data": {"prompt_id": "p", "timestamp": 1000}},
                        {"type": "execution_cached", "data": {"prompt_id": "p", "nodes": ["1", "2"], "timestamp": 1001}},
                        {"type": "execution_success", "data": {"prompt_id": "p", "timestamp": 1003}}])
    outcome = comfy_jobs.wait_for_prompt(_FinishedHistory(), "p", comfy_jobs.Listener(), Deadline(30), late)
    timing = comfy_jobs.timing_of(outcome.entry, outcome.events)
    assert outcome.state == "success" and timing.cached == ["1", "2"] and timing.seconds == 0.003
    assert not late.events  # read to the finish event, not further


# --- a fake ComfyUI -----------------------------------------------------------------------------

IMAGE_GRAPH = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 9, "color": 0}},
    "2": {"class_type": "CreateVideo", "inputs": {"images": ["1", 0], "fps": 24.0}},
    "3": {"class_type": "SaveVideo", "inputs": {"video": ["2", 0], "filename_prefix": "t", "format": "mp4",
                                                "codec": "h264"}},
}
FAKE_OBJECT_INFO = {
    "EmptyImage": {"input": {"required": {"width": ["INT", {}], "height": ["INT", {}], "batch_size": ["INT", {}],
                                          "color": ["INT", {}]}}, "output": ["IMAGE"], "output_node": False},
    "CreateVideo": {"input": {"required": {"images": ["IMAGE", {}], "fps": ["FLOAT", {}]},
                              "optional": {"audio": ["AUDIO", {}]}}, "output": ["VIDEO"], "output_node": False},
    "SaveVideo": {"input": {"required": {"video": ["VIDEO", {}], "filename_prefix": ["STRING", {}],
                                         "format": [["auto", "mp4"], {}], "codec": [["auto", "h264"], {}]}},
                  "output": [], "output_node": True},
}


class FakeComfy:
    """Scripted ComfyUI: /history answers from `history_script` (one item per call, the last repeats)."""

    def __init__(self, video: bytes = b"", history_script=None, queue=None, cached=(), prompt_status=200,
                 object_info=None):
        self.video, self.cached, self.prompt_status = video, list(cached), prompt_status
        self.object_info = object_info or FAKE_OBJECT_INFO
        self.history_script = list(history_script or ["done"])
        self.queue = queue or {"queue_running": [], "queue_pending": []}
        self.calls: list[str] = []
        self.posted: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.calls.append(self.path)
                fake.route(self)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                fake.calls.append("POST " + self.path)
                if self.path == "/prompt":
                    fake.posted.append(json.loads(body))
                    if fake.prompt_status != 200:
                        return fake.send(self, fake.prompt_status, {"error": {"message": "Prompt outputs failed"},
                                                                    "node_errors": {"3": {"class_type": "SaveVideo",
                                                                    "errors": [{"message": "bad", "details": "x"}]}}})
                    return fake.send(self, 200, {"prompt_id": "p1", "number": 0, "node_errors": {}})
                fake.send(self, 200, {})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def send(self, handler, status: int, body) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def entry(self, kind: str) -> dict:
        messages = [["execution_start", {"prompt_id": "p1", "timestamp": 1000}],
                    ["execution_cached", {"nodes": self.cached, "prompt_id": "p1", "timestamp": 1001}]]
        if kind == "error":
            messages.append(["execution_error", {"prompt_id": "p1", "node_id": "2", "node_type": "CreateVideo",
                                                 "exception_type": "RuntimeError", "exception_message": "boom",
                                                 "timestamp": 1500}])
            return {"p1": {"status": {"status_str": "error", "completed": False, "messages": messages}, "outputs": {}}}
        messages.append(["execution_success", {"prompt_id": "p1", "timestamp": 3500}])
        outputs = {"3": {"images": [{"filename": "t_00001_.mp4", "subfolder": "", "type": "output"}],
                         "animated": [True]}}
        return {"p1": {"status": {"status_str": "success", "completed": True, "messages": messages},
                       "outputs": outputs}}

    def route(self, handler) -> None:
        path = handler.path
        if path == "/object_info":
            return self.send(handler, 200, self.object_info)
        if path == "/queue":
            return self.send(handler, 200, self.queue)
        if path.startswith("/view"):
            return self.send(handler, 200, self.video)
        if path.startswith("/history/"):
            step = self.history_script.pop(0) if len(self.history_script) > 1 else self.history_script[0]
            if step == 502:
                return self.send(handler, 502, b"Bad Gateway")
            if step == "pending":
                return self.send(handler, 200, {})
            return self.send(handler, 200, self.entry(step))
        self.send(handler, 404, {})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    runmod.add_arguments(parser)
    return runmod.run(parser.parse_args(argv))


@pytest.fixture
def workflow(tmp_path) -> Path:
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(IMAGE_GRAPH))
    return path


@pytest.fixture
def good_video(tmp_path) -> bytes:
    return make_video(tmp_path / "v.mp4", moving_frames()).read_bytes()


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch):
    monkeypatch.setattr(comfy_jobs, "POLL_INTERVAL_S", 0.02)


def test_f26_502_while_queued_keeps_waiting_and_succeeds(workflow, good_video, tmp_path, capsys):
    fake = FakeComfy(good_video, history_script=[502, 502, "pending", 502, "done"],
                     queue={"queue_running": [[0, "p1", {}, {}, []]], "queue_pending": []})
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--out", str(tmp_path / "out")])
    finally:
        fake.close()
    out = "".join(capsys.readouterr())  # results (stdout) and warnings (stderr)
    assert code == 0, out
    assert "HTTP 502" in out and "execution time 2.500 s" in out and "cached nodes: 0 of 3" in out
    assert (tmp_path / "out" / "p1" / "t_00001_.mp4").read_bytes() == good_video


def test_f26_timeout_while_the_server_holds_the_job_is_not_a_failure(workflow, good_video, capsys, tmp_path):
    fake = FakeComfy(good_video, history_script=["pending"],
                     queue={"queue_running": [[0, "p1", {}, {}, []]], "queue_pending": []})
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--timeout", "0.5", "--out", str(tmp_path)])
    finally:
        fake.close()
    out = capsys.readouterr().err
    assert code == 3 and "still holds the job (running)" in out and "/queue" in fake.calls


def test_job_neither_queued_nor_in_history_is_lost(workflow, capsys, tmp_path):
    fake = FakeComfy(history_script=["pending"])
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--timeout", "0.3", "--out", str(tmp_path)])
    finally:
        fake.close()
    assert code == 1 and "neither holds" in capsys.readouterr().err


def test_f17_full_cache_hit_warns(workflow, good_video, capsys, tmp_path):
    fake = FakeComfy(good_video, cached=["1", "2", "3"])
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--out", str(tmp_path)])
    finally:
        fake.close()
    out = "".join(capsys.readouterr())  # results (stdout) and warnings (stderr)
    assert code == 0 and "cached nodes: 3 of 3" in out and "WARN  cache hit" in out and "F17" in out


def test_execution_error_exits_1_and_names_the_node(workflow, capsys, tmp_path):
    fake = FakeComfy(history_script=["error"])
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--out", str(tmp_path)])
    finally:
        fake.close()
    out = capsys.readouterr().err
    assert code == 1 and "node 2 (CreateVideo)" in out and "boom" in out


def test_black_output_exits_1(workflow, capsys, tmp_path):
    black = make_video(tmp_path / "b.mp4", np.zeros((9, 64, 64, 3), np.uint8)).read_bytes()
    fake = FakeComfy(black)
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--out", str(tmp_path / "o")])
    finally:
        fake.close()
    assert code == 1 and "black" in capsys.readouterr().err


def test_invalid_graph_is_rejected_before_submitting(tmp_path, capsys):
    graph = {**IMAGE_GRAPH, "9": {"class_type": "SpectrumApplyMiniMaxH3", "inputs": {}}}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    fake = FakeComfy()
    try:
        code = run_cli([str(path), "--server", fake.url])
    finally:
        fake.close()
    assert code == 2 and fake.posted == []
    assert "xmarre/ComfyUI-Spectrum-MiniMax-H3" in capsys.readouterr().err


def test_server_rejection_exits_2(workflow, capsys, tmp_path):
    fake = FakeComfy(prompt_status=400)
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--out", str(tmp_path)])
    finally:
        fake.close()
    out = capsys.readouterr().err
    assert code == 2 and "node 3 (SaveVideo)" in out


def test_unreachable_server_exits_4(workflow, capsys):
    fake = FakeComfy()
    url = fake.url
    fake.close()
    assert run_cli([str(workflow), "--server", url]) == 4
    assert "UNREACHABLE" in capsys.readouterr().err


def test_fan_out_gives_each_job_its_own_seed(tmp_path, good_video, capsys):
    graph = {**IMAGE_GRAPH, "4": {"class_type": "RandomNoise", "inputs": {"noise_seed": 1}}}
    info = {**FAKE_OBJECT_INFO, "RandomNoise": {"input": {"required": {"noise_seed": ["INT", {}]}},
                                                "output": ["NOISE"], "output_node": False}}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    fakes = [FakeComfy(good_video, object_info=info), FakeComfy(good_video, object_info=info)]
    try:
        code = run_cli([str(path), "--server", fakes[0].url, "--server", fakes[1].url, "--runs", "4",
                        "--seed", "100", "--out", str(tmp_path / "o")])
    finally:
        for fake in fakes:
            fake.close()
    seeds = sorted(p["prompt"]["4"]["inputs"]["noise_seed"] for f in fakes for p in f.posted)
    assert code == 0 and seeds == [100, 101, 102, 103]
    assert [len(f.posted) for f in fakes] == [2, 2]


def test_websocket_client_missing_falls_back_to_polling_and_says_so(workflow, good_video, monkeypatch, capsys, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_websocket(name, *args, **kwargs):
        if name == "websocket":
            raise ImportError("no websocket")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_websocket)
    fake = FakeComfy(good_video)
    try:
        code = run_cli([str(workflow), "--server", fake.url, "--out", str(tmp_path)])
    finally:
        fake.close()
    assert code == 0 and "websocket-client is not installed" in capsys.readouterr().err


# --- tier (b): a real ComfyUI -------------------------------------------------------------------

def write_png(path: Path, shift: int) -> Path:
    from PIL import Image

    Image.fromarray(np.roll(moving_frames(1, (96, 64))[0], shift, axis=1)).save(path)
    return path


def write_wav(path: Path, seconds: float = 1.0, sample_rate: int = 16000) -> Path:
    samples = (tone(seconds, sample_rate) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(sample_rate)
        handle.writeframes(samples.tobytes())
    return path


@pytest.mark.comfyui
def test_run_end_to_end_on_real_comfyui_then_cache_hit(comfyui_server, tmp_path, capsys):
    """Two uploaded pictures -> 10 frames -> H3KitDraftToLTX (9 frames at 64x64, audio trimmed) -> SaveVideo."""
    graph = {
        "1": {"class_type": "LoadImage", "inputs": {"image": "x.png"}, "_meta": {"title": "picture a"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "x.png"}, "_meta": {"title": "picture b"}},
        "3": {"class_type": "ImageBatch", "inputs": {"image1": ["1", 0], "image2": ["2", 0]}},
        "4": {"class_type": "RepeatImageBatch", "inputs": {"image": ["3", 0], "amount": 5}},
        "5": {"class_type": "LoadAudio", "inputs": {"audio": "x.wav"}},
        "6": {"class_type": "H3KitDraftToLTX", "inputs": {"frames": ["4", 0], "audio": ["5", 0], "target_width": 128,
                                                          "target_height": 128, "frame_policy": "trim_to_8n_plus_1",
                                                          "fit": "cover_crop", "fps": 24.0}},
        "7": {"class_type": "CreateVideo", "inputs": {"images": ["6", 0], "audio": ["6", 1], "fps": 24.0}},
        "8": {"class_type": "SaveVideo", "inputs": {"video": ["7", 0], "filename_prefix": "h3kit/run_test",
                                                    "format": "mp4", "codec": "h264"}},
    }
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    argv = [str(path), "--server", comfyui_server.url, "--out", str(tmp_path / "out"), "--timeout", "240",
            "--upload", f"picture a={write_png(tmp_path / 'a.png', 0)}", "--upload", f"2={write_png(tmp_path / 'b.png', 7)}",
            "--upload", f"5={write_wav(tmp_path / 'tone.wav')}"]
    assert run_cli(argv) == 0, capsys.readouterr().out
    first = capsys.readouterr().out
    assert "PASS  video: " in first and "9 frames decode" in first
    assert "PASS  size: " in first and "64x64" in first and "PASS  frames: " in first
    assert "PASS  audio: " in first and "execution time " in first and "cached nodes: 0 of 8" in first
    assert "cache hit" not in first
    downloaded = list((tmp_path / "out").rglob("*.mp4"))
    assert len(downloaded) == 1 and read_mp4(downloaded[0]).frames == 9

    assert run_cli(argv) == 0
    second = "".join(capsys.readouterr())
    assert "cached nodes: 8 of 8" in second and "WARN  cache hit" in second and "F17" in second


@pytest.mark.comfyui
def test_doctor_names_core_nodes_a_host_lacks_not_f01(comfyui_server, tmp_path, capsys):
    from h3kit.scripts import doctor

    graph = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 9, "color": 0}},
        "2": {"class_type": "H3KitDraftToLTX", "inputs": {"frames": ["1", 0], "target_width": 128,
                                                          "target_height": 128}},
        "3": {"class_type": "LTXVLatentUpsampler", "inputs": {"samples": ["2", 0]}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }
    path = tmp_path / "two_stage.json"
    path.write_text(json.dumps(graph))
    parser = argparse.ArgumentParser()
    doctor.add_arguments(parser)
    served = comfyui_server.object_info()
    if "LTXVLatentUpsampler" in served:
        pytest.skip("this host has the two-stage refine's nodes; the core-version difference is for hosts without")
    version = comfyui_server.get("/system_stats")["system"]["comfyui_version"]
    code = doctor.run(parser.parse_args(["--server", comfyui_server.url, "--workflow", str(path), "--no-local"]))
    out = "".join(capsys.readouterr())  # results (stdout) and warnings (stderr)
    assert code == 2  # the worst: the graph leaves H3KitDraftToLTX's frame_policy/fit/fps unset (2) > server FAILs (1)
    # issue 17: judged from the host's node list (no native H3 here), named a core-version difference, not F01
    version_line = next(line for line in out.splitlines() if line.startswith("WARN  comfyui version"))
    assert version_line == (f"WARN  comfyui version: ComfyUI {version} lacks core nodes this workflow needs "
                            "(LTXVLatentUpsampler; read from its node list): this ComfyUI is older than the workflow "
                            "(ComfyUI 0.12.1 serves them)")
    assert ("FAIL  nodes: node 3: 'LTXVLatentUpsampler' is a ComfyUI core node this ComfyUI does not have: this "
            "ComfyUI is older than the workflow (ComfyUI 0.12.1 serves it) (F35)") in out
    assert "F01" not in out


# --- issue 23: the graph is adapted to the host's SaveVideo layout before it is queued -----------------

def savevideo_0330() -> dict:
    return json.loads((Path(__file__).parent / "data" / "savevideo_0.33.0.json").read_text())["SaveVideo"]


def test_run_adapts_the_shipped_savevideo_layout_to_the_hosts_and_says_so(tmp_path, good_video, capsys):
    """The >= 0.34 layout (format.codec) queued to a 0.33.0-layout host: `codec` is what SaveVideo reads there."""
    graph = copy.deepcopy(IMAGE_GRAPH)
    graph["3"]["inputs"] = {"video": ["2", 0], "filename_prefix": "t", "format": "mp4", "format.codec": "h264"}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    fake = FakeComfy(good_video, object_info={**FAKE_OBJECT_INFO, "SaveVideo": savevideo_0330()})
    try:
        code = run_cli([str(path), "--server", fake.url, "--out", str(tmp_path / "out")])
    finally:
        fake.close()
    out = capsys.readouterr().out
    assert code == 0, out
    assert (f"{fake.url}: INFO  adapted: node 3 (SaveVideo): input 'format.codec' -> 'codec' (value 'h264' "
            "unchanged): this ComfyUI's SaveVideo takes it there") in out
    (posted,) = fake.posted
    assert posted["prompt"]["3"]["inputs"] == {"video": ["2", 0], "filename_prefix": "t", "format": "mp4",
                                               "codec": "h264"}
    assert json.loads(path.read_text()) == graph  # the file is never rewritten


def test_run_refuses_a_codec_the_host_lacks_with_the_hosts_options_before_queueing(tmp_path, capsys):
    graph = copy.deepcopy(IMAGE_GRAPH)
    graph["3"]["inputs"] = {"video": ["2", 0], "filename_prefix": "t", "format": "mp4", "format.codec": "av1"}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    fake = FakeComfy(object_info={**FAKE_OBJECT_INFO, "SaveVideo": savevideo_0330()})
    try:
        code = run_cli([str(path), "--server", fake.url, "--out", str(tmp_path / "out")])
    finally:
        fake.close()
    out = "".join(capsys.readouterr())  # INFO adapted (stdout) and the refusal (stderr)
    assert code == 2 and fake.posted == []
    assert "node 3 (SaveVideo) input 'codec'" in out and "choose one of: auto, h264" in out


# --- issue 27: --seed on a graph without seeds; advice that fits the graph; uploads of the wrong kind --------

DEMO_GRAPH = Path(__file__).resolve().parent.parent / "workflows" / "api" / "h3kit_handoff_demo.json"


@pytest.mark.parametrize("seed", ["random", "7"])
def test_seed_on_a_graph_without_seed_inputs_is_refused_and_suggests_set(seed):
    graph = json.loads(DEMO_GRAPH.read_text())
    with pytest.raises(GraphEditError) as refused:
        job_seeds(graph, seed, 1, None)
    message = str(refused.value)
    assert "has no seed or noise_seed input, so --seed changes nothing" in message
    assert "--set NODE.INPUT=VALUE (e.g. --set 1." in message


def test_run_seed_random_on_the_demo_graph_exits_2_before_contacting_a_server(tmp_path, capsys):
    code = run_cli([str(DEMO_GRAPH), "--server", "http://127.0.0.1:9", "--seed", "random"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.startswith("REJECTED: --seed random: change an input with --set NODE.INPUT=VALUE")


def test_cache_hit_advice_fits_the_graph():
    everything = comfy_jobs.Timing(0.006, cached=[str(n) for n in range(1, 8)])
    no_seeds = json.loads(DEMO_GRAPH.read_text())
    (warning,) = [c for c in runmod.cache_checks(no_seeds, everything) if c.status == WARN]
    assert "--seed random" not in warning.fix and "--set NODE.INPUT=VALUE" in warning.fix
    seeded = {"1": {"class_type": "RandomNoise", "inputs": {"noise_seed": 5}},
              "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}
    (warning,) = [c for c in runmod.cache_checks(seeded, comfy_jobs.Timing(0.006, cached=["1", "2"])) if c.status == WARN]
    assert warning.fix.startswith("change the seed (--seed random) or an input")


def test_fan_out_of_a_graph_without_seeds_warns_that_the_other_jobs_are_cache_hits(capsys):
    assert run_cli([str(DEMO_GRAPH), "--server", "http://127.0.0.1:9", "--runs", "2"]) == 4
    err = capsys.readouterr().err
    assert "WARN  2 jobs of the same graph: every job after the first will come from ComfyUI's cache" in err


def test_upload_of_the_wrong_kind_names_what_the_file_is(tmp_path):
    from h3kit.adapters.files import sniff_file
    from h3kit.checks.graph_edit import check_upload_kind

    def check(item: str, class_type: str, path: Path) -> None:
        check_upload_kind(item, class_type, str(path), sniff_file(path))

    wav = write_wav(tmp_path / "tone.wav")
    with pytest.raises(GraphEditError, match=r"is a WAV audio file, but LoadImage loads an image"):
        check("1=tone.wav", "LoadImage", wav)
    png = write_png(tmp_path / "a.png", 0)
    with pytest.raises(GraphEditError, match=r"is a PNG image, but LoadVideo loads a video"):
        check("2=a.png", "LoadVideo", png)
    check("1=a.png", "LoadImage", png)
    check("5=tone.wav", "LoadAudio", wav)
    with pytest.raises(GraphEditError, match=r"is a PNG image, but LoadAudio loads audio"):
        check("5=a.png", "LoadAudio", png)
    with pytest.raises(GraphEditError, match=r"cannot be read"):
        check("1=gone.png", "LoadImage", tmp_path / "gone.png")
