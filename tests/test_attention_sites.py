"""Issue 30 row 9 (tier a): what the attention override nodes reach, site by site, and what their reports say.

The host calls H3's token refiner and LTX's text connectors without transformer_options (read in the host:
nodes/attention_sites.py; measured on the real classes: tests/test_attention_reach_comfyui.py), so an override in
transformer_options alone never sees them. Here, on the host-semantics stand-ins (tests/lowvram_fakes.py) with a
refiner called the host's way: the nodes patch the refiner's attention modules to pass the override, count every
call per site, and the report, the summary and the low-VRAM report say exactly that, in these words.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

import lowvram_fakes as fakes
import pytest
import torch
from h3kit.adapters import log as pack_log
from h3kit.nodes import attention_sites as sites
from h3kit.nodes.attention import BackendOverride, H3KitAttentionBackend
from h3kit.nodes.lowvram import H3KitLowVRAMAttention
from h3kit.nodes.turing import SageAttentionOverride
from torch import nn

HIDDEN, HEADS, HEAD_DIM = 32, 2, 16
REFINER_KEY = "diffusion_model.token_refiner.blocks.0.attn.forward"
REACHED = ("reached: its 1 attention layer(s) are patched to pass this override (the host calls them without "
           "transformer_options, from extra_conds once per conditioning and sampling)")


@pytest.fixture(autouse=True)
def _log_once_stays_as_it_was():
    """The CPU fallback here is logged once per process; other files' tests expect to see it first."""
    seen = set(pack_log._LOGGED_ONCE)
    yield
    pack_log._LOGGED_ONCE.intersection_update(seen)


class RefinerBlock(nn.Module):
    def __init__(self, attention: nn.Module):
        super().__init__()
        self.attn = attention

    def forward(self, x, transformer_options={}):  # noqa: B006 - the host's signature
        return self.attn(x, transformer_options=transformer_options) + x


class TokenRefiner(nn.Module):
    """Called the way the host's preprocess_text_embeds calls it: no transformer_options."""

    def __init__(self, attention: nn.Module, block_class: type = RefinerBlock):
        super().__init__()
        self.blocks = nn.ModuleList([block_class(attention)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


class OldHostAttention(fakes.H3Attention):
    """A host whose refiner attention takes no transformer_options at all."""

    def forward(self, x, rope_freqs=None):
        return super().forward(x, rope_freqs)


class OldHostRefinerBlock(RefinerBlock):
    def forward(self, x):
        return self.attn(x) + x


def _model(old_host: bool = False):
    torch.manual_seed(0)
    net = fakes.H3Net(HIDDEN, HEADS, HEAD_DIM, 64, layers=1)
    attention = (OldHostAttention if old_host else fakes.H3Attention)(HIDDEN, HEADS, HEAD_DIM)
    net.token_refiner = TokenRefiner(attention, OldHostRefinerBlock if old_host else RefinerBlock)
    return fakes.FakeModelPatcher(fakes.BaseModel(net))


def _sample(patcher):
    """One 'sampling': the refiner as extra_conds runs it, then one DiT step with the sampler's options."""
    text = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(1))
    x, t_emb, segments, rope = fakes.h3_inputs(96, HIDDEN, 8, torch.float32)
    options = patcher.model_options.get("transformer_options", {})
    with torch.no_grad(), patcher.patched() as net:
        return net.token_refiner(text), net(x, t_emb, segments, rope, transformer_options=options)


def _summary(override, patcher, caplog):
    with caplog.at_level(logging.INFO, logger="H3Kit"):
        out = override.sampling_wrapper(lambda: _sample(patcher))
    lines = [r.getMessage() for r in caplog.records if "sampling done" in r.getMessage()]
    assert len(lines) == 1
    return out, lines[0]


@pytest.mark.skipif(not fakes.HAS_KITCHEN_ROPE, reason=fakes.NO_KITCHEN_ROPE)
def test_an_override_in_transformer_options_alone_misses_the_refiner(caplog):
    """The bug: the per-sampling count said '2 attention calls' were all of them; the refiner's never arrived."""
    model = _model()
    override = BackendOverride("cudnn")
    model.model_options = {"transformer_options": {sites.OVERRIDE_KEY: override}}
    _out, line = _summary(override, model, caplog)
    assert override.sites == Counter({sites.DIFFUSION_SELF: 1})  # the refiner's call ran, unseen
    assert line.startswith("H3KitAttentionBackend: sampling done: 1 attention calls")


@pytest.mark.skipif(not fakes.HAS_KITCHEN_ROPE, reason=fakes.NO_KITCHEN_ROPE)
def test_backend_reaches_the_refiner_and_the_report_and_summary_say_each_site(caplog):
    model = _model()
    host = _sample(model)
    patched, report_text = H3KitAttentionBackend().patch(model, "cudnn")
    report = json.loads(report_text)
    assert report["coverage"] == {
        "diffusion blocks": "every attention call of the diffusion blocks (self- and cross-attention): the host "
                            "passes the sampler's transformer_options to them",
        "H3 token refiner": REACHED,
        "outside this MODEL": "the text encoder, the VAEs and LTX's duration head are other models: no MODEL patch "
                              "reaches them",
    }
    assert REFINER_KEY not in model.object_patches  # the input model stays unchanged
    assert isinstance(patched.object_patches[REFINER_KEY], sites.PassOverride)
    override = patched.model_options["transformer_options"][sites.OVERRIDE_KEY]
    out, line = _summary(override, patched, caplog)
    assert line == ("H3KitAttentionBackend: sampling done: 2 attention calls, 0 on torch SDPA cudnn; 2x host: not a "
                    "CUDA tensor (cpu); by site: diffusion blocks 1 (self-attention 1, cross-attention 0), "
                    "H3 token refiner 1")
    assert all(torch.equal(a, b) for a, b in zip(out, host, strict=True))  # CPU: the host's attention, bitwise


def test_a_reached_site_without_calls_is_counted_as_zero(caplog):
    model = _model()
    patched, _report = H3KitAttentionBackend().patch(model, "cudnn")
    override = patched.model_options["transformer_options"][sites.OVERRIDE_KEY]
    override.reset()
    assert override.summary().endswith("by site: diffusion blocks 0 (self-attention 0, cross-attention 0), "
                                       "H3 token refiner 0")


def test_reapplying_passes_the_new_override_and_never_nests():
    once, _r1 = H3KitAttentionBackend().patch(_model(), "cudnn")
    twice, _r2 = H3KitAttentionBackend().patch(once, "efficient")
    patch = twice.object_patches[REFINER_KEY]
    assert patch.override.backend == "efficient"
    assert not isinstance(patch.inner, sites.PassOverride)  # the module's own forward, not the first node's patch
    assert twice.model_options["transformer_options"][sites.OVERRIDE_KEY] is patch.override


@pytest.mark.skipif(not fakes.HAS_KITCHEN_ROPE, reason=fakes.NO_KITCHEN_ROPE)
def test_a_refiner_attention_without_transformer_options_is_reported_not_reached(caplog):
    model = _model(old_host=True)
    patched, report_text = H3KitAttentionBackend().patch(model, "cudnn")
    report = json.loads(report_text)
    why = "token_refiner.blocks.0.attn.forward takes no transformer_options on this host"
    assert report["coverage"]["H3 token refiner"] == f"NOT reached: {why}; these calls run ComfyUI's attention"
    assert (f"H3 token refiner: not reached by the override ({why}); it runs ComfyUI's attention"
            in report["fallbacks"])
    assert REFINER_KEY not in patched.object_patches
    override = patched.model_options["transformer_options"][sites.OVERRIDE_KEY]
    _out, line = _summary(override, patched, caplog)
    assert line.endswith("by site: diffusion blocks 1 (self-attention 1, cross-attention 0), H3 token refiner: not "
                         "reached (called without transformer_options)")


def test_a_model_without_text_sites_says_so():
    model = fakes.FakeModelPatcher(fakes.BaseModel(fakes.H3Net(HIDDEN, HEADS, HEAD_DIM, 64, layers=1)))
    report = json.loads(H3KitAttentionBackend().patch(model, "cudnn")[1])
    assert report["coverage"]["text side"] == "H3Net has no H3 token refiner or LTX text connector with attention layers"


def test_pass_override_keeps_the_samplers_override_and_takes_positional_options():
    seen = []

    def inner(x, rope_freqs=None, transformer_options=None):
        seen.append(transformer_options)
        return x
    mine, theirs = object(), object()
    patch = sites.PassOverride(inner, mine, sites.H3_REFINER, 2)
    given = {sites.OVERRIDE_KEY: theirs, "other": 1}
    patch("x")
    patch("x", None, given)
    patch("x", transformer_options=given)
    assert seen[0] == {sites.OVERRIDE_KEY: mine, sites.SITE_KEY: sites.H3_REFINER}
    assert seen[1] == seen[2] == {sites.OVERRIDE_KEY: theirs, "other": 1, sites.SITE_KEY: sites.H3_REFINER}
    assert given == {sites.OVERRIDE_KEY: theirs, "other": 1}  # the sampler's dict is never written


def test_call_site_tells_blocks_self_from_cross_attention_by_q_and_k_lengths():
    q_hnd, k_hnd = torch.zeros(1, 2, 8, 4), torch.zeros(1, 2, 1024, 4)
    q_flat, k_flat = torch.zeros(1, 8, 8), torch.zeros(1, 1024, 8)
    assert sites.call_site(q_hnd, q_hnd, {}) == sites.call_site(q_flat, q_flat, {}) == sites.DIFFUSION_SELF
    assert sites.call_site(q_hnd, k_hnd, {}) == sites.call_site(q_flat, k_flat, {}) == sites.DIFFUSION_CROSS
    tagged = {"transformer_options": {sites.SITE_KEY: sites.LTX_AUDIO_CONNECTOR}}
    assert sites.call_site(q_flat, q_flat, tagged) == sites.LTX_AUDIO_CONNECTOR


def test_ltx_text_connectors_are_found_as_text_sites():
    attention = fakes.ltx_host("new").CrossAttention
    net = nn.Module()
    for name in ("video_embeddings_connector", "audio_embeddings_connector"):
        connector = nn.Module()
        connector.transformer_1d_blocks = nn.ModuleList(nn.Module() for _ in range(2))
        for block in connector.transformer_1d_blocks:
            block.attn1 = attention(16, None, 2, 8)
        setattr(net, name, connector)
    found = {site.name: site.keys for site in sites.find_text_sites(net)}
    assert found == {
        sites.LTX_VIDEO_CONNECTOR: [f"diffusion_model.video_embeddings_connector.transformer_1d_blocks.{i}.attn1"
                                    for i in range(2)],
        sites.LTX_AUDIO_CONNECTOR: [f"diffusion_model.audio_embeddings_connector.transformer_1d_blocks.{i}.attn1"
                                    for i in range(2)],
    }


def test_sage_override_counts_per_site_too():
    override = SageAttentionOverride("auto")
    override.reach = sites.Reach(reached={sites.H3_REFINER: 1})
    q = torch.randn(1, 2, 8, 64)
    override(lambda q, k, v, heads, **kw: q, q, q, q, 2, skip_reshape=True, transformer_options={})
    assert override.summary().endswith("; by site: diffusion blocks 1 (self-attention 1, cross-attention 0), "
                                       "H3 token refiner 0")


def test_low_vram_report_lists_the_refiner_it_leaves_to_the_host():
    report = json.loads(H3KitLowVRAMAttention().patch(_model(), 2)[1])
    assert report["layers_patched"] == 1
    assert report["not_patched"] == {
        "H3 token refiner": "1 attention layer(s) run the host's own forward: text-length sequences (H3: the prompt's "
                            "tokens; LTX: padded to 1024 registers), once per conditioning and sampling"}
