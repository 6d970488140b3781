"""Low-VRAM head-group attention and token-chunked FFN against stand-ins of the real classes (tests/lowvram_fakes.py).

The oracle is the host's forward with the host's kernel library (comfy-kitchen's eager CPU backend) and the host's
`comfy.quant_ops` registry (ComfyUI 0.33.0's layout names): patched outputs are compared bitwise (torch.equal) in
bf16 and fp16. The stand-ins are checked against the real classes in tier (b) (test_lowvram_standins_comfyui.py:
same signature, output and allocation peak). Memory promises are pinned with tests/alloc_tracker.py.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("comfy_kitchen", reason="the host's kernel library is the oracle here (pip install -e '.[test]')")

import torch  # noqa: E402
from alloc_tracker import Allocations, PeakBytes  # noqa: E402
from h3kit.adapters import kitchen  # noqa: E402
from h3kit.kernels import chunked  # noqa: E402
from h3kit.nodes import lowvram  # noqa: E402
from h3kit.nodes.common import H3KitInputError  # noqa: E402
from h3kit.nodes.lowvram import SETTINGS_KEY, H3KitChunkFeedForward, H3KitLowVRAMAttention  # noqa: E402
from lowvram_fakes import (  # noqa: E402
    BaseModel,
    FakeModelPatcher,
    H3Net,
    LowRankPatch,
    LTXNet,
    h3_inputs,
    install_host_quant_ops,
    ltx_pe,
    quantize_layers,
)
from torch import nn  # noqa: E402

GIB = 1 << 30
HIDDEN, HEADS, HEAD_DIM, FFN = 48, 4, 32, 96
INNER = HEADS * HEAD_DIM


@pytest.fixture(autouse=True)
def host_quant_ops(monkeypatch):
    """The 0.33.0 host's layout registry and QUANT_ALGOS, as a loaded ComfyUI has them."""
    return install_host_quant_ops(monkeypatch)


def _h3(dtype=torch.bfloat16, seed=0, **kw) -> FakeModelPatcher:
    torch.manual_seed(seed)
    return FakeModelPatcher(BaseModel(H3Net(**kw).to(dtype)))


def _run_h3(model, inputs, rope=True):
    x, t_emb, segments, table = inputs
    return model.run(x.clone(), t_emb, segments, table if rope else None)


def _patch(model, head_chunks=None, chunks=None, seq_threshold=0):
    reports = []
    if head_chunks is not None:
        model, report = H3KitLowVRAMAttention().patch(model, head_chunks)
        reports.append(json.loads(report))
    if chunks is not None:
        model, report = H3KitChunkFeedForward().patch(model, chunks, seq_threshold)
        reports.append(json.loads(report))
    return model, reports


def _ledger(model):
    patch = model.object_patches["diffusion_model.blocks.0.attn.forward"]
    return patch.ledger.counts.get(patch.kind, {})


# --------------------------------------------------------------------------------------- H3: bitwise vs the host


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_chunks", [2, 3, 4])
def test_h3_patched_is_bitwise_the_host_forward_with_the_hosts_kernel(dtype, head_chunks):
    model = _h3(dtype)
    inputs = h3_inputs(dtype=dtype)
    expected = _run_h3(model, inputs)
    patched, (report,) = _patch(model, head_chunks)
    assert report["status"] == "patched" and report["norm_rope_kernel"] == "comfy.quant_ops.ck"
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert _ledger(patched) == {"per_group": 2}


def test_h3_without_rope_uses_the_host_norm_modules_bitwise():
    model = _h3()
    inputs = h3_inputs()
    expected = _run_h3(model, inputs, rope=False)
    patched, _ = _patch(model, 3)
    assert torch.equal(_run_h3(patched, inputs, rope=False), expected)


def test_h3_auto_leaves_short_sequences_to_the_hosts_forward():
    model = _h3()
    inputs = h3_inputs()
    expected = _run_h3(model, inputs)
    patched, (report,) = _patch(model, 0)
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert _ledger(patched) == {"host (1 group)": 2}
    assert "once per shape" in report["rule"]


def test_h3_without_the_hosts_kernel_falls_back_to_plain_torch_and_says_so(monkeypatch):
    model = _h3(torch.float32)
    inputs = h3_inputs(dtype=torch.float32)
    expected = _run_h3(model, inputs)
    monkeypatch.setattr(kitchen, "host_kitchen", lambda: (None, "comfy-kitchen is not importable here (test)"))
    patched, (report,) = _patch(model, 2)
    assert report["norm_rope_kernel"] == "plain torch"
    assert any("plain torch" in f for f in report["fallbacks"])
    got = _run_h3(patched, inputs)
    assert (got - expected).abs().max().item() < 1e-5
    assert "plain-torch norm+rope: the host's fused kernel is missing: comfy-kitchen is not importable here (test)" \
        in _ledger(patched)


# --------------------------------------------------------------------------------------- memory, asserted directly


def test_per_group_path_never_creates_a_fused_qkv_sized_tensor():
    model = _h3()
    inputs = h3_inputs(tokens=96)
    patched, _ = _patch(model, 4)
    with Allocations() as seen:
        _run_h3(patched, inputs)
    assert seen.widest(3 * INNER) == []                    # no [S, 3*inner] anywhere
    group_qkv = [s for s in seen.shapes if s == (96, HEAD_DIM)]
    assert len(group_qkv) >= 3 * 4 * 2                     # q, k, v of 4 groups in 2 blocks, each [S, 1 head]


def test_the_tracker_sees_the_fused_buffer_when_the_projection_runs_whole(monkeypatch):
    """The same tracker on the whole-projection path finds the fused buffer: it would catch a silent whole path."""
    model = _h3()
    quantize_layers(model.model.diffusion_model, ("blocks.0.attn.qkv_proj", "blocks.1.attn.qkv_proj"),
                    "int8_tensorwise")
    monkeypatch.setattr(kitchen, "ROW_RULES", ())
    inputs = h3_inputs(tokens=96)
    expected = _run_h3(model, inputs)
    patched, (report,) = _patch(model, 4)
    assert "no exact row slice" in report["weights"]
    with Allocations() as seen:
        got = _run_h3(patched, inputs)
    assert torch.equal(got, expected)
    assert seen.widest(3 * INNER) != []
    (outcome,) = _ledger(patched)
    assert outcome.startswith("whole: TensorWiseINT8Layout weights have no exact row slice here")


def test_patched_block_peaks_lower_than_the_real_blocks_peak():
    """Peaks are the real class's: the stand-in's allocation peak equals the real DiTBlock's (tier b). The host's
    block holds the fused qkv [S, 3*inner] plus v's contiguous copy [S, inner] at its attention peak; 4 head groups
    hold a quarter of q/k/v at a time, so the block's peak drops by at least half the fused buffer."""
    model = _h3(layers=1)
    tokens = 384
    inputs = h3_inputs(tokens=tokens)
    with PeakBytes() as host:
        expected = _run_h3(model, inputs)
    patched, _ = _patch(model, 4, 4)
    with PeakBytes() as ours:
        got = _run_h3(patched, inputs)
    assert torch.equal(got, expected)
    fused = tokens * 3 * INNER * 2  # bf16
    assert host.peak >= fused + tokens * INNER * 2
    assert host.peak - ours.peak >= fused // 2, (ours.peak, host.peak)


# --------------------------------------------------------------------------------------- effective weights / LoRA


def _lora(layer, seed=7):
    return LowRankPatch(layer.out_features, layer.in_features, seed=seed)


@pytest.mark.parametrize("where", ["qkv_proj", "out_proj"])
def test_lora_added_at_load_time_is_applied_not_dropped(where):
    """The host installs LoRA weight functions when it loads the model (lowvram), after the node ran."""
    model = _h3()
    inputs = h3_inputs()
    without = _run_h3(model, inputs)
    patched, _ = _patch(model, 2)
    for block in model.model.diffusion_model.blocks:      # "load": partial load adds the patch as a weight function
        layer = getattr(block.attn, where)
        layer.comfy_cast_weights = True
        layer.weight_function = [_lora(layer)]
    expected = _run_h3(model, inputs)
    got = _run_h3(patched, inputs)
    assert not torch.equal(expected, without)
    assert torch.equal(got, expected)
    assert _ledger(patched) == {"per_group": 2}


def test_lora_on_a_quantized_layer_uses_the_hosts_dequantized_patched_weight():
    model = _h3()
    net = model.model.diffusion_model
    quantize_layers(net, ("blocks.0.attn.qkv_proj", "blocks.1.attn.qkv_proj"), "TensorWiseINT8Layout")
    for block in net.blocks:
        block.attn.qkv_proj.weight_function = [_lora(block.attn.qkv_proj)]
    inputs = h3_inputs()
    expected = _run_h3(model, inputs)
    patched, _ = _patch(model, 4)
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert _ledger(patched) == {"per_group": 2}


class BypassAdapter:
    """A forward wrapper that adds a low-rank term to the layer's output (a bypass-mode adapter)."""

    def __init__(self, layer):
        self.layer, self.original = layer, layer.forward
        gen = torch.Generator().manual_seed(3)
        self.down = torch.randn(2, layer.in_features, generator=gen)
        self.up = torch.randn(layer.out_features, 2, generator=gen)

    def __call__(self, x):
        return self.original(x) + ((x.float() @ self.down.T) @ self.up.T).to(x.dtype)


def test_a_wrapped_projection_runs_whole_through_its_wrapper_and_is_reported():
    model = _h3()
    for block in model.model.diffusion_model.blocks:
        block.attn.qkv_proj.forward = BypassAdapter(block.attn.qkv_proj)
    inputs = h3_inputs()
    expected = _run_h3(model, inputs)
    patched, _ = _patch(model, 2)
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert list(_ledger(patched)) == ["whole: CastLinear's forward is wrapped or hooked (an adapter may change its "
                                      "output)"]


def test_a_projection_that_changes_its_matmul_result_is_redone_whole(monkeypatch):
    """A layer class whose forward post-processes F.linear (not visible as a wrapper) is caught by the result check."""
    model = _h3()
    inputs = h3_inputs()
    from lowvram_fakes import CastLinear
    original = CastLinear.forward

    def with_offset(self, x):
        out = original(self, x)
        return out + 0.25 if self.out_features == 3 * INNER else out

    monkeypatch.setattr(CastLinear, "forward", with_offset)
    expected = _run_h3(model, inputs)
    patched, _ = _patch(model, 2)
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert list(_ledger(patched)) == ["whole: CastLinear changed its matmul's result (a wrapper or adapter); ran it whole"]


# --------------------------------------------------------------------------------------- block replacement


def test_a_block_replacement_calling_the_original_block_still_runs_the_head_groups():
    """The real DiTBlock takes no attention=: a "dit" double_block replacement reaches attention only through
    `original_block`, i.e. through blocks[i].attn, which is patched."""
    model = _h3()
    inputs = h3_inputs()
    seen = []

    def replacement(args, extra):
        seen.append(args["img"].shape[0])
        return extra["original_block"](args)

    model.model_options = {"transformer_options": {"patches_replace": {"dit": {("double_block", 0): replacement}}}}
    expected = _run_h3(model, inputs)
    patched, (report,) = _patch(model, 2)
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert seen == [64, 64] and _ledger(patched) == {"per_group": 2}
    assert report["warnings"] == [] and set(patched.object_patches) == {
        f"diffusion_model.blocks.{i}.attn.forward" for i in range(2)}


# --------------------------------------------------------------------------------------- feed-forward


@pytest.mark.parametrize("chunks", [2, 5, 64])
def test_h3_ffn_chunks_are_bitwise_the_host_mlp(chunks):
    model = _h3()
    inputs = h3_inputs()
    expected = _run_h3(model, inputs)
    patched, _ = _patch(model, chunks=chunks)
    assert torch.equal(_run_h3(patched, inputs), expected)


def test_b1_ltx_latent_is_chunked_along_tokens_not_batch():
    model = _ltx("new")
    vx, ax, ctx, mask = _ltx_tensors(batch=1, tokens=48)
    expected = model.run(vx.clone(), ax, ctx, mask=mask)
    patched, _ = _patch(model, chunks=4)
    with Allocations() as seen:
        got = patched.run(vx.clone(), ax, ctx, mask=mask)
    assert torch.equal(got, expected)
    ffn_wide = [s for s in seen.shapes if s[-1] == 4 * 64 and len(s) == 3]
    assert ffn_wide and max(s[-2] for s in ffn_wide) == 12  # 48 tokens / 4 chunks, never the whole 48


@pytest.mark.parametrize("quant, input_scale, chunked_expected", [
    ("float8_e4m3fn", None, True),                # the host quantizes with scale 1.0: per token
    ("float8_e5m2", None, True),
    ("float8_e4m3fn", torch.tensor(0.05), True),  # a stored input scale
    ("int8_tensorwise", None, True),              # weight-only: the int8 matmul quantizes per token
])
def test_ffn_with_a_quantized_layer_is_chunked_when_the_hosts_quantizer_is_per_token(quant, input_scale,
                                                                                    chunked_expected):
    model = _h3()
    net = model.model.diffusion_model
    quantize_layers(net, ("blocks.0.mlp.fc1", "blocks.1.mlp.fc1"), quant, input_scale=input_scale)
    inputs = h3_inputs(tokens=96)
    expected = _run_h3(model, inputs)
    patched, (report,) = _patch(model, chunks=4)
    with Allocations() as seen:
        got = _run_h3(patched, inputs)
    assert torch.equal(got, expected)
    fc1_rows = {s[0] for s in seen.shapes if len(s) == 2 and s[-1] == 2 * FFN and s[0] != HIDDEN}
    assert fc1_rows == {24} and report["fallbacks"] == []


def test_ffn_with_a_layer_scaled_by_the_whole_input_runs_whole_and_says_why(monkeypatch):
    """A host whose fp8 quantizer takes the amax of the whole input (comfy-kitchen's own TensorCoreFP8Layout): the
    probe of its quantizer finds it, the FFN is not chunked, exact, and the report says so."""
    import comfy_kitchen

    monkeypatch.setitem(comfy_kitchen.tensor.base.LAYOUTS, "TensorCoreFP8Layout",
                        comfy_kitchen.tensor.TensorCoreFP8Layout)
    model = _h3()
    quantize_layers(model.model.diffusion_model, ("blocks.0.mlp.fc1", "blocks.1.mlp.fc1"), "TensorCoreFP8Layout")
    inputs = h3_inputs(tokens=96)
    expected = _run_h3(model, inputs)
    patched, (report,) = _patch(model, chunks=4)
    with Allocations() as seen:
        got = _run_h3(patched, inputs)
    assert torch.equal(got, expected)
    assert 96 in {s[0] for s in seen.shapes if len(s) == 2 and s[-1] == 2 * FFN}
    assert any("fc1: TensorCoreFP8Layout quantizes the input with one scale for all tokens (probed)" in f
               for f in report["fallbacks"])
    ledger = patched.object_patches["diffusion_model.blocks.0.mlp.forward"].ledger.counts["feed-forward"]
    assert list(ledger) == ["whole: fc1: TensorCoreFP8Layout quantizes the input with one scale for all tokens "
                            "(probed); chunks would change the numbers"]


def test_seq_threshold_skips_short_sequences():
    model = _h3()
    inputs = h3_inputs(tokens=30)
    patched, _ = _patch(model, chunks=4, seq_threshold=64)
    with Allocations() as seen:
        _run_h3(patched, inputs)
    assert {s[0] for s in seen.shapes if len(s) == 2 and s[-1] == 2 * FFN and s[0] != HIDDEN} == {30}


@pytest.mark.parametrize(("tokens", "rows"), [(63, {63}), (64, {16}), (65, {17, 16})])
def test_seq_threshold_boundary_chunks_at_exactly_the_threshold(tokens, rows):
    # Documented: sequences SHORTER than seq_threshold run whole; one of exactly seq_threshold tokens is chunked.
    patched, _ = _patch(_h3(), chunks=4, seq_threshold=64)
    with Allocations() as seen:
        _run_h3(patched, h3_inputs(tokens=tokens))
    assert {s[0] for s in seen.shapes if len(s) == 2 and s[-1] == 2 * FFN and s[0] != HIDDEN} == rows


# --------------------------------------------------------------------------------------- LTX


def _ltx(style, gated=False, seed=0, dtype=torch.bfloat16) -> FakeModelPatcher:
    torch.manual_seed(seed)
    return FakeModelPatcher(BaseModel(LTXNet(style, gated=gated).to(dtype)))


def _ltx_tensors(batch=2, tokens=10, dtype=torch.bfloat16, seed=2):
    gen = torch.Generator().manual_seed(seed)
    vx = torch.randn(batch, tokens, 64, generator=gen).to(dtype)
    ax = torch.randn(batch, 7, 32, generator=gen).to(dtype)
    context = torch.randn(batch, 5, 32, generator=gen).to(dtype)
    mask = torch.zeros(batch, 1, 1, 5, dtype=dtype)
    mask[0, ..., -2:] = -torch.inf  # padded text tokens of sample 0
    return vx, ax, context, mask


def _attention_calls(monkeypatch, style):
    import lowvram_fakes
    module = lowvram_fakes.ltx_host(style)
    calls = []
    original = module.optimized_attention

    def counting(q, k, v, heads, *args, **kw):
        calls.append(heads)
        return original(q, k, v, heads, *args, **kw)
    monkeypatch.setattr(module, "optimized_attention", counting)
    monkeypatch.setattr(module, "optimized_attention_masked", counting)  # one function in the host too
    return calls


@pytest.mark.parametrize("style, split, gated", [("v0364", False, False), ("v0121", False, False),
                                                 ("v0121", True, False), ("new", True, False), ("new", False, False),
                                                 ("new", True, True), ("new", False, True)])
def test_ltx_every_rope_format_is_bitwise_the_host_and_really_split(monkeypatch, style, split, gated):
    model = _ltx(style, gated)
    vx, ax, ctx, mask = _ltx_tensors()
    pe = ltx_pe(style, 2, 10, 4, 16, split, torch.bfloat16)
    mask_arg = mask if style != "v0364" else None
    calls = _attention_calls(monkeypatch, style)
    expected = model.run(vx.clone(), ax, ctx, pe=pe, mask=mask_arg)
    host_calls, calls[:] = list(calls), []
    patched, (report,) = _patch(model, 2)
    got = patched.run(vx.clone(), ax, ctx, pe=pe, mask=mask_arg)
    assert torch.equal(got, expected)
    assert host_calls == [4, 4, 2] * 2
    assert calls == [2, 2, 2, 2, 1, 1] * 2                 # attn1, attn2 in 2 groups of 2; a2v 2 groups of 1
    ledger = patched.object_patches["diffusion_model.transformer_blocks.0.attn1.forward"].ledger.counts
    narrow = "whole: to_v row slices of 8 rows are not a multiple of 16 (such narrow matmuls are not bitwise the " \
             "whole projection); v projected whole, attention still per group"  # a2v: 1 head x 8 per group
    assert ledger["LTX attention"] == {"per_group": 4, narrow: 2}


def test_ltx_cross_modal_k_pe_is_handled_with_its_own_table(monkeypatch):
    model = _ltx("new")
    vx, ax, ctx, mask = _ltx_tensors()
    cross = (ltx_pe("new", 2, 10, 2, 8, True, torch.bfloat16), ltx_pe("new", 2, 7, 2, 8, False, torch.bfloat16))
    expected = model.run(vx.clone(), ax, ctx, mask=mask, cross_pe=cross)
    patched, _ = _patch(model, 2)
    assert torch.equal(patched.run(vx.clone(), ax, ctx, mask=mask, cross_pe=cross), expected)


def test_ltx_masked_attention_on_the_old_host_runs_the_hosts_forward():
    model = _ltx("v0364")
    vx, ax, ctx, mask = _ltx_tensors()
    expected = model.run(vx.clone(), ax, ctx, mask=mask)
    patched, _ = _patch(model, 2)
    assert torch.equal(patched.run(vx.clone(), ax, ctx, mask=mask), expected)
    ledger = patched.object_patches["diffusion_model.transformer_blocks.0.attn1.forward"].ledger.counts
    assert "host: masked attention on a host that calls optimized_attention_masked" in ledger["LTX attention"]


def test_ltx_stg_passthrough_runs_the_original_forward():
    model = _ltx("new")
    vx, ax, ctx, mask = _ltx_tensors()
    model.model_options["transformer_options"] = {"stg_skip_self_attn": True}
    expected = model.run(vx.clone(), ax, ctx, mask=mask)
    patched, _ = _patch(model, 2)
    assert torch.equal(patched.run(vx.clone(), ax, ctx, mask=mask), expected)


def test_ltx_lora_on_to_v_added_at_load_time_is_applied(monkeypatch):
    model = _ltx("new")
    vx, ax, ctx, mask = _ltx_tensors()
    without = model.run(vx.clone(), ax, ctx, mask=mask)
    patched, _ = _patch(model, 2)
    for block in model.model.diffusion_model.transformer_blocks:
        block.attn1.to_v.comfy_cast_weights = True
        block.attn1.to_v.weight_function = [_lora(block.attn1.to_v)]
    expected = model.run(vx.clone(), ax, ctx, mask=mask)
    assert not torch.equal(expected, without)
    assert torch.equal(patched.run(vx.clone(), ax, ctx, mask=mask), expected)


# --------------------------------------------------------------------------------------- composition


@pytest.mark.parametrize("order", ["override_first", "override_last"])
def test_attention_override_still_applies_in_either_order(order):
    model = _h3()
    inputs = h3_inputs()

    def with_override(m, calls):
        m = m.clone()

        def override(original, q, k, v, heads, **kwargs):
            calls.append(heads)
            return original(q, k, v, heads, **kwargs)
        m.model_options = {"transformer_options": {"optimized_attention_override": override}}
        return m

    reference: list = []
    expected = _run_h3(with_override(model, reference), inputs)
    calls: list = []
    patched = _patch(with_override(model, calls), 2)[0] if order == "override_first" \
        else with_override(_patch(model, 2)[0], calls)
    assert torch.equal(_run_h3(patched, inputs), expected)
    assert reference == [4, 4] and calls == [2, 2] * 2


def test_ffn_then_attention_equals_attention_then_ffn():
    model = _h3()
    inputs = h3_inputs()
    a_first, _ = _patch(model, 2, 4)
    ffn, _ = H3KitChunkFeedForward().patch(model, 4, 0)
    f_first, _ = H3KitLowVRAMAttention().patch(ffn, 2)
    assert torch.equal(_run_h3(a_first, inputs), _run_h3(f_first, inputs))
    assert set(a_first.object_patches) == set(f_first.object_patches)


def test_reapplying_replaces_instead_of_nesting():
    model, _ = _patch(_h3(), 3, 4)
    again, _ = _patch(model, 2, 5)
    patch = again.object_patches["diffusion_model.blocks.0.mlp.forward"]
    assert patch.planner.fixed == 5 and getattr(patch.inner, "h3kit_patch", None) is None
    attention = again.object_patches["diffusion_model.blocks.0.attn.forward"]
    assert attention.planner.fixed == 2 and getattr(attention.original, "h3kit_patch", None) is None


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


def test_input_model_is_untouched():
    model = _h3()
    inputs = h3_inputs()
    before = _run_h3(model, inputs)
    options_before = dict(model.model_options["transformer_options"])
    patched, _ = _patch(model, 3, 4)
    assert model.object_patches == {} and model.model_options["transformer_options"] == options_before
    assert patched.model_options["transformer_options"][SETTINGS_KEY] == {"head_chunks": 3, "ffn_chunks": 4,
                                                                          "seq_threshold": 0}
    assert torch.equal(_run_h3(model, inputs), before)
    assert "forward" not in model.model.diffusion_model.blocks[0].attn.__dict__


def test_one_means_off_and_returns_input():
    model = _h3()
    assert H3KitLowVRAMAttention().patch(model, 1)[0] is model
    assert H3KitChunkFeedForward().patch(model, 1, 0)[0] is model


@pytest.mark.parametrize("value", [-1, 65, 2.5, True])
def test_bad_head_chunks_raise_with_the_fix(value):
    with pytest.raises(H3KitInputError, match="head_chunks.*0 for auto"):
        H3KitLowVRAMAttention().patch(_h3(), value)


# --------------------------------------------------------------------------------------- auto rule
# Expected values worked by hand from the documented rule (kernels/chunked.py docstring):
# budget = clamp(free / 16, 128 MiB, 512 MiB), 512 MiB when free is unknown; one head h = 4 * S * head_dim * bytes;
# heads * h <= 2 * budget -> 1 (the host's forward), else head_chunks = ceil(heads / (budget // h)).
@pytest.mark.parametrize("tokens, heads, head_dim, free, expected", [
    (108000, 56, 128, None, 14),     # h = 110.6 MB; 6.2 GB > 1 GiB; 512 MiB // h = 4 heads -> 14 groups
    (108000, 56, 128, 4 * GIB, 28),  # budget 256 MiB -> 2 heads/group -> 28
    (10000, 56, 128, 140 * GIB, 1),  # h = 10.24 MB; all 56 heads 573 MB <= 1 GiB -> the host's forward
    (37000, 56, 128, 140 * GIB, 4),  # H200: h = 37.9 MB; 2.1 GB > 1 GiB; 14 heads/group -> 4
    (16128, 32, 128, 140 * GIB, 1),  # LTX refine on a large card: 528 MB <= 1 GiB -> left unsplit
    (16128, 32, 128, 2 * GIB, 4),    # the same with 2 GiB free: budget 128 MiB, 528 MB > 256 MiB; 8 heads -> 4
    (2000000, 56, 128, None, 56),    # one head exceeds the budget -> one head per group
])
def test_auto_head_chunks_table(tokens, heads, head_dim, free, expected):
    assert chunked.auto_head_chunks(tokens, heads, head_dim, 2, free) == expected


# one token t = (projection out + activation out) * bytes; S * t <= 2 * budget or S < threshold -> 1;
# else chunks = ceil(S / (budget // t)).
@pytest.mark.parametrize("tokens, width, free, threshold, expected", [
    (108000, 28672 + 14336, None, 0, 18),   # H3 SwiGLU: t = 86016 B; 9.3 GB; 512 MiB // t = 6241 tokens -> 18
    (37000, 28672 + 14336, None, 0, 6),     # 3.2 GB > 1 GiB; ceil(37000 / 6241) = 6
    (10000, 28672 + 14336, None, 4096, 1),  # 860 MB <= 1 GiB: the host's forward
    (3000, 28672 + 14336, None, 4096, 1),   # below the threshold
    (16128, 2 * 16384, 2 * GIB, 0, 8),      # LTX GELU: t = 65536 B; 128 MiB -> 2048 tokens -> 8
])
def test_auto_ffn_chunks_table(tokens, width, free, threshold, expected):
    assert chunked.auto_ffn_chunks(tokens, width, 2, free, threshold) == expected


def test_f24_auto_keeps_every_transient_under_the_budget_at_362_frames():
    """F24 (spill zone): at 362 frames (~91k tokens) with 10 GiB free, auto keeps each transient under its budget."""
    free = 10 * GIB
    budget = chunked.transient_budget(free)
    groups = chunked.auto_head_chunks(91000, 56, 128, 2, free)
    chunks = chunked.auto_ffn_chunks(91000, 28672 + 14336, 2, free)
    largest_group = -(-56 // groups)
    largest_chunk = -(-91000 // chunks)
    assert 4 * 91000 * largest_group * 128 * 2 <= budget
    assert largest_chunk * (28672 + 14336) * 2 <= budget


def test_auto_counts_are_decided_once_per_shape_and_kept(monkeypatch):
    free = iter([None, 2 * GIB, 128 * GIB, 1 * GIB] * 10)
    monkeypatch.setattr(chunked, "free_device_bytes", lambda device: next(free))
    planner = lowvram.Planner(0)
    x = torch.zeros(16128, 1, dtype=torch.bfloat16)
    counts = {lowvram._auto_groups(planner, "LTX attention", x, 32, 128) for _ in range(4)}
    assert counts == {1}  # the first decision (free unknown -> 512 MiB budget) is kept while free memory moves
    other = torch.zeros(108000, 1, dtype=torch.bfloat16)
    assert lowvram._auto_groups(planner, "LTX attention", other, 32, 128) != 1  # a new shape is decided anew


def test_ffn_widths_count_projection_and_activation_outputs():
    model = _h3()
    assert chunked.ffn_widths(model.model.diffusion_model.blocks[0].mlp) == 2 * FFN + FFN
    ltx = _ltx("new")
    assert chunked.ffn_widths(ltx.model.diffusion_model.transformer_blocks[0].ff) == 2 * 4 * 64


@pytest.mark.parametrize("rows, shape", [(3, (10, 12)), (50, (10, 12)), (4, (33, 12))])
def test_output_projection_written_over_consumed_rows_is_exact(rows, shape):
    torch.manual_seed(3)
    layer = nn.Linear(12, 7)
    buffer = torch.randn(*shape)
    with torch.no_grad():
        expected = layer(buffer)
        got = chunked.linear_rows_in_place(buffer.clone(), layer.weight, layer.bias, rows_per_chunk=rows)
    assert got.shape == expected.shape and torch.equal(got, expected)
