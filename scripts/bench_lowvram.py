"""Benchmark: one whole H3 DiT block, the host's forward vs H3Kit's low-VRAM patches (and LTX attention at refine size).

With --host COMFYUI_DIR the block is the host's own: ComfyUI's `supported_models.MiniMaxH3` -> `model_base.MiniMaxH3`
-> `MiniMaxH3Model(num_layers=1)` with the operations the host picks, random weights at full size, the host's
ModelPatcher, every variant loaded with the host's `load_models_gpu` so the nodes' patches land as in a run; the
block is timed by forward hooks inside the host's own model forward (its packed layout, RoPE table and adaLN
rows for a real clip shape). The LTX rows then use the host's LTX `CrossAttention` at refine size. --sdpa also
profiles the host's H3 attention call (which SDPA backend runs, and each backend alone). The output's
"baseline" line says which model was measured.

Without --host: the stand-in. Baseline = the host-semantics forward of tests/lowvram_fakes.py (the stand-ins the bitwise tests use, written after
the host's DiTBlock / Attention / MLP / CrossAttention) with the host's kernel library comfy-kitchen (its CUDA
backend runs `rms_rope_split_half_`) and torch SDPA (ComfyUI's pytorch attention). The patched variants are the
real nodes (H3KitLowVRAMAttention + H3KitChunkFeedForward) applied to the same model, so every variant runs the
same layers; weights: bf16, int8 (comfy-kitchen TensorWiseINT8Layout) and NVFP4 where comfy-kitchen runs it.

Peak = torch.cuda.max_memory_allocated during the forward minus memory allocated when it starts (weights and the
block input counted out). Time = median of CUDA-event timings over --reps runs after --warmup runs; variants of
one shape run back to back in one process, compared as ratios to the host.

    python scripts/bench_lowvram.py --json out.json          # full sizes (about 40 GiB of GPU memory)
    python scripts/bench_lowvram.py --quick --device cpu      # tiny sizes, checks the script
    python scripts/bench_lowvram.py --host /path/to/ComfyUI --variants auto,7/9,cudnn,auto+cudnn --sdpa
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT_EARLY = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # with --host: the host's allocator and VRAM set-up before torch loads (as its main.py)
    sys.path.insert(0, str(ROOT_EARLY / "scripts"))
    import bench_hoststart

    bench_hoststart.start_from_argv(sys.argv, dynamic_vram=False)
import torch  # noqa: E402

try:
    from . import bench_output  # imported as part of the package (tests)
except ImportError:  # run as a file: python scripts/bench_*.py puts scripts/ first on sys.path
    import bench_output

ROOT = Path(__file__).resolve().parents[1]
H3_FULL = {"hidden": 5376, "heads": 56, "head_dim": 128, "ffn": 14336, "rot": 96, "tokens": [10_000, 37_000, 108_000]}
H3_QUICK = {"hidden": 48, "heads": 4, "head_dim": 32, "ffn": 96, "rot": 24, "tokens": [256, 1024]}
LTX_FULL = {"dim": 4096, "heads": 32, "dim_head": 128, "tokens": 16_128}  # refine 1344x768, 121 frames
LTX_QUICK = {"dim": 64, "heads": 4, "dim_head": 16, "tokens": 512}
QUANT = {"plain": None, "int8": "TensorWiseINT8Layout", "nvfp4": "TensorCoreNVFP4Layout"}


def load_pack(name: str = "lowvram"):
    """One node module of the pack as package `h3kit` (installed, or this checkout without registering every node)."""
    return bench_output.pack_module(f"nodes.{name}")


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


def bench_h3(fakes, cfg, device, dtype, quant, reps, warmup, spec, phases=False):
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
        patched_models = {name: model if name == "host" else patch_variant(model, name)
                          for name in ["host"] + [v for v in spec.split(",") if v != "host"]}
        runs = {name: (lambda p=p, i=inputs: p.run(i[0].clone(), *i[1:])) for name, p in patched_models.items()}
        results = timed(runs, device, reps, warmup)
        if phases and device.type == "cuda":
            rows += phase_rows(runs, model.model.diffusion_model.blocks[0], tokens, cfg["hidden"], dtype, quant)
        host_out, host_seconds, host_peak = results["host"][2], results["host"][0], results["host"][1]
        input_bytes = inputs[0].numel() * inputs[0].element_size()  # the clone of x each run makes is counted
        for name, (seconds, peak, out) in results.items():
            row = {"block": "H3 (stand-in)", "dtype": str(dtype).replace("torch.", ""), "weights": quant,
                   "tokens": tokens, "variant": name, "ms": round(seconds * 1e3, 2),
                   "peak_gib": round((peak - input_bytes) / 2**30, 3), "peak_with_input_gib": round(peak / 2**30, 3)}
            if name != "host":
                row.update(time_ratio=round(seconds / host_seconds, 3),
                           bitwise_equal=bool(torch.equal(out, host_out)),
                           max_abs_diff=float((out.float() - host_out.float()).abs().max()),
                           ran=_ledgers(patched_models[name]), attention_calls=_override_counts(patched_models[name]))
                if device.type == "cuda":
                    row.update(peak_ratio=round((host_peak - input_bytes) / max(1, peak - input_bytes), 2),
                               peak_ratio_with_input=round(host_peak / max(1, peak), 2))
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


# ------------------------------------------------------------------------------------------
# --host: the host's own classes


HOST_CLIPS_FULL = [("672x384x124", 672, 384, 124), ("1344x768x124", 1344, 768, 124), ("1344x768x362", 1344, 768, 362)]
HOST_CLIPS_QUICK = [("128x64x22", 128, 64, 22), ("256x128x22", 256, 128, 22)]
BACKENDS = ("cudnn", "flash", "efficient")


def parse_variant(spec: str) -> tuple[int | None, int | None, str | None]:
    """"host" | "auto" | "7/9" | "cudnn" | "auto+cudnn" | "sage" -> (head_chunks, ffn_chunks, attention)."""
    heads = chunks = attention = None
    for part in spec.split("+"):
        if part == "auto":
            heads, chunks = 0, 0
        elif "/" in part:
            heads, chunks = (int(n) for n in part.split("/"))
        elif part in (*BACKENDS, "sage"):
            attention = part
        elif part != "host":
            raise SystemExit(f"unknown variant part {part!r} in {spec!r}: use host, auto, a/b, "
                             f"{', '.join(BACKENDS)}, sage, joined with +")
    return heads, chunks, attention


def patch_variant(model, spec: str):
    """The pack's nodes applied to `model` as a user would chain them: low-VRAM, then the attention node."""
    heads, chunks, attention = parse_variant(spec)
    patched = model
    if heads is not None:
        lowvram = load_pack("lowvram")
        patched, _report = lowvram.H3KitLowVRAMAttention().patch(patched, heads)
        patched, _report = lowvram.H3KitChunkFeedForward().patch(patched, chunks, 4096)
    if attention in BACKENDS:
        patched, _report = load_pack("attention").H3KitAttentionBackend().patch(patched, attention)
    elif attention == "sage":
        patched, _report = load_pack("turing").H3KitSageAttention().patch(patched, "package-default")
    return patched


def _override_counts(patched) -> dict:
    override = patched.model_options.get("transformer_options", {}).get("optimized_attention_override")
    counts = getattr(override, "paths", None)
    if counts is None and override is not None:
        counts = {"calls": override.calls, "sage": override.sage_calls, **dict(override.fallbacks)}
    return dict(counts or {})


def bench_h3_host(host, args, device, dtype) -> list[dict]:
    """One full-size block of the host's MiniMaxH3Model, timed inside the host's own forward, per clip shape."""
    import bench_hostlib as lib

    config = dict(lib.H3_TINY if args.quick else lib.H3_FULL, num_layers=1, token_refiner_num_layers=0)
    mp = lib.build_h3(host, config, device, dtype)
    net = mp.model.diffusion_model
    text_len = 16 if args.quick else 256
    names = ["host"] + [v for v in args.variants.split(",") if v != "host"]
    models = {name: mp if name == "host" else patch_variant(mp, name) for name in names}
    clips = HOST_CLIPS_QUICK if args.quick else HOST_CLIPS_FULL
    if args.clips:
        clips = [c for c in clips if c[0] in args.clips.split(",")]
    rows = []
    for label, width, height, frames in clips:
        video, audio = lib.h3_latents(width, height, frames, device)
        context = torch.randn(1, text_len, config["hidden_size"], device=device, dtype=dtype)
        timestep = torch.tensor([500.0], device=device)
        tokens = lib.h3_tokens(width, height, frames, text_len)
        probes, outputs = {}, {}
        last = args.warmup + args.reps - 1
        for i in range(last + 1):
            for name, patched in models.items():
                host.mm.load_models_gpu([patched])
                probe = probes.setdefault(name, lib.BlockProbe(net.blocks[0]))
                probe.keep_output = i == last
                options = dict(patched.model_options.get("transformer_options", {}))
                with torch.no_grad(), probe:
                    net([video, audio], timestep, context, transformer_options=options)
                if i == last:
                    outputs[name], probe.output = probe.output, None
                if i < args.warmup:
                    probe.reset()
        host_probe = probes["host"]
        host_ms = statistics.median(host_probe.times) * 1e3
        for name, probe in probes.items():
            ms = statistics.median(probe.times) * 1e3
            peak, with_input = probe.peak, probe.peak + probe.input_bytes
            row = {"block": "H3 (host class)", "clip": label, "tokens": tokens, "variant": name, "ms": round(ms, 2),
                   "peak_gib": round(peak / 2**30, 3), "peak_with_input_gib": round(with_input / 2**30, 3)}
            if name != "host":
                row.update(time_ratio=round(ms / host_ms, 3),
                           speedup=round(host_ms / ms, 3),
                           peak_ratio=round(host_probe.peak / max(1, peak), 2),
                           peak_ratio_with_input=round((host_probe.peak + host_probe.input_bytes) / max(1, with_input), 2),
                           ran=_ledgers(models[name]), attention_calls=_override_counts(models[name]),
                           **lib.deviation(outputs[name], outputs["host"]))
            rows.append(row)
            print(json.dumps(row), flush=True)
        del outputs, probes, video, audio, context
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _timed_ms(fn, reps: int, device) -> float:
    times = []
    for i in range(reps + 1):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            fn()
            elapsed = (time.perf_counter() - t0) * 1e3
        if i:
            times.append(elapsed)
    return round(statistics.median(times), 2)


def bench_sdpa_host(host, args, device, dtype) -> list[dict]:
    """The host's H3 attention call at clip sizes: which SDPA backend runs under the host's priority and under
    torch's default, and each backend alone on the host's own (strided) q/k/v and on contiguous copies."""
    import bench_hostlib as lib

    heads, dim = (4, 16) if args.quick else (56, 128)
    rows = []
    for label, width, height, frames in (HOST_CLIPS_QUICK if args.quick else HOST_CLIPS_FULL[1:]):
        tokens = lib.h3_tokens(width, height, frames, 16 if args.quick else 256)
        rows.append(_sdpa_row(host, label, tokens, heads, dim, device, dtype, args.reps))
        print(json.dumps(rows[-1]), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _sdpa_row(host, label: str, tokens: int, heads: int, dim: int, device, dtype, reps: int) -> dict:
    import bench_hostlib as lib
    from torch.nn.attention import sdpa_kernel

    sdpa = load_pack("attention").sdpa_backend
    inner = heads * dim
    qkv = torch.randn(tokens, 3 * inner, device=device, dtype=dtype)
    q4, k4, v4 = qkv.split(inner, dim=-1)
    # exactly the host's Attention.forward: q/k strided views of the fused buffer, v cloned
    q = q4.view(tokens, heads, dim).transpose(0, 1).unsqueeze(0)
    k = k4.view(tokens, heads, dim).transpose(0, 1).unsqueeze(0)
    v = v4.reshape(tokens, heads, dim).clone().transpose(0, 1).unsqueeze(0)
    qc, kc, vc = (t.contiguous() for t in (q, k, v))
    row = {"sdpa": label, "tokens": tokens, "heads": heads, "head_dim": dim,
           "q_strides": list(q.stride()), "v_strides": list(v.stride())}
    priority = getattr(host.ops, "SDPA_BACKEND_PRIORITY", None)
    if priority is not None:
        with sdpa_kernel(priority, set_priority=True):
            row["host_picks"] = sdpa.chosen_backend(q, k, v)
    row["torch_default_picks"] = sdpa.chosen_backend(q, k, v)
    row["torch_default_picks_contiguous"] = sdpa.chosen_backend(qc, kc, vc)

    def host_call():
        return host.ops.scaled_dot_product_attention(q, k, v)

    def default_call():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def forced(backend, tensors):
        return lambda: sdpa.attention(*tensors, heads, backend, skip_reshape=True, skip_output_reshape=True)
    timings = {"host comfy.ops.scaled_dot_product_attention": host_call, "torch default": default_call}
    for backend in BACKENDS:
        timings[f"{backend} (host strides)"] = forced(backend, (q, k, v))
        timings[f"{backend} (contiguous)"] = forced(backend, (qc, kc, vc))
    outs = {}
    for name, fn in timings.items():
        try:
            row[f"ms {name}"] = _timed_ms(fn, reps, device)
            outs[name] = fn()
        except Exception as exc:  # noqa: BLE001 - a backend that cannot run here is a result
            row[f"ms {name}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    if "cudnn (host strides)" in outs and "flash (host strides)" in outs:
        row["cudnn_vs_flash"] = lib.deviation(outs["cudnn (host strides)"], outs["flash (host strides)"])
    if device.type == "cuda":
        row["host_kernels"] = _kernel_names(host_call)
        row["default_kernels"] = _kernel_names(default_call)
    return row


def _kernel_names(fn) -> list[str]:
    """CUDA kernels one call launches (torch profiler), longest first, names cut to 90 characters."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -getattr(e, "device_time_total", 0))
    return [f"{e.key[:90]} {getattr(e, 'device_time_total', 0) / 1e3:.1f} ms" for e in events[:3]]


LTX_MODULES_FULL = {  # refine 1344x768, 121 frames: 16128 video tokens; 126 audio tokens; 1024 text tokens
    "attn1 (video self)": (4096, None, 32, 128, 16128, None),
    "attn2 (text cross)": (4096, 4096, 32, 128, 16128, 1024),
    "audio_to_video_attn": (4096, 2048, 32, 64, 16128, 126),
}
LTX_MODULES_QUICK = {"attn1 (video self)": (64, None, 4, 16, 512, None), "attn2 (text cross)": (64, 48, 4, 16, 512, 32)}


def bench_ltx_host(host, args, device, dtype) -> list[dict]:
    """The host's LTX CrossAttention at refine size (RoPE left out: it is outside the kernel compared), host
    attention vs the pack's backend override (and SageAttention where it runs)."""
    rows = []
    for label, shape in (LTX_MODULES_QUICK if args.quick else LTX_MODULES_FULL).items():
        rows += _ltx_rows(host, label, shape, device, dtype, args.reps)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _ltx_rows(host, label: str, shape: tuple, device, dtype, reps: int) -> list[dict]:
    import bench_hostlib as lib
    from comfy.ldm.lightricks.model import CrossAttention

    attention_nodes = load_pack("attention")
    dim, ctx_dim, heads, dim_head, tokens, ctx_tokens = shape
    attn = CrossAttention(dim, ctx_dim, heads, dim_head, dtype=dtype, device=device,
                          operations=host.ops.pick_operations(dtype, None))
    lib.randomize_(attn)
    x = torch.randn(1, tokens, dim, device=device, dtype=dtype)
    context = None if ctx_tokens is None else torch.randn(1, ctx_tokens, ctx_dim, device=device, dtype=dtype)
    variants = {"host": {}}
    for backend in BACKENDS:
        variants[backend] = {"optimized_attention_override": attention_nodes.BackendOverride(backend)}
    sage = _sage_override()
    if sage is not None:
        variants["sage 1.0.6 (inexact)"] = {"optimized_attention_override": sage}

    def runner(options):
        def run():
            with torch.no_grad():
                return attn(x, context=context, transformer_options=options)
        return run
    outs, times = {}, {}
    for name, options in variants.items():
        try:
            times[name] = _timed_ms(runner(options), reps, device)
            outs[name] = runner(options)()
        except Exception as exc:  # noqa: BLE001 - reported as the row's result
            times[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    rows = []
    for name, options in variants.items():
        row = {"block": "LTX CrossAttention (host class)", "module": label, "tokens": tokens,
               "context_tokens": ctx_tokens, "heads": heads, "head_dim": dim_head, "variant": name, "ms": times[name]}
        if name != "host" and name in outs and "host" in outs:
            override = options["optimized_attention_override"]
            calls = dict(getattr(override, "paths", {})) or {"sage": getattr(override, "sage_calls", None)}
            row.update(speedup=round(times["host"] / times[name], 3), **lib.deviation(outs[name], outs["host"]),
                       attention_calls=calls)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _sage_override():
    try:
        import sageattention  # noqa: F401
    except ImportError:
        return None
    return load_pack("turing").SageAttentionOverride("package-default")


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
    parser.add_argument("--host", type=Path, help="a ComfyUI source tree (0.33.0: native H3): measure its real classes "
                        "instead of the stand-in")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (checks the script on any machine)")
    parser.add_argument("--weights", default="plain,int8,nvfp4", help="stand-in only: comma list of plain (model "
                        "dtype), int8, nvfp4")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"], help="activation/weight dtype")
    parser.add_argument("--tokens", help="stand-in only: comma list of H3 token counts (default: 10000,37000,108000)")
    parser.add_argument("--clips", help="--host only: comma list of clip shapes (default: 672x384x124, 1344x768x124, "
                        "1344x768x362)")
    parser.add_argument("--no-ltx", action="store_true", help="skip the LTX attention rows")
    parser.add_argument("--variants", default="auto,16/8", help="comma list (host always): auto | a/b (head_chunks/"
                        "ffn_chunks) | cudnn | flash | efficient | sage, parts joined with + (auto+cudnn)")
    parser.add_argument("--sdpa", action="store_true", help="--host only: profile the host's H3 attention call "
                        "(backend picked, each backend alone)")
    parser.add_argument("--phases", action="store_true", help="stand-in only: per-phase peak/time and the tensors "
                        "alive at the peak (CUDA only)")
    parser.add_argument("--parts", type=int, default=0, help="stand-in only: time the steps of one attention, whole "
                        "and per head group, at this many tokens (CUDA only)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write environment + rows here")
    args = parser.parse_args()
    output = bench_output.JsonOutput(args.json)
    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "tests"))
    host = None
    if args.host:
        import bench_hostlib
        host = bench_hostlib.import_host(args.host, ["--cpu"] if device.type == "cpu" else [])
    env = environment(device)
    env["baseline"] = (f"the host's own classes: ComfyUI {host.version} at {host.dir} (MiniMaxH3Model, LTX "
                       "CrossAttention), random weights" if host else
                       "stand-in: tests/lowvram_fakes.py (host semantics, not the host's code)")
    print(json.dumps(env), flush=True)
    rows = []
    if host:
        rows += bench_h3_host(host, args, device, dtype)
        if args.sdpa:
            rows += bench_sdpa_host(host, args, device, dtype)
        if not args.no_ltx:
            rows += bench_ltx_host(host, args, device, dtype)
    else:
        rows += _stand_in(args, device, dtype)
    output.write({"environment": env, "rows": rows})
    return 0


def _stand_in(args, device, dtype) -> list[dict]:
    import lowvram_fakes as fakes
    lowvram = load_pack()
    rows = []
    h3 = dict(H3_QUICK if args.quick else H3_FULL)
    if args.tokens:
        h3["tokens"] = [int(t) for t in args.tokens.split(",")]
    for quant in args.weights.split(","):
        try:
            rows += bench_h3(fakes, h3, device, dtype, quant, args.reps, args.warmup, args.variants, args.phases)
        except Exception as exc:  # noqa: BLE001 - a format the kitchen cannot run here is a result, reported
            rows.append({"block": "H3", "weights": quant, "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(json.dumps(rows[-1]), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.parts:
        rows += bench_parts(h3, args.parts, device, dtype, args.reps)
    if not args.no_ltx:
        rows += bench_ltx(lowvram, fakes, LTX_QUICK if args.quick else LTX_FULL, device, dtype, args.reps, args.warmup)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
