"""Issue 25: the clip bench's graph surgery and run order (scripts/bench_clip.py), and the block bench's variant
syntax (scripts/bench_lowvram.py), on CPU without a host: what is measured must be the shipped graph with the
pack's nodes placed where docs/lowvram.md says (last before the sampler), nothing else changed."""

from __future__ import annotations

import json

import pytest
import torch
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


def test_fp8_checkpoint_is_the_hosts_scaled_layout_and_dequantizes_to_the_values(tmp_path):
    """Issue 31: the block Linears as float8_e4m3fn + a float32 per-tensor scale listed in _quantization_metadata
    (what 0.33.0's convert_old_quants turns into comfy_quant); everything else in the storage dtype."""
    from h3kit.scripts import bench_weights
    from safetensors import safe_open

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj_in = torch.nn.Linear(32, 32)
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(32, 48), torch.nn.Linear(48, 20)])

    with torch.device("meta"):
        net = Net()
    drawn = {}

    def values(shape, dtype, mean, std, positive):
        drawn[shape] = torch.randn(shape, generator=torch.Generator().manual_seed(len(drawn))).mul(std).add(mean)
        return drawn[shape].to(dtype)

    layers = bench_weights.quantized_layers(net, ("blocks.",))
    assert layers == ["blocks.0"]  # 20 outputs: not a multiple of 16, stays bf16
    entries = bench_weights.plan(net, torch.bfloat16, lambda n, s: (0.0, 0.5, False), lambda n: False, layers)
    metadata = bench_weights.quantization_metadata(layers)
    path = tmp_path / "dit.safetensors"
    info = bench_weights.write(path, entries, metadata, values, "h3kit", torch.device("cpu"))
    assert not info["reused"] and bench_weights.write(path, entries, metadata, values, "h3kit",
                                                      torch.device("cpu"))["reused"]
    with safe_open(str(path), framework="pt") as f:
        assert json.loads(f.metadata()["_quantization_metadata"])["layers"] == {"blocks.0": {"format": "float8_e4m3fn"}}
        weight, scale = f.get_tensor("blocks.0.weight"), f.get_tensor("blocks.0.weight_scale")
        assert weight.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32 and scale.shape == ()
        assert f.get_tensor("blocks.1.weight").dtype == f.get_tensor("proj_in.weight").dtype == torch.bfloat16
        assert set(f.keys()) == {"proj_in.weight", "proj_in.bias", "blocks.0.weight", "blocks.0.weight_scale",
                                 "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"}
    original = drawn[(48, 32)].to(torch.bfloat16).float()
    restored = weight.float() * scale
    assert restored.abs().max() == pytest.approx(float(original.abs().max()), rel=1e-6)
    assert float((restored - original).abs().max()) <= float(original.abs().max()) / 16  # e4m3: 3 mantissa bits
