"""Issue 30: ComfyUI's official MiniMax-H3 / LTX-2.x templates are the oracle of the pack's offline verdict (tier a).

Each graph of tests/data/official_templates/ was converted to API format by the real frontend (1.58.1, the editor's
own graph-to-prompt) and posted to each host's /prompt with placeholder files named as its models and inputs, the
pack not installed (tests/official_templates.py; docs/testing.md). A rule that FAILs a graph a host accepts is a bug
in the rule; where a host rejects a graph, the pack says so on the same node and input.
"""

from __future__ import annotations

import pytest
from h3kit.checks.problem import ERROR
from h3kit.checks.verdict import judge
from h3kit.scripts import schemas as schema_src
from official_templates import corpus, manifest, runs_whole

CORPUS = corpus()
# templates-json 0.1.47 is what ComfyUI 0.33.0 (kat3ri @0f1fa67a) pins (comfyui-workflow-templates 0.11.41), 0.1.50
# what yzkee @783545f6 pins (0.11.44), 0.1.123 the newest on PyPI (2026-10): the H3 and LTX-2.x graphs of each
TEMPLATES_PER_VERSION = {"0.1.47": 21, "0.1.50": 21, "0.1.123": 28}
# The two hosts that serve native H3 (H3KIT_HOST_TAG_<n>): offline, the pack cannot know a host's node list, so the
# verdicts of hosts without H3 (v0.3.64, 0.12.1: missing nodes) are compared on those hosts (tier b), not here.
HOSTS = ("kat3ri-0f1fa67a", "yzkee-783545f6")


def _label(graph) -> str:
    return graph.label


def offline_problems(graph: dict) -> list:
    """What offline `validate` says (checks.verdict.judge with the pinned schemas and the pack's own nodes)."""
    return judge(graph, schema_src.offline_schemas(), schema_src.providing_pack, schema_src.own_node_ids()).problems


def _runs_whole_everywhere(graph) -> bool:
    return all(runs_whole(graph.verdicts[host]) for host in HOSTS)


def test_corpus_holds_every_official_h3_and_ltx_template_of_each_version():
    counts: dict[str, int] = {}
    for graph in CORPUS:
        counts[graph.package_version] = counts.get(graph.package_version, 0) + 1
    assert counts == TEMPLATES_PER_VERSION
    assert all(set(graph.verdicts) >= set(HOSTS) for graph in CORPUS), "a host's verdict is missing: rebuild"
    assert "frontend 1.58.1" in {e["converted_by"].split(" on ")[0] for e in manifest()["templates"]}


@pytest.mark.parametrize("graph", [g for g in CORPUS if _runs_whole_everywhere(g)], ids=_label)
def test_a_template_every_host_runs_whole_gets_no_error_offline(graph):
    errors = [p for p in offline_problems(graph.graph) if p.severity == ERROR]
    assert errors == [], "\n".join(f"{p.node_id} {p.class_type} {p.input}: {p.message}" for p in errors)


@pytest.mark.parametrize("graph", [g for g in CORPUS if not _runs_whole_everywhere(g)], ids=_label)
def test_a_template_a_host_rejects_is_named_on_the_same_node(graph):
    """Rejected, or accepted with outputs ComfyUI drops (its answer names their nodes): the pack says so there."""
    problems = offline_problems(graph.graph)
    for host in HOSTS:
        verdict = graph.verdicts[host]
        if runs_whole(verdict):
            continue
        if verdict.get("error") == "missing_node_type":
            # the frontend sends a node whose type it does not know with "class_type": null (the type's name is
            # lost): ComfyUI refuses the prompt, and so does the pack, on that node
            untyped = {nid for nid, node in graph.graph.items() if node.get("class_type") is None}
            assert untyped and graph.missing_nodes, (graph.label, graph.missing_nodes)
            flagged = {p.node_id for p in problems if p.severity == ERROR}
            assert untyped <= flagged, (host, untyped, flagged)
            continue
        for node_id, errors in verdict["node_errors"].items():
            flagged = {p.input for p in problems if p.node_id == node_id and p.severity == ERROR}
            expected = {e.split(": ", 1)[1] for e in errors if ": " in e}
            assert expected <= flagged, (host, node_id, errors, flagged)


def _graph(label: str):
    return next(g for g in CORPUS if g.label == label)


def test_a_node_the_editor_could_not_type_is_named_as_a_missing_pack_with_the_fix_that_works():
    """The frontend exports a node of a type the host lacks with "class_type": null (FastVideo's BlockSparseAttention
    here); ComfyUI answers "has no class_type ... a custom node is missing". The pack says which node and what to do."""
    (problem,) = [p for p in offline_problems(_graph("0.1.123/video_fastvideo_fasth3_t2v").graph)
                  if p.node_id == "105:127"]
    assert problem.severity == ERROR and "a custom node pack this workflow needs is not installed" in problem.message
    assert "Install Missing Custom Nodes" in problem.fix


def test_a_newer_templates_option_gets_a_value_this_host_takes():
    """0.1.123's CreateVideo sends bit_depth "auto" to hosts whose bit_depth is an INT of 8..10 (both native-H3 hosts
    refuse node 130 with invalid_input_type): the fix names a value that works here."""
    graph = _graph("0.1.123/video_minimax_h3_multiframe_reference")
    assert graph.verdicts["kat3ri-0f1fa67a"]["node_errors"] == {"130": ["invalid_input_type: bit_depth"]}
    (problem,) = [p for p in offline_problems(graph.graph) if p.node_id == "130"]
    assert (problem.input, problem.severity) == ("bit_depth", ERROR)
    assert "give a whole number (>= 8 and <= 10), e.g. its default 8" in problem.fix
