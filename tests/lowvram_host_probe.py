"""Run inside a real ComfyUI host's python (cwd = the host checkout): the low-VRAM patches on the host's own LTX
CrossAttention / FeedForward (built through comfy.ops), its RoPE format, its LoRA loader and its ModelPatcher.

    <host python> tests/lowvram_host_probe.py <pack root>    -> one JSON object on the last stdout line

Cases: a LoRA on every attention's to_v and on ff.net.0.proj, the model loaded (a) partially, so the host turns
those patches into LowVramPatch weight functions at load time, and (b) fully (weights patched in place). For each,
the patched model's output is compared bitwise with the unpatched one, and with the output without the LoRA.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import types

sys.path.insert(0, os.getcwd())
from comfy.cli_args import args  # noqa: E402

args.cpu = True  # model_management reads this at import: never touch a GPU here
import comfy.ldm.lightricks.model as ltx  # noqa: E402
import comfy.lora  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.model_patcher  # noqa: E402
import comfy.ops  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

DIM, HEADS, DIM_HEAD, CTX, TOKENS, BATCH = 64, 4, 16, 32, 24, 1


def load_pack(root: str):
    """The pack's low-VRAM node module, imported as package `h3kit` without registering every node."""
    for name, folder in (("h3kit", root), ("h3kit.nodes", f"{root}/nodes"), ("h3kit.adapters", f"{root}/adapters"),
                         ("h3kit.kernels", f"{root}/kernels")):
        package = types.ModuleType(name)
        package.__path__ = [folder]
        sys.modules[name] = package
    spec = importlib.util.spec_from_file_location("h3kit.nodes.lowvram", f"{root}/nodes/lowvram.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Block(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.attn1 = ltx.CrossAttention(DIM, None, HEADS, DIM_HEAD, dtype=torch.bfloat16, operations=ops)
        self.attn2 = ltx.CrossAttention(DIM, CTX, HEADS, DIM_HEAD, dtype=torch.bfloat16, operations=ops)
        self.ff = ltx.FeedForward(DIM, DIM, glu=True, dtype=torch.bfloat16, operations=ops)


class Net(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.transformer_blocks = nn.ModuleList([Block(ops), Block(ops)])

    def forward(self, x, context, pe):
        for block in self.transformer_blocks:
            x = x + block.attn1(x, pe=pe)
            x = x + block.attn2(x, context=context)
            x = x + block.ff(x)
        return x


class Root(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.diffusion_model = Net(ops)


def rope_argument():
    """The `pe` this host's LTX model passes: (cos, sin) for 0.3.64, (cos, sin, split) for 0.12.1, (table, split) newer."""
    source = inspect.getsource(ltx.apply_rotary_emb)
    angles = torch.arange(TOKENS, dtype=torch.float32)[None, :, None] / (3.0 ** torch.linspace(0, 3, DIM // 2))
    if "rotation_matrix" in source:
        a = angles.reshape(BATCH, TOKENS, HEADS, DIM_HEAD // 2)
        c, s = a.cos(), a.sin()
        return torch.stack((c, -s, s, c), dim=-1).reshape(*a.shape, 2, 2).to(torch.bfloat16), True, "(table, split)"
    if "split_pe" in source:
        a = angles.reshape(BATCH, TOKENS, HEADS, DIM_HEAD // 2).transpose(1, 2)
        return (a.cos().to(torch.bfloat16), a.sin().to(torch.bfloat16), True), None, "(cos, sin, split)"
    cos = angles.cos().repeat_interleave(2, dim=-1).to(torch.bfloat16)
    sin = angles.sin().repeat_interleave(2, dim=-1).to(torch.bfloat16)
    return (cos, sin), None, "(cos, sin)"


def lora_patches(model):
    gen = torch.Generator().manual_seed(5)
    state, to_load = {}, {}
    for i in range(2):
        for name, (out_f, in_f) in {f"transformer_blocks.{i}.attn1.to_v": (DIM, DIM),
                                    f"transformer_blocks.{i}.attn2.to_v": (DIM, CTX),
                                    f"transformer_blocks.{i}.ff.net.0.proj": (4 * DIM, DIM)}.items():
            key = f"lora_{name.replace('.', '_')}"
            state[f"{key}.lora_up.weight"] = torch.randn(out_f, 4, generator=gen) * 0.5
            state[f"{key}.lora_down.weight"] = torch.randn(4, in_f, generator=gen) * 0.5
            to_load[key] = f"diffusion_model.{name}.weight"
    return comfy.lora.load_lora(state, to_load)


def run(patcher, x, context, pe, lowvram: bool):
    patcher.patch_model(device_to=torch.device("cpu"), lowvram_model_memory=1 if lowvram else 0)
    try:
        with torch.no_grad():
            return patcher.model.diffusion_model(x.clone(), context, pe)
    finally:
        patcher.unpatch_model(device_to=torch.device("cpu"))


def main(root: str) -> dict:
    lowvram = load_pack(root)
    torch.manual_seed(0)
    ops = comfy.ops.manual_cast
    model = Root(ops)
    for p in model.parameters():
        p.data.normal_(0, 0.2)
    base = comfy.model_patcher.ModelPatcher(model, torch.device("cpu"), torch.device("cpu"))
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, TOKENS, DIM, generator=gen).to(torch.bfloat16)
    context = torch.randn(BATCH, 7, CTX, generator=gen).to(torch.bfloat16)
    pe, split, pe_format = rope_argument()
    pe = (pe, split) if split is not None else pe
    result = {"pe_format": pe_format, "host": os.getcwd()}
    without = run(base, x, context, pe, lowvram=False)
    with_lora = base.clone()
    with_lora.add_patches(lora_patches(model), 1.0)
    patched, attention_report = lowvram.H3KitLowVRAMAttention().patch(with_lora, 2)
    patched, ffn_report = lowvram.H3KitChunkFeedForward().patch(patched, 4, 0)
    result["reports"] = [json.loads(attention_report), json.loads(ffn_report)]
    for mode in ("lowvram", "full"):
        expected = run(with_lora, x, context, pe, lowvram=mode == "lowvram")
        got = run(patched, x, context, pe, lowvram=mode == "lowvram")
        result[mode] = {"patched_equals_host": bool(torch.equal(got, expected)),
                        "max_abs_diff": float((got.float() - expected.float()).abs().max()),
                        "lora_changes_output": not torch.equal(expected, without),
                        "patched_equals_no_lora": bool(torch.equal(got, without))}
    attention = patched.object_patches["diffusion_model.transformer_blocks.0.attn1.forward"]
    ffn = patched.object_patches["diffusion_model.transformer_blocks.0.ff.forward"]
    result["ledger"] = {**attention.ledger.counts, **ffn.ledger.counts}
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
