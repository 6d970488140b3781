"""Benchmark/proof for kernels/sage_turing.py: shared memory on sm_75, and accuracy/speed against SDPA.

    python -m h3kit.scripts.bench_sage_turing smem [--target 7.5]     # compile only, no GPU needed
    python -m h3kit.scripts.bench_sage_turing accuracy [--seq 4096]   # needs a CUDA GPU

`smem` compiles each sageattention 1.0.6 attention kernel for the target with Triton and prints the
shared memory of three launches: the package's own (fp32 caller, as LTX on Turing gets), the package's
with only num_stages=1, and the Turing-safe one. `accuracy` compares the Turing-safe launcher, the
package's sageattn and the launcher through the ComfyUI override against torch SDPA in fp32
(relative L2 error, cosine similarity) and times them in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from importlib import import_module
from typing import Any

import torch

from ..kernels import sage_turing as st

LIMIT = 65_536  # shared memory per block on sm_75 (Turing)

CAUSAL_KERNEL_MODULES = {64: "attn_qk_int8_per_block_causal", 96: "attn_qk_int8_per_block_h96_causal",
                         128: "attn_qk_int8_per_block_causal"}
_TRITON_DTYPES = {torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float32: "*fp32"}
_POINTER_TYPES = {"Q": "*i8", "K": "*i8", "V": "*fp16", "Q_scale": "*fp32", "K_scale": "*fp32"}


def compiled_shared_memory(head_dim: int, config: st.LaunchConfig, out_dtype: torch.dtype,
                           capability: tuple[int, int] = (7, 5), causal: bool = False) -> int:
    """Bytes of shared memory Triton allocates for the kernel compiled for `capability` (no GPU needed).

    Pointers and strides are marked 16-divisible, as Triton specialises them for contiguous tensors
    at launch; lengths are left unspecialised (any sequence length).
    """
    from triton import compile as compile_kernel
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module = (CAUSAL_KERNEL_MODULES if causal else st.KERNEL_MODULES)[head_dim]
    fn = import_module(f"sageattention.{module}")._attn_fwd
    kernel_out = torch.float16 if config.fp16_output else out_dtype
    constants = {"HEAD_DIM": head_dim, "BLOCK_M": config.block_m, "BLOCK_N": config.block_n,
                 "STAGE": 3 if causal else 1, "H": 8, "num_kv_groups": 1}
    signature: dict[str, str] = {}
    specialise: list[int] = []
    for index, param in enumerate(fn.params):
        name = param.name
        if param.is_constexpr:
            signature[name] = "constexpr"
            continue
        signature[name] = "*" + _TRITON_DTYPES[kernel_out][1:] if name == "Out" else _POINTER_TYPES.get(name, "i32")
        if name in _POINTER_TYPES or name == "Out" or name.startswith("stride_"):
            specialise.append(index)
    used = {name: value for name, value in constants.items() if signature.get(name) == "constexpr"}
    source = _ast_source(ASTSource, fn, signature, used, specialise)
    compiled = compile_kernel(source, target=GPUTarget("cuda", capability[0] * 10 + capability[1], 32),
                             options={"num_warps": config.num_warps, "num_stages": config.num_stages})
    return int(compiled.metadata.shared)


def _ast_source(ast_source: Any, fn: Any, signature: dict[str, str], constants: dict[str, int],
                specialise: list[int]) -> Any:
    """Triton 3.2 takes constants by name and an AttrsDescriptor; 3.3+ take (index,) keys and attr lists."""
    import triton.backends.compiler as backend_compiler

    if hasattr(backend_compiler, "AttrsDescriptor"):
        attrs = backend_compiler.AttrsDescriptor.from_hints({index: 16 for index in specialise})
        return ast_source(fn, signature, constants, attrs)
    by_index = {(fn.arg_names.index(name),): value for name, value in constants.items()}
    attrs = {(index,): [["tt.divisibility", 16]] for index in specialise}
    return ast_source(fn, signature, by_index, attrs)


def smem_rows(target: tuple[int, int]) -> list[tuple[str, int, str, str]]:
    rows = []
    for causal in (False, True):
        for head_dim in st.SUPPORTED_HEAD_DIMS:
            kernel = (CAUSAL_KERNEL_MODULES if causal else st.KERNEL_MODULES)[head_dim]
            default = st.package_default_config(head_dim, torch.float32)
            variants = (("package default, fp32 caller", default),
                        ("package default + num_stages=1 only", dataclasses.replace(default, num_stages=1)),
                        ("turing-safe (num_stages=1, fp16 tile)", st.turing_safe_config(head_dim)))
            for label, config in variants:
                try:
                    shared = compiled_shared_memory(head_dim, config, torch.float32, target, causal)
                    shown = f"{shared:,}"
                    fits = "yes" if shared <= LIMIT else "NO"
                except Exception as exc:  # noqa: BLE001 - a compile failure is a result to print
                    shown, fits = f"compile error: {type(exc).__name__}", "-"
                rows.append((kernel, head_dim, label, f"{shown:>10} {fits}"))
    return rows


def run_smem(target: tuple[int, int]) -> None:
    import triton

    print(f"triton {triton.__version__}, target sm_{target[0]}{target[1]}, limit {LIMIT:,} B")
    print(f"| {'kernel':<36} | hd  | {'launch':<38} | shared B / fits |")
    for kernel, head_dim, label, value in smem_rows(target):
        print(f"| {kernel:<36} | {head_dim:<3} | {label:<38} | {value} |")


def _time_ms(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1000


def _errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    out, ref = out.float().flatten(), ref.float().flatten()
    rel = float((out - ref).norm() / ref.norm())
    cos = float(torch.nn.functional.cosine_similarity(out, ref, dim=0))
    return rel, cos


def run_accuracy(seq: int, heads: int) -> None:
    from sageattention import sageattn

    from ..nodes.turing import SageAttentionOverride

    device = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name(device)}, torch {torch.__version__}, B=1 H={heads}")
    print("| hd  | S     | dtype | variant                  | rel L2 err | cosine   | ms     | x SDPA |")
    torch.manual_seed(0)
    for head_dim in st.SUPPORTED_HEAD_DIMS:
        for length in (seq, seq - 37):
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                q, k, v = (torch.randn(1, heads, length, head_dim, device=device, dtype=dtype) for _ in range(3))
                k = k + 0.5  # a shared offset, the case K smoothing exists for
                ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
                sdpa_ms = _time_ms(lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v))
                override = SageAttentionOverride("turing-safe")
                variants = _variants(q, k, v, heads, override, sageattn)
                for name, fn in variants.items():
                    rel, cos = _errors(fn(), ref)
                    ms = _time_ms(fn)
                    print(f"| {head_dim:<3} | {length:<5} | {str(dtype)[6:]:<5} | {name:<24} | {rel:10.5f} | "
                          f"{cos:.6f} | {ms:6.3f} | {sdpa_ms / ms:6.2f} |")
                if override.fallbacks:
                    print(f"  override fell back: {dict(override.fallbacks)}")


def _variants(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, override, sageattn) -> dict:
    batch, _, length, head_dim = q.shape
    flat = [t.transpose(1, 2).reshape(batch, length, heads * head_dim) for t in (q, k, v)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {
        "SDPA (same dtype)": lambda: sdpa(q, k, v),
        "launcher turing-safe": lambda: st.sage_attention_hnd(q, k, v, st.turing_safe_config(head_dim)),
        "sageattn (package)": lambda: sageattn(q, k.clone(), v, tensor_layout="HND"),  # it edits k in place
        "override [B,S,H*D]": lambda: override(_no_fallback, *flat, heads).view(batch, length, heads, head_dim)
        .transpose(1, 2),
    }


def _no_fallback(*args, **kwargs):
    raise AssertionError("the override fell back to the original attention")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_sage_turing", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    smem = sub.add_parser("smem")
    smem.add_argument("--target", default="7.5", help="compute capability to compile for, e.g. 7.5")
    accuracy = sub.add_parser("accuracy")
    accuracy.add_argument("--seq", type=int, default=4096)
    accuracy.add_argument("--heads", type=int, default=24)
    args = parser.parse_args(argv)
    if args.part == "smem":
        major, minor = (int(part) for part in args.target.split("."))
        run_smem((major, minor))
    else:
        run_accuracy(args.seq, args.heads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
