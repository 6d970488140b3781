"""Issue 33, item 2: memory bounded by what is built, not by the bytes read; CPU work on server data inside
--timeout. Each case is the review's attack, on data that passes the weaker check it used to meet (a byte cap that a
few MiB of dense JSON stay under, a 1.8 KB `.pt` under the 16 GiB file limit, a compressed zip record), and memory
is asserted directly (tracemalloc for the Python heap, tests/alloc_tracker.PeakBytes for torch storages)."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import string
import time
import tracemalloc
import zipfile

import fake_server_fixtures
import pytest
import torch
from alloc_tracker import PeakBytes
from fake_comfy import GRAPH, OBJECT_INFO, history_entry, ws_frame
from h3kit.adapters import bounded_json, comfy_client, comfy_jobs
from h3kit.nodes import cond_cache_format as fmt
from h3kit.scripts import cond, doctor, run, validate

# the shared fake-server fixtures (tests/fake_server_fixtures.py), found by pytest as module attributes
server = fake_server_fixtures.server
fast_polling = fake_server_fixtures.fast_polling
workflow = fake_server_fixtures.workflow
pytestmark = pytest.mark.usefixtures("fast_polling")

MIB = 2**20


def call(module, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


def traced(action) -> tuple[object, int]:
    """(what `action()` returns, the Python heap's peak in bytes while it ran)."""
    tracemalloc.start()
    try:
        return action(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------------------------------- dense JSON
def dense_lists(count: int, wrap: str = '{"x": %s}') -> bytes:
    """`count` empty lists in one array: 3 bytes each on the wire, about 80 bytes each once parsed."""
    return (wrap % ("[" + ",".join(["[]"] * count) + "]")).encode()


def test_the_budget_counts_at_least_every_value_parsing_builds():
    def built(value) -> int:
        stack, total = [value], 0
        while stack:
            node = stack.pop()
            total += 1
            if isinstance(node, dict):
                total += len(node)  # the keys
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return total

    documents = ["0", "[]", "{}", '"a,b:[{"', "[[],[[]],{}]", '{"a":{"b":[1,2,{"c":null}]},"d":"x"}',
                 json.dumps(OBJECT_INFO), json.dumps(history_entry()), "[" + ",".join(["1.5"] * 1000) + "]"]
    for text in documents:
        assert built(json.loads(text)) <= bounded_json.count_values(text) == bounded_json.count_values(text.encode())


def test_the_object_info_budget_leaves_room_for_hosts_with_many_packs():
    """The pinned budget against what a real host serves: the ComfyUI 0.33.0 core schemas plus H3Kit's (the offline
    schemas; the live 0.33.0 answer counted 162,941) fit more than 20 times over."""
    from h3kit.scripts.schemas import offline_schemas

    real = bounded_json.count_values(json.dumps(offline_schemas()))
    assert 100_000 < real < 250_000
    assert comfy_client.MAX_OBJECT_INFO_VALUES == 4_000_000 and comfy_client.MAX_JSON_VALUES == 2_000_000
    assert bounded_json.MAX_VALUES == 1_000_000
    assert real * 20 < comfy_client.MAX_OBJECT_INFO_VALUES


def test_a_dense_object_info_under_the_byte_cap_is_refused_before_it_is_parsed(workflow, server, capsys):
    """Reported: a 95 MiB /object_info of `[]` took `validate --server` to 3.5 GiB. 1.4 million empty lists are
    4 MiB here (the byte cap is 96 MiB) and would be 110 MiB of lists; they are refused from their bytes."""
    server.object_info = dense_lists(1_400_000)
    assert len(server.object_info) < comfy_client.MAX_OBJECT_INFO_BYTES // 20
    code, peak = traced(lambda: call(validate, [str(workflow), "--server", server.url]))
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"
    assert code == 1
    assert "4,200,005 JSON values" in capsys.readouterr().err  # 2 per bracket pair, 1 per comma and colon, 1


def test_a_dense_history_answer_is_refused_before_it_is_parsed(workflow, server, capsys):
    """Reported: a 31 MiB /history took 1.8 GiB. 700,000 empty lists (2 MiB) are over the answer budget."""
    server.history = lambda _pid: dense_lists(700_000, '{"p1": {"status": {"completed": true, "messages": %s}}}')
    code, peak = traced(lambda: call(run, [str(workflow), "--server", server.url, "--out", "unused", "--quiet"]))
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"
    assert code == 1
    assert "at most 2,000,000 are read" in capsys.readouterr().err


# ------------------------------------------------------------------------------- CPU work inside --timeout
def test_deadline_refuses_nan_and_checks_only_where_applied():
    from h3kit.checks import deadline as deadlines

    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError):
            deadlines.Deadline(bad)
    spent = deadlines.Deadline(0)
    deadlines.check_time("outside")  # nothing applied: no effect
    with spent.applied(), pytest.raises(deadlines.OutOfTime, match="ran out while walking"):
        deadlines.check_time("walking")
    deadlines.check_time("after")
    with comfy_client.Deadline(0).applied(), pytest.raises(comfy_client.TimedOut) as raised:
        deadlines.check_time("parsing")
    assert raised.value.exit_code == 3 and isinstance(raised.value, deadlines.OutOfTime)


@pytest.mark.parametrize("command", ["validate", "doctor", "run"])
def test_checks_of_a_hostile_schema_end_at_the_timeout(command, server, tmp_path, capsys):
    """Reported: 150 s of CPU for `--timeout 60`. 100,000 node names (a valid /object_info) and a graph of 300
    unknown nodes: looking for a close name for each took about 30 s; with --timeout 1 it ends at 1 s, exit 3."""
    rng = random.Random(33)
    info = dict(OBJECT_INFO)
    info.update(("".join(rng.choices(string.ascii_letters, k=30)), {}) for _ in range(100_000))
    server.object_info = json.dumps(info).encode()
    graph = {**GRAPH, **{f"u{i}": {"class_type": f"UnknownNode{i}", "inputs": {}} for i in range(300)}}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    argv = {"validate": (validate, [str(path), "--server", server.url, "--timeout", "1"]),
            "doctor": (doctor, ["--no-local", "--server", server.url, "--workflow", str(path), "--timeout", "1"]),
            "run": (run, [str(path), "--server", server.url, "--timeout", "1", "--out", str(tmp_path / "o")])}
    started = time.monotonic()
    assert call(*argv[command]) == 3
    assert time.monotonic() - started < 6
    assert "time limit of 1 s ran out while" in "".join(capsys.readouterr())


# ------------------------------------------------------------------------------------ websocket events kept
def test_events_repeated_while_the_job_is_held_are_kept_up_to_the_cap(workflow, server, tmp_path, capsys,
                                                                       monkeypatch):
    """Reported: 2.8 GiB after 300 s of execution events for a held job. 1,000 execution_cached events of 20 KB
    (each far under the 8 MiB message cap; 20 MB in all) then the finish: 64 are kept, the rest counted and named."""
    data = {"prompt_id": "p1", "nodes": [], "detail": "x" * 20_000}
    cached = ws_frame(json.dumps({"type": "execution_cached", "data": data}).encode())
    finish = ws_frame(json.dumps({"type": "execution_success", "data": {"prompt_id": "p1"}}).encode())
    server.ws_frames = cached * 1000 + finish
    monkeypatch.setattr(comfy_jobs, "WS_SETTLE_S", 120.0)  # read to the finish event however slowly
    seen: list[comfy_jobs.Outcome] = []
    original = comfy_jobs.Follower.wait

    def wait(self, ws):
        seen.append(original(self, ws))
        return seen[-1]

    comfy_jobs.Follower.wait = wait
    try:
        code, peak = traced(lambda: call(run, [str(workflow), "--server", server.url, "--out", str(tmp_path / "o"),
                                              "--quiet"]))
    finally:
        comfy_jobs.Follower.wait = original
    assert peak < 16 * MIB, f"peak {peak / MIB:.1f} MiB"  # 26.6 MiB when every event is kept
    assert code == 0
    assert len(seen[0].events) == 64 == comfy_jobs.MAX_KEPT_EVENTS
    err = capsys.readouterr().err
    assert "keeping the first 64" in err  # the finish event came after the cap: dropped with the rest, named
    assert "dropped 936 execution_cached, 1 execution_success event(s)" in err


def test_the_byte_cap_on_kept_events_holds_for_few_large_events(monkeypatch):
    follower = comfy_jobs.Follower(None, "p1", comfy_jobs.Listener(), comfy_client.Deadline(None))
    big = {"prompt_id": "p1", "nodes": ["x" * MIB]}
    for _ in range(20):
        follower.on_event({"type": "execution_cached", "data": big}, size=MIB + 40)
    assert len(follower.events) == 15 and follower.kept_bytes <= comfy_jobs.MAX_KEPT_EVENT_BYTES == 16 * MIB
    assert follower.dropped == {"execution_cached": 5}


# ------------------------------------------------------------------------------------------------ uploads
def test_an_upload_streams_from_disk(server, tmp_path):
    """Reported: `run --upload` of a 5 GiB file was built in memory whole. A 64 MiB file goes up with a Python-heap
    peak under 8 MiB, and the server receives exactly the multipart body: the field, then the file's bytes."""
    path = tmp_path / 'clip "one".bin'
    marks = random.Random(1).randbytes(MIB)
    with open(path, "wb") as handle:
        handle.write(marks)
        handle.truncate(64 * MIB - MIB)
        handle.seek(0, 2)
        handle.write(marks)
    client = comfy_client.ComfyClient(server.url)
    answer, peak = traced(lambda: client.upload(path))
    client.close()
    assert answer == server.uploaded
    assert peak < 8 * MIB, f"peak {peak / MIB:.1f} MiB"
    posted = server.posted["/upload/image"]
    boundary = posted.content_type.split("boundary=")[1]
    head = posted.head[:posted.head.index(b"application/octet-stream\r\n\r\n") + 28]
    assert head.startswith(f"--{boundary}\r\n".encode()) and b'name="type"\r\n\r\ninput\r\n' in head
    assert b'name="image"; filename="clip %22one%22.bin"' in head
    digest = hashlib.sha256(head)
    digest.update(path.read_bytes())
    digest.update(f"\r\n--{boundary}--\r\n".encode())
    assert posted.sha256 == digest.hexdigest() and posted.length == len(head) + path.stat().st_size + len(boundary) + 8


# -------------------------------------------------------------------------------------- tensors from a .pt
def conditioning(tensor: torch.Tensor) -> list:
    return [[tensor, {"pooled_output": torch.zeros(1, 8)}]]


def test_cond_import_of_a_tiny_pt_holding_a_stride_0_view_writes_nothing(tmp_path, capsys):
    """Reported: a 1.8 KB `.pt` holding zeros(1).expand(2**29) wrote a 2 GiB cache (8 GiB: a crash). Here 128 MiB
    from 4 bytes: refused before any copy is made, nothing written, no torch storage over 1 MiB allocated."""
    source = tmp_path / "legacy.pt"
    torch.save(conditioning(torch.zeros(1).expand(2**25)), source)
    assert source.stat().st_size < 4096
    with PeakBytes() as peak:
        code = cond.run(argparse.Namespace(cond_command="import", source=source, name="x", dir=tmp_path / "cache",
                                           overwrite=False, prompt_text="", encoder=""))
    assert code == 2
    err = capsys.readouterr().err
    assert "strides [0]" in err and "repeats 4 bytes of data to 134,217,728" in err
    assert peak.peak < MIB and not list(tmp_path.glob("cache/*"))


def test_a_compressed_zip_record_is_refused_before_torch_load(tmp_path, capsys):
    """A weaker bound, the file's size, fails for a compressed record: 32 MiB of zeros deflate to 32 KB."""
    plain = tmp_path / "plain.pt"
    torch.save(conditioning(torch.zeros(2**23)), plain)
    source = tmp_path / "small.pt"
    with zipfile.ZipFile(plain) as original, zipfile.ZipFile(source, "w") as packed:
        for record in original.infolist():
            packed.writestr(record.filename, original.read(record.filename), compress_type=zipfile.ZIP_DEFLATED)
    plain.unlink()
    assert source.stat().st_size < 64 * 1024
    with PeakBytes() as peak:
        code = cond.run(argparse.Namespace(cond_command="import", source=source, name="x", dir=tmp_path / "cache",
                                           overwrite=False, prompt_text="", encoder=""))
    assert code == 2 and "is compressed" in capsys.readouterr().err
    assert peak.peak < MIB and not list(tmp_path.glob("cache/*"))


def test_saving_counts_each_storage_once_and_allows_small_expanded_views(tmp_path):
    """The node path too: many views of one storage count its bytes once (as real data), their copies each; a small
    expanded mask (1 MiB of repeats) is written as before."""
    base = torch.zeros(1024)
    views = [[base.expand(64, 1024), {"pooled_output": base.expand(300_000, 1024)[:1]}]]
    fmt.save_conditioning(tmp_path, "small", views)
    many = [[base.expand(16_384, 1024), {}] for _ in range(2)]  # 2 x 64 MiB from 4 KiB
    with pytest.raises(fmt.CacheError, match="repeats 4,096 bytes of data to 67,108,864"):
        fmt.save_conditioning(tmp_path, "big", many)
    assert not (tmp_path / "big.safetensors").exists()
