"""Where a diffusion model's attention calls come from, and which of them an attention override reaches.

An `optimized_attention_override` lives in the sampler's `transformer_options`, and the host's attention function
runs it only when a call carries those options. Read in ComfyUI 0.33.0 (kat3ri @0f1fa67a), yzkee @783545f6 and
Comfy-Org's current MiniMax-H3 code:
- carry them: every attention of the diffusion blocks. H3 `DiTBlock.forward` -> `Attention.forward`
  (comfy/ldm/minimax/model.py); LTX `BasicTransformerBlock.forward` (model.py) and `BasicAVTransformerBlock.forward`
  (av_model.py: attn1, attn2, audio_attn1, audio_attn2, audio_to_video_attn, video_to_audio_attn) ->
  `CrossAttention.forward` -> `optimized_attention` / `_attention_with_guide_mask`.
- carry none: the text side, run from `preprocess_text_embeds`, which `model_base.extra_conds` calls once per
  conditioning per sampling (and LTX's duration-head node, outside sampling): H3 `MiniMaxH3Model.
  preprocess_text_embeds` -> `TokenRefiner.forward(x)` -> `RefinerBlock.forward` -> `Attention.forward` with its
  default `{}`; LTX-2 `LTXAVModel.preprocess_text_embeds` -> `Embeddings1DConnector.forward` (video and audio,
  embeddings_connector.py) -> `BasicTransformerBlock1D.forward` -> `attn1(x, mask=, pe=)` without options.
  (H3's `_forward` passes options to the refiner only for a context that was not refined already, which
  extra_conds always does first.)

`reach_text_attention` makes the override reach the second group without replacing any block's forward: the
forward of each text-side *attention module* becomes `PassOverride`, which calls the module's own forward (or the
patch that was there) with the override and a site tag added to a copy of its transformer_options. Overrides count
their calls per site (`call_site`), so the per-sampling summary says where the calls came from.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

OVERRIDE_KEY = "optimized_attention_override"
SITE_KEY = "h3kit_attention_site"
PATCH_KIND = "attention_reach"
DIFFUSION_SELF = "diffusion blocks, self-attention"
DIFFUSION_CROSS = "diffusion blocks, cross-attention"
H3_REFINER = "H3 token refiner"
LTX_VIDEO_CONNECTOR = "LTX video text connector"
LTX_AUDIO_CONNECTOR = "LTX audio text connector"
BLOCKS_COVERAGE = ("every attention call of the diffusion blocks (self- and cross-attention): the host passes the "
                   "sampler's transformer_options to them")
OUTSIDE_MODEL = "the text encoder, the VAEs and LTX's duration head are other models: no MODEL patch reaches them"


def is_h3_attention(module: Any) -> bool:
    return all(hasattr(module, a) for a in ("qkv_proj", "q_norm", "k_norm", "out_proj", "heads", "head_dim"))


def is_ltx_attention(module: Any) -> bool:
    return all(hasattr(module, a) for a in ("to_q", "to_k", "to_v", "to_out", "q_norm", "k_norm", "heads", "dim_head"))


# (site name, container path under diffusion_model, its block list, the attention module in each block, its test)
TEXT_SITES = (
    (H3_REFINER, "token_refiner", "blocks", "attn", is_h3_attention),
    (LTX_VIDEO_CONNECTOR, "video_embeddings_connector", "transformer_1d_blocks", "attn1", is_ltx_attention),
    (LTX_AUDIO_CONNECTOR, "audio_embeddings_connector", "transformer_1d_blocks", "attn1", is_ltx_attention),
)


@dataclass
class TextSite:
    name: str
    keys: list[str] = field(default_factory=list)  # dotted keys of its attention modules, without ".forward"


def find_text_sites(net: Any) -> list[TextSite]:
    """The H3 token refiner / LTX text connectors of a diffusion model that have attention modules."""
    found = []
    for name, container, blocks_name, attn_name, is_attention in TEXT_SITES:
        blocks = getattr(getattr(net, container, None), blocks_name, None) or ()
        keys = [f"diffusion_model.{container}.{blocks_name}.{i}.{attn_name}"
                for i, block in enumerate(blocks) if is_attention(getattr(block, attn_name, None))]
        if keys:
            found.append(TextSite(name, keys))
    return found


def _options_position(forward: Any) -> int | None:
    """Position of `transformer_options` among a forward's parameters (None: it takes none)."""
    try:
        names = list(inspect.signature(forward).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("transformer_options") if "transformer_options" in names else None


class PassOverride:
    """An attention module's forward that the host calls without transformer_options: the module's own forward
    (`inner`) runs with the override and the site tag added to a copy of whatever options it got."""

    h3kit_patch = PATCH_KIND

    def __init__(self, inner: Any, override: Any, site: str, position: int):
        self.inner, self.override, self.site, self.position = inner, override, site, position

    def _options(self, given: Any) -> dict:
        options = dict(given or {})
        options.setdefault(OVERRIDE_KEY, self.override)  # a call that has the sampler's options keeps its override
        options[SITE_KEY] = self.site
        return options

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) > self.position:
            args = (*args[:self.position], self._options(args[self.position]), *args[self.position + 1:])
        else:
            kwargs["transformer_options"] = self._options(kwargs.get("transformer_options"))
        return self.inner(*args, **kwargs)


@dataclass
class Reach:
    reached: dict[str, int] = field(default_factory=dict)  # site -> attention modules patched
    unreached: dict[str, str] = field(default_factory=dict)  # site -> why not


def reach_text_attention(patched: Any, override: Any) -> Reach:
    """Patch the text-side attention modules of a cloned patcher so that `override` reaches them."""
    reach = Reach()
    try:
        net = patched.get_model_object("diffusion_model")
    except (AttributeError, KeyError) as exc:
        reach.unreached["text side"] = f"no diffusion_model on this MODEL ({type(exc).__name__})"
        return reach
    for site in find_text_sites(net):
        for key in site.keys:
            current = patched.get_model_object(f"{key}.forward")
            if getattr(current, "h3kit_patch", None) == PATCH_KIND:
                current = current.inner  # re-applying replaces the override this site passes instead of nesting
            position = _options_position(current)
            if position is None:
                reach.unreached[site.name] = (f"{key.removeprefix('diffusion_model.')}.forward takes no "
                                              "transformer_options on this host")
                break
            patched.add_object_patch(f"{key}.forward", PassOverride(current, override, site.name, position))
            reach.reached[site.name] = reach.reached.get(site.name, 0) + 1
    return reach


def coverage_report(reach: Reach, model_class: str) -> dict[str, str]:
    """The node report's `coverage`: what the override reaches, site by site."""
    lines = {"diffusion blocks": BLOCKS_COVERAGE}
    for site, layers in reach.reached.items():
        lines[site] = (f"reached: its {layers} attention layer(s) are patched to pass this override (the host calls "
                       "them without transformer_options, from extra_conds once per conditioning and sampling)")
    for site, why in reach.unreached.items():
        lines[site] = f"NOT reached: {why}; these calls run ComfyUI's attention"
    if not reach.reached and not reach.unreached:
        lines["text side"] = f"{model_class} has no H3 token refiner or LTX text connector with attention layers"
    lines["outside this MODEL"] = OUTSIDE_MODEL
    return lines


def reach_and_report(patched: Any, override: Any, report: Any) -> None:
    """For an override node: make `override` reach the text side, and say site by site what it reaches."""
    reach = reach_text_attention(patched, override)
    override.reach = reach
    try:
        model_class = type(patched.get_model_object("diffusion_model")).__name__
    except (AttributeError, KeyError):
        model_class = type(patched).__name__
    report.set(coverage=coverage_report(reach, model_class))
    for site, why in reach.unreached.items():
        report.fallback(f"reach:{site}", f"{site}: not reached by the override ({why}); it runs ComfyUI's attention")


def _tokens(t: Any) -> int:
    return t.shape[-2] if getattr(t, "ndim", 0) >= 2 else -1


def call_site(q: Any, k: Any, kwargs: dict) -> str:
    """Where an override call came from: a text site's tag, else the diffusion blocks (self-attention when q and k
    have one length, which is how the blocks' self- and cross-attention calls are told apart)."""
    options = kwargs.get("transformer_options")
    site = options.get(SITE_KEY) if isinstance(options, dict) else None
    if isinstance(site, str):
        return site
    return DIFFUSION_SELF if _tokens(q) == _tokens(k) else DIFFUSION_CROSS


def site_summary(sites: Counter, reach: Reach | None) -> str:
    """'diffusion blocks 6 (self-attention 2, cross-attention 4), LTX video text connector 4, ...': every site the
    override reaches, with its calls (0 included), and each text site it does not reach, said so."""
    blocks_self, blocks_cross = sites.get(DIFFUSION_SELF, 0), sites.get(DIFFUSION_CROSS, 0)
    parts = [f"diffusion blocks {blocks_self + blocks_cross} (self-attention {blocks_self}, cross-attention "
             f"{blocks_cross})"]
    reached = reach.reached if reach is not None else {}
    unreached = reach.unreached if reach is not None else {}
    for name, *_rest in TEXT_SITES:
        if name in reached or sites.get(name):
            parts.append(f"{name} {sites.get(name, 0)}")
        elif name in unreached:
            parts.append(f"{name}: not reached (called without transformer_options)")
    return ", ".join(parts)
