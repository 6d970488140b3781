"""Turing (sm_75) nodes: per-model compute dtype, and SageAttention 1.0.6 kernels that fit 64 KiB.

H3KitComputeDtype sets the compute dtype of one MODEL through the host's `set_model_compute_dtype`
and reports what the model will actually compute in; for MiniMax-H3 on a GPU without bf16, auto installs
adapters/turing.H3Fp16Sublayer on every block's attention and feed-forward instead (fp32 residual stream). H3KitSageAttention installs
`transformer_options["optimized_attention_override"]` running kernels/sage_turing.py, and passes it to the H3 token
refiner / LTX text connectors, which the host calls without it (nodes/attention_sites.py); calls it cannot
serve go to ComfyUI's own attention, counted per site. The counts exist only at sampling time, after this node
has produced its report, so a per-sampling summary line is logged by an OUTER_SAMPLE wrapper.
Both nodes add the F10 warning when an int8-convrot LTX model is about to run on sm_7x.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

import torch

from ..adapters.log import LOG, log_once
from ..adapters.turing import (
    H3_FP16_SUBLAYERS,
    Fp16Ledger,
    H3Fp16Sublayer,
    device_lacks_bf16,
    h3_block_count,
    int8_convrot_refine_warning,
)
from ..kernels import sage_turing
from . import attention_sites
from .attention_sites import OVERRIDE_KEY
from .common import H3KitInputError, Report, category, install_sampling_summary

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
WRAPPER_KEY = "h3kit_sage_attention"
SAGE_CONFIGS = ("auto", "turing-safe", "package-default")


def device_capability(device: Any) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device, None for anything else. Only called while a node runs."""
    if device is None or torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return None
    return tuple(torch.cuda.get_device_capability(torch.device(device)))  # type: ignore[return-value]


def compute_dtype_of(model: Any) -> torch.dtype | None:
    """What the model computes in: the manual-cast dtype when set, else its weight dtype."""
    cast = model.get_model_object("manual_cast_dtype")
    return cast if cast is not None else model.model_dtype()


def resolve_compute_dtype(choice: str, capability: tuple[int, int] | None) -> torch.dtype | None:
    """The dtype to set for a combo choice; None = leave the model as it is (auto on a bf16-capable device)."""
    if choice == "auto":
        return torch.float16 if capability is not None and device_lacks_bf16(capability) else None
    if choice not in DTYPES:
        raise H3KitInputError("H3KitComputeDtype", "dtype", choice, "unknown compute dtype",
                              "choose one of auto, fp16, bf16, fp32")
    if choice == "bf16" and capability is not None and device_lacks_bf16(capability):
        raise H3KitInputError(
            "H3KitComputeDtype", "dtype", choice,
            f"sm_{capability[0]}{capability[1]} has no bf16 units (it would be emulated, far slower than fp16)",
            "choose fp16 (or auto, which picks fp16 here)",
        )
    return DTYPES[choice]


def _dtype_name(dtype: torch.dtype | None) -> str:
    return str(dtype).replace("torch.", "") if dtype is not None else "none"


def _warn_f10(report: Report, model: Any, capability: tuple[int, int] | None) -> None:
    warning = int8_convrot_refine_warning(model, capability)
    if warning:
        report.warn(warning)


H3_MIXED = ("mixed: fp16 attention and feed-forward in every block; fp32 residual stream, norms, adaLN modulation, "
            "embeddings and output heads")


def _h3_blocks(model: Any) -> int:
    try:
        net = model.get_model_object("diffusion_model")
    except (AttributeError, KeyError):
        return 0
    return h3_block_count(net)


def _sublayer_keys(blocks: int) -> list[tuple[str, str]]:
    return [(f"diffusion_model.blocks.{i}.{name}.forward", name) for i in range(blocks) for name in H3_FP16_SUBLAYERS]


def _without_fp16_sublayers(patched: Any, blocks: int) -> int:
    """Unwrap H3Fp16Sublayer patches of a clone (an explicit dtype means that dtype everywhere); how many."""
    removed = 0
    for key, _name in _sublayer_keys(blocks):
        current = getattr(patched, "object_patches", {}).get(key)
        if getattr(current, "h3kit_patch", None) == "turing_fp16":
            inner = current.inner
            if getattr(inner, "__self__", None) is not None and getattr(inner, "__name__", "") == "forward":
                del patched.object_patches[key]  # the module's own forward: no patch left
            else:
                patched.add_object_patch(key, inner)
            removed += 1
    return removed


class H3KitComputeDtype:
    DISPLAY_NAME = "H3Kit Compute Dtype"
    CATEGORY = category("Turing")
    DESCRIPTION = ("Sets the dtype one MODEL computes in and reports the dtype actually used; works for quantized "
                   "models, which --fp16-unet does not reach. auto on GPUs without bf16 (RTX 20xx): LTX computes "
                   "in fp16; MiniMax-H3 runs attention and feed-forward in fp16 and keeps its residual stream, norms "
                   "and modulation in fp32 (all-fp16 saturates there, docs/turing.md), recomputing in fp32 any fp16 "
                   "result that overflows. Elsewhere auto leaves the model unchanged.")
    FUNCTION = "apply"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {
            "model": ("MODEL", {"tooltip": "The diffusion model to set the compute dtype of (it is cloned, "
                                           "the input stays unchanged)."}),
            "dtype": (["auto", "fp16", "bf16", "fp32"], {
                "default": "auto",
                "tooltip": "auto: on a GPU without bf16 (sm_75 and older) LTX computes in fp16 and MiniMax-H3 in "
                           "mixed fp16/fp32 (fp16 attention and feed-forward, fp32 residual stream); elsewhere "
                           "the model's dtype is kept. fp16/fp32: everything in that dtype. bf16 is refused on GPUs "
                           "without bf16.",
            }),
        }}

    def apply(self, model: Any, dtype: str) -> tuple[Any, str]:
        report = Report("H3KitComputeDtype")
        capability = device_capability(getattr(model, "load_device", None))
        before = compute_dtype_of(model)
        target = resolve_compute_dtype(dtype, capability)
        blocks = _h3_blocks(model)
        report.set(choice=dtype, device=str(getattr(model, "load_device", None)),
                   capability=f"sm_{capability[0]}{capability[1]}" if capability else None,
                   weight_dtype=_dtype_name(model.model_dtype()), compute_dtype_before=_dtype_name(before))
        _warn_f10(report, model, capability)
        if blocks and dtype == "auto" and target == torch.float16:
            return self._h3_mixed(model, blocks, before, report)
        if target is None:
            reason = "no CUDA device" if capability is None else "the device computes bf16 natively"
            report.set(compute_dtype=_dtype_name(before), changed=False, note=f"auto: left unchanged ({reason})")
            return model, report.json()
        patched = model.clone()
        if blocks and _without_fp16_sublayers(patched, blocks):
            report.set(note="the mixed fp16 patches of an earlier H3KitComputeDtype were removed")
        patched.set_model_compute_dtype(target)
        used = compute_dtype_of(patched)
        report.set(compute_dtype=_dtype_name(used), changed=used != before)
        if blocks and used == torch.float16:
            report.warn("MiniMax-H3 entirely in fp16: its residual stream can saturate at 65504 and turn the video "
                        "black without an error (docs/turing.md); auto keeps it in fp32")
        if used != target:
            report.fallback("not_applied", f"asked for {_dtype_name(target)} but the model reports "
                                           f"{_dtype_name(used)}; the host ignored set_model_compute_dtype")
        return patched, report.json()

    @staticmethod
    def _h3_mixed(model: Any, blocks: int, before: torch.dtype | None, report: Report) -> tuple[Any, str]:
        patched = model.clone()
        cast = patched.get_model_object("manual_cast_dtype")
        if before != torch.float32 or cast is None:
            # The residual stream follows the model's compute dtype, and the fp16 sublayers need layers that cast
            # their weights to the input's dtype (manual cast; quantized models on sm_75 already are). Forcing the
            # cast makes quantized layers dequantize, so it is done only when the model lacks one of the two.
            patched.set_model_compute_dtype(torch.float32)
            report.set(note=f"compute dtype set to float32 (was {_dtype_name(before)}, manual cast "
                            f"{_dtype_name(cast)}): layers now cast their weights per call")
        ledger = Fp16Ledger()
        for key, name in _sublayer_keys(blocks):
            current = patched.get_model_object(key)
            if getattr(current, "h3kit_patch", None) == "turing_fp16":
                current = current.inner  # re-applying replaces our own cast instead of nesting it
            patched.add_object_patch(key, H3Fp16Sublayer(current, name, ledger))
        report.set(compute_dtype=H3_MIXED, compute_dtype_after=_dtype_name(compute_dtype_of(patched)),
                   changed=True, h3_blocks=blocks,
                   overflow="an fp16 attention or feed-forward result that is not finite is recomputed in fp32 for "
                            "that call; each new outcome is logged once (logger H3Kit)")
        return patched, report.json()


class SageAttentionOverride:
    """The optimized_attention_override callable. Counters are shared by every copy of the patch."""

    def __init__(self, config_choice: str, previous: Any = None):
        self.config_choice = config_choice
        self.previous = previous  # an override installed before us; fallbacks go through it
        self.lock = threading.Lock()
        self.calls = 0
        self.sage_calls = 0
        self.fallbacks: Counter[str] = Counter()
        self.sites: Counter[str] = Counter()
        self.reach: attention_sites.Reach | None = None  # which text-side sites the node made this override reach
        self.failed_keys: dict[tuple[Any, ...], str] = {}
        self.configs_used: set[str] = set()

    # deepcopy of model_options (OCT25 clone) must keep the one shared counter object.
    def __deepcopy__(self, memo: dict[int, Any]) -> SageAttentionOverride:
        return self

    def __copy__(self) -> SageAttentionOverride:
        return self

    def config_for(self, q: torch.Tensor) -> sage_turing.LaunchConfig:
        head_dim = q.shape[-1]
        if self.config_choice == "turing-safe":
            return sage_turing.turing_safe_config(head_dim)
        if self.config_choice == "package-default":
            return sage_turing.package_default_config(head_dim, q.dtype)
        return sage_turing.choose_config(tuple(torch.cuda.get_device_capability(q.device)), head_dim, q.dtype)

    def _fallback(self, reason: str) -> None:
        with self.lock:
            self.fallbacks[reason] += 1
        log_once(f"H3KitSageAttention:{reason}", f"H3KitSageAttention: falling back to ComfyUI attention: {reason}")

    def _original(self, original_fn: Any, q: Any, k: Any, v: Any, heads: int, **kwargs: Any) -> Any:
        if self.previous is not None:
            return self.previous(original_fn, q, k, v, heads, **kwargs)
        return original_fn(q, k, v, heads, **kwargs)

    def __call__(self, original_fn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
                 mask: Any = None, skip_reshape: bool = False, skip_output_reshape: bool = False,
                 **kwargs: Any) -> torch.Tensor:
        with self.lock:
            self.calls += 1
            self.sites[attention_sites.call_site(q, k, kwargs)] += 1
        passthrough = dict(mask=mask, skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape, **kwargs)
        try:
            qh, kh, vh, batch, head_dim = _to_hnd(q, k, v, heads, skip_reshape)
            sage_turing.check_supported(qh, kh, vh, mask)
            config = self.config_for(qh)
        except sage_turing.UnsupportedAttention as exc:
            self._fallback(str(exc))
            return self._original(original_fn, q, k, v, heads, **passthrough)
        key = (head_dim, qh.dtype, config.name, qh.device.index)
        if key in self.failed_keys:
            self._fallback(self.failed_keys[key])
            return self._original(original_fn, q, k, v, heads, **passthrough)
        try:
            out = sage_turing.sage_attention_hnd(qh, kh, vh, config)
        except Exception as exc:  # noqa: BLE001 - any kernel failure (Triton out of resources, compile error) must fall back, visibly
            reason = f"kernel failed for head_dim {head_dim} {qh.dtype} ({config.name}): {type(exc).__name__}: {exc}"
            self.failed_keys[key] = reason[:400]
            self._fallback(self.failed_keys[key])
            return self._original(original_fn, q, k, v, heads, **passthrough)
        with self.lock:
            self.sage_calls += 1
            self.configs_used.add(f"{config.name} (num_stages={config.num_stages}, fp16 out={config.fp16_output})")
        if skip_output_reshape:
            return out
        return out.transpose(1, 2).reshape(batch, -1, heads * head_dim)

    def reset(self) -> None:
        with self.lock:
            self.calls, self.sage_calls = 0, 0
            self.fallbacks.clear()
            self.sites.clear()
            self.configs_used.clear()

    def summary(self) -> str:
        with self.lock:
            text = (f"H3KitSageAttention: sampling done: {self.calls} attention calls, {self.sage_calls} on "
                    f"SageAttention kernels [{', '.join(sorted(self.configs_used)) or 'none'}], "
                    f"{sum(self.fallbacks.values())} fell back to ComfyUI attention")
            if self.fallbacks:
                text += ": " + "; ".join(f"{n}x {reason}" for reason, n in self.fallbacks.most_common())
            text += f"; by site: {attention_sites.site_summary(self.sites, self.reach)}"
        return text

    def sampling_wrapper(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        """OUTER_SAMPLE wrapper: counts start at zero for each sampling and are logged when it ends."""
        self.reset()
        try:
            return executor(*args, **kwargs)
        finally:
            LOG.log(logging.WARNING if self.fallbacks else logging.INFO, "%s", self.summary())


def _to_hnd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int,
            skip_reshape: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """ComfyUI passes [B, H, S, D] (skip_reshape) or [B, S, H*D]; the kernels take [B, H, S, D] views."""
    if skip_reshape:
        if q.ndim != 4:
            raise sage_turing.UnsupportedAttention(f"q of shape {tuple(q.shape)} with skip_reshape (expects 4-D)")
        return q, k, v, q.shape[0], q.shape[-1]
    if q.ndim != 3 or q.shape[-1] % heads:
        raise sage_turing.UnsupportedAttention(f"q of shape {tuple(q.shape)} for {heads} heads")
    batch, head_dim = q.shape[0], q.shape[-1] // heads
    views = [t.view(t.shape[0], -1, heads, head_dim).transpose(1, 2) for t in (q, k, v)]
    return views[0], views[1], views[2], batch, head_dim


class H3KitSageAttention:
    DISPLAY_NAME = "H3Kit SageAttention (Turing-safe)"
    CATEGORY = category("Turing")
    DESCRIPTION = ("Runs attention through SageAttention 1.0.6's int8 Triton kernels with a launch that fits "
                   "Turing's 64 KiB shared memory (no site-packages edits). Reaches the diffusion blocks and, "
                   "through a patch of their attention modules, the H3 token refiner and LTX text connectors "
                   "(ComfyUI calls those without the hook; the report's coverage lists each site). Calls the kernels "
                   "cannot serve (masks, other head sizes, CPU) use ComfyUI's attention; a count of both, per site, "
                   "is logged after each sampling.")
    FUNCTION = "patch"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")
    REQUIRES = ("sageattention", "triton")
    OPTIONAL_INSTALL = ("It is for RTX 20xx (sm_75) only: pip install sageattention==1.0.6 with Triton 3.2 (torch 2.6's); "
                        "newer GPUs use ComfyUI's own --use-sage-attention with sageattention 2.x.")

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {
            "model": ("MODEL", {"tooltip": "The diffusion model whose attention calls should use SageAttention "
                                           "(cloned; the input stays unchanged)."}),
            "config": (list(SAGE_CONFIGS), {
                "default": "auto",
                "tooltip": "auto: Turing-safe launch on sm_75 and older, the package's own launch elsewhere. "
                           "turing-safe: num_stages=1 and an fp16 output tile on any GPU. package-default: "
                           "exactly what sageattention launches (overflows 64 KiB on Turing for fp32 models).",
            }),
        }}

    def patch(self, model: Any, config: str) -> tuple[Any, str]:
        if config not in SAGE_CONFIGS:
            raise H3KitInputError("H3KitSageAttention", "config", config, "unknown launch configuration",
                                  "choose one of " + ", ".join(SAGE_CONFIGS))
        report = Report("H3KitSageAttention")
        capability = device_capability(getattr(model, "load_device", None))
        report.set(config=config, device=str(getattr(model, "load_device", None)),
                   capability=f"sm_{capability[0]}{capability[1]}" if capability else None)
        _warn_f10(report, model, capability)
        versions = _package_versions(report)
        if versions is None:
            return model, report.json()
        if capability is None:
            report.fallback("no_cuda", "the model does not run on a CUDA device; attention left unchanged")
            return model, report.json()
        patched = model.clone()
        options = patched.model_options
        transformer_options = options["transformer_options"] = dict(options.get("transformer_options", {}))
        previous = transformer_options.get(OVERRIDE_KEY)
        if previous is not None:
            report.warn(f"another attention override ({type(previous).__name__}) was installed; calls the "
                        "kernels cannot serve go to it")
        override = SageAttentionOverride(config, previous)
        transformer_options[OVERRIDE_KEY] = override
        install_sampling_summary(patched, WRAPPER_KEY, override.sampling_wrapper, report)
        attention_sites.reach_and_report(patched, override, report)
        head_dim_plan = {hd: _describe_config(override, capability, hd) for hd in sage_turing.SUPPORTED_HEAD_DIMS}
        report.set(sageattention=versions[0], triton=versions[1], launch=head_dim_plan,
                   counts="logged after each sampling: look for 'H3KitSageAttention: sampling done' in the "
                          "ComfyUI console (calls on SageAttention, fallbacks and their reasons, calls per site)")
        return patched, report.json()


def _describe_config(override: SageAttentionOverride, capability: tuple[int, int], head_dim: int) -> str:
    if override.config_choice == "turing-safe" or (override.config_choice == "auto" and capability < (8, 0)):
        chosen = sage_turing.turing_safe_config(head_dim)
    else:
        chosen = sage_turing.package_default_config(head_dim)
    return (f"{chosen.name}: BLOCK_M={chosen.block_m} (= quant block), num_warps={chosen.num_warps}, "
            f"num_stages={chosen.num_stages}, fp16 output={'yes' if chosen.fp16_output else 'input dtype'}")


def _package_versions(report: Report) -> tuple[str, str] | None:
    """Import sageattention + triton now (lazily); a broken install is a reported fallback, not a crash."""
    try:
        import sageattention.core  # noqa: F401 - proves the kernels import
        import triton
    except Exception as exc:  # noqa: BLE001 - a broken optional install must degrade to ComfyUI attention
        report.fallback("import", f"sageattention/triton failed to import ({type(exc).__name__}: {exc}); "
                                  "attention left unchanged. Fix: pip install sageattention==1.0.6 triton")
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        sage_version = version("sageattention")
    except PackageNotFoundError:
        sage_version = "unknown"
    if sage_version != "1.0.6":
        report.warn(f"sageattention {sage_version} is installed; this launcher was written against 1.0.6's "
                    "kernel signatures (calls that do not match fall back, counted)")
    return sage_version, triton.__version__


NODES = [H3KitComputeDtype, H3KitSageAttention]
