"""Issue 26, the editor's preflight route (POST /h3kit/preflight) as the review attacked it, through a real
aiohttp server (tests/route_harness.py): the whole body is read up to its cap (32 MiB) within its time (60 s),
JSON only, parsed without recursion limits turning into 500s, every refusal a 400 or 413 with a message the
editor shows, graphs checked up to the documented 10,000 nodes, the checks beside ComfyUI's event loop within
60 s."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402
from h3kit.adapters import preflight_request  # noqa: E402
from route_harness import ROUTE, app, big_graph, routes, shipped  # noqa: E402

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def table(monkeypatch):
    return routes(monkeypatch)


def post(table, data=None, headers=None, chunks=None, delay=0.0, **kwargs) -> tuple[int, dict, float]:
    """(status, JSON answer, seconds). `chunks`: the body sent as separate pieces, `delay` seconds apart."""
    async def go():
        async with TestClient(TestServer(app(table))) as client:
            body = data
            if chunks is not None:
                async def pieces():
                    for piece in chunks:
                        await asyncio.sleep(delay)
                        yield piece
                body = pieces()
            started = time.monotonic()
            response = await client.post(ROUTE, data=body, headers=headers, **kwargs)
            text = await response.read()
            return response.status, json.loads(text), time.monotonic() - started

    return asyncio.run(go())


def long_prompt_graph(megabytes: float) -> dict:
    graph = shipped("h3_ltx_two_stage")
    for node in graph.values():
        if isinstance(node["inputs"].get("prompt"), str):
            node["inputs"]["prompt"] = "A long prompt. " * int(megabytes * 2**20 / 15)
    return graph


def test_documented_limits():
    assert preflight_request.MAX_BODY_BYTES == 32 * 2**20 and preflight_request.MAX_NODES == 10_000
    assert preflight_request.BODY_READ_S == 60.0 and preflight_request.CHECK_S == 60.0


@pytest.mark.parametrize("megabytes", [1, 5])
def test_a_graph_of_megabytes_sent_in_pieces_is_read_whole(table, megabytes):
    """Reported: the route read only the first network chunk (`content.read(n)` returns what has arrived), so a
    valid 1-5 MB graph (a long prompt) got 400 'body is not JSON'. Sent here in 64 KiB pieces, 1 ms apart."""
    raw = json.dumps({"prompt": long_prompt_graph(megabytes)}).encode()
    pieces = [raw[i:i + 2**16] for i in range(0, len(raw), 2**16)]
    status, answer, _ = post(table, headers=JSON, chunks=pieces, delay=0.001)
    assert status == 200 and answer["status"] in ("PASS", "WARN"), answer


def test_a_10000_node_graph_is_checked(table):
    """Reported: a valid graph of 10,000 nodes got 400. It is checked (about 2 s; was quadratic: 53 s)."""
    status, answer, seconds = post(table, json={"prompt": big_graph(10_000)})
    assert status == 200 and answer["fail"] == 0 and seconds < 30, (answer.get("error"), seconds)


def test_one_node_over_the_limit_is_413_with_the_numbers(table):
    status, answer, _ = post(table, json={"prompt": big_graph(10_001)})
    assert status == 413 and "10,001 nodes; at most 10,000" in answer["error"] and answer["fix"]


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deep_nesting_is_400_not_500(table, depth):
    """Reported: JSON nested 100,000 deep answered 500."""
    body = b'{"prompt": {"1": {"class_type": "X", "inputs": {"a": ' + b"[" * depth + b"]" * depth + b"}}}}"
    status, answer, _ = post(table, data=body, headers=JSON)
    assert status == 400 and "nests deeper than 64 levels" in answer["error"]


@pytest.mark.parametrize("node, words", [
    ({"class_type": ["KSampler"], "inputs": {}}, "class_type is a JSON array"),
    ({"class_type": {"a": 1}, "inputs": {}}, "class_type is a JSON object"),
    ({"class_type": 7, "inputs": {}}, "class_type is a JSON number"),
    ({"class_type": "KSampler", "inputs": [1, 2]}, "'inputs' is a JSON array"),
    (None, "the node is a JSON null"),
    ([1, 2], "the node is a JSON array"),
])
def test_malformed_nodes_are_400_naming_the_node(table, node, words):
    """Reported: a class_type given as a list answered 500."""
    status, answer, _ = post(table, json={"prompt": {"7": node}})
    assert status == 400 and "node 7" in answer["error"] and words in answer["error"] and answer["fix"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          None, "application/json-patch+json", "text/json"])
def test_only_json_is_accepted(table, content_type):
    """Reported: text/plain bodies were accepted, so a cross-site form could post to the route."""
    raw = json.dumps({"prompt": shipped("h3kit_handoff_demo")}).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    status, answer, _ = post(table, data=raw, headers=headers, skip_auto_headers=["Content-Type"])
    assert status == 400 and "application/json only" in answer["error"]


@pytest.mark.parametrize("node, words", [({"inputs": {}}, "class_type is missing"),
                                         ({"class_type": None, "inputs": {}}, "a custom node pack this workflow needs is not installed"),
                                         ({"class_type": "KSampler\n", "inputs": {}}, "not printable text")])
def test_nodes_an_editor_sends_for_missing_types_are_reported_on_the_node(table, node, words):
    """The editor sends a node without class_type for a node type the server lacks: checked, the node named."""
    graph = {**shipped("h3kit_handoff_demo"), "99": node}
    status, answer, _ = post(table, json={"prompt": graph})
    assert status == 200 and any(c.get("node_id") == "99" and words in c["detail"] for c in answer["checks"]), answer


def test_a_form_post_is_refused(table):
    """What a cross-site HTML form sends: urlencoded fields, never read as a graph."""
    status, answer, _ = post(table, data={"prompt": json.dumps(shipped("h3kit_handoff_demo"))})
    assert status == 400 and "application/x-www-form-urlencoded" in answer["error"]


@pytest.mark.parametrize("charset, status", [("utf-8", 200), ("UTF-8", 200), ("latin-1", 400), ("utf-16", 400)])
def test_charsets(table, charset, status):
    raw = json.dumps({"prompt": shipped("h3kit_handoff_demo")}).encode()
    got, answer, _ = post(table, data=raw, headers={"Content-Type": f"application/json; charset={charset}"})
    assert got == status, answer


def test_a_declared_oversized_body_is_413_before_reading(table):
    status, answer, seconds = post(table, data=b"x", headers={**JSON, "Content-Length": str(64 * 2**20)})
    assert status == 413 and "67,108,864 bytes; at most 33,554,432" in answer["error"]


def test_an_undeclared_oversized_body_is_413_at_the_cap(table, monkeypatch):
    monkeypatch.setattr(preflight_request, "MAX_BODY_BYTES", 2**20)
    status, answer, _ = post(table, headers=JSON, chunks=[b" " * 2**16] * 40)
    assert status == 413 and "over 1,048,576 bytes" in answer["error"]


def test_a_body_trickled_past_its_time_is_400(table, monkeypatch):
    monkeypatch.setattr(preflight_request, "BODY_READ_S", 1.0)
    status, answer, seconds = post(table, headers=JSON, chunks=[b" "] * 100, delay=0.1)
    assert status == 400 and "did not arrive within 1 s" in answer["error"] and seconds < 5


def test_a_graph_that_takes_too_long_to_check_is_413(table, monkeypatch):
    """The checks run beside ComfyUI's event loop, at most CHECK_S (60 s; 0.2 s here) per graph."""
    from h3kit.adapters import server_routes

    monkeypatch.setattr(preflight_request, "CHECK_S", 0.2)
    original = server_routes.preflight_report
    monkeypatch.setattr(server_routes, "preflight_report", lambda *a: (time.sleep(1), original(*a))[1])
    status, answer, _ = post(table, json={"prompt": shipped("h3kit_handoff_demo")})
    assert status == 413 and "could not be checked within 0 s" in answer["error"]


@pytest.mark.parametrize("raw", [
    b"", b"{not json", b'"a string"', b"[]", b"null", b'{"prompt": {}}', b'{"prompt": [1]}', b'{"graph": {}}',
    b"\xff\xfe{}", b'{"prompt": {"1": {"class_type": "X", "inputs": {}}, "1": {}}}',
    b'{"prompt": {"1": {"class_type": "X", "inputs": {"a": ' + b"9" * 5000 + b"}}}}",
    b"\x00" * 100,
])
def test_every_refusal_is_400_or_413_with_a_message(table, raw):
    status, answer, _ = post(table, data=raw, headers=JSON)
    assert status in (400, 413) and answer["error"] and answer["fix"], answer
