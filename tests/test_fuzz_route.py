"""Fuzz tier, issue 26: the editor's preflight route (POST /h3kit/preflight) served by a worker process under
resource limits (tests/bounded_worker.py: RLIMIT_AS 3 GiB, the pack's routes on an offline host), sent generated
bodies, content types and framings. On every example:

- the answer comes within SECONDS (else: a hang) and is 200 with a report, or 400/413 with an error and a fix
  the editor shows (never a 500: nothing a client sends reaches the checks as an exception);
- the worker's peak resident memory during the request stays under PEAK_BYTES above its idle size.

Also in-process through aiohttp's test client (the same app), many more times than over the socket.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path

import pytest
from bounded_worker import Worker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

aiohttp = pytest.importorskip("aiohttp")
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402
from route_harness import ROUTE, app, routes, shipped  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak reset")

SECONDS = 60.0
PEAK_BYTES = 512 * 2**20
API_DIR = Path(__file__).resolve().parent.parent / "workflows" / "api"
RELAXED = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                    st.text(max_size=10), st.sampled_from(["\x00", "\u202e", "..", "KSampler", "H3KitDraftToLTX"]))
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids,
                                                                                        max_size=4), max_leaves=12)


@st.composite
def bodies(draw) -> bytes:
    """Mutated editor prompts, arbitrary JSON, deep nesting, huge numbers, broken UTF-8, random bytes."""
    kind = draw(st.sampled_from(["prompt", "prompt", "prompt", "json", "deep", "bytes"]))
    if kind == "json":
        return json.dumps(draw(values)).encode()
    if kind == "deep":
        depth = draw(st.integers(0, 200_000))
        return b'{"prompt": {"1": {"class_type": "X", "inputs": {"a": ' + b"[" * depth + b"]" * depth + b"}}}}"
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    graph = json.loads(draw(st.sampled_from(sorted(API_DIR.glob("*.json")))).read_text())
    for _ in range(draw(st.integers(0, 5))):
        nid = draw(st.sampled_from(sorted(graph)))
        target = draw(st.sampled_from(["value", "class_type", "inputs", "node", "absent"]))
        if target == "value" and isinstance(graph[nid], dict) and isinstance(graph[nid].get("inputs"), dict) \
                and graph[nid]["inputs"]:
            graph[nid]["inputs"][draw(st.sampled_from(sorted(graph[nid]["inputs"])))] = draw(values)
        elif target in ("class_type", "inputs") and isinstance(graph[nid], dict):
            graph[nid][target] = draw(values)
        elif target == "node":
            graph[nid] = draw(values)
    body = {"prompt": graph, "absent": draw(st.one_of(st.just({}), values))}
    return json.dumps(body).encode()


content_types = st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain",
                                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "",
                                 "application/json; charset=latin-1", "APPLICATION/JSON"])


def judge(status: int, raw: bytes) -> None:
    answer = json.loads(raw)
    assert status in (200, 400, 413), (status, answer)
    if status == 200:
        assert isinstance(answer["checks"], list) and answer["status"] in ("PASS", "WARN", "FAIL")
    else:
        assert answer["error"] and answer["fix"], answer


# ------------------------------------------------------------------------------ a worker under resource limits
@pytest.fixture(scope="module")
def route_worker():
    worker = Worker("route")
    worker.start()
    worker.idle = worker.peak_bytes()
    yield worker
    worker.stop()


def post_to(worker: Worker, body: bytes, content_type: str, chunked: bool) -> tuple[int, bytes]:
    worker.alive()
    worker.reset_peak()
    connection = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=SECONDS)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        if chunked:
            connection.request("POST", ROUTE, body=iter([body[i:i + 4096] for i in range(0, len(body), 4096)]),
                               headers=headers, encode_chunked=True)
        else:
            connection.request("POST", ROUTE, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@settings(RELAXED, max_examples=max(settings.default.max_examples // 2, 10))
@given(bodies(), content_types, st.booleans())
def test_the_route_under_limits_answers_any_body(route_worker, body, content_type, chunked):
    status, raw = post_to(route_worker, body, content_type, chunked)
    judge(status, raw)
    assert route_worker.peak_bytes() - route_worker.idle < PEAK_BYTES


# -------------------------------------------------------------------------------------- in-process, many more
@pytest.fixture(scope="module")
def table():
    with pytest.MonkeyPatch.context() as patch:
        yield routes(patch)


@RELAXED
@given(bodies(), content_types)
def test_the_route_answers_any_body(table, body, content_type):
    async def go():
        async with TestClient(TestServer(app(table))) as client:
            headers = {"Content-Type": content_type} if content_type else {}
            response = await client.post(ROUTE, data=body, headers=headers, skip_auto_headers=["Content-Type"])
            return response.status, await response.read()

    judge(*asyncio.run(asyncio.wait_for(go(), SECONDS)))


def test_the_worker_checks_a_real_graph(route_worker):
    status, raw = post_to(route_worker, json.dumps({"prompt": shipped("h3kit_handoff_demo")}).encode(),
                          "application/json", chunked=True)
    assert status == 200 and json.loads(raw)["checks"]
