"""Fuzz tier: hostile workflow JSON (API and UI format) through validate, doctor --workflow and H3KitPreflight.

Property: every generated or mutated workflow gives problems / checks (and exit 2 from the CLI), never an
exception; the graph code never recurses per node, so chains of any length cost O(nodes).
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

from h3kit.adapters.workflow_file import load_graph_file
from h3kit.checks.problem import Check, Problem
from h3kit.checks.verdict import judge
from h3kit.checks.workflow import preflight_checks, workflow_checks
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.preflight import parse_workflow
from h3kit.scripts import schemas as schema_src
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
API_GRAPHS = {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "workflows" / "api").glob("*.json"))}
UI_GRAPHS = {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "workflows").glob("*.json"))}
SCHEMAS = schema_src.offline_schemas()

text = st.one_of(st.text(max_size=6), st.sampled_from(["", "\x00", "a\x00b.safetensors", "../../x", "\x1b[2J",
                                                        "\ud800", "²", "1e999", "KSampler", "CLIPLoader"]))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), text)
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
                      max_leaves=8)


@st.composite
def mutated_api_graph(draw) -> dict:
    graph = copy.deepcopy(API_GRAPHS[draw(st.sampled_from(sorted(API_GRAPHS)))])
    for _ in range(draw(st.integers(1, 6))):
        ids = sorted(graph) or ["1"]
        node_id = draw(st.sampled_from(ids))
        node = graph.get(node_id)
        action = draw(st.sampled_from(["class_type", "inputs", "input", "link", "delete", "add", "replace", "meta"]))
        if action == "class_type" and isinstance(node, dict):
            node["class_type"] = draw(values)
        elif action == "inputs" and isinstance(node, dict):
            node["inputs"] = draw(st.one_of(values, st.lists(values, max_size=3)))
        elif action == "input" and isinstance(node, dict) and isinstance(node.get("inputs"), dict) and node["inputs"]:
            node["inputs"][draw(st.sampled_from(sorted(node["inputs"])))] = draw(values)
        elif action == "link" and isinstance(node, dict) and isinstance(node.get("inputs"), dict) and node["inputs"]:
            target = draw(st.one_of(st.sampled_from(ids), text, st.integers(-3, 10**6)))
            node["inputs"][draw(st.sampled_from(sorted(node["inputs"])))] = [target, draw(st.integers(-2, 5))]
        elif action == "delete":
            graph.pop(node_id, None)
        elif action == "add":
            graph[draw(text)] = draw(st.one_of(values, st.builds(lambda ct, inputs: {"class_type": ct, "inputs": inputs},
                                                                 text, st.dictionaries(text, values, max_size=3))))
        elif action == "replace":
            graph[node_id] = draw(values)
        elif isinstance(node, dict):
            node["_meta"] = draw(values)
    return graph


@st.composite
def mutated_ui_graph(draw) -> dict:
    doc = copy.deepcopy(UI_GRAPHS[draw(st.sampled_from(sorted(UI_GRAPHS)))])
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(["nodes", "links", "extra", "groups", "version"]))
        if key == "nodes" and isinstance(doc.get("nodes"), list) and doc["nodes"] and draw(st.booleans()):
            node = draw(st.sampled_from(doc["nodes"]))
            if isinstance(node, dict):
                node[draw(st.sampled_from(["type", "widgets_values", "inputs", "outputs", "id"]))] = draw(values)
        else:
            doc[key] = draw(values)
    return doc


def _all_surfaces(graph) -> None:
    problems = judge(graph, SCHEMAS, schema_src.providing_pack).problems
    assert all(isinstance(p, Problem) for p in problems)
    checks = workflow_checks(graph, SCHEMAS, None)
    assert all(isinstance(c, Check) for c in checks)
    if isinstance(graph, dict):
        verdict, lines = preflight_checks(graph, SCHEMAS, None, sorted(SCHEMAS))
        assert all(isinstance(c, Check) for c in lines)
        assert verdict.status in ("OK", "ADAPTED", "FAIL")


@given(mutated_api_graph())
def test_mutated_api_graphs_give_problems_never_exceptions(graph):
    _all_surfaces(graph)


@given(mutated_ui_graph())
def test_mutated_ui_graphs_give_problems_never_exceptions(doc):
    _all_surfaces(doc)


@given(values)
def test_any_json_value_gives_problems_never_exceptions(value):
    _all_surfaces(value)


@given(st.sampled_from(sorted(API_GRAPHS)), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                                     min_size=1, max_size=6))
def test_mutated_bytes_are_read_or_refused_clearly(name, edits):
    raw = bytearray(json.dumps(API_GRAPHS[name]).encode())
    for position, value in edits:
        raw[position % len(raw)] = value
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "w.json"
        path.write_bytes(bytes(raw))
        graph, problem = load_graph_file(path)
        if problem is None:
            _all_surfaces(graph)
    try:
        graph = parse_workflow(bytes(raw).decode("utf-8", "replace"))
    except H3KitInputError:
        return
    _all_surfaces(graph)
