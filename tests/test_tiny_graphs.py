"""Tier (a): what the stage-1 tier-(b) tests change in the shipped graphs (tests/tiny_graphs.py) is exactly what they
say, and only model files, sizes, the stand-in loaders, the cached LTX prompt and SaveVideo's layout: prompts,
samplers, steps, seeds, shifts, guards and links stay as shipped. No ComfyUI needed (0.33.0's SaveVideo schema is
the stored one in tests/data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_graphs import API, shipped, tiny_graph

SAVEVIDEO_0330 = Path(__file__).parent / "data" / "savevideo_0.33.0.json"
H3_GRAPHS = sorted(p.stem for p in API.glob("h3_*.json"))
# (class_type, input) pairs a test may change; a node may also be swapped for a stand-in or removed, as listed below
CHANGEABLE = {
    ("UNETLoader", "unet_name"), ("LoraLoaderModelOnly", "lora_name"), ("VAELoader", "vae_name"),
    ("LatentUpscaleModelLoader", "model_name"), ("H3KitLoadConditioning", "name"),
    ("MiniMaxH3ImageToVideo", "width"), ("MiniMaxH3ImageToVideo", "height"), ("MiniMaxH3ImageToVideo", "length"),
    ("MiniMaxH3ReferenceToVideo", "width"), ("MiniMaxH3ReferenceToVideo", "height"),
    ("MiniMaxH3ReferenceToVideo", "length"), ("H3KitDraftToLTX", "target_width"), ("H3KitDraftToLTX", "target_height"),
    ("SaveVideo", "filename_prefix"),
}
SWAPS = {("CLIPLoader", "H3KitTestTinyTextEncoderLoader"), ("VAELoader", "TinyH3VAELoader"),
         ("UnetLoaderGGUF", "UNETLoader"), ("CLIPTextEncode", "H3KitLoadConditioning")}
REMOVABLE = {"CLIPLoader"}  # only the LTX refine prompt's encoder, whose prompt is cached


class _Host:
    """What tiny_graph reads from a server: its schemas (0.33.0's SaveVideo; no ComfyUI-GGUF)."""

    def served(self) -> dict:
        return {"SaveVideo": json.loads(SAVEVIDEO_0330.read_text())["SaveVideo"]}


@pytest.mark.parametrize("name", H3_GRAPHS)
def test_only_files_sizes_stand_ins_and_the_save_layout_change_and_every_change_is_listed(name):
    original, (graph, changes) = shipped(name), tiny_graph(name, _Host(), prefix="p")
    described = "\n".join(changes)
    for nid, node in original.items():
        if nid not in graph:
            assert node["class_type"] in REMOVABLE and f"node {nid} {node['class_type']} removed" in described
            continue
        new = graph[nid]
        if new["class_type"] != node["class_type"]:
            assert (node["class_type"], new["class_type"]) in SWAPS, (nid, node, new)
            assert f"node {nid} {node['class_type']} -> {new['class_type']}" in described
            continue
        for key in set(node["inputs"]) | set(new["inputs"]):
            if node["inputs"].get(key) == new["inputs"].get(key):
                continue
            if node["class_type"] == "SaveVideo" and key in ("format.codec", "codec"):
                assert f"node {nid} (SaveVideo): input 'format.codec' -> 'codec'" in described
                continue
            assert (node["class_type"], key) in CHANGEABLE, (nid, node["class_type"], key)
            assert f"node {nid} {node['class_type']}.{key}:" in described
    assert set(graph) <= set(original), "no node added"


def test_the_refine_prompt_encoder_is_the_only_text_encoder_replaced_by_a_cache():
    """The H3 prompts are encoded by the host (a tiny encoder); only the Gemma refine prompt comes from the cache."""
    for name in H3_GRAPHS:
        graph, _ = tiny_graph(name, _Host())
        classes = [node["class_type"] for node in graph.values()]
        assert "CLIPTextEncode" not in classes and "CLIPLoader" not in classes, name
        h3_encoders = [n for n in shipped(name).values() if n["class_type"] == "CLIPLoader"
                       and n["inputs"]["type"] == "minimax"]
        stage2 = name.endswith("_stage2")  # `workflows split`: the LTX half starts at the draft file, no H3 encoder
        assert classes.count("H3KitTestTinyTextEncoderLoader") == len(h3_encoders) == (0 if stage2 else 1), name
