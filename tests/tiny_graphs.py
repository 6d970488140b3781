"""The shipped API graphs (workflows/api/) made runnable on a real host with tiny weights, changing as little as
possible, and saying exactly what changed. Test-process side; the weights come from tests/tiny_h3_models.py and
tests/tiny_ltx_models.py, the cached LTX refine prompt from the pack's own cache writer (nodes/cond_cache_format.py).

    graph, changes = tiny_graph("h3_ltx_two_stage", server, h3="healthy", ltx="healthy", prefix="x")

What `tiny_graph` changes (every change is returned as one line of `changes`; nothing else differs):
- model files -> the tiny ones: UNETLoader (H3 and LTX), LoraLoaderModelOnly, VAELoader (LTX video VAE),
  LatentUpscaleModelLoader, H3KitLoadConditioning (the cached refine prompt);
- loaders the host builds at full size whatever the file holds -> test stand-ins that run the host's own loading
  code at the file's size: the H3 VAELoader nodes -> TinyH3VAELoader (tests/comfyui_standins), the H3 CLIPLoader ->
  H3KitTestTinyTextEncoderLoader (tests/tiny_h3_text_encoder.py); every H3 node that encodes a prompt, a picture or
  a sound (MiniMaxH3ImageToVideo, MiniMaxH3ReferenceToVideo, H3KitEffectPrompt) runs as shipped;
- UnetLoaderGGUF -> UNETLoader with the tiny LTX refiner, only where the ComfyUI-GGUF pack is not installed;
- the LTX refine prompt's text encoder (Gemma; no tiny one) -> the cached prompt: CLIPLoader + CLIPTextEncode become
  H3KitLoadConditioning, as in the shipped _cached_cond graph;
- sizes: H3 width x height (1344x768 and the others) -> 128x64, length -> 22 (17k+5) except in the Ref2VA graphs,
  whose prompt node times its shots against the same length (the pack's validator refuses a mismatch, and a
  22-frame clip cannot hold the shipped shots); the handoff's target -> 256x128 (exactly twice the draft, as
  672x384 -> 1344x768);
- SaveVideo: filename_prefix; then the pack's own host-layout adaptation (checks/host_layout.py, as `run` and the
  editor apply it: SaveVideo's codec in this host's layout).
Everything else (prompts, samplers, steps, seeds, shifts, guards, low-VRAM nodes, links) is the shipped graph.
"""

from __future__ import annotations

import copy
import json
import math
import wave
from pathlib import Path

import pytest
import torch
from h3kit.checks.host_layout import adapt_graph
from h3kit.nodes.cond_cache_format import save_conditioning
from PIL import Image
from tiny_h3_models import AUDIO_VAE, DIT_CONFIG, EFFECTS_TEXT_DIM, LORA, VIDEO_VAE, text_encoder_name
from tiny_h3_models import dit_name as h3_dit_name

API = Path(__file__).resolve().parent.parent / "workflows" / "api"
DRAFT_W, DRAFT_H, LENGTH = 128, 64, 22  # H3: multiples of 32, a 17k+5 length
TARGET_W, TARGET_H = 2 * DRAFT_W, 2 * DRAFT_H
KEPT_FRAMES = {22: 17, 124: 121, 243: 241}  # an H3 length trimmed to LTX's 8n+1 (124 -> 121: field notes)
FPS = 24.0
LTX_PROMPT = "tiny_refine.safetensors"
LTX_CAPTION_CHANNELS = 16  # tiny_ltx_models.DIT_CONFIG: the LTXAV context is [video | audio] halves of this width
LTX_DIT, LTX_VAE, LTX_UPSCALER = "tiny_ltxav_{}.safetensors", "tiny_ltx_video_vae.safetensors", \
    "tiny_ltx_upscaler_x2.safetensors"
H3_SIZED = ("MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo", "EmptyMiniMaxH3LatentAV")
REF_IMAGE_W, REF_IMAGE_H = 96, 64
REF2VA_INPUTS = ("ref2va_subject_1.png", "ref2va_subject_2.png")  # the shipped graphs' LoadImage names


def shipped(name: str) -> dict:
    return json.loads((API / f"{name}.json").read_text())


def write_cached_prompts(server) -> None:
    """The cached LTX refine prompt for the tiny refiner, in the server's conditioning_cache, by the pack's writer."""
    folder = server.models_dir / "conditioning_cache"
    folder.mkdir(parents=True, exist_ok=True)
    ltx = [[torch.randn(1, 8, 2 * LTX_CAPTION_CHANNELS, generator=torch.Generator().manual_seed(3)), {}]]
    save_conditioning(folder, LTX_PROMPT.removesuffix(".safetensors"), ltx, prompt_text="tiny refine prompt",
                      encoder="test")


def write_reference_images(server) -> None:
    """The Ref2VA graphs' two reference pictures under their shipped names: textured, never a flat colour."""
    for shift, name in enumerate(REF2VA_INPUTS):
        image = Image.new("RGB", (REF_IMAGE_W, REF_IMAGE_H))
        image.putdata([(int(255 * x / REF_IMAGE_W), int(255 * y / REF_IMAGE_H), 255 if (x // 8 + y // 8 + shift) % 2
                        else 40) for y in range(REF_IMAGE_H) for x in range(REF_IMAGE_W)])
        image.save(server.base_dir / "input" / name)


def write_tone(path: Path, seconds: float, sample_rate: int = 48000) -> None:
    """Stereo 16-bit PCM: 440 Hz left, 660 Hz right."""
    frames = bytearray()
    for i in range(int(seconds * sample_rate)):
        for freq in (440.0, 660.0):
            frames += int(12000 * math.sin(2 * math.pi * freq * i / sample_rate)).to_bytes(2, "little", signed=True)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(bytes(frames))


class _Editor:
    def __init__(self, graph: dict):
        self.graph = graph
        self.changes: list[str] = []

    def set(self, nid: str, name: str, value) -> None:
        node = self.graph[nid]
        old = node["inputs"].get(name)
        if old != value:
            node["inputs"][name] = value
            self.changes.append(f"node {nid} {node['class_type']}.{name}: {_short(old)} -> {_short(value)}")

    def replace(self, nid: str, class_type: str, inputs: dict, why: str) -> None:
        old = self.graph[nid]["class_type"]
        self.graph[nid] = {"class_type": class_type, "inputs": inputs}
        self.changes.append(f"node {nid} {old} -> {class_type} {_short(inputs)} ({why})")

    def remove(self, nid: str, why: str) -> None:
        node = self.graph.pop(nid)
        self.changes.append(f"node {nid} {node['class_type']} removed ({why})")

    def users(self, nid: str) -> list[tuple[str, str]]:
        return [(uid, name) for uid, node in self.graph.items() for name, value in node["inputs"].items()
                if isinstance(value, list) and len(value) == 2 and value[0] == nid]


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def tiny_graph(name: str, server, h3: str = "healthy", ltx: str = "healthy", prefix: str | None = None,
               adapt: bool = True) -> tuple[dict, list[str]]:
    """(the shipped graph `name` made runnable on `server` with the tiny models, the list of what changed).
    adapt=False leaves the host-layout adaptation to the caller (`run` does it itself and prints it)."""
    edit = _Editor(copy.deepcopy(shipped(name)))
    served = server.served()
    # effect files are [N, 5120]: a graph with effects gets the 5120-wide DiT and encoder (tiny_h3_models.install_effects)
    text_dim = EFFECTS_TEXT_DIM if nodes_of(edit.graph, "H3KitEffectPrompt") else DIT_CONFIG["text_dim"]
    for nid in list(edit.graph):
        node = edit.graph.get(nid)
        if node is not None:
            _tiny_node(edit, nid, node, served, h3, ltx, text_dim)
    for nid in nodes_of(edit.graph, "SaveVideo"):
        if prefix:
            edit.set(nid, "filename_prefix", f"h3kit/{prefix}")
    if not adapt:
        return edit.graph, edit.changes
    adapted = adapt_graph(edit.graph, served)  # the pack's own adaptation, as `run` and the editor apply it
    return adapted.graph, edit.changes + [change.text() for change in adapted.changes]


def nodes_of(graph: dict, class_type: str) -> list[str]:
    return [nid for nid, node in graph.items() if node["class_type"] == class_type]


def h3_length(graph: dict) -> int:
    """The frame count the graph's H3 node renders (one H3 node per shipped graph)."""
    (length,) = {node["inputs"]["length"] for node in graph.values() if node["class_type"] in H3_SIZED}
    return length


def _tiny_node(edit: _Editor, nid: str, node: dict, served: dict, h3: str, ltx: str, text_dim: int) -> None:
    ct, inputs = node["class_type"], node["inputs"]
    if ct == "UNETLoader":
        edit.set(nid, "unet_name", h3_dit_name(h3, text_dim) if inputs["unet_name"].startswith("minimax_h3")
                 else LTX_DIT.format(ltx))
    elif ct == "UnetLoaderGGUF":
        if "UnetLoaderGGUF" in served:
            pytest.skip("this host has ComfyUI-GGUF: a tiny .gguf refiner is not written by these tests yet")
        edit.replace(nid, "UNETLoader", {"unet_name": LTX_DIT.format(ltx), "weight_dtype": "default"},
                     "stand-in: the third-party ComfyUI-GGUF pack is not installed on this host")
    elif ct == "LoraLoaderModelOnly":
        edit.set(nid, "lora_name", LORA)
    elif ct == "VAELoader":
        vae = inputs["vae_name"]
        if vae.startswith("minimax_h3"):
            edit.replace(nid, "TinyH3VAELoader", {"vae_name": AUDIO_VAE if "audio" in vae else VIDEO_VAE},
                         "stand-in: the host's VAELoader builds H3 VAEs at full size")
        else:
            edit.set(nid, "vae_name", LTX_VAE)
    elif ct == "LatentUpscaleModelLoader":
        edit.set(nid, "model_name", LTX_UPSCALER)
    elif ct == "H3KitLoadConditioning":
        edit.set(nid, "name", LTX_PROMPT)
    elif ct == "CLIPLoader" and inputs["type"] == "minimax":
        edit.replace(nid, "H3KitTestTinyTextEncoderLoader", {"clip_name": text_encoder_name(text_dim)},
                     "stand-in: the host's CLIPLoader builds the H3 text encoder at full size")
    elif ct == "CLIPLoader":
        _cached_refine_prompt(edit, nid, inputs["type"])
    elif ct in H3_SIZED:
        sizes = (("width", DRAFT_W), ("height", DRAFT_H))
        if not nodes_of(edit.graph, "H3KitRef2VAPrompt"):
            sizes += (("length", LENGTH),)
        for key, value in sizes:
            edit.set(nid, key, value)
    elif ct == "H3KitDraftToLTX":
        edit.set(nid, "target_width", TARGET_W)
        edit.set(nid, "target_height", TARGET_H)


def _cached_refine_prompt(edit: _Editor, clip_id: str, clip_type: str) -> None:
    """The LTX text encoder and its CLIPTextEncode nodes -> the cached refine prompt (H3KitLoadConditioning)."""
    for user, _ in edit.users(clip_id):
        ct = edit.graph[user]["class_type"]
        if ct != "CLIPTextEncode":
            pytest.fail(f"node {user} ({ct}) uses the {clip_type} text encoder: tests/tiny_graphs.py has no rule for it")
        edit.replace(user, "H3KitLoadConditioning", {"name": LTX_PROMPT}, "cached refine prompt, no text encoder")
    edit.remove(clip_id, f"{clip_type} text encoder: its prompt is cached")
