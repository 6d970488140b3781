"""Tier (b): the low-VRAM patches against the real host attention function of a ComfyUI checkout (COMFYUI_DIR)."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from lowvram_fakes import BaseModel, FakeModelPatcher, LTXNet

pytestmark = pytest.mark.comfyui


@pytest.fixture(scope="module")
def host_attention_module():
    comfyui_dir = os.environ.get("COMFYUI_DIR")
    if not comfyui_dir:
        pytest.skip("COMFYUI_DIR is unset")
    sys.path.insert(0, comfyui_dir)
    try:
        from comfy.cli_args import args

        args.cpu = True  # model_management reads this at import: never touch a GPU here
        import comfy.ldm.modules.attention as attention
    except ImportError as exc:
        pytest.skip(f"ComfyUI's attention module does not import here: {exc}")
    return attention


def test_ltx_patch_uses_the_hosts_optimized_attention_and_its_override(host_attention_module, monkeypatch):
    """No optimized_attention in the fake model's module: the host's comfy.ldm.modules.attention one is used."""
    import lowvram_fakes
    from h3kit.nodes.lowvram import H3KitLowVRAMAttention, host_attention
    monkeypatch.delattr(lowvram_fakes, "optimized_attention")
    monkeypatch.setattr(lowvram_fakes.LTXCrossAttention, "forward", _host_forward(host_attention_module))
    torch.manual_seed(0)
    model = FakeModelPatcher(BaseModel(LTXNet()))
    calls = []

    def override(original, q, k, v, heads, **kwargs):
        calls.append(heads)
        return original(q, k, v, heads, **kwargs)

    model.model_options["transformer_options"] = {"optimized_attention_override": override}
    _fn, _extra, origin = host_attention(model.model.diffusion_model.transformer_blocks[0].attn1)
    assert origin == "comfy.ldm.modules.attention.optimized_attention"
    vx, ax, ctx = torch.randn(1, 10, 16), torch.randn(1, 7, 12), torch.randn(1, 5, 10)
    expected = model.run(vx.clone(), ax, ctx)
    unpatched_calls, calls[:] = list(calls), []
    patched, _ = H3KitLowVRAMAttention().patch(model, 2)
    got = patched.run(vx.clone(), ax, ctx)
    assert (got - expected).abs().max().item() <= 1e-5
    assert unpatched_calls == [4, 4, 3] * 2 and calls == [2, 2, 2, 2, 2, 1] * 2


def _host_forward(attention):
    """The fake LTX forward with the host's optimized_attention in place of the fake one."""
    def forward(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options={}):  # noqa: B006
        context = x if context is None else context
        q, k, v = self.q_norm(self.to_q(x)), self.k_norm(self.to_k(context)), self.to_v(context)
        out = attention.optimized_attention(q, k, v, self.heads, mask=mask, transformer_options=transformer_options)
        return self.to_out(out)
    return forward
