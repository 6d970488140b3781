"""Low-VRAM attention and feed-forward: head groups and token chunks, exact, pure torch.

Nothing here imports ComfyUI; the host's attention function is injected (`attention_fn`), so
SageAttention, `optimized_attention_override` patches and `preferred_attention` still apply.

Why it is exact
- Attention heads are independent: projecting, normalising, rotating and attending one head group at a
  time computes the same numbers per head. q/k/v are projected per group by slicing the projection's
  weight *rows* (a row slice of a Linear is the Linear of those output features), so the fused qkv
  buffer ([S, 3*heads*head_dim]) never exists whole. A layer whose weight cannot be sliced (quantized
  or custom tensor types, on-the-fly LoRA functions, legacy fp8 scales) is run whole and the caller
  reports that fallback; the rest of the head-group path still applies.
- Feed-forward networks are per token: running them on token chunks and writing each chunk into one
  output buffer is the same computation (also for per-token activation quantization).

RMSNorm + RoPE (H3). The host fuses per-head RMSNorm and a partial split-half RoPE in one kernel
(`comfy.quant_ops.ck.rms_rope_split_half_`). This module reproduces that math in plain torch
(`rms_norm_rope_`), like comfy_kitchen's eager backend but in fp32 with one rounding at the end (as a
fused kernel does), processed in token blocks so its fp32 temporaries stay small. fp32 results match
the eager formula to float rounding; bf16 results match the fused kernel within bf16 rounding.

The auto rule (chunk count 0). `transient_budget(free)` = free device memory / 16, clamped to
[128 MiB, 1 GiB] (1 GiB on CPU, where "free device memory" is not meaningful). Then
- head groups: a group of g heads holds about 4*S*g*head_dim*elem bytes (its q, k, v and attention
  output); g_max = max(1, budget // (4*S*head_dim*elem)) and head_chunks = ceil(heads / g_max).
- FFN token chunks: a chunk of c tokens holds about 2*c*W*elem bytes, W = the first projection's
  output width (SwiGLU: fc1 output plus activation temporaries; GELU: projection plus activation);
  c_max = max(1, budget // (2*W*elem)) and chunks = ceil(S / c_max); S < seq_threshold means 1.
Counts are clamped to [1, heads] and [1, S]; groups and chunks are near-equal contiguous ranges.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

AttentionFn = Callable[..., torch.Tensor]

MIB = 1 << 20
BUDGET_MIN = 128 * MIB
BUDGET_MAX = 1024 * MIB
BUDGET_FREE_DIVISOR = 16
ROPE_BLOCK_ELEMENTS = 1 << 22  # fp32 temporaries of the norm+rope step stay near 16 MiB each


# ----------------------------------------------------------------------------------------------
# chunk arithmetic and the auto rule


def split_ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """`total` items in `parts` contiguous near-equal ranges (sizes differ by at most 1)."""
    parts = max(1, min(int(parts), int(total))) if total > 0 else 1
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for index in range(parts):
        stop = start + base + (1 if index < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


def transient_budget(free_bytes: int | None) -> int:
    """Bytes one transient may take: free/16 clamped to [128 MiB, 1 GiB]; 1 GiB when free is unknown."""
    if free_bytes is None:
        return BUDGET_MAX
    return int(min(BUDGET_MAX, max(BUDGET_MIN, free_bytes // BUDGET_FREE_DIVISOR)))


def auto_head_chunks(tokens: int, heads: int, head_dim: int, elem_size: int, free_bytes: int | None) -> int:
    """Head groups so one group's q, k, v and output (4*S*g*head_dim*elem bytes) fit the budget."""
    per_head = 4 * max(1, tokens) * head_dim * elem_size
    heads_per_group = max(1, transient_budget(free_bytes) // per_head)
    return max(1, min(heads, math.ceil(heads / heads_per_group)))


def auto_ffn_chunks(tokens: int, ffn_width: int, elem_size: int, free_bytes: int | None,
                    seq_threshold: int = 0) -> int:
    """Token chunks so one chunk's projection + activation (2*c*W*elem bytes) fit the budget."""
    if tokens < max(1, seq_threshold):
        return 1
    per_token = 2 * ffn_width * elem_size
    tokens_per_chunk = max(1, transient_budget(free_bytes) // per_token)
    return max(1, min(tokens, math.ceil(tokens / tokens_per_chunk)))


def free_device_bytes(device: torch.device) -> int | None:
    """Free memory a new allocation can use on `device`: driver-free plus the allocator's cached blocks."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free + max(0, cached))


# ----------------------------------------------------------------------------------------------
# row-sliced projections


def unsliceable_reason(layer: Any) -> str | None:
    """None when `layer`'s output rows can be computed from a slice of its weight, else why not."""
    weight = getattr(layer, "weight", None)
    if not isinstance(layer, torch.nn.Linear) or weight is None:
        return f"{type(layer).__name__} is not a plain Linear"
    if type(weight) not in (torch.Tensor, torch.nn.Parameter) or weight.dim() != 2:
        return f"weight is a {type(weight).__name__} (quantized or custom tensor)"
    if getattr(layer, "weight_function", None) or getattr(layer, "bias_function", None):
        return "weight is patched on the fly (LoRA/weight functions)"
    for attr in ("scale_weight", "scale_input", "quant_format"):
        if getattr(layer, attr, None) is not None:
            return f"layer carries '{attr}' (scaled/quantized weights)"
    if type(layer).forward is not torch.nn.Linear.forward and not hasattr(layer, "comfy_cast_weights"):
        return f"{type(layer).__name__} overrides forward"
    return None


def linear_rows(layer: torch.nn.Linear, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Output features [start, stop) of `layer(x)` from a row slice of its weight (cast like manual-cast ops)."""
    weight = layer.weight[start:stop].to(device=x.device, dtype=x.dtype)
    bias = layer.bias
    if bias is not None:
        bias = bias[start:stop].to(device=x.device, dtype=x.dtype)
    return F.linear(x, weight, bias)


# ----------------------------------------------------------------------------------------------
# norm + rope


def _norm_eps(norm: Any, dtype: torch.dtype) -> float:
    eps = getattr(norm, "eps", None)
    if isinstance(eps, (tuple, list)):
        eps = eps[0]
    return float(torch.finfo(dtype).eps if eps is None else eps)


def _rotate(xf: torch.Tensor, table: torch.Tensor, split_half: bool) -> torch.Tensor:
    """Apply 2x2 rotations `table` [..., n, 2, 2] to pairs of `xf` [..., 2n] (split-half or interleaved)."""
    table = table.to(torch.float32)
    n = table.shape[-3]
    if split_half:
        a, b = xf[..., :n], xf[..., n:2 * n]
    else:
        pairs = xf.reshape(*xf.shape[:-1], n, 2)
        a, b = pairs[..., 0], pairs[..., 1]
    first = table[..., 0, 0] * a + table[..., 0, 1] * b
    second = table[..., 1, 0] * a + table[..., 1, 1] * b
    if split_half:
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


def rms_norm_rope_(x: torch.Tensor, weight: torch.Tensor | None, eps: float | None,
                   rope: torch.Tensor | None, split_half: bool = True, out: torch.Tensor | None = None) -> torch.Tensor:
    """Per-head RMSNorm (when eps is not None) then RoPE on the first 2*n dims, written to `out`.

    x: [T, g, D] (any strides); rope: [T|1, g|1, n, 2, 2]; out defaults to x (in place: each token
    block is read whole before it is written). fp32 math, one rounding to out's dtype.
    """
    out = x if out is None else out
    tokens, heads, dim = x.shape
    block = max(1, ROPE_BLOCK_ELEMENTS // max(1, heads * dim))
    w = None if weight is None else weight.to(device=x.device, dtype=torch.float32)
    for start in range(0, tokens, block):
        stop = min(tokens, start + block)
        xf = x[start:stop].to(torch.float32)
        if eps is not None:
            xf = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
            if w is not None:
                xf = xf * w
        if rope is not None:
            table = rope[start:stop] if rope.shape[0] != 1 else rope
            rot = 2 * table.shape[-3]
            rotated = _rotate(xf[..., :rot], table, split_half)
            xf = torch.cat((rotated, xf[..., rot:]), dim=-1) if rot < dim else rotated
        out[start:stop] = xf.to(out.dtype)
    return out


def _rope_heads(rope: torch.Tensor | None, heads: int, h0: int, h1: int) -> torch.Tensor | None:
    """Rows of a [T|1, H|1, n, 2, 2] rotation table for heads [h0, h1)."""
    if rope is None or rope.shape[1] == 1:
        return rope
    if rope.shape[1] != heads:
        raise ValueError(f"rotation table has {rope.shape[1]} heads, attention has {heads}")
    return rope[:, h0:h1]


# ----------------------------------------------------------------------------------------------
# attention


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, mask: torch.Tensor | None = None,
                   skip_reshape: bool = False, **_ignored: Any) -> torch.Tensor:
    """The host's attention call form on torch SDPA: [B,H,S,D] in with skip_reshape, else [B,S,H*D]; out [B,S,H*D]."""
    if not skip_reshape:
        batch, _, width = q.shape
        dim = width // heads
        q, k, v = (t.reshape(batch, -1, heads, dim).transpose(1, 2) for t in (q, k, v))
    if mask is not None and mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask is not None and mask.ndim == 3:
        mask = mask.unsqueeze(1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)


def h3_head_group_attention(x: torch.Tensor, qkv_proj: torch.nn.Module, q_norm: Any, k_norm: Any,
                            out_proj: torch.nn.Module, heads: int, head_dim: int, rope_freqs: torch.Tensor | None,
                            groups: int, attention_fn: AttentionFn, per_group_projection: bool = True,
                            **attention_kwargs: Any) -> torch.Tensor:
    """H3 `Attention.forward` ([S, hidden] -> [S, hidden]) one head group at a time.

    per_group_projection=False runs `qkv_proj(x)` whole (for layers that cannot be row-sliced) and
    frees that buffer before the output projection.
    """
    seq = x.shape[0]
    inner = heads * head_dim
    qkv = None if per_group_projection else qkv_proj(x)
    out = None
    rope = None if rope_freqs is None else rope_freqs.reshape(-1, *rope_freqs.shape[-4:])  # [S|1, H|1, n, 2, 2]
    for h0, h1 in split_ranges(heads, groups):
        g = h1 - h0
        q, k, v = (_h3_rows(qkv_proj, qkv, x, part * inner + h0 * head_dim, part * inner + h1 * head_dim)
                   for part in range(3))
        q, k, v = (t.view(seq, g, head_dim) for t in (q, k, v))
        if rope is not None:
            table = _rope_heads(rope, heads, h0, h1)
            # in place: q/k are this call's own buffers (group projection or the fallback's fused qkv)
            q = rms_norm_rope_(q, getattr(q_norm, "weight", None), _norm_eps(q_norm, q.dtype), table)
            k = rms_norm_rope_(k, getattr(k_norm, "weight", None), _norm_eps(k_norm, k.dtype), table)
        else:
            q, k = q_norm(q), k_norm(k)
        o = attention_fn(q.transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
                         v.transpose(0, 1).unsqueeze(0), g, mask=None, skip_reshape=True, **attention_kwargs)
        if out is None:
            out = torch.empty(seq, inner, dtype=o.dtype, device=o.device)
        out[:, h0 * head_dim:h1 * head_dim] = o.reshape(seq, g * head_dim)
        del q, k, v, o
    del qkv  # the fused buffer (fallback path) goes before out_proj allocates
    return project_rows_in_place(out, out_proj)


def project_rows_in_place(buffer: torch.Tensor, projection: Callable[[torch.Tensor], torch.Tensor],
                          rows_per_chunk: int = 8192) -> torch.Tensor:
    """`projection(buffer)` for a per-token projection, written over the rows of `buffer` it has consumed.

    The output projection of the attention would otherwise allocate a second [tokens, hidden] tensor
    while the [tokens, heads*head_dim] buffer is still alive. Token chunk i's result is stored in
    buffer storage that only rows <= i occupied (the result is no wider than the buffer), so nothing
    unread is overwritten and the result is exact. Falls back to `projection(buffer)` when that cannot
    hold (autograd, non-contiguous buffer, a wider or other-dtype result).
    """
    tokens = buffer.shape[:-1].numel()
    if torch.is_grad_enabled() or not buffer.is_contiguous() or tokens <= rows_per_chunk:
        return projection(buffer)
    flat_in = buffer.view(tokens, buffer.shape[-1])
    storage = buffer.view(-1)
    width = None
    for start, stop in split_ranges(tokens, math.ceil(tokens / rows_per_chunk)):
        part = projection(flat_in[start:stop])
        if width is None:
            width = part.shape[-1]
            if width > buffer.shape[-1] or part.dtype != buffer.dtype:
                del part
                return projection(buffer)
        storage[start * width:stop * width].view(stop - start, width).copy_(part)
        del part
    return storage[:tokens * width].view(*buffer.shape[:-1], width)


def _h3_rows(layer: torch.nn.Module, fused: torch.Tensor | None, x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    if fused is not None:
        return fused[:, start:stop]
    return linear_rows(layer, x, start, stop)


def ltx_head_group_attention(attn: Any, x: torch.Tensor, context: torch.Tensor | None, mask: Any,
                             pe: Any, k_pe: Any, groups: int, attention_fn: AttentionFn,
                             slice_v: bool = True, **attention_kwargs: Any) -> torch.Tensor:
    """LTX `CrossAttention.forward` ([B, T, dim] -> [B, T, dim]) with attention one head group at a time.

    q/k norms span all heads in LTX, so q and k are projected and normed whole (through the host's own
    modules); v is projected per group when `slice_v`. RoPE is applied per group from the per-head table.
    """
    heads, dim_head = attn.heads, attn.dim_head
    ctx = x if context is None else context
    q = attn.q_norm(attn.to_q(x))
    k = attn.k_norm(attn.to_k(ctx))
    v_full = None if slice_v else attn.to_v(ctx)
    q_table, k_table, split_half = _ltx_tables(pe, k_pe)
    gates = None
    if getattr(attn, "to_gate_logits", None) is not None:
        gates = 2.0 * torch.sigmoid(attn.to_gate_logits(x))
    batch, tokens, inner = q.shape
    out = torch.empty(batch, tokens, inner, dtype=q.dtype, device=q.device)
    for h0, h1 in split_ranges(heads, groups):
        cols = slice(h0 * dim_head, h1 * dim_head)
        qg = _ltx_rotated(q[..., cols], q_table, heads, h0, h1, dim_head, split_half)
        kg = _ltx_rotated(k[..., cols], k_table, heads, h0, h1, dim_head, split_half)
        vg = linear_rows(attn.to_v, ctx, cols.start, cols.stop) if v_full is None else v_full[..., cols]
        og = attention_fn(qg, kg, vg, h1 - h0, mask=mask, attn_precision=getattr(attn, "attn_precision", None),
                          **attention_kwargs)
        if gates is not None:
            og = (og.view(batch, tokens, h1 - h0, dim_head) * gates[..., h0:h1].unsqueeze(-1)).view(batch, tokens, -1)
        out[..., cols] = og
        del qg, kg, vg, og
    del q, k, v_full
    return project_rows_in_place(out, attn.to_out)


def _ltx_tables(pe: Any, k_pe: Any):
    """(q table, k table, split_half) as [B, T, H, n, 2, 2] tensors, following the host's pe/k_pe rules."""
    if pe is None:
        return None, None, True
    table, split_half = pe
    return table, (table if k_pe is None else k_pe[0]), bool(split_half)


def _ltx_rotated(t: torch.Tensor, table: torch.Tensor | None, heads: int, h0: int, h1: int, dim_head: int,
                 split_half: bool) -> torch.Tensor:
    """Columns of one head group as a fresh contiguous [B, T, g*D] tensor, rotated when a table is given."""
    batch, tokens, _ = t.shape
    g = h1 - h0
    if table is None:
        return t.contiguous()
    out = torch.empty(batch, tokens, g * dim_head, dtype=t.dtype, device=t.device)
    for b in range(batch):
        tb = table[b if table.shape[0] > 1 else 0]
        tb = tb[:, h0:h1] if tb.shape[1] == heads else tb
        rms_norm_rope_(t[b].view(tokens, g, dim_head), None, None, tb, split_half,
                       out=out[b].view(tokens, g, dim_head))
    return out


# ----------------------------------------------------------------------------------------------
# feed-forward


def chunked_tokens(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, chunks: int, dim: int = 0) -> torch.Tensor:
    """`fn(x)` for a per-token `fn`, computed on `chunks` token ranges along `dim` into one buffer."""
    ranges = split_ranges(x.shape[dim], chunks)
    if len(ranges) == 1:
        return fn(x)
    out = None
    for start, stop in ranges:
        part = fn(x.narrow(dim, start, stop - start))
        if out is None:
            shape = list(part.shape)
            shape[dim] = x.shape[dim]
            out = torch.empty(shape, dtype=part.dtype, device=part.device)
        out.narrow(dim, start, stop - start).copy_(part)
        del part
    return out


def swiglu_ffn(x: torch.Tensor, fc1: torch.nn.Module, fc2: torch.nn.Module) -> torch.Tensor:
    """H3's MLP: fc2(silu(gate) * up) with gate, up = fc1(x).chunk(2) (the host fuses the activation)."""
    gate, up = fc1(x).chunk(2, dim=-1)
    return fc2(F.silu(gate).mul_(up))


def chunked_swiglu_ffn(x: torch.Tensor, fc1: torch.nn.Module, fc2: torch.nn.Module, chunks: int) -> torch.Tensor:
    """`swiglu_ffn` on token chunks of packed x [S, hidden]."""
    return chunked_tokens(lambda part: swiglu_ffn(part, fc1, fc2), x, chunks, dim=0)


def ffn_width(module: torch.nn.Module) -> int | None:
    """Output width of a feed-forward's first projection (H3 `fc1`, LTX `net[0].proj`), None if unknown."""
    first = getattr(module, "fc1", None)
    if first is None:
        net: Sequence[Any] | None = getattr(module, "net", None)
        if net is not None and len(net) > 0:
            first = getattr(net[0], "proj", net[0])
    out_features = getattr(first, "out_features", None)
    return int(out_features) if out_features else None
