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
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from re import compile as regex
from typing import Any

from .facts import MIN_COMFYUI, MIN_KITCHEN, MIN_TORCH_CUDA_MAJOR, parse_version, version_text
from .invocation import clone_command
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


def missing_packages(packages: Sequence[str]) -> list[str]:
    """The packages of `packages` that are not installed here (looked up, never imported)."""
    return [name for name in packages if importlib.util.find_spec(name) is None]


def kitchen_version() -> str | None:
    """The comfy-kitchen installed in this Python (inside ComfyUI: the host's own)."""
    return dist_version("comfy-kitchen", "comfy_kitchen", "comfy-kitchen-no-cuda")


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


# --- what this machine is ------------------------------------------------------------------------

PACK_ROOT = Path(__file__).resolve().parent.parent
_VERSION_LINE = regex(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)


def looks_like_comfyui(folder: Path) -> bool:
    """A ComfyUI folder: models/ plus its entry point or custom_nodes/ (a checkout, or the installable fork's
    working folder)."""
    try:
        return (folder / "models").is_dir() and any((folder / name).exists()
                                                    for name in ("main.py", "custom_nodes", "comfyui_version.py"))
    except OSError:
        return False


def comfyui_candidates(env: dict[str, str] | None = None, cwd: Path | None = None) -> list[Path]:
    """Where this user's ComfyUI may be, in order: the checkout this clone sits in (ComfyUI/custom_nodes/<pack>),
    $COMFYUI_DIR, then the current folder and the folders above it."""
    env = os.environ if env is None else env
    here = Path.cwd() if cwd is None else cwd
    candidates = [PACK_ROOT.parent.parent] if PACK_ROOT.parent.name == "custom_nodes" else []
    candidates += [Path(env["COMFYUI_DIR"])] if env.get("COMFYUI_DIR") else []
    candidates += [here, *list(here.parents)[:3]]
    return candidates


def find_comfyui(env: dict[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """The ComfyUI folder doctor, cond and the models checks use: the first candidate that looks like one."""
    return next((folder for folder in comfyui_candidates(env, cwd) if looks_like_comfyui(folder)), None)


def local_comfyui_version(env: dict[str, str] | None = None) -> str | None:
    """The ComfyUI this Python serves, found from outside it (inside ComfyUI the caller has the running one:
    adapters/host.comfyui_version): a pip-installed ComfyUI in this environment (the installable fork: distribution
    'comfyui'), else the checkout this clone sits in (ComfyUI/custom_nodes/<pack>), $COMFYUI_DIR or the current
    folder (comfyui_candidates); None when none is found."""
    installed = dist_version("comfyui")
    if installed:
        return installed
    for folder in comfyui_candidates(env):
        try:
            match = _VERSION_LINE.search((folder / "comfyui_version.py").read_text(encoding="utf-8")[:4096])
        except OSError:
            continue
        if match:
            return match.group(1)
    return None


def needs_recent_kitchen(comfyui: str | None) -> bool | None:
    """Whether that ComfyUI imports only with comfy-kitchen >= MIN_KITCHEN (ComfyUI >= MIN_COMFYUI, X07);
    None when the ComfyUI is unknown."""
    if not comfyui:
        return None
    parsed = parse_version(comfyui)
    return None if not parsed else parsed >= MIN_COMFYUI


def nvidia_driver_present() -> bool:
    """An NVIDIA driver is installed (Linux /proc entry, or nvidia-smi on the PATH): the machine has a GPU
    even when torch cannot see it."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


# --- local checks -------------------------------------------------------------------------------

def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    return Check(PASS, "python", f"{version} ({sys.executable})")  # the package itself requires >= 3.10


def renders_on_cuda(devices: Sequence[Any] | None) -> bool:
    """The one rule of every CUDA-build check (torch's build F12, comfy-kitchen's CUDA backend and FP4 GEMM), in
    doctor --server and in the editor's preflight alike: the build matters only where ComfyUI renders on a CUDA
    device. `devices`: ComfyUI's torch devices as /system_stats lists them ([{"type": "cuda"|"cpu"|...}]); None:
    unknown, so the build is checked. Before, on a CPU server the editor warned "use a CUDA 13 torch build"
    (kitchen's CUDA backend is off there) while doctor --server said the build does not matter there."""
    return devices is None or any(isinstance(d, dict) and d.get("type") == "cuda" for d in devices)


def torch_cuda_check(torch_version: str, cuda_version: str | None, gpu_machine: bool = True) -> Check:
    """`gpu_machine` False: this machine has no NVIDIA GPU at all, so the CUDA build cannot matter here."""
    major = cuda_major(cuda_version)
    if not gpu_machine:
        build = f"CUDA {cuda_version} build" if major is not None else "CPU-only build"
        return Check(PASS, "torch", f"{torch_version} ({build}; this machine has no NVIDIA GPU, so its CUDA build "
                     "does not matter here: check the render machine with doctor there or --server)")
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


def check_torch(gpu_machine: bool = True) -> tuple[Check, Any]:
    version = dist_version("torch")
    if version is None:
        return Check(FAIL, "torch", "not installed", "install the torch that ComfyUI uses"), None
    import torch  # the CLI may probe CUDA; importing the pack never does

    return torch_cuda_check(torch.__version__, torch.version.cuda, gpu_machine), torch


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


def kitchen_checks(version: str | None, registry: dict[str, Any] | None, registry_note: str = "",
                   comfyui: str | None = None, gpu_machine: bool = True) -> list[Check]:
    """`comfyui`: the version of the ComfyUI this environment serves (None: unknown). Only ComfyUI >= 0.34
    needs kitchen >= 0.2.31; an older ComfyUI (or a fork such as 0.12.1) ships its own kitchen. `gpu_machine`
    False: nothing renders on a CUDA device here (`renders_on_cuda`), so the registry's CUDA backend cannot matter."""
    need, wanted, newer = needs_recent_kitchen(comfyui), version_text(MIN_KITCHEN), version_text(MIN_COMFYUI)
    if version is None:
        if need:
            return [Check(WARN, "comfy-kitchen", f"not installed: ComfyUI {comfyui} needs it for quantized "
                          "(NVFP4/int8) weights", f"pip install comfy-kitchen=={wanted} in ComfyUI's environment")]
        return [Check(PASS, "comfy-kitchen", f"not installed (only ComfyUI >= {newer} needs it, for quantized "
                      "weights)")]
    checks = []
    if parse_version(version) >= MIN_KITCHEN:
        checks.append(Check(PASS, "comfy-kitchen", version))
    elif need:
        checks.append(Check(FAIL, "comfy-kitchen", f"{version} is older than {wanted}: ComfyUI {comfyui} does not "
                            "import with it (X07) and older stacks produce garbage two-stage refines (F01)",
                            f"pip install comfy-kitchen=={wanted} (the version ComfyUI {newer} is tested with)"))
    elif need is False:
        checks.append(Check(PASS, "comfy-kitchen", f"{version} (what ComfyUI {comfyui} uses; ComfyUI >= {newer} "
                            f"needs >= {wanted}: update both together)"))
    else:
        checks.append(Check(WARN, "comfy-kitchen", f"{version}: ComfyUI >= {newer} needs >= {wanted} (X07, F01); "
                            "which ComfyUI uses this Python is unknown here",
                            f"run doctor with ComfyUI's own Python from the ComfyUI folder ({clone_command('doctor')}), "
                            "or pass --server"))
    if registry is None:
        if registry_note:
            checks.append(Check(WARN, "kitchen registry", registry_note,
                                "check ComfyUI's startup log for the kitchen backend lines"))
        return checks
    detail = ", ".join(f"{k}={v}" for k, v in registry.items())
    if not gpu_machine:
        checks.append(Check(PASS, "kitchen registry", f"{detail} (nothing renders on a CUDA device here, so kitchen's "
                            "CUDA backend and the CUDA build do not matter here)"))
        return checks
    problems = []
    if registry.get("cuda_enabled") is False:
        problems.append("the CUDA backend is disabled")
    if registry.get("scaled_mm_nvfp4") is False:
        problems.append("scaled_mm_nvfp4 is not registered (needs cuBLASLt 13 at runtime)")
    if problems:
        checks.append(Check(WARN, "kitchen registry", "; ".join(problems) + f" ({detail}): NVFP4 matmuls run eager (F12)",
                            "use a CUDA 13 torch build (cu130) so kitchen registers its CUDA FP4 GEMM"))
    else:
        checks.append(Check(PASS, "kitchen registry", detail))
    return checks


def check_kitchen(comfyui: str | None = None, gpu_machine: bool = True) -> list[Check]:
    version = kitchen_version()
    if version is None or importlib.util.find_spec("comfy_kitchen") is None:
        return kitchen_checks(version, None, comfyui=comfyui, gpu_machine=gpu_machine)
    try:
        import comfy_kitchen
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding (F36)
        return kitchen_checks(version, None, f"comfy_kitchen does not import: {type(exc).__name__}: {exc} (F36)",
                              comfyui, gpu_machine)
    state = kitchen_registry_state(comfy_kitchen)
    note = "" if state else "comfy_kitchen.registry has no API this doctor recognises; registry not read"
    return kitchen_checks(version, state, note, comfyui, gpu_machine)


def gpu_check(capability: tuple[int, int] | None, name: str = "", bf16: bool | None = None,
              gpu_machine: bool = True) -> Check:
    if capability is None and not gpu_machine:
        return Check(PASS, "gpu", "none on this machine (no NVIDIA driver): GPU, CUDA-build and SageAttention "
                     "checks do not apply here; run doctor on the render machine, or use --server")
    if capability is None:
        return Check(WARN, "gpu", "an NVIDIA driver is installed but torch sees no CUDA GPU",
                     "check CUDA_VISIBLE_DEVICES and nvidia-smi, and that ComfyUI's torch is a CUDA build")
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


def local_checks(comfyui: str | None = None, devices: Sequence[Any] | None = None) -> list[Check]:
    """This machine, judged for what matters on it: CUDA-build and GPU checks only where there is a GPU,
    kitchen against the ComfyUI this Python serves (`comfyui`: the running one's version inside ComfyUI,
    adapters/host.comfyui_version; None: the one local_comfyui_version finds). `devices`: inside ComfyUI, the
    devices it renders on, as /system_stats lists them (adapters/host.render_devices): the CUDA build is then
    judged by `renders_on_cuda`, the rule doctor --server applies to the same list."""
    comfyui = comfyui or local_comfyui_version()
    checks = [check_python()]
    has_torch = dist_version("torch") is not None
    torch_sees_gpu = False
    if has_torch:
        import torch

        torch_sees_gpu = torch.cuda.is_available()
    gpu_machine = renders_on_cuda(devices) if devices is not None else torch_sees_gpu or nvidia_driver_present()
    torch_check, torch = check_torch(gpu_machine)
    checks.append(torch_check)
    checks += check_kitchen(comfyui, gpu_machine)
    capability, torch_cuda = None, None
    if torch is not None:
        torch_cuda = cuda_major(torch.version.cuda)
        if torch_sees_gpu:
            capability = tuple(torch.cuda.get_device_capability(0))
            checks.append(gpu_check(capability, torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported()))
        else:
            checks.append(gpu_check(None, gpu_machine=gpu_machine))
    checks += sage_checks(dist_version("sageattention"), dist_version("sageattn3"), capability, torch_cuda)
    checks.append(triton_check())
    return checks


