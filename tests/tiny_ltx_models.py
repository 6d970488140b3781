"""Writes tiny random-weight LTX-2 checkpoints that a real ComfyUI host loads with its own loaders.

Test code calls `install(server, dits=...)`, which runs this file with the HOST's python (it imports the host's
`comfy` to get the exact module layout, so the key names always match that host); directly:

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
from pathlib import Path
from subprocess import run as run_process

import torch
from host_weights import build, config_metadata, generator_for, randomize, use_host_on_cpu, write

HERE = Path(__file__).resolve().parent
SEED = 17
DIT_KINDS = ("healthy", "garbage", "nan")
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


def install(server, dits: tuple[str, ...] = DIT_KINDS) -> dict:
    """Test-process side: write the tiny LTX-2 files into `server`'s models/ with its host's python; files already
    there are kept (the same seed writes the same bytes). Returns {file name: path}.
    `server` is a tests/comfyui_host.ComfyUIServer."""
    models = server.models_dir
    paths = {name: models / folder / name for folder, name in
             [("diffusion_models", f"tiny_ltxav_{kind}.safetensors") for kind in dits]
             + [("vae", "tiny_ltx_video_vae.safetensors"), ("latent_upscale_models", "tiny_ltx_upscaler_x2.safetensors"),
                ("checkpoints", "tiny_ltx_audio_vae.safetensors")]}
    if all(path.is_file() for path in paths.values()):
        return {name: str(path) for name, path in paths.items()}
    command = [server.python, str(HERE / "tiny_ltx_models.py"), "--comfyui-dir", str(server.comfyui_dir),
               "--models", str(models)]
    for kind in dits:
        command += ["--dit", kind]
    result = run_process(command, cwd=server.comfyui_dir, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"tiny LTX writer failed on {server.host.name}:\n{result.stderr[-4000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])["written"]


def dit_state(kind: str, generator: torch.Generator) -> dict[str, torch.Tensor]:
    import comfy.ops
    from comfy.ldm.lightricks.av_model import LTXAVModel

    model = build(LTXAVModel, **DIT_CONFIG, operations=comfy.ops.disable_weight_init, dtype=torch.float32)
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

    return randomize(build(LatentUpsampler.from_config, UPSCALER_CONFIG), generator)


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
    parser.add_argument("--dit", action="append", choices=DIT_KINDS, default=None)
    args = parser.parse_args()
    use_host_on_cpu(args.comfyui_dir)
    written = {}
    for kind in args.dit or ["healthy"]:  # the same random weights for every kind: they differ only where said
        path = args.models / "diffusion_models" / f"tiny_ltxav_{kind}.safetensors"
        write(path, dit_state(kind, generator_for("tiny_ltxav", SEED)), config_metadata({"transformer": DIT_CONFIG}))
        written[path.name] = str(path)
    others = (("vae", "tiny_ltx_video_vae.safetensors", vae_state, {"vae": VAE_CONFIG}),
              ("latent_upscale_models", "tiny_ltx_upscaler_x2.safetensors", upscaler_state, UPSCALER_CONFIG),
              # LTXVAudioVAELoader reads checkpoints/
              ("checkpoints", "tiny_ltx_audio_vae.safetensors", audio_vae_state,
               {"audio_vae": AUDIO_VAE_CONFIG, "vocoder": VOCODER_CONFIG}))
    for folder, name, state_of, config in others:
        path = args.models / folder / name
        write(path, state_of(generator_for(name, SEED)), config_metadata(config))
        written[name] = str(path)
    print(json.dumps({"written": written, "dit_config": DIT_CONFIG}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
