"""Fuzz tier: a hostile ComfyUI on 127.0.0.1 (tests/fake_comfy.py) answering `run` with generated /prompt
answers, /history entries and /ws messages.

Property: `run` ends with one of the documented exit codes (0-4), never through the "job crashed" path (an
exception nobody foresaw), prints no control character the server sent, and writes nothing outside --out.
The readers of server data are also fuzzed directly, many more times than the end-to-end runs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import tempfile
import unicodedata
from pathlib import Path

import pytest
from fake_comfy import GRAPH, FakeComfy, history_entry, ws_frame
from h3kit.adapters import comfy_jobs
from h3kit.scripts import run as runmod
from hypothesis import assume, given, settings
from hypothesis import strategies as st

TERMINAL_CONTROL = {"Cc", "Cf", "Cs"}  # control, format (bidi overrides, zero-width) and surrogate characters
END_TO_END = settings(max_examples=max(settings.default.max_examples // 10, 10))  # each example is a whole run

text = st.one_of(st.text(max_size=8), st.sampled_from(["p1", "", "\x00", "../x", "\x1b[2J", "t.png", "a/b.png",
                                                        "..", "output", "temp", "\u202e"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([10**400]),
                    st.floats(), text)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
                      max_leaves=8)


@st.composite
def history_answers(draw):
    """A finished /history answer for p1, with parts replaced by generated JSON."""
    doc = history_entry()
    entry = doc["p1"]
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["status", "status_str", "messages", "message", "outputs", "item", "entry"]))
        if where == "status":
            entry["status"] = draw(values)
        elif where == "status_str" and isinstance(entry.get("status"), dict):
            entry["status"]["status_str"] = draw(st.one_of(st.sampled_from(["success", "error"]), values))
        elif where == "messages" and isinstance(entry.get("status"), dict):
            entry["status"]["messages"] = draw(values)
        elif where == "message" and isinstance(entry.get("status"), dict) and isinstance(
                entry["status"].get("messages"), list) and entry["status"]["messages"]:
            index = draw(st.integers(0, len(entry["status"]["messages"]) - 1))
            entry["status"]["messages"][index] = draw(st.one_of(
                values, st.tuples(st.sampled_from(["execution_start", "execution_success", "execution_error",
                                                   "execution_cached", "execution_interrupted"]),
                                  st.dictionaries(st.sampled_from(["timestamp", "nodes", "node_id", "prompt_id",
                                                                   "exception_message"]), values, max_size=3))
                .map(list)))
        elif where == "outputs":
            entry["outputs"] = draw(values)
        elif where == "item":
            entry["outputs"] = {draw(text): {draw(text): [draw(st.dictionaries(
                st.sampled_from(["filename", "subfolder", "type"]), values, max_size=3))]}}
        else:
            doc = draw(st.one_of(values, st.just({"p1": draw(values)})))
    return doc


ws_messages = st.lists(st.one_of(
    values.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda kind, data: json.dumps({"type": kind, "data": data}).encode(),
              st.sampled_from(["executing", "progress", "execution_cached", "execution_success", "status"]),
              st.one_of(values, st.dictionaries(st.sampled_from(["node", "value", "max", "prompt_id", "nodes"]),
                                                values, max_size=4))),
    st.binary(max_size=20)), max_size=5)
prompt_answers = st.one_of(values, st.builds(lambda pid, errors: {"prompt_id": pid, "number": 0, "node_errors": errors},
                                             st.one_of(st.just("p1"), values), st.one_of(st.just({}), values)))


@pytest.fixture(scope="module")
def server():
    fake = FakeComfy()
    yield fake
    fake.close()


def run_against(server: FakeComfy, *, history=None, frames=None, prompt=None) -> None:
    server.reset()
    if history is not None:
        server.history = history
    if frames is not None:
        server.ws_frames = b"".join(ws_frame(message) for message in frames)
    if prompt is not None:
        server.prompt = prompt
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "wf.json").write_text(json.dumps(GRAPH))
        parser = argparse.ArgumentParser()
        runmod.add_arguments(parser)
        args = parser.parse_args([str(root / "wf.json"), "--server", server.url, "--out", str(root / "out"),
                                  "--quiet", "--timeout", "10"])
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            code = runmod.run(args)
        printed = output.getvalue()
        written = {p.relative_to(root).parts[0] for p in root.rglob("*") if p.is_file()}
    assert code in (0, 1, 2, 3, 4), printed
    assert "the job crashed" not in printed, printed
    assert not [ch for ch in printed if ch not in "\n\t" and unicodedata.category(ch) in TERMINAL_CONTROL], printed
    assert written <= {"wf.json", "out"}


@pytest.fixture(autouse=True)
def fast_polling(monkeypatch):
    monkeypatch.setattr(comfy_jobs, "POLL_INTERVAL_S", 0.01)


# -------------------------------------------------------------------------------------------- end to end
@END_TO_END
@given(history_answers())
def test_run_survives_any_history_answer(server, history):
    entry = history.get("p1") if isinstance(history, dict) else None
    status = entry.get("status") if isinstance(entry, dict) else None
    # An entry that never looks finished makes run wait for --timeout: covered by the reader tests below.
    assume(isinstance(status, dict) and (status.get("completed") is not None
                                         or status.get("status_str") in ("success", "error")))
    run_against(server, history=history)


@END_TO_END
@given(ws_messages)
def test_run_survives_any_websocket_messages(server, frames):
    run_against(server, frames=frames)


@END_TO_END
@given(prompt_answers)
def test_run_survives_any_prompt_answer(server, prompt):
    run_against(server, prompt=prompt)


# ------------------------------------------------------------------------------------ the readers directly
@given(history_answers())
def test_history_readers_never_raise(doc):
    entry = doc.get("p1") if isinstance(doc, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("status"), dict):
        return  # history_entry() treats these as "not finished yet"
    comfy_jobs.entry_state(entry)
    comfy_jobs.timing_of(entry)
    files, refused = comfy_jobs.output_files(entry)
    for item in files:
        assert "\x00" not in item.filename + item.subfolder + item.kind


@given(st.lists(values, max_size=6))
def test_websocket_events_never_raise(events):
    follower = comfy_jobs.Follower(None, "p1", comfy_jobs.Listener(), None)
    for event in events:
        if isinstance(event, dict):
            follower.on_event(copy.deepcopy(event))


@given(st.integers(100, 599), values)
def test_rejection_text_is_printable(status, body):
    message = comfy_jobs.rejection_text(status, body)
    assert not [ch for ch in message if ch != "\n" and unicodedata.category(ch) in TERMINAL_CONTROL]
