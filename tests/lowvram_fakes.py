"""Tiny stand-ins for the host contract (host-api.md §1, §3, §8) used by tests/test_lowvram*.py.

- FakeModelPatcher: clone / add_object_patch / get_model_object / model_options like comfy's
  ModelPatcher. clone() copies model_options only shallowly, so a node that writes into the input's
  transformer_options in place is caught by the tests.
- H3 blocks (`blocks[i].attn` with fused qkv_proj, per-head q_norm/k_norm, partial split-half RoPE
  written the way comfy_kitchen's eager backend does it; `mlp.fc1/fc2` SwiGLU) and LTX blocks
  (`transformer_blocks[i].attn1/attn2/audio_to_video_attn/ff`, norms across heads, per-head RoPE).
- `optimized_attention` lives in this module, as in the host's model modules, and honours
  `transformer_options["optimized_attention_override"]` like the host's wrap_attn.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn


def _plain_attention(q, k, v, heads, mask=None, skip_reshape=False, **_kw):
    if not skip_reshape:
        b, _, width = q.shape
        q, k, v = (t.reshape(b, -1, heads, width // heads).transpose(1, 2) for t in (q, k, v))
    scores = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    if mask is not None:
        while mask.ndim < 4:
            mask = mask.unsqueeze(0) if mask.ndim < 3 else mask.unsqueeze(1)
        scores = scores + mask.float()
    out = (scores.softmax(-1) @ v.float()).to(q.dtype)
    return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)


def optimized_attention(q, k, v, heads, mask=None, skip_reshape=False, transformer_options=None, **kw):
    override = (transformer_options or {}).get("optimized_attention_override")
    if override is not None and not kw.pop("_inside_attn_wrapper", False):
        return override(_plain_attention, q, k, v, heads, mask=mask, skip_reshape=skip_reshape,
                        transformer_options=transformer_options, _inside_attn_wrapper=True, **kw)
    return _plain_attention(q, k, v, heads, mask=mask, skip_reshape=skip_reshape)


# ---------------------------------------------------------------------------- rope references


def rotation_table(angles: torch.Tensor) -> torch.Tensor:
    """[..., n] angles -> [..., n, 2, 2] rotations [[c, -s], [s, c]] (the host's table layout)."""
    c, s = angles.cos(), angles.sin()
    return torch.stack((c, -s, s, c), dim=-1).reshape(*angles.shape, 2, 2)


def eager_rope(x: torch.Tensor, table: torch.Tensor, split_half: bool) -> torch.Tensor:
    """comfy_kitchen eager formulas: x [..., 2n], table [..., n, 2, 2] (computed in the table's dtype)."""
    if split_half:
        t = x.reshape(*x.shape[:-1], 2, -1).movedim(-2, -1).unsqueeze(-2).to(table.dtype)
        out = table[..., 0] * t[..., 0] + table[..., 1] * t[..., 1]
        return out.movedim(-1, -2).reshape(x.shape).type_as(x)
    t = x.to(table.dtype).reshape(*x.shape[:-1], -1, 1, 2)
    out = table[..., 0] * t[..., 0] + table[..., 1] * t[..., 1]
    return out.reshape(x.shape).type_as(x)


# ---------------------------------------------------------------------------- H3


class H3Attention(nn.Module):
    def __init__(self, hidden, heads, head_dim, eps=1e-5):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        inner = heads * head_dim
        self.qkv_proj = nn.Linear(hidden, 3 * inner, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps)
        self.out_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x, rope_freqs=None, transformer_options={}):  # noqa: B006 - the host's signature
        s, inner = x.shape[0], self.heads * self.head_dim
        q, k, v = self.qkv_proj(x).split(inner, dim=-1)
        q, k, v = (t.reshape(s, self.heads, self.head_dim) for t in (q, k, v))
        if rope_freqs is not None:
            table = rope_freqs[0]  # [S, 1, n, 2, 2]
            rot = 2 * table.shape[-3]
            q, k = (self._rms_rope(t, norm, table, rot) for t, norm in ((q, self.q_norm), (k, self.k_norm)))
        else:
            q, k = self.q_norm(q), self.k_norm(k)
        out = optimized_attention(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                                  v.transpose(0, 1).unsqueeze(0), self.heads, mask=None, skip_reshape=True,
                                  transformer_options=transformer_options)
        return self.out_proj(out.squeeze(0))

    @staticmethod
    def _rms_rope(t, norm, table, rot):
        t = F.rms_norm(t, (t.shape[-1],), norm.weight, norm.eps)
        return torch.cat((eager_rope(t[..., :rot], table, True), t[..., rot:]), dim=-1)


class H3MLP(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.fc1 = nn.Linear(hidden, 2 * ffn, bias=False)
        self.fc2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class H3Block(nn.Module):
    def __init__(self, hidden, heads, head_dim, ffn):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(hidden, eps=1e-5), nn.RMSNorm(hidden, eps=1e-5)
        self.attn = H3Attention(hidden, heads, head_dim)
        self.mlp = H3MLP(hidden, ffn)

    def forward(self, x, rope_freqs, transformer_options):
        x = x + self.attn(self.norm1(x), rope_freqs=rope_freqs, transformer_options=transformer_options)
        return x + self.mlp(self.norm2(x))


class H3Net(nn.Module):
    def __init__(self, hidden=16, heads=6, head_dim=8, ffn=24, layers=2):
        super().__init__()
        self.blocks = nn.ModuleList(H3Block(hidden, heads, head_dim, ffn) for _ in range(layers))

    def forward(self, x, rope_freqs=None, transformer_options=None):
        for block in self.blocks:
            x = block(x, rope_freqs, transformer_options or {})
        return x


def h3_rope(tokens: int, rot: int, dtype=torch.float32) -> torch.Tensor:
    """[1, S, 1, rot/2, 2, 2] rotation table as the H3 model builds it."""
    positions = torch.arange(tokens, dtype=torch.float32)[:, None]
    inv = 1.0 / (10.0 ** torch.linspace(0, 2, rot // 2))
    return rotation_table(positions * inv).reshape(1, tokens, 1, rot // 2, 2, 2).to(dtype)


# ---------------------------------------------------------------------------- LTX


class LTXCrossAttention(nn.Module):
    def __init__(self, query_dim, context_dim=None, heads=4, dim_head=8, gated=False):
        super().__init__()
        inner, context_dim = heads * dim_head, context_dim or query_dim
        self.heads, self.dim_head, self.attn_precision = heads, dim_head, None
        self.q_norm, self.k_norm = nn.RMSNorm(inner, eps=1e-5), nn.RMSNorm(inner, eps=1e-5)
        self.to_q = nn.Linear(query_dim, inner)
        self.to_k = nn.Linear(context_dim, inner)
        self.to_v = nn.Linear(context_dim, inner)
        self.to_gate_logits = nn.Linear(query_dim, heads) if gated else None
        self.to_out = nn.Sequential(nn.Linear(inner, query_dim), nn.Dropout(0.0))

    def forward(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options={}):  # noqa: B006
        self_attn = context is None
        q = self.to_q(x)
        context = x if context is None else context
        k, v = self.to_k(context), self.to_v(context)
        if self_attn and transformer_options.get("stg_skip_self_attn", False):
            out = v
        else:
            q, k = self.q_norm(q), self.k_norm(k)
            if pe is not None:
                q = self._rope(q, pe)
                k = self._rope(k, pe if k_pe is None else k_pe)
            out = optimized_attention(q, k, v, self.heads, mask=mask, transformer_options=transformer_options)
        if self.to_gate_logits is not None:
            b, t, _ = out.shape
            gates = 2.0 * torch.sigmoid(self.to_gate_logits(x))
            out = (out.view(b, t, self.heads, self.dim_head) * gates.unsqueeze(-1)).view(b, t, -1)
        return self.to_out(out)

    @staticmethod
    def _rope(t, pe):
        table, split = pe
        shaped = t.reshape(t.shape[0], t.shape[1], table.shape[2], -1)
        return eager_rope(shaped, table, split).reshape(t.shape)


class GELUApprox(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class LTXFeedForward(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.net = nn.Sequential(GELUApprox(dim, dim * mult), nn.Dropout(0.0), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class LTXBlock(nn.Module):
    def __init__(self, v_dim=16, a_dim=12, heads=4, dim_head=8, a_heads=3, a_dim_head=4, ctx_dim=10, gated=False):
        super().__init__()
        self.attn1 = LTXCrossAttention(v_dim, None, heads, dim_head, gated)
        self.attn2 = LTXCrossAttention(v_dim, ctx_dim, heads, dim_head, gated)
        self.audio_to_video_attn = LTXCrossAttention(v_dim, a_dim, a_heads, a_dim_head, gated)
        self.ff = LTXFeedForward(v_dim)

    def forward(self, vx, ax, context, pe, mask, transformer_options):
        to = transformer_options
        vx = vx + self.attn1(vx, pe=pe, transformer_options=to)
        vx = vx + self.attn2(vx, context=context, mask=mask, transformer_options=to)
        vx = vx + self.audio_to_video_attn(vx, context=ax, transformer_options=to)
        return vx + self.ff(vx)


class LTXNet(nn.Module):
    def __init__(self, layers=2, **kw):
        super().__init__()
        self.transformer_blocks = nn.ModuleList(LTXBlock(**kw) for _ in range(layers))

    def forward(self, vx, ax, context, pe=None, mask=None, transformer_options=None):
        for block in self.transformer_blocks:
            vx = block(vx, ax, context, pe, mask, transformer_options or {})
        return vx


def ltx_pe(batch: int, tokens: int, heads: int, dim_head: int, split: bool, dtype=torch.float32):
    """(rotation [B, T, H, D/2, 2, 2], split flag) as LTX's freqs_cis_matrix gives it."""
    positions = torch.arange(tokens, dtype=torch.float32)[None, :, None, None] + torch.arange(batch)[:, None, None, None]
    freqs = 1.0 / (3.0 ** torch.linspace(0, 3, heads * dim_head // 2)).reshape(1, 1, heads, dim_head // 2)
    return rotation_table(positions * freqs).to(dtype), split


# ---------------------------------------------------------------------------- patcher


class BaseModel(nn.Module):
    def __init__(self, net: nn.Module):
        super().__init__()
        self.diffusion_model = net


def _resolve(root, dotted: str):
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


class FakeModelPatcher:
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
