"""Writes tiny random-weight LTX-2 checkpoints that a real ComfyUI host loads with its own loaders.

Run by tests/test_stage2_ltxav_comfyui.py with the HOST's python (it imports the host's `comfy` to get the
exact module layout, so the key names always match that host), never imported by the test process:

    <host python> tests/tiny_ltx_models.py --comfyui-dir DIR --models DIR [--dit healthy|garbage|nan]

Files (ComfyUI's model folders under --models):
- diffusion_models/tiny_ltxav_<dit>.safetensors: LTXAV (audio-video DiT), 1 layer, video 2 heads x 16, audio
  2 heads x 8 (half the video head_dim, as in LTX-2: 128 / 64), with its config in the safetensors metadata
  (without it, detection assumes 32 heads). With head_chunks=2 the video layers (attn1, attn2) take 16-row
  to_v slices (per group) and the audio-width layers 8-row ones (too narrow to be exact: v whole, reported).
  healthy: small output projection (a refiner that changes little); garbage: a huge one (the output is
  dominated by the model, as with a wrong or corrupted refiner); nan: NaN weights in the block.
- vae/tiny_ltx_video_vae.safetensors: the LTX-2 video VAE layout (x32 space, x8 time, 128 latent channels),
  one layer per stage; per-channel statistics scaled so the latent has std of a few units.
- latent_upscale_models/tiny_ltx_upscaler_x2.safetensors: the x2 spatial latent upsampler, 32 mid channels.
- checkpoints/tiny_ltx_audio_vae.safetensors: the LTX-2 audio VAE (mel 64 bins -> 8 x 16 latent = the DiT's 128
  audio channels) with a small vocoder, both configs in the metadata (the loader requires them).
Prints one JSON line: {name: path} plus the configs used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

SEED = 17
DIT_CONFIG = {
    "num_layers": 1, "num_attention_heads": 2, "attention_head_dim": 16,
    "audio_num_attention_heads": 2, "audio_attention_head_dim": 8,
    "cross_attention_dim": 32, "audio_cross_attention_dim": 16, "caption_channels": 16,
    "in_channels": 128, "audio_in_channels": 128,
}
OUTPUT_GAIN = {"healthy": 0.01, "garbage": 300.0, "nan": 0.01}
VAE_CONFIG = {
    "_class_name": "CausalVideoAutoencoder", "dims": 3, "in_channels": 3, "out_channels": 3,
    "latent_channels": 128, "patch_size": 4, "norm_layer": "pixel_norm", "latent_log_var": "uniform",
    "use_quant_conv": False, "causal_decoder": False, "timestep_conditioning": False, "scaling_factor": 1.0,
    "encoder_blocks": [["res_x", {"num_layers": 1}], ["compress_space_res", {"multiplier": 1}],
                       ["res_x", {"num_layers": 1}], ["compress_time_res", {"multiplier": 1}],
                       ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 1}],
                       ["res_x", {"num_layers": 1}], ["compress_all_res", {"multiplier": 1}],
                       ["res_x", {"num_layers": 1}]],
    "decoder_blocks": [["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 1}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 1}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}],
                       ["compress_all", {"residual": True, "multiplier": 1}],
                       ["res_x", {"num_layers": 1, "inject_noise": False}]],
}
VAE_LATENT_STD = 0.05  # per-channel "std-of-means": the normalised latent is the raw one / 0.05
_AUDIO_ENCODER = {"ch": 16, "out_ch": 8, "ch_mult": [1, 2, 4], "num_res_blocks": 1, "attn_resolutions": [],
                  "dropout": 0.0, "resamp_with_conv": True, "in_channels": 2, "resolution": 256, "z_channels": 8,
                  "double_z": True, "attn_type": "vanilla", "mid_block_add_attention": False, "norm_type": "pixel",
                  "causality_axis": "height", "mel_bins": 64}
AUDIO_VAE_CONFIG = {
    "_class_name": "CausalAudioAutoencoder", "sampling_rate": 16000,
    "model": {"params": {"encoder": _AUDIO_ENCODER,
                         "decoder": {**_AUDIO_ENCODER, "out_ch": 2, "give_pre_end": False, "tanh_out": False}}},
}
VOCODER_CONFIG = {"resblock_kernel_sizes": [3], "upsample_rates": [6, 5, 2, 2, 2],
                  "upsample_kernel_sizes": [16, 15, 8, 4, 4], "resblock_dilation_sizes": [[1, 3, 5]],
                  "upsample_initial_channel": 64, "stereo": True, "resblock": "1", "output_sample_rate": 24000}
UPSCALER_CONFIG = {"_class_name": "LatentUpsampler", "in_channels": 128, "mid_channels": 32, "num_blocks_per_stage": 1,
                   "dims": 3, "spatial_upsample": True, "temporal_upsample": False, "spatial_scale": 2.0,
                   "rational_resampler": False}


def randomize(module: torch.nn.Module, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Every parameter and float buffer filled (host layers are often built uninitialised): matrices and
    kernels ~ N(0, 1/fan_in), 1-D weights (norms) 1, biases 0, other vectors small noise."""
    state = {}
    for name, tensor in module.state_dict().items():
        if not tensor.is_floating_point():
            state[name] = tensor.clone()
            continue
        if tensor.ndim >= 2:
            fan_in = math.prod(tensor.shape[1:])
            value = torch.randn(tensor.shape, generator=generator) / math.sqrt(fan_in)
        elif name.endswith("bias"):
            value = torch.zeros(tensor.shape)
        elif name.endswith("weight"):
            value = torch.ones(tensor.shape)
        else:
            value = torch.randn(tensor.shape, generator=generator) * 0.1
        state[name] = value.to(torch.float32).contiguous()
    return state


def write(path: Path, state: dict[str, torch.Tensor], config: dict) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata={"config": json.dumps(config)})


def dit_state(kind: str, generator: torch.Generator) -> dict[str, torch.Tensor]:
    import comfy.ops
    from comfy.ldm.lightricks.av_model import LTXAVModel

    model = LTXAVModel(**DIT_CONFIG, operations=comfy.ops.disable_weight_init, dtype=torch.float32)
    state = randomize(model, generator)
    for name in ("proj_out.weight", "audio_proj_out.weight"):
        state[name] = state[name] * OUTPUT_GAIN[kind]
    if kind == "nan":
        for name in state:
            if name.startswith("transformer_blocks.0.attn1.to_q."):
                state[name] = torch.full_like(state[name], float("nan"))
    return state


def vae_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE

    state = randomize(VideoVAE(config=VAE_CONFIG), generator)
    for name in state:
        if name.startswith("per_channel_statistics."):
            is_std = "std" in name
            state[name] = torch.full_like(state[name], VAE_LATENT_STD if is_std else 0.0)
    return state


def upscaler_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    from comfy.ldm.lightricks.latent_upsampler import LatentUpsampler

    return randomize(LatentUpsampler.from_config(UPSCALER_CONFIG), generator)


def audio_vae_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The audio VAE checkpoint layout: autoencoder under 'audio_vae.', vocoder under 'vocoder.'."""
    from comfy.ldm.lightricks.vae.causal_audio_autoencoder import CausalAudioAutoencoder
    from comfy.ldm.lightricks.vocoders.vocoder import Vocoder

    state = {f"audio_vae.{k}": v for k, v in randomize(CausalAudioAutoencoder(config=AUDIO_VAE_CONFIG), generator).items()}
    for name in state:
        if name.startswith("audio_vae.per_channel_statistics."):
            state[name] = torch.full_like(state[name], 1.0 if "std" in name else 0.0)
    state.update({f"vocoder.{k}": v for k, v in randomize(Vocoder(config=VOCODER_CONFIG), generator).items()})
    return state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui-dir", required=True, type=Path)
    parser.add_argument("--models", required=True, type=Path)
    parser.add_argument("--dit", action="append", choices=sorted(OUTPUT_GAIN), default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(args.comfyui_dir))
    generator = torch.Generator().manual_seed(SEED)
    written = {}
    for kind in args.dit or ["healthy"]:
        path = args.models / "diffusion_models" / f"tiny_ltxav_{kind}.safetensors"
        write(path, dit_state(kind, generator), {"transformer": DIT_CONFIG})
        written[path.name] = str(path)
    path = args.models / "vae" / "tiny_ltx_video_vae.safetensors"
    write(path, vae_state(generator), {"vae": VAE_CONFIG})
    written[path.name] = str(path)
    path = args.models / "latent_upscale_models" / "tiny_ltx_upscaler_x2.safetensors"
    write(path, upscaler_state(generator), UPSCALER_CONFIG)
    written[path.name] = str(path)
    path = args.models / "checkpoints" / "tiny_ltx_audio_vae.safetensors"  # LTXVAudioVAELoader reads checkpoints/
    write(path, audio_vae_state(generator), {"audio_vae": AUDIO_VAE_CONFIG, "vocoder": VOCODER_CONFIG})
    written[path.name] = str(path)
    print(json.dumps({"written": written, "dit_config": DIT_CONFIG}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
