"""Issue 33 item 1, tier (b): ComfyUI's event loop keeps answering while hostile bodies reach the pack, on the real
host. Measured inside the server: a timer task on its own loop (tests/comfyui_standins/loop_probe.py: how late a
20 ms tick wakes; a busy test client never counts), the longest run of each on-prompt handler, and the server's
memory from /proc (its peak resident size, VmHWM, reset before each body, minus its resident size before).

Bodies (the attacks of issue 33):
- POST /prompt of 20 MB of undeclared input keys on MiniMaxH3ReferenceToVideo: the pack's handler held the loop
  16-30 s. ComfyUI's own parse of such a body holds its loop 2-3 s whatever the pack does (the same body on a node
  type ComfyUI lacks), so here the pack's handler itself must return within MAX_LAG_MS; the whole lateness is
  only reported (in the assertion message when the handler fails);
- POST /h3kit/preflight of 31 MiB of `[]` (loop held 30 s, +1.5 GiB), four of them at once (33 s; 115 s for the
  four answers), and an ordinary graph right after one whose client left: the loop answers within MAX_LAG_MS
  throughout, and the ordinary graph gets its verdict at once;
- GET /workflow_templates/H3Kit/<5,000-character name>.json: a 404 that says why (it was a 500).

The pack's work in ComfyUI's process (the preflight worker, the on-prompt handler) runs with Python's cyclic
collector paused (adapters/collector.py): a full pass that ComfyUI's own allocations made due is never paid for
there (yzkee 783545f6: 265-308 ms, the loop late as long, when only the parse was paused).

Tier (a) of the same bounds, counted in steps and allocations: tests/test_event_loop.py."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from comfyui_host import NATIVE_H3

pytestmark = pytest.mark.comfyui

MAX_LAG_MS = 100  # issue 33: "ComfyUI's loop answers within 100 ms throughout"
MAX_GROWTH = 1 << 30  # issue 33: "no memory past 1 GiB over the baseline"
PROBE = "/h3kit_test/loop_lag"
FULL_PASS_MS = 50  # a full collector pass over a running ComfyUI takes 240-360 ms here; young passes 0-10 ms
API = Path(__file__).resolve().parent.parent / "workflows" / "api"


def post(server, route: str, body: bytes, timeout: float = 180, answer: bool = True) -> tuple[int | None, dict]:
    """(status, JSON answer) of a raw POST; `answer` False: the body is sent and the connection closed at once."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        connection.request("POST", route, body=body, headers={"Content-Type": "application/json"})
        if not answer:
            connection.sock.shutdown(socket.SHUT_RDWR)
            return None, {}
        response = connection.getresponse()
        text = response.read()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, {"text": text[:300].decode(errors="replace")}
    finally:
        connection.close()


def memory(server) -> dict[str, int]:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in status.splitlines()
            if line.startswith(("VmRSS:", "VmHWM:"))}


class Measured:
    """One body's effect on the server: the loop's lateness, the handlers' longest runs, its memory growth."""

    def __init__(self, server):
        self.server = server

    def __enter__(self) -> Measured:
        self.server.get(PROBE)  # the timer runs from the first call; this call closes the window before
        time.sleep(0.3)
        self.server.get(PROBE)
        Path(f"/proc/{self.server.process.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        self.before = memory(self.server)["VmRSS"]
        self.started = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.monotonic() - self.started
        time.sleep(0.3)  # a tick after the last answer
        self.window = self.server.get(PROBE, timeout=300)
        self.growth = memory(self.server)["VmHWM"] - self.before

    @property
    def lag_ms(self) -> float:
        return self.window["max_ms"]

    @property
    def pack_lag_ms(self) -> float:
        """The lateness the pack answers for: all of it, less the longest collector pass that started outside the
        pack's request work (loop_probe.in_the_packs_work). Such a pass is the server's backlog, due whoever
        allocates next (a 20 MB /prompt ComfyUI parsed itself leaves one of 240-360 ms)."""
        return self.lag_ms - self.window["gc_host_ms"]

    def handler_ms(self, name: str) -> float:
        return max((ms for handler, ms in self.window["handlers"].items() if handler.endswith(name)), default=0.0)

    def __str__(self) -> str:
        return (f"loop late by up to {self.lag_ms:.0f} ms over {self.window['ticks']} ticks (longest GC pass "
                f"{self.window['gc_max_ms']:.0f} ms, generation {self.window['gc_generation']}; in the pack's work "
                f"{self.window['gc_pack_ms']:.0f} ms, outside it {self.window['gc_host_ms']:.0f} ms), handlers {self.window['handlers']}, peak memory "
                f"+{self.growth / 2**20:.0f} MiB, {self.seconds:.1f} s")


@pytest.fixture(scope="module")
def server(comfyui_server):
    comfyui_server.get(PROBE)  # starts the timer
    return comfyui_server


def undeclared_keys(class_type: str, megabytes: float = 20) -> bytes:
    keys, size, i = [], 0, 0
    while size < megabytes * 1_000_000:
        keys.append(f'"k{i:07d}": {i % 10}')
        size += len(keys[-1]) + 2
        i += 1
    return (f'{{"client_id": "h3kit-loop-test", "prompt": {{"1": {{"class_type": "{class_type}", "inputs": {{'
            + ", ".join(keys) + "}}}}").encode()


def empty_lists(mebibytes: float = 31) -> bytes:
    return b"[" + b",".join([b"[]"] * int(mebibytes * 2**20 / 3)) + b"]"


def ordinary() -> bytes:
    return json.dumps({"prompt": json.loads((API / "h3kit_handoff_demo.json").read_text())}).encode()


def test_the_prompt_handler_returns_within_the_bound_on_20_mb_of_undeclared_keys(server):
    """Reported: 30 s (0.66 s for the same body on a node ComfyUI lacks). The lateness ComfyUI's own parse causes
    is measured on that node type and shown beside the pack's."""
    server.require(NATIVE_H3)
    body = undeclared_keys("H3KitNoSuchNode")
    with Measured(server) as baseline:
        status, _ = post(server, "/prompt", body)
    assert status == 400
    body = undeclared_keys("MiniMaxH3ReferenceToVideo")
    with Measured(server) as attacked:
        status, answer = post(server, "/prompt", body)
    assert status == 400, answer  # ComfyUI refuses it itself: required inputs missing
    pack_ms = attacked.handler_ms("adapt_queued_prompt")
    print(f"20 MB of undeclared keys: {attacked}; on a node ComfyUI lacks: {baseline}")
    assert 0 < pack_ms <= MAX_LAG_MS, f"the pack's handler: {pack_ms} ms; {attacked} (ComfyUI alone: {baseline})"
    assert attacked.growth < MAX_GROWTH, str(attacked)
    assert "was not adapted to this ComfyUI's input layout" in server.log()


def test_the_prompt_handler_returns_within_the_bound_on_a_10000_node_prompt(server):
    """The handler's whole work on the largest prompt it adapts: 10,000 nodes (no output node, so ComfyUI refuses
    it after the handler ran and nothing is queued)."""
    graph = {str(i): {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}}
             for i in range(10_000)}
    with Measured(server) as attacked:
        status, answer = post(server, "/prompt", json.dumps({"prompt": graph}).encode())
    assert status == 400, answer
    pack_ms = attacked.handler_ms("adapt_queued_prompt")
    print(f"10,000 nodes: {attacked}")
    assert 0 < pack_ms <= MAX_LAG_MS, f"the pack's handler: {pack_ms} ms; {attacked}"


def test_31_mib_of_empty_arrays_to_the_preflight_leave_the_loop_answering(server):
    """Reported: the loop held 34 s and the server grew 1.5 GiB."""
    body = empty_lists()
    with Measured(server) as attacked:
        status, answer = post(server, "/h3kit/preflight", body)
    print(f"31 MiB of []: {attacked}")
    assert attacked.pack_lag_ms <= MAX_LAG_MS and attacked.growth < MAX_GROWTH, str(attacked)
    assert status == 413 and "JSON arrays and objects" in answer["error"], answer


def test_four_at_once_leave_the_loop_answering(server):
    """Reported: 61 s of a held loop, +2.3 GiB. Each is refused (413), or 503 at once when the line is full."""
    body = empty_lists()
    answers: list = []
    with Measured(server) as attacked:
        senders = [threading.Thread(target=lambda: answers.append(post(server, "/h3kit/preflight", body)))
                   for _ in range(4)]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
    statuses = [status for status, _ in answers]
    print(f"four at once: {statuses}, {attacked}")
    assert attacked.pack_lag_ms <= MAX_LAG_MS and attacked.growth < MAX_GROWTH, str(attacked)
    assert len(statuses) == 4 and set(statuses) <= {413, 503} and 413 in statuses, answers


def test_an_ordinary_graph_after_an_abandoned_one_gets_its_verdict_at_once(server):
    """Reported: after the route gave up on a graph its worker kept on, and ordinary graphs got 413 for minutes.
    Here the client of 31 MiB of `[]` leaves as soon as it has sent it; an ordinary graph right after is checked."""
    body = empty_lists()
    with Measured(server) as attacked:
        post(server, "/h3kit/preflight", body, answer=False)
        started = time.monotonic()
        status, report = post(server, "/h3kit/preflight", ordinary(), timeout=60)
        seconds = time.monotonic() - started
    print(f"abandoned, then an ordinary graph ({seconds:.1f} s): {attacked}")
    assert status == 200 and report["verdict"] in ("OK", "ADAPTED", "FAIL") and report["checks"], report
    assert seconds < 10 and attacked.pack_lag_ms <= MAX_LAG_MS, f"{seconds:.1f} s; {attacked}"


def test_an_ordinary_graph_right_after_comfyuis_own_big_prompt_runs_no_collector_pass(server):
    """yzkee 783545f6, 2026-12-02: after ComfyUI parsed a 20 MB /prompt itself, a full pass of Python's cyclic
    collector over the server's objects was due, and the next allocations that asked for one paid for it: the
    preflight worker's checks of an ordinary graph, 265-361 ms with the interpreter lock held (the loop late as long).
    The pack's work now runs with the collector paused (adapters/collector.py): no pass starts in it.
    The debt stays ComfyUI's: on v0.3.64 its own thread paid it in the same window once (244 ms, generation 2), so
    the loop's lateness beyond that pass is what is asserted, as ComfyUI's own parse is in the 20 MB test."""
    post(server, "/prompt", undeclared_keys("H3KitNoSuchNode"))
    with Measured(server) as attacked:
        status, report = post(server, "/h3kit/preflight", ordinary(), timeout=60)
    print(f"an ordinary graph after ComfyUI's own 20 MB prompt: {attacked}")
    assert status == 200 and report["checks"], report
    assert attacked.window["gc_pack_ms"] < FULL_PASS_MS and attacked.pack_lag_ms <= MAX_LAG_MS, str(attacked)


@pytest.mark.parametrize("prefix", ["/workflow_templates/H3Kit/", "/api/workflow_templates/H3Kit/"])
def test_a_template_name_no_file_system_holds_is_a_404_that_says_why(server, prefix):
    """Reported: 500, "name too long". Under /api, where the frontend asks, 0.33.0 answers from its own static route
    for every custom node's workflows/ folder, registered before the pack's: the pack's middleware answers there."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", prefix + "a" * 5_000 + ".json")
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    assert response.status == 404 and "file names are at most 255" in text, text[:300]
