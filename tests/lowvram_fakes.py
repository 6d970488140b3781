"""Host-semantics stand-ins for tests/test_lowvram*.py, written after the real classes (host-api.md §1, §8, §9).

They follow what the host computes, with the host's own kernel library (comfy-kitchen, eager CPU backend):
- `CastLinear`: a comfy.ops Linear: plain `F.linear` on `.weight` unless `comfy_cast_weights` or weight/bias
  functions are set; then the weight is cast to the input's dtype/device and each `weight_function` (LoRA,
  the lowvram patch of a partially loaded model) is applied at cast time.
- `QuantLinear`: a mixed-precision Linear with a comfy-kitchen `QuantizedTensor` weight: the input is quantized
  (optionally with a stored `input_scale`) and multiplied by the layout's own matmul; with weight functions the
  weight is dequantized and patched instead.
- H3 `Attention` (fused qkv, `rms_rope_split_half_` in place on the qkv views, q_norm's eps for both, q/k/v in
  `AttentionTensorContainer`s), `MLP` (SwiGLU), `DiTBlock` (adaLN per segment, in-place modulation and gated
  residuals, `attention=` override), `H3Net` (block replacements from `patches_replace["dit"]`).
- LTX `CrossAttention` in three host styles (`ltx_host("v0364" | "v0121" | "new")`): RoPE formats (cos, sin),
  (cos, sin, split) and (table, split); module-level `apply_rotary_emb` (+ `apply_rotary_emb_qk` in the newest);
  `k_pe` and masked attention as each host has them.
- `optimized_attention` honours `transformer_options["optimized_attention_override"]` like the host's wrap_attn.
"""

from __future__ import annotations

import contextlib
import sys
import types

import comfy_kitchen as ck
import torch
import torch.nn.functional as F
from comfy_kitchen.tensor import QuantizedTensor
from torch import nn

# ---------------------------------------------------------------------------- attention function


class AttentionTensorContainer:
    """The newest host's q/k/v wrapper: the attention function takes the tensor out."""

    def __init__(self, tensor):
        self.tensor = tensor

    def take(self):
        return self.tensor


def _take(t):
    return t.take() if isinstance(t, AttentionTensorContainer) else t


def _plain_attention(q, k, v, heads, mask=None, skip_reshape=False, **_kw):
    """The host's pytorch attention: torch SDPA on [B, H, S, D] (reshaped from [B, S, H*D] unless skip_reshape)."""
    q, k, v = _take(q), _take(k), _take(v)
    if not skip_reshape:
        b, _, width = q.shape
        q, k, v = (t.reshape(b, -1, heads, width // heads).transpose(1, 2) for t in (q, k, v))
    if mask is not None:
        while mask.ndim < 4:
            mask = mask.unsqueeze(0) if mask.ndim < 3 else mask.unsqueeze(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)


def optimized_attention(q, k, v, heads, mask=None, skip_reshape=False, transformer_options=None, **kw):
    kw.pop("preferred_attention", None)
    override = (transformer_options or {}).get("optimized_attention_override")
    if override is not None and not kw.pop("_inside_attn_wrapper", False):
        return override(_plain_attention, _take(q), _take(k), _take(v), heads, mask=mask, skip_reshape=skip_reshape,
                        transformer_options=transformer_options, _inside_attn_wrapper=True, **kw)
    return _plain_attention(q, k, v, heads, mask=mask, skip_reshape=skip_reshape)


def optimized_attention_masked(q, k, v, heads, mask, **kw):
    return optimized_attention(q, k, v, heads, mask=mask, **kw)


# ---------------------------------------------------------------------------- comfy.ops-style layers


class CastLinear(nn.Linear):
    comfy_cast_weights = False

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.weight_function, self.bias_function = [], []

    def forward(self, x):
        if not (self.comfy_cast_weights or self.weight_function or self.bias_function):
            return F.linear(x, self.weight, self.bias)
        weight = self.weight.to(device=x.device, dtype=x.dtype, copy=True)
        for fn in self.weight_function:
            weight = fn(weight)
        bias = None
        if self.bias is not None:
            bias = self.bias.to(device=x.device, dtype=x.dtype, copy=True)
            for fn in self.bias_function:
                bias = fn(bias)
        return F.linear(x, weight, bias)


class LowRankPatch:
    """A LoRA applied at cast time (what a weight patch / LowVramPatch does): w + scale * up @ down."""

    def __init__(self, out_features: int, in_features: int, rank: int = 2, scale: float = 0.5, seed: int = 7):
        gen = torch.Generator().manual_seed(seed)
        self.up = torch.randn(out_features, rank, generator=gen)
        self.down = torch.randn(rank, in_features, generator=gen)
        self.scale = scale

    def __call__(self, weight):
        return (weight.float() + self.scale * (self.up @ self.down)).to(weight.dtype)


class QuantLinear(nn.Module):
    """A mixed-precision Linear holding a comfy-kitchen QuantizedTensor weight."""

    QUANTIZE_INPUT = {"TensorCoreFP8Layout": True, "TensorCoreNVFP4Layout": True, "TensorWiseINT8Layout": False}

    def __init__(self, linear: nn.Linear, layout: str, input_scale: torch.Tensor | None = None, **quant_kw):
        super().__init__()
        self.in_features, self.out_features, self.layout_type = linear.in_features, linear.out_features, layout
        self.weight = nn.Parameter(QuantizedTensor.from_float(linear.weight.detach(), layout, **quant_kw),
                                   requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.input_scale = input_scale
        self.weight_function, self.bias_function = [], []

    def forward(self, x):
        if self.weight_function or self.bias_function:
            weight = self.weight.dequantize().to(x.dtype)
            for fn in self.weight_function:
                weight = fn(weight)
            return F.linear(x, weight, None if self.bias is None else self.bias.to(x.dtype))
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if self.QUANTIZE_INPUT[self.layout_type]:
            flat = QuantizedTensor.from_float(flat, self.layout_type, scale=self.input_scale)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        out = F.linear(flat, self.weight, bias)
        return out.reshape(*shape[:-1], out.shape[-1])


def quantize_layers(module: nn.Module, names: tuple[str, ...], layout: str, **kw) -> None:
    """Replace the named Linear children (dotted) of `module` by QuantLinear copies."""
    for name in names:
        owner_name, _, attr = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        setattr(owner, attr, QuantLinear(getattr(owner, attr), layout, **kw))


# ---------------------------------------------------------------------------- H3


class H3Attention(nn.Module):
    def __init__(self, hidden, heads, head_dim, eps=1e-5):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.qkv_proj = CastLinear(hidden, 3 * inner, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps * 2)  # the host uses q_norm's eps for both in the fused kernel
        self.out_proj = CastLinear(inner, hidden, bias=False)
        self.comfy_attention = None

    def forward(self, x, rope_freqs=None, transformer_options={}):  # noqa: B006 - the host's signature
        s, inner = x.shape[0], self.heads * self.head_dim
        q, k, v = self.qkv_proj(x).split(inner, dim=-1)
        v = v.view(s, self.heads, self.head_dim)
        if rope_freqs is not None:
            q, k = q.view(1, s, self.heads, self.head_dim), k.view(1, s, self.heads, self.head_dim)
            ck.rms_rope_split_half_(q, k, rope_freqs, self.q_norm.weight.to(x.device), self.k_norm.weight.to(x.device),
                                    epsilon=self.q_norm.eps, rot_dim=rope_freqs.shape[-3] * 2)
            q, k = q[0], k[0]
        else:
            q = self.q_norm(q.view(s, self.heads, self.head_dim))
            k = self.k_norm(k.view(s, self.heads, self.head_dim))
        q, k, v = (AttentionTensorContainer(t.transpose(0, 1).unsqueeze(0)) for t in (q, k, v))
        out = optimized_attention(q, k, v, self.heads, preferred_attention=self.comfy_attention, mask=None,
                                  skip_reshape=True, transformer_options=transformer_options)
        return self.out_proj(out.squeeze(0))


class H3MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.fc1 = CastLinear(hidden, 2 * ffn, bias=False)
        self.fc2 = CastLinear(ffn, hidden, bias=False)

    def forward(self, x):
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, head_dim, ffn, t_dim=8):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(hidden, eps=1e-6), nn.RMSNorm(hidden, eps=1e-6)
        self.attn = H3Attention(hidden, heads, head_dim)
        self.mlp = H3MLP(hidden, ffn)
        self.adaln_proj = nn.Linear(t_dim, 6 * hidden * 3)
        self.hidden = hidden

    def forward(self, x, t_emb, mod_segments, rope_freqs, transformer_options={}, attention=None):  # noqa: B006
        attention = self.attn if attention is None else attention
        mods = self.adaln_proj(F.silu(t_emb)).view(t_emb.shape[0] * 3, 6 * self.hidden).chunk(6, dim=-1)
        shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = mods
        h = self._modulate(self.norm1(x), shift_a, scale_a, mod_segments)
        x = self._gate(x, gate_a, attention(h, rope_freqs=rope_freqs, transformer_options=transformer_options),
                       mod_segments)
        h = self._modulate(self.norm2(x), shift_m, scale_m, mod_segments)
        return self._gate(x, gate_m, self.mlp(h), mod_segments)

    @staticmethod
    def _modulate(h, shift, scale, segments):
        for a, b, row in segments:
            h[a:b].mul_(1.0 + scale[row].to(h.dtype)).add_(shift[row].to(h.dtype))
        return h

    @staticmethod
    def _gate(x, gate, other, segments):
        for a, b, row in segments:
            x[a:b].addcmul_(other[a:b], gate[row].to(x.dtype))
        return x


class H3Net(nn.Module):
    def __init__(self, hidden=48, heads=4, head_dim=32, ffn=96, layers=2):
        super().__init__()
        self.blocks = nn.ModuleList(DiTBlock(hidden, heads, head_dim, ffn) for _ in range(layers))

    def forward(self, x, t_emb, mod_segments, rope_freqs=None, transformer_options=None):
        options = transformer_options or {}
        replace = options.get("patches_replace", {}).get("dit", {})
        for i, block in enumerate(self.blocks):
            options = {**options, "block_index": i}
            if ("double_block", i) in replace:
                def original(args, block=block):
                    return {"img": block(args["img"], args["t_emb"], args["mod_segments"], args["rope_freqs"],
                                         args["transformer_options"], attention=args.get("attention"))}
                x = replace[("double_block", i)]({"img": x, "t_emb": t_emb, "mod_segments": mod_segments,
                                                  "rope_freqs": rope_freqs, "transformer_options": options},
                                                 {"original_block": original})["img"]
            else:
                x = block(x, t_emb, mod_segments, rope_freqs, options)
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
    b, h, n, _ = cos.shape  # [B, H, T, D/2]
    x = t.reshape(b, n, h, -1).transpose(1, 2)
    first, second = x.chunk(2, dim=-1)
    out = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    return out.transpose(1, 2).reshape(t.shape)


def _rope_v0364(t, pe):
    return _interleaved_cos_sin(t, pe[0], pe[1])


def _rope_v0121(t, pe):
    split = pe[2] if len(pe) > 2 else False
    return _split_cos_sin(t, pe[0], pe[1]) if split else _interleaved_cos_sin(t, pe[0], pe[1])


def _rope_new(t, pe):
    table, split = pe
    shaped = t.reshape(t.shape[0], t.shape[1], table.shape[2], -1)
    out = ck.apply_rope_split_half1(shaped, table) if split else ck.apply_rope1(shaped, table)
    return out.reshape(t.shape)


def _rope_new_qk(q, k, pe):
    table, split = pe
    qs = q.reshape(q.shape[0], q.shape[1], table.shape[2], -1)
    ks = k.reshape(k.shape[0], k.shape[1], table.shape[2], -1)
    qs, ks = ck.apply_rope_split_half(qs, ks, table) if split else ck.apply_rope(qs, ks, table)
    return qs.reshape(q.shape), ks.reshape(k.shape)


def ltx_host(style: str) -> types.ModuleType:
    """A module holding the LTX CrossAttention + RoPE functions of one host style (built once per style)."""
    name = f"lowvram_fakes_ltx_{style}"
    if name in sys.modules:
        return sys.modules[name]
    module = types.ModuleType(name)
    module.optimized_attention = optimized_attention
    module.optimized_attention_masked = optimized_attention_masked
    module.apply_rotary_emb = {"v0364": _rope_v0364, "v0121": _rope_v0121, "new": _rope_new}[style]
    if style == "new":
        module.apply_rotary_emb_qk = _rope_new_qk
        module.AttentionTensorContainer = AttentionTensorContainer
    takes_k_pe = style != "v0364"

    class CrossAttention(nn.Module):
        def __init__(self, query_dim, context_dim=None, heads=4, dim_head=8, gated=False):
            super().__init__()
            inner, context_dim = heads * dim_head, context_dim or query_dim
            self.heads, self.dim_head, self.attn_precision = heads, dim_head, None
            self.q_norm, self.k_norm = nn.RMSNorm(inner, eps=1e-5), nn.RMSNorm(inner, eps=1e-5)
            self.to_q, self.to_k = CastLinear(query_dim, inner), CastLinear(context_dim, inner)
            self.to_v = CastLinear(context_dim, inner)
            self.to_gate_logits = CastLinear(query_dim, heads) if gated else None
            self.to_out = nn.Sequential(CastLinear(inner, query_dim), nn.Dropout(0.0))

        def _forward(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options={}):  # noqa: B006
            self_attn = context is None
            q = self.to_q(x)
            context = x if context is None else context
            k, v = self.to_k(context), self.to_v(context)
            if self_attn and transformer_options.get("stg_skip_self_attn", False):
                out = v
            else:
                q, k = self.q_norm(q), self.k_norm(k)
                if pe is not None:
                    if style == "new" and k_pe is None and q.shape == k.shape:
                        q, k = module.apply_rotary_emb_qk(q, k, pe)
                    else:
                        q = module.apply_rotary_emb(q, pe)
                        k = module.apply_rotary_emb(k, pe if k_pe is None else k_pe)
                if mask is not None and not takes_k_pe:
                    out = module.optimized_attention_masked(q, k, v, self.heads, mask,
                                                            transformer_options=transformer_options)
                else:
                    if style == "new":
                        q, k, v = AttentionTensorContainer(q), AttentionTensorContainer(k), AttentionTensorContainer(v)
                    out = module.optimized_attention(q, k, v, self.heads, mask=mask, attn_precision=self.attn_precision,
                                                     transformer_options=transformer_options)
            if self.to_gate_logits is not None:
                b, t, _ = out.shape
                gates = 2.0 * torch.sigmoid(self.to_gate_logits(x))
                out = (out.view(b, t, self.heads, self.dim_head) * gates.unsqueeze(-1)).view(b, t, -1)
            return self.to_out(out)

    if takes_k_pe:
        def forward(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options={}):  # noqa: B006
            return self._forward(x, context, mask, pe, k_pe, transformer_options)
    else:
        def forward(self, x, context=None, mask=None, pe=None, transformer_options={}):  # noqa: B006
            return self._forward(x, context, mask, pe, None, transformer_options)
    CrossAttention.forward = forward
    CrossAttention.__module__ = name
    CrossAttention.__qualname__ = "CrossAttention"
    module.CrossAttention = CrossAttention
    sys.modules[name] = module
    return module


class GELUApprox(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.proj = CastLinear(dim_in, dim_out)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class LTXFeedForward(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.net = nn.Sequential(GELUApprox(dim, dim * mult), nn.Dropout(0.0), CastLinear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class LTXBlock(nn.Module):
    def __init__(self, style, v_dim=64, a_dim=32, heads=4, dim_head=16, a_heads=2, a_dim_head=8, ctx_dim=32,
                 gated=False):
        super().__init__()
        attention = ltx_host(style).CrossAttention
        self.attn1 = attention(v_dim, None, heads, dim_head, gated)
        self.attn2 = attention(v_dim, ctx_dim, heads, dim_head, gated)
        self.audio_to_video_attn = attention(v_dim, a_dim, a_heads, a_dim_head, gated)
        self.ff = LTXFeedForward(v_dim)

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
        self.object_patches: dict = {}
        self.model_options: dict = {"transformer_options": {}}

    def clone(self) -> FakeModelPatcher:
        twin = FakeModelPatcher(self.model)
        twin.object_patches = dict(self.object_patches)
        twin.model_options = dict(self.model_options)
        return twin

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
