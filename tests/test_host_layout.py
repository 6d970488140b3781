"""Issue 23 item 3: no graph dies at its last node. A graph is adapted to the input layout the host serves
(checks/host_layout.py) before it is queued, or refused with a fix that validates. SaveVideo's three layouts:
flat format + codec (v0.3.64, 0.12.1), format + DynamicCombo codec (0.33.0, options served as {"key": ...}
objects), and format DynamicCombo with format.codec (>= 0.34, the shipped graphs)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from h3kit.checks.host_layout import adapt_graph
from h3kit.checks.problem import ERROR
from h3kit.checks.validator import validate_graph
from h3kit.scripts import schemas

DATA = Path(__file__).parent / "data"
API = Path(schemas.API_WORKFLOWS_DIR)


def savevideo_0330() -> dict:
    return json.loads((DATA / "savevideo_0.33.0.json").read_text())["SaveVideo"]


def savevideo_flat() -> dict:
    """v0.3.64 and 0.12.1: both combos flat."""
    return {"input": {"required": {
        "video": ["VIDEO", {}], "filename_prefix": ["STRING", {"default": "video/ComfyUI"}],
        "format": ["COMBO", {"options": ["auto", "mp4"], "default": "auto"}],
        "codec": ["COMBO", {"options": ["auto", "h264"], "default": "auto"}]}},
        "output": ["VIDEO"], "output_node": True}


def savevideo_034() -> dict:
    return copy.deepcopy(schemas.offline_schemas()["SaveVideo"])


LAYOUTS = {"flat": savevideo_flat, "0.33.0": savevideo_0330, ">=0.34": savevideo_034}
SOURCE = {"1": {"class_type": "LoadVideo", "inputs": {"file": "clip.mp4"}}}
LOAD_VIDEO = {"input": {"required": {"file": [["clip.mp4"], {}]}}, "output": ["VIDEO"], "output_node": False}


def graph_with(inputs: dict) -> dict:
    return {**copy.deepcopy(SOURCE),
            "2": {"class_type": "SaveVideo", "inputs": {"video": ["1", 0], "filename_prefix": "h3kit/t", **inputs}}}


def host(layout: str) -> dict:
    return {"LoadVideo": LOAD_VIDEO, "SaveVideo": LAYOUTS[layout]()}


def errors(graph: dict, schemas_: dict) -> list:
    return [p for p in validate_graph(graph, schemas_) if p.severity == ERROR]


# what each layout's own editor writes (>= 0.34: the pinned newest host, yzkee @783545f6, whose re-encode option
# also requires a color space)
WRITTEN = {
    "flat": {"format": "mp4", "codec": "h264"},
    "0.33.0": {"format": "mp4", "codec": "h264", "codec.encoding": "re-encode", "codec.encoding.crf": 19.0},
    ">=0.34": {"format": "mp4", "format.codec": "h264", "format.codec.encoding": "re-encode",
               "format.codec.encoding.crf": 19.0, "format.codec.encoding.color_space": "auto"},
}


@pytest.mark.parametrize("written", WRITTEN)
@pytest.mark.parametrize("served", LAYOUTS)
def test_every_savevideo_layout_is_adapted_to_every_host_and_then_validates(written, served):
    graph = graph_with(WRITTEN[written])
    adaptation = adapt_graph(graph, host(served))
    if served == ">=0.34" and written == "0.33.0":
        # not a layout difference: yzkee's re-encode needs color_space, which 0.33.0's editor never writes; its own
        # /prompt answers "required_input_missing: color_space" (measured on yzkee @783545f6, 2026-12-02)
        assert [(p.input, p.message) for p in errors(adaptation.graph, host(served))] == [
            ("format.codec.encoding.color_space", "required COMBO input is missing")]
        return
    assert errors(adaptation.graph, host(served)) == []
    moved = {c.old_key: c.new_key for c in adaptation.changes}
    save = adaptation.graph["2"]["inputs"]
    assert save["format"] == "mp4" and save.get("codec", save.get("format.codec")) == "h264"
    if written == served:
        assert adaptation.changes == [] and adaptation.graph is graph
    if served == "0.33.0" and written == ">=0.34":
        assert moved == {"format.codec": "codec", "format.codec.encoding": "codec.encoding",
                         "format.codec.encoding.crf": "codec.encoding.crf"}
        assert save["codec.encoding.crf"] == 19.0
    if served == ">=0.34" and written != ">=0.34":
        assert save["format.codec"] == "h264" and "codec" not in save
    assert graph["2"]["inputs"] == {"video": ["1", 0], "filename_prefix": "h3kit/t", **WRITTEN[written]}  # untouched


def test_the_shipped_graphs_without_adaptation_fail_on_0_33_and_flat_hosts_naming_savevideo():
    """The bug of issue 23: /prompt on 0.33.0 accepts format.codec, SaveVideo then lacks 'codec'. Offline, the
    validator must see that (a required DynamicCombo is missing), not pass it as the host does."""
    graph = graph_with(WRITTEN[">=0.34"])
    for served in ("0.33.0", "flat"):
        problems = errors(graph, host(served))
        assert [p.input for p in problems] == ["format.codec"], served
        assert "rename input 'format.codec' to 'codec'" in problems[0].fix


@pytest.mark.parametrize("served", ["0.33.0", "flat"])
def test_the_validators_proposed_fix_itself_validates(served):
    """`validate --server`'s fix on the shipped layout: applying it literally gives a graph with no error (the
    validator understands DynamicCombo options served as {"key": ...} objects)."""
    graph = graph_with({"format": "mp4", "format.codec": "h264"})
    (problem,) = errors(graph, host(served))
    renames = re.findall(r"'([^']+)' to '([^']+)'", problem.fix.split("rename input ", 1)[1])
    assert renames == [("format.codec", "codec")]
    for old, new in renames:
        graph["2"]["inputs"][new] = graph["2"]["inputs"].pop(old)
    assert errors(graph, host(served)) == []


def test_dynamic_combo_options_served_as_objects_are_checked_by_key():
    schemas_ = host("0.33.0")
    assert errors(graph_with({"format": "mp4", "codec": "h264"}), schemas_) == []
    (bad,) = errors(graph_with({"format": "mp4", "codec": "av1"}), schemas_)
    assert bad.input == "codec" and bad.fix.endswith("or for this ComfyUI codec: choose one of: auto, h264")
    # the nested float of the chosen option is range-checked under its dotted key
    (crf,) = errors(graph_with({"format": "mp4", "codec": "h264", "codec.encoding": "re-encode",
                                "codec.encoding.crf": 60.0}), schemas_)
    assert crf.input == "codec.encoding.crf" and crf.fix == "use a value <= 51.0"
    # an option's required input is required only when that option is chosen
    (missing,) = errors(graph_with({"format": "mp4", "codec": "h264", "codec.encoding": "re-encode"}), schemas_)
    assert missing.input == "codec.encoding.crf" and "required" in missing.message


def test_a_value_the_host_does_not_offer_is_not_changed_but_refused_with_the_hosts_options():
    graph = graph_with({"format": "webm", "format.codec": "av1"})
    adaptation = adapt_graph(graph, host("flat"))
    assert adaptation.graph["2"]["inputs"]["codec"] == "av1"  # moved, never rewritten to another codec
    problems = errors(adaptation.graph, host("flat"))
    (problem,) = problems  # one core-version difference naming both inputs and the host's options for each
    assert problem.fix == ("update ComfyUI to >= 0.34.0, or for this ComfyUI format: choose one of: auto, mp4; "
                           "codec: choose one of: auto, h264")


def test_every_change_is_reported_with_node_keys_and_value():
    adaptation = adapt_graph(graph_with({"format": "mp4", "format.codec": "h264"}), host("0.33.0"))
    (change,) = adaptation.changes
    assert change.text() == ("node 2 (SaveVideo): input 'format.codec' -> 'codec' (value 'h264' unchanged): this "
                             "ComfyUI's SaveVideo takes it there")
    assert change.as_dict()["from"] == "format.codec" and change.as_dict()["to"] == "codec"


@pytest.mark.parametrize("path", sorted(API.glob("*.json")), ids=lambda p: p.stem)
@pytest.mark.parametrize("served", LAYOUTS)
def test_every_shipped_graph_adapts_to_every_savevideo_layout(path, served):
    graph = json.loads(path.read_text())
    offline = {**schemas.offline_schemas(), "SaveVideo": LAYOUTS[served]()}
    adaptation = adapt_graph(graph, offline)
    assert errors(adaptation.graph, offline) == []
    assert all(c.class_type == "SaveVideo" for c in adaptation.changes)


@pytest.mark.parametrize("hostile", [None, [], "x", {"1": None}, {"1": {"class_type": 3}},
                                     {"1": {"class_type": "SaveVideo", "inputs": []}},
                                     {"1": {"class_type": "SaveVideo", "inputs": {"format": [[1]], "codec": {}}}}])
def test_hostile_graphs_are_left_alone(hostile):
    assert adapt_graph(hostile, host("0.33.0")).changes == []
