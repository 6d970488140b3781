"""Low-VRAM head-group attention and token-chunked FFN: exactness, composition, passthrough, auto rule."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from h3kit.kernels import chunked
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.lowvram import SETTINGS_KEY, H3KitChunkFeedForward, H3KitLowVRAMAttention
from lowvram_fakes import (
    BaseModel,
    FakeModelPatcher,
    H3Net,
    LTXNet,
    h3_rope,
    ltx_pe,
)
from torch import nn

GIB = 1 << 30


def _h3(dtype=torch.float32, seed=0, **kw) -> FakeModelPatcher:
    torch.manual_seed(seed)
    return FakeModelPatcher(BaseModel(H3Net(**kw).to(dtype)))


def _h3_inputs(tokens=37, hidden=16, rot=6, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tokens, hidden, generator=gen).to(dtype), h3_rope(tokens, rot, dtype)


def _ltx(gated=False, seed=0) -> FakeModelPatcher:
    torch.manual_seed(seed)
    return FakeModelPatcher(BaseModel(LTXNet(gated=gated)))


def _ltx_inputs(split=True, batch=2, tokens=10, seed=2):
    gen = torch.Generator().manual_seed(seed)
    vx = torch.randn(batch, tokens, 16, generator=gen)
    ax = torch.randn(batch, 7, 12, generator=gen)
    context = torch.randn(batch, 5, 10, generator=gen)
    mask = torch.zeros(batch, 1, 1, 5)
    mask[0, ..., -2:] = -torch.inf  # padded text tokens of sample 0
    return vx, ax, context, ltx_pe(batch, tokens, 4, 8, split), mask


def _patch(model, head_chunks=None, chunks=None, seq_threshold=0):
    reports = []
    if head_chunks is not None:
        model, report = H3KitLowVRAMAttention().patch(model, head_chunks)
        reports.append(json.loads(report))
    if chunks is not None:
        model, report = H3KitChunkFeedForward().patch(model, chunks, seq_threshold)
        reports.append(json.loads(report))
    return model, reports


# --------------------------------------------------------------------------------------- H3


@pytest.mark.parametrize("head_chunks, chunks", [(2, 2), (3, 3), (4, 5), (6, 7), (64, 37), (0, 0)])
def test_h3_patched_block_equals_unpatched_fp32(head_chunks, chunks):
    model = _h3()
    x, rope = _h3_inputs()
    expected = model.run(x.clone(), rope)
    patched, reports = _patch(model, head_chunks, chunks)
    assert [r["status"] for r in reports] == ["patched", "patched"]
    got = patched.run(x.clone(), rope)
    assert (got - expected).abs().max().item() <= 1e-6


def test_h3_without_rope_uses_the_host_norm_modules_exactly():
    model = _h3()
    x, _ = _h3_inputs()
    expected = model.run(x.clone(), None)
    patched, _ = _patch(model, 4, 3)
    assert (patched.run(x.clone(), None) - expected).abs().max().item() <= 1e-6


def test_h3_bf16_within_rounding():
    model = _h3(dtype=torch.bfloat16)
    x, rope = _h3_inputs(dtype=torch.bfloat16)
    expected = model.run(x.clone(), rope).float()
    reference = _h3(dtype=torch.float32).run(x.float(), rope.float())
    got = _patch(model, 4, 5)[0].run(x.clone(), rope).float()
    # the patched bf16 output is no further from the fp32 truth than the unpatched bf16 output, give or take an ulp
    scale = reference.abs().max().item()
    assert (got - expected).abs().max().item() <= 2 ** -6 * scale
    assert (got - reference).abs().max().item() <= (expected - reference).abs().max().item() + 2 ** -7 * scale


class CustomLinear(nn.Linear):
    """A layer with its own forward (like a quantized/custom op): its rows cannot be sliced safely."""

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias)


def test_unsliceable_projection_falls_back_to_whole_projection_and_is_reported():
    model = _h3()
    for block in model.model.diffusion_model.blocks:
        old = block.attn.qkv_proj
        block.attn.qkv_proj = CustomLinear(old.in_features, old.out_features, bias=False)
        block.attn.qkv_proj.weight = old.weight
    x, rope = _h3_inputs()
    expected = model.run(x.clone(), rope)
    patched, (report,) = _patch(model, head_chunks=3)
    assert report["per_group_projection"] == 0
    assert any("projection run whole" in f and "overrides forward" in f for f in report["fallbacks"])
    assert (patched.run(x.clone(), rope) - expected).abs().max().item() <= 1e-6


def test_unsliceable_reasons_name_the_cause():
    plain = nn.Linear(4, 6)
    assert chunked.unsliceable_reason(plain) is None
    plain.weight_function = [lambda w: w]
    assert "on the fly" in chunked.unsliceable_reason(plain)
    assert "not a plain Linear" in chunked.unsliceable_reason(nn.Conv1d(2, 2, 1))


def test_split_ranges_cover_total_with_near_equal_parts():
    assert chunked.split_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert chunked.split_ranges(5, 8) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]


# --------------------------------------------------------------------------------------- LTX


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("head_chunks, chunks", [(2, 2), (3, 3), (4, 4), (0, 0)])
def test_ltx_patched_block_equals_unpatched_fp32(split, gated, head_chunks, chunks):
    model = _ltx(gated=gated)
    vx, ax, context, pe, mask = _ltx_inputs(split)
    expected = model.run(vx.clone(), ax, context, pe=pe, mask=mask)
    patched, reports = _patch(model, head_chunks, chunks)
    assert reports[0]["family"] == "ltx" and reports[0]["layers_patched"] == 6
    got = patched.run(vx.clone(), ax, context, pe=pe, mask=mask)
    assert (got - expected).abs().max().item() <= 1e-6


def test_ltx_stg_passthrough_runs_the_original_forward():
    model = _ltx()
    vx, ax, context, pe, mask = _ltx_inputs()
    model.model_options["transformer_options"] = {"stg_skip_self_attn": True}
    expected = model.run(vx.clone(), ax, context, pe=pe, mask=mask)
    patched, _ = _patch(model, 2, 3)
    assert (patched.run(vx.clone(), ax, context, pe=pe, mask=mask) - expected).abs().max().item() <= 1e-6


# --------------------------------------------------------------------------------------- composition


def _with_override(model: FakeModelPatcher, calls: list) -> FakeModelPatcher:
    """What another attention-patch node does: clone, copy transformer_options, set the override."""
    def override(original, q, k, v, heads, **kwargs):
        calls.append(heads)
        return original(q, k, v, heads, **kwargs) * 0.5

    twin = model.clone()
    twin.model_options["transformer_options"] = {**model.model_options["transformer_options"],
                                                 "optimized_attention_override": override}
    return twin


@pytest.mark.parametrize("order", ["override_first", "override_last"])
def test_attention_override_still_applies_in_either_order(order):
    model = _h3()
    x, rope = _h3_inputs()
    reference_calls: list = []
    expected = _with_override(model, reference_calls).run(x.clone(), rope)
    calls: list = []
    if order == "override_first":
        patched, _ = _patch(_with_override(model, calls), 3, 4)
    else:
        patched = _with_override(_patch(model, 3, 4)[0], calls)
    got = patched.run(x.clone(), rope)
    assert (got - expected).abs().max().item() <= 1e-6
    assert reference_calls == [6, 6]          # 2 blocks, all 6 heads at once
    assert calls == [2, 2, 2] * 2            # 2 blocks x 3 groups of 2 heads, each through the override


def test_ffn_then_attention_equals_attention_then_ffn():
    model = _h3()
    x, rope = _h3_inputs()
    a_first, _ = _patch(model, 3, 4)
    ffn, _ = H3KitChunkFeedForward().patch(model, 4, 0)
    f_first, _ = H3KitLowVRAMAttention().patch(ffn, 3)
    assert torch.equal(a_first.run(x.clone(), rope), f_first.run(x.clone(), rope))
    assert set(a_first.object_patches) == set(f_first.object_patches)


def test_reapplying_replaces_instead_of_nesting():
    model, _ = _patch(_h3(), 3, 4)
    again, _ = _patch(model, 2, 5)
    patch = again.object_patches["diffusion_model.blocks.0.mlp.forward"]
    assert patch.chunks == 5 and getattr(patch.inner, "h3kit_patch", None) is None
    assert again.object_patches["diffusion_model.blocks.0.attn.forward"].head_chunks == 2


def test_foreign_attention_patch_is_kept_and_reported():
    model = _h3()
    foreign = object()
    model.add_object_patch("diffusion_model.blocks.1.attn.forward", foreign)
    patched, (report,) = _patch(model, head_chunks=2)
    assert patched.object_patches["diffusion_model.blocks.1.attn.forward"] is foreign
    assert report["layers_patched"] == 1
    assert any("another node" in f for f in report["fallbacks"])


# --------------------------------------------------------------------------------------- passthrough / input


class NotADiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4)])


@pytest.mark.parametrize("node, args", [(H3KitLowVRAMAttention, (0,)), (H3KitChunkFeedForward, (0, 0))])
def test_unmatched_structure_returns_input_unchanged_and_says_so(node, args):
    model = FakeModelPatcher(BaseModel(NotADiT()))
    out, report = node().patch(model, *args)
    report = json.loads(report)
    assert out is model and report["status"] == "unchanged"
    assert "NotADiT" in report["fallbacks"][0] and "unchanged" in report["fallbacks"][0]
    assert model.object_patches == {}


def test_unmatched_structure_is_logged(caplog):
    class Odd(nn.Module):
        pass
    model = FakeModelPatcher(BaseModel(Odd()))
    with caplog.at_level(logging.WARNING, logger="H3Kit"):
        H3KitLowVRAMAttention().patch(model, 0)
    assert any("Odd" in r.getMessage() and "unchanged" in r.getMessage() for r in caplog.records)


def test_input_model_is_untouched():
    model = _h3()
    x, rope = _h3_inputs()
    before = model.run(x.clone(), rope)
    options_before = dict(model.model_options["transformer_options"])
    patched, _ = _patch(model, 3, 4)
    assert model.object_patches == {} and model.model_options["transformer_options"] == options_before
    assert SETTINGS_KEY not in model.model_options["transformer_options"]
    assert patched.model_options["transformer_options"][SETTINGS_KEY] == {"head_chunks": 3, "ffn_chunks": 4,
                                                                          "seq_threshold": 0}
    assert torch.equal(model.run(x.clone(), rope), before)
    assert "forward" not in model.model.diffusion_model.blocks[0].attn.__dict__  # restored after the patched run


def test_one_means_off_and_returns_input():
    model = _h3()
    assert H3KitLowVRAMAttention().patch(model, 1)[0] is model
    assert H3KitChunkFeedForward().patch(model, 1, 0)[0] is model


@pytest.mark.parametrize("value", [-1, 65, 2.5, True])
def test_bad_head_chunks_raise_with_the_fix(value):
    with pytest.raises(H3KitInputError, match="head_chunks.*0 for auto"):
        H3KitLowVRAMAttention().patch(_h3(), value)


def test_seq_threshold_skips_short_sequences():
    model = _h3()
    x, rope = _h3_inputs(tokens=20)
    patched, _ = _patch(model, chunks=4, seq_threshold=64)
    calls = []
    mlp = model.model.diffusion_model.blocks[0].mlp
    original = type(mlp).forward
    patch = patched.object_patches["diffusion_model.blocks.0.mlp.forward"]
    patch.inner = lambda part: calls.append(part.shape[0]) or original(mlp, part)
    patched.run(x, rope)
    assert calls == [20]


# --------------------------------------------------------------------------------------- auto rule
# Expected values worked by hand from the documented rule (kernels/chunked.py docstring):
# budget = clamp(free / 16, 128 MiB, 1 GiB), 1 GiB when free is unknown;
# heads per group = budget // (4 * S * head_dim * bytes); head_chunks = ceil(heads / that).
@pytest.mark.parametrize("tokens, heads, head_dim, free, expected", [
    (108000, 56, 128, None, 7),      # 4*108000*128*2 = 110.6 MB/head; 1 GiB // that = 9; ceil(56/9) = 7
    (108000, 56, 128, 8 * GIB, 14),  # budget 512 MiB -> 4 heads/group -> 14
    (10000, 56, 128, 80 * GIB, 1),   # 10.24 MB/head; 1 GiB fits 104 heads -> 1
    (37000, 56, 128, 1 * GIB, 19),   # 64 MiB clamps up to 128 MiB; 37.9 MB/head -> 3 -> ceil(56/3) = 19
    (16128, 32, 128, 2 * GIB, 4),    # LTX refine: 128 MiB, 16.5 MB/head -> 8 heads -> 4
    (500000, 56, 128, None, 28),     # 512 MB/head -> 2 heads -> 28
    (2000000, 56, 128, None, 56),    # one head exceeds the budget -> one head per group
])
def test_auto_head_chunks_table(tokens, heads, head_dim, free, expected):
    assert chunked.auto_head_chunks(tokens, heads, head_dim, 2, free) == expected


# tokens per chunk = budget // (2 * ffn_width * bytes); chunks = ceil(S / that); 1 below seq_threshold.
@pytest.mark.parametrize("tokens, width, free, threshold, expected", [
    (108000, 28672, None, 0, 12),       # 114688 B/token; 1 GiB -> 9362 tokens; ceil(108000/9362) = 12
    (108000, 28672, 8 * GIB, 0, 24),    # 512 MiB -> 4681 tokens -> 24
    (3000, 28672, None, 4096, 1),       # below the threshold
    (10000, 28672, None, 4096, 2),      # ceil(10000/9362) = 2
    (16128, 16384, 2 * GIB, 0, 8),      # LTX ff: 65536 B/token; 128 MiB -> 2048 tokens -> 8
])
def test_auto_ffn_chunks_table(tokens, width, free, threshold, expected):
    assert chunked.auto_ffn_chunks(tokens, width, 2, free, threshold) == expected


def test_f24_auto_keeps_every_transient_under_the_budget_at_362_frames():
    """F24 (spill zone): at 362 frames (~91k tokens) with 10 GiB free, auto keeps each transient under its budget."""
    free = 10 * GIB
    budget = chunked.transient_budget(free)
    groups = chunked.auto_head_chunks(91000, 56, 128, 2, free)
    chunks = chunked.auto_ffn_chunks(91000, 28672, 2, free)
    largest_group = -(-56 // groups)
    largest_chunk = -(-91000 // chunks)
    assert 4 * 91000 * largest_group * 128 * 2 <= budget
    assert 2 * largest_chunk * 28672 * 2 <= budget


@pytest.mark.parametrize("rows, shape", [(3, (10, 12)), (4, (2, 9, 12)), (50, (10, 12))])
def test_output_projection_written_over_consumed_rows_is_exact(rows, shape):
    torch.manual_seed(3)
    projection = nn.Sequential(nn.Linear(12, 7), nn.Dropout(0.0))
    buffer = torch.randn(*shape)
    expected = projection(buffer).detach()
    with torch.no_grad():
        got = chunked.project_rows_in_place(buffer.clone(), projection, rows_per_chunk=rows)
    assert got.shape == expected.shape and torch.equal(got, expected)
