"""Run inside a ComfyUI with native MiniMax-H3 (cwd = the host checkout): H3KitComputeDtype's Turing mode on the
host's real DiTBlock, ModelPatcher and quantized loader, and the startup adapter on its real supported_models.

    <host python> tests/turing_h3_probe.py <pack root>    -> one JSON object on the last stdout line

The node runs as on an sm_75 GPU (its capability lookup answers (7, 5); the tensors stay on the CPU). The oracle is
the real DiTBlock's forward order rebuilt from the host's own functions (`_mod_scale_shift`, `_mod_gate`, the block's
adaLN, norms, attention and MLP), with attention and MLP called on fp16 inputs and the RoPE table in fp16: the
patched model must equal it bitwise, plain and int8-convrot (the Turing checkpoint's format), and a feed-forward
whose fp16 result overflows must come back finite, recomputed in fp32.
"""

from __future__ import annotations

import json
import os
import sys
import types
from importlib import import_module

sys.path.insert(0, os.getcwd())
from comfy.cli_args import args  # noqa: E402

args.cpu = True  # model_management reads this at import: never touch a GPU here
import comfy.ldm.minimax.model as h3  # noqa: E402
import comfy.model_patcher  # noqa: E402
import comfy.ops  # noqa: E402
import comfy.quant_ops  # noqa: E402
import comfy.supported_models  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

PACK = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, TOKENS = 256, 2, 128, 512, 8, 48


def load_pack_module(name: str):
    """A pack module (e.g. "nodes.turing") imported as h3kit.<name> without running the pack's registration."""
    for package, folder in (("h3kit", PACK), ("h3kit.nodes", f"{PACK}/nodes"), ("h3kit.adapters", f"{PACK}/adapters"),
                            ("h3kit.kernels", f"{PACK}/kernels"), ("h3kit.checks", f"{PACK}/checks")):
        if package not in sys.modules:
            module = types.ModuleType(package)
            module.__path__ = [folder]
            sys.modules[package] = module
    return import_module(f"h3kit.{name}")


class Net(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.blocks = nn.ModuleList([h3.DiTBlock(HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, 1e-5, 1e-5, apply_silu=False,
                                                 adaln_dtype=torch.float32, dtype=torch.float32, device="cpu",
                                                 operations=ops) for _ in range(2)])

    def forward(self, x, t_emb, segments, table):
        for block in self.blocks:
            x = block(x, t_emb, segments, table, transformer_options={})
        return x


class Root(nn.Module):
    """What ModelPatcher needs of a BaseModel here: the DiT, its weight dtype and its manual-cast dtype."""

    def __init__(self, net, cast):
        super().__init__()
        self.diffusion_model, self.manual_cast_dtype = net, cast

    def get_dtype(self):
        return torch.float32


def randomized(net, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            values = torch.randn(p.shape, generator=gen) * (0.05 if p.dim() == 2 else 0.2)
            p.copy_(values + 1.0 if "norm" in name else values)
    return net.requires_grad_(False)


def int8_convrot(plain: Net) -> Net:
    """The same net loaded through the host's quantizing loader: every projection int8 tensor-wise with convrot."""
    state = {}
    for name, tensor in plain.state_dict().items():
        layer = name.rsplit(".", 1)[0]
        if name.endswith("weight") and layer.rsplit(".", 1)[-1] in ("qkv_proj", "out_proj", "fc1", "fc2"):
            qt = comfy.quant_ops.QuantizedTensor.from_float(tensor, "TensorWiseINT8Layout", per_channel=True,
                                                            convrot=True)
            state[f"{layer}.weight"], state[f"{layer}.weight_scale"] = qt._qdata, qt._params.scale
            conf = json.dumps({"format": "int8_tensorwise", "convrot": True}).encode()
            state[f"{layer}.comfy_quant"] = torch.tensor(list(conf), dtype=torch.uint8)
        else:
            state[name] = tensor
    net = Net(comfy.ops.mixed_precision_ops({}, torch.float32))
    problems = net.load_state_dict(state, strict=False)
    assert not problems.missing_keys and not problems.unexpected_keys, problems
    return net.requires_grad_(False)


def inputs():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(TOKENS, HIDDEN, generator=gen) * 4.0
    t_emb = torch.randn(2, T_DIM, generator=gen)
    segments = [(0, 16, 1), (16, 32, 5), (32, TOKENS, 3)]
    positions = torch.arange(TOKENS, dtype=torch.float32)[:, None]
    half = positions / (10000.0 ** (torch.arange(48, dtype=torch.float32) / 48))
    table = h3.rope_rotation_table(torch.cat((half, half), dim=-1), torch.float32)
    return x, t_emb, segments, table


def oracle(net, x, t_emb, segments, table, fp32_mlp=()):
    x = x.clone()
    for i, block in enumerate(net.blocks):
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = block.adaln_proj(t_emb)
        h = h3._mod_scale_shift(block.norm1(x), shift_a, scale_a, segments)
        attn = type(block.attn).forward(block.attn, h.half(), rope_freqs=table.half(), transformer_options={})
        x = h3._mod_gate(x, gate_a, attn.float(), segments)
        h = h3._mod_scale_shift(block.norm2(x), shift_m, scale_m, segments)
        mlp = type(block.mlp).forward(block.mlp, h) if i in fp32_mlp else type(block.mlp).forward(block.mlp, h.half())
        x = h3._mod_gate(x, gate_m, mlp.float(), segments)
    return x


def run_case(turing_nodes, net, cast, fp32_mlp=()) -> dict:
    patcher = comfy.model_patcher.ModelPatcher(Root(net, cast), torch.device("cpu"), torch.device("cpu"))
    x, t_emb, segments, table = inputs()
    with torch.inference_mode():
        fp32 = net(x.clone(), t_emb, segments, table)
    patched, report = turing_nodes.H3KitComputeDtype().apply(patcher, "auto")
    patched.patch_model()
    try:
        with torch.inference_mode():
            got = net(x.clone(), t_emb, segments, table)
            expected = oracle(net, x, t_emb, segments, table, fp32_mlp)
    finally:
        patched.unpatch_model()
    ledger = patched.object_patches["diffusion_model.blocks.0.attn.forward"].ledger.counts
    return {"equal_oracle": bool(torch.equal(got, expected)), "finite": bool(torch.isfinite(got).all()),
            "rel_l2_vs_fp32": float((got - fp32).norm() / fp32.norm()), "dtype": str(got.dtype),
            "ledger": ledger, "report": json.loads(report), "patch_keys": sorted(patched.object_patches)}


def main() -> dict:
    turing = load_pack_module("adapters.turing")
    turing_nodes = load_pack_module("nodes.turing")
    turing_nodes.device_capability = lambda device: (7, 5)  # as on an RTX 2080 Ti
    plain = randomized(Net(comfy.ops.manual_cast), 1)
    out = {"plain": run_case(turing_nodes, plain, torch.float32),
           "no_manual_cast": run_case(turing_nodes, randomized(Net(comfy.ops.disable_weight_init), 1), None),
           "int8_convrot": run_case(turing_nodes, int8_convrot(plain), torch.float32)}
    loud = randomized(Net(comfy.ops.manual_cast), 1)
    with torch.no_grad():
        loud.blocks[0].mlp.fc2.weight.mul_(2.0 ** 20)  # fp32 holds it; fp16 overflows
    out["overflow"] = run_case(turing_nodes, loud, torch.float32, fp32_mlp=(0,))
    before = {name: [str(d) for d in getattr(comfy.supported_models, name).supported_inference_dtypes]
              for name in ("LTXV", "LTXAV", "MiniMaxH3")}
    changed = turing.install_fp16_preference(comfy.supported_models, torch.float16)
    out["startup"] = {"before": before, "changed": sorted(changed),
                      "h3_after": [str(d) for d in comfy.supported_models.MiniMaxH3.supported_inference_dtypes],
                      "note": turing.h3_policy_note(comfy.supported_models)}
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
