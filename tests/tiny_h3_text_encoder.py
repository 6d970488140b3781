"""A tiny random MiniMax-H3 text encoder written, and loaded, with a real ComfyUI host's own classes.

Run with the HOST's python (it imports the host's `comfy`; CPU is forced before that), never from the test process:

    <host python> tests/tiny_h3_text_encoder.py --comfyui-dir DIR --out FILE [--kind passthrough|random]
                  [--text TEXT ...] [--vocab-size N] [--dtype bf16|fp16|fp32]     -> one JSON line

Why a loader of its own: ComfyUI 0.33.0 recognises the H3 text encoder by key names alone
(`visual.deepstack_merger_list.0.norm.weight` and `model.layers.49.self_attn.q_proj.weight`, comfy/sd.py
detect_te_model) and then builds `Qwen3VL_32BConfig` at full size (hidden 5120, 50 layers, 64 heads, FFN 25600,
vocab 151936, the full Qwen3-VL vision tower: ~32 B parameters) whatever the file holds, so a tiny file cannot load
through CLIPLoader as is. The host's own way to size it differently is model_options["qwen3vl_32b_model_config"]
(comfy/sd1_clip.py SDClipModel reads "<model_name>_model_config"), which CLIPLoader never passes. Here:

- write_text_encoder(path, ...) builds the host's MiniMaxQwen3VL (comfy/text_encoders/minimax.py) with TINY_CONFIG,
  fills its weights and saves them with the config as safetensors metadata "h3kit_te_config" (JSON).
- load_text_encoder(path, embedding_directory) hands the file to comfy.sd.load_text_encoder_state_dicts with
  clip_type MINIMAX and that config as model_options: the host's detection, its minimax.te() factory, its
  MiniMaxH3Tokenizer and CLIP, exactly as CLIPLoader would, only smaller.
- Dropped into a test base directory's custom_nodes/ as a single file, it also registers the node
  H3KitTestTinyTextEncoderLoader (a text_encoders file name -> CLIP): a tier-(b) graph swaps its CLIPLoader for it.

Sizes: hidden 5120 is kept (the H3 token width: an effect's [N, 5120] rows are spliced only when they match it);
head_dim 128 is fixed by the host class; 50 layers of 1 head, 1 KV head and FFN 8 (the detection key needs layer 49):
~2.6 M parameters a layer. The vocabulary covers the given texts (the token embedding is vocab x 5120, the largest
part; the shipped effects prompt needs ids up to 92885). No vision tower weights are written except the detection
key: graphs with reference images/videos need them (the tower is not shrinkable through the config).

Reference pictures/videos (Ref2VA) go through the encoder's Qwen3-VL vision tower, which the host sizes from a
module-level table (comfy/text_encoders/qwen3vl.py QWEN3VL_VISION["qwen3vl_32b"] + QWEN3VL_VISION_COMMON: 27 blocks
of 1152, ~0.4 B parameters), not from the file. write_text_encoder(..., vision=TINY_VISION) builds and fills a tower
of that size with the host's classes and stores the sizes as metadata "h3kit_te_vision"; load_text_encoder builds the
host's model with the table entries set to them for the construction (under a lock) and restores them.
hidden_size (default 5120) can be set smaller for graphs that need no 5120-wide effect rows: the DiT's text width
(condition_proj) must equal it.

Kinds: "passthrough" zeroes every layer's matrices (so o_proj and down_proj: each layer adds exactly 0) and, with no
final norm in the 32B config, the conditioning IS the sequence the encoder received: each position holds its token's
embedding row or the effect row spliced there. "random" uses random weights everywhere (causal mixing).

The H3 tokenizer reads comfy/text_encoders/qwen25_tokenizer (vocab.json and merges.txt, both in the stored 0.33.0
snapshot); the missing qwen35_tokenizer/vocab.json belongs to the Qwen3.5 encoders, which H3 never uses.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

SEED = 24
METADATA_KEY = "h3kit_te_config"
VISION_KEY = "h3kit_te_vision"
# The vision tower's table entries for a tiny tower (the host's: 1152 wide, 4304 FFN, 27 blocks, 16 heads,
# DeepStack taps after blocks 8, 16, 24); patch 16, temporal patch 2 and 2x2 merge are kept.
TINY_VISION = {"hidden_size": 32, "intermediate_size": 32, "depth": 1, "deepstack_visual_indexes": [0], "num_heads": 2}
_VISION_COMMON_KEYS = ("num_heads",)  # entries of QWEN3VL_VISION_COMMON; the others are per-model
MODEL_NAME = "qwen3vl_32b"  # MiniMaxH3TEModel's clip name: its model_options key is "qwen3vl_32b_model_config"
TINY_CONFIG = {"hidden_size": 5120, "num_hidden_layers": 50, "num_attention_heads": 1, "num_key_value_heads": 1,
               "intermediate_size": 8}
VOCAB_MULTIPLE = 128
PAD_ID = 151643  # the H3 tokenizer's pad / empty-prompt token: a vocabulary below it cannot encode an empty prompt
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
EMBEDDING = "model.embed_tokens.weight"
DETECTION_VISION_KEY = "visual.deepstack_merger_list.0.norm.weight"
BLOCK_ROWS = 4096
KINDS = ("passthrough", "random")


def force_cpu(comfyui_dir: str | os.PathLike | None = None) -> None:
    """Import path and CPU mode for a script run (a server run is already set up): before any comfy import."""
    if comfyui_dir is not None and str(comfyui_dir) not in sys.path:
        sys.path.insert(0, str(comfyui_dir))
    from comfy.cli_args import args

    args.cpu = True


def token_ids(texts: list[str]) -> list[int]:
    """Every id the host's MiniMax-H3 tokenizer can give `texts`: the whole text (markers as text, ComfyUI 0.33.0)
    and the pieces its inner SDTokenizer cuts at markers (newer hosts, and H3KitEffectPrompt's clip output)."""
    from comfy.text_encoders.minimax import MiniMaxH3Tokenizer

    tokenizer = MiniMaxH3Tokenizer(embedding_directory=[])  # an empty folder list: markers are cut, never found
    ids: list[int] = []
    for text in texts:
        for batch in (tokenizer.tokenize_with_weights(text)[MODEL_NAME][0],
                      getattr(tokenizer, MODEL_NAME).tokenize_with_weights(text, disable_weights=True)[0]):
            ids += [entry[0] for entry in batch if isinstance(entry[0], int)]
    return ids


def vocab_for(texts: list[str]) -> int:
    """The smallest vocabulary (a multiple of 128) holding every id of `texts`."""
    top = max(token_ids(texts), default=0)
    return VOCAB_MULTIPLE * (top // VOCAB_MULTIPLE + 1)


def _fill(name: str, shape: tuple[int, ...], generator, kind: str, dtype):
    """Norm weights 1, biases 0, matrices ~ N(0, 1/fan_in) (token embeddings N(0, 1): distinct rows); "passthrough"
    zeroes the output projections. Large tensors are drawn in row blocks, so memory stays near the result's size."""
    import torch

    if kind == "passthrough" and name.startswith("model.layers.") and len(shape) >= 2:
        return torch.zeros(shape, dtype=dtype)  # every layer adds exactly 0 (o_proj and down_proj are zero)
    if len(shape) < 2:
        return (torch.ones if name.endswith("weight") else torch.zeros)(shape, dtype=dtype)
    scale = 1.0 if name == EMBEDDING else 1.0 / math.sqrt(shape[-1])
    out = torch.empty(shape, dtype=dtype)
    for start in range(0, shape[0], BLOCK_ROWS):
        block = out[start:start + BLOCK_ROWS]
        block.copy_(torch.randn(block.shape, generator=generator) * scale)
    return out


_VISION_LOCK = threading.Lock()


@contextmanager
def vision_sized(vision: dict | None):
    """The host's Qwen3-VL-32B vision table set to `vision` while a model is built (None: left as the host has it)."""
    if not vision:
        yield
        return
    import comfy.text_encoders.qwen3vl as host

    with _VISION_LOCK:
        own, common = dict(host.QWEN3VL_VISION[MODEL_NAME]), dict(host.QWEN3VL_VISION_COMMON)
        try:
            host.QWEN3VL_VISION[MODEL_NAME].update({k: v for k, v in vision.items() if k not in _VISION_COMMON_KEYS})
            host.QWEN3VL_VISION_COMMON.update({k: v for k, v in vision.items() if k in _VISION_COMMON_KEYS})
            yield
        finally:
            host.QWEN3VL_VISION[MODEL_NAME].clear()
            host.QWEN3VL_VISION[MODEL_NAME].update(own)
            host.QWEN3VL_VISION_COMMON.clear()
            host.QWEN3VL_VISION_COMMON.update(common)


def text_encoder_state(config: dict, kind: str, dtype: str, seed: int = SEED, vision: dict | None = None) -> dict:
    """The host model's language-model weights for `config` (its own module names, read from the model built on the
    meta device, so nothing is allocated for it), plus the one vision key the host's detection looks for; with
    `vision`, the whole (tiny) vision tower, random."""
    import comfy.ops
    import torch
    from comfy.text_encoders.minimax import MiniMaxQwen3VL

    generator = torch.Generator().manual_seed(seed)
    with vision_sized(vision):
        model = MiniMaxQwen3VL(config, torch.float32, "meta", comfy.ops.disable_weight_init)
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    torch_dtype = getattr(torch, DTYPES[dtype])
    wanted = {name: shape for name, shape in shapes.items()
              if vision or not name.startswith("visual.") or name == DETECTION_VISION_KEY}
    # vision matrices are random for either kind: "passthrough" is about the language layers
    return {name: _fill(name, shape, generator, "random" if name.startswith("visual.") else kind,
                        torch_dtype).contiguous() for name, shape in wanted.items()}


def write_text_encoder(path: str | os.PathLike, *, texts: list[str] | None = None, vocab_size: int | None = None,
                       kind: str = "passthrough", dtype: str = "bf16", seed: int = SEED,
                       hidden_size: int | None = None, vision: dict | None = None) -> dict:
    """Write the tiny encoder to `path` (a .safetensors under models/text_encoders for a server run).

    vocab_size: explicit, else the smallest that holds every id of `texts` (at least one text or a size is needed).
    hidden_size: the token width (default TINY_CONFIG's 5120); vision: a tiny vision tower (e.g. TINY_VISION) for
    reference pictures/videos. Returns {"path", "config", "vision", "kind", "dtype", "parameters"}. Needs the host's
    comfy importable (force_cpu first)."""
    from safetensors.torch import save_file

    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: use one of {', '.join(KINDS)}")
    if vocab_size is None:
        if not texts:
            raise ValueError("give the texts the encoder must take, or vocab_size")
        vocab_size = vocab_for(texts)
    config = {**TINY_CONFIG, "vocab_size": int(vocab_size)}
    if hidden_size is not None:
        config["hidden_size"] = int(hidden_size)
    state = text_encoder_state(config, kind, dtype, seed, vision)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    metadata = {METADATA_KEY: json.dumps(config)}
    if vision:
        metadata[VISION_KEY] = json.dumps(vision)
    save_file(state, str(partial), metadata=metadata)
    partial.replace(path)
    return {"path": str(path), "config": config, "vision": vision, "kind": kind, "dtype": dtype,
            "parameters": sum(t.numel() for t in state.values())}


def read_config(path: str | os.PathLike, key: str = METADATA_KEY) -> dict | None:
    """The stored language-model config (required) or, with key=VISION_KEY, the vision sizes (None when absent)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        raw = (handle.metadata() or {}).get(key)
    if raw is None and key == METADATA_KEY:
        raise ValueError(f"{path} has no '{METADATA_KEY}' metadata: not written by tests/tiny_h3_text_encoder.py")
    return None if raw is None else json.loads(raw)


def load_text_encoder(path: str | os.PathLike, embedding_directory=None):
    """The host's CLIP for the tiny file: comfy.sd.load_text_encoder_state_dicts(clip_type=MINIMAX) with the stored
    configuration as model_options["qwen3vl_32b_model_config"] (what CLIPLoader does, plus the size)."""
    import comfy.sd
    import comfy.utils

    state = comfy.utils.load_torch_file(str(path), safe_load=True)
    options = {f"{MODEL_NAME}_model_config": read_config(path)}
    with vision_sized(read_config(path, VISION_KEY)):
        return comfy.sd.load_text_encoder_state_dicts([state], embedding_directory=embedding_directory,
                                                       clip_type=comfy.sd.CLIPType.MINIMAX, model_options=options)


class H3KitTestTinyTextEncoderLoader:
    """Test-only node (never shipped): CLIPLoader for files written by write_text_encoder."""

    CATEGORY = "H3Kit/tests"
    FUNCTION = "load"
    RETURN_TYPES = ("CLIP",)
    DESCRIPTION = "Loads a tiny MiniMax-H3 text encoder written by tests/tiny_h3_text_encoder.py (tier-b tests only)."

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        import folder_paths

        return {"required": {"clip_name": (folder_paths.get_filename_list("text_encoders"),
                                           {"tooltip": "A file written by tests/tiny_h3_text_encoder.py"})}}

    def load(self, clip_name: str) -> tuple:
        import folder_paths

        path = folder_paths.get_full_path_or_raise("text_encoders", clip_name)
        return (load_text_encoder(path, folder_paths.get_folder_paths("embeddings")),)


NODE_CLASS_MAPPINGS = {"H3KitTestTinyTextEncoderLoader": H3KitTestTinyTextEncoderLoader}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--kind", choices=KINDS, default="passthrough")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--text", action="append", default=[])
    parser.add_argument("--vocab-size", type=int)
    args = parser.parse_args()
    force_cpu(args.comfyui_dir)
    written = write_text_encoder(args.out, texts=args.text, vocab_size=args.vocab_size, kind=args.kind,
                                 dtype=args.dtype)
    print(json.dumps(written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
