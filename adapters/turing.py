"""Turing (sm_75) glue: fp16 compute for LTX and MiniMax-H3, and the int8-convrot refine warning (F10).

LTX declares bf16/fp32 as its only inference dtypes, so on a GPU without bf16 ComfyUI computes LTX in
fp32 (F04: 33% slower; `--fp16-unet` never reaches quantized models). The startup adapter puts fp16
first in `supported_inference_dtypes` of LTXV/LTXAV, the host's own dtype-policy mechanism, so both
plain and quantized checkpoints pick fp16. It acts only inside a running ComfyUI whose device lacks bf16;
a plain `import h3kit` never imports comfy and never initialises CUDA.

MiniMax-H3 declares [bf16, fp32] too (ComfyUI 0.33.0). All-fp16 is not safe for it: its residual stream is not
normalised and fp16 saturates at 65504 (measured on the real block, docs/turing.md), so the startup adapter leaves
H3's class policy at fp32 and says so once. fp16 where it is safe is per model: `H3Fp16Sublayer` runs each block's
attention and feed-forward (their inputs are RMS-normalised and modulated, and they hold nearly all the FLOPs) in
fp16 through the host's own forwards, while the residual stream, norms, modulation, embeddings and output heads stay
fp32; an fp16 result that is not finite is recomputed in fp32 for that call, counted and logged.
H3KitComputeDtype installs it (nodes/turing.py).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .log import LOG

OPT_OUT_ENV = "H3KIT_TURING_FP16"
LTX_CONFIG_CLASSES = ("LTXV", "LTXAV")
H3_CONFIG_CLASSES = ("MiniMaxH3",)
H3_FP16_SUBLAYERS = ("attn", "mlp")  # what H3Fp16Sublayer runs in fp16, per block
_OFF_VALUES = {"0", "false", "off", "no"}
_ON_VALUES = {"", "1", "true", "on", "yes"}
GGUF_REFINER_HINT = "ltx-2.5-22b-distilled-transformer-bf16-Q4_K_M.gguf (UnetLoaderGGUF)"

Capability = tuple[int, int]


@dataclass(frozen=True)
class Fp16Decision:
    """Whether the fp16 preference should be installed, and why (the why ends up in the startup log)."""

    apply: bool
    reason: str


def device_lacks_bf16(capability: Capability, bf16_supported: bool | None = None) -> bool:
    """True for sm_7x and older (native bf16 starts at sm_80), or when the device says it has no bf16."""
    if bf16_supported is not None and not bf16_supported:
        return True
    return capability < (8, 0)


def decide_turing_fp16(
    capability: Capability | None, bf16_supported: bool | None = None, env_value: str | None = None
) -> Fp16Decision:
    """Pure decision: capability (None = no CUDA device), optional bf16 probe, and the opt-out variable."""
    if capability is None:
        return Fp16Decision(False, "no CUDA device in use")
    name = f"sm_{capability[0]}{capability[1]}"
    if not device_lacks_bf16(capability, bf16_supported):
        return Fp16Decision(False, f"{name} computes bf16 natively; LTX keeps its bf16 policy")
    value = (env_value or "").strip().lower()
    if value in _OFF_VALUES:
        return Fp16Decision(False, f"{name} has no bf16 but {OPT_OUT_ENV}={env_value} opts out; LTX stays fp32")
    return Fp16Decision(True, f"{name} has no bf16")


def prefer_fp16(dtypes: list[Any], fp16: Any) -> list[Any]:
    """The same policy with fp16 moved to the front (idempotent)."""
    return [fp16] + [dt for dt in dtypes if dt != fp16]


def install_fp16_preference(supported_models: Any, fp16: Any) -> dict[str, tuple[list[Any], list[Any]]]:
    """Put fp16 first in each LTX config's supported_inference_dtypes; returns {class: (before, after)} changed."""
    changed: dict[str, tuple[list[Any], list[Any]]] = {}
    # Read every policy before writing any: LTXAV inherits LTXV's list, so writing LTXV first would hide it.
    present = {name: getattr(supported_models, name) for name in LTX_CONFIG_CLASSES if hasattr(supported_models, name)}
    before = {name: list(cls.supported_inference_dtypes) for name, cls in present.items()}
    for class_name, config_cls in present.items():
        after = prefer_fp16(before[class_name], fp16)
        if after != before[class_name]:
            config_cls.supported_inference_dtypes = after  # set on each class itself, not through inheritance
            changed[class_name] = (before[class_name], after)
    return changed


def _probe_host_device() -> tuple[Capability | None, bool | None]:
    """Capability of ComfyUI's torch device; only called when ComfyUI has already initialised CUDA."""
    model_management = sys.modules["comfy.model_management"]
    device = model_management.get_torch_device()
    if getattr(device, "type", None) != "cuda" or not torch.cuda.is_initialized():
        return None, None
    capability = tuple(torch.cuda.get_device_capability(device))
    with torch.cuda.device(device):
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return capability, bf16  # type: ignore[return-value]


def _dtype_names(dtypes: list[Any]) -> str:
    return "[" + ", ".join(str(dt).replace("torch.", "") for dt in dtypes) + "]"


def apply_turing_fp16_at_startup() -> Fp16Decision:
    """Called from the pack's __init__: inert outside ComfyUI, on bf16 devices and when opted out."""
    if "comfy.supported_models" not in sys.modules or "comfy.model_management" not in sys.modules:
        return Fp16Decision(False, "not running inside ComfyUI")
    capability, bf16 = _probe_host_device()
    env_value = os.environ.get(OPT_OUT_ENV)
    if env_value is not None and env_value.strip().lower() not in _OFF_VALUES | _ON_VALUES:
        LOG.warning("H3Kit: %s=%r is not understood (use 0 to opt out); treating it as on", OPT_OUT_ENV, env_value)
    decision = decide_turing_fp16(capability, bf16, env_value)
    if not decision.apply:
        level = logging.INFO if "opts out" in decision.reason else logging.DEBUG
        LOG.log(level, "H3Kit Turing fp16: not applied (%s)", decision.reason)
        return decision
    supported_models = sys.modules["comfy.supported_models"]
    changed = install_fp16_preference(supported_models, torch.float16)
    if changed:
        parts = "; ".join(f"{name} {_dtype_names(b)} -> {_dtype_names(a)}" for name, (b, a) in changed.items())
        LOG.info("H3Kit Turing fp16 (%s): LTX compute dtype policy %s. Opt out: %s=0", decision.reason, parts, OPT_OUT_ENV)
    else:
        LOG.info("H3Kit Turing fp16 (%s): LTX configs already prefer fp16 (or are absent); nothing changed",
                 decision.reason)
    h3_note = h3_policy_note(supported_models)
    if h3_note:
        LOG.info("H3Kit Turing fp16 (%s): %s", decision.reason, h3_note)
    return decision


def h3_policy_note(supported_models: Any) -> str:
    """What the startup adapter does for MiniMax-H3 on a GPU without bf16 (it keeps the class policy), or ""."""
    present = [name for name in H3_CONFIG_CLASSES if hasattr(supported_models, name)]
    if not present:
        return ""
    policies = "; ".join(f"{name} {_dtype_names(list(getattr(supported_models, name).supported_inference_dtypes))}"
                         for name in present)
    return (f"{policies} kept: all-fp16 would run H3's residual stream in fp16, which saturates (docs/turing.md). "
            "H3KitComputeDtype (auto) runs H3's attention and feed-forward in fp16 and keeps the residual in fp32")


# ---------------------------------------------------------------------------------------------- H3 fp16 sublayers


class Fp16Ledger:
    """Calls per (sublayer, outcome), shared by every block's patch of one model; a new outcome is logged once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts: dict[str, dict[str, int]] = {}

    def record(self, kind: str, outcome: str) -> None:
        with self.lock:
            per_kind = self.counts.setdefault(kind, {})
            per_kind[outcome] = per_kind.get(outcome, 0) + 1
            first = per_kind[outcome] == 1
        if first:
            level = logging.INFO if outcome == "fp16" else logging.WARNING
            LOG.log(level, "H3Kit Turing fp16: H3 %s: %s", kind, outcome)


def _to_half(value: Any) -> Any:
    """fp32 tensors (the sublayer input, the RoPE table) as fp16; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(torch.float16)
    return value


class H3Fp16Sublayer:
    """`blocks[i].attn.forward` / `blocks[i].mlp.forward` in fp16 inside an fp32 H3 (an object patch).

    The fp32 input (`h`: RMS-normalised, modulated) and the fp32 RoPE table are cast to fp16 (the table an fp16
    model builds itself) and the forward that was in place runs: the host's layers cast their weights to the input's
    dtype, int8 kernels return fp16, attention gets fp16 q/k/v. The result goes back to fp32 for the gated residual.
    A result that is not finite (an fp16 overflow) is recomputed in fp32 for that call, counted and logged.
    Inputs that are not fp32 (a model already computing in fp16/bf16) pass through unchanged.

    Other H3Kit patches of the same forward go inside this one (`wraps_inner`, `with_inner`), so the cast stays
    outermost whichever node ran first.
    """

    h3kit_patch = "turing_fp16"
    wraps_inner = True

    def __init__(self, inner: Any, kind: str, ledger: Fp16Ledger):
        self.inner, self.kind, self.ledger = inner, kind, ledger

    def with_inner(self, inner: Any) -> H3Fp16Sublayer:
        return H3Fp16Sublayer(inner, self.kind, self.ledger)

    def __call__(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
            return self.inner(x, *args, **kwargs)
        out = self.inner(x.to(torch.float16), *(_to_half(a) for a in args),
                         **{name: _to_half(value) for name, value in kwargs.items()})
        if bool(torch.isfinite(out).all()):
            self.ledger.record(self.kind, "fp16")
            return out.to(x.dtype)
        del out
        self.ledger.record(self.kind, "recomputed in fp32: the fp16 result overflowed (not finite)")
        return self.inner(x, *args, **kwargs)


def h3_block_count(net: Any) -> int:
    """Blocks of an H3 DiT whose attention (qkv_proj) and feed-forward (fc1/fc2) this patch understands; 0 if none."""
    blocks = getattr(net, "blocks", None)
    if blocks is None:
        return 0
    count = 0
    for block in blocks:
        attn, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
        if not (hasattr(attn, "qkv_proj") and hasattr(mlp, "fc1") and hasattr(mlp, "fc2")):
            return 0
        count += 1
    return count


# ---------------------------------------------------------------------------------------------- F10

def _layer_config_is_int8_convrot(config: Any) -> bool:
    return isinstance(config, Mapping) and "int8" in str(config.get("format", "")).lower() and bool(
        config.get("convrot")
    )


def _mapping_is_int8_convrot(source: Mapping[str, Any]) -> bool:
    """A quant_config ({layer: {format, convrot}}) or safetensors metadata naming int8 + convrot."""
    for value in source.values():
        if _layer_config_is_int8_convrot(value):
            return True
        if isinstance(value, str) and "convrot" in value.lower() and "int8" in value.lower():
            return True
    return False


def _describe_source(source: Any) -> tuple[str, bool | None, bool]:
    """(label, is_ltx or None when unknown, is_int8_convrot) for a file name, a mapping or a ModelPatcher."""
    if isinstance(source, str | os.PathLike):
        name = os.path.basename(os.fspath(source)).lower()
        return name, "ltx" in name, "convrot" in name and "int8" in name
    if isinstance(source, Mapping):
        return "model", None, _mapping_is_int8_convrot(source)
    base = getattr(source, "model", None)
    config = getattr(base, "model_config", None)
    is_ltx = type(config).__name__ in LTX_CONFIG_CLASSES if config is not None else None
    quant = getattr(config, "quant_config", None)
    return type(config).__name__ if config is not None else "model", is_ltx, isinstance(
        quant, Mapping
    ) and _mapping_is_int8_convrot(quant)


def int8_convrot_refine_warning(
    model_name_or_state: Any, capability: Capability | None, is_ltx: bool | None = None
) -> str | None:
    """The F10 warning text when an int8-convrot LTX checkpoint is about to refine on sm_7x, else None.

    Accepts a checkpoint file name, a quant-config / metadata mapping, or a ComfyUI ModelPatcher.
    `is_ltx` overrides the LTX detection when the caller knows it (e.g. a doctor reading a workflow).
    """
    if capability is None or capability[0] != 7:
        return None
    label, detected_ltx, convrot = _describe_source(model_name_or_state)
    ltx = detected_ltx if is_ltx is None else is_ltx
    if not convrot or ltx is False or ltx is None:
        return None
    return (
        f"{label}: an int8-convrot LTX checkpoint refining on sm_{capability[0]}{capability[1]} produced an all-NaN "
        f"latent (black video, status success) in field tests (F10). Use the GGUF Q4_K_M refiner instead: "
        f"{GGUF_REFINER_HINT}."
    )
