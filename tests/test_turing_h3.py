"""MiniMax-H3 on Turing (tier a, CPU): H3KitComputeDtype's mixed mode and the startup adapter's H3 policy.

On a GPU without bf16, auto runs every block's attention and feed-forward in fp16 (adapters/turing.H3Fp16Sublayer)
and keeps the residual stream, norms and modulation in fp32 (docs/turing.md says why, from the real block). The
stand-in H3 (tests/lowvram_fakes.py) is the real DiTBlock's computation (tier b checks it); the oracle here composes
the block from its own parts with the sublayers called in fp16, so "mixed" is pinned op by op.
"""

from __future__ import annotations

import json
import logging
import sys
import types
from contextlib import nullcontext

import pytest

pytest.importorskip("comfy_kitchen", reason="the H3 stand-in runs the host's kernel library")

import torch  # noqa: E402
from h3kit.adapters import turing  # noqa: E402
from h3kit.nodes import turing as turing_nodes  # noqa: E402
from h3kit.nodes.lowvram import H3KitChunkFeedForward, H3KitLowVRAMAttention  # noqa: E402
from lowvram_fakes import (  # noqa: E402
    BaseModel,
    FakeModelPatcher,
    H3Net,
    _mod_gate,
    _mod_scale_shift,
    h3_inputs,
    manual_cast,
)

F16, F32 = torch.float16, torch.float32


@pytest.fixture
def sm75(monkeypatch):
    monkeypatch.setattr(turing_nodes, "device_capability", lambda device: (7, 5))


def _model(seed=0, cast=F32):
    """An H3 whose layers cast their weights per call and whose compute dtype is fp32: a quantized H3 on sm_75
    (manual cast fp32, the host's choice when bf16 is missing)."""
    torch.manual_seed(seed)
    base = BaseModel(manual_cast(H3Net().to(F32)))
    base.manual_cast_dtype = cast
    return FakeModelPatcher(base)


def _inputs(tokens=64):
    return h3_inputs(tokens=tokens, dtype=F32)


def _run(model, inputs):
    x, t_emb, segments, table = inputs
    return model.run(x.clone(), t_emb, segments, table)


def _mixed_oracle(net, inputs, fp32_mlp_blocks=()):
    """The real DiTBlock's order of operations, residual fp32, attention and feed-forward called on fp16 inputs."""
    x, t_emb, segments, table = inputs
    x = x.clone()
    with torch.no_grad():
        for i, block in enumerate(net.blocks):
            shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = block.adaln_proj(t_emb)
            h = _mod_scale_shift(block.norm1(x), shift_a, scale_a, segments)
            attn = type(block.attn).forward(block.attn, h.half(), rope_freqs=table.half(), transformer_options={})
            x = _mod_gate(x, gate_a, attn.float(), segments)
            h = _mod_scale_shift(block.norm2(x), shift_m, scale_m, segments)
            mlp = type(block.mlp).forward(block.mlp, h) if i in fp32_mlp_blocks else \
                type(block.mlp).forward(block.mlp, h.half()).float()
            x = _mod_gate(x, gate_m, mlp, segments)
    return x


def _ledger(patched):
    return patched.object_patches["diffusion_model.blocks.0.attn.forward"].ledger.counts


def test_auto_on_sm75_runs_h3_attention_and_ffn_in_fp16_and_the_residual_in_fp32(sm75):
    model = _model()
    inputs = _inputs()
    fp32 = _run(model, inputs)
    patched, report = turing_nodes.H3KitComputeDtype().apply(model, "auto")
    report = json.loads(report)
    net = model.model.diffusion_model
    seen = []
    hooks = [net.blocks[0].norm1.register_forward_pre_hook(lambda m, a: seen.append(("norm1", a[0].dtype))),
             net.blocks[0].attn.qkv_proj.register_forward_pre_hook(lambda m, a: seen.append(("qkv", a[0].dtype))),
             net.blocks[0].mlp.fc1.register_forward_pre_hook(lambda m, a: seen.append(("fc1", a[0].dtype)))]
    try:
        got = _run(patched, inputs)
    finally:
        for hook in hooks:
            hook.remove()
    assert got.dtype == F32 and torch.equal(got, _mixed_oracle(net, inputs))
    assert not torch.equal(got, fp32) and float((got - fp32).norm() / fp32.norm()) < 5e-3
    assert ("norm1", F32) in seen and ("qkv", F16) in seen and ("fc1", F16) in seen
    assert _ledger(patched) == {"attn": {"fp16": 2}, "mlp": {"fp16": 2}}
    assert report["compute_dtype"].startswith("mixed: fp16 attention and feed-forward") and report["h3_blocks"] == 2
    assert report["compute_dtype_after"] == "float32" and "note" not in report  # nothing forced: it casts already
    assert "manual_cast_dtype" not in patched.object_patches and model.object_patches == {}


def test_an_fp16_result_that_overflows_is_recomputed_in_fp32_and_logged(sm75, caplog):
    model = _model()
    with torch.no_grad():
        model.model.diffusion_model.blocks[0].mlp.fc2.weight.mul_(2.0 ** 22)  # fine in fp32, past 65504 in fp16
    inputs = _inputs()
    patched, _report = turing_nodes.H3KitComputeDtype().apply(model, "auto")
    with caplog.at_level(logging.INFO, logger="H3Kit"):
        got = _run(patched, inputs)
    assert torch.isfinite(got).all()
    assert torch.equal(got, _mixed_oracle(model.model.diffusion_model, inputs, fp32_mlp_blocks=(0,)))
    assert _ledger(patched)["mlp"] == {"recomputed in fp32: the fp16 result overflowed (not finite)": 1, "fp16": 1}
    assert any("overflowed" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.parametrize("order", ["turing_first", "lowvram_first"])
def test_mixed_fp16_composes_with_the_low_vram_patches_in_either_order(sm75, order):
    model = _model()
    inputs = _inputs(96)
    mixed, _ = turing_nodes.H3KitComputeDtype().apply(model, "auto")
    expected = _run(mixed, inputs)
    if order == "turing_first":
        both, _ = H3KitLowVRAMAttention().patch(mixed, 2)
        both, _ = H3KitChunkFeedForward().patch(both, 4, 0)
    else:
        both, _ = H3KitLowVRAMAttention().patch(model, 2)
        both, _ = H3KitChunkFeedForward().patch(both, 4, 0)
        both, _ = turing_nodes.H3KitComputeDtype().apply(both, "auto")
    got = _run(both, inputs)
    assert torch.equal(got, expected)
    outer = both.object_patches["diffusion_model.blocks.0.attn.forward"]
    assert outer.h3kit_patch == "turing_fp16" and outer.inner.h3kit_patch == "lowvram_attention"
    assert outer.inner.ledger.counts["H3 attention"] == {"per_group": 2}  # the head groups ran, in fp16


def test_reapplying_replaces_the_cast_and_an_explicit_dtype_removes_it(sm75):
    model = _model()
    mixed, _ = turing_nodes.H3KitComputeDtype().apply(model, "auto")
    again, _ = turing_nodes.H3KitComputeDtype().apply(mixed, "auto")
    inner = again.object_patches["diffusion_model.blocks.0.mlp.forward"].inner
    assert getattr(inner, "h3kit_patch", None) is None
    fp32, report = turing_nodes.H3KitComputeDtype().apply(mixed, "fp32")
    assert set(fp32.object_patches) == {"manual_cast_dtype"} and "removed" in json.loads(report)["note"]
    inputs = _inputs()
    assert torch.equal(_run(fp32, inputs), _run(model, inputs))


def test_a_model_without_a_manual_cast_is_switched_to_an_fp32_cast_and_says_so(sm75):
    patched, report = turing_nodes.H3KitComputeDtype().apply(_model(cast=None), "auto")
    assert patched.object_patches["manual_cast_dtype"] is F32
    assert "layers now cast their weights per call" in json.loads(report)["note"]


def test_explicit_fp16_on_h3_says_the_residual_can_saturate(sm75):
    _patched, report = turing_nodes.H3KitComputeDtype().apply(_model(), "fp16")
    report = json.loads(report)
    assert report["compute_dtype"] == "float16"
    assert any("residual stream can saturate at 65504" in w for w in report["warnings"])


def test_auto_without_a_gpu_leaves_h3_alone():
    model = _model()
    patched, report = turing_nodes.H3KitComputeDtype().apply(model, "auto")
    assert patched is model and "no CUDA device" in json.loads(report)["note"]


def test_inputs_that_are_not_fp32_pass_through_unchanged():
    calls = []
    patch = turing.H3Fp16Sublayer(lambda x, **kw: calls.append(x.dtype) or x, "mlp", turing.Fp16Ledger())
    x = torch.ones(3, 4, dtype=torch.bfloat16)
    assert patch(x) is x and calls == [torch.bfloat16] and patch.ledger.counts == {}


def test_startup_adapter_keeps_h3s_policy_and_says_why(monkeypatch, caplog):
    class BASE:
        supported_inference_dtypes = [F16, torch.bfloat16, F32]

    class LTXV(BASE):
        supported_inference_dtypes = [torch.bfloat16, F32]

    class MiniMaxH3(BASE):
        supported_inference_dtypes = [torch.bfloat16, F32]

    models = types.SimpleNamespace(LTXV=LTXV, MiniMaxH3=MiniMaxH3)
    monkeypatch.setitem(sys.modules, "comfy.supported_models", models)
    monkeypatch.setitem(sys.modules, "comfy.model_management",
                        types.SimpleNamespace(get_torch_device=lambda: torch.device("cuda", 0)))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.delenv(turing.OPT_OUT_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="H3Kit"):
        assert turing.apply_turing_fp16_at_startup().apply
    assert LTXV.supported_inference_dtypes[0] is F16
    assert MiniMaxH3.supported_inference_dtypes == [torch.bfloat16, F32]
    lines = [r.getMessage() for r in caplog.records if "MiniMaxH3" in r.getMessage()]
    assert len(lines) == 1 and "kept" in lines[0] and "H3KitComputeDtype (auto)" in lines[0]
