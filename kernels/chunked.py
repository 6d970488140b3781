"""Low-VRAM attention and feed-forward: head groups and token chunks on the host's own layers.

Nothing here imports ComfyUI. The host's pieces are passed in: its attention function (so SageAttention,
`optimized_attention_override` patches and `preferred_attention` still apply), its fused q/k norm+RoPE kernel
(comfy-kitchen's `rms_rope_split_half_`), its RoPE function for LTX, and a row slicer for quantized weights.

Effective weights, never `.weight`. A projection is run through the layer's own forward (comfy.ops manual cast,
offload, LoRA `weight_function`s, lowvram patches, dynamic VRAM, quantized input), and only the final
`F.linear(input, weight, bias)` of that forward is replaced, inside the host's cast context, by
`LinearIntercept`: the replacement sees exactly the input, weight and bias the host would multiply, decided
by the host on that call. Row slices of that weight give the per-head-group q/k/v (a row slice of a Linear is
the Linear of those output features); the fused [tokens, 3*heads*head_dim] buffer never exists. A layer whose
forward changes the F.linear result afterwards (a forward wrapper, a hook, a bypass adapter) is detected: its
output is not the replacement's, so the call is redone whole through the layer and reported.

Why head groups are exact: per-head RMSNorm, RoPE and attention are independent per head; the host's kernel
is called on each group's [1, S, g, D] buffers exactly as it is called on the whole [1, S, H, D] view.
Feed-forwards are per token, so token chunks are exact too, except for layers that scale a quantized
input by the amax of the whole input (NVFP4/FP8 without a stored input scale): those are not chunked.

The auto rule (chunk count 0). budget = free device memory / 16, clamped to [128 MiB, 512 MiB] (512 MiB on CPU).
- head groups: one head's q, k, v and attention output take h = 4*S*head_dim*elem bytes. When all heads together
  (heads*h) fit in 2*budget the layer is left whole (1 group: the host's own forward, untouched); otherwise
  groups = ceil(heads / max(1, budget // h)).
- FFN token chunks: one token takes t = (W + A)*elem bytes, W = the first projection's output width, A = the
  activation's output width (W/2 for H3's SwiGLU, W for LTX's GELU). S*t <= 2*budget or S below seq_threshold:
  1 chunk (the host's forward); otherwise chunks = ceil(S / max(1, budget // t)).
Counts are decided once per shape and dtype and then kept (nodes/lowvram.py), so the allocation pattern is the
same every step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

AttentionFn = Callable[..., torch.Tensor]
RowSlicer = Callable[[Any, int, int], "tuple[Any | None, str]"]

MIB = 1 << 20
BUDGET_MIN = 128 * MIB
BUDGET_MAX = 512 * MIB
BUDGET_FREE_DIVISOR = 16
WHOLE_FACTOR = 2  # a layer whose whole transient fits in 2 budgets is left to the host's forward
ROPE_BLOCK_ELEMENTS = 1 << 22  # fp32 temporaries of the plain-torch norm+rope stay near 16 MiB each
OUT_PROJ_ROWS = 8192


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
    """Bytes one transient may take: free/16 clamped to [128 MiB, 512 MiB]; 512 MiB when free is unknown."""
    if free_bytes is None:
        return BUDGET_MAX
    return int(min(BUDGET_MAX, max(BUDGET_MIN, free_bytes // BUDGET_FREE_DIVISOR)))


def auto_head_chunks(tokens: int, heads: int, head_dim: int, elem_size: int, free_bytes: int | None) -> int:
    """Head groups so one group's q, k, v and output (4*S*g*head_dim*elem bytes) fit the budget; 1 when all fit in 2."""
    per_head = 4 * max(1, tokens) * head_dim * elem_size
    budget = transient_budget(free_bytes)
    if per_head * heads <= WHOLE_FACTOR * budget:
        return 1
    heads_per_group = max(1, budget // per_head)
    return max(1, min(heads, math.ceil(heads / heads_per_group)))


def auto_ffn_chunks(tokens: int, per_token_width: int, elem_size: int, free_bytes: int | None,
                    seq_threshold: int = 0) -> int:
    """Token chunks so one chunk's projection + activation outputs (c*width*elem bytes) fit the budget; 1 when the
    whole sequence fits in 2 budgets or is shorter than seq_threshold."""
    per_token = per_token_width * elem_size
    budget = transient_budget(free_bytes)
    if tokens < max(1, seq_threshold) or tokens * per_token <= WHOLE_FACTOR * budget:
        return 1
    tokens_per_chunk = max(1, budget // per_token)
    return max(1, min(tokens, math.ceil(tokens / tokens_per_chunk)))


def free_device_bytes(device: torch.device) -> int | None:
    """Free memory a new allocation can use on `device`: driver-free plus the allocator's cached blocks."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free + max(0, cached))


def ffn_widths(module: torch.nn.Module) -> int | None:
    """Per-token transient width of a feed-forward: first projection out + activation out; None if unknown."""
    first = getattr(module, "fc1", None)
    gated = first is not None  # H3's fc1 holds gate and up: the SwiGLU output is half as wide
    if first is None:
        net: Sequence[Any] | None = getattr(module, "net", None)
        if net is not None and len(net) > 0:
            first = getattr(net[0], "proj", net[0])
    width = getattr(first, "out_features", None)
    if not width:
        return None
    return int(width) + (int(width) // 2 if gated else int(width))


# ----------------------------------------------------------------------------------------------
# the host's final matmul, intercepted


def forward_is_plain(layer: torch.nn.Module) -> bool:
    """True when `layer(x)` is its class's forward: no instance override, no hooks that could change the output."""
    return ("forward" not in vars(layer) and not layer._forward_hooks and not layer._forward_pre_hooks
            and not torch.nn.modules.module._global_forward_hooks
            and not torch.nn.modules.module._global_forward_pre_hooks)


class _Intercept(TorchFunctionMode):
    """Hands the first F.linear with an [out_features, in_features] weight to `handler`; every other op runs as is."""

    def __init__(self, out_features: int, in_features: int | None, handler: Callable[..., torch.Tensor]):
        super().__init__()
        self.out_features, self.in_features, self.handler, self.fired = out_features, in_features, handler, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.fired and func in (F.linear, torch._C._nn.linear):
            weight = args[1] if len(args) > 1 else kwargs.get("weight")
            if (weight is not None and weight.dim() == 2 and weight.shape[0] == self.out_features
                    and self.in_features in (None, weight.shape[1])):
                self.fired = True
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                return self.handler(args[0], weight, bias)
        return func(*args, **kwargs)


def run_linear_intercepted(layer: torch.nn.Module, x: torch.Tensor, out_features: int,
                           handler: Callable[[Any, Any, Any], torch.Tensor]) -> tuple[torch.Tensor, str]:
    """`layer(x)` with its F.linear replaced by `handler(input, weight, bias)`.

    Returns (what the layer returned, status): "clean" when the handler's result came back as is (a reshape
    of it included), "changed" when the layer altered it afterwards, "not_fired" when no matching F.linear ran.
    """
    results: list[torch.Tensor] = []

    def tracked(inp, weight, bias):
        results.append(handler(inp, weight, bias))
        return results[-1]

    with _Intercept(out_features, getattr(layer, "in_features", None), tracked):
        result = layer(x)
    if not results:
        return result, "not_fired"
    return result, "clean" if _is_ours(result, results[0]) else "changed"


def _is_ours(result: Any, ours: torch.Tensor) -> bool:
    """`result` is the handler's tensor or a view of it (a placeholder keeps its zero strides through reshapes)."""
    if result is ours:
        return True
    if type(result) is not torch.Tensor or result.numel() != ours.numel() or result.numel() <= 1:
        return False
    return result.data_ptr() == ours.data_ptr() and all(step == 0 for step in result.stride())


def placeholder(shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
    """A zero tensor of `shape` that allocates one element (the handler's stand-in return value)."""
    return torch.zeros((), dtype=like.dtype, device=like.device).expand(*shape)


def weight_rows(weight: Any, start: int, stop: int, row_slicer: RowSlicer) -> tuple[Any | None, str]:
    """Rows [start, stop) of an effective weight: a view for plain tensors, `row_slicer` for quantized ones."""
    if type(weight) in (torch.Tensor, torch.nn.Parameter):
        return weight[start:stop], ""
    return row_slicer(weight, start, stop)


def linear_rows_in_place(inp: torch.Tensor, weight: Any, bias: Any, rows_per_chunk: int = OUT_PROJ_ROWS):
    """F.linear(inp, weight, bias) for 2-D `inp`, written over the rows of `inp` it has consumed.

    A second [tokens, out] tensor would otherwise be allocated while the [tokens, in] input is alive. Token
    chunk i's result is stored in input storage only rows <= i occupied (out <= in), so nothing unread is
    overwritten. Only for plain inputs no wider than the output, without autograd; else a plain F.linear.
    """
    tokens = inp.shape[0] if inp.dim() == 2 else 0
    out_features = weight.shape[0]
    if (torch.is_grad_enabled() or type(inp) is not torch.Tensor or inp.dim() != 2 or not inp.is_contiguous()
            or out_features > inp.shape[1] or tokens <= rows_per_chunk):
        return F.linear(inp, weight, bias)
    storage = inp.view(-1)
    for start, stop in split_ranges(tokens, math.ceil(tokens / rows_per_chunk)):
        part = F.linear(inp[start:stop], weight, bias)
        if part.dtype != inp.dtype:
            raise RuntimeError("in-place projection needs an output of the input's dtype")  # caller checks first
        storage[start * out_features:stop * out_features].view(stop - start, out_features).copy_(part)
        del part
    return storage[:tokens * out_features].view(tokens, out_features)


def project_in_place(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` for an output projection, reusing x's storage when the layer is the host's plain forward."""
    if not forward_is_plain(layer) or torch.is_grad_enabled() or x.dim() != 2:
        return layer(x)
    out_features = int(getattr(layer, "out_features", 0) or 0)

    def handler(inp, weight, bias):
        if type(inp) is not torch.Tensor or type(weight) not in (torch.Tensor, torch.nn.Parameter) \
                or weight.dtype != inp.dtype or inp.data_ptr() != x.data_ptr():
            return F.linear(inp, weight, bias)  # quantized or cast input: the host's own matmul, whole
        return linear_rows_in_place(inp, weight, bias)

    result, _clean = run_linear_intercepted(layer, x, out_features, handler)
    return result


# ----------------------------------------------------------------------------------------------
# norm + rope


def plain_rms_norm_rope_(x: torch.Tensor, weight: torch.Tensor | None, eps: float, rope: torch.Tensor,
                         rot_dim: int) -> torch.Tensor:
    """Per-head RMSNorm, then split-half RoPE on the first rot_dim dims, in place: x [1, S, g, D].

    Used only where the host has no fused kernel (comfy-kitchen missing); fp32 math, one rounding.
    """
    view = x[0]
    tokens, _heads, dim = view.shape
    block = max(1, ROPE_BLOCK_ELEMENTS // max(1, view[0].numel()))
    w = None if weight is None else weight.to(device=x.device, dtype=torch.float32)
    table = rope.reshape(-1, *rope.shape[-4:]).to(torch.float32)  # [S|1, 1|g, n, 2, 2]
    half = rot_dim // 2
    for start in range(0, tokens, block):
        stop = min(tokens, start + block)
        xf = view[start:stop].to(torch.float32)
        xf = xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)
        if w is not None:
            xf = xf * w
        t = table[start:stop] if table.shape[0] != 1 else table
        a, b = xf[..., :half], xf[..., half:rot_dim]
        first = t[..., 0, 0] * a + t[..., 0, 1] * b
        second = t[..., 1, 0] * a + t[..., 1, 1] * b
        xf = torch.cat((first, second, xf[..., rot_dim:]), dim=-1)
        view[start:stop] = xf.to(view.dtype)
    return x


def h3_qk_norm_rope(kitchen: Any, q_norm: Any, k_norm: Any, rope: torch.Tensor | None, device: torch.device):
    """The host's q/k step for one head group: (q, k) [1, S, g, D] -> normalised (and rotated) in place.

    With `kitchen` (comfy-kitchen) the host's fused `rms_rope_split_half_` is called exactly as the host calls
    it (norm weights moved to the input's device, q_norm's eps for both); without, plain torch.
    """
    qw = q_norm.weight.to(device=device) if getattr(q_norm, "weight", None) is not None else None
    kw = k_norm.weight.to(device=device) if getattr(k_norm, "weight", None) is not None else None
    eps = q_norm.eps
    if rope is None:
        def norm_only(q, k):
            s, g, d = q.shape[1:]
            return q_norm(q.view(s, g, d)).unsqueeze(0), k_norm(k.view(s, g, d)).unsqueeze(0)
        return norm_only
    rot = rope.shape[-3] * 2
    if kitchen is not None:
        def fused(q, k):
            kitchen.rms_rope_split_half_(q, k, rope, qw, kw, epsilon=eps, rot_dim=rot)
            return q, k
        return fused

    def plain(q, k):
        return plain_rms_norm_rope_(q, qw, eps, rope, rot), plain_rms_norm_rope_(k, kw, eps, rope, rot)
    return plain


# ----------------------------------------------------------------------------------------------
# H3 attention


def h3_attention(attn: Any, x: torch.Tensor, rope_freqs: torch.Tensor | None, groups: int,
                 attention_fn: AttentionFn, qk_step: Callable, row_slicer: RowSlicer,
                 wrap: Callable[[torch.Tensor], Any], attention_kwargs: dict) -> tuple[torch.Tensor, str, str]:
    """H3 `Attention.forward` ([S, hidden] -> [S, hidden]) one head group at a time.

    Returns (output, path, reason): path "per_group" (q/k/v projected per group from row slices of the
    host's effective weight) or "whole" (the layer's own projection ran whole; reason says why).
    """
    seq, heads, head_dim = x.shape[0], attn.heads, attn.head_dim
    inner = heads * head_dim
    ranges = split_ranges(heads, groups)
    state: dict[str, Any] = {"out": None, "reason": ""}

    def attend(q, k, v, g):
        q, k = qk_step(q.view(1, seq, g, head_dim), k.view(1, seq, g, head_dim))
        v = v.contiguous()  # the host copies v out of the fused buffer before attention (a no-op per group)
        q, k, v = (t.view(seq, g, head_dim).transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        o = attention_fn(wrap(q), wrap(k), wrap(v), g, mask=None, skip_reshape=True, **attention_kwargs)
        return o.reshape(seq, g * head_dim)

    def grouped(inp, weight, bias):
        slices = []
        for h0, h1 in ranges:
            parts = []
            for part in range(3):
                a, b = part * inner + h0 * head_dim, part * inner + h1 * head_dim
                w, why = weight_rows(weight, a, b, row_slicer)
                if w is None:
                    state["reason"] = why
                    return F.linear(inp, weight, bias)  # the host's own whole matmul
                parts.append((w, None if bias is None else bias[a:b]))
            slices.append(parts)
        out = None
        for (h0, h1), parts in zip(ranges, slices, strict=True):
            q, k, v = (F.linear(inp, w, b) for w, b in parts)
            o = attend(q, k, v, h1 - h0)
            if out is None:
                out = torch.empty(seq, inner, dtype=o.dtype, device=o.device)
            out[:, h0 * head_dim:h1 * head_dim] = o
            del q, k, v, o
        state["out"] = out
        return placeholder((inp.shape[0], weight.shape[0]), out)

    qkv, reason = _projection(attn.qkv_proj, x, 3 * inner, grouped, state)
    if qkv is None:
        return project_in_place(attn.out_proj, state["out"]), "per_group", ""
    out = torch.empty(seq, inner, dtype=qkv.dtype, device=qkv.device)
    for h0, h1 in ranges:
        cols = [slice(p * inner + h0 * head_dim, p * inner + h1 * head_dim) for p in range(3)]
        q, k, v = (qkv[:, c] for c in cols)  # strided views of the fused buffer, normalised in place as the host does
        out[:, h0 * head_dim:h1 * head_dim] = attend(q, k, v, h1 - h0)
    del qkv
    return project_in_place(attn.out_proj, out), "whole", reason


def _projection(layer: torch.nn.Module, x: torch.Tensor, out_features: int, grouped: Callable,
                state: dict) -> tuple[torch.Tensor | None, str]:
    """Run `layer(x)` with `grouped` in place of its matmul: (None, "") when the groups ran, else (whole output, why)."""
    if not forward_is_plain(layer):
        return layer(x), f"{type(layer).__name__}'s forward is wrapped or hooked (an adapter may change its output)"
    if torch.is_grad_enabled():
        return layer(x), "autograd is on"
    result, status = run_linear_intercepted(layer, x, out_features, grouped)
    if state["out"] is None:  # the handler ran the host's whole matmul, or none ran: `result` is the real output
        return result, state["reason"] or f"no F.linear of {out_features} outputs seen in {type(layer).__name__}"
    if status == "clean":
        return None, ""
    state["out"] = None
    return layer(x), f"{type(layer).__name__} changed its matmul's result (a wrapper or adapter); ran it whole"


# ----------------------------------------------------------------------------------------------
# LTX attention

# A row slice of a weight gives the host's own numbers only when the matmul kernel sums each output the same way
# for the slice as for the whole weight. CPU float32 GEMMs do not for narrow slices: F.linear with 1-11 output rows
# (and 13-15 rows at one token) differs from the same rows of the whole product by ~3e-8..4e-6, while every multiple
# of 16 rows (16..2048) was bitwise (torch 2.9.1 and 2.13.0 CPU, AMD EPYC, K 16..4096, M 1..3000; bf16/fp16 bitwise
# at every width; docs/lowvram.md). Real LTX-2 groups are multiples of 64 rows (head_dim 128 video, 64 audio); a
# narrower group is a toy-sized layer, so its v is projected whole on every device rather than risk other numbers.
SLICE_ROW_MULTIPLE = 16


def narrow_slice_reason(heads: int, dim_head: int, groups: int) -> str:
    """Why per-group row slices of a [heads*dim_head, K] weight would not be exact ("" when they are all fine)."""
    ranges = split_ranges(heads, groups)
    narrow = sorted({(h1 - h0) * dim_head for h0, h1 in ranges if (h1 - h0) * dim_head % SLICE_ROW_MULTIPLE})
    if len(ranges) == 1 or not narrow:
        return ""
    return (f"to_v row slices of {'/'.join(map(str, narrow))} rows are not a multiple of {SLICE_ROW_MULTIPLE} (such "
            "narrow matmuls are not bitwise the whole projection); v projected whole, attention still per group")


def ltx_attention(attn: Any, x: torch.Tensor, context: torch.Tensor | None, mask: Any, pe: Any, k_pe: Any,
                  groups: int, attention_fn: AttentionFn, rope_qk: Callable, row_slicer: RowSlicer,
                  wrap: Callable[[torch.Tensor], Any], attention_kwargs: dict) -> tuple[torch.Tensor, str, str]:
    """LTX `CrossAttention.forward` ([B, T, dim] -> [B, T, dim]) with v and attention one head group at a time.

    q/k norms span all heads in LTX, so q and k are projected, normed and rotated whole by the host's own
    modules and RoPE function (`rope_qk(q, k, pe, k_pe)`, whatever format `pe` has); v is projected per group
    from row slices of the host's effective to_v weight, or whole when a group's slice is narrower than the rule
    above allows. Returns (output, path, reason) like `h3_attention`.
    """
    heads, dim_head = attn.heads, attn.dim_head
    ctx = x if context is None else context
    q = attn.q_norm(attn.to_q(x))
    k = attn.k_norm(attn.to_k(ctx))
    if pe is not None:
        q, k = rope_qk(q, k, pe, k_pe)
    gates = None
    if getattr(attn, "to_gate_logits", None) is not None:
        gates = 2.0 * torch.sigmoid(attn.to_gate_logits(x))
    batch, tokens, inner = q.shape
    qk = [q, k]  # held in a list so both can be dropped before the output projection
    del q, k
    ranges = split_ranges(heads, groups)
    state: dict[str, Any] = {"out": None, "reason": ""}

    masked = {} if mask is None else {"mask": mask}  # the host passes mask= only when there is one

    def attend(v_group, h0, h1, out):
        cols = slice(h0 * dim_head, h1 * dim_head)
        og = attention_fn(wrap(qk[0][..., cols]), wrap(qk[1][..., cols]), wrap(v_group), h1 - h0, **masked,
                          **attention_kwargs)
        if gates is not None:
            og = og.view(batch, tokens, h1 - h0, dim_head) * gates[..., h0:h1].unsqueeze(-1)
            og = og.view(batch, tokens, -1)
        out[..., cols] = og

    def grouped(inp, weight, bias):
        slices = []
        for h0, h1 in ranges:
            w, why = weight_rows(weight, h0 * dim_head, h1 * dim_head, row_slicer)
            if w is None:
                state["reason"] = why
                return F.linear(inp, weight, bias)
            slices.append((w, None if bias is None else bias[h0 * dim_head:h1 * dim_head]))
        out = torch.empty(batch, tokens, inner, dtype=qk[0].dtype, device=qk[0].device)
        for (h0, h1), (w, b) in zip(ranges, slices, strict=True):
            vg = F.linear(inp, w, b)
            attend(vg.view(ctx.shape[0], ctx.shape[1], -1), h0, h1, out)
            del vg
        state["out"] = out
        return placeholder((*inp.shape[:-1], weight.shape[0]), out)

    narrow = narrow_slice_reason(heads, dim_head, groups)
    if narrow:
        v, reason = attn.to_v(ctx), narrow
    else:
        v, reason = _projection(attn.to_v, ctx, heads * dim_head, grouped, state)
    if v is None:
        qk.clear()
        return attn.to_out(state["out"]), "per_group", ""
    out = torch.empty(batch, tokens, inner, dtype=qk[0].dtype, device=qk[0].device)
    for h0, h1 in ranges:
        attend(v[..., h0 * dim_head:h1 * dim_head], h0, h1, out)
    del v
    qk.clear()
    return attn.to_out(out), "whole", reason


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
