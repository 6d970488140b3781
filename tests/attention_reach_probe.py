"""Run inside a real ComfyUI host's python (cwd = the host checkout): which attention calls of the host's own
MiniMax-H3 / LTX-2 models reach the pack's attention override, counted against every call the model makes.

    <host python> tests/attention_reach_probe.py <pack root>    -> one JSON object on the last stdout line

Per family the host has (a tiny random-weight model built from the host's classes, loaded by the host's own
`load_diffusion_model_state_dict`, sampled by `comfy.sample.sample`: 2 steps, cfg 2, a positive and a negative
prompt, CPU): the host's attention function is wrapped by a spy that counts every call the model makes, by where
it comes from, read from the call stack (the nearest attention module's name in the model; a frame of the H3
TokenRefiner or an LTX Embeddings1DConnector makes it a text-side call), independently of the pack's own site
tags. Runs: the host alone; an override in transformer_options alone (what the host hands it by itself);
H3KitAttentionBackend; H3KitLowVRAMAttention (2 head groups) then the backend node.
For each: the spy's counts, the override's counts per site and per path, the summary line logged after the
sampling, the node reports and whether the output equals the host's bitwise.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
import types
from collections import Counter
from importlib import import_module

sys.path.insert(0, os.getcwd())
from comfy.cli_args import args  # noqa: E402

args.cpu = True  # model_management reads this at import: never touch a GPU here
import comfy.ldm.modules.attention as core_attention  # noqa: E402
import comfy.model_management  # noqa: E402
import comfy.ops  # noqa: E402
import comfy.sample  # noqa: E402
import comfy.sd  # noqa: E402
import torch  # noqa: E402

PACK = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(PACK, "tests"))
import tiny_h3_models  # noqa: E402
import tiny_ltx_models  # noqa: E402
from host_weights import build, generator_for, randomize  # noqa: E402

STEPS, CFG, SEED = 2, 2.0, 5
H3_TEXT_DIM = 96  # != the tiny DiT's hidden 64, so the host refines the prompt (equal widths skip the refiner)
# The shipped tiny LTXAV with connectors as wide as its prompt (caption_channels 32 = 4 heads x 8), so a [1, L, 32]
# prompt goes through both text connectors as a real LTX-2 prompt does (the shipped file's 16 would skip them).
LTX_CONFIG = {**tiny_ltx_models.DIT_CONFIG, "caption_channels": 32, "connector_attention_head_dim": 8,
              "connector_num_attention_heads": 4}
SELF_ATTENTION_NAMES = ("attn", "attn1", "audio_attn1")


def optional(name: str):
    try:
        return import_module(name)
    except ImportError:
        return None


H3 = optional("comfy.ldm.minimax.model")
AV = optional("comfy.ldm.lightricks.av_model")
CONNECTOR = optional("comfy.ldm.lightricks.embeddings_connector")
NESTED = optional("comfy.nested_tensor")  # the audio+video latent of H3 and LTXAV; older hosts have neither model


def sized_connectors() -> bool:
    """The host's LTXAV takes the text connectors' size from its config (0.33.0 on); an older one (the installable
    0.12.1) builds them at full size, so no tiny model of it can be sampled here."""
    return "connector_attention_head_dim" in inspect.getsource(AV.LTXAVModel)  # read from **kwargs (0.33.0)


def load_pack(root: str):
    """The pack's node modules, imported as package `h3kit` without registering every node."""
    for name in ("h3kit", "h3kit.nodes", "h3kit.adapters", "h3kit.kernels", "h3kit.checks"):
        package = types.ModuleType(name)
        folder = name.split(".", 1)[1] if "." in name else ""
        package.__path__ = [os.path.join(root, folder)]
        sys.modules[name] = package
    return (import_module("h3kit.nodes.attention"), import_module("h3kit.nodes.lowvram"),
            import_module("h3kit.nodes.attention_sites"))


ATTENTION, LOWVRAM, SITES = load_pack(PACK)


class Spy:
    """Wraps the host's attention function where the model looks it up; counts every call by its true site."""

    def __init__(self, module, net):
        self.module, self.original, self.calls = module, module.optimized_attention, Counter()
        self.names = {id(m): name for name, m in net.named_modules()}
        self.text = {}
        if H3 is not None and isinstance(getattr(net, "token_refiner", None), H3.TokenRefiner):
            self.text[id(net.token_refiner)] = SITES.H3_REFINER
        for attr, site in (("video_embeddings_connector", SITES.LTX_VIDEO_CONNECTOR),
                           ("audio_embeddings_connector", SITES.LTX_AUDIO_CONNECTOR)):
            if hasattr(net, attr):
                self.text[id(getattr(net, attr))] = site

    def site(self) -> str:
        frame, attention_name = sys._getframe(2), None
        while frame is not None:
            owner = frame.f_locals.get("self")
            if id(owner) in self.text:
                return self.text[id(owner)]
            if attention_name is None and (SITES.is_h3_attention(owner) or SITES.is_ltx_attention(owner)):
                attention_name = self.names.get(id(owner), "")
            frame = frame.f_back
        if attention_name is None:
            return "unknown"
        return SITES.DIFFUSION_SELF if attention_name.rsplit(".", 1)[-1] in SELF_ATTENTION_NAMES else SITES.DIFFUSION_CROSS

    def __call__(self, *args, **kwargs):
        self.calls[self.site()] += 1
        return self.original(*args, **kwargs)

    def __enter__(self):
        self.module.optimized_attention = self
        return self

    def __exit__(self, *exc):
        self.module.optimized_attention = self.original


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def h3_model():
    state = tiny_h3_models.dit_state("healthy", generator_for("attention_reach_h3", SEED), text_dim=H3_TEXT_DIM)
    model = comfy.sd.load_diffusion_model_state_dict(state)
    latent = NESTED.NestedTensor((torch.zeros(1, 24, 2, 4, 4), torch.zeros(1, 32, 2, 10)))
    gen = torch.Generator().manual_seed(SEED)
    prompts = [torch.randn(1, n, H3_TEXT_DIM, generator=gen) for n in (7, 5)]
    return model, latent, prompts, H3, "optimized_attention"


def ltx_model():
    net = build(AV.LTXAVModel, **LTX_CONFIG, operations=comfy.ops.disable_weight_init, dtype=torch.float32)
    state = randomize(net, generator_for("attention_reach_ltx", SEED))
    model = comfy.sd.load_diffusion_model_state_dict(state, metadata={"config": json.dumps({"transformer": LTX_CONFIG})})
    latent = NESTED.NestedTensor((torch.zeros(1, 128, 2, 2, 2), torch.zeros(1, 8, 4, 16)))
    gen = torch.Generator().manual_seed(SEED)
    prompts = [torch.randn(1, n, LTX_CONFIG["caption_channels"], generator=gen) for n in (7, 5)]
    return model, latent, prompts, core_attention, "optimized_attention"


def sample(model, latent, prompts, spy_module):
    positive, negative = ([[p, {"frame_rate": 25}]] for p in prompts)
    noise = comfy.sample.prepare_noise(latent, SEED)
    net = model.get_model_object("diffusion_model")
    lines = Lines()
    logging.getLogger("H3Kit").addHandler(lines)
    try:
        with Spy(spy_module, net) as spy, torch.inference_mode():
            out = comfy.sample.sample(model, noise, STEPS, CFG, "euler", "simple", positive, negative, latent,
                                      seed=SEED, disable_pbar=True)
    finally:
        logging.getLogger("H3Kit").removeHandler(lines)
    return out, dict(spy.calls), [m for m in lines.messages if "sampling done" in m]


def override_of(model):
    return model.model_options["transformer_options"][SITES.OVERRIDE_KEY]


def family(build_model) -> dict:
    model, latent, prompts, spy_module, _name = build_model()
    host_out, host_calls, _ = sample(model, latent, prompts, spy_module)
    result = {"model": type(model.model.diffusion_model).__name__, "host_calls": host_calls}

    options_only = model.clone()  # the override in transformer_options alone: what the host hands it by itself
    options_only.model_options["transformer_options"] = {SITES.OVERRIDE_KEY: ATTENTION.BackendOverride("cudnn")}
    _out, calls, _ = sample(options_only, latent, prompts, spy_module)
    result["options_only"] = {"calls": calls, "override_sites": dict(override_of(options_only).sites)}

    patched, report = ATTENTION.H3KitAttentionBackend().patch(model, "cudnn")
    out, calls, summaries = sample(patched, latent, prompts, spy_module)
    override = override_of(patched)
    result["backend"] = {"calls": calls, "override_sites": dict(override.sites), "paths": dict(override.paths),
                         "summaries": summaries, "report": json.loads(report),
                         "equal": all(torch.equal(a, b) for a, b in zip(out.unbind(), host_out.unbind(), strict=True))}

    lowvram, low_report = LOWVRAM.H3KitLowVRAMAttention().patch(model, 2)
    both, report = ATTENTION.H3KitAttentionBackend().patch(lowvram, "cudnn")
    out, calls, summaries = sample(both, latent, prompts, spy_module)
    override = override_of(both)
    result["lowvram_backend"] = {"calls": calls, "override_sites": dict(override.sites), "summaries": summaries,
                                 "lowvram_report": json.loads(low_report), "report": json.loads(report)}
    return result


def main() -> dict:
    result = {"has_h3": H3 is not None and hasattr(H3, "TokenRefiner") and NESTED is not None,
              "has_ltxav": AV is not None and CONNECTOR is not None and NESTED is not None and sized_connectors()}
    if result["has_h3"]:
        result["h3"] = family(h3_model)
    if result["has_ltxav"]:
        result["ltx"] = family(ltx_model)
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
