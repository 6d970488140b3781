"""Issue 26, tier (b): the editor route's bounds on a real ComfyUI (its own aiohttp app, middlewares and body
limits): graphs of megabytes sent in pieces and of 10,000 nodes are checked, what a cross-site form sends and
what would recurse or crash is a 400/413 with a message, and ComfyUI keeps answering while a graph is checked."""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path

import pytest
from route_harness import big_graph

pytestmark = pytest.mark.comfyui

ROUTE = "/h3kit/preflight"
API_DIR = Path(__file__).resolve().parent.parent / "workflows" / "api"


def post(server, body: bytes, content_type: str | None = "application/json", chunked: bool = False,
         timeout: float = 120) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        if chunked:
            pieces = iter([body[i:i + 2**16] for i in range(0, len(body), 2**16)])
            connection.request("POST", ROUTE, body=pieces, headers=headers, encode_chunked=True)
        else:
            connection.request("POST", ROUTE, body=body, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw.startswith(b"{") else {"raw": raw[:300]}
    finally:
        connection.close()


def demo() -> dict:
    return json.loads((API_DIR / "h3kit_handoff_demo.json").read_text())


def test_a_5_mb_graph_sent_in_pieces_is_checked(comfyui_server):
    graph = demo()
    graph["99"] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "A long prompt. " * 350_000}}
    status, answer = post(comfyui_server, json.dumps({"prompt": graph}).encode(), chunked=True)
    assert status == 200 and isinstance(answer.get("checks"), list), answer


def test_a_10000_node_graph_is_checked_and_the_server_keeps_answering(comfyui_server):
    answers: dict = {}
    worker = threading.Thread(target=lambda: answers.update(
        route=post(comfyui_server, json.dumps({"prompt": big_graph(10_000)}).encode())))
    worker.start()
    stats = []
    while worker.is_alive():
        started = time.monotonic()
        comfyui_server.get("/system_stats", timeout=30)
        stats.append(time.monotonic() - started)
        time.sleep(0.2)
    worker.join()
    status, answer = answers["route"]
    assert status == 200 and answer["fail"] == 0, answer.get("error")
    assert max(stats, default=0) < 10, stats  # the checks run beside ComfyUI's event loop


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_what_a_cross_site_form_sends_is_refused(comfyui_server, content_type):
    status, answer = post(comfyui_server, json.dumps({"prompt": demo()}).encode(), content_type)
    assert status == 400 and "application/json only" in answer["error"] and answer["fix"], answer


@pytest.mark.parametrize("body, words", [
    (b'{"prompt": {"1": {"class_type": "X", "inputs": {"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}}}",
     "nests deeper than 64 levels"),
    (json.dumps({"prompt": {"7": {"class_type": ["KSampler"], "inputs": {}}}}).encode(), "class_type is a JSON array"),
    (b"\xff\xfe not json", "not UTF-8"),
])
def test_hostile_bodies_are_400_with_a_message(comfyui_server, body, words):
    status, answer = post(comfyui_server, body)
    assert status == 400 and words in answer["error"], answer


def test_one_node_too_many_is_413(comfyui_server):
    status, answer = post(comfyui_server, json.dumps({"prompt": big_graph(10_001)}).encode())
    assert status == 413 and "at most 10,000" in answer["error"], answer
