"""Benchmark: peak memory and time of one H3 / LTX-2.5 block, unpatched vs head groups + FFN token chunks.

Self-contained (plain torch; no ComfyUI): the stand-in blocks follow the host contract of host-api.md
§1/§3 (H3: norm -> fused qkv -> per-head RMSNorm + partial split-half RoPE in place -> attention ->
out_proj, then norm -> SwiGLU MLP; LTX video stream: self-attention with RoPE, text cross-attention,
audio-to-video cross-attention, GELU FFN), and the patched variants call kernels/chunked.py exactly as
the nodes do. Attention is F.scaled_dot_product_attention.

Peak = torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus the memory allocated when
the block starts (weights, inputs and the block input already counted out). Time = median of CUDA-event
timings over --reps runs after --warmup runs.

    python scripts/bench_lowvram.py                      # full run (needs a large GPU)
    python scripts/bench_lowvram.py --quick --device cpu  # tiny sizes, checks the script
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

try:
    from h3kit.kernels import chunked
except ImportError:  # run from a bare checkout (the benchmark machine has no h3kit install)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kernels import chunked

H3_FULL = {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336, "rot": 96, "tokens": [10_000, 37_000, 108_000]}
H3_QUICK = {"hidden": 64, "heads": 8, "head_dim": 16, "ffn": 160, "rot": 12, "tokens": [300, 1000]}
# LTX-2.x video stream (NEW av_model.py / LTX-2 config): 32 heads x 128 = 4096, FFN x4 GELU, audio 32 x 64 = 2048,
# text context 4096 wide. Refine shape 1344x768, 121 frames -> latent 16 x 24 x 42 = 16128 video tokens;
# audio ~126 tokens for 5.04 s; 1024 text tokens.
LTX_FULL = {"dim": 4096, "heads": 32, "head_dim": 128, "a_dim": 2048, "a_heads": 32, "a_head_dim": 64,
            "ctx": 1024, "audio": 126, "tokens": [16_128]}
LTX_QUICK = {"dim": 64, "heads": 4, "head_dim": 16, "a_dim": 32, "a_heads": 4, "a_head_dim": 8,
             "ctx": 16, "audio": 12, "tokens": [600]}
SETTINGS = [(None, None), (2, 2), (4, 4), (8, 8), (16, 16), (16, 8), (0, 0)]


def _linear(n_in: int, n_out: int, bias: bool, device, dtype) -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=bias, device=device, dtype=dtype)
    with torch.no_grad():
        layer.weight.normal_(0.0, n_in ** -0.5)
        if bias:
            layer.bias.zero_()
    return layer


# ------------------------------------------------------------------------------------------- H3


class H3Attention(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        self.heads, self.head_dim = c["heads"], c["head_dim"]
        inner = self.heads * self.head_dim
        self.qkv_proj = _linear(c["hidden"], 3 * inner, False, device, dtype)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=1e-5, device=device, dtype=dtype)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=1e-5, device=device, dtype=dtype)
        self.out_proj = _linear(inner, c["hidden"], False, device, dtype)

    def forward(self, x, rope_freqs):
        """The host's forward: fused qkv buffer, in-place norm+rope on it, attention, out_proj."""
        s, inner = x.shape[0], self.heads * self.head_dim
        qkv = self.qkv_proj(x)
        q, k, v = (qkv[:, i * inner:(i + 1) * inner].view(s, self.heads, self.head_dim) for i in range(3))
        table = rope_freqs.reshape(-1, *rope_freqs.shape[-4:])
        chunked.rms_norm_rope_(q, self.q_norm.weight, 1e-5, table)
        chunked.rms_norm_rope_(k, self.k_norm.weight, 1e-5, table)
        out = chunked.sdpa_attention(*(t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)), self.heads, skip_reshape=True)
        del qkv, q, k, v
        return self.out_proj(out.squeeze(0))


class H3Block(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        self.norm1 = nn.RMSNorm(c["hidden"], eps=1e-5, device=device, dtype=dtype)
        self.norm2 = nn.RMSNorm(c["hidden"], eps=1e-5, device=device, dtype=dtype)
        self.attn = H3Attention(c, device, dtype)
        self.fc1 = _linear(c["hidden"], 2 * c["ffn"], False, device, dtype)
        self.fc2 = _linear(c["ffn"], c["hidden"], False, device, dtype)

    def forward(self, x, rope_freqs, head_chunks=None, ffn_chunks=None):
        """DiTBlock's order: x += attn(norm1(x)); x += mlp(norm2(x)) (residuals in place, as the host)."""
        h = self.norm1(x)
        if head_chunks is None:
            a = self.attn(h, rope_freqs)
        else:
            at = self.attn
            groups = head_chunks or chunked.auto_head_chunks(x.shape[0], at.heads, at.head_dim, x.element_size(),
                                                             chunked.free_device_bytes(x.device))
            a = chunked.h3_head_group_attention(h, at.qkv_proj, at.q_norm, at.k_norm, at.out_proj, at.heads,
                                                at.head_dim, rope_freqs, groups, chunked.sdpa_attention)
        x.add_(a)
        del a
        h = self.norm2(x)
        if ffn_chunks is None:
            m = chunked.swiglu_ffn(h, self.fc1, self.fc2)
        else:
            count = ffn_chunks or chunked.auto_ffn_chunks(x.shape[0], self.fc1.out_features, x.element_size(),
                                                          chunked.free_device_bytes(x.device))
            m = chunked.chunked_swiglu_ffn(h, self.fc1, self.fc2, count)
        return x.add_(m)


def h3_case(c, tokens, device, dtype):
    block = H3Block(c, device, dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(tokens, c["hidden"], device=device, dtype=dtype, generator=gen)
    pos = torch.arange(tokens, device=device, dtype=torch.float32)[:, None]
    angles = pos * (1.0 / (10000.0 ** torch.linspace(0, 1, c["rot"] // 2, device=device)))
    cos, sin = angles.cos(), angles.sin()
    rope = torch.stack((cos, -sin, sin, cos), -1).reshape(1, tokens, 1, c["rot"] // 2, 2, 2).to(dtype)
    return lambda xin, hc, fc: block(xin, rope, hc, fc), x


# ------------------------------------------------------------------------------------------- LTX


class LTXAttention(nn.Module):
    def __init__(self, q_dim, kv_dim, heads, head_dim, device, dtype):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.dim_head, self.attn_precision, self.to_gate_logits = heads, head_dim, None, None
        self.to_q = _linear(q_dim, inner, True, device, dtype)
        self.to_k = _linear(kv_dim, inner, True, device, dtype)
        self.to_v = _linear(kv_dim, inner, True, device, dtype)
        self.q_norm = nn.RMSNorm(inner, eps=1e-5, device=device, dtype=dtype)
        self.k_norm = nn.RMSNorm(inner, eps=1e-5, device=device, dtype=dtype)
        self.to_out = _linear(inner, q_dim, True, device, dtype)

    def forward(self, x, context=None, pe=None):
        """The host's CrossAttention.forward: whole q/k/v, norms across heads, per-head RoPE, attention, to_out."""
        ctx = x if context is None else context
        q, k, v = self.q_norm(self.to_q(x)), self.k_norm(self.to_k(ctx)), self.to_v(ctx)
        if pe is not None:
            b, t, _ = q.shape
            table = pe[0][0]
            q = chunked.rms_norm_rope_(q[0].view(t, self.heads, -1), None, None, table, True,
                                       out=torch.empty_like(q[0]).view(t, self.heads, -1)).view(b, t, -1)
            k = chunked.rms_norm_rope_(k[0].view(t, self.heads, -1), None, None, table, True,
                                       out=torch.empty_like(k[0]).view(t, self.heads, -1)).view(b, t, -1)
        out = chunked.sdpa_attention(q, k, v, self.heads)
        del q, k, v
        return self.to_out(out)

    def patched(self, x, context, pe, head_chunks):
        groups = head_chunks or chunked.auto_head_chunks(x.shape[1], self.heads, self.dim_head, x.element_size(),
                                                         chunked.free_device_bytes(x.device))
        return chunked.ltx_head_group_attention(self, x, context, None, pe, None, groups, chunked.sdpa_attention)


class LTXVideoBlock(nn.Module):
    def __init__(self, c, device, dtype):
        super().__init__()
        d, h, hd = c["dim"], c["heads"], c["head_dim"]
        self.attn1 = LTXAttention(d, d, h, hd, device, dtype)
        self.attn2 = LTXAttention(d, d, h, hd, device, dtype)
        self.audio_to_video_attn = LTXAttention(d, c["a_dim"], c["a_heads"], c["a_head_dim"], device, dtype)
        self.ff_in = _linear(d, 4 * d, True, device, dtype)
        self.ff_out = _linear(4 * d, d, True, device, dtype)

    def ff(self, y):
        return self.ff_out(F.gelu(self.ff_in(y), approximate="tanh"))

    def forward(self, vx, ax, text, pe, head_chunks=None, ffn_chunks=None):
        def attend(attn, x, context, rope):
            if head_chunks is None:
                return attn(x, context, rope)
            return attn.patched(x, context, rope, head_chunks)

        vx.add_(attend(self.attn1, F.rms_norm(vx, (vx.shape[-1],)), None, pe))
        vx.add_(attend(self.attn2, F.rms_norm(vx, (vx.shape[-1],)), text, None))
        vx.add_(attend(self.audio_to_video_attn, F.rms_norm(vx, (vx.shape[-1],)), ax, None))
        y = F.rms_norm(vx, (vx.shape[-1],))
        if ffn_chunks is None:
            m = self.ff(y)
        else:
            count = ffn_chunks or chunked.auto_ffn_chunks(vx.shape[1], self.ff_in.out_features, vx.element_size(),
                                                          chunked.free_device_bytes(vx.device))
            m = chunked.chunked_tokens(self.ff, y, count, dim=1)
        return vx.add_(m)


def ltx_case(c, tokens, device, dtype):
    block = LTXVideoBlock(c, device, dtype)
    gen = torch.Generator(device=device).manual_seed(0)
    vx = torch.randn(1, tokens, c["dim"], device=device, dtype=dtype, generator=gen)
    ax = torch.randn(1, c["audio"], c["a_dim"], device=device, dtype=dtype, generator=gen)
    text = torch.randn(1, c["ctx"], c["dim"], device=device, dtype=dtype, generator=gen)
    half = c["head_dim"] // 2
    pos = torch.arange(tokens, device=device, dtype=torch.float32)[:, None, None]
    angles = pos * (1.0 / (10000.0 ** torch.linspace(0, 1, c["heads"] * half, device=device))).view(1, c["heads"], half)
    cos, sin = angles.cos(), angles.sin()
    table = torch.stack((cos, -sin, sin, cos), -1).reshape(1, tokens, c["heads"], half, 2, 2).to(dtype)
    return lambda xin, hc, fc: block(xin, ax, text, (table, True), hc, fc), vx


# ------------------------------------------------------------------------------------------- measuring


def measure(run, x, head_chunks, ffn_chunks, device, warmup, reps):
    cuda = device.type == "cuda"
    times, peak, out = [], None, None
    for i in range(warmup + reps):
        xin = x.clone()
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            began = time.perf_counter()
        result = run(xin, head_chunks, ffn_chunks)
        if cuda:
            stop.record()
            torch.cuda.synchronize(device)
            elapsed = start.elapsed_time(stop)
            peak = (torch.cuda.max_memory_allocated(device) - base) / (1 << 30)
        else:
            elapsed = (time.perf_counter() - began) * 1000.0
        if i >= warmup:
            times.append(elapsed)
        out = result
        del xin
    return statistics.median(times), peak, out


def label(head_chunks, ffn_chunks):
    if head_chunks is None:
        return "unpatched"
    name = lambda n: "auto" if n == 0 else str(n)  # noqa: E731
    return f"heads {name(head_chunks)} / ffn {name(ffn_chunks)}"


def bench(family, make, config, device, dtype, warmup, reps, rows):
    for tokens in config["tokens"]:
        run, x = make(config, tokens, device, dtype)
        with torch.no_grad():
            base_ms, base_peak, base_out = measure(run, x, None, None, device, warmup, reps)
            for head_chunks, ffn_chunks in SETTINGS:
                if head_chunks is None:
                    ms, peak, diff = base_ms, base_peak, 0.0
                else:
                    ms, peak, out = measure(run, x, head_chunks, ffn_chunks, device, warmup, reps)
                    diff = (out.float() - base_out.float()).abs().max().item()
                    del out
                rows.append({"block": family, "tokens": tokens, "setting": label(head_chunks, ffn_chunks),
                             "median_ms": round(ms, 2), "time_ratio": round(ms / base_ms, 4),
                             "peak_gib": None if peak is None else round(peak, 3),
                             "peak_reduction": None if not peak else round(base_peak / peak, 2),
                             "max_abs_diff": diff})
                print(json.dumps(rows[-1]), flush=True)
        del run, x, base_out
        if device.type == "cuda":
            torch.cuda.empty_cache()


def table(rows, meta) -> str:
    lines = [f"Machine: {meta['device']}; torch {meta['torch']}; dtype {meta['dtype']}; "
             f"warm-up {meta['warmup']}, repetitions {meta['reps']}, median of CUDA-event times.", "",
             "| block | tokens | setting | median ms | time vs unpatched | peak GiB above input | peak reduction | max abs diff |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        peak = "n/a" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        red = "n/a" if r["peak_reduction"] is None else f"{r['peak_reduction']:.2f}x"
        lines.append(f"| {r['block']} | {r['tokens']} | {r['setting']} | {r['median_ms']:.1f} | {r['time_ratio']:.3f} "
                     f"| {peak} | {red} | {r['max_abs_diff']:.3g} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (checks the script; numbers mean nothing)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", choices=["h3", "ltx"], default=None)
    parser.add_argument("--out", default=None, help="folder for bench_lowvram.md and bench_lowvram.json")
    args = parser.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    rows: list[dict] = []
    if args.only in (None, "h3"):
        bench("H3 block", h3_case, H3_QUICK if args.quick else H3_FULL, device, dtype, args.warmup, args.reps, rows)
    if args.only in (None, "ltx"):
        bench("LTX-2.5 video block", ltx_case, LTX_QUICK if args.quick else LTX_FULL, device, dtype,
              args.warmup, args.reps, rows)
    meta = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "dtype": args.dtype, "warmup": args.warmup, "reps": args.reps}
    text = table(rows, meta)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench_lowvram.md").write_text(text + "\n")
        (out / "bench_lowvram.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
