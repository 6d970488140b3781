"""Benchmark: one whole H3 DiT block, the host's forward vs H3Kit's low-VRAM patches (and LTX attention at refine size).

Baseline = the host-semantics forward of tests/lowvram_fakes.py (the stand-ins the bitwise tests use, written after
the host's DiTBlock / Attention / MLP / CrossAttention) with the host's kernel library comfy-kitchen (its CUDA
backend runs `rms_rope_split_half_`) and torch SDPA (ComfyUI's pytorch attention). The patched variants are the
real nodes (H3KitLowVRAMAttention + H3KitChunkFeedForward) applied to the same model, so every variant runs the
same layers; weights: bf16, int8 (comfy-kitchen TensorWiseINT8Layout) and NVFP4 where comfy-kitchen runs it.

Peak = torch.cuda.max_memory_allocated during the forward minus memory allocated when it starts (weights and the
block input counted out). Time = median of CUDA-event timings over --reps runs after --warmup runs; variants of
one shape run back to back in one process, compared as ratios to the host.

    python scripts/bench_lowvram.py --json out.json          # full sizes (about 40 GiB of GPU memory)
    python scripts/bench_lowvram.py --quick --device cpu      # tiny sizes, checks the script
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
H3_FULL = {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336, "rot": 96, "tokens": [10_000, 37_000, 108_000]}
H3_QUICK = {"hidden": 48, "heads": 4, "head_dim": 32, "ffn": 96, "rot": 24, "tokens": [256, 1024]}
LTX_FULL = {"dim": 4096, "heads": 32, "dim_head": 128, "tokens": 16_128}  # refine 1344x768, 121 frames
LTX_QUICK = {"dim": 64, "heads": 4, "dim_head": 16, "tokens": 512}
QUANT = {"plain": None, "int8": "TensorWiseINT8Layout", "nvfp4": "TensorCoreNVFP4Layout"}


def load_pack():
    """The pack's node module as package `h3kit` (installed, or this checkout without registering every node)."""
    try:
        from h3kit.nodes import lowvram
        return lowvram
    except ImportError:
        pass
    for name, folder in (("h3kit", ROOT), ("h3kit.nodes", ROOT / "nodes"), ("h3kit.adapters", ROOT / "adapters"),
                         ("h3kit.kernels", ROOT / "kernels")):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules[name] = package
    spec = importlib.util.spec_from_file_location("h3kit.nodes.lowvram", ROOT / "nodes" / "lowvram.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def timed(runs: dict, device, reps, warmup) -> dict:
    """{name: (median seconds, peak transient bytes, last output)}; the variants take turns in every repetition,
    so clock and thermal drift fall on all of them alike."""
    times: dict = {name: [] for name in runs}
    peaks, outs = dict.fromkeys(runs, 0), dict.fromkeys(runs)
    for i in range(warmup + reps):
        for name, run in runs.items():
            outs[name] = None
            if device.type == "cuda":
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                outs[name] = run()
                end.record()
                torch.cuda.synchronize()
                elapsed = start.elapsed_time(end) / 1000
                peaks[name] = max(peaks[name], torch.cuda.max_memory_allocated() - base)
            else:
                t0 = time.perf_counter()
                outs[name] = run()
                elapsed = time.perf_counter() - t0
            if i >= warmup:
                times[name].append(elapsed)
    return {name: (statistics.median(times[name]), peaks[name], outs[name]) for name in runs}


def variants(spec: str) -> list[tuple[str, int | None, int | None]]:
    """"host,auto,16/8" -> [("host", None, None), ("auto", 0, 0), ("16/8", 16, 8)]."""
    out = []
    for item in spec.split(","):
        if item == "host":
            out.append(("host", None, None))
        elif item == "auto":
            out.append(("auto", 0, 0))
        else:
            heads, chunks = item.split("/")
            out.append((item, int(heads), int(chunks)))
    return out


def bench_h3(lowvram, fakes, cfg, device, dtype, quant, reps, warmup, spec, phases=False):
    torch.manual_seed(0)
    with torch.device(device):
        net = fakes.H3Net(cfg["hidden"], cfg["heads"], cfg["head_dim"], cfg["ffn"], layers=1).to(dtype)
    layout = QUANT[quant]
    if layout is not None:
        names = ("blocks.0.attn.qkv_proj", "blocks.0.attn.out_proj", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2")
        fakes.quantize_layers(net, names, layout)
    model = fakes.FakeModelPatcher(fakes.BaseModel(net))
    rows = []
    for tokens in cfg["tokens"]:
        x, t_emb, segments, rope = fakes.h3_inputs(tokens, cfg["hidden"], cfg["rot"], dtype)
        inputs = (x.to(device), t_emb.to(device), segments, rope.to(device))
        patched_models = {}
        for name, head_chunks, chunks in [("host", None, None)] + [v for v in variants(spec) if v[0] != "host"]:
            patched = model
            if head_chunks is not None:
                patched, _report = lowvram.H3KitLowVRAMAttention().patch(model, head_chunks)
                patched, _report = lowvram.H3KitChunkFeedForward().patch(patched, chunks, 4096)
            patched_models[name] = patched
        runs = {name: (lambda p=p, i=inputs: p.run(i[0].clone(), *i[1:])) for name, p in patched_models.items()}
        results = timed(runs, device, reps, warmup)
        if phases and device.type == "cuda":
            rows += phase_rows(runs, model.model.diffusion_model.blocks[0], tokens, cfg["hidden"], dtype, quant)
        host_out, host_seconds, host_peak = results["host"][2], results["host"][0], results["host"][1]
        for name, (seconds, peak, out) in results.items():
            row = {"block": "H3", "dtype": str(dtype).replace("torch.", ""), "weights": quant, "tokens": tokens,
                   "variant": name, "ms": round(seconds * 1e3, 2), "peak_gib": round(peak / 2**30, 3)}
            if name != "host":
                row.update(time_ratio=round(seconds / host_seconds, 3),
                           peak_ratio_host_over_this=round(host_peak / max(1, peak), 2),
                           bitwise_equal=bool(torch.equal(out, host_out)),
                           max_abs_diff=float((out.float() - host_out.float()).abs().max()),
                           ran=_ledgers(patched_models[name]))
            rows.append(row)
            print(json.dumps(row), flush=True)
        del results, host_out, runs, patched_models
    return rows


PHASES = ("norm1", "attention", "norm2", "feed-forward", "end")


def phase_rows(runs: dict, block, tokens: int, hidden: int, dtype, quant: str) -> list[dict]:
    """One extra forward per variant with hooks on block.attn / block.mlp: peak and CUDA time of each phase
    (norm1+modulation | attention | gate+norm2+modulation | feed-forward | gate), peaks also in units of one
    [tokens, hidden] activation; then the tensors alive at the forward's peak (torch's memory history)."""
    unit = tokens * hidden * torch.empty((), dtype=dtype).element_size()
    rows = []
    for name, run in runs.items():
        marks: list = []

        def mark(*_args, marks=marks):
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append((event, torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()
        handles = [block.attn.register_forward_pre_hook(mark), block.attn.register_forward_hook(mark),
                   block.mlp.register_forward_pre_hook(mark), block.mlp.register_forward_hook(mark)]
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        mark()
        torch.cuda.memory._record_memory_history(stacks="python", max_entries=200_000)
        out = run()
        mark()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        torch.cuda.synchronize()
        for handle in handles:
            handle.remove()
        del out
        row = {"phases": name, "tokens": tokens, "weights": quant}
        for i, phase in enumerate(PHASES):
            (start, _), (stop, peak) = marks[i], marks[i + 1]
            row[phase] = {"ms": round(start.elapsed_time(stop), 2), "peak_units": round((peak - base) / unit, 2)}
        row["live_at_peak"] = live_at_peak(snapshot, unit)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def live_at_peak(snapshot: dict, unit: int) -> list[str]:
    """Replays the allocator trace of one forward: the allocations alive when their sum was largest, in units,
    each with the innermost frame of this repository that made it."""
    live, total, best, best_live = {}, 0, -1, {}
    for event in snapshot["device_traces"][0]:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            total += event["size"]
        elif event["action"] == "free_completed" and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
        if total > best:
            best, best_live = total, dict(live)
    described = []
    for event in sorted(best_live.values(), key=lambda e: -e["size"]):
        if event["size"] < unit // 64:
            continue
        frames = [f for f in event.get("frames", []) if "/torch/" not in f["filename"]]
        where = f"{Path(frames[0]['filename']).name}:{frames[0]['line']} {frames[0]['name']}" if frames else "?"
        described.append(f"{event['size'] / unit:.3f} {where}")
    return [f"total {best / unit:.3f}"] + described


def bench_parts(cfg, tokens: int, device, dtype, reps: int, group_sizes=(56, 14, 8, 7, 5, 4, 2)) -> list[dict]:
    """Where per-group attention spends time: each step of one H3 attention, done whole (56 heads: the host's
    fused buffer and views) and in groups of g heads (what the head-group path runs: contiguous per-group
    tensors), timed separately: the q/k/v projection GEMMs, the fused q/k norm+RoPE (comfy-kitchen), and the
    attention (torch SDPA, the host's pytorch attention) with the copy into the [S, heads*head_dim] output."""
    rows = []
    for g in group_sizes:
        row = {"parts": f"groups of {g} heads", "tokens": tokens, "groups": -(-cfg["heads"] // g)}
        row.update(_part_timings(cfg, tokens, g, device, dtype, reps))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _part_timings(cfg, tokens: int, g: int, device, dtype, reps: int) -> dict:
    import comfy_kitchen as ck
    heads, dim, hidden, rot = cfg["heads"], cfg["head_dim"], cfg["hidden"], cfg["rot"]
    inner = heads * dim
    ranges = [(a, min(heads, a + g)) for a in range(0, heads, g)]
    gen = torch.Generator(device=device).manual_seed(0)
    h = torch.randn(tokens, hidden, device=device, dtype=dtype, generator=gen)
    weight = torch.randn(3 * inner, hidden, device=device, dtype=dtype, generator=gen) / hidden ** 0.5
    table = torch.randn(1, tokens, 1, rot // 2, 2, 2, device=device, dtype=dtype, generator=gen)
    norm_w = torch.ones(dim, device=device, dtype=dtype)
    width = 3 * g * dim if g < heads else 3 * inner
    qkv = torch.randn(tokens, width, device=device, dtype=dtype, generator=gen)
    out = torch.empty(tokens, inner, device=device, dtype=dtype)

    def gemms():
        if g >= heads:
            torch.nn.functional.linear(h, weight)
            return
        for a, b in ranges:
            for part in range(3):
                torch.nn.functional.linear(h, weight[part * inner + a * dim:part * inner + b * dim])

    def views(n):
        """q, k, v [1, S, n, D]: strided views of the fused buffer (whole, as the host), else contiguous."""
        if g >= heads:
            return [qkv[:, i * inner:(i + 1) * inner].view(1, tokens, heads, dim) for i in range(3)]
        flat, size = qkv.view(-1), tokens * n * dim
        return [flat[i * size:(i + 1) * size].view(1, tokens, n, dim) for i in range(3)]

    def rope():
        for a, b in ranges:
            q, k, _v = views(b - a)
            ck.rms_rope_split_half_(q, k, table, norm_w, norm_w, epsilon=1e-5, rot_dim=rot)

    def attention():
        for a, b in ranges:
            q, k, v = (t.transpose(1, 2) for t in views(b - a))
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            out[:, a * dim:b * dim] = o.transpose(1, 2).reshape(tokens, (b - a) * dim)

    def clock(fn) -> float:
        times = []
        for i in range(reps + 1):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            if i:
                times.append(start.elapsed_time(end))
        return statistics.median(times)
    return {"qkv_gemms_ms": round(clock(gemms), 2), "norm_rope_ms": round(clock(rope), 2),
            "attention_and_copy_ms": round(clock(attention), 2)}


def bench_ltx(lowvram, fakes, cfg, device, dtype, reps, warmup):
    """LTX self-attention with RoPE at refine size: auto must leave it to the host's forward on a large card."""
    torch.manual_seed(0)
    module = fakes.ltx_host("new")
    with torch.device(device):
        attn = module.CrossAttention(cfg["dim"], None, cfg["heads"], cfg["dim_head"]).to(dtype)
    net = torch.nn.Module()
    net.transformer_blocks = torch.nn.ModuleList([torch.nn.Module()])
    net.transformer_blocks[0].attn1 = attn
    model = fakes.FakeModelPatcher(fakes.BaseModel(net))
    tokens = cfg["tokens"]
    x = torch.randn(1, tokens, cfg["dim"], device=device, dtype=dtype)
    pe = fakes.ltx_pe("new", 1, tokens, cfg["heads"], cfg["dim_head"], True, dtype)
    pe = (pe[0].to(device), pe[1])
    patched_models = {name: model if head_chunks is None else lowvram.H3KitLowVRAMAttention().patch(model, head_chunks)[0]
                      for name, head_chunks in (("host", None), ("auto", 0), ("fixed 4", 4))}

    def runner(p):
        def run():
            with torch.no_grad(), p.patched():
                return attn.forward(x, pe=pe, transformer_options={})
        return run
    results = timed({name: runner(p) for name, p in patched_models.items()}, device, reps, warmup)
    rows = []
    for name, (seconds, peak, out) in results.items():
        row = {"block": "LTX attn1", "weights": "plain", "tokens": tokens, "variant": name,
               "ms": round(seconds * 1e3, 2), "peak_gib": round(peak / 2**30, 3)}
        if name != "host":
            row.update(time_ratio=round(seconds / results["host"][0], 3),
                       bitwise_equal=bool(torch.equal(out, results["host"][2])),
                       peak_ratio_host_over_this=round(results["host"][1] / max(1, peak), 2),
                       ran=_ledgers(patched_models[name]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _ledgers(patched) -> dict:
    seen = {}
    for patch in patched.object_patches.values():
        ledger = getattr(patch, "ledger", None)
        if ledger is not None:
            for kind, counts in ledger.counts.items():
                seen.setdefault(kind, {}).update(counts)
    return seen


def environment(device) -> dict:
    import importlib.metadata

    import comfy_kitchen
    try:
        kitchen_version = importlib.metadata.version("comfy-kitchen")
    except importlib.metadata.PackageNotFoundError:
        kitchen_version = "unknown"
    info = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "comfy_kitchen": kitchen_version,
            "kitchen_backends": [b for b in ("cuda", "triton", "eager") if comfy_kitchen.registry.is_available(b)],
            "command": " ".join(sys.argv)}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (checks the script on any machine)")
    parser.add_argument("--weights", default="plain,int8,nvfp4", help="comma list of plain (model dtype), int8, nvfp4")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"], help="activation/weight dtype")
    parser.add_argument("--tokens", help="comma list of H3 token counts (default: 10000,37000,108000)")
    parser.add_argument("--no-ltx", action="store_true", help="skip the LTX attention rows")
    parser.add_argument("--variants", default="auto,16/8", help="comma list: auto, or head_chunks/ffn_chunks (host always)")
    parser.add_argument("--phases", action="store_true", help="also per-phase peak/time and the tensors alive at "
                        "the peak (CUDA only)")
    parser.add_argument("--parts", type=int, default=0, help="also time the steps of one attention, whole and per "
                        "head group, at this many tokens (CUDA only)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write environment + rows here")
    args = parser.parse_args()
    device = torch.device(args.device)
    sys.path.insert(0, str(ROOT / "tests"))
    import lowvram_fakes as fakes
    lowvram = load_pack()
    env = environment(device)
    print(json.dumps(env), flush=True)
    rows = []
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    h3 = dict(H3_QUICK if args.quick else H3_FULL)
    if args.tokens:
        h3["tokens"] = [int(t) for t in args.tokens.split(",")]
    for quant in args.weights.split(","):
        try:
            rows += bench_h3(lowvram, fakes, h3, device, dtype, quant, args.reps, args.warmup, args.variants,
                             args.phases)
        except Exception as exc:  # noqa: BLE001 - a format the kitchen cannot run here is a result, reported
            rows.append({"block": "H3", "weights": quant, "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(json.dumps(rows[-1]), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.parts:
        rows += bench_parts(h3, args.parts, device, dtype, args.reps)
    if not args.no_ltx:
        rows += bench_ltx(lowvram, fakes, LTX_QUICK if args.quick else LTX_FULL, device, dtype, args.reps, args.warmup)
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
