"""Attention on one chosen torch SDPA backend (cuDNN, flash, memory-efficient), in ComfyUI's call form.

Why this exists. ComfyUI >= 0.33 calls torch SDPA inside `sdpa_kernel([FLASH, CUDNN, EFFICIENT, MATH],
set_priority=True)` (comfy/ops.py), so on an H200 every large attention runs torch's flash kernel (FlashAttention-2).
Plain torch SDPA on the same card prefers cuDNN's fused attention, which is much faster on Hopper
(docs/benchmarks.md, "Attention backends"). Every backend here computes exact softmax attention (no quantization,
no sparsity); two backends differ only in bf16/fp16 rounding (the order of the sums), which is measured on a whole
clip and stated in docs/benchmarks.md.

`attention()` takes exactly the arguments ComfyUI's `attention_pytorch` takes and returns the same layout:
q/k/v `[B, H, S, D]` with `skip_reshape`, else `[B, S, H*D]`; the output `[B, H, S, D]` with `skip_output_reshape`,
else `[B, S, H*D]`. Masks are shaped as the host shapes them. When the chosen backend cannot run the call, the
torch error becomes `BackendUnavailable` and the caller runs the host's own attention instead.
Nothing here imports ComfyUI.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.nn.functional as F

BACKEND_NAMES = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "math": "MATH"}
# ComfyUI's own cut (comfy/ops.py): below it torch's default SDPA runs, "for small inputs cudnn attention seems
# slower". The same cut keeps text-length and audio attention on the host's call.
SMALL_INPUT_ELEMENTS = 1024 * 128


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot run this call (device, dtype, head size, mask, build)."""


def sdp_backend(name: str) -> Any:
    """torch's SDPBackend member for a name in BACKEND_NAMES."""
    from torch.nn.attention import SDPBackend

    return getattr(SDPBackend, BACKEND_NAMES[name])


def to_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
             skip_reshape: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """[B, H, S, D] views and (batch, head_dim), as ComfyUI's attention_pytorch makes them."""
    if skip_reshape:
        return q, k, v, q.shape[0], q.shape[-1]
    batch, dim_head = q.shape[0], q.shape[-1] // heads
    q, k, v = (t.reshape(batch, -1, heads, dim_head).transpose(1, 2) for t in (q, k, v))
    return q, k, v, batch, dim_head


def host_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A 2-D mask gains a batch axis and a 3-D one a head axis, as in the host."""
    if mask is not None and mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask is not None and mask.ndim == 3:
        mask = mask.unsqueeze(1)
    return mask


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, backend: str,
              mask: torch.Tensor | None = None, skip_reshape: bool = False, skip_output_reshape: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """Softmax attention on `backend` only; `BackendUnavailable` when torch cannot run it there."""
    from torch.nn.attention import sdpa_kernel

    qh, kh, vh, batch, dim_head = to_heads(q, k, v, heads, skip_reshape)
    extra = {} if scale is None else {"scale": scale}
    try:
        with warnings.catch_warnings():  # torch explains every backend it skips; the caller reports ours once
            warnings.simplefilter("ignore", UserWarning)
            with sdpa_kernel([sdp_backend(backend)]):
                out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=host_mask(mask), dropout_p=0.0,
                                                     is_causal=False, **extra)
    except RuntimeError as exc:
        raise BackendUnavailable(f"torch SDPA {backend} cannot run {tuple(qh.shape)} {qh.dtype} on "
                                 f"{qh.device.type}: {str(exc).splitlines()[0][:200]}") from exc
    if skip_output_reshape:
        return out
    return out.transpose(1, 2).reshape(batch, -1, heads * dim_head)


def chosen_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None) -> str:
    """The backend torch's default dispatch picks for [B, H, S, D] inputs in the current sdpa_kernel context."""
    index = torch._fused_sdp_choice(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)
    from torch.nn.attention import SDPBackend

    for name, member in SDPBackend.__members__.items():
        if int(member.value) == int(index):
            return name
    return f"unknown ({index})"
