"""Measurement: where fp16 is safe in MiniMax-H3, on the host's real `DiTBlock` at full width (CPU).

Runs with the Python of a ComfyUI that has native MiniMax-H3 (0.33.0: `comfy/ldm/minimax/model.py`):

    <host python> scripts/bench_h3_fp16.py --comfyui /path/to/ComfyUI [--tokens 256] [--json out.json]

One real `DiTBlock(5376, 56 heads x 128, FFN 14336)` in the curve form of the pruned checkpoints (adaLN from an
8-wide fp32 table, no SiLU), built with `comfy.ops.manual_cast` and fp32 weights (nn.Linear's default init, norms 1),
so each variant computes exactly what ComfyUI computes for that compute dtype:
- fp32: the reference (what 0.33.0 runs on a GPU without bf16);
- bf16: what the model was made for (bf16 GPUs);
- fp16: everything in fp16 (what adding fp16 to MiniMaxH3.supported_inference_dtypes would do);
- mixed: H3KitComputeDtype's Turing mode, adapters/turing.H3Fp16Sublayer on `attn` and `mlp`: attention and
  feed-forward in fp16, residual stream, norms and modulation fp32, overflowing fp16 results recomputed in fp32.
Real H3 weights are gated, so activation scale is swept instead: the residual stream's RMS (`--rms`, with 4 outlier
channels at 32x the RMS, an assumption: large DiTs carry a few such channels) and a gain on the four projection
weights (`--gains`; powers of two, applied and undone exactly). Per case: the largest magnitude of each part in the
fp32 reference (residual in/out, attention output, fc1 output, the SwiGLU product fc2 reads, feed-forward output),
and per variant whether the output is finite, its relative L2 error against fp32 (whole output, and the block's
update out - x, which the residual's own rounding does not mask) and what the mixed mode ran.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, ROT_HALF = 5376, 56, 128, 14336, 8, 48
OUTLIERS = (7, 1201, 2999, 4000)
PROJECTIONS = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2")


def load_host(comfyui: str, device: str):
    sys.path.insert(0, comfyui)
    from comfy.cli_args import args

    args.cpu = device == "cpu"  # model_management reads this at import
    import comfy.ldm.minimax.model as h3
    import comfy.ops
    return h3, comfy.ops


def load_turing_adapter():
    spec = importlib.util.spec_from_file_location("h3kit_turing_adapter", ROOT / "adapters" / "turing.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def build_block(h3, ops, torch):
    block = h3.DiTBlock(HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, 1e-5, 1e-5, apply_silu=False,
                        adaln_dtype=torch.float32, dtype=torch.float32, device="cpu", operations=ops.manual_cast)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            elif p.dim() == 2:  # nn.Linear's default: U(-1/sqrt(in), 1/sqrt(in))
                bound = 1.0 / p.shape[1] ** 0.5
                p.copy_(torch.rand(p.shape, generator=gen) * 2 * bound - bound)
            else:
                p.zero_()
    return block.requires_grad_(False)


def inputs(h3, torch, tokens: int, rms: float):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, HIDDEN, generator=gen) * rms
    x[:, list(OUTLIERS)] *= 32.0
    t_emb = torch.randn(2, T_DIM, generator=gen)  # two timesteps (video/text and audio): 6 modulation rows
    third = tokens // 3
    segments = [(0, third, 1), (third, 2 * third, 5), (2 * third, tokens, 3)]
    positions = torch.arange(tokens, dtype=torch.float32)[:, None]
    half = positions / (10000.0 ** (torch.arange(ROT_HALF, dtype=torch.float32) / ROT_HALF))
    angles = torch.cat((half, half), dim=-1)
    return x, t_emb, segments, angles


class PartMax:
    """Largest |value| of each block part in one forward (hooks on the real modules)."""

    def __init__(self, block):
        self.seen: dict[str, float] = {}
        self.handles = [block.attn.register_forward_hook(self._out("attention out")),
                        block.mlp.fc1.register_forward_hook(self._out("fc1 out")),
                        block.mlp.fc2.register_forward_pre_hook(self._in("SwiGLU product (fc2 in)")),
                        block.mlp.register_forward_hook(self._out("feed-forward out"))]

    def _note(self, name, tensor):
        self.seen[name] = max(self.seen.get(name, 0.0), float(tensor.detach().abs().float().max()))

    def _out(self, name):
        return lambda _m, _i, out: self._note(name, out)

    def _in(self, name):
        return lambda _m, args: self._note(name, args[0])

    def close(self):
        for handle in self.handles:
            handle.remove()


def run_variant(h3, torch, block, turing, name, x, t_emb, segments, angles, device, reps=1):
    ledger = None
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "mixed": torch.float32}[name]
    if name == "mixed":
        ledger = turing.Fp16Ledger()
        for sub in ("attn", "mlp"):
            module = getattr(block, sub)
            module.forward = turing.H3Fp16Sublayer(type(module).forward.__get__(module), sub, ledger)
    try:
        x, t_emb, angles = x.to(device), t_emb.to(device), angles.to(device)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        times = []
        for _ in range(reps):  # the first run of each variant warms up when reps > 1; the median is reported
            sync()
            start = time.perf_counter()
            with torch.inference_mode():
                out = block(x.to(dtype).clone(), t_emb, segments, h3.rope_rotation_table(angles, dtype))
            sync()
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times[1:] if len(times) > 1 else times)
    finally:
        if name == "mixed":
            del block.attn.forward, block.mlp.forward
    return out.float(), seconds, (ledger.counts if ledger is not None else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comfyui", default=os.environ.get("COMFYUI_DIR"), help="ComfyUI checkout with MiniMax-H3")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--cases", default="1:1,1024:1,4096:1,1:16,1:64",
                        help="comma list of residual_rms:weight_gain (gain a power of two)")
    parser.add_argument("--variants", default="fp32,bf16,fp16,mixed")
    parser.add_argument("--device", default="cpu", help="cpu (the documented run) or cuda")
    parser.add_argument("--reps", type=int, default=1, help="runs per variant; with more than one, the first warms "
                        "up and the median of the rest is reported")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.comfyui:
        parser.error("--comfyui (or COMFYUI_DIR) is required")
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_output

    output = bench_output.JsonOutput(args.json)
    h3, ops = load_host(args.comfyui, args.device)
    import torch

    device = torch.device(args.device)
    turing = load_turing_adapter()
    env = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
           "cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
           "comfyui": args.comfyui, "tokens": args.tokens, "device": args.device, "command": " ".join(sys.argv),
           "block": f"DiTBlock({HIDDEN}, {HEADS}x{HEAD_DIM}, ffn {FFN}, curve adaLN t_dim {T_DIM})"}
    print(json.dumps(env), flush=True)
    block = build_block(h3, ops, torch).to(device)
    rows = []
    for case in args.cases.split(","):
        rms, gain = (float(v) for v in case.split(":"))
        x, t_emb, segments, angles = inputs(h3, torch, args.tokens, rms)
        with torch.no_grad():
            for layer in PROJECTIONS:
                block.get_submodule(layer).weight.mul_(gain)
        try:
            parts = PartMax(block)
            reference, _s, _l = run_variant(h3, torch, block, turing, "fp32", x, t_emb, segments, angles, device)
            parts.close()
            maxima = {"residual in": float(x.abs().max()), **parts.seen,
                      "residual out": float(reference.abs().max())}
            for name in args.variants.split(","):
                if name == "fp32":
                    out, seconds, ledger = reference, None, None
                else:
                    out, seconds, ledger = run_variant(h3, torch, block, turing, name, x, t_emb, segments, angles,
                                                     device, args.reps)
                finite = bool(torch.isfinite(out).all())
                rel = float((out - reference).norm() / reference.norm()) if finite else None
                # the block's own contribution (out - its input x): the residual passes through, so this is what
                # attention and feed-forward added (plus the rounding of the residual add in that dtype)
                start = x.to({"bf16": torch.bfloat16, "fp16": torch.float16}.get(name, torch.float32)).float()
                out, reference = out.cpu(), reference.cpu()
                update = (out - start) if finite else None
                rel_update = float((update - (reference - x)).norm() / (reference - x).norm()) if finite else None
                row = {"rms": rms, "gain": gain, "variant": name, "finite": finite, "rel_l2_vs_fp32": rel,
                       "rel_l2_update_vs_fp32": rel_update,
                       "non_finite": int((~torch.isfinite(out)).sum()), "seconds": seconds, "ran": ledger,
                       "fp32_max": maxima if name == "fp32" else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            with torch.no_grad():
                for layer in PROJECTIONS:
                    block.get_submodule(layer).weight.div_(gain)
    output.write({"environment": env, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
