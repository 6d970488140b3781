"""Issue 33 item 1, tier (a): nothing of the pack holds ComfyUI's event loop for long. Bounds asserted by counting
steps and allocations, never by a clock:

- the on-prompt handler (adapters/server_routes.adapt_queued_prompt, on the loop) compares each undeclared input key
  only with the declared keys of its last name (checks/host_layout.py; it compared every undeclared key with every
  declared one: 20 MB of undeclared keys held the loop 30 s), leaves a node of more than MAX_NODE_KEYS keys and a
  prompt of more than MAX_HOOK_KEYS keys as sent, and never deep-copies what it does not change;
- the editor route (POST /h3kit/preflight) parses and walks the body in a worker thread, building at most
  MAX_CONTAINERS arrays and objects; the worker stops once its request is answered or given up; more requests than
  its workers and waiting line take are answered 503 at once;
- a template name no file system can hold is a 404 that says so (it was a 500, "name too long").

The loop's latency with a real ComfyUI under these bodies: tests/test_event_loop_comfyui.py (tier b)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import sys
import threading
import time
import tracemalloc
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from h3kit.adapters import bounded_json, collector, log, preflight_request, preflight_workers, server_routes
from h3kit.adapters.preflight_workers import Abandoned, StopFlag, Workers
from h3kit.checks import host_layout
from h3kit.scripts.schemas import offline_schemas

aiohttp = pytest.importorskip("aiohttp")
import route_harness  # noqa: E402
from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402
from route_harness import ROUTE, app, routes, shipped  # noqa: E402

SCHEMAS = offline_schemas()
REF2V = "MiniMaxH3ReferenceToVideo"  # 26 declared keys: four Autogrow groups (the attacked node)
JSON = {"Content-Type": "application/json"}
SAVEVIDEO_0330 = json.loads((Path(__file__).parent / "data" / "savevideo_0.33.0.json").read_text())["SaveVideo"]


def test_documented_limits():
    assert host_layout.MAX_NODE_KEYS == 1_000 and server_routes.MAX_HOOK_KEYS == 200_000
    assert server_routes.MAX_HOOK_EXAMINED_KEYS == 10_000
    assert preflight_request.MAX_CONTAINERS == 200_000
    assert preflight_workers.WORKERS == 1 and preflight_workers.WAITING == 4 and preflight_workers.POLL_S == 0.25


# --- the on-prompt handler's work: steps counted ------------------------------------------------------------

@pytest.fixture
def comparisons(monkeypatch) -> list:
    """Every comparison of two input keys the adaptation makes (host_layout._related), recorded."""
    calls: list = []
    original = host_layout._related
    monkeypatch.setattr(host_layout, "_related", lambda a, b: (calls.append((a, b)), original(a, b))[1])
    return calls


def ref2v_node(keys: list[str]) -> dict:
    return {"class_type": REF2V, "inputs": dict.fromkeys(keys, 1)}


@pytest.mark.parametrize("leaf", ["x", "ref_image_0"])
def test_each_undeclared_key_is_compared_only_with_declared_keys_of_its_name(comparisons, leaf):
    """Reported: every undeclared key was compared with every declared one (26 here): 20 MB of them held ComfyUI's
    loop 30 s. Keys whose last name no declared key has are compared with none; keys named like one declared key
    ('k1.ref_image_0', a name that fools a check on the name alone) with that one only."""
    keys = [f"k{i}.{leaf}" for i in range(900)]
    adaptation = host_layout.adapt_graph({"1": ref2v_node(keys)}, SCHEMAS)
    assert adaptation.changes == []
    assert len(comparisons) == (0 if leaf == "x" else 900)  # the old code: 900 x 26 = 23,400


def test_a_node_over_the_key_cap_is_left_as_sent_without_one_comparison(comparisons):
    keys = [f"k{i}.ref_image_0" for i in range(host_layout.MAX_NODE_KEYS + 1)]
    graph = {"1": ref2v_node(keys), "2": {"class_type": "SaveVideo", "inputs": {
        "video": ["3", 0], "filename_prefix": "x", "format": "mp4", "format.codec": "h264"}}}
    adaptation = host_layout.adapt_graph(graph, {**SCHEMAS, "SaveVideo": SAVEVIDEO_0330})
    assert adaptation.skipped == ["1"] and comparisons == [("format.codec", "codec")]
    assert [c.new_key for c in adaptation.changes] == ["codec"]  # the other nodes are still adapted
    assert adaptation.graph["1"]["inputs"] == graph["1"]["inputs"]


@pytest.fixture
def schema_walks(monkeypatch) -> list:
    """Every walk of a schema the adaptation makes (host_layout.declared_inputs), recorded by class of values."""
    walks: list = []
    original = host_layout.declared_inputs
    monkeypatch.setattr(host_layout, "declared_inputs", lambda info, values=None: (
        walks.append(values is None), original(info, values))[1])
    return walks


def savevideo(i: int, codec: str = "h264") -> dict:
    return {"class_type": "SaveVideo", "inputs": {"video": [str(i + 10_000), 0], "filename_prefix": "x",
                                                  "format": "mp4", "codec": codec}}


def test_settled_nodes_cost_one_schema_walk_per_class_and_choice(schema_walks):
    """10,000 nodes of a DynamicCombo class (SaveVideo, 0.33.0 layout) with two choices of codec: the schema is
    walked once for the class and once per choice, not once per node (each walk is ~20 us on the loop)."""
    graph = {str(i): savevideo(i, "h264" if i % 2 else "auto") for i in range(10_000)}
    adaptation = host_layout.adapt_graph(graph, {"SaveVideo": SAVEVIDEO_0330})
    assert adaptation.changes == [] and adaptation.graph is graph
    assert len(schema_walks) <= 3, len(schema_walks)  # the old code: one per node and pass, 10,000 at least


def test_past_its_budget_the_adaptation_examines_and_adapts_nothing(comparisons):
    """A prompt whose nodes to examine key by key hold more keys than the budget: nothing adapted, nothing compared
    (the hook then queues it as sent)."""
    graph = {str(i): {"class_type": "SaveVideo", "inputs": {
        "video": ["x", 0], "filename_prefix": "x", "format": "mp4", "format.codec": "h264"}} for i in range(3)}
    schemas = {"SaveVideo": SAVEVIDEO_0330}
    assert len(host_layout.adapt_graph(graph, schemas, budget=12).changes) == 3
    adaptation = host_layout.adapt_graph(graph, schemas, budget=11)
    assert adaptation.over_budget and adaptation.changes == [] and adaptation.graph is graph
    assert len(comparisons) == 3  # the first call's three: the second compared nothing


def test_the_handler_queues_a_prompt_past_its_examined_keys_as_sent(monkeypatch, caplog, comparisons):
    FakeServer(monkeypatch, {"SaveVideo": SAVEVIDEO_0330})
    per_node = 4
    nodes = server_routes.MAX_HOOK_EXAMINED_KEYS // per_node + 1
    sent = {"prompt": {str(i): {"class_type": "SaveVideo", "inputs": {
        "video": ["x", 0], "filename_prefix": "x", "format": "mp4", "format.codec": "h264"}} for i in range(nodes)}}
    with caplog.at_level("WARNING"):
        assert server_routes.adapt_queued_prompt(sent) is sent
    (line,) = caplog.messages
    assert "more than 10,000 input keys on nodes" in line and comparisons == []


def all_pairs_moves(inputs: dict, declared: dict) -> list[tuple[str, str]]:
    """The moves as the old code found them, comparing every undeclared key with every declared one (the oracle)."""
    related, moves, taken = host_layout._related, [], set(inputs)
    for key in [k for k in inputs if k not in declared]:
        targets = [d for d in declared if d not in taken and related(key, d)]
        if len(targets) == 1:
            moves.append((key, targets[0]))
            taken.add(targets[0])
    if moves:
        return moves
    for key, (_, required) in declared.items():
        if required and key not in inputs:
            sources = [k for k in inputs if k != key and related(k, key)
                       and (k not in declared or host_layout.is_hidden(declared[k][0]))]
            if len(sources) == 1:
                moves.append((sources[0], key))
    return moves


def test_the_moves_are_those_of_comparing_every_pair():
    """The index by last name finds exactly the moves comparing all pairs found: 3,000 random nodes over SaveVideo's
    0.33.0 layout and a schema with a hidden flat key, keys drawn from names that nest under each other."""
    import random

    hidden = {"input": {"required": {"a.codec": ["STRING", {}], "format": ["STRING", {}]},
                        "optional": {"codec": ["STRING", {"hidden": True}]}}}
    names = ["codec", "format.codec", "a.codec", "b.codec", "codec.encoding", "format.codec.encoding", "encoding",
             "codec.encoding.crf", "crf", "x.crf", "format", "video", "a.b.codec", "filename_prefix"]
    draw = random.Random(33)
    for info in (SAVEVIDEO_0330, hidden):
        for _ in range(1_500):
            inputs = {k: draw.choice(["h264", "mp4", "re-encode", 19]) for k in draw.sample(names, draw.randint(0, 6))}
            declared = host_layout.declared_inputs(info, inputs)
            assert host_layout._moves(inputs, declared) == all_pairs_moves(inputs, declared), inputs


class FakeServer:
    """A stand-in PromptServer whose node classes count the schema reads."""

    def __init__(self, monkeypatch, classes: dict):
        self.reads = 0
        served = {}
        for name, info in classes.items():
            served[name] = types.SimpleNamespace(GET_NODE_INFO_V1=lambda info=info: (self._read(), info)[1])
        module = types.ModuleType("server")
        module.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(
            routes=web.RouteTableDef(), add_on_prompt_handler=lambda handler: None,
            nodes=types.SimpleNamespace(NODE_CLASS_MAPPINGS=served)))
        monkeypatch.setitem(sys.modules, "server", module)

    def _read(self) -> None:
        self.reads += 1


def test_the_handler_leaves_a_prompt_over_its_key_budget_as_sent_reading_nothing(monkeypatch, caplog, comparisons):
    """A prompt of more than MAX_HOOK_KEYS input keys in all: not one schema read, not one comparison, one log line."""
    server = FakeServer(monkeypatch, {REF2V: SCHEMAS[REF2V]})
    per_node = 999
    nodes = server_routes.MAX_HOOK_KEYS // per_node + 1
    sent = {"prompt": {str(n): ref2v_node([f"k{i}.ref_image_0" for i in range(per_node)]) for n in range(nodes)}}
    with caplog.at_level("WARNING"):
        assert server_routes.adapt_queued_prompt(sent) is sent
    assert server.reads == 0 and comparisons == []
    (line,) = caplog.messages
    assert "200,799 input keys was not adapted" in line and "queued as sent" in line


def test_the_handler_names_the_nodes_it_left_as_sent_on_one_printable_line(monkeypatch, caplog):
    server = FakeServer(monkeypatch, {REF2V: SCHEMAS[REF2V]})
    node_id = "1\n[INFO] H3Kit: PASS \x1b[2Kall good"
    sent = {"prompt": {node_id: ref2v_node([f"k{i}" for i in range(host_layout.MAX_NODE_KEYS + 1)])}}
    with caplog.at_level("WARNING"):
        assert server_routes.adapt_queued_prompt(sent) is sent
    assert server.reads == 1
    (line,) = caplog.messages
    assert "more than 1,000 input keys" in line and "\n" not in line and "\x1b" not in line


def test_the_handler_copies_only_the_nodes_it_changes(monkeypatch, caplog):
    """The handler's adapted prompt shares every node it does not change (the old one deep-copied the whole prompt,
    20 MB included, on the loop); the prompt it was given is not modified."""
    FakeServer(monkeypatch, {"SaveVideo": SAVEVIDEO_0330, REF2V: SCHEMAS[REF2V]})
    big = ref2v_node([f"k{i}" for i in range(500)])
    save = {"class_type": "SaveVideo", "inputs": {"video": ["3", 0], "filename_prefix": "x", "format": "mp4",
                                                   "format.codec": "h264"}}
    sent = {"prompt": {"1": big, "2": save}}
    with caplog.at_level("WARNING"):
        queued = server_routes.adapt_queued_prompt(sent)
    assert queued["prompt"]["1"] is big and queued["prompt"]["2"]["inputs"]["codec"] == "h264"
    assert save["inputs"]["format.codec"] == "h264" and "codec" not in save["inputs"]


def test_a_summary_of_many_changes_is_one_bounded_line():
    changes = [host_layout.Change(f"{i}\n", "SaveVideo", "format.codec", "codec", "h264") for i in range(50)]
    summary = host_layout.Adaptation({}, changes).summary()
    assert "\n" not in summary and summary.endswith("; and 30 more") and summary.count("->") == 20


# --- the route's parse: in a worker, bounded by what it builds, stopped when nobody waits ---------------------

def empty_lists(count: int) -> list[bytes]:
    return [b'{"prompt": {"1": {"class_type": "X", "inputs": {"a": [' + b",".join([b"[]"] * count) + b"]}}}}"]


def test_the_parse_builds_at_most_its_budget_of_arrays_and_objects(monkeypatch):
    """Reported: 31 MiB of `[]` held the loop 34 s and took +1.5 GiB. The parse stops at MAX_CONTAINERS (here 10,000)
    with a 413: what it allocated is bounded by that, not by the body (200,000 lists would be ~13 MiB)."""
    monkeypatch.setattr(preflight_request, "MAX_CONTAINERS", 10_000)
    chunks = empty_lists(200_000)
    size = len(chunks[0])
    tracemalloc.start()
    try:
        with pytest.raises(preflight_request.RequestRefused) as refused:
            preflight_request.parse_body(chunks, StopFlag())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.status == 413 and "more than 10,000 JSON arrays and objects" in refused.value.message
    assert peak < 3 * size + 2 * 2**20, peak  # the body, its text, and 10,000 lists


def test_a_dense_body_is_refused_from_its_first_chunks_without_reading_the_rest(monkeypatch):
    """31 MiB of `[]` in 64 KiB chunks: the chunks whose `[` bytes pass the budget are parsed alone and refused
    there; the other 30 MiB are never decoded or joined (one 32 MiB join holds ComfyUI's loop 25-40 ms)."""
    monkeypatch.setattr(preflight_request, "MAX_CONTAINERS", 10_000)
    body = empty_lists(3_000_000)[0]
    chunks = [body[i:i + 2**16] for i in range(0, len(body), 2**16)]
    decoded = []
    original = preflight_request._decoded
    monkeypatch.setattr(preflight_request, "_decoded", lambda part, final: (
        decoded.append(sum(map(len, part))), original(part, final))[1])
    with pytest.raises(preflight_request.RequestRefused) as refused:
        preflight_request.parse_body(chunks, StopFlag())
    assert refused.value.status == 413 and decoded == [2**16]  # 10,001 `[` lie in the first chunk


def test_brackets_inside_strings_are_not_arrays():
    """A prompt text holding more `[` than the budget: the first chunks do not decide (they end inside the text),
    the whole body is parsed, and the graph is read."""
    graph = shipped("h3kit_handoff_demo")
    graph["9"] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "[{" * preflight_request.MAX_CONTAINERS}}
    body = json.dumps({"prompt": graph}).encode()
    chunks = [body[i:i + 2**16] for i in range(0, len(body), 2**16)]
    parsed, _ = preflight_request.parse_body(chunks, StopFlag())
    assert parsed == graph


def test_the_parse_stops_at_its_flag():
    """The worker's flag is looked at before each array and object: set after 100 of them, nothing more is built."""
    calls = []

    def stop():
        calls.append(1)
        if len(calls) > 100:
            raise Abandoned()

    with pytest.raises(Abandoned):
        preflight_request.parse_body(empty_lists(100_000), stop)
    assert len(calls) == 101


def test_a_flag_set_before_the_work_starts_builds_nothing(monkeypatch):
    flag = StopFlag()
    flag.set()
    monkeypatch.setattr(bounded_json, "loads", lambda *a, **k: pytest.fail("parsed for nobody"))
    with pytest.raises(Abandoned):
        preflight_request.parse_body(empty_lists(10), flag)


def test_the_visited_parse_reads_every_shipped_graph_as_the_c_parser_does():
    for path in sorted((Path(__file__).resolve().parent.parent / "workflows").rglob("*.json")):
        raw = path.read_bytes()
        assert bounded_json.loads(raw, "x", unique_keys=True, visit=lambda depth: None) == bounded_json.loads(
            raw, "x", unique_keys=True), path


def test_nesting_is_refused_where_it_passes_the_limit_not_at_the_interpreters():
    depths = []
    with pytest.raises(bounded_json.JSONLimitError, match="nests deeper than 64 levels"):
        bounded_json.loads("[" * 100_000 + "]" * 100_000, "x", max_depth=64, visit=depths.append)
    assert max(depths) == 64


@pytest.fixture
def table(monkeypatch):
    return routes(monkeypatch)


def serve(table, requests):
    """Run `requests(client)` against the routes on a real aiohttp server."""
    async def go():
        async with TestClient(TestServer(app(table))) as client:
            return await requests(client)

    return asyncio.run(go())


def test_the_body_is_parsed_off_the_event_loop(table, monkeypatch):
    threads = []
    original = bounded_json.loads
    monkeypatch.setattr(bounded_json, "loads", lambda *a, **k: (threads.append(threading.current_thread()),
                                                                original(*a, **k))[1])

    async def requests(client):
        response = await client.post(ROUTE, json={"prompt": shipped("h3kit_handoff_demo")})
        return response.status, threading.current_thread()

    status, loop_thread = serve(table, requests)
    assert status == 200 and threads and all(t is not loop_thread for t in threads)


def test_a_worker_given_up_stops_and_the_next_graph_gets_its_verdict(table, monkeypatch):
    """Reported: after the route gave up at 60 s its single worker kept on, and ordinary graphs got 413 for minutes.
    Here the route gives up after 0.3 s on a body whose parse alone would take seconds; its worker stops at its next
    array, frees its slot, and an ordinary graph right after gets its verdict."""
    monkeypatch.setattr(preflight_request, "CHECK_S", 0.3)
    monkeypatch.setattr(preflight_request, "MAX_CONTAINERS", 10**7)  # the parse of 900,000 runs on, for seconds
    monkeypatch.setattr(preflight_request.bounded_json, "MAX_VALUES", 10**8)  # (the value budget would refuse it)
    workers = Workers(workers=1, waiting=0)
    monkeypatch.setattr(server_routes, "_workers", lambda: workers)
    built = []
    original = preflight_request.parse_body
    monkeypatch.setattr(server_routes, "parse_body", lambda chunks, stop: original(
        chunks, lambda: (built.append(1), stop())))

    async def requests(client):
        slow = await client.post(ROUTE, data=empty_lists(900_000)[0], headers=JSON)
        given_up = (slow.status, await slow.json(), len(built))
        for _ in range(100):
            if workers.admitted == 0:
                break
            await asyncio.sleep(0.05)
        stopped_at = len(built)
        await asyncio.sleep(0.3)
        monkeypatch.setattr(preflight_request, "CHECK_S", 60.0)
        ordinary = await client.post(ROUTE, json={"prompt": shipped("h3kit_handoff_demo")})
        return given_up, stopped_at, len(built), ordinary.status, await ordinary.json()

    (status, answer, _), stopped_at, later, ordinary_status, report = serve(table, requests)
    assert status == 413 and "could not be checked within 0 s" in answer["error"]
    assert workers.admitted == 0 and stopped_at < 900_000
    assert later - stopped_at < 1_000  # the ordinary graph's own few hundred arrays and objects: nothing else ran
    assert ordinary_status == 200 and report["verdict"] in ("OK", "ADAPTED", "FAIL") and "checks" in report


def test_a_full_line_is_answered_503_at_once(table, monkeypatch):
    """One worker, no waiting place: while it works on a graph, the next request is refused at once with the reason,
    never queued behind it."""
    workers = Workers(workers=1, waiting=0)
    monkeypatch.setattr(server_routes, "_workers", lambda: workers)
    release = threading.Event()
    original = server_routes.preflight_report
    monkeypatch.setattr(server_routes, "preflight_report", lambda *a: (release.wait(30), original(*a))[1])

    async def requests(client):
        first = asyncio.ensure_future(client.post(ROUTE, json={"prompt": shipped("h3kit_handoff_demo")}))
        while workers.admitted == 0:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        second = await client.post(ROUTE, json={"prompt": shipped("h3kit_handoff_demo")})
        refused = (second.status, second.headers.get("Retry-After"), await second.json(), time.monotonic() - started)
        release.set()
        return refused, (await first).status

    (status, retry, answer, seconds), first_status = serve(table, requests)
    assert status == 503 and retry and "already working on 1 graphs (at most 1 at once, 0 waiting)" in answer["error"]
    assert answer["fix"] and first_status == 200


def test_an_abandoned_job_that_no_worker_took_never_runs():
    ran = []

    async def go():
        workers = Workers(workers=1, waiting=1)
        gate = threading.Event()
        first, second = workers.admit(), workers.admit()
        busy = asyncio.ensure_future(workers.run(first, lambda stop: gate.wait(10), timeout=10))
        while first.future is None:
            await asyncio.sleep(0.01)
        with pytest.raises(asyncio.TimeoutError):
            await workers.run(second, lambda stop: ran.append(1), timeout=0.1)
        workers.done(second)
        gate.set()
        await busy
        workers.done(first)
        await asyncio.sleep(0.1)
        return workers.admitted

    assert asyncio.run(go()) == 0 and ran == []


# --- the template route -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a" * 5_000 + ".json", "é" * 200 + ".json", "a%00b.json"])
def test_a_template_name_no_file_system_holds_is_a_404_that_says_so(table, name):
    """Reported: GET /workflow_templates/H3Kit/<5,000-character name>.json answered 500 ("name too long")."""
    async def requests(client):
        response = await client.get(f"/workflow_templates/H3Kit/{name}")
        return response.status, await response.text()

    status, text = serve(table, requests)
    assert status == 404 and "H3Kit has no template" in text
    assert ("file names are at most 255" in text) == (len(name.replace("%00", "?").encode()) > 255)


def test_every_shipped_template_name_is_one_every_file_system_holds():
    for path in (Path(__file__).resolve().parent.parent / "workflows").iterdir():
        if path.is_file():
            assert server_routes.template_file(path.name) == path or path.suffix not in server_routes.TEMPLATE_SUFFIXES


WORK_FRAMES = {"_checked_body", "_adapted_prompt"}  # the route's work in its worker; the on-prompt handler's work


def work_on_the_stack() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in WORK_FRAMES:
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def collector_passes():
    """The generation of every pass of Python's cyclic collector that starts while the pack's request work runs
    (its frame on the stack of the thread that pays for the pass), with a pass due at every allocation of a
    tracked object (threshold 1 in all three generations): work that let the collector run shows passes at once."""
    passes: list = []
    callback = lambda phase, info: (phase == "start" and work_on_the_stack()  # noqa: E731
                                    and passes.append(info["generation"]))
    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(callback)
    try:
        yield passes
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*thresholds)


def preflight_work(body: bytes, stop=None) -> tuple[int, bytes]:
    """The route's whole work in its worker (parse, walk, checks, encoding) on the offline host."""
    return server_routes.check_body(stop or StopFlag(), [body], route_harness.PACK)


def test_no_collector_pass_runs_in_the_preflight_work_even_when_one_is_due(table, collector_passes):
    """yzkee 783545f6, tier (b): a full pass over the server's objects (265-308 ms, the loop held) ran in the preflight
    worker during an ordinary graph's checks: the collector was paused for the parse only. Now for the whole work:
    a 2,000-node graph's checks (about 10,000 containers built) and a dense body's refusal run no pass, and the
    collector is on again after each."""
    body = json.dumps({"prompt": route_harness.big_graph(2_000)}).encode()
    status, answer = preflight_work(body)
    refused, _ = preflight_work(empty_lists(preflight_request.MAX_CONTAINERS)[0])
    assert (status, refused) == (200, 413) and json.loads(answer)["checks"]
    assert collector_passes == [] and gc.isenabled()


def test_no_collector_pass_runs_in_the_on_prompt_handler_even_when_one_is_due(monkeypatch, collector_passes):
    FakeServer(monkeypatch, {"SaveVideo": SAVEVIDEO_0330, REF2V: SCHEMAS[REF2V]})
    sent = {"prompt": {str(i): savevideo(i) for i in range(500)}}
    queued = server_routes.adapt_queued_prompt(sent)
    assert queued["prompt"]["0"]["inputs"]["codec"] == "h264"
    assert collector_passes == [] and gc.isenabled()


def tracked_objects() -> int:
    return len(gc.get_objects())


@pytest.mark.parametrize("stopped_in", ["parse", "checks"])
def test_stopped_preflight_work_leaves_nothing_it_built_for_the_collector(table, monkeypatch, stopped_in):
    """The collector resumes only after what the work built is freed: a work stopped halfway (its client gone)
    raises an Abandoned that holds none of its frames, so the 2,000-node graph it parsed (about 10,000 containers)
    and its report are gone when the pause ends, not kept for a later pass until the answer is dropped."""
    body = json.dumps({"prompt": route_harness.big_graph(2_000)}).encode()
    preflight_work(body)  # the checks' caches, warmed
    flag, looked = StopFlag(), []

    def stop():
        looked.append(1)
        if stopped_in == "parse" and len(looked) == 5_000:
            flag.set()
        flag()

    host = server_routes.comfyui_host
    monkeypatch.setattr(server_routes, "comfyui_host", lambda graph, pack: (
        stopped_in == "checks" and flag.set(), host(graph, pack))[1])
    before = tracked_objects()
    with pytest.raises(Abandoned) as stopped:
        preflight_work(body, stop)
    left = tracked_objects() - before
    assert stopped.value is not None and len(looked) >= 5_000
    assert left < 1_000, f"{left:,} objects of the work stopped in its {stopped_in} are still alive"


def test_finished_preflight_work_leaves_nothing_it_built_for_the_collector(table):
    body = json.dumps({"prompt": route_harness.big_graph(2_000)}).encode()
    preflight_work(body)  # the checks' caches, warmed
    before = tracked_objects()
    status, _ = preflight_work(body)
    assert status == 200 and tracked_objects() - before < 1_000


def test_overlapping_pauses_resume_the_collector_once_and_only_if_it_was_on():
    with collector.cyclic_gc_paused():
        with collector.cyclic_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other work still runs
    assert gc.isenabled()
    gc.disable()
    try:
        with collector.cyclic_gc_paused():
            pass
        assert not gc.isenabled()  # someone else turned it off: left off
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["a" * 5_000 + ".json", "é" * 200 + ".json"])
def test_comfyuis_own_template_route_answers_a_name_no_file_system_holds_with_our_404(name):
    """ComfyUI 0.33.0 serves the pack's workflows/ itself under /api/workflow_templates/H3Kit/ (aiohttp's static
    route, registered before the pack's): a 5,000-character name was a 500 there. The pack's middleware answers it
    with the pack's own 404; a name that fits reaches the static route untouched."""
    from aiohttp import web

    application = web.Application()
    server_routes.register_template_name_guard(SimpleNamespace(app=application), "H3Kit")
    application.router.add_static("/api/workflow_templates/H3Kit", server_routes.WORKFLOWS_DIR)
    shipped_name = next(p.name for p in sorted(server_routes.WORKFLOWS_DIR.glob("*.json")))

    async def go():
        async with TestClient(TestServer(application)) as client:
            long = await client.get(f"/api/workflow_templates/H3Kit/{name}")
            fits = await client.get(f"/api/workflow_templates/H3Kit/{shipped_name}")
            return long.status, await long.text(), fits.status

    status, text, fits = asyncio.run(go())
    assert status == 404 and "file names are at most 255" in text and "H3Kit has no template" in text
    assert fits == 200


def test_the_template_guard_is_logged_once_when_comfyuis_app_is_already_frozen(caplog, monkeypatch):
    monkeypatch.setattr(log, "_LOGGED_ONCE", set())
    application = web.Application()
    application.freeze()
    with caplog.at_level(logging.WARNING, logger="H3Kit"):
        server_routes.register_template_name_guard(SimpleNamespace(app=application), "H3Kit")
        server_routes.register_template_name_guard(SimpleNamespace(app=application), "H3Kit")
    assert [r.getMessage() for r in caplog.records].count(
        "H3Kit: could not guard ComfyUI's template route for this pack; a template name longer than a file name can "
        "be answers HTTP 500 there (nothing else changes)") == 1
