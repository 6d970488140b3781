"""Issue 26, bounded by construction: the review's attacks on main e0d6ec2 re-created, one test each, plus more of
the same kind. Promises pinned here, with the documented numbers as literals (docs/security.md):

- no hang: every wait has a total deadline (a server trickling one byte a second, in its headers, its body or a
  websocket message; a job nobody holds; a FIFO given as a file);
- no runaway memory: sizes that come from input are checked before anything is allocated (Autogrow slots, tensor
  shapes, cache metadata, effect rows, header containers), media verification streams, downloads have a total cap;
- no raw traceback: wrong-typed schemas, impossible shapes, link loops, long and reserved names, a full disk, and
  anything unforeseen end as one line and a documented exit code (the traceback goes to a crash log);
- nothing a server says can start a line of our output.

The editor route's attacks are in tests/test_route_bounds.py; the fuzz tier in tests/test_fuzz_commands.py.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path

import fake_server_fixtures
import pytest
from fake_comfy import OBJECT_INFO, Body, FakeComfy, history_entry, silent_flac_mkv, ws_frame
from h3kit.adapters import comfy_client, comfy_jobs, crash_log
from h3kit.nodes import cond_cache_format as fmt
from h3kit.scripts import cli, cond, convert, doctor, validate
from h3kit.scripts import run as runmod

# the shared fake-server fixtures (tests/fake_server_fixtures.py), found by pytest as module attributes
server = fake_server_fixtures.server
fast_polling = fake_server_fixtures.fast_polling
workflow = fake_server_fixtures.workflow
pytestmark = pytest.mark.usefixtures("fast_polling")

MIB = 2**20


def call(module, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args([str(a) for a in argv]))


def run(workflow: Path, server: FakeComfy, out: Path, *extra: str) -> int:
    return call(runmod, workflow, "--server", server.url, "--out", out, "--quiet", *extra)


def shown(capsys) -> str:
    """Everything the command printed: results on stdout, errors and warnings on stderr (the stream rule)."""
    captured = capsys.readouterr()
    return captured.out + captured.err


def timed(function, *args) -> tuple[object, float, int]:
    """(result, seconds, peak Python heap bytes) of one call."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = function(*args)
    finally:
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, elapsed, peak


def server_commands(workflow: Path, server: FakeComfy, out: Path, timeout: str = "10") -> dict:
    return {"run": (runmod, [workflow, "--server", server.url, "--out", out, "--quiet", "--timeout", timeout]),
            "validate": (validate, [workflow, "--server", server.url, "--timeout", timeout]),
            "doctor": (doctor, ["--server", server.url, "--workflow", workflow, "--no-local", "--timeout", timeout])}


# ------------------------------------------------------------------------------------------------- hangs
@pytest.mark.parametrize("command", ["run", "validate", "doctor"])
@pytest.mark.parametrize("slots", [10**6, 10**12, 2**63, 1e300])
def test_a_huge_autogrow_max_builds_nothing(workflow, server, tmp_path, capsys, command, slots):
    """Reported: /object_info declaring an Autogrow group with a huge max made run, validate --server and doctor
    --server build that many slots (past 4 GiB, --timeout did not stop it). ComfyUI's own cap is 100 slots."""
    info = json.loads(json.dumps(OBJECT_INFO))
    info["EmptyImage"]["input"]["optional"] = {"refs": ["AUTOGROW", {"prefix": "ref_", "max": slots, "types": ["IMAGE"]}]}
    server.object_info = info
    module, argv = server_commands(workflow, server, tmp_path / "out")[command]
    code, seconds, peak = timed(call, module, *argv)
    out = shown(capsys)
    assert code in (0, 1) and seconds < 10 and peak < 64 * MIB, (code, seconds, peak)
    assert "Autogrow group of" in out and "at most 100" in out and "Traceback" not in out


@pytest.mark.parametrize("command", ["run", "validate", "doctor"])
def test_object_info_one_byte_per_second_stops_at_the_timeout(workflow, server, tmp_path, capsys, command):
    """Reported: /object_info sent one byte per second; every read finished inside its read timeout and nothing
    bounded the total. Each command now stops at its --timeout (exit 3)."""
    body = json.dumps(OBJECT_INFO).encode()
    server.object_info = Body(200, (bytes([b]) for b in body), headers={"Content-Length": str(len(body))}, delay=0.2)
    module, argv = server_commands(workflow, server, tmp_path / "out", timeout="2")[command]
    started = time.monotonic()
    code = call(module, *argv)
    assert time.monotonic() - started < 6
    assert code == 3, shown(capsys)


def test_a_trickled_answer_without_timeout_is_cut_at_the_answer_limit(workflow, server, tmp_path, monkeypatch, capsys):
    """run without --timeout: each answer still has its total time (MAX_ANSWER_S, 300 s; 1 s here)."""
    monkeypatch.setattr(comfy_client, "MAX_ANSWER_S", 1.0)
    body = json.dumps(OBJECT_INFO).encode()
    server.object_info = Body(200, (bytes([b]) for b in body), headers={"Content-Length": str(len(body))}, delay=0.2)
    started = time.monotonic()
    assert run(workflow, server, tmp_path / "out") == 3
    assert time.monotonic() - started < 5
    assert "no complete answer within the 1 s allowed" in shown(capsys)


def test_trickled_headers_are_cut_at_the_deadline():
    """Our own case: the status line and headers one byte at a time (http.client reads them line by line)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    stop = threading.Event()

    def trickle():
        conn, _ = listener.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000:
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.05)

    threading.Thread(target=trickle, daemon=True).start()
    client = comfy_client.ComfyClient(f"http://127.0.0.1:{listener.getsockname()[1]}", deadline=comfy_client.Deadline(1.5))
    started = time.monotonic()
    try:
        with pytest.raises(comfy_client.TimedOut):
            client.get_json("/object_info")
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - started < 4


def test_a_trickled_websocket_message_falls_back_to_polling(workflow, server, tmp_path, monkeypatch, capsys):
    """Our own case: a websocket frame whose payload arrives one byte at a time never completes; run follows by
    /history polling after MAX_WS_MESSAGE_S (30 s; 0.5 s here) and finishes."""
    monkeypatch.setattr(comfy_client, "MAX_WS_MESSAGE_S", 0.5)
    server.history = lambda _pid: Body(200, b"{}") if time.monotonic() < ready else Body(
        200, json.dumps(history_entry()).encode())
    frame = ws_frame(b'{"type": "status", "data": {}}' + b" " * 100)
    original = server.websocket

    def slow_socket(handler):
        server.ws_frames = b""
        original(handler)  # the handshake
        try:
            for byte in frame:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass

    server.websocket = slow_socket
    server.ws_frames = b""
    ready = time.monotonic() + 2
    started = time.monotonic()
    assert run(workflow, server, tmp_path / "out") == 0
    assert time.monotonic() - started < 15
    assert "did not arrive whole within" in shown(capsys)


def test_a_job_nobody_holds_is_lost_without_a_timeout(workflow, server, tmp_path, monkeypatch, capsys):
    """Reported: run without --timeout waited forever for a job neither in /history nor in /queue (the queue was
    asked only when a deadline expired). /queue is now asked every QUEUE_CHECK_S (10 s; 0.2 s here) and two
    answers without the job make it lost: exit 1."""
    monkeypatch.setattr(comfy_jobs, "QUEUE_CHECK_S", 0.2)
    server.history = {}
    started = time.monotonic()
    assert run(workflow, server, tmp_path / "out") == 1
    assert time.monotonic() - started < 5
    assert "neither holds the job" in shown(capsys)
    assert server.calls.count("/queue") == comfy_jobs.LOST_AFTER_MISSES == 2


def test_a_job_the_queue_holds_is_waited_for(workflow, server, tmp_path, monkeypatch):
    """F26 kept: while /queue holds the job, run waits (here until the history entry appears)."""
    monkeypatch.setattr(comfy_jobs, "QUEUE_CHECK_S", 0.05)
    done_at = time.monotonic() + 1.5
    server.history = lambda _pid: Body(200, json.dumps(history_entry() if time.monotonic() > done_at else {}).encode())
    server.queue = {"queue_running": [[0, "p1", {}, {}, []]], "queue_pending": []}
    assert run(workflow, server, tmp_path / "out") == 0
    assert server.calls.count("/queue") >= comfy_jobs.LOST_AFTER_MISSES  # asked, held, and waited on


def test_a_job_that_finishes_between_the_questions_is_not_lost(workflow, server, tmp_path, monkeypatch):
    """/queue first, then /history again: a job that leaves the queue for the history in between is found."""
    monkeypatch.setattr(comfy_jobs, "QUEUE_CHECK_S", 0.0)
    asked = {"history": 0}

    def history(_pid):
        asked["history"] += 1
        return Body(200, json.dumps(history_entry() if asked["history"] >= 2 else {}).encode())

    server.history = history
    assert run(workflow, server, tmp_path / "out") == 0


def test_a_server_that_answers_nothing_about_the_job_is_unreachable(workflow, server, tmp_path, monkeypatch, capsys):
    """A server answering every status question with an error (or too slowly) for UNREACHABLE_GRACE_S (120 s;
    0.5 s here) is gone: exit 4, the prompt id named."""
    monkeypatch.setattr(comfy_jobs, "UNREACHABLE_GRACE_S", 0.5)
    server.history = lambda _pid: Body(502, b"Bad Gateway")
    server.queue = Body(502, b"Bad Gateway")
    assert run(workflow, server, tmp_path / "out") == 4
    assert "answered no question about the job" in shown(capsys)


def fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def special_file_command(tmp_path: Path, case: str) -> tuple:
    pipe = lambda name: fifo(tmp_path, name)  # noqa: E731
    return {
        "validate": lambda: (validate, [pipe("wf.json")]),
        "doctor --workflow": lambda: (doctor, ["--workflow", pipe("wf.json"), "--no-local"]),
        "convert IN": lambda: (convert, ["bf16-to-fp16", pipe("in.safetensors"), tmp_path / "out.safetensors"]),
        "cond info": lambda: (cond, ["info", pipe("c.safetensors")]),
        "cond import": lambda: (cond, ["import", pipe("old.pt"), "new", "--dir", tmp_path]),
        "cond build --text-file": lambda: (cond, ["build", "--text-file", pipe("prompt.txt"), "--clip", "c", "--name",
                                                  "n", "--server", "http://127.0.0.1:9"]),
        "run": lambda: (runmod, [pipe("wf.json"), "--server", "http://127.0.0.1:9"]),
        "validate /dev/zero": lambda: (validate, ["/dev/zero"]),
        "cond info /dev/zero": lambda: (cond, ["info", "/dev/zero"]),
    }[case]()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("case", ["validate", "doctor --workflow", "convert IN", "cond info", "cond import",
                                  "cond build --text-file", "run", "validate /dev/zero", "cond info /dev/zero"])
def test_special_files_are_refused_up_front(tmp_path, capsys, case):
    """Reported: a FIFO given to validate or convert blocked forever. Every command that reads a file refuses a
    FIFO or a device at once, naming it (exit 2, or 1 for cond's own errors), instead of opening it."""
    module, argv = special_file_command(tmp_path, case)
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.update(code=call(module, *argv)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader so the test process can end
        for path in tmp_path.iterdir():
            if path.is_fifo():
                with open(path, "wb"):
                    pass
        pytest.fail(f"{case} blocked on a special file")
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert outcome["code"] in (1, 2) and "Traceback" not in text
    assert "FIFO" in text or "character device" in text, text


# --------------------------------------------------------------------------------------- memory and disk
def test_a_20_minute_silent_flac_is_verified_in_memory_independent_of_duration(tmp_path):
    """Reported: a 271 KB .mkv holding 20 minutes of silent FLAC took 2.9 GiB to verify (all audio decoded to
    float64 at once). The level is now a running sum: the Python heap peak stays under 16 MiB."""
    from h3kit.checks.expect import Expect
    from h3kit.kernels.mux import verify_video

    path = silent_flac_mkv(tmp_path / "long.mkv", 20)
    assert path.stat().st_size < 2 * MIB
    checks, seconds, peak = timed(verify_video, path, Expect(audio=True))
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"
    audio = [c for c in checks if c.name == "audio"]
    assert audio and audio[0].status == "FAIL" and "silent" in audio[0].detail


def test_verification_stops_at_its_audio_limit(tmp_path, monkeypatch):
    """MAX_VERIFY_AUDIO_S (3600 s) bounds the work: past it the verdict covers the decoded part, said as a WARN."""
    from h3kit.checks.expect import Expect
    from h3kit.kernels import mux
    from h3kit.kernels.mux import verify_video

    assert mux.MAX_VERIFY_AUDIO_S == 3600.0 and mux.MAX_VERIFY_FRAMES == 20_000 and mux.MAX_VERIFY_S == 600.0
    monkeypatch.setattr(mux, "MAX_VERIFY_AUDIO_S", 30.0)
    checks = verify_video(silent_flac_mkv(tmp_path / "a.mkv", 2), Expect(audio=True))
    assert any(c.status == "WARN" and "first 30 seconds of audio" in c.detail for c in checks)


@pytest.mark.parametrize("limit", ["files", "bytes"])
def test_a_server_listing_200_outputs_gets_the_job_cap(workflow, server, tmp_path, monkeypatch, capsys, limit):
    """Reported: downloads were capped per file only; a server listing 200 outputs got all 200 written. A job now
    fetches at most MAX_JOB_FILES files (1000; 5 here) and --max-job-download bytes (32 GiB; 500 here)."""
    assert comfy_jobs.MAX_JOB_FILES == 1000 and comfy_jobs.MAX_JOB_DOWNLOAD_BYTES == 32 * 2**30
    items = [{"filename": f"t_{i:05d}_.png", "subfolder": "", "type": "output"} for i in range(200)]
    server.history = history_entry(outputs={"2": {"images": items}})
    server.view = lambda: Body(200, b"x" * 100)  # a fresh 100-byte body per request
    extra = []
    if limit == "files":
        monkeypatch.setattr(comfy_jobs, "MAX_JOB_FILES", 5)
    else:
        extra = ["--max-job-download", "500"]
    assert run(workflow, server, tmp_path / "out", *extra) == 1
    written = list((tmp_path / "out" / "p1").iterdir())
    out = shown(capsys)
    assert len(written) == 5, out
    assert ("200 output files; 5 are fetched" in out) if limit == "files" else ("total download limit of 500" in out)


def cache_file(path: Path, structure: str, tensors: dict, shape: list[int], data: bytes = b"") -> Path:
    header = {"__metadata__": {"h3kit_format": fmt.FORMAT_NAME, "h3kit_format_version": "1", "structure": structure,
                               "tensors": json.dumps(tensors)},
              "t0": {"dtype": "U8", "shape": shape, "data_offsets": [0, len(data)]}}
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def cache_surfaces(path: Path, capsys) -> str:
    """cond info and cond list on the file (both must refuse it with one line) and the load node's check."""
    from h3kit.nodes.conditioning_cache import H3KitLoadConditioning

    assert call(cond, "info", path) == 2  # a file that is not a usable cache (scripts/cond.py EXIT_STATUSES)
    assert call(cond, "list", "--dir", path.parent) == 1  # the folder holds an unusable file
    os.environ[cond.ENV_VAR] = str(path.parent)
    try:
        verdict = H3KitLoadConditioning.VALIDATE_INPUTS(path.name)
    finally:
        del os.environ[cond.ENV_VAR]
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text and "NOT USABLE" in text
    return text + str(verdict)


def test_a_40_mb_structure_entry_is_refused_before_parsing(tmp_path, capsys):
    """Reported: a cache whose 'structure' entry is 40 MB cost 1.8 GiB and 45 s at every validation and `cond
    list`. The entry is refused from its length (at most 1 MiB) before it is parsed."""
    nested = "[" + ",".join(["[1,2,3,4]"] * 4_000_000) + "]"
    path = cache_file(tmp_path / "big.safetensors", nested, {"t0": {}}, [0])
    _, seconds, peak = timed(cache_surfaces, path, capsys)
    assert seconds < 10 and peak < 200 * MIB, (seconds, peak / MIB)


@pytest.mark.parametrize("shape", [[0, 2**64 - 1], [0, 2**63], [0, 2**31], [0] * 9, [2**40, 0, 2**40]])
def test_impossible_tensor_shapes_in_a_cache_are_refused(tmp_path, capsys, shape):
    """Reported: a cache tensor of shape [0, 2**64-1], which the safetensors library accepts, passed the loader's
    validation and then failed in C++ (a raw traceback). Shapes are checked before any tensor is built: at most
    8 sides of at most 2**31 - 1 each."""
    assert fmt.MAX_TENSOR_RANK == 8 and fmt.MAX_TENSOR_DIM == 2**31 - 1
    path = cache_file(tmp_path / "shape.safetensors", json.dumps([[{"$tensor": "t0"}, {}]]),
                      {"t0": {"path": "[0][0]", "dtype": "uint8", "shape": shape, "crc32": "00000000"}}, shape)
    with pytest.raises(fmt.CacheError, match="sides of at most"):
        fmt.read_cache(path)
    assert "sides of at most" in cache_surfaces(path, capsys)


def test_an_effect_with_a_million_rows_is_refused_from_its_header(tmp_path, monkeypatch):
    """Effect embeddings had no row limit: at most MAX_EFFECT_ROWS (1024) rows, from the header, before loading."""
    from h3kit.nodes import effect_files, effects
    from h3kit.nodes.common import H3KitInputError

    assert effect_files.MAX_EFFECT_ROWS == 1024
    rows = 10**6
    header = json.dumps({"qwen3vl_32b": {"dtype": "BF16", "shape": [rows, 5120],
                                         "data_offsets": [0, rows * 5120 * 2]}}).encode()
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + rows * 5120 * 2)  # sparse: 10 GB that take no disk
    monkeypatch.setenv(effects.ENV_DIR, str(tmp_path))
    monkeypatch.setattr(effects, "embedding_dirs", lambda: [tmp_path])
    with pytest.raises(H3KitInputError, match="1,000,000 rows; an effect has at most 1,024"):
        effects.inspect_effect("H3KitEffect", "effect", "huge.safetensors")


def test_a_100_mb_header_of_empty_tensors_is_refused_before_parsing(tmp_path):
    """Our own case: 100 MB of empty tensor entries (the library accepts them) cost 3.2 GiB and 4 minutes to parse;
    more than MAX_HEADER_CONTAINERS (200,000) JSON objects and arrays are refused from a count of the raw bytes."""
    from h3kit.adapters.safetensors_file import MAX_HEADER_CONTAINERS, SafetensorsHeaderError, read_header

    assert MAX_HEADER_CONTAINERS == 200_000
    entries = ",".join(f'"t{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}' for i in range(1_700_000))
    text = ("{" + entries + "}").encode()
    path = tmp_path / "many.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text)
    started = time.monotonic()
    with pytest.raises(SafetensorsHeaderError, match="at most 200,000"):
        read_header(path)
    assert time.monotonic() - started < 5
    assert call(convert, "bf16-to-fp16", path, tmp_path / "out.safetensors") == 2


# ------------------------------------------------------------------------------------------ raw tracebacks
WRONG_SCHEMAS = {
    "entry is a list": ["EmptyImage"],
    "input is a list": {"input": [1, 2], "output": ["IMAGE"]},
    "required is a list": {"input": {"required": ["width"]}, "output": ["IMAGE"]},
    "spec is text": {"input": {"required": {"width": "INT"}}, "output": ["IMAGE"]},
    "spec is empty": {"input": {"required": {"width": []}}, "output": ["IMAGE"]},
    "min is text": {"input": {"required": {"width": ["INT", {"min": "zero"}]}}, "output": ["IMAGE"]},
    "step is 0": {"input": {"required": {"width": ["INT", {"step": 0, "min": 0}]}}, "output": ["IMAGE"]},
    "options is a number": {"input": {"required": {"color": ["COMBO", {"options": 5}]}}, "output": ["IMAGE"]},
    "output is text": {"input": {"required": {}}, "output": "IMAGE"},
    "live autogrow max 10**9": {"input": {"optional": {"refs": ["COMFY_AUTOGROW_V3", {"template": {
        "input": {"required": {"img": ["IMAGE", {}]}}, "prefix": "r", "max": 10**9}}]}}, "output": ["IMAGE"]},
    "nested too deep": {"input": {"required": {"a": ["COMFY_DYNAMICSLOT_V3", {"inputs": {"required": {"b": [
        "COMFY_DYNAMICSLOT_V3", {"inputs": {"required": {"c": ["INT", {"min": "x"}]}}}]}}}]}}, "output": ["IMAGE"]},
}


@pytest.mark.parametrize("case", sorted(WRONG_SCHEMAS))
@pytest.mark.parametrize("command", ["run", "validate", "doctor"])
def test_a_wrong_typed_schema_is_reported_never_a_traceback(workflow, server, tmp_path, capsys, case, command):
    """Reported: a wrong-typed /object_info schema crashed run (TypeError). Every entry is checked before use;
    a node type whose schema is not in /object_info's shape is reported once, its inputs unchecked."""
    server.object_info = {**OBJECT_INFO, "EmptyImage": WRONG_SCHEMAS[case]}
    module, argv = server_commands(workflow, server, tmp_path / "out")[command]
    code = call(module, *argv)
    out = shown(capsys)
    assert code in (0, 1) and "Traceback" not in out and "crashed" not in out, out
    assert "not in ComfyUI's /object_info shape" in out and "so its inputs were not checked" in out


@pytest.mark.parametrize("where", ["file", "models dir"])
def test_a_symlink_loop_in_models_is_not_a_crash(tmp_path, capsys, where):
    """Reported: a symlink loop in models/ named by a workflow crashed doctor."""
    models = tmp_path / "models"
    (models / "vae").mkdir(parents=True)
    loop = models / "vae" / "loop.safetensors"
    os.symlink(loop, loop)
    if where == "models dir":
        models = tmp_path / "looped"
        os.symlink(models, models)
    graph = {"1": {"class_type": "VAELoader", "inputs": {"vae_name": "loop.safetensors"}},
             "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    code = call(doctor, "--workflow", path, "--models-dir", models, "--no-local")
    out = shown(capsys)
    assert "Traceback" not in out
    if where == "file":  # a loop is no file: the model is missing (exit 1), said as for any missing model
        assert code == 1 and "'loop.safetensors' is not in" in out, out
    else:
        assert code == 2 and "looped is not a folder" in out, out


@pytest.mark.parametrize("case", ["convert OUT", "doctor --models-dir", "validate", "cond info"])
def test_names_over_255_bytes_are_one_line(tmp_path, capsys, case):
    """Reported: a file name over 255 bytes in convert's OUT or doctor --models-dir raised errno 36."""
    import torch
    from safetensors.torch import save_file

    long_name = "é" * 200  # 400 bytes
    source = tmp_path / "in.safetensors"
    save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, str(source), metadata={"a": "b"})
    argv = {"convert OUT": (convert, ["bf16-to-fp16", source, tmp_path / f"{long_name}.safetensors"]),
            "doctor --models-dir": (doctor, ["--models-dir", tmp_path / long_name, "--no-local"]),
            "validate": (validate, [tmp_path / f"{long_name}.json"]),
            "cond info": (cond, ["info", tmp_path / f"{long_name}.safetensors", "--dir", tmp_path])}[case]
    code = call(argv[0], *argv[1])
    captured = capsys.readouterr()
    assert code in (1, 2) and "Traceback" not in captured.out + captured.err
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("name", ["CON", "con.safetensors", "NUL.tar.gz", "COM1", "lpt9.x", "COM\u00b9", "CONIN$",
                                  "AUX .txt", "x.", "x ", "a:b", "a|b"])
def test_reserved_and_unportable_names_are_refused_for_files_we_create(tmp_path, capsys, name):
    """Names checked for reserved device names on every OS (Windows: CON, NUL, COM1, LPT1 ..., with
    extensions, any case) and trailing dots and spaces, wherever H3Kit creates a file from a given name."""
    from h3kit.adapters.files import name_problem

    assert name_problem(name) is not None
    with pytest.raises(fmt.CacheError):
        fmt.cache_file_name(name.removesuffix(".safetensors") or name)
    import torch
    from safetensors.torch import save_file

    source = tmp_path / "in.safetensors"
    save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, str(source), metadata={"a": "b"})
    assert call(convert, "bf16-to-fp16", source, tmp_path / name) == 2
    assert "choose another name" in capsys.readouterr().err


@pytest.mark.parametrize("served, saved", [("CON", "_CON"), ("nul.png", "_nul.png"), ("COM1.png", "_COM1.png"),
                                           ("lpt3", "_lpt3"), ("a.png.", "a.png"), ("x.png ", "x.png"),
                                           ("CONOUT$.png", "CONOUT_.png"), ("..\\..\\aux.png", "_aux.png"),
                                           ("com\u00b2.png", "_com\u00b2.png")])
def test_reserved_download_names_become_plain_files(workflow, server, tmp_path, served, saved):
    """Reported: CON and other reserved names were accepted as download names."""
    server.history = history_entry(outputs={"2": {"images": [{"filename": served, "subfolder": "", "type": "output"}]}})
    assert run(workflow, server, tmp_path / "out") == 0
    assert [p.name for p in (tmp_path / "out" / "p1").iterdir()] == [saved]


def test_saving_a_conditioning_on_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path):
    """Reported: saving a conditioning on a full disk raised a raw SafetensorError (old file intact). On a real
    1 MiB tmpfs (a mount namespace of its own), the save is one CacheError and the old file stays."""
    from subprocess import run as run_process

    script = tmp_path / "fill.py"
    script.write_text(FULL_DISK_SCRIPT)
    mount = tmp_path / "small"
    mount.mkdir()
    cmd = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
           f'mount -t tmpfs -o size=1m tmpfs "{mount}" && exec "$0" "{script}" "{mount}"', os.sys.executable]
    if os.geteuid() == 0:
        cmd = ["unshare", "--mount", "sh", "-c", f'mount -t tmpfs -o size=1m tmpfs "{mount}" && exec "$0" "{script}" '
               f'"{mount}"', os.sys.executable]
    try:
        result = run_process(cmd, capture_output=True, text=True, timeout=120, env={**os.environ})
    except FileNotFoundError:
        pytest.skip("unshare is not available")
    if "mount" in result.stderr and result.returncode != 0 and "RESULT" not in result.stdout:
        pytest.skip(f"no mount namespace here: {result.stderr.strip()[:200]}")
    assert "RESULT ok" in result.stdout, result.stdout + result.stderr


FULL_DISK_SCRIPT = '''
import sys
from pathlib import Path
import torch
from h3kit.nodes import cond_cache_format as fmt

folder = Path(sys.argv[1])
first = fmt.save_conditioning(folder, "keep", [[torch.zeros(1, 4, 8), {}]], prompt_text="old")
before = first.path.read_bytes()
big = [[torch.ones(1, 1024, 1024), {}]]  # 4 MiB: more than the disk holds
for overwrite in (True,):
    try:
        fmt.save_conditioning(folder, "keep", big, prompt_text="new", overwrite=overwrite)
        print("RESULT saved?!")
    except fmt.CacheError as exc:
        text = str(exc)
        assert "\\n" not in text and "disk" in text and "unchanged" in text, text
assert first.path.read_bytes() == before, "the old file changed"
assert sorted(p.name for p in folder.iterdir()) == ["keep.safetensors"], list(folder.iterdir())
# the library's own write error, past the free-space check: a file that fits the estimate but not the disk
fmt.shutil.disk_usage = lambda _p: type("U", (), {"free": 10**12})()
try:
    fmt.save_conditioning(folder, "other", big, prompt_text="x")
except fmt.CacheError as exc:
    assert "the disk is full" in str(exc), str(exc)
assert sorted(p.name for p in folder.iterdir()) == ["keep.safetensors"]
print("RESULT ok")
'''


def test_an_unforeseen_error_is_one_line_and_a_crash_log(tmp_path, monkeypatch, capsys):
    """The command line had no top-level handler. Now any error no command caught is one line on stderr (what
    failed, what to do, where the traceback went), exit 1; the log is a new file each time (never overwritten)."""
    def boom(args):
        raise ZeroDivisionError("division by zero deep inside")

    monkeypatch.setattr(validate, "run", boom)
    logs = []
    for _ in range(2):
        assert cli.main(["validate", "x.json"]) == 1
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and captured.out == "" and "Traceback" not in captured.err
        assert "python -m h3kit validate: unexpected ZeroDivisionError: division by zero deep inside" in lines[0]
        logs.append(Path(lines[0].split("the full traceback is in ")[1].rstrip(")")))
    assert logs[0] != logs[1] and all(p.parent == crash_log.log_folder() for p in logs)
    assert all("Traceback" in p.read_text() and "boom" in p.read_text() for p in logs)


def test_os_errors_and_interrupts_at_the_top(monkeypatch, capsys):
    def no_space(args):
        raise OSError(28, "No space left on device", "/data/out.safetensors")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "run", no_space)
    assert cli.main(["validate", "x.json"]) == 1
    assert "/data/out.safetensors cannot be written: the disk is full" in capsys.readouterr().err
    monkeypatch.setattr(validate, "run", interrupted)
    assert cli.main(["validate", "x.json"]) == 130
    assert capsys.readouterr().err.strip() == "python -m h3kit validate: interrupted"


def test_without_a_writable_log_folder_the_traceback_is_printed(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("H3KIT_LOG_DIR", str(blocker / "logs"))
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(blocker))
    monkeypatch.setattr(validate, "run", lambda args: 1 / 0)
    assert cli.main(["validate", "x.json"]) == 1
    err = capsys.readouterr().err
    assert "no log folder was writable; the traceback follows" in err and "ZeroDivisionError" in err


# ------------------------------------------------------------------------------------------------ terminal
INJECTED = "PASS  download: node 2 -> /tmp/evil.png"


def test_a_newline_in_server_text_never_starts_a_line(workflow, server, tmp_path, capsys):
    """Reported: a newline inside server text passed the printable filter, so a server could print a line that
    looks like the pack's own. Every server-supplied text is one line now."""
    messages = [["execution_start", {"prompt_id": "p1", "timestamp": 1}],
                ["execution_error", {"prompt_id": "p1", "node_id": f"2\n{INJECTED}", "node_type": f"X\r\n{INJECTED}",
                                     "exception_type": f"E\u2028{INJECTED}", "exception_message": f"boom\n{INJECTED}"}]]
    server.history = history_entry(messages=messages, status="error", outputs={})
    assert run(workflow, server, tmp_path / "out") == 1
    server.reset()
    server.prompt = Body(400, json.dumps({"error": {"message": f"bad\n{INJECTED}"}, "node_errors": {
        f"2\n{INJECTED}": {"class_type": f"S\n{INJECTED}", "errors": [{"message": f"m\n{INJECTED}",
                                                                       "details": f"d\n{INJECTED}"}]}}}).encode())
    assert run(workflow, server, tmp_path / "out") == 2
    out = shown(capsys)
    assert out.count("boom") == 1 and "bad" in out
    assert not [line for line in out.splitlines() if line.lstrip().startswith("PASS  download")], out


@pytest.mark.parametrize("fps", [[], {}, [24, 25], "24"])
def test_a_handoff_fps_of_any_json_type_is_no_crash(tmp_path, capsys, fps):
    """Found by the fuzz tier (tests/test_fuzz_commands.py): a handoff fps given as a list made every graph check
    raise 'unhashable type' (validate, doctor, run and the editor route alike)."""
    graph = json.loads((Path(__file__).resolve().parent.parent / "workflows" / "api" / "h3kit_handoff_demo.json")
                       .read_text())
    next(n for n in graph.values() if n["class_type"] == "H3KitDraftToLTX")["inputs"]["fps"] = fps
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    # "24" is what ComfyUI's /prompt converts with float() and accepts: a warning, not a refusal (measured on
    # yzkee @783545f6: "64" for an INT is accepted); a list or an object it cannot convert
    assert call(validate, path) == (0 if fps == "24" else 2)
    out = shown(capsys)
    assert "Traceback" not in out and "input 'fps'" in out


@pytest.mark.parametrize("case", ["cond build --text-file", "cond import"])
def test_files_larger_than_any_cache_could_hold_are_refused_before_reading(tmp_path, capsys, case):
    """Every read has a byte cap: a --text-file larger than a cache header (16 MiB) and a legacy .pt larger than a
    cache (16 GiB) are refused from their size (sparse files here: nothing is read)."""
    path = tmp_path / ("prompt.txt" if case == "cond build --text-file" else "old.pt")
    with open(path, "wb") as handle:
        handle.truncate(17 * 2**20 if case == "cond build --text-file" else 17 * 2**30)
    argv = (["build", "--text-file", path, "--clip", "c", "--name", "n", "--server", "http://127.0.0.1:9"]
            if case == "cond build --text-file" else ["import", path, "n", "--dir", tmp_path])
    code, seconds, peak = timed(call, cond, *argv)
    out = shown(capsys)
    assert code == 2 and "at most" in out and peak < 16 * MIB and "Traceback" not in out, out
