"""Low-VRAM patches for the H3 DiT and the LTX-2.5 transformer: head-group attention, token-chunked FFN.

Both nodes clone the model patcher and add one object patch per block module on a dotted key
(`diffusion_model.blocks.<i>.attn.forward`, `diffusion_model.transformer_blocks.<i>.ff.forward`, ...);
the input model is never touched. The patched forwards are exact (kernels/chunked.py says why) and
call the host's own `optimized_attention`, so SageAttention and `optimized_attention_override`
patches keep working in either node order. A model whose structure does not match is returned
unchanged, said in the report and the log.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import torch

from ..adapters.host import HostUnavailable, host_module
from ..kernels import chunked
from .common import H3KitInputError, Report, category, log_once

SETTINGS_KEY = "h3kit_lowvram"
LTX_ATTENTION_NAMES = ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")
LTX_FFN_NAMES = ("ff", "audio_ff")
AUTO_RULE = ("auto: per forward, budget = free device memory / 16 clamped to [128 MiB, 1 GiB]; "
             "head_chunks = ceil(heads / max(1, budget // (4*tokens*head_dim*bytes))); "
             "ffn chunks = ceil(tokens / max(1, budget // (2*ffn_width*bytes))), 1 below seq_threshold")


# ----------------------------------------------------------------------------------------------
# structure


@dataclass
class Target:
    """One module to patch: its dotted key (without '.forward') and the module itself."""
    key: str
    module: Any
    kind: str  # "h3_attn" | "ltx_attn" | "ffn"


@dataclass
class Structure:
    family: str | None
    attention: list[Target] = field(default_factory=list)
    ffn: list[Target] = field(default_factory=list)
    reason: str = ""


def _is_h3_attention(module: Any) -> bool:
    return all(hasattr(module, a) for a in ("qkv_proj", "q_norm", "k_norm", "out_proj", "heads", "head_dim"))


def _is_ltx_attention(module: Any) -> bool:
    return all(hasattr(module, a) for a in ("to_q", "to_k", "to_v", "to_out", "q_norm", "k_norm", "heads", "dim_head"))


def find_structure(model: Any) -> Structure:
    """H3 (`blocks[i].attn/.mlp`) or LTX (`transformer_blocks[i].attn1.../ff`) targets of a ModelPatcher."""
    try:
        net = model.get_model_object("diffusion_model")
    except (AttributeError, KeyError) as exc:
        return Structure(None, reason=f"no diffusion_model on this MODEL ({type(exc).__name__}: {exc})")
    blocks = getattr(net, "blocks", None)
    if blocks is not None and len(blocks) and _is_h3_attention(getattr(blocks[0], "attn", None)):
        found = Structure("h3")
        for i, block in enumerate(blocks):
            if _is_h3_attention(getattr(block, "attn", None)):
                found.attention.append(Target(f"diffusion_model.blocks.{i}.attn", block.attn, "h3_attn"))
            mlp = getattr(block, "mlp", None)
            if mlp is not None and hasattr(mlp, "fc1") and hasattr(mlp, "fc2"):
                found.ffn.append(Target(f"diffusion_model.blocks.{i}.mlp", mlp, "ffn"))
        return found
    blocks = getattr(net, "transformer_blocks", None)
    if blocks is not None and len(blocks):
        found = Structure("ltx")
        for i, block in enumerate(blocks):
            for name in LTX_ATTENTION_NAMES:
                module = getattr(block, name, None)
                if module is not None and _is_ltx_attention(module):
                    found.attention.append(Target(f"diffusion_model.transformer_blocks.{i}.{name}", module, "ltx_attn"))
            for name in LTX_FFN_NAMES:
                module = getattr(block, name, None)
                if module is not None and hasattr(module, "net"):
                    found.ffn.append(Target(f"diffusion_model.transformer_blocks.{i}.{name}", module, "ffn"))
        if found.attention or found.ffn:
            return found
    return Structure(None, reason=f"{type(net).__name__} has neither H3 `blocks[i].attn` (qkv_proj, q_norm, k_norm, "
                                  "out_proj) nor LTX `transformer_blocks[i]` (attn1/attn2/ff)")


# ----------------------------------------------------------------------------------------------
# host attention


def host_attention(attn_module: Any) -> tuple[chunked.AttentionFn, dict[str, Any], str]:
    """The attention function the host's own forward would call, its extra kwargs, and where it came from.

    Looked up at call time in the module that defines the attention class (H3 binds `optimized_attention`
    there), else in `comfy.ldm.modules.attention`; outside ComfyUI, torch SDPA (reported as a fallback).
    """
    source = sys.modules.get(type(attn_module).__module__)
    fn = getattr(source, "optimized_attention", None)
    origin = f"{type(attn_module).__module__}.optimized_attention"
    try:
        core = host_module("comfy.ldm.modules.attention")
    except HostUnavailable:
        core = None
    if fn is None and core is not None:
        fn, origin = core.optimized_attention, "comfy.ldm.modules.attention.optimized_attention"
    if fn is None:
        return chunked.sdpa_attention, {}, "torch SDPA"
    container = getattr(source, "AttentionTensorContainer", None) or getattr(core, "AttentionTensorContainer", None)
    extra: dict[str, Any] = {}
    if getattr(attn_module, "comfy_attention", None) is not None:
        extra["preferred_attention"] = attn_module.comfy_attention
    if container is None:
        return fn, extra, origin

    def call_with_containers(q, k, v, heads, **kwargs):
        return fn(container(q), container(k), container(v), heads, **kwargs)

    return call_with_containers, extra, origin


# ----------------------------------------------------------------------------------------------
# patches (callables installed as `<module>.forward`)


def _log_auto(kind: str, tokens: int, count: int) -> None:
    log_once(f"lowvram:auto:{kind}:{tokens}:{count}", f"H3Kit low-VRAM: {tokens} tokens -> {kind} {count} (auto)",
             level=20)


class H3AttentionPatch:
    """H3 `Attention.forward(x, rope_freqs, transformer_options)` computed one head group at a time."""

    h3kit_patch = "lowvram_attention"

    def __init__(self, module: Any, head_chunks: int, per_group_projection: bool):
        self.module, self.head_chunks, self.per_group_projection = module, head_chunks, per_group_projection

    def __call__(self, x, rope_freqs=None, transformer_options=None):
        options = {} if transformer_options is None else transformer_options
        attn = self.module
        groups = self.head_chunks or auto_groups(x, attn.heads, attn.head_dim)
        fn, extra, _origin = host_attention(attn)
        return chunked.h3_head_group_attention(
            x, attn.qkv_proj, attn.q_norm, attn.k_norm, attn.out_proj, attn.heads, attn.head_dim, rope_freqs,
            groups, fn, per_group_projection=self.per_group_projection, transformer_options=options, **extra)


def auto_groups(x: torch.Tensor, heads: int, head_dim: int) -> int:
    tokens = x.shape[-2] if x.dim() > 2 else x.shape[0]
    groups = chunked.auto_head_chunks(tokens, heads, head_dim, x.element_size(), chunked.free_device_bytes(x.device))
    _log_auto("head_chunks", tokens, groups)
    return groups


class LTXAttentionPatch:
    """LTX `CrossAttention.forward` with head-group attention; calls the original forward where it cannot apply."""

    h3kit_patch = "lowvram_attention"

    def __init__(self, module: Any, head_chunks: int, slice_v: bool, original: Any):
        self.module, self.head_chunks, self.slice_v, self.original = module, head_chunks, slice_v, original

    def __call__(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options=None):
        options = {} if transformer_options is None else transformer_options
        reason = self._unsupported(context, mask, options)
        if reason:
            log_once(f"lowvram:ltx:{reason}", f"H3Kit low-VRAM attention: {reason}; that call runs the original forward")
            return self.original(x, context=context, mask=mask, pe=pe, k_pe=k_pe, transformer_options=options)
        attn = self.module
        groups = self.head_chunks or auto_groups(x, attn.heads, attn.dim_head)
        fn, extra, _origin = host_attention(attn)
        return chunked.ltx_head_group_attention(attn, x, context, mask, pe, k_pe, groups, fn, slice_v=self.slice_v,
                                                transformer_options=options, **extra)

    @staticmethod
    def _unsupported(context: Any, mask: Any, options: dict) -> str:
        if context is None and options.get("stg_skip_self_attn", False):
            return "STG value passthrough"
        if mask is not None and not isinstance(mask, torch.Tensor):
            return f"{type(mask).__name__} mask (guide attention)"
        if isinstance(mask, torch.Tensor) and mask.ndim == 4 and mask.shape[1] != 1:
            return "per-head attention mask"
        return ""


class ChunkedFFNPatch:
    """A per-token feed-forward run on token chunks; `inner` is the forward that was in place before."""

    h3kit_patch = "chunk_ffn"

    def __init__(self, inner: Any, chunks: int, seq_threshold: int, width: int | None):
        self.inner, self.chunks, self.seq_threshold, self.width = inner, chunks, seq_threshold, width

    def __call__(self, x, *args, **kwargs):
        dim = 0 if x.dim() == 2 else x.dim() - 2
        tokens = x.shape[dim]
        if tokens < self.seq_threshold:
            return self.inner(x, *args, **kwargs)
        count = self.chunks
        if not count:
            width = self.width or x.shape[-1] * 4
            count = chunked.auto_ffn_chunks(tokens, width, x.element_size(), chunked.free_device_bytes(x.device))
            _log_auto("ffn chunks", tokens, count)
        return chunked.chunked_tokens(lambda part: self.inner(part, *args, **kwargs), x, count, dim=dim)


# ----------------------------------------------------------------------------------------------
# shared node plumbing


def _check_count(node: str, name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise H3KitInputError(node, name, value, f"must be an integer in {low}..{high}",
                              f"use 0 for auto, or a count between 1 and {high}")
    return value


def _with_settings(model: Any, **settings: Any) -> None:
    """Record settings in a copied transformer_options (never the input's dict)."""
    old = model.model_options.get("transformer_options", {})
    options = dict(old)
    options[SETTINGS_KEY] = {**old.get(SETTINGS_KEY, {}), **settings}
    model.model_options = dict(model.model_options)
    model.model_options["transformer_options"] = options


def _existing_patch(model: Any, key: str) -> Any:
    return getattr(model, "object_patches", {}).get(key)


def _unchanged(model: Any, report: Report, key: str, message: str):
    report.set(status="unchanged")
    report.fallback(key, message)
    return (model, report.json())


# ----------------------------------------------------------------------------------------------
# nodes


class H3KitLowVRAMAttention:
    DISPLAY_NAME = "H3Kit Low-VRAM Attention (head groups)"
    CATEGORY = category("Memory")
    DESCRIPTION = ("Runs attention one head group at a time on the H3 DiT and LTX-2.5 blocks: q/k/v are projected "
                   "per group, so the fused qkv buffer never exists whole. Output identical to the unpatched model; "
                   "the host's attention (SageAttention, overrides) still applies. Use it when a long or large video "
                   "runs out of memory or gets very slow (spills into system memory).")
    FUNCTION = "patch"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "An H3 or LTX-2.5 diffusion model. It is cloned; the input is not modified."}),
            "head_chunks": ("INT", {"default": 0, "min": 0, "max": 64, "step": 1, "tooltip":
                                    "Head groups per attention layer. 0 = auto (from tokens, heads and free VRAM, each "
                                    "group under ~1 GiB); 1 = off (model returned unchanged); 16 is a good manual value "
                                    "for H3 at 1344x768x362. Too few groups can spill into system memory and run slower."}),
        }}

    def patch(self, model, head_chunks=0):
        node = type(self).__name__
        head_chunks = _check_count(node, "head_chunks", head_chunks, 0, 64)
        report = Report(node).set(head_chunks="auto" if head_chunks == 0 else head_chunks)
        if head_chunks == 1:
            report.set(status="unchanged", note="head_chunks = 1 means off")
            return (model, report.json())
        found = find_structure(model)
        if found.family is None or not found.attention:
            return _unchanged(model, report, f"structure:{found.reason}", f"model returned unchanged: {found.reason or 'no attention layers'}")
        patched = model.clone()
        counts = {"patched": 0, "whole_projection": 0, "kept_foreign": 0}
        for target in found.attention:
            self._patch_one(patched, target, head_chunks, counts, report, found.family)
        if counts["patched"] == 0:
            return _unchanged(model, report, "foreign", "model returned unchanged: every attention layer already "
                              "carries another node's patch")
        _with_settings(patched, head_chunks=head_chunks)
        _fn, _extra, origin = host_attention(found.attention[0].module)
        if origin == "torch SDPA":
            report.fallback("sdpa", "ComfyUI's attention function is not importable here; torch SDPA is used")
        report.set(status="patched", family=found.family, layers_patched=counts["patched"],
                   per_group_projection=counts["patched"] - counts["whole_projection"], attention_function=origin,
                   rule=AUTO_RULE if head_chunks == 0 else "fixed")
        return (patched, report.json())

    @staticmethod
    def _patch_one(patched, target: Target, head_chunks: int, counts: dict, report: Report, family: str) -> None:
        key = f"{target.key}.forward"
        existing = _existing_patch(patched, key)
        if existing is not None and getattr(existing, "h3kit_patch", None) != "lowvram_attention":
            counts["kept_foreign"] += 1
            report.fallback(f"foreign:{family}", f"{target.key}: another node already patched this forward; left as is")
            return
        module = target.module
        if target.kind == "h3_attn":
            reason = chunked.unsliceable_reason(module.qkv_proj)
            patch = H3AttentionPatch(module, head_chunks, per_group_projection=reason is None)
        else:
            reason = chunked.unsliceable_reason(module.to_v)
            original = existing.original if existing is not None else patched.get_model_object(key)
            patch = LTXAttentionPatch(module, head_chunks, slice_v=reason is None, original=original)
        if reason is not None:
            counts["whole_projection"] += 1
            report.fallback(f"whole:{family}:{reason}", f"{target.key}: projection run whole, not per head group ({reason})")
        patched.add_object_patch(key, patch)
        counts["patched"] += 1


class H3KitChunkFeedForward:
    DISPLAY_NAME = "H3Kit Chunk Feed-Forward (token chunks)"
    CATEGORY = category("Memory")
    DESCRIPTION = ("Runs the feed-forward of every H3 DiT / LTX-2.5 block on token chunks, so its 4-5x wide "
                   "intermediate never exists for the whole sequence. Output identical to the unpatched model.")
    FUNCTION = "patch"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "An H3 or LTX-2.5 diffusion model. It is cloned; the input is not modified."}),
            "chunks": ("INT", {"default": 0, "min": 0, "max": 256, "step": 1, "tooltip":
                               "Token chunks per feed-forward. 0 = auto (from tokens, FFN width and free VRAM, each "
                               "chunk under ~1 GiB); 1 = off (model returned unchanged); 8 is a good manual value for "
                               "H3 at 1344x768x362."}),
            "seq_threshold": ("INT", {"default": 4096, "min": 0, "max": 1048576, "step": 256, "tooltip":
                                      "Sequences shorter than this many tokens run unchunked (no overhead on small "
                                      "inputs such as text or audio streams)."}),
        }}

    def patch(self, model, chunks=0, seq_threshold=4096):
        node = type(self).__name__
        chunks = _check_count(node, "chunks", chunks, 0, 256)
        seq_threshold = _check_count(node, "seq_threshold", seq_threshold, 0, 1048576)
        report = Report(node).set(chunks="auto" if chunks == 0 else chunks, seq_threshold=seq_threshold)
        if chunks == 1:
            report.set(status="unchanged", note="chunks = 1 means off")
            return (model, report.json())
        found = find_structure(model)
        if found.family is None or not found.ffn:
            return _unchanged(model, report, f"structure:{found.reason}", f"model returned unchanged: {found.reason or 'no feed-forward layers'}")
        patched = model.clone()
        for target in found.ffn:
            key = f"{target.key}.forward"
            current = patched.get_model_object(key)
            if getattr(current, "h3kit_patch", None) == "chunk_ffn":
                current = current.inner  # re-applying replaces our own chunking instead of nesting it
            elif _existing_patch(patched, key) is not None:
                log_once(f"lowvram:ffn-compose:{found.family}", f"H3Kit: chunking around another node's patch on {key}")
            patched.add_object_patch(key, ChunkedFFNPatch(current, chunks, seq_threshold, chunked.ffn_width(target.module)))
        _with_settings(patched, ffn_chunks=chunks, seq_threshold=seq_threshold)
        report.set(status="patched", family=found.family, layers_patched=len(found.ffn),
                   rule=AUTO_RULE if chunks == 0 else "fixed")
        return (patched, report.json())


NODES = [H3KitLowVRAMAttention, H3KitChunkFeedForward]
