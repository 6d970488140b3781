"""Checks of this machine's Python environment: Python, torch and its CUDA build (F12), comfy-kitchen and
its registry, GPU capability and bf16, SageAttention vs the GPU (F28), the Triton cache.

Used by `doctor` and H3KitPreflight. Importing this module imports nothing heavy; `local_checks()` imports
torch (to ask about CUDA) when it runs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from ..adapters.host import parse_version
from .facts import MIN_COMFYUI, MIN_KITCHEN, MIN_TORCH_CUDA_MAJOR, version_text
from .problem import FAIL, PASS, WARN, Check

# --- package versions ---------------------------------------------------------------------------

def dist_version(*names: str) -> str | None:
    """Installed version of the first distribution found among `names` (no import)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def cuda_major(cuda_version: str | None) -> int | None:
    """'13.0' -> 13; None for CPU builds."""
    if not cuda_version:
        return None
    head = parse_version(cuda_version)
    return head[0] if head else None


def cuda_major_from_torch_tag(torch_version: str) -> int | None:
    """'2.13.0+cu130' -> 13, '2.11.0+cu128' -> 12; None for +cpu / +rocm / no tag."""
    match = re.search(r"\+cu(\d+)", torch_version or "")
    return int(match.group(1)) // 10 if match else None


# --- local checks -------------------------------------------------------------------------------

def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    return Check(PASS, "python", f"{version} ({sys.executable})")  # the package itself requires >= 3.10


def torch_cuda_check(torch_version: str, cuda_version: str | None) -> Check:
    major = cuda_major(cuda_version)
    if major is None:
        return Check(WARN, "torch", f"{torch_version} is a CPU-only build: nothing renders on a GPU here",
                     "on the render machine install a CUDA 13 build: pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu130 (never upgrade ComfyUI's torch by accident)")
    if major < MIN_TORCH_CUDA_MAJOR:
        return Check(WARN, "torch", f"{torch_version} is built for CUDA {cuda_version}: ComfyUI disables "
                     "comfy-kitchen's CUDA backend below CUDA 13, so NVFP4 weights run without the FP4 GEMM "
                     "(measured 1.48x slower, F12)",
                     "install the cu130 torch build and the matching +cu130 SageAttention wheel")
    return Check(PASS, "torch", f"{torch_version}, CUDA {cuda_version} (>= 13: kitchen CUDA backend usable)")


def check_torch() -> tuple[Check, Any]:
    version = dist_version("torch")
    if version is None:
        return Check(FAIL, "torch", "not installed", "install the torch that ComfyUI uses"), None
    import torch  # the CLI may probe CUDA; importing the pack never does

    return torch_cuda_check(torch.__version__, torch.version.cuda), torch


def kitchen_registry_state(module: Any) -> dict[str, Any] | None:
    """What comfy_kitchen's backend registry says about the CUDA backend; None when its API is not recognised."""
    registry = getattr(module, "registry", None)
    if registry is None:
        return None
    state: dict[str, Any] = {}
    for attr in ("is_enabled", "is_backend_enabled"):
        fn = getattr(registry, attr, None)
        if callable(fn):
            state["cuda_enabled"] = bool(fn("cuda"))
            break
    else:
        for attr in ("disabled", "_disabled", "disabled_backends", "_disabled_backends"):
            disabled = getattr(registry, attr, None)
            if isinstance(disabled, (set, list, tuple, dict)):
                state["cuda_enabled"] = "cuda" not in disabled
                break
    names: set[str] = set()
    for attr in ("list_functions", "capabilities", "list_capabilities", "functions", "_functions", "_registry"):
        found = getattr(registry, attr, None)
        found = found() if callable(found) else found
        if isinstance(found, dict):
            names.update(map(str, found))
        elif isinstance(found, (list, tuple, set)):
            names.update(map(str, found))
        if names:
            break
    if names:
        state["capabilities"] = len(names)
        state["scaled_mm_nvfp4"] = any("scaled_mm_nvfp4" in n for n in names)
    return state or None


def kitchen_checks(version: str | None, registry: dict[str, Any] | None, registry_note: str = "") -> list[Check]:
    if version is None:
        return [Check(WARN, "comfy-kitchen", f"not installed: ComfyUI >= {version_text(MIN_COMFYUI)} needs it for "
                      "quantized (NVFP4/int8) weights",
                      f"pip install comfy-kitchen=={version_text(MIN_KITCHEN)} in ComfyUI's environment")]
    checks = []
    if parse_version(version) < MIN_KITCHEN:
        checks.append(Check(FAIL, "comfy-kitchen", f"{version} is older than {version_text(MIN_KITCHEN)}: ComfyUI {version_text(MIN_COMFYUI)} "
                            "does not import with it "
                            "(X07) and older stacks produce garbage two-stage refines (F01)",
                            f"pip install comfy-kitchen=={version_text(MIN_KITCHEN)} (together with ComfyUI "
                            f"{version_text(MIN_COMFYUI)})"))
    else:
        checks.append(Check(PASS, "comfy-kitchen", version))
    if registry is None:
        if registry_note:
            checks.append(Check(WARN, "kitchen registry", registry_note,
                                "check ComfyUI's startup log for the kitchen backend lines"))
        return checks
    problems = []
    if registry.get("cuda_enabled") is False:
        problems.append("the CUDA backend is disabled")
    if registry.get("scaled_mm_nvfp4") is False:
        problems.append("scaled_mm_nvfp4 is not registered (needs cuBLASLt 13 at runtime)")
    detail = ", ".join(f"{k}={v}" for k, v in registry.items())
    if problems:
        checks.append(Check(WARN, "kitchen registry", "; ".join(problems) + f" ({detail}): NVFP4 matmuls run eager (F12)",
                            "use a CUDA 13 torch build (cu130) so kitchen registers its CUDA FP4 GEMM"))
    else:
        checks.append(Check(PASS, "kitchen registry", detail))
    return checks


def check_kitchen() -> list[Check]:
    version = dist_version("comfy-kitchen", "comfy_kitchen", "comfy-kitchen-no-cuda")
    if version is None or importlib.util.find_spec("comfy_kitchen") is None:
        return kitchen_checks(version, None)
    try:
        import comfy_kitchen
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding (F36)
        return kitchen_checks(version, None, f"comfy_kitchen does not import: {type(exc).__name__}: {exc} (F36)")
    state = kitchen_registry_state(comfy_kitchen)
    note = "" if state else "comfy_kitchen.registry has no API this doctor recognises; registry not read"
    return kitchen_checks(version, state, note)


def gpu_check(capability: tuple[int, int] | None, name: str = "", bf16: bool | None = None) -> Check:
    if capability is None:
        return Check(WARN, "gpu", "no CUDA GPU visible to torch", "render on a machine with an NVIDIA GPU (CUDA 13 driver)")
    sm = f"sm_{capability[0]}{capability[1]}"
    if bf16 is None:
        bf16 = capability >= (8, 0)
    if not bf16:
        return Check(WARN, "gpu", f"{name} ({sm}) has no bf16: LTX-2.5 computes in fp32 there (F04/F05, slow) and "
                     "LTX int8-convrot gives all-NaN black video on sm_75 (F10)",
                     "use the Turing build (GGUF Q4_K_M refiner, fp16 VAEs, workflows/api/*turing*.json)")
    return Check(PASS, "gpu", f"{name} ({sm}), bf16 supported")


def sage_checks(sage: str | None, sage3: str | None, capability: tuple[int, int] | None,
                torch_cuda: int | None) -> list[Check]:
    checks = []
    sm = f"sm_{capability[0]}{capability[1]}" if capability else "unknown GPU"
    if sage is None:
        checks.append(Check(PASS, "sageattention", "not installed (optional; ComfyUI uses PyTorch attention)"))
    elif capability is None:
        checks.append(Check(PASS, "sageattention", f"{sage} (no GPU here to check it against)"))
    elif parse_version(sage) >= (2,) and capability < (8, 0):
        checks.append(Check(FAIL, "sageattention", f"{sage} needs sm_80+, this GPU is {sm}: 'Unsupported CUDA "
                            "architecture' (X08, F28)", "pip install sageattention==1.0.6 (the sm_75 build)"))
    elif parse_version(sage) < (2,) and capability >= (8, 0):
        checks.append(Check(WARN, "sageattention", f"{sage} on {sm}: the flag is accepted but gives no speedup (F28)",
                            "install SageAttention 2.x built for your torch (e.g. 2.2.0+cu130 with a cu130 torch)"))
    elif torch_cuda and torch_cuda >= 13 and "+" in sage and "cu13" not in sage:
        checks.append(Check(WARN, "sageattention", f"{sage} is not a +cu13x build but torch is CUDA {torch_cuda}",
                            "install the +cu130 SageAttention wheel that matches this torch"))
    else:
        note = " (sm_75: watch the log for 'out of resource: shared memory' fallbacks, F07)" if capability < (8, 0) else ""
        checks.append(Check(PASS, "sageattention", f"{sage} on {sm}{note}"))
    if sage3 is not None:
        checks.append(Check(WARN, "sageattn3", f"{sage3} is installed: a separate package that "
                            "--use-sage-attention never selects (F28)",
                            "for --use-sage-attention install sageattention 2.x; sageattn3 needs nodes that call it"))
    return checks


def triton_check(env: dict[str, str] | None = None) -> Check:
    env = os.environ if env is None else env
    version = dist_version("triton", "triton-windows")
    cache = Path(env.get("TRITON_CACHE_DIR") or Path(env.get("HOME", str(Path.home()))) / ".triton" / "cache")
    entries = sum(1 for _ in cache.iterdir()) if cache.is_dir() else 0
    where = f"cache {cache} ({entries} entries)" if cache.is_dir() else f"cache {cache} (not created yet)"
    if version is None:
        return Check(PASS, "triton", f"not installed (only SageAttention/Sol-Attn need it); {where}")
    return Check(PASS, "triton", f"{version}; {where}. After editing a kernel file clear this folder and __pycache__ (F09)")


def local_checks() -> list[Check]:
    checks = [check_python()]
    torch_check, torch = check_torch()
    checks.append(torch_check)
    checks += check_kitchen()
    capability, torch_cuda = None, None
    if torch is not None:
        torch_cuda = cuda_major(torch.version.cuda)
        if torch.cuda.is_available():
            capability = tuple(torch.cuda.get_device_capability(0))
            checks.append(gpu_check(capability, torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported()))
        else:
            checks.append(gpu_check(None))
    checks += sage_checks(dist_version("sageattention"), dist_version("sageattn3"), capability, torch_cuda)
    checks.append(triton_check())
    return checks


