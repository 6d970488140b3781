"""Run inside a real ComfyUI host's python (cwd = the host checkout): the low-VRAM stand-ins and quantized layouts
against the host's real classes, on CPU with tiny random weights.

    <host python> tests/lowvram_real_classes_probe.py <pack root>    -> one JSON object on the last stdout line

"standins": each stand-in of tests/lowvram_fakes.py next to the real class it follows (H3 Attention / MLP / DiTBlock
where the host has MiniMax-H3, LTX CrossAttention / FeedForward in this host's style, comfy.ops layers, the
quantized Linear of `mixed_precision_ops`), loaded with the same weights and run on the same inputs: forward
signature (names, kinds, defaults), output bitwise (torch.equal) and the allocation peak (tests/alloc_tracker.py).
The class pairs run with the host's own attention function in both (it picks one per device and CLI); the
stand-in's attention function is compared with the host's `attention_pytorch` on its own.

"layouts" (hosts with `comfy.quant_ops`): the host's registry and QUANT_ALGOS next to the stand-in's
(lowvram_fakes.host_quant_ops), the pack's verdict for every registered layout, the host quantizer's per-token probe,
and, where the host has MiniMax-H3, a real H3 block quantized through the host's own loader for every format
(`comfy_quant` state dicts), run whole by the host and patched by the pack's nodes (2 head groups, 4 FFN chunks):
bitwise, what ran, and the report.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import traceback
from importlib import import_module

sys.path.insert(0, os.getcwd())
from comfy.cli_args import args  # noqa: E402

args.cpu = True  # model_management reads this at import: never touch a GPU here
import comfy.ldm.modules.attention as core_attention  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.model_patcher  # noqa: E402
import comfy.ops  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

PACK = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(PACK, "tests"))
import lowvram_fakes as fakes  # noqa: E402
from alloc_tracker import PeakBytes  # noqa: E402
from lowvram_host_probe import load_pack  # noqa: E402


def _optional(name: str):
    try:
        return import_module(name)
    except ImportError:
        return None


H3 = _optional("comfy.ldm.minimax.model")
LTX = _optional("comfy.ldm.lightricks.model")
QUANT_OPS = _optional("comfy.quant_ops")
BF16 = torch.bfloat16


def signature(fn) -> list:
    return [(p.name, str(p.kind), repr(p.default)) for p in inspect.signature(fn).parameters.values()]


def randomize(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            values = torch.randn(p.shape, generator=gen) * 0.2
            p.copy_(values + 1.0 if "norm" in name else values)
    return module.requires_grad_(False)  # the host loads inference weights without grad


def run(fn, *args, **kwargs):
    with torch.inference_mode(), PeakBytes() as peak:  # the host samples under inference_mode (execution.py)
        out = fn(*args, **kwargs)
    return out, peak.peak


def compare(case: str, real: nn.Module, fake: nn.Module, call) -> dict:
    """Same weights in both, `call(module)` run on each: signature, bitwise output, allocation peak."""
    result = {"case": case, "real_signature": signature(type(real).forward),
              "fake_signature": signature(type(fake).forward)}
    result["signature_equal"] = result["real_signature"] == result["fake_signature"]
    try:
        missing, unexpected = fake.requires_grad_(False).load_state_dict(real.state_dict(), strict=False)
        result["state_dict_mismatch"] = list(missing) + list(unexpected)
        got_real, peak_real = run(call, real)
        got_fake, peak_fake = run(call, fake)
        result.update(equal=bool(torch.equal(got_real, got_fake)), dtype=str(got_real.dtype),
                      max_abs_diff=float((got_real.float() - got_fake.float()).abs().max()),
                      peak_real=peak_real, peak_fake=peak_fake)
    except Exception as exc:  # noqa: BLE001 - a case that cannot run is a result, reported
        result["error"] = f"{type(exc).__name__}: {exc}"[:600]
        result["traceback"] = traceback.format_exc()[-1500:]
    return result


class _HostAttention:
    """Put the host's attention function into the stand-ins' module for one comparison."""

    def __init__(self, fn, module=fakes):
        self.fn, self.module = fn, module

    def __enter__(self):
        self.saved = (self.module.optimized_attention, getattr(self.module, "optimized_attention_masked", None),
                      fakes.AttentionTensorContainer)
        self.module.optimized_attention = self.fn
        if self.saved[1] is not None:
            self.module.optimized_attention_masked = self.fn
        fakes.AttentionTensorContainer = getattr(core_attention, "AttentionTensorContainer", self.saved[2])
        return self

    def __exit__(self, *exc):
        self.module.optimized_attention = self.saved[0]
        if self.saved[1] is not None:
            self.module.optimized_attention_masked = self.saved[1]
        fakes.AttentionTensorContainer = self.saved[2]


# ---------------------------------------------------------------------------------------------- H3


HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, TOKENS = 64, 4, 32, 96, 16, 48


def h3_real(kind: str, ops, dtype):
    kw = {"dtype": dtype, "device": "cpu", "operations": ops}
    if kind == "Attention":
        return H3.Attention(HIDDEN, HEADS, HEAD_DIM, 1e-5, **kw)
    if kind == "MLP":
        return H3.MLP(HIDDEN, FFN, **kw)
    return H3.DiTBlock(HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, 1e-5, 1e-5, **kw)


def h3_fake(kind: str):
    if kind == "Attention":
        return fakes.H3Attention(HIDDEN, HEADS, HEAD_DIM, 1e-5)
    if kind == "MLP":
        return fakes.H3MLP(HIDDEN, FFN)
    return fakes.DiTBlock(HIDDEN, HEADS, HEAD_DIM, FFN, T_DIM, 1e-5, 1e-5)


def h3_call(kind: str, dtype, rope: bool):
    x, _t, segments, table = fakes.h3_inputs(TOKENS, HIDDEN, 24, dtype)
    t_emb = torch.randn(2, T_DIM, generator=torch.Generator().manual_seed(9)).to(dtype)  # 2 timesteps: 6 mod rows
    segments = [(0, 16, 1), (16, 32, 5), (32, TOKENS, 3)]
    table = table if rope else None
    if kind == "Attention":
        return lambda m: m(x.clone(), rope_freqs=table, transformer_options={})
    if kind == "MLP":
        return lambda m: m(x.clone())
    return lambda m: m(x.clone(), t_emb, segments, table, transformer_options={})


def h3_standins() -> list[dict]:
    cases = []
    for kind in ("Attention", "MLP", "DiTBlock"):
        for cast in ("plain", "manual_cast"):
            for dtype in (BF16, torch.float16, torch.float32):
                for rope in ((True, False) if kind != "MLP" else (True,)):
                    ops = comfy.ops.manual_cast if cast == "manual_cast" else comfy.ops.disable_weight_init
                    weight_dtype = torch.float32 if cast == "manual_cast" and dtype != torch.float32 else dtype
                    real = randomize(h3_real(kind, ops, weight_dtype), 3)
                    fake = h3_fake(kind).to(weight_dtype)
                    if cast == "manual_cast":
                        fakes.manual_cast(fake)
                    name = f"h3.{kind} {cast} {str(dtype).replace('torch.', '')}{'' if rope else ' no-rope'}"
                    with _HostAttention(H3.optimized_attention):
                        cases.append(compare(name, real, fake, h3_call(kind, dtype, rope)))
    return cases


# ---------------------------------------------------------------------------------------------- LTX


def ltx_style() -> str:
    if hasattr(LTX, "apply_rotary_emb_qk"):
        return "new"
    return "v0121" if "k_pe" in inspect.signature(LTX.CrossAttention.forward).parameters else "v0364"


def ltx_standins() -> list[dict]:
    style = ltx_style()
    host_module = fakes.ltx_host(style)
    host_fn = getattr(LTX, "optimized_attention", None) or core_attention.optimized_attention
    gated_ok = "apply_gated_attention" in inspect.signature(LTX.CrossAttention.__init__).parameters
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 10, 64, generator=gen).to(BF16)
    ctx = torch.randn(2, 5, 32, generator=gen).to(BF16)
    mask = torch.zeros(2, 1, 1, 5, dtype=BF16)
    mask[0, ..., -2:] = -torch.inf
    pe = fakes.ltx_pe(style, 2, 10, 4, 16, style != "v0364", BF16)
    cases = []
    for gated in ((False, True) if gated_ok else (False,)):
        for what in ("self+pe", "cross+mask", "cross"):
            kw = {"query_dim": 64, "heads": 4, "dim_head": 16, "dtype": BF16, "device": "cpu",
                  "operations": comfy.ops.disable_weight_init}
            if what != "self+pe":
                kw["context_dim"] = 32
            if gated_ok:
                kw["apply_gated_attention"] = gated
            real = randomize(LTX.CrossAttention(**kw), 5)
            fake = host_module.CrossAttention(64, kw.get("context_dim"), 4, 16, gated).to(BF16)
            if what == "self+pe":
                def call(m):
                    return m(x.clone(), pe=pe, transformer_options={})
            elif what == "cross+mask":
                def call(m):
                    return m(x.clone(), context=ctx, mask=mask, transformer_options={})
            else:
                def call(m):
                    return m(x.clone(), context=ctx, transformer_options={})
            with _HostAttention(host_fn, host_module):
                cases.append(compare(f"ltx.CrossAttention {style} {what}{' gated' if gated else ''}", real, fake, call))
    ff_kw = {"dtype": BF16, "device": "cpu", "operations": comfy.ops.disable_weight_init}
    real_ff = randomize(LTX.FeedForward(64, 64, glu=True, **ff_kw), 6)
    cases.append(compare(f"ltx.FeedForward {style}", real_ff, host_module.FeedForward(64, 64).to(BF16),
                         lambda m: m(x.clone())))
    return cases


def attention_function() -> list[dict]:
    """The stand-in's optimized_attention vs the host's attention_pytorch (wrap_attn included)."""
    host = core_attention.attention_pytorch
    gen = torch.Generator().manual_seed(8)
    q4, k4, v4 = (torch.randn(1, 4, 40, 32, generator=gen).to(BF16) for _ in range(3))
    q3, k3, v3 = (torch.randn(2, 40, 128, generator=gen).to(BF16) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 40, dtype=BF16)
    mask[1, ..., -7:] = -torch.inf
    calls = {"[B,H,S,D] skip_reshape": lambda fn: fn(q4, k4, v4, 4, mask=None, skip_reshape=True),
             "[B,S,H*D]": lambda fn: fn(q3, k3, v3, 4, transformer_options={}),
             "[B,S,H*D] mask": lambda fn: fn(q3, k3, v3, 4, mask=mask, transformer_options={})}
    container = getattr(core_attention, "AttentionTensorContainer", None)
    if container is not None:
        calls["containers"] = lambda fn: fn(*((container if fn is host else fakes.AttentionTensorContainer)(t.clone())
                                              for t in (q4, k4, v4)), 4, mask=None, skip_reshape=True)
    out = []
    for name, call in calls.items():
        real, fake = call(host), call(fakes.optimized_attention)
        out.append({"case": f"attention {name}", "equal": bool(torch.equal(real, fake)),
                    "max_abs_diff": float((real.float() - fake.float()).abs().max())})
    return out


# ---------------------------------------------------------------------------------------------- quant_ops


FORMATS = {"float8_e4m3fn": {}, "float8_e5m2": {}, "nvfp4": {}, "mxfp8": {}, "int8_tensorwise": {},
           "int8_tensorwise convrot": {"per_channel": True, "convrot": True}, "convrot_w4a4": {},
           "asym_w4a8_int8": {}}


def quant_ops_standin(kitchen) -> dict:
    """The real registry and QUANT_ALGOS against lowvram_fakes.host_quant_ops (compared by kitchen base class)."""
    _module, standin = fakes.host_quant_ops()
    base = sys.modules[f"{QUANT_OPS.ck.__name__}.tensor.base"]
    real_names = sorted(base.LAYOUTS)
    rules = {}
    for name in real_names:
        real_rule = kitchen.row_rule(QUANT_OPS.get_layout_class(name))
        fake_cls = standin.get(name) or base.LAYOUTS[name]  # the stand-in leaves kitchen's own registrations
        fake_rule = kitchen.row_rule(fake_cls)
        rules[name] = [getattr(real_rule, "kitchen_class", None), getattr(fake_rule, "kitchen_class", None)]
    algos = {fmt: [entry.get("comfy_tensor_layout"), entry.get("quantize_input", True)]
             for fmt, entry in QUANT_OPS.QUANT_ALGOS.items()}
    fake_algos = {fmt: [entry.get("comfy_tensor_layout"), entry.get("quantize_input", True)]
                  for fmt, entry in fakes._quant_algos().items()}
    return {"registered": real_names, "standin_names": sorted(standin), "rules": rules, "algos": algos,
            "standin_algos": fake_algos}


def per_token_probes(kitchen) -> dict:
    """The pack's probe of the host quantizer, once with the real registry, once with the stand-in's classes."""
    real = {name: list(kitchen.quantize_is_per_token(name)) for name in sorted(kitchen.registered_layouts())}
    base = sys.modules[f"{QUANT_OPS.ck.__name__}.tensor.base"]
    _module, standin = fakes.host_quant_ops()
    saved = dict(base.LAYOUTS)
    try:
        base.LAYOUTS.update(standin)
        kitchen._PER_TOKEN_PROBES.clear()
        fake = {name: list(kitchen.quantize_is_per_token(name)) for name in standin}
    finally:
        base.LAYOUTS.clear()
        base.LAYOUTS.update(saved)
        kitchen._PER_TOKEN_PROBES.clear()
    return {"real": real, "standin": fake}


def quantized_state(fmt: str, prefix: str, weight: torch.Tensor, kw: dict) -> dict:
    """A checkpoint's entries for one quantized Linear, written through the host's own layout (its state_dict)."""
    entry = QUANT_OPS.QUANT_ALGOS[fmt.split()[0]]
    qt = QUANT_OPS.QuantizedTensor.from_float(weight, entry["comfy_tensor_layout"], **kw)
    conf = {"format": fmt.split()[0]}
    if kw.get("convrot"):
        conf["convrot"] = True
    state = {f"{prefix}weight{suffix}": t for suffix, t in qt.state_dict().items()}
    if fmt.startswith("asym_w4a8"):
        params = qt._params
        state = {f"{prefix}weight": qt._qdata, f"{prefix}weight_s_rel": params.scale,
                 f"{prefix}weight_s_channel": params.s_channel}
        if params.codebook is not None:
            state[f"{prefix}weight_codebook"] = params.codebook
    state[f"{prefix}comfy_quant"] = torch.tensor(list(json.dumps(conf).encode()), dtype=torch.uint8)
    return state


class _Net(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.blocks = nn.ModuleList([H3.DiTBlock(256, 4, 128, 512, 16, 1e-5, 1e-5, dtype=BF16, device="cpu",
                                                 operations=ops) for _ in range(2)])

    def forward(self, x, t_emb, segments, table):
        for block in self.blocks:
            x = block(x, t_emb, segments, table, transformer_options={})
        return x


class _Root(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.diffusion_model = net


def quantized_h3(lowvram, fmt: str, kw: dict) -> dict:
    """A real 2-block H3 quantized through the host's loader; the host's forward vs the pack's nodes."""
    plain = randomize(_Net(comfy.ops.disable_weight_init), 11)
    state = {}
    for name, tensor in plain.state_dict().items():
        layer = name.rsplit(".", 1)[0]
        if name.endswith("weight") and any(layer.endswith(s) for s in ("qkv_proj", "out_proj", "fc1", "fc2")):
            state.update(quantized_state(fmt, f"{layer}.", tensor * 0.25, kw))
        else:
            state[name] = tensor
    net = _Net(comfy.ops.mixed_precision_ops({}, BF16))
    missing, unexpected = net.load_state_dict(state, strict=False)
    net.requires_grad_(False)
    patcher = comfy.model_patcher.ModelPatcher(_Root(net), torch.device("cpu"), torch.device("cpu"))
    x, _t, _s, table = fakes.h3_inputs(64, 256, 96, BF16)
    t_emb = torch.randn(2, 16, generator=torch.Generator().manual_seed(2)).to(BF16)
    segments = [(0, 20, 1), (20, 40, 5), (40, 64, 3)]
    layer = net.blocks[0].attn.qkv_proj
    result = {"format": fmt, "load_problems": list(missing) + list(unexpected),
              "layout": getattr(layer.weight, "_layout_cls", None), "quant_format": getattr(layer, "quant_format", None)}
    try:
        with torch.inference_mode():
            expected = net(x.clone(), t_emb, segments, table)
    except Exception as exc:  # noqa: BLE001 - the host's CPU path cannot run this format: reported, then skipped
        result["host_forward_error"] = f"{type(exc).__name__}: {exc}"[:400]
        weight = layer.weight
        rows, why = lowvram.kitchen.quantized_rows(weight, 512, 1024)
        result["slice_dequantizes_to_whole_rows"] = why or bool(torch.equal(rows.dequantize(),
                                                                            weight.dequantize()[512:1024]))
        return result
    patched, attention_report = lowvram.H3KitLowVRAMAttention().patch(patcher, 2)
    patched, ffn_report = lowvram.H3KitChunkFeedForward().patch(patched, 4, 0)
    patched.patch_model()
    try:
        with torch.inference_mode():
            got = net(x.clone(), t_emb, segments, table)
    finally:
        patched.unpatch_model()
    attention = patched.object_patches["diffusion_model.blocks.0.attn.forward"]
    ffn = patched.object_patches["diffusion_model.blocks.0.mlp.forward"]
    result.update(equal=bool(torch.equal(got, expected)), max_abs_diff=float((got.float() - expected.float()).abs().max()),
                  ledger={**attention.ledger.counts, **ffn.ledger.counts},
                  reports=[json.loads(attention_report), json.loads(ffn_report)])
    return result


def main() -> dict:
    lowvram = load_pack(PACK)
    kitchen = lowvram.kitchen
    out = {"host": os.getcwd(), "has_h3": H3 is not None, "has_ltx": LTX is not None,
           "has_quant_ops": QUANT_OPS is not None and hasattr(QUANT_OPS, "QUANT_ALGOS")}
    out["standins"] = []
    if H3 is not None:
        out["host_h3_attention"] = H3.optimized_attention.__name__
        out["standins"] += h3_standins()
    if LTX is not None:
        out["ltx_style"] = ltx_style()
        out["standins"] += ltx_standins()
    out["attention_function"] = attention_function()
    if out["has_quant_ops"] and fakes.ck is not None:
        out["quant_ops"] = quant_ops_standin(kitchen)
        out["verdicts"] = {name: kitchen.slice_verdict(name) for name in kitchen.registered_layouts()}
        out["per_token"] = per_token_probes(kitchen)
        if H3 is not None:
            out["quantized_h3"] = [quantized_h3(lowvram, fmt, kw) for fmt, kw in FORMATS.items()]
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
