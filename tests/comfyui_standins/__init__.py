"""Test-only ComfyUI nodes, linked into every tier-(b)/(d) server as custom_nodes/H3KitTestStandIns by
tests/comfyui_host.py. Never part of the pack; each stands in for something a test cannot use at real size.

TinyH3VAELoader   the host's VAELoader for the tiny MiniMax-H3 VAEs of tests/tiny_h3_models.py. The host's loader
                  builds the H3 VAEs at full size whatever the file holds; this one runs the host's own
                  VAELoader.load_vae (detection by key layout, comfy.sd.VAE, its ratios and tiling) with the
                  constructors sized from the file's `h3kit_tiny_sizes` metadata. A file without that entry is
                  refused.
H3KitTestTinyTextEncoderLoader   the CLIPLoader for the tiny H3 text encoder, defined in tests/tiny_h3_text_encoder.py
                  (registered here so every test server has it).
GET /h3kit_test/loop_lag   a timer task on the server's event loop: how late it woke (loop_probe.py).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from .loop_probe import register as _register_loop_probe

SIZES_KEY = "h3kit_tiny_sizes"


def _tiny_sizes(path: str) -> dict:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as handle:
        text = (handle.metadata() or {}).get(SIZES_KEY)
    if not text:
        raise ValueError(f"TinyH3VAELoader: {path} has no '{SIZES_KEY}' metadata; it loads only the tiny test VAEs "
                         "written by tests/tiny_h3_models.py (use VAELoader for a real VAE)")
    return json.loads(text)


class TinyH3VAELoader:
    DESCRIPTION = "Test stand-in: the host's VAELoader for a tiny MiniMax-H3 VAE (tests/tiny_h3_models.py)."
    CATEGORY = "testing/h3kit"
    FUNCTION = "load_vae"
    RETURN_TYPES = ("VAE",)

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        import folder_paths

        return {"required": {"vae_name": (folder_paths.get_filename_list("vae"),
                                          {"tooltip": "a tiny H3 VAE written by tests/tiny_h3_models.py"})}}

    def load_vae(self, vae_name: str):
        import comfy.ldm.minimax.audio_vae as host_audio
        import comfy.ldm.minimax.vae as host_vae
        import folder_paths

        import nodes

        from .h3_vae_sizes import sized

        sizes = _tiny_sizes(folder_paths.get_full_path_or_raise("vae", vae_name))
        module = host_vae if "MiniMaxH3VideoVAE" in sizes else host_audio
        with sized(module, sizes):
            return nodes.VAELoader().load_vae(vae_name)


def _text_encoder_module():
    """tests/tiny_h3_text_encoder.py, found through this package's real location (it is linked into custom_nodes)."""
    path = Path(__file__).resolve().parent.parent / "tiny_h3_text_encoder.py"
    spec = importlib.util.spec_from_file_location("h3kit_test_tiny_h3_text_encoder", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NODE_CLASS_MAPPINGS = {"TinyH3VAELoader": TinyH3VAELoader, **_text_encoder_module().NODE_CLASS_MAPPINGS}
NODE_DISPLAY_NAME_MAPPINGS = {"TinyH3VAELoader": "Tiny H3 VAE Loader (test stand-in)"}

_register_loop_probe()
