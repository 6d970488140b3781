"""Fuzz tier: hostile prompts and hostile served schemas through the layout adaptation (checks/host_layout.py) and
the schema walker (checks/node_inputs.py). The server-side on-prompt handler runs them on every prompt any client
queues, so neither may raise, nor recurse without bound, nor change anything but input names.

Properties: adapt_graph returns an Adaptation for any input; the input graph is never modified; every change moves
one key to another of the same node and keeps its value; nothing else differs; a graph adapted once needs no second
adaptation (a changed graph is stable); declared_inputs is bounded by the nesting and slot limits on any schema.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from h3kit.checks.host_layout import adapt_graph
from h3kit.checks.node_inputs import declared_inputs
from h3kit.scripts import schemas as schema_src
from hypothesis import given
from hypothesis import strategies as st

DATA = Path(__file__).parent / "data"
SAVEVIDEO = {"flat": {"input": {"required": {"video": ["VIDEO", {}], "format": [["auto", "mp4"], {}],
                                             "codec": [["auto", "h264"], {}]}}},
             "0.33.0": json.loads((DATA / "savevideo_0.33.0.json").read_text())["SaveVideo"],
             ">=0.34": schema_src.offline_schemas()["SaveVideo"]}

text = st.one_of(st.text(max_size=8), st.sampled_from(["format", "codec", "format.codec", "codec.encoding",
                                                        "codec.encoding.crf", "format.codec.encoding.crf", ".", "..",
                                                        "a.", ".codec", "\x00", "h264", "auto", "re-encode"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), text)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
                      max_leaves=8)
specs = st.recursive(
    st.one_of(st.lists(values, max_size=3), st.tuples(text, st.dictionaries(text, values, max_size=3)).map(list)),
    lambda kids: st.one_of(
        st.builds(lambda options: ["COMFY_DYNAMICCOMBO_V3", {"options": options}], st.lists(st.builds(
            lambda key, req, opt: {"key": key, "inputs": {"required": req, "optional": opt}}, text,
            st.dictionaries(text, kids, max_size=2), st.dictionaries(text, kids, max_size=2)), max_size=3)),
        st.builds(lambda spec, prefix, lo, hi: ["COMFY_AUTOGROW_V3", {"template": {
            "input": {"required": {"slot": spec}}, "prefix": prefix, "min": lo, "max": hi}}],
            kids, text, values, st.one_of(st.integers(-5, 10**9), values))),
    max_leaves=10)
schemas_ = st.dictionaries(text, st.builds(lambda req, opt: {"input": {"required": req, "optional": opt}},
                                           st.dictionaries(text, specs, max_size=4),
                                           st.dictionaries(text, specs, max_size=3)), max_size=3)


@st.composite
def prompts(draw) -> dict:
    nodes = {}
    for _ in range(draw(st.integers(0, 4))):
        class_type = draw(st.one_of(st.just("SaveVideo"), text, values))
        inputs = draw(st.one_of(st.dictionaries(text, values, max_size=6), values))
        nodes[draw(text)] = draw(st.one_of(st.just({"class_type": class_type, "inputs": inputs}), values))
    return nodes


def assert_only_names_moved(before: dict, adaptation) -> None:
    after = adaptation.graph
    if not adaptation.changes:
        assert after is before
        return
    assert set(after) == set(before)
    for node_id, node in before.items():
        moved = [c for c in adaptation.changes if c.node_id == str(node_id)]
        if not moved:
            assert after[node_id] == node
            continue
        assert {k: v for k, v in after[node_id].items() if k != "inputs"} == \
            {k: v for k, v in node.items() if k != "inputs"}
        assert sorted(map(canonical, after[node_id]["inputs"].values())) == sorted(map(canonical, node["inputs"].values()))
        for change in moved:
            assert change.old_key in node["inputs"] and change.old_key not in after[node_id]["inputs"]
            assert canonical(after[node_id]["inputs"][change.new_key]) == canonical(node["inputs"][change.old_key])


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@given(prompts(), st.sampled_from(sorted(SAVEVIDEO)))
def test_any_prompt_on_any_savevideo_layout_only_moves_input_names(prompt, layout):
    before = copy.deepcopy(prompt)
    adaptation = adapt_graph(prompt, {"SaveVideo": SAVEVIDEO[layout]})
    assert prompt == before  # the caller's prompt is never modified
    assert_only_names_moved(prompt, adaptation)
    if adaptation.changes:
        assert adapt_graph(adaptation.graph, {"SaveVideo": SAVEVIDEO[layout]}).changes == []


@given(prompts(), schemas_)
def test_hostile_served_schemas_never_break_the_adaptation(prompt, served):
    adaptation = adapt_graph(prompt, served)
    assert_only_names_moved(prompt, adaptation)


@given(st.dictionaries(text, values, max_size=6), specs)
def test_declared_inputs_is_bounded_on_any_spec(values_, spec):
    declared = declared_inputs({"input": {"required": {"x": spec}}}, values_)
    universe = declared_inputs({"input": {"required": {"x": spec}}})
    assert set(declared) <= set(universe)  # the values choose among the options the schema has
    assert all(isinstance(key, str) and key.startswith("x") for key in universe)
