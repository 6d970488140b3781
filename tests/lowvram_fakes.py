"""Stand-ins for tests/test_lowvram*.py, written after ComfyUI's real classes and checked against them.

tests/test_lowvram_standins_comfyui.py runs each stand-in here next to the real class in each host's own Python
(tests/lowvram_standin_probe.py) and requires the same forward signature, the same output (bitwise) and the same
allocation peak. The stand-ins follow:
- `comfy.ops` layers (`CastLinear`: plain `F.linear` on `.weight` unless `comfy_cast_weights` or weight/bias
  functions are set; then the weight is cast to the input's dtype/device and each `weight_function` (LoRA, the
  lowvram patch of a partially loaded model) is applied at cast time) and `comfy.ops.linear_input_act` (0.33.0:
  the activation in place, or folded into comfy-kitchen's int8 matmul).
- `comfy.quant_ops` of ComfyUI 0.33.0 (`host_quant_ops`: its layout names registered in comfy-kitchen's registry,
  fp8 subclasses whose `quantize(scale=None)` uses scale 1.0, `QUANT_ALGOS` with weight-only int8 / ConvRot /
  W4A8) and a `MixedPrecisionOps.Linear` (`QuantLinear`: the input quantized by the layout unless the format is
  weight-only, a stored `input_scale`, the weight dequantized when weight functions are set).
- ComfyUI 0.33.0's MiniMax-H3 (`comfy/ldm/minimax/model.py`): `H3Attention` (fused qkv, `rms_rope_split_half_` in
  place on the qkv views with q_norm's eps, `v` copied contiguous, q/k/v in `AttentionTensorContainer`s), `H3MLP`
  (SwiGLU through `linear_input_act`), `AdalnProj`, `DiTBlock.forward(x, t_emb, mod_segments, rope_freqs,
  transformer_options)` (adaLN per segment, in-place modulation and gated residuals; no `attention=`), `H3Net`
  (block replacements from `patches_replace["dit"]` with the host's `original_block`).
- LTX `CrossAttention` / `FeedForward` in three host styles (`ltx_host("v0364" | "v0121" | "new")` = ComfyUI 0.3.64,
  the 0.12.1 installable, 0.33.0): RoPE formats (cos, sin), (cos, sin, split), (table, split); `k_pe` from 0.12.1,
  per-head gates and STG in 0.33.0; plain q/k/v tensors on every host; `optimized_attention_masked` (the same
  function as `optimized_attention` in every host) for masks on the two older hosts.
- `optimized_attention` = the host's `attention_pytorch` (torch SDPA) behind `wrap_attn` (containers taken out,
  `transformer_options["optimized_attention_override"]` honoured).
"""

from __future__ import annotations

import contextlib
import sys
import types

import torch
import torch.nn.functional as F
from torch import nn

try:
    import comfy_kitchen as ck
    from comfy_kitchen.tensor import QuantizedTensor
except ImportError:  # the 0.3.64 host has no comfy-kitchen; its LTX stand-in needs none
    ck, QuantizedTensor = None, ()

# The fake H3 block ropes q and k with comfy-kitchen's fused kernel, as the host's block does: a test that runs it
# skips without that kernel (no `oracle` extra, or a kitchen too old to have it), with this reason. (A bool and a
# text, not a pytest mark: the host probes import this module in a host's Python, which has no pytest.)
HAS_KITCHEN_ROPE = getattr(ck, "rms_rope_split_half_", None) is not None
NO_KITCHEN_ROPE = ("needs comfy-kitchen's rms_rope_split_half_ (the fake H3 block's rope, as the host's): not "
                   "installed here; pip install -e '.[test,oracle]'")

# ---------------------------------------------------------------------------- attention function


class AttentionTensorContainer:
    """The 0.33.0 host's q/k/v wrapper: the attention function takes the tensor out (once)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def take(self):
        if self.tensor is None:
            raise RuntimeError("attention tensor container has already been consumed")
        tensor, self.tensor = self.tensor, None
        return tensor


def _plain_attention(q, k, v, heads, mask=None, attn_precision=None, skip_reshape=False, skip_output_reshape=False,
                     **_kw):
    """The host's attention_pytorch: torch SDPA on [B, H, S, D] (reshaped from [B, S, H*D] unless skip_reshape)."""
    if skip_reshape:
        b, _, _, dim_head = q.shape
    else:
        b, _, width = q.shape
        dim_head = width // heads
        q, k, v = (t.view(b, -1, heads, dim_head).transpose(1, 2) for t in (q, k, v))
    if mask is not None:
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim == 3:
            mask = mask.unsqueeze(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)
    if not skip_output_reshape:
        out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    return out


def optimized_attention(q, k, v, heads, *args, **kw):
    """`wrap_attn(attention_pytorch)`: containers are taken out; an override runs instead, once."""
    if isinstance(q, AttentionTensorContainer):
        q, k, v = q.take(), k.take(), v.take()
    kw.pop("preferred_attention", None)
    options = kw.get("transformer_options") or {}
    override = options.get("optimized_attention_override")
    if override is not None and not kw.get("_inside_attn_wrapper", False):
        return override(_plain_attention, q, k, v, heads, *args, _inside_attn_wrapper=True, **kw)
    kw.pop("_inside_attn_wrapper", None)
    return _plain_attention(q, k, v, heads, *args, **kw)


# ---------------------------------------------------------------------------- comfy.ops-style layers


class CastLinear(nn.Linear):
    comfy_cast_weights = False

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.weight_function, self.bias_function = [], []

    def forward(self, x):
        if not (self.comfy_cast_weights or self.weight_function or self.bias_function):
            return F.linear(x, self.weight, self.bias)
        # cast_bias_weight: a copy only when a function patches the weight or the dtype differs
        weight = self.weight.to(device=x.device, copy=bool(self.weight_function))
        if self.weight_function or weight.dtype != x.dtype:
            weight = weight.to(dtype=x.dtype)
            for fn in self.weight_function:
                weight = fn(weight)
        bias = None
        if self.bias is not None:
            bias = self.bias.to(device=x.device, copy=bool(self.bias_function)).to(dtype=x.dtype)
            for fn in self.bias_function:
                bias = fn(bias)
        return F.linear(x, weight, bias)


class CastRMSNorm(nn.RMSNorm):
    """comfy.ops RMSNorm: F.rms_norm on `.weight` unless `comfy_cast_weights`; then the weight cast to the input's."""

    comfy_cast_weights = False

    def forward(self, x):
        weight = self.weight
        if self.comfy_cast_weights and weight is not None:
            weight = weight.to(device=x.device, dtype=x.dtype)
        return F.rms_norm(x, self.normalized_shape, weight, self.eps)


def _swiglu(x):
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)


INPUT_ACT = {"gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "swiglu": _swiglu}


def linear_input_act(linear, x, input_act):
    """comfy.ops.linear_input_act (0.33.0): `linear(act(x))`, the activation folded into kitchen's int8 matmul for a
    TensorWiseINT8Layout weight without weight functions."""
    weight = linear.weight
    if (not isinstance(weight, QuantizedTensor) or weight._layout_cls != "TensorWiseINT8Layout"
            or getattr(weight._params, "transposed", False) or linear.weight_function or linear.bias_function):
        return linear(INPUT_ACT[input_act](x))
    qdata, scale = weight._qdata, weight._params.scale
    bias = None if linear.bias is None else linear.bias.to(x.dtype)
    return ck.int8_linear(x, qdata, scale, bias, x.dtype, convrot=getattr(weight._params, "convrot", False),
                          convrot_groupsize=getattr(weight._params, "convrot_groupsize", 256), input_act=input_act)


class LowRankPatch:
    """A LoRA applied at cast time (what a weight patch / LowVramPatch does): w + scale * up @ down."""

    def __init__(self, out_features: int, in_features: int, rank: int = 2, scale: float = 0.5, seed: int = 7):
        gen = torch.Generator().manual_seed(seed)
        self.up = torch.randn(out_features, rank, generator=gen)
        self.down = torch.randn(rank, in_features, generator=gen)
        self.scale = scale

    def __call__(self, weight):
        return (weight.float() + self.scale * (self.up @ self.down)).to(weight.dtype)


# ---------------------------------------------------------------------------- comfy.quant_ops (0.33.0)


def _fp8_layout(fp8_dtype):
    base = ck.tensor.TensorCoreFP8Layout

    class ComfyFP8Layout(base):
        FP8_DTYPE = fp8_dtype

        @classmethod
        def quantize(cls, tensor, scale=None, stochastic_rounding=0, inplace_ops=False, **_kw):
            if isinstance(scale, str) and scale == "recalculate":
                scale = torch.amax(tensor.abs()).to(torch.float32) / torch.finfo(cls.FP8_DTYPE).max
            if scale is None:
                scale = torch.ones((), device=tensor.device, dtype=torch.float32)  # the host's choice, not the amax
            if not isinstance(scale, torch.Tensor):
                scale = torch.tensor(scale, device=tensor.device, dtype=torch.float32)
            qdata = ck.quantize_per_tensor_fp8(tensor, scale, cls.FP8_DTYPE)
            return qdata, cls.Params(scale=scale.float(), orig_dtype=tensor.dtype, orig_shape=tuple(tensor.shape))

    return ComfyFP8Layout


def _nvfp4_layout():
    base = ck.tensor.TensorCoreNVFP4Layout

    class ComfyNVFP4Layout(base):
        @classmethod
        def quantize(cls, tensor, scale=None, stochastic_rounding=0, inplace_ops=False, **_kw):
            if scale is None or (isinstance(scale, str) and scale == "recalculate"):
                scale = torch.amax(tensor.abs()) / (ck.float_utils.F8_E4M3_MAX * ck.float_utils.F4_E2M1_MAX)
            if not isinstance(scale, torch.Tensor):
                scale = torch.tensor(scale)
            scale = scale.to(device=tensor.device, dtype=torch.float32)
            padded = cls.get_padded_shape(tuple(tensor.shape)) != tuple(tensor.shape)
            qdata, block_scale = ck.quantize_nvfp4(tensor, scale, pad_16x=padded)
            return qdata, cls.Params(scale=scale, orig_dtype=tensor.dtype, orig_shape=tuple(tensor.shape),
                                     block_scale=block_scale)

    return ComfyNVFP4Layout


def _quant_algos():
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    return {
        "float8_e4m3fn": {"storage_t": e4m3, "comfy_tensor_layout": "TensorCoreFP8E4M3Layout"},
        "float8_e5m2": {"storage_t": e5m2, "comfy_tensor_layout": "TensorCoreFP8E5M2Layout"},
        "nvfp4": {"storage_t": torch.uint8, "comfy_tensor_layout": "TensorCoreNVFP4Layout"},
        "mxfp8": {"storage_t": e4m3, "comfy_tensor_layout": "TensorCoreMXFP8Layout"},
        "int8_tensorwise": {"storage_t": torch.int8, "comfy_tensor_layout": "TensorWiseINT8Layout",
                            "quantize_input": False},
        "convrot_w4a4": {"storage_t": torch.int8, "comfy_tensor_layout": "TensorCoreConvRotW4A4Layout",
                         "quantize_input": False},
        "asym_w4a8_int8": {"storage_t": torch.int8, "comfy_tensor_layout": "AsymW4A8Int8Layout",
                           "quantize_input": False},
    }


def format_layout(fmt: str) -> str:
    """The layout name 0.33.0 loads a QUANT_ALGOS format as."""
    return _quant_algos()[fmt]["comfy_tensor_layout"]


def host_quant_ops() -> tuple[types.ModuleType, dict[str, type]]:
    """(a `comfy.quant_ops` stand-in, {name: class} it registers) following ComfyUI 0.33.0's module."""
    module = types.ModuleType("comfy.quant_ops")
    e4m3 = _fp8_layout(torch.float8_e4m3fn)
    layouts = {
        "TensorCoreFP8Layout": e4m3,  # the backward-compatible alias: E4M3
        "TensorCoreFP8E4M3Layout": e4m3,
        "TensorCoreFP8E5M2Layout": _fp8_layout(torch.float8_e5m2),
        "TensorCoreNVFP4Layout": _nvfp4_layout(),
    }
    for name in ("TensorWiseINT8Layout", "TensorCoreConvRotW4A4Layout", "TensorCoreMXFP8Layout", "AsymW4A8Int8Layout"):
        if hasattr(ck.tensor, name):  # kitchen's own classes, registered as they are (older kitchens lack some)
            layouts[name] = getattr(ck.tensor, name)
    module.ck = ck
    module.QuantizedTensor = QuantizedTensor
    module.get_layout_class = ck.tensor.get_layout_class
    module.register_layout_class = ck.tensor.register_layout_class
    module.QUANT_ALGOS = _quant_algos()
    return module, layouts


def install_host_quant_ops(monkeypatch) -> types.ModuleType:
    """Register the 0.33.0 layout names in comfy-kitchen's registry and `comfy.quant_ops` in sys.modules, both
    undone by `monkeypatch` (a loaded ComfyUI does this at import)."""
    module, layouts = host_quant_ops()
    registry = ck.tensor.base.LAYOUTS
    for name, cls in layouts.items():
        monkeypatch.setitem(registry, name, cls)
    monkeypatch.setitem(sys.modules, "comfy.quant_ops", module)
    return module


LAYOUT_FORMATS = {"TensorCoreFP8Layout": "float8_e4m3fn", "TensorCoreFP8E4M3Layout": "float8_e4m3fn",
                  "TensorCoreFP8E5M2Layout": "float8_e5m2", "TensorCoreNVFP4Layout": "nvfp4",
                  "TensorCoreMXFP8Layout": "mxfp8", "TensorWiseINT8Layout": "int8_tensorwise",
                  "TensorCoreConvRotW4A4Layout": "convrot_w4a4", "AsymW4A8Int8Layout": "asym_w4a8_int8"}


class QuantLinear(nn.Module):
    """`MixedPrecisionOps.Linear` (0.33.0) holding a comfy-kitchen QuantizedTensor weight.

    `quant`: a QUANT_ALGOS format ("float8_e4m3fn", "int8_tensorwise", ...) or a layout name (its format is taken).
    """

    def __init__(self, linear: nn.Linear, quant: str, input_scale: torch.Tensor | None = None, **quant_kw):
        super().__init__()
        algos = _quant_algos()
        fmt = quant if quant in algos else LAYOUT_FORMATS[quant]
        self.quant_format = fmt
        self.layout_type = quant if quant in LAYOUT_FORMATS else algos[fmt]["comfy_tensor_layout"]
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(QuantizedTensor.from_float(linear.weight.detach(), self.layout_type, **quant_kw),
                                   requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.input_scale = input_scale
        self.weight_function, self.bias_function = [], []

    def _quantizes_input(self) -> bool:
        algos = getattr(sys.modules.get("comfy.quant_ops"), "QUANT_ALGOS", None) or _quant_algos()
        return algos.get(self.quant_format, {}).get("quantize_input", True)

    def forward(self, x):
        use_quantized = not isinstance(x, QuantizedTensor) and not self.weight_function and not self.bias_function
        quantize_input = self._quantizes_input()
        shape, reshaped, inp = x.shape, False, x
        if use_quantized and quantize_input:
            flat = x.reshape(-1, shape[-1]) if x.ndim >= 3 else x
            if flat.ndim == 2:
                reshaped = x.ndim >= 3
                inp = QuantizedTensor.from_float(flat, self.layout_type, scale=self.input_scale)
        if use_quantized and not quantize_input:  # weight-only: the layout's matmul takes the plain input
            weight = self.weight.to(dtype=x.dtype)
            bias = None if self.bias is None else self.bias.to(x.dtype)
            return F.linear(x, weight, bias)
        dtype = inp._params.orig_dtype if isinstance(inp, QuantizedTensor) else inp.dtype
        weight = self.weight
        if self.weight_function or weight.dtype != dtype:
            weight = weight.to(dtype=dtype)
            if isinstance(weight, QuantizedTensor):
                weight = weight.dequantize()
            for fn in self.weight_function:
                weight = fn(weight)
        bias = None if self.bias is None else self.bias.to(dtype)
        out = F.linear(inp, weight, bias)
        return out.reshape(*shape[:-1], self.out_features) if reshaped else out


def manual_cast(module: nn.Module) -> nn.Module:
    """Every stand-in layer of `module` casts its weights per call, like comfy.ops.manual_cast layers."""
    for layer in module.modules():
        if isinstance(layer, (CastLinear, CastRMSNorm)):
            layer.comfy_cast_weights = True
    return module


def quantize_layers(module: nn.Module, names: tuple[str, ...], quant: str, **kw) -> None:
    """Replace the named Linear children (dotted) of `module` by QuantLinear copies."""
    for name in names:
        owner_name, _, attr = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        setattr(owner, attr, QuantLinear(getattr(owner, attr), quant, **kw))


# ---------------------------------------------------------------------------- H3 (ComfyUI 0.33.0)


class H3Attention(nn.Module):
    def __init__(self, hidden, heads, head_dim, eps=1e-5):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.qkv_proj = CastLinear(hidden, 3 * inner, bias=False)
        self.q_norm = CastRMSNorm(head_dim, eps=eps)
        self.k_norm = CastRMSNorm(head_dim, eps=eps)
        self.out_proj = CastLinear(inner, hidden, bias=False)

    def forward(self, x, rope_freqs=None, transformer_options={}):  # noqa: B006 - the host's signature
        s = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.heads * self.head_dim, dim=-1)
        v = v.view(s, self.heads, self.head_dim)
        if rope_freqs is not None:
            q, k = q.view(1, s, self.heads, self.head_dim), k.view(1, s, self.heads, self.head_dim)
            ck.rms_rope_split_half_(q, k, rope_freqs, self.q_norm.weight.to(x.device), self.k_norm.weight.to(x.device),
                                    epsilon=self.q_norm.eps, rot_dim=rope_freqs.shape[-3] * 2)
            q, k = q[0], k[0]
        else:
            q = self.q_norm(q.view(s, self.heads, self.head_dim))
            k = self.k_norm(k.view(s, self.heads, self.head_dim))
        v = v.clone()
        q, k, v = (AttentionTensorContainer(t.transpose(0, 1).unsqueeze(0)) for t in (q, k, v))
        out = optimized_attention(q, k, v, self.heads, mask=None, skip_reshape=True,
                                  transformer_options=transformer_options)
        return self.out_proj(out.squeeze(0))


class H3MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.fc1 = CastLinear(hidden, 2 * ffn, bias=False)
        self.fc2 = CastLinear(ffn, hidden, bias=False)

    def forward(self, x):
        return linear_input_act(self.fc2, self.fc1(x), "swiglu")


class AdalnProj(nn.Module):
    def __init__(self, t_dim, hidden, expand, modalities, apply_silu=True):
        super().__init__()
        self.expand, self.modalities, self.hidden, self.apply_silu = expand, modalities, hidden, apply_silu
        self.linear = CastLinear(t_dim, expand * hidden * modalities, bias=True)

    def forward(self, t_emb):
        x = self.linear(F.silu(t_emb) if self.apply_silu else t_emb)
        return x.view(x.shape[0] * self.modalities, self.expand * self.hidden).chunk(self.expand, dim=-1)


def _mod_scale_shift(h, shift, scale, segments):
    for a, b, row in segments:
        h[a:b].mul_(1.0 + scale[row].to(h.dtype)).add_(shift[row].to(h.dtype))
    return h


def _mod_gate(x, gate, other, segments):
    for a, b, row in segments:
        x[a:b].addcmul_(other[a:b], gate[row].to(x.dtype))
    return x


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, head_dim, ffn, t_dim=8, eps=1e-5, qk_eps=1e-5):
        super().__init__()
        self.norm1, self.norm2 = CastRMSNorm(hidden, eps=eps), CastRMSNorm(hidden, eps=eps)
        self.attn = H3Attention(hidden, heads, head_dim, qk_eps)
        self.mlp = H3MLP(hidden, ffn)
        self.adaln_proj = AdalnProj(t_dim, hidden, 6, 3)

    def forward(self, x, t_emb, mod_segments, rope_freqs, transformer_options={}):  # noqa: B006 - the host's
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = self.adaln_proj(t_emb)
        h = _mod_scale_shift(self.norm1(x), shift_a, scale_a, mod_segments)
        x = _mod_gate(x, gate_a, self.attn(h, rope_freqs=rope_freqs, transformer_options=transformer_options),
                      mod_segments)
        h = _mod_scale_shift(self.norm2(x), shift_m, scale_m, mod_segments)
        return _mod_gate(x, gate_m, self.mlp(h), mod_segments)


class H3Net(nn.Module):
    def __init__(self, hidden=48, heads=4, head_dim=32, ffn=96, layers=2):
        super().__init__()
        self.blocks = nn.ModuleList(DiTBlock(hidden, heads, head_dim, ffn) for _ in range(layers))

    def forward(self, x, t_emb, mod_segments, rope_freqs=None, transformer_options=None):
        options = transformer_options or {}
        replace = options.get("patches_replace", {}).get("dit", {})
        for i, block in enumerate(self.blocks):
            if ("double_block", i) in replace:
                def block_wrap(args, block=block):
                    return {"img": block(args["img"], args["t_emb"], args["mod_segments"], args["rope_freqs"],
                                         transformer_options=args["transformer_options"])}
                x = replace[("double_block", i)]({"img": x, "t_emb": t_emb, "mod_segments": mod_segments,
                                                  "rope_freqs": rope_freqs, "transformer_options": options},
                                                 {"original_block": block_wrap})["img"]
            else:
                x = block(x, t_emb, mod_segments, rope_freqs, transformer_options=options)
        return x


def h3_inputs(tokens=64, hidden=48, rot=24, dtype=torch.bfloat16, seed=1):
    """(x [S, hidden], t_emb [1, 8], mod_segments, rope table [1, S, 1, rot/2, 2, 2]) as the H3 model builds them."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    t_emb = torch.randn(1, 8, generator=gen).to(dtype)
    third = tokens // 3
    segments = [(0, third, 1), (third, 2 * third, 2), (2 * third, tokens, 0)]
    positions = torch.arange(tokens, dtype=torch.float32)[:, None]
    angles = positions / (10.0 ** torch.linspace(0, 2, rot // 2))
    c, s = angles.cos(), angles.sin()
    table = torch.stack((c, -s, s, c), dim=-1).reshape(1, tokens, 1, rot // 2, 2, 2).to(dtype)
    return x, t_emb, segments, table


# ---------------------------------------------------------------------------- LTX (three host styles)


def _interleaved_cos_sin(t, cos, sin):
    pairs = t.reshape(*t.shape[:-1], -1, 2)
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).reshape(t.shape)
    return t * cos + rotated * sin


def _split_cos_sin(t, cos, sin):
    """0.12.1's split RoPE: both halves scaled by cos, then the cross terms added in place (addcmul_)."""
    b, h, n, _ = cos.shape  # [B, H, T, D/2]
    halves = t.reshape(b, n, h, -1).swapaxes(1, 2)
    halves = halves.reshape(*halves.shape[:-1], 2, -1)  # [..., 2, D/2]
    first, second = halves[..., :1, :], halves[..., 1:, :]
    out = halves * cos.unsqueeze(-2)
    out[..., :1, :].addcmul_(-sin.unsqueeze(-2), second)
    out[..., 1:, :].addcmul_(sin.unsqueeze(-2), first)
    return out.reshape(*out.shape[:-2], -1).swapaxes(1, 2).reshape(b, n, -1)


def _rope_v0364(t, pe):
    return _interleaved_cos_sin(t, pe[0], pe[1])


def _rope_v0121(t, pe):
    split = pe[2] if len(pe) > 2 else False
    return _split_cos_sin(t, pe[0], pe[1]) if split else _interleaved_cos_sin(t, pe[0], pe[1])


def _rope_new(t, pe):
    table, split = pe
    shape = t.shape
    t = t.reshape(t.shape[0], t.shape[1], table.shape[2], -1)
    t = ck.apply_rope_split_half1(t, table) if split else ck.apply_rope1(t, table)
    return t.reshape(shape)


def _rope_new_qk(q, k, pe):
    table, split = pe
    q_shape, k_shape = q.shape, k.shape
    q = q.reshape(q.shape[0], q.shape[1], table.shape[2], -1)
    k = k.reshape(k.shape[0], k.shape[1], table.shape[2], -1)
    q, k = ck.apply_rope_split_half(q, k, table) if split else ck.apply_rope(q, k, table)
    return q.reshape(q_shape), k.reshape(k_shape)


LTX_STYLES = ("v0364", "v0121", "new")


def ltx_host(style: str) -> types.ModuleType:
    """A module holding the LTX CrossAttention + RoPE functions of one host style (built once per style)."""
    name = f"lowvram_fakes_ltx_{style}"
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    module.optimized_attention = optimized_attention
    module.optimized_attention_masked = optimized_attention  # one function in every host
    module.apply_rotary_emb = {"v0364": _rope_v0364, "v0121": _rope_v0121, "new": _rope_new}[style]
    if style == "new":
        module.apply_rotary_emb_qk = _rope_new_qk

    class CrossAttention(nn.Module):
        def __init__(self, query_dim, context_dim=None, heads=8, dim_head=64, gated=False):
            super().__init__()
            if gated and style != "new":
                raise ValueError(f"the {style} host's CrossAttention has no per-head gates")
            inner, context_dim = heads * dim_head, context_dim or query_dim
            self.heads, self.dim_head, self.attn_precision = heads, dim_head, None
            self.q_norm, self.k_norm = CastRMSNorm(inner, eps=1e-5), CastRMSNorm(inner, eps=1e-5)
            self.to_q, self.to_k = CastLinear(query_dim, inner), CastLinear(context_dim, inner)
            self.to_v = CastLinear(context_dim, inner)
            if style == "new":
                self.to_gate_logits = CastLinear(query_dim, heads) if gated else None
            self.to_out = nn.Sequential(CastLinear(inner, query_dim), nn.Dropout(0.0))

        def _attend(self, q, k, v, mask, options):
            if style == "new":
                if mask is None:
                    return module.optimized_attention(q, k, v, self.heads, attn_precision=self.attn_precision,
                                                      transformer_options=options)
                return module.optimized_attention(q, k, v, self.heads, mask=mask, attn_precision=self.attn_precision,
                                                  transformer_options=options)
            if mask is None:
                return module.optimized_attention(q, k, v, self.heads, attn_precision=self.attn_precision,
                                                  transformer_options=options)
            return module.optimized_attention_masked(q, k, v, self.heads, mask, attn_precision=self.attn_precision,
                                                     transformer_options=options)

        def _forward(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options={}):  # noqa: B006
            self_attn = context is None
            q = self.to_q(x)
            context = x if context is None else context
            k, v = self.to_k(context), self.to_v(context)
            if style == "new" and self_attn and transformer_options.get("stg_skip_self_attn", False):
                out = v
            else:
                q, k = self.q_norm(q), self.k_norm(k)
                if pe is not None:
                    if style == "new" and k_pe is None and q.shape == k.shape:
                        q, k = module.apply_rotary_emb_qk(q, k, pe)
                    else:
                        q = module.apply_rotary_emb(q, pe)
                        k = module.apply_rotary_emb(k, pe if k_pe is None else k_pe)
                out = self._attend(q, k, v, mask, transformer_options)
            if getattr(self, "to_gate_logits", None) is not None:
                gate_logits = self.to_gate_logits(x)
                b, t, _ = out.shape
                out = out.view(b, t, self.heads, self.dim_head)
                out = (out * (2.0 * torch.sigmoid(gate_logits)).unsqueeze(-1)).view(b, t, self.heads * self.dim_head)
            return self.to_out(out)

    if style != "v0364":
        def forward(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options={}):  # noqa: B006
            return self._forward(x, context, mask, pe, k_pe, transformer_options)
    else:
        def forward(self, x, context=None, mask=None, pe=None, transformer_options={}):  # noqa: B006
            return self._forward(x, context, mask, pe, None, transformer_options)
    CrossAttention.forward = forward
    CrossAttention.__module__ = name
    CrossAttention.__qualname__ = "CrossAttention"
    module.CrossAttention = CrossAttention

    class GELUApprox(nn.Module):
        def __init__(self, dim_in, dim_out):
            super().__init__()
            self.proj = CastLinear(dim_in, dim_out)

        def forward(self, x):
            return F.gelu(self.proj(x), approximate="tanh")

    class FeedForward(nn.Module):
        def __init__(self, dim, dim_out=None, mult=4):
            super().__init__()
            inner = int(dim * mult)
            self.net = nn.Sequential(GELUApprox(dim, inner), nn.Dropout(0.0), CastLinear(inner, dim_out or dim))

        def forward(self, x):
            if style == "new":
                return linear_input_act(self.net[2], self.net[0].proj(x), "gelu_tanh")
            return self.net(x)

    FeedForward.__module__ = name
    module.FeedForward = FeedForward
    sys.modules[name] = module
    return module


class LTXBlock(nn.Module):
    def __init__(self, style, v_dim=64, a_dim=32, heads=4, dim_head=16, a_heads=2, a_dim_head=8, ctx_dim=32,
                 gated=False):
        super().__init__()
        host = ltx_host(style)
        self.attn1 = host.CrossAttention(v_dim, None, heads, dim_head, gated)
        self.attn2 = host.CrossAttention(v_dim, ctx_dim, heads, dim_head, gated)
        self.audio_to_video_attn = host.CrossAttention(v_dim, a_dim, a_heads, a_dim_head, gated)
        self.ff = host.FeedForward(v_dim)

    def forward(self, vx, ax, context, pe, mask, cross_pe, transformer_options):
        to = transformer_options
        vx = vx + self.attn1(vx, pe=pe, transformer_options=to)
        vx = vx + self.attn2(vx, context=context, mask=mask, transformer_options=to)
        if cross_pe is not None:
            vx = vx + self.audio_to_video_attn(vx, context=ax, pe=cross_pe[0], k_pe=cross_pe[1], transformer_options=to)
        else:
            vx = vx + self.audio_to_video_attn(vx, context=ax, transformer_options=to)
        return vx + self.ff(vx)


class LTXNet(nn.Module):
    def __init__(self, style="new", layers=2, **kw):
        super().__init__()
        self.transformer_blocks = nn.ModuleList(LTXBlock(style, **kw) for _ in range(layers))

    def forward(self, vx, ax, context, pe=None, mask=None, cross_pe=None, transformer_options=None):
        for block in self.transformer_blocks:
            vx = block(vx, ax, context, pe, mask, cross_pe, transformer_options or {})
        return vx


def ltx_pe(style: str, batch: int, tokens: int, heads: int, dim_head: int, split: bool, dtype=torch.float32):
    """The RoPE argument each host style passes for `tokens` positions."""
    positions = torch.arange(tokens, dtype=torch.float32)[None, :, None] + torch.arange(batch)[:, None, None]
    freqs = 1.0 / (3.0 ** torch.linspace(0, 3, heads * dim_head // 2))
    angles = positions * freqs  # [B, T, inner/2]
    if style == "new":
        angles = angles.reshape(batch, tokens, heads, dim_head // 2)
        c, s = angles.cos(), angles.sin()
        return torch.stack((c, -s, s, c), dim=-1).reshape(*angles.shape, 2, 2).to(dtype), split
    if style == "v0121" and split:
        angles = angles.reshape(batch, tokens, heads, dim_head // 2).transpose(1, 2)  # [B, H, T, D/2]
        return angles.cos().to(dtype), angles.sin().to(dtype), True
    cos = angles.cos().repeat_interleave(2, dim=-1).to(dtype)
    sin = angles.sin().repeat_interleave(2, dim=-1).to(dtype)
    return (cos, sin) if style == "v0364" else (cos, sin, False)


# ---------------------------------------------------------------------------- patcher


class BaseModel(nn.Module):
    manual_cast_dtype = None

    def __init__(self, net: nn.Module):
        super().__init__()
        self.diffusion_model = net.requires_grad_(False)  # the host loads inference weights without grad


def _resolve(root, dotted: str):
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


class FakeModelPatcher:
    """clone / add_object_patch / get_model_object / model_options like comfy's ModelPatcher (shallow clone)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.load_device = torch.device("cpu")
        self.object_patches: dict = {}
        self.model_options: dict = {"transformer_options": {}}

    def clone(self) -> FakeModelPatcher:
        twin = type(self)(self.model)
        twin.object_patches = dict(self.object_patches)
        twin.model_options = dict(self.model_options)
        return twin

    def model_dtype(self):
        return next(self.model.diffusion_model.parameters()).dtype

    def set_model_compute_dtype(self, dtype) -> None:
        self.add_object_patch("manual_cast_dtype", dtype)

    def add_object_patch(self, name: str, obj) -> None:
        self.object_patches[name] = obj

    def get_model_object(self, name: str):
        if name in self.object_patches:
            return self.object_patches[name]
        return _resolve(self.model, name)

    @contextlib.contextmanager
    def patched(self):
        """Apply object patches for one run and restore afterwards (what ModelPatcher does on load/unload)."""
        undo = []
        for name, obj in self.object_patches.items():
            owner_path, _, attr = name.rpartition(".")
            owner = _resolve(self.model, owner_path) if owner_path else self.model
            had = attr in owner.__dict__
            undo.append((owner, attr, had, owner.__dict__.get(attr)))
            setattr(owner, attr, obj)
        try:
            yield self.model.diffusion_model
        finally:
            for owner, attr, had, old in reversed(undo):
                if had:
                    setattr(owner, attr, old)
                else:
                    delattr(owner, attr)

    def run(self, *args, **kwargs):
        with torch.no_grad(), self.patched() as net:
            return net(*args, transformer_options=self.model_options.get("transformer_options", {}), **kwargs)
