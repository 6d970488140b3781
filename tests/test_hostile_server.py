"""Issue 14, hostile server: one regression test per reported case against `python -m h3kit run`, with a
scripted ComfyUI on 127.0.0.1 (tests/fake_comfy.py). Exit codes are the README's: 0 ok, 1 failure, 2 refused,
3 timeout, 4 unreachable."""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path

import fake_server_fixtures
import pytest
from fake_comfy import Body, FakeComfy, history_entry, repeat, ws_frame
from h3kit.adapters import comfy_jobs
from h3kit.scripts import run as runmod

# the shared fake-server fixtures (tests/fake_server_fixtures.py), found by pytest as module attributes
server = fake_server_fixtures.server
fast_polling = fake_server_fixtures.fast_polling
workflow = fake_server_fixtures.workflow
pytestmark = pytest.mark.usefixtures("fast_polling")

MIB = 2**20


def run(workflow: Path, server: FakeComfy, out: Path, *extra: str) -> int:
    parser = argparse.ArgumentParser()
    runmod.add_arguments(parser)
    return runmod.run(parser.parse_args([str(workflow), "--server", server.url, "--out", str(out), "--quiet", *extra]))


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


# ----------------------------------------------------------------------------------------- escape from folder
@pytest.mark.parametrize("prompt_id", ["../../../x", "/tmp/h3kit-escape", "..", "a/b", "x\x00y", 7])
def test_server_chosen_prompt_id_is_an_identifier_never_a_path(workflow, server, tmp_path, capsys, prompt_id):
    server.prompt = {"prompt_id": prompt_id, "number": 0, "node_errors": {}}
    server.history = history_entry(str(prompt_id))
    before = files_under(tmp_path)
    assert run(workflow, server, tmp_path / "out") == 1
    out = capsys.readouterr().err
    assert "not a plain identifier" in out and "crashed" not in out
    assert files_under(tmp_path) == before and not Path("/tmp/h3kit-escape").exists()
    assert not any(call.startswith("/view") for call in server.calls)


def test_view_redirect_to_another_host_is_not_followed(workflow, server, tmp_path, capsys):
    other = FakeComfy()
    try:
        other.view = Body(200, b"attacker's body")
        server.view = Body(302, b"", headers={"Location": f"{other.url}/view?filename=x.png", "Content-Length": "0"})
        assert run(workflow, server, tmp_path / "out") == 1
    finally:
        other.close()
    assert "another origin" in capsys.readouterr().err
    assert other.calls == [] and not (tmp_path / "out" / "p1" / "t_00001_.png").exists()


def test_view_redirect_within_the_server_is_followed(workflow, server, tmp_path):
    calls = iter([Body(302, b"", headers={"Location": "/view?filename=moved.png", "Content-Length": "0"}),
                  Body(200, b"\x89PNG moved")])
    server.view = Body(200, b"")
    original_send = server.send
    server.send = lambda handler, answer: original_send(handler, next(calls) if answer is server.view else answer)
    assert run(workflow, server, tmp_path / "out") == 0
    assert (tmp_path / "out" / "p1" / "t_00001_.png").read_bytes() == b"\x89PNG moved"


# ------------------------------------------------------------------------------------------- wrong success
@pytest.mark.parametrize("filename", ["a\x00b.png", 5, None, ["x"], {"a": 1}])
def test_unusable_filename_in_history_is_a_failure_not_a_crash(workflow, server, tmp_path, capsys, filename):
    server.history = history_entry(outputs={"2": {"images": [{"filename": filename, "subfolder": "", "type": "output"}]}})
    assert run(workflow, server, tmp_path / "out") == 1
    out = capsys.readouterr().err
    assert "cannot fetch safely" in out and "crashed" not in out


@pytest.mark.parametrize("stamp", ["soon", None, 10**400, float("nan"), True, [1], {"t": 1}])
def test_bad_timestamps_in_history_never_crash(workflow, server, tmp_path, capsys, stamp):
    messages = [["execution_start", {"prompt_id": "p1", "timestamp": stamp}],
                ["execution_success", {"prompt_id": "p1", "timestamp": 2000}]]
    server.history = history_entry(messages=messages)
    assert run(workflow, server, tmp_path / "out") == 0
    out = "".join(capsys.readouterr())  # results and problems
    assert "crashed" not in out and "execution time" in out


MALFORMED_WS = [b"not json", b"[1, 2]", b'{"type": "progress", "data": [1]}', b'{"type": "progress", "data": '
                b'{"value": "x", "max": null}}', b'{"type": "executing", "data": {"node": {"a": 1}, "prompt_id": "p1"}}',
                b'{"type": "execution_cached", "data": {"nodes": "abc", "prompt_id": "p1"}}',
                b'{"data": {"value": ' + b"9" * 5000 + b"}}", b"[" * 100_000, b"\xff\xfe"]


def test_malformed_websocket_messages_are_skipped(workflow, server, tmp_path, capsys):
    server.ws_frames = b"".join(ws_frame(message) for message in MALFORMED_WS) + ws_frame(b"\x00\x01", opcode=0x2)
    assert run(workflow, server, tmp_path / "out") == 0
    out = "".join(capsys.readouterr())  # results and problems
    assert "crashed" not in out and "queued prompt p1" in out
    assert any(call.startswith("/ws") for call in server.calls)


def test_a_job_that_crashes_exits_1_not_0(workflow, server, tmp_path, capsys, monkeypatch):
    """Reported: a crashed job thread printed a traceback and run exited 0. Any unforeseen exception in a job
    is now its failure (exit 1)."""
    def boom(*_args):
        raise KeyError("unforeseen")

    monkeypatch.setattr(comfy_jobs, "timing_of", boom)
    assert run(workflow, server, tmp_path / "out") == 1
    err = capsys.readouterr().err
    assert "the job crashed" in err and "unexpected KeyError: 'unforeseen'" in err and "Traceback" not in err
    log = Path(err.split("the full traceback is in ")[1].split(")")[0])
    assert "Traceback" in log.read_text() and "unforeseen" in log.read_text()


def test_execution_error_with_control_characters_is_printed_clean(workflow, server, tmp_path, capsys):
    messages = [["execution_start", {"prompt_id": "p1", "timestamp": 1}],
                ["execution_error", {"prompt_id": "p1", "node_id": "2\x1b[31m", "node_type": "Save\x07Image",
                                     "exception_type": "RuntimeError\x1b]0;pwned\x07",
                                     "exception_message": "\x1b[2J\x1b[Hall clear\r\nfake: OK"}]]
    server.history = history_entry(messages=messages, status="error", outputs={})
    assert run(workflow, server, tmp_path / "out") == 1
    out = capsys.readouterr().err
    assert "all clear" in out and not any(ch in out for ch in "\x1b\x07\r")


# ------------------------------------------------------------------------------------ unbounded memory / time
def test_a_1_gib_view_answer_streams_to_disk_in_bounded_memory(workflow, server, tmp_path):
    """Reported: a 1 GiB /view answer took 1.28 GB of memory. Here 256 MiB (CI time) streams through with a
    Python-heap peak under 16 MiB; the bound does not grow with the size."""
    size = 256 * MIB
    server.view = Body(200, repeat(b"\x00" * MIB, size)(), headers={"Content-Length": str(size)})
    tracemalloc.start()
    try:
        assert run(workflow, server, tmp_path / "out") == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "out" / "p1" / "t_00001_.png").stat().st_size == size
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"


@pytest.mark.parametrize("declared", [True, False])
def test_a_300_mb_history_answer_is_refused_at_the_cap(workflow, server, tmp_path, capsys, declared):
    size = 300 * 10**6
    headers = {"Content-Length": str(size)} if declared else {}
    server.history = lambda _pid: Body(200, repeat(b" " * MIB, size)(), headers=headers, length=False)
    tracemalloc.start()
    try:
        assert run(workflow, server, tmp_path / "out") == 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "limit of 33,554,432" in capsys.readouterr().err  # the documented 32 MiB JSON cap
    assert peak < (8 if declared else 3 * 32) * MIB, f"peak {peak / MIB:.1f} MiB"


def test_a_400_mb_websocket_frame_is_refused_before_its_payload(workflow, server, tmp_path, capsys):
    server.ws_frames = bytes([0x81, 127]) + (400 * MIB).to_bytes(8, "big") + b"x" * MIB
    tracemalloc.start()
    try:
        assert run(workflow, server, tmp_path / "out") == 0  # falls back to /history polling
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    out = capsys.readouterr().err
    assert "websocket message of 419,430,400 bytes" in out and peak < 16 * MIB


def test_a_1_byte_per_second_download_stops_at_the_timeout(workflow, server, tmp_path, capsys):
    """Reported: still running after 75 s with --timeout 10. The whole job, downloads included, is bounded."""
    server.view = Body(200, (b"x" for _ in range(10_000)), headers={"Content-Length": "10000"}, delay=1.0)
    started = time.monotonic()
    assert run(workflow, server, tmp_path / "out", "--timeout", "3") == 3
    assert time.monotonic() - started < 10
    assert "timeout" in capsys.readouterr().err
    assert not (tmp_path / "out" / "p1" / "t_00001_.png").exists()


def test_leftover_temp_files_never_stay(workflow, server, tmp_path):
    server.view = Body(200, (b"x" * 100 for _ in range(3)), headers={"Content-Length": "10000"}, close=True)  # cut
    assert run(workflow, server, tmp_path / "out") == 1
    leftovers = [name for name in files_under(tmp_path) if name.endswith(".tmp")]
    assert leftovers == [] and os.path.exists(tmp_path / "wf.json")
