"""Tiny random-weight MiniMax-H3 checkpoints written with a real ComfyUI host's own classes, for tier (b).

Test code calls `install(server, dits=...)`: it runs this file with the HOST's python (which imports the host's
`comfy`, so key names and layouts are that host's) and writes into the server's temporary models/:

- diffusion_models/tiny_h3_<dit>.safetensors: `comfy.ldm.minimax.model.MiniMaxH3Model`, 1 block + 1 refiner
  block, hidden 64 = 2 heads x 32, RoPE over 24 of the 32 head dims (as the real 96 of 128), text width 64.
  No config in the file: the host detects every size from the tensor shapes (comfy/model_detection.py).
  healthy: plain random weights; garbage: finite weights whose output projections overflow to +-Inf (what an
  fp16 overflow does); nan: NaN attention weights in the block.
- loras/tiny_h3_lora.safetensors: a rank-2 LoRA on the block's qkv and fc1 (the graphs' LoraLoaderModelOnly).
- text_encoders/tiny_h3_text_encoder.safetensors: the H3 text encoder (Qwen3-VL-32B layout, 50 layers) at the DiT's
  text width 64, the full Qwen vocabulary (any prompt tokenizes), random weights, and a tiny vision tower for the
  Ref2VA reference pictures; written and loaded by tests/tiny_h3_text_encoder.py (the host's CLIPLoader builds the
  encoder at full size whatever the file holds: the graphs load it with that module's test loader node).
- only with `install_effects(server, texts)` (--effects): tiny_h3_healthy_t5120.safetensors and
  tiny_h3_text_encoder_t5120.safetensors, the same DiT and encoder at the real H3 token width 5120, which effect
  files have ([N, 5120], checked by H3KitEffectPrompt), the encoder's vocabulary cut to the ids of `texts` (a full
  one would be 0.8 G parameters at that width; this one is ~0.6 G, bf16: ~1.2 GB, ~1 min to write on 2 loaded cores).
- vae/tiny_h3_video_vae.safetensors, vae/tiny_h3_audio_vae.safetensors: the H3 video VAE (x16 space, 17k+5
  frames <-> 5k+2 latents, 24 channels) and audio VAE (32 kHz, 800 samples per latent, [B, 32, 2, T]) in the key
  layout the host detects, built from the host's classes at a small width. Their widths are in the metadata
  (`h3kit_tiny_sizes`): the host's VAE loader builds these models at full size whatever the file holds (sd.py
  constructs them without a config), so the graphs load them with the test stand-in `TinyH3VAELoader`
  (tests/comfyui_standins), which runs the host's own `comfy.sd.VAE` with the constructors sized from that entry.

The LTX-2 side of the two-stage graphs is tests/tiny_ltx_models.py. Direct use (host python):

    <host python> tests/tiny_h3_models.py --comfyui-dir DIR --models DIR [--dit healthy|garbage|nan]...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from subprocess import run as run_process

import torch

HERE = Path(__file__).resolve().parent
SEED = 23
DIT_KINDS = ("healthy", "garbage", "nan")
DIT_CONFIG = {  # MiniMaxH3Model keywords; the real model: 5376 = 56 x 128, 50 blocks, text 5120, RoPE 16 x 3 x 2
    "hidden_size": 64, "num_layers": 1, "token_refiner_num_layers": 1, "num_attention_heads": 2,
    "attention_head_dim": 32, "ffn_hidden_size": 64, "latents_dim": 24, "audio_latents_dim": 32, "text_dim": 64,
    "timestep_input_dim": 32, "time_embed_hidden_size": 64, "time_embed_dim": 32, "rope_inv_freq_len": 4,
}
TEXT_ENCODER = "tiny_h3_text_encoder.safetensors"
EFFECTS_TEXT_DIM = 5120  # the real H3 token width (Qwen3-VL-32B hidden size), the width of every effect file
QWEN_VOCAB = 151936  # Qwen3-VL's vocabulary: every id the host's H3 tokenizer can give
OVERFLOW_GAIN = 1e38  # x the output projections: the first sampler step's velocity overflows to Inf
LORA_RANK = 2
LORA_TARGETS = ("blocks.0.attn.qkv_proj", "blocks.0.mlp.fc1")
SIZES_KEY = "h3kit_tiny_sizes"
# Constructor keywords of the host's classes; the full-size defaults are ch 128, ch_mult 1,2,2,4,4,8, 2 res blocks,
# a 36-layer 32 x 64 ViT decoder (~2e9 parameters), and a 64 / 2048 / 1024-wide audio VAE.
VIDEO_VAE_SIZES = {"MiniMaxH3VideoVAE": {"ch": 32, "ch_mult": [1, 1, 1, 1, 1, 1], "num_res_blocks": 1},
                   "ViT3DDecoder": {"num_layers": 1, "heads": 2, "dim_head": 16}}
# The audio decoder keeps the host's x800 upsampling (samples per latent) in 2 stages instead of 7, 1 residual block
# each instead of 3: the full-depth vocoder alone takes ~20 s per clip on 2 loaded CPU cores even at this width.
AUDIO_VAE_SIZES = {"MiniMaxH3AudioVAE": {"encoder_dim": 4, "latent_dim": 32, "decoder_dim": 32},
                   "BigVGAN": {"upsample_rates": [25, 32], "upsample_kernel_sizes": [25, 32],
                               "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1]]}}
AUDIO_OUTPUT_GAIN = 0.05  # x the vocoder's last conv: random weights otherwise saturate the [-1, 1] clamp
VIDEO_VAE = "tiny_h3_video_vae.safetensors"
AUDIO_VAE = "tiny_h3_audio_vae.safetensors"
LORA = "tiny_h3_lora.safetensors"


def dit_name(kind: str, text_dim: int = DIT_CONFIG["text_dim"]) -> str:
    return f"tiny_h3_{kind}.safetensors" if text_dim == DIT_CONFIG["text_dim"] else f"tiny_h3_{kind}_t{text_dim}.safetensors"


def text_encoder_name(text_dim: int = DIT_CONFIG["text_dim"]) -> str:
    return TEXT_ENCODER if text_dim == DIT_CONFIG["text_dim"] else f"tiny_h3_text_encoder_t{text_dim}.safetensors"


# ------------------------------------------------------------------------------------- test process side
def install(server, dits: tuple[str, ...] = DIT_KINDS) -> dict:
    """Write the tiny H3 files into `server`'s models/ with its host's python; files already there are kept (the
    same seed writes the same bytes). Returns {file name: path}. `server` is a tests/comfyui_host.ComfyUIServer."""
    paths = {name: server.models_dir / folder / name for folder, name in
             [("diffusion_models", dit_name(k)) for k in dits]
             + [("vae", VIDEO_VAE), ("vae", AUDIO_VAE), ("loras", LORA), ("text_encoders", TEXT_ENCODER)]}
    if all(path.is_file() for path in paths.values()):
        return {name: str(path) for name, path in paths.items()}
    command = [server.python, str(HERE / "tiny_h3_models.py"), "--comfyui-dir", str(server.comfyui_dir),
               "--models", str(server.models_dir)]
    for kind in dits:
        command += ["--dit", kind]
    return _write(server, command)


def install_effects(server, texts: list[str]) -> dict:
    """The 5120-wide DiT and text encoder for graphs with effect rows (vocabulary: the ids of `texts`); kept when
    there. Returns {file name: path}."""
    paths = {name: server.models_dir / folder / name for folder, name in
             (("diffusion_models", dit_name("healthy", EFFECTS_TEXT_DIM)),
              ("text_encoders", text_encoder_name(EFFECTS_TEXT_DIM)))}
    if all(path.is_file() for path in paths.values()):
        return {name: str(path) for name, path in paths.items()}
    command = [server.python, str(HERE / "tiny_h3_models.py"), "--comfyui-dir", str(server.comfyui_dir),
               "--models", str(server.models_dir), "--effects"]
    for text in texts:
        command += ["--text", text]
    return _write(server, command)


def _write(server, command: list[str]) -> dict:
    result = run_process(command, cwd=server.comfyui_dir, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, f"tiny H3 writer failed on {server.host.name}:\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])["written"]


# ------------------------------------------------------------------------------------------ host side
def dit_state(kind: str, generator: torch.Generator, text_dim: int = DIT_CONFIG["text_dim"]) -> dict[str, torch.Tensor]:
    import comfy.ops
    from comfy.ldm.minimax.model import MiniMaxH3Model
    from host_weights import build, randomize

    config = {**DIT_CONFIG, "text_dim": text_dim}
    model = build(MiniMaxH3Model, **config, operations=comfy.ops.disable_weight_init, dtype=torch.float32)
    state = randomize(model, generator)
    length = DIT_CONFIG["rope_inv_freq_len"]  # per-axis RoPE frequencies (an empty buffer in the host's class)
    state["rope.inv_freq"] = 1.0 / (100.0 ** (torch.arange(length, dtype=torch.float32) / length))
    if kind == "garbage":
        for name in ("final_layer.video_out.weight", "final_layer.audio_out.weight"):
            state[name] = state[name] * OVERFLOW_GAIN
    if kind == "nan":
        state["blocks.0.attn.qkv_proj.weight"] = torch.full_like(state["blocks.0.attn.qkv_proj.weight"], float("nan"))
    return state


def lora_state(dit: dict[str, torch.Tensor], generator: torch.Generator) -> dict[str, torch.Tensor]:
    state = {}
    for target in LORA_TARGETS:
        out_dim, in_dim = dit[f"{target}.weight"].shape
        state[f"diffusion_model.{target}.lora_down.weight"] = torch.randn(LORA_RANK, in_dim, generator=generator) * 0.1
        state[f"diffusion_model.{target}.lora_up.weight"] = torch.randn(out_dim, LORA_RANK, generator=generator) * 0.1
    return state


def video_vae_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    import comfy.ldm.minimax.vae as host_vae
    from comfyui_standins.h3_vae_sizes import sized
    from host_weights import randomize

    with sized(host_vae, VIDEO_VAE_SIZES):
        model = host_vae.MiniMaxH3VideoVAE()
    own = model.state_dict()
    state = randomize(model, generator)
    for name in ("latents_mean", "latents_std"):  # the host's latent statistics, kept as the class defines them
        state[name] = own[name].clone()
    return state


def audio_vae_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    import comfy.ldm.minimax.audio_vae as host_audio
    from comfyui_standins.h3_vae_sizes import sized
    from host_weights import randomize

    with sized(host_audio, AUDIO_VAE_SIZES):
        model = host_audio.MiniMaxH3AudioVAE()
    state = randomize(model, generator)
    for name, tensor in state.items():  # buffers the class leaves empty, and snake slopes
        if name in ("latents_mean",) or name.endswith("zero_k_bias"):
            state[name] = torch.zeros_like(tensor)
        elif name == "latents_std":
            state[name] = torch.ones_like(tensor)
        elif name.endswith((".alpha", ".beta")):  # Snake1d alpha (linear scale): 1; SnakeBeta (log scale): exp(0) = 1
            state[name] = torch.ones_like(tensor) if tensor.ndim == 3 else torch.zeros_like(tensor)
    state["decoder.conv_post.weight"] = state["decoder.conv_post.weight"] * AUDIO_OUTPUT_GAIN
    return state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui-dir", required=True, type=Path)
    parser.add_argument("--models", required=True, type=Path)
    parser.add_argument("--dit", action="append", choices=DIT_KINDS, default=None)
    parser.add_argument("--effects", action="store_true", help="only the 5120-wide healthy DiT and text encoder")
    parser.add_argument("--text", action="append", default=[], help="(--effects) a text the encoder must take")
    args = parser.parse_args()
    from host_weights import generator_for, use_host_on_cpu, write

    use_host_on_cpu(args.comfyui_dir)
    from tiny_h3_text_encoder import TINY_VISION, write_text_encoder

    written = {}
    if args.effects:
        path = args.models / "diffusion_models" / dit_name("healthy", EFFECTS_TEXT_DIM)
        write(path, dit_state("healthy", generator_for("tiny_h3", SEED), EFFECTS_TEXT_DIM))
        written[path.name] = str(path)
        path = args.models / "text_encoders" / text_encoder_name(EFFECTS_TEXT_DIM)
        write_text_encoder(path, texts=args.text, kind="random", dtype="bf16", seed=SEED, hidden_size=EFFECTS_TEXT_DIM)
        written[path.name] = str(path)
        print(json.dumps({"written": written}))
        return 0
    for kind in args.dit or ["healthy"]:  # the same random weights for every kind: they differ only where said
        path = args.models / "diffusion_models" / dit_name(kind)
        write(path, dit_state(kind, generator_for("tiny_h3", SEED)))
        written[path.name] = str(path)
    shapes = dit_state("healthy", generator_for("tiny_h3", SEED))
    outputs = (("loras", LORA, lambda g: lora_state(shapes, g), None),
               ("vae", VIDEO_VAE, video_vae_state, VIDEO_VAE_SIZES),
               ("vae", AUDIO_VAE, audio_vae_state, AUDIO_VAE_SIZES))
    for folder, name, state_of, sizes in outputs:
        path = args.models / folder / name
        write(path, state_of(generator_for(name, SEED)), {SIZES_KEY: json.dumps(sizes)} if sizes else None)
        written[name] = str(path)
    path = args.models / "text_encoders" / TEXT_ENCODER
    write_text_encoder(path, vocab_size=QWEN_VOCAB, kind="random", dtype="fp32", seed=SEED,
                       hidden_size=DIT_CONFIG["text_dim"], vision=TINY_VISION)
    written[TEXT_ENCODER] = str(path)
    print(json.dumps({"written": written, "dit_config": DIT_CONFIG}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
