"""Issue 25: the clip bench's graph surgery and run order (scripts/bench_clip.py), and the block bench's variant
syntax (scripts/bench_lowvram.py), on CPU without a host: what is measured must be the shipped graph with the
pack's nodes placed where docs/lowvram.md says (last before the sampler), nothing else changed."""

from __future__ import annotations

import json

import pytest
from h3kit.scripts import bench_clip
from h3kit.scripts.bench_lowvram import parse_variant
from hypothesis import given
from hypothesis import strategies as st

SHIPPED = {k: v for k, v in json.loads(bench_clip.GRAPH.read_text()).items() if isinstance(v, dict)}


def _changed_nodes(graph: dict) -> set[str]:
    return {nid for nid, node in graph.items() if SHIPPED.get(nid) != node}


def test_host_variant_is_the_shipped_graph_but_text_seeds_and_guard_modes():
    graph = bench_clip.build_graph("two_stage", "host", 7, tiny=False)
    assert set(graph) == set(SHIPPED)
    assert _changed_nodes(graph) == {"4", "12", "31", "33", "35"}
    assert graph["4"] == {"class_type": "H3KitBenchCachedText", "inputs": {}}
    assert graph["12"]["inputs"]["noise_seed"] == graph["31"]["inputs"]["noise_seed"] == 7
    assert graph["33"]["inputs"]["mode"] == graph["35"]["inputs"]["mode"] == "warn"
    assert graph["8"]["inputs"]["width"] == 672 and graph["16"]["inputs"]["target_width"] == 1344


def test_pack_nodes_sit_last_before_each_sampler():
    graph = bench_clip.build_graph("two_stage", "pack", 42, tiny=False)
    chain = [graph[n]["class_type"] for n in ("90", "91", "92")]
    assert chain == ["H3KitLowVRAMAttention", "H3KitChunkFeedForward", "H3KitAttentionBackend"]
    assert graph["90"]["inputs"]["model"] == ["3", 0] and graph["95"]["inputs"]["model"] == ["30", 0]
    assert graph["9"]["inputs"]["model"] == graph["11"]["inputs"]["model"] == ["92", 0]
    assert graph["29"]["inputs"]["model"] == ["97", 0]
    assert graph["90"]["inputs"]["head_chunks"] == 0 and graph["91"]["inputs"]["chunks"] == 0
    assert graph["92"]["inputs"]["backend"] == graph["97"]["inputs"]["backend"] == "cudnn"


def test_native_is_stage_one_at_full_size_with_its_own_save():
    graph = bench_clip.build_graph("native", "host", 42, tiny=False)
    assert {n["class_type"] for n in graph.values()} >= {"SamplerCustomAdvanced", "VAEDecode", "SaveVideo"}
    assert not {nid for nid, n in graph.items() if n["class_type"].startswith("LTX") or nid == "32"}
    assert (graph["8"]["inputs"]["width"], graph["8"]["inputs"]["height"], graph["8"]["inputs"]["length"]) == \
        (1344, 768, 124)
    assert graph["40"]["inputs"]["images"] == ["14", 0] and graph["41"]["inputs"]["video"] == ["40", 0]


def test_no_lora_bypasses_only_the_lora_node():
    graph = bench_clip.build_graph("two_stage", "host", 42, tiny=False, lora=False)
    assert "2" not in graph and graph["3"]["inputs"]["model"] == ["1", 0]


@pytest.mark.parametrize(("plan", "caps", "expected"), [
    ("two_stage:pack:warm,native:host", "none,24",
     [(None, "two_stage", "pack", True), (None, "native", "host", False),
      (24.0, "two_stage", "pack", True), (24.0, "native", "host", False)]),
    ("two_stage:pack@24,two_stage:host@none,native:host", "16",
     [(24.0, "two_stage", "pack", False), (None, "two_stage", "host", False), (16.0, "native", "host", False)]),
])
def test_run_order(plan, caps, expected):
    assert bench_clip.run_order(plan, caps) == expected


@pytest.mark.parametrize(("spec", "expected"), [
    ("host", (None, None, None)), ("auto", (0, 0, None)), ("7/9", (7, 9, None)), ("cudnn", (None, None, "cudnn")),
    ("auto+cudnn", (0, 0, "cudnn")), ("7/9+sage", (7, 9, "sage")),
])
def test_block_bench_variants(spec, expected):
    assert parse_variant(spec) == expected


def test_unknown_block_bench_variant_is_refused():
    with pytest.raises(SystemExit, match="unknown variant part 'turbo'"):
        parse_variant("auto+turbo")


@pytest.mark.parametrize("plan", ["two_stage", "two_stage:turbo", "native:host:cold", "x:host", "two_stage:pack@-3",
                                  "two_stage:pack@lots", "two_stage:pack:warm:warm"])
def test_malformed_plan_items_are_refused_with_the_syntax(plan):
    with pytest.raises(SystemExit, match="graph:variant|VRAM cap"):
        bench_clip.run_order(plan, "none")


@given(st.text(alphabet="twosage_nhic:@,0123456789.-", max_size=40), st.text(alphabet="none0123456789.,-", max_size=12))
def test_any_plan_text_parses_or_is_refused_never_a_traceback(plan, caps):
    try:
        order = bench_clip.run_order(plan, caps)
    except SystemExit:
        return
    assert all(kind in bench_clip.GRAPHS and variant in bench_clip.VARIANT_NODES for _cap, kind, variant, _w in order)
