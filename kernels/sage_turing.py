"""SageAttention 1.0.6's Triton kernels launched with our own configuration (no site-packages edits).

On sm_75 (64 KiB shared memory per block) the package's own launch fails with "out of resource: shared
memory, Required: 67584" and ComfyUI silently falls back to PyTorch attention (F07). Compiling the
kernels for sm_75 (scripts/bench_sage_turing.py) shows where the 67,584 B come from: the epilogue that
stores a 128 x 128 fp32 output tile, i.e. fp32 output at head_dim 96/128 (the fp32 compute LTX gets on
Turing, F04). Triton 3.2 does not software-pipeline on sm_7x, so `num_stages` does not change it there.
The Turing-safe configuration therefore asks the kernel for fp16 output (cast to the caller's dtype
afterwards) and uses num_stages=1 (no multi-buffered K/V on any target).

BLOCK_M and BLOCK_N are not tuning knobs (F08): the quantizer emits one q scale per BLKQ rows and one k
scale per BLKK rows, and the kernel indexes scales with its own BLOCK_M / BLOCK_N. Both sides here are
fed from the same two constants, so they cannot drift apart.

The package is imported lazily: importing this module needs neither sageattention nor triton nor CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

import torch

QUANT_BLOCK_Q = 128  # sageattention 1.0.6 per_block_int8 BLKQ: one q scale per 128 query rows
QUANT_BLOCK_K = 64  # per_block_int8 BLKK: one k scale per 64 key rows
SUPPORTED_HEAD_DIMS = (64, 96, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# kernel module / quant function for each head_dim; h96 pads the head to 128 lanes internally.
KERNEL_MODULES = {64: "attn_qk_int8_per_block", 96: "attn_qk_int8_per_block_h96", 128: "attn_qk_int8_per_block"}
QUANT_FUNCTIONS = {
    64: ("quant_per_block", "per_block_int8"),
    96: ("quant_per_block_hd96", "per_block_int8_hd96"),
    128: ("quant_per_block", "per_block_int8"),
}


class UnsupportedAttention(ValueError):
    """The call cannot run on these kernels; the caller falls back to its own attention. str() = the reason."""


@dataclass(frozen=True)
class LaunchConfig:
    name: str
    num_warps: int
    num_stages: int
    fp16_output: bool  # kernel writes fp16; the launcher casts to the caller's dtype
    block_m: int = QUANT_BLOCK_Q
    block_n: int = QUANT_BLOCK_K


def package_default_config(head_dim: int, out_dtype: torch.dtype = torch.float16) -> LaunchConfig:
    """What sageattention 1.0.6's own forward() launches (for comparison and non-Turing devices)."""
    if head_dim == 96:
        warps, stages = 8, 4
    else:
        warps, stages = (4, 3) if head_dim == 64 else (8, 4)
    return LaunchConfig("package-default", warps, stages, fp16_output=out_dtype == torch.float16)


def turing_safe_config(head_dim: int) -> LaunchConfig:
    """Fits 64 KiB shared memory at head_dim 64/96/128: single stage, fp16 output tile."""
    return LaunchConfig("turing-safe", 4 if head_dim == 64 else 8, 1, fp16_output=True)


def choose_config(capability: tuple[int, int], head_dim: int, out_dtype: torch.dtype) -> LaunchConfig:
    """Turing-safe on sm_7x and older (the 64 KiB parts); the package's own launch elsewhere."""
    if capability < (8, 0):
        return turing_safe_config(head_dim)
    return package_default_config(head_dim, out_dtype)


def _package_attr(module: str, name: str) -> Any:
    return getattr(import_module(f"sageattention.{module}"), name)


def kernel_for(head_dim: int) -> Any:
    """The package's @triton.jit attention kernel for this head_dim."""
    return _package_attr(KERNEL_MODULES[head_dim], "_attn_fwd")


def check_supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Any) -> None:
    """Raise UnsupportedAttention naming the first reason these kernels cannot serve the call."""
    if mask is not None:
        raise UnsupportedAttention("attention mask given (sageattention 1.0.6 kernels have no mask input)")
    if q.shape[-1] not in SUPPORTED_HEAD_DIMS or not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        raise UnsupportedAttention(f"head_dim {q.shape[-1]} (kernels exist for 64, 96, 128)")
    if q.shape[1] % k.shape[1] != 0:
        raise UnsupportedAttention(f"{q.shape[1]} query heads not a multiple of {k.shape[1]} key heads")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise UnsupportedAttention(f"dtype {q.dtype}/{k.dtype}/{v.dtype} (needs one of fp16, bf16, fp32)")
    if q.device.type != "cuda":
        raise UnsupportedAttention(f"device {q.device} is not CUDA")


def kernel_arguments(
    q_int8: torch.Tensor, k_int8: torch.Tensor, v: torch.Tensor, q_scale: torch.Tensor,
    k_scale: torch.Tensor, out: torch.Tensor, config: LaunchConfig,
) -> dict[str, Any]:
    """Keyword arguments for `_attn_fwd` (HND tensors), by name, so both kernel signatures are served."""
    batch, heads, qo_len, head_dim = q_int8.shape
    kv_heads, kv_len = k_int8.shape[1], k_int8.shape[2]
    args: dict[str, Any] = {"Q": q_int8, "K": k_int8, "V": v, "Q_scale": q_scale, "K_scale": k_scale, "Out": out}
    for prefix, tensor in (("q", q_int8), ("k", k_int8), ("v", v), ("o", out)):
        args[f"stride_{prefix}z"], args[f"stride_{prefix}h"], args[f"stride_{prefix}n"] = (
            tensor.stride(0), tensor.stride(1), tensor.stride(2)
        )
    args.update(qo_len=qo_len, kv_len=kv_len, H=heads, num_kv_groups=heads // kv_heads, HEAD_DIM=head_dim,
                BLOCK_M=config.block_m, BLOCK_N=config.block_n, STAGE=1)  # STAGE 1 = non-causal
    return args


def kernel_grid(head_dim: int, batch: int, heads: int, qo_len: int, block_m: int) -> tuple[int, int, int]:
    """The h96 kernel folds batch and head into program_id(1); the 64/128 kernel uses (m, head, batch)."""
    blocks = -(-qo_len // block_m)
    return (blocks, batch * heads, 1) if head_dim == 96 else (blocks, heads, batch)


def sage_attention_hnd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, config: LaunchConfig | None = None,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Attention over [B, H, S, D] tensors via the package's int8 kernels; returns [B, H, S, D] in q's dtype."""
    if config is not None and (config.block_m != QUANT_BLOCK_Q or config.block_n != QUANT_BLOCK_K):
        raise ValueError(f"BLOCK_M/BLOCK_N must equal the quantizer's {QUANT_BLOCK_Q}/{QUANT_BLOCK_K} (F08)")
    check_supported(q, k, v, None)
    head_dim, out_dtype = q.shape[-1], q.dtype
    if config is None:
        config = choose_config(tuple(torch.cuda.get_device_capability(q.device)), head_dim, out_dtype)
    if out_dtype == torch.bfloat16 and torch.cuda.get_device_capability(q.device) < (8, 0):
        q, k = q.float(), k.float()  # sm_7x cannot convert bf16 inside the quant kernel
    # Smoothing K (subtract its mean over the sequence) is what sageattn does; done out of place here.
    k = k - k.mean(dim=2, keepdim=True)
    if q.stride(-1) != 1:
        q = q.contiguous()  # the quantizer reads head_dim lanes as contiguous
    quant = _package_attr(*QUANT_FUNCTIONS[head_dim])
    q_int8, q_scale, k_int8, k_scale = quant(
        q, k, BLKQ=config.block_m, BLKK=config.block_n, sm_scale=sm_scale, tensor_layout="HND"
    )
    v16 = v.to(torch.float16)
    if v16.stride(-1) != 1:
        v16 = v16.contiguous()
    kernel_dtype = torch.float16 if config.fp16_output else out_dtype
    out = torch.empty(q.shape, dtype=kernel_dtype, device=q.device)
    batch, heads, qo_len, _ = q.shape
    grid = kernel_grid(head_dim, batch, heads, qo_len, config.block_m)
    kernel_for(head_dim)[grid](
        **kernel_arguments(q_int8, k_int8, v16, q_scale, k_scale, out, config),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out if out.dtype == out_dtype else out.to(out_dtype)

