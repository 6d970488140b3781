"""H3KitAttentionBackend: the host's attention calls on a chosen exact torch SDPA backend (cuDNN by default).

ComfyUI >= 0.33 ranks torch's flash kernel first for every SDPA call; on Hopper cuDNN's fused attention is
faster for the H3 and LTX shapes (docs/benchmarks.md, "Attention backends"). This node installs
`transformer_options["optimized_attention_override"]`, the host's own hook. The host hands it to every attention
call of the diffusion blocks (H3 `Attention`, LTX `CrossAttention`, the low-VRAM head groups), but calls the H3 token
refiner and the LTX text connectors without transformer_options (nodes/attention_sites.py lists the calls); their
attention modules' forwards are patched to pass the override (never a block's forward). Calls the backend cannot
serve (CPU, fp32, masks or head sizes it lacks, grouped-query attention) and inputs under the host's own small-input
cut run the host's attention (or the override installed before this node); each is counted per site, and the counts
are logged after every sampling.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

import torch

from ..adapters.log import LOG, log_once
from ..kernels import sdpa_backend
from . import attention_sites
from .attention_sites import OVERRIDE_KEY
from .common import H3KitInputError, Report, category, install_sampling_summary

WRAPPER_KEY = "h3kit_attention_backend"
CHOICES = ("cudnn", "flash", "efficient")
HOST_PATH_SMALL = "host: input under the host's small-input cut (ComfyUI calls default SDPA there too)"
PROBE_SHAPE = (1, 8, 1024, 128)  # above the small-input cut, head_dim of H3 and LTX video


class BackendOverride:
    """The optimized_attention_override callable; its counters are shared by every copy of the patch."""

    def __init__(self, backend: str, previous: Any = None):
        self.backend = backend
        self.previous = previous  # an override installed before this node: the host path goes through it
        self.lock = threading.Lock()
        self.paths: Counter[str] = Counter()
        self.sites: Counter[str] = Counter()
        self.reach: attention_sites.Reach | None = None  # which text-side sites the node made this override reach
        self.failed: dict[tuple[Any, ...], str] = {}

    # ComfyUI deep-copies model_options when it clones a patcher: keep the one shared counter object.
    def __deepcopy__(self, memo: dict[int, Any]) -> BackendOverride:
        return self

    def __copy__(self) -> BackendOverride:
        return self

    def __call__(self, original_fn: Any, q: Any, k: Any, v: Any, heads: int, mask: Any = None,
                 skip_reshape: bool = False, skip_output_reshape: bool = False, **kwargs: Any) -> torch.Tensor:
        call = dict(mask=mask, skip_reshape=skip_reshape, skip_output_reshape=skip_output_reshape, **kwargs)
        reason = self._unsupported(q, mask, kwargs)
        key = _signature(q, mask, skip_reshape, heads)
        site = attention_sites.call_site(q, k, kwargs)
        if not reason and key in self.failed:
            reason = self.failed[key]
        if not reason:
            try:
                out = sdpa_backend.attention(q, k, v, heads, self.backend, mask=mask, skip_reshape=skip_reshape,
                                             skip_output_reshape=skip_output_reshape, scale=kwargs.get("scale"))
            except sdpa_backend.BackendUnavailable as exc:
                reason = self.failed[key] = str(exc)
            else:
                self._count(self.backend, site)
                return out
        if reason != HOST_PATH_SMALL:
            log_once(f"{WRAPPER_KEY}:{reason}", f"H3KitAttentionBackend: the host's attention runs instead of "
                                               f"{self.backend}: {reason}")
        self._count(reason if reason == HOST_PATH_SMALL else f"host: {reason}", site)
        if self.previous is not None:
            return self.previous(original_fn, q, k, v, heads, **call)
        return original_fn(q, k, v, heads, **call)

    @staticmethod
    def _unsupported(q: Any, mask: Any, kwargs: dict) -> str:
        if not on_cuda(q):
            return f"not a CUDA tensor ({getattr(getattr(q, 'device', None), 'type', type(q).__name__)})"
        if kwargs.get("enable_gqa", False):
            return "grouped-query attention"
        if mask is not None and type(mask) is not torch.Tensor:
            return f"{type(mask).__name__} mask"
        if q.nelement() < sdpa_backend.SMALL_INPUT_ELEMENTS:
            return HOST_PATH_SMALL
        return ""

    def _count(self, path: str, site: str) -> None:
        with self.lock:
            self.paths[path] += 1
            self.sites[site] += 1

    def reset(self) -> None:
        with self.lock:
            self.paths.clear()
            self.sites.clear()

    def summary(self) -> str:
        with self.lock:
            total = sum(self.paths.values())
            ran = self.paths.get(self.backend, 0)
            other = "; ".join(f"{n}x {path}" for path, n in self.paths.most_common() if path != self.backend)
            sites = attention_sites.site_summary(self.sites, self.reach)
        return (f"H3KitAttentionBackend: sampling done: {total} attention calls, {ran} on torch SDPA "
                f"{self.backend}" + (f"; {other}" if other else "") + f"; by site: {sites}")

    def sampling_wrapper(self, executor: Any, *args: Any, **kwargs: Any) -> Any:
        """OUTER_SAMPLE wrapper: counts start at zero for each sampling and are logged when it ends."""
        self.reset()
        try:
            return executor(*args, **kwargs)
        finally:
            fell_back = any(path.startswith("host: ") and path != HOST_PATH_SMALL for path in self.paths)
            LOG.log(logging.WARNING if fell_back else logging.INFO, "%s", self.summary())


def on_cuda(q: Any) -> bool:
    return type(q) is torch.Tensor and q.device.type == "cuda"


def _signature(q: Any, mask: Any, skip_reshape: bool, heads: int) -> tuple[Any, ...]:
    """What decides whether a backend can run a call, sequence length aside."""
    head_dim = q.shape[-1] if skip_reshape else q.shape[-1] // max(1, heads)
    mask_shape = None if mask is None else (mask.dtype, mask.ndim)
    return (q.dtype, head_dim, q.device.index, mask_shape)


def probe(backend: str, device: Any) -> tuple[bool, str]:
    """Run `backend` once on a small bf16 attention on `device`: (ran, what happened)."""
    device = torch.device(device) if device is not None else None
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        return False, f"the model runs on {device}, not a CUDA device: every call uses the host's attention"
    q = torch.randn(PROBE_SHAPE, device=device, dtype=torch.bfloat16)
    try:
        sdpa_backend.attention(q, q, q, PROBE_SHAPE[1], backend, skip_reshape=True, skip_output_reshape=True)
    except sdpa_backend.BackendUnavailable as exc:
        return False, f"{exc}: every call uses the host's attention"
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    return True, f"{backend} ran a {PROBE_SHAPE} bf16 probe on {name} (sm_{major}{minor})"


class H3KitAttentionBackend:
    DISPLAY_NAME = "H3Kit Attention Backend (exact, faster on Hopper)"
    CATEGORY = category("Speed")
    DESCRIPTION = ("Runs the model's attention on one torch SDPA backend instead of the one ComfyUI ranks first "
                   "(flash). cuDNN is exact attention and faster on H100/H200 for H3 and LTX-2.5 shapes; its "
                   "result differs from flash's only by bf16 rounding (measured on a whole clip: docs/benchmarks.md). "
                   "Reaches every attention call of the diffusion blocks and, through a patch of their attention "
                   "modules, the H3 token refiner and LTX text connectors (ComfyUI calls those without the hook); "
                   "the report's coverage lists each site. Calls it cannot serve run ComfyUI's attention, counted per "
                   "site and logged after each sampling. Works with the low-VRAM nodes in any order.")
    FUNCTION = "patch"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {"required": {
            "model": ("MODEL", {"tooltip": "The diffusion model (H3 or LTX-2.5) whose attention calls (diffusion "
                                           "blocks, H3 token refiner, LTX text connectors) should use this backend "
                                           "(cloned; the input stays unchanged)."}),
            "backend": (list(CHOICES), {
                "default": "cudnn",
                "tooltip": "cudnn: cuDNN fused attention (fastest measured on H200). flash: torch's FlashAttention-2 "
                           "(what ComfyUI already picks on most NVIDIA GPUs). efficient: torch's memory-efficient "
                           "kernel. All exact; results differ from each other by rounding only.",
            }),
        }}

    def patch(self, model: Any, backend: str) -> tuple[Any, str]:
        if backend not in CHOICES:
            raise H3KitInputError("H3KitAttentionBackend", "backend", backend, "unknown attention backend",
                                  "choose one of " + ", ".join(CHOICES))
        report = Report("H3KitAttentionBackend")
        ran, probe_text = probe(backend, getattr(model, "load_device", None))
        report.set(backend=f"torch SDPA {backend}", probe=probe_text)
        if not ran:
            report.fallback("probe", probe_text)
        patched = model.clone()
        options = patched.model_options
        transformer_options = options["transformer_options"] = dict(options.get("transformer_options", {}))
        previous = transformer_options.get(OVERRIDE_KEY)
        if isinstance(previous, BackendOverride):
            previous = previous.previous  # re-applying replaces this node's own choice instead of nesting it
        elif previous is not None:
            report.warn(f"another attention override ({type(previous).__name__}) was installed before this node: "
                        f"calls {backend} serves no longer reach it; the rest still go through it")
        override = BackendOverride(backend, previous)
        transformer_options[OVERRIDE_KEY] = override
        install_sampling_summary(patched, WRAPPER_KEY, override.sampling_wrapper, report)
        attention_sites.reach_and_report(patched, override, report)
        report.set(exact="yes: softmax attention without quantization or sparsity; differs from ComfyUI's flash "
                         "kernel by bf16 rounding only (docs/benchmarks.md)",
                   host_path=f"CPU/fp32/grouped-query calls, masks the backend lacks and inputs under "
                             f"{sdpa_backend.SMALL_INPUT_ELEMENTS} elements run the host's attention",
                   counts="logged after each sampling, per site: 'H3KitAttentionBackend: sampling done' in the "
                          "console")
        return patched, report.json()


NODES = [H3KitAttentionBackend]
