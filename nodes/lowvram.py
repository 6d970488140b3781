"""Low-VRAM patches for the H3 DiT and the LTX-2.5 transformer: head-group attention, token-chunked FFN.

Both nodes clone the model patcher and add one object patch per block module on a dotted key
(`diffusion_model.blocks.<i>.attn.forward`, `diffusion_model.transformer_blocks.<i>.ff.forward`, ...); the input
model is never touched. The host's blocks call these modules (a block replacement's `original_block` too), so the
patches hold whichever way a block runs. The patched forwards run the host's own layers, kernels and attention
function, looked up per call, and decide per forward from each layer as it is then (kernels/chunked.py says why
that is exact); what ran is logged once per new outcome. A model whose structure does not match is returned
unchanged, said in the report and the log.
"""
from __future__ import annotations

import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..adapters import kitchen
from ..adapters.log import LOG, log_once
from ..kernels import chunked
from .attention_sites import find_text_sites, is_h3_attention, is_ltx_attention
from .common import H3KitInputError, Report, category

SETTINGS_KEY = "h3kit_lowvram"
LTX_ATTENTION_NAMES = ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")
LTX_FFN_NAMES = ("ff", "audio_ff")
AUTO_RULE = ("auto, decided once per shape: budget = free device memory / 16 clamped to [128 MiB, 512 MiB]; a layer "
             "whose whole transient fits in 2 budgets runs the host's own forward; else head_chunks = ceil(heads / "
             "max(1, budget // (4*tokens*head_dim*bytes))), ffn chunks = ceil(tokens / max(1, budget // "
             "((proj_width + act_width)*bytes))); 1 below seq_threshold")


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


def find_structure(model: Any) -> Structure:
    """H3 (`blocks[i].attn/.mlp`) or LTX (`transformer_blocks[i].attn1.../ff`) targets of a ModelPatcher."""
    try:
        net = model.get_model_object("diffusion_model")
    except (AttributeError, KeyError) as exc:
        return Structure(None, reason=f"no diffusion_model on this MODEL ({type(exc).__name__}: {exc})")
    blocks = getattr(net, "blocks", None)
    if blocks is not None and len(blocks) and is_h3_attention(getattr(blocks[0], "attn", None)):
        found = Structure("h3")
        for i, block in enumerate(blocks):
            if is_h3_attention(getattr(block, "attn", None)):
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
                if module is not None and is_ltx_attention(module):
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
# host pieces, looked up per call


def host_attention(attn_module: Any) -> tuple[chunked.AttentionFn, dict[str, Any], str, Callable[[Any], Any]]:
    """The attention function the host's own forward would call, its extra kwargs, its origin, and the q/k/v wrapper.

    Looked up at call time in the module that defines the attention class (H3 binds `optimized_attention`
    there), else in `comfy.ldm.modules.attention`; outside ComfyUI, torch SDPA (reported as a fallback).
    q/k/v are wrapped in `AttentionTensorContainer`s only where the attention class's own module uses them (H3 on
    ComfyUI 0.33.0); LTX passes plain tensors on every host, and under `--use-ck-attention` the two take different
    kitchen paths (containers: prequantized int8 attention; plain: `int8_attention`), so the host's form is kept.
    """
    source = sys.modules.get(type(attn_module).__module__)
    fn = getattr(source, "optimized_attention", None)
    origin = f"{type(attn_module).__module__}.optimized_attention"
    core = sys.modules.get("comfy.ldm.modules.attention")
    if fn is None and core is not None:
        fn, origin = core.optimized_attention, "comfy.ldm.modules.attention.optimized_attention"
    if fn is None:
        return sdpa_attention, {}, "torch SDPA", _same
    container = getattr(source, "AttentionTensorContainer", None)
    extra: dict[str, Any] = {}
    if getattr(attn_module, "comfy_attention", None) is not None:
        extra["preferred_attention"] = attn_module.comfy_attention
    return fn, extra, origin, (container or _same)


def _same(tensor: Any) -> Any:
    return tensor


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, mask: torch.Tensor | None = None,
                   skip_reshape: bool = False, **_ignored: Any) -> torch.Tensor:
    """The host's attention call form on torch SDPA: [B,H,S,D] in with skip_reshape, else [B,S,H*D]; out [B,S,H*D]."""
    if not skip_reshape:
        batch, _, width = q.shape
        q, k, v = (t.reshape(batch, -1, heads, width // heads).transpose(1, 2) for t in (q, k, v))
    if mask is not None and mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask is not None and mask.ndim == 3:
        mask = mask.unsqueeze(1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)


def ltx_rope(attn_module: Any) -> Callable | None:
    """`rope(q, k, pe, k_pe) -> (q, k)` through the host's own RoPE functions of the attention's module, or None.

    Every LTX host defines `apply_rotary_emb(tensor, pe)` for its own `pe` format ((cos, sin) in 0.3.64,
    (cos, sin, split) in 0.12.1, (table, split) in >= 0.34); newer hosts fuse q and k in `apply_rotary_emb_qk`
    when k has no own table and the shapes match. The same rule is followed here, so the numbers are the host's.
    """
    source = sys.modules.get(type(attn_module).__module__)
    single = getattr(source, "apply_rotary_emb", None)
    if single is None:
        return None
    pair = getattr(source, "apply_rotary_emb_qk", None)

    def rope(q, k, pe, k_pe):
        if pair is not None and k_pe is None and q.shape == k.shape:
            return pair(q, k, pe)
        return single(q, pe), single(k, pe if k_pe is None else k_pe)
    return rope


def row_slicer(weight: Any, start: int, stop: int):
    """Rows of a quantized effective weight (comfy-kitchen layouts), or (None, why not)."""
    if not kitchen.is_quantized(weight):
        return None, f"weight is a {type(weight).__name__}, not a tensor or a comfy-kitchen QuantizedTensor"
    return kitchen.quantized_rows(weight, start, stop)


# ----------------------------------------------------------------------------------------------
# per-forward decisions: stable counts, and a ledger of what ran


class Planner:
    """Chunk counts decided once per (layer kind, shape, dtype, device) and kept, so every step allocates alike."""

    def __init__(self, fixed: int):
        self.fixed, self.decided = fixed, {}

    def count(self, key: tuple, decide: Callable[[], int], label: str) -> int:
        if self.fixed:
            return self.fixed
        if key not in self.decided:
            self.decided[key] = decide()
            log_once(f"lowvram:auto:{label}:{key}", f"H3Kit low-VRAM: {label} {key[1:]} -> {self.decided[key]} (auto, "
                     "kept for this shape)", level=logging.INFO)
        return self.decided[key]


class Ledger:
    """What ran per layer kind ({kind: {"path: reason": calls}}); each new outcome is logged once."""

    def __init__(self):
        self.counts: dict[str, dict[str, int]] = {}

    def record(self, kind: str, path: str, reason: str = "") -> None:
        entry = f"{path}: {reason}" if reason else path
        kind_counts = self.counts.setdefault(kind, {})
        kind_counts[entry] = kind_counts.get(entry, 0) + 1
        if kind_counts[entry] == 1:
            level = logging.INFO if path in ("per_group", "chunked", "host (1 group)", "host (1 chunk)") else logging.WARNING
            LOG.log(level, f"H3Kit low-VRAM {kind}: {entry}")


# ----------------------------------------------------------------------------------------------
# patches (callables installed as `<module>.forward`)


def _tokens(x: torch.Tensor) -> int:
    return x.shape[-2] if x.dim() > 2 else x.shape[0]


def _auto_groups(planner: Planner, kind: str, x: torch.Tensor, heads: int, head_dim: int) -> int:
    tokens = _tokens(x)
    return planner.count((kind, tokens, heads, head_dim, x.dtype, str(x.device)), lambda: chunked.auto_head_chunks(
        tokens, heads, head_dim, x.element_size(), chunked.free_device_bytes(x.device)), f"{kind} head groups")


class H3AttentionPatch:
    """H3 `Attention.forward(x, rope_freqs, transformer_options)` one head group at a time; 1 group = the host's."""

    h3kit_patch = "lowvram_attention"
    kind = "H3 attention"

    def __init__(self, module: Any, planner: Planner, ledger: Ledger, original: Any):
        self.module, self.planner, self.ledger, self.original = module, planner, ledger, original

    def __call__(self, x, rope_freqs=None, transformer_options=None):
        options = {} if transformer_options is None else transformer_options
        attn = self.module
        groups = _auto_groups(self.planner, self.kind, x, attn.heads, attn.head_dim)
        if groups <= 1:
            self.ledger.record(self.kind, "host (1 group)")
            return self.original(x, rope_freqs=rope_freqs, transformer_options=options)
        ck, origin = kitchen.host_kitchen()
        if rope_freqs is not None and ck is None:
            self.ledger.record(self.kind, "plain-torch norm+rope", f"the host's fused kernel is missing: {origin}")
        fn, extra, _origin, wrap = host_attention(attn)
        qk_step = chunked.h3_qk_norm_rope(ck, attn.q_norm, attn.k_norm, rope_freqs, x.device)
        out, path, reason = chunked.h3_attention(attn, x, rope_freqs, groups, fn, qk_step, row_slicer, wrap,
                                                 {"transformer_options": options, **extra})
        self.ledger.record(self.kind, path, reason)
        return out


class LTXAttentionPatch:
    """LTX `CrossAttention.forward` with head-group attention; the host's forward where it cannot apply."""

    h3kit_patch = "lowvram_attention"
    kind = "LTX attention"

    def __init__(self, module: Any, planner: Planner, ledger: Ledger, original: Any):
        self.module, self.planner, self.ledger, self.original = module, planner, ledger, original
        self.takes_k_pe = "k_pe" in _parameters(original)

    def __call__(self, x, context=None, mask=None, pe=None, k_pe=None, transformer_options=None):
        options = {} if transformer_options is None else transformer_options
        attn = self.module
        rope = ltx_rope(attn) if pe is not None else None
        reason = self._unsupported(context, mask, pe, k_pe, rope, options)
        groups = 1 if reason else _auto_groups(self.planner, self.kind, x, attn.heads, attn.dim_head)
        if reason or groups <= 1:
            self.ledger.record(self.kind, "host" if reason else "host (1 group)", reason)
            kwargs = {"context": context, "mask": mask, "pe": pe, "transformer_options": options}
            if self.takes_k_pe:
                kwargs["k_pe"] = k_pe
            return self.original(x, **kwargs)
        fn, extra, _origin, wrap = host_attention(attn)
        extra = {"attn_precision": getattr(attn, "attn_precision", None), "transformer_options": options, **extra}
        out, path, why = chunked.ltx_attention(attn, x, context, mask, pe, k_pe, groups, fn, rope, row_slicer, wrap,
                                               extra)
        self.ledger.record(self.kind, path, why)
        return out

    def _unsupported(self, context: Any, mask: Any, pe: Any, k_pe: Any, rope: Any, options: dict) -> str:
        if context is None and options.get("stg_skip_self_attn", False):
            return "STG value passthrough"
        if pe is not None and rope is None:
            return "the host module has no apply_rotary_emb for this RoPE format"
        if k_pe is not None and not self.takes_k_pe:
            return "this host's CrossAttention takes no k_pe"
        if mask is not None and not isinstance(mask, torch.Tensor):
            return f"{type(mask).__name__} mask (guide attention)"
        if mask is not None and not self.takes_k_pe:
            return "masked attention on a host that calls optimized_attention_masked"
        if isinstance(mask, torch.Tensor) and mask.ndim == 4 and mask.shape[1] != 1:
            return "per-head attention mask"
        return ""


def _parameters(fn: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


class ChunkedFFNPatch:
    """A per-token feed-forward run on token chunks; `inner` is the forward that was in place before."""

    h3kit_patch = "chunk_ffn"
    kind = "feed-forward"

    def __init__(self, inner: Any, module: Any, planner: Planner, ledger: Ledger, seq_threshold: int):
        self.inner, self.module, self.planner, self.ledger = inner, module, planner, ledger
        self.seq_threshold, self.width = seq_threshold, chunked.ffn_widths(module)

    def __call__(self, x, *args, **kwargs):
        dim = 0 if x.dim() == 2 else x.dim() - 2  # the token axis: [S, C] (H3) or [B, T, C] (LTX), never batch
        tokens = x.shape[dim]
        if tokens < self.seq_threshold:
            return self.inner(x, *args, **kwargs)
        scaled = _input_scaled_layers(self.module)
        if scaled:
            self.ledger.record(self.kind, "whole", f"{scaled}; chunks would change the numbers")
            return self.inner(x, *args, **kwargs)
        width = self.width or x.shape[-1] * 8
        count = self.planner.count(("ffn", tokens, width, x.dtype, str(x.device)), lambda: chunked.auto_ffn_chunks(
            tokens, width, x.element_size(), chunked.free_device_bytes(x.device)), "ffn chunks")
        if count <= 1:
            self.ledger.record(self.kind, "host (1 chunk)")
            return self.inner(x, *args, **kwargs)
        self.ledger.record(self.kind, "chunked")
        return chunked.chunked_tokens(lambda part: self.inner(part, *args, **kwargs), x, count, dim=dim)


def _input_scaled_layers(module: Any) -> str:
    """'name: why, ...' for the layers of a feed-forward whose numbers per token depend on the whole input."""
    found = []
    for name, layer in module.named_modules():
        why = kitchen.whole_input_scaling(layer)
        if why:
            found.append(f"{name}: {why}")
    return ", ".join(found)


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
    DESCRIPTION = ("Runs attention one head group at a time on the H3 DiT and LTX-2.5 blocks, through the host's own "
                   "layers: q/k/v come from row slices of the weights the host would use (LoRA, lowvram patches and "
                   "every quantized layout of the host whose rows can be cut exactly included), normalised with the "
                   "host's own kernel, so the fused qkv buffer never exists whole. Where a layer cannot be split (a "
                   "layout without an exact row slice, wrapped layers) it runs whole and the report and log say so. "
                   "Auto leaves short sequences to the host's forward; the H3 token refiner and LTX text connectors "
                   "(text-length) are not patched, listed in the report. Measured numbers: docs/benchmarks.md.")
    FUNCTION = "patch"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "An H3 or LTX-2.5 diffusion model. It is cloned; the input is not modified."}),
            "head_chunks": ("INT", {"default": 0, "min": 0, "max": 64, "step": 1, "tooltip":
                                    "Head groups per attention layer. 0 = auto (from tokens, heads and free VRAM, each "
                                    "group under ~512 MiB; layers that fit whole in ~1 GiB keep the host's own "
                                    "forward; decided once per shape); "
                                    "1 = off (model returned unchanged); 16 is a good manual value for H3 at "
                                    "1344x768x362."}),
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
        planner, ledger = Planner(head_chunks), Ledger()
        counts = {"patched": 0, "kept_foreign": 0}
        for target in found.attention:
            self._patch_one(patched, target, planner, ledger, counts, report, found.family)
        if counts["patched"] == 0:
            return _unchanged(model, report, "foreign", "model returned unchanged: every attention layer already "
                              "carries another node's patch")
        _with_settings(patched, head_chunks=head_chunks)
        _fn, _extra, origin, _wrap = host_attention(found.attention[0].module)
        if origin == "torch SDPA":
            report.fallback("sdpa", "ComfyUI's attention function is not importable here; torch SDPA is used")
        _ck, kitchen_origin = kitchen.host_kitchen()
        if found.family == "h3" and _ck is None:
            report.fallback("kitchen", f"{kitchen_origin}: q/k norm+RoPE in plain torch (not the host's fused kernel; "
                            "not bitwise equal to the host)")
        for layers, why in _narrow_slice_notes(found, head_chunks):
            report.fallback(f"narrow:{why}", f"{layers}: {why}")
        verdicts = _layout_verdicts([t.module for t in found.attention], found.family)
        if verdicts:
            report.set(quantized_layouts=verdicts)
        report.set(status="patched", family=found.family, layers_patched=counts["patched"],
                   attention_function=origin, norm_rope_kernel=_rope_kernel(found.family, _ck, kitchen_origin),
                   decided="per forward, from the layer as it is then: per_group | whole (reason) | host; "
                           "each new outcome is logged once (logger H3Kit)",
                   weights=_weight_summary([t.module for t in found.attention], found.family),
                   rule=AUTO_RULE if head_chunks == 0 else "fixed")
        left = _text_sites_left(patched)
        if left:
            report.set(not_patched=left)
        return (patched, report.json())

    @staticmethod
    def _patch_one(patched, target: Target, planner: Planner, ledger: Ledger, counts: dict, report: Report,
                   family: str) -> None:
        key = f"{target.key}.forward"
        existing = _existing_patch(patched, key)
        outer = existing if getattr(existing, "wraps_inner", False) else None  # H3Kit's Turing fp16 cast: stays outside
        current = outer.inner if outer is not None else existing
        if outer is not None and getattr(current, "h3kit_patch", None) != "lowvram_attention":
            original = current  # the forward the cast wraps (the module's own, or another node's patch)
        elif current is not None and getattr(current, "h3kit_patch", None) != "lowvram_attention":
            counts["kept_foreign"] += 1
            report.fallback(f"foreign:{family}", f"{target.key}: another node already patched this forward; left as is")
            return
        else:
            original = current.original if current is not None else patched.get_model_object(key)
        if target.kind == "h3_attn":
            patch = H3AttentionPatch(target.module, planner, ledger, original)
        else:
            patch = LTXAttentionPatch(target.module, planner, ledger, original)
        patched.add_object_patch(key, outer.with_inner(patch) if outer is not None else patch)
        counts["patched"] += 1


def _text_sites_left(model: Any) -> dict[str, str]:
    """The text-side attention layers this node leaves to the host, and why (report `not_patched`)."""
    sites = find_text_sites(model.get_model_object("diffusion_model"))
    return {site.name: f"{len(site.keys)} attention layer(s) run the host's own forward: text-length sequences (H3: "
                       "the prompt's tokens; LTX: padded to 1024 registers), once per conditioning and sampling"
            for site in sites}


def _rope_kernel(family: str, ck: Any, origin: str) -> str:
    if family == "ltx":
        return "the host module's own apply_rotary_emb"
    return origin if ck is not None else "plain torch"


def _narrow_slice_notes(found: Structure, head_chunks: int) -> list[tuple[str, str]]:
    """(layers, why) for LTX layers whose to_v row slices are too narrow to be exact (kernels/chunked.py rule)."""
    if found.family != "ltx":
        return []
    by_reason: dict[str, list[str]] = {}
    for target in found.attention:
        heads, dim_head = target.module.heads, target.module.dim_head
        if head_chunks:
            why = chunked.narrow_slice_reason(heads, dim_head, head_chunks)
        elif dim_head % chunked.SLICE_ROW_MULTIPLE:  # auto decides the groups per shape, later
            why = (f"head_dim {dim_head}: if auto splits these layers into groups whose to_v row slices are not a "
                   f"multiple of {chunked.SLICE_ROW_MULTIPLE} rows, v is projected whole (not bitwise otherwise)")
        else:
            why = ""
        if why:
            by_reason.setdefault(why, []).append(target.key.removeprefix("diffusion_model."))
    return [(", ".join(keys), why) for why, keys in by_reason.items()]


def _weight_summary(modules: list, family: str) -> str:
    """What the first attention layer's projection weight is, and what that means for the per-group path."""
    layer = modules[0].qkv_proj if family == "h3" else modules[0].to_v
    weight = getattr(layer, "weight", None)
    if kitchen.is_quantized(weight):
        name = kitchen.layout_name(weight)
        return f"{name}: {kitchen.slice_verdict(name)} (attention per group either way)"
    return "plain weights: per-group row slices of the weight the host's cast path returns (LoRA applied)"


def _layout_verdicts(modules: list, family: str) -> dict[str, str] | None:
    """Every quantized layout this host defines and what the per-group path does with it (quantized models only)."""
    layer = modules[0].qkv_proj if family == "h3" else modules[0].to_v
    if not kitchen.is_quantized(getattr(layer, "weight", None)):
        return None
    return {name: kitchen.slice_verdict(name) for name in kitchen.registered_layouts()}


class H3KitChunkFeedForward:
    DISPLAY_NAME = "H3Kit Chunk Feed-Forward (token chunks)"
    CATEGORY = category("Memory")
    DESCRIPTION = ("Runs the feed-forward of every H3 DiT / LTX-2.5 block on token chunks through the host's own "
                   "forward, so its 4-5x wide intermediate never exists for the whole sequence. Layers whose input "
                   "the host quantizes with one scale for all tokens (e.g. NVFP4 without a stored input scale; read "
                   "from the host's own quantizer) are left whole, since chunks would change their numbers; the report "
                   "and log say so. Measured numbers: docs/benchmarks.md.")
    FUNCTION = "patch"
    RETURN_TYPES = ("MODEL", "STRING")
    RETURN_NAMES = ("model", "report")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "An H3 or LTX-2.5 diffusion model. It is cloned; the input is not modified."}),
            "chunks": ("INT", {"default": 0, "min": 0, "max": 256, "step": 1, "tooltip":
                               "Token chunks per feed-forward. 0 = auto (from tokens, FFN width and free VRAM, each "
                               "chunk under ~512 MiB, whole under ~1 GiB; decided once per shape); 1 = off (model returned unchanged); 8 is "
                               "a good manual value for H3 at 1344x768x362."}),
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
        planner, ledger = Planner(chunks), Ledger()
        for target in found.ffn:
            key = f"{target.key}.forward"
            current = patched.get_model_object(key)
            if getattr(current, "h3kit_patch", None) == "chunk_ffn":
                current = current.inner  # re-applying replaces our own chunking instead of nesting it
            elif _existing_patch(patched, key) is not None:
                log_once(f"lowvram:ffn-compose:{found.family}", f"H3Kit: chunking around another node's patch on {key}")
            patched.add_object_patch(key, ChunkedFFNPatch(current, target.module, planner, ledger, seq_threshold))
        scaled = sorted({why for t in found.ffn if (why := _input_scaled_layers(t.module))})
        if scaled:
            report.fallback("input-scaled", f"feed-forward layers whose numbers per token depend on the whole input "
                            f"({'; '.join(scaled)}) run whole (exact), not chunked")
        _with_settings(patched, ffn_chunks=chunks, seq_threshold=seq_threshold)
        report.set(status="patched", family=found.family, layers_patched=len(found.ffn),
                   decided="per forward: chunked | host (1 chunk) | whole (reason); each new outcome is logged once",
                   rule=AUTO_RULE if chunks == 0 else "fixed")
        return (patched, report.json())


NODES = [H3KitLowVRAMAttention, H3KitChunkFeedForward]
