"""Benchmark: one whole clip through the host's own code, two-stage (H3 draft -> LTX refine) vs native H3.

The shipped graph `workflows/api/h3_ltx_two_stage_cached_cond.json` runs through ComfyUI's own executor
(execution.PromptExecutor) in this process, with ComfyUI started as main.py starts it (its argument parser, CUDA
allocator choice and dynamic-VRAM set-up: scripts/bench_hostlib.py) and H3Kit loaded as a custom node. Every model
is the host's class at full size, built by the host's own loader nodes from a state dict of random values with the
shipped file names (no checkpoint is read: weights are gated, and the compute does not depend on the values):
- H3 DiT: 50 layers, hidden 5376, 56x128 heads, FFN 14336, adaLN over a 256-wide curve basis (the pruned layout),
  bf16; the turbo LoRA: rank 128 on qkv/out/fc1/fc2 of every block.
- LTX-2 AV DiT: the host's LTXAVModel defaults (48 layers, video 32x128, audio 32x64), bf16.
- VAEs and the x2 latent upsampler: the host's classes (H3 video fp16, H3 audio fp32, LTX video bf16,
  upsampler 1024 channels).
Text is cached conditioning: H3's Qwen3-VL is replaced by a cached [1, 256, 5120] conditioning (node 4 becomes
`H3KitBenchCachedText`), LTX's Gemma by `H3KitLoadConditioning` ([1, 1024, 7680], as the shipped graph does).
The guards run in "warn" mode (random weights make no picture). "native" = the same graph's stage 1 at 1344x768,
its decode and SaveVideo (stage 2 removed). "pack" = the graph plus H3KitLowVRAMAttention (auto) ->
H3KitChunkFeedForward (auto) -> H3KitAttentionBackend (cudnn) on both models, last before the sampler; "host" =
the graph without them.

Per run: wall time of the prompt; time per node (CUDA synchronised at each node start); the host's
`load_models_gpu` time (RAM -> VRAM, LoRA patching); the loader nodes' time (building models from the in-RAM state
dict: a bench artefact, subtracted; a real disk read is extra); torch's peak allocated and the device's peak
in use (NVML, 50 ms samples, the cap's ballast subtracted). Cold = the host's models unloaded from VRAM before
the run (still in RAM); warm = the same graph again with a new seed. Caps: (device total - cap) held by a raw
cudaMalloc for the run, so the host, its allocator and comfy-aimdo all see a card of that size.

    python scripts/bench_clip.py --host /path/to/ComfyUI --json clip.json
    python scripts/bench_clip.py --host /path/to/ComfyUI --caps 32,24,16 --plan two_stage:pack,two_stage:host
    python scripts/bench_clip.py --host /path/to/ComfyUI --tiny --device cpu     # checks the script (tiny models)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

ROOT_EARLY = Path(__file__).resolve().parents[1]
if __name__ == "__main__":  # with --host: the host's allocator and VRAM set-up before torch loads (as its main.py)
    sys.path.insert(0, str(ROOT_EARLY / "scripts"))
    import bench_hoststart

    bench_hoststart.start_from_argv(sys.argv, dynamic_vram=True)
import torch  # noqa: E402

try:
    from . import bench_output  # imported as part of the package (tests)
except ImportError:  # run as a file: python scripts/bench_*.py puts scripts/ first on sys.path
    import bench_output

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "workflows" / "api" / "h3_ltx_two_stage_cached_cond.json"
GIB = 2**30

H3_TEXT = (256, 5120)
LTX_TEXT = (1024, 7680)
LORA_RANK = 128
H3_DIT = {"hidden_size": 5376, "num_layers": 50, "token_refiner_num_layers": 2, "num_attention_heads": 56,
          "attention_head_dim": 128, "ffn_hidden_size": 14336, "text_dim": 5120, "adaln_curve_grid": 1001,
          "time_embed_dim": 256}
H3_DIT_TINY = {"hidden_size": 128, "num_layers": 2, "token_refiner_num_layers": 1, "num_attention_heads": 4,
               "attention_head_dim": 32, "ffn_hidden_size": 160, "text_dim": 48, "adaln_curve_grid": 16,
               "time_embed_dim": 8, "rope_inv_freq_len": 4}
LTX_DIT: dict[str, Any] = {}  # the host's LTXAVModel defaults
LTX_DIT_TINY = {"num_layers": 1, "attention_head_dim": 4, "audio_attention_head_dim": 2, "cross_attention_dim": 128,
                "audio_cross_attention_dim": 64, "caption_channels": 32, "connector_attention_head_dim": 4,
                "connector_num_attention_heads": 8}
UPSAMPLER = {"in_channels": 128, "mid_channels": 1024, "num_blocks_per_stage": 4, "dims": 3, "spatial_upsample": True,
             "temporal_upsample": False}
TINY_SIZES = {"draft": (128, 64, 22), "target": (256, 128)}


# ------------------------------------------------------------------------------------------
# synthetic model files


@dataclass
class ModelSpec:
    """A model file's content: the host class on the meta device, its storage dtype, the header metadata the host's
    loader reads, tensors with given values, and the prefixes of its transformer blocks (quantized in "fp8")."""

    module: torch.nn.Module
    dtype: torch.dtype
    metadata: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, torch.Tensor] = field(default_factory=dict)
    blocks: tuple[str, ...] = ()


class SyntheticFiles:
    """The shipped model file names, each answered by a state dict of the host's class with random values, or
    (`write`) written as a file for the host's own loaders to read from disk (scripts/bench_weights.py)."""

    def __init__(self, host, tiny: bool, seed: int = 0):
        import bench_hostlib as lib

        self.lib, self.tiny, self.seed = lib, tiny, seed
        self.pool = lib.RandomPool(seed, elements=1 << 20 if tiny else lib.POOL_ELEMENTS,
                                   device="cuda" if torch.cuda.is_available() else "cpu")
        self.builders = {
            "minimax_h3_fl2va_pruned_nvfp4.safetensors": ("diffusion_models", self.h3_dit),
            "minimax_h3_fl2v_turbo_4step_v0.1_768p_sla.safetensors": ("loras", self.h3_lora),
            "minimax_h3_video_vae_fp16.safetensors": ("vae", self.h3_video_vae),
            "minimax_h3_audio_vae_fp32.safetensors": ("vae", self.h3_audio_vae),
            "ltx-2.5-video-vae-conv-bf16.safetensors": ("vae", self.ltx_vae),
            "ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors": ("latent_upscale_models", self.upsampler),
            "ltx-2.5-22b-distilled-transformer-nvfp4.safetensors": ("diffusion_models", self.ltx_dit),
        }
        self.built: dict[str, dict] = {}
        self.on_disk: set[str] = set()

    def place(self, models_dir: Path) -> None:
        """Empty files of the shipped names, so the host's folder lists and loaders find them."""
        files = bench_output.pack_module("adapters.files")
        for name, (folder, _build) in self.builders.items():
            (models_dir / folder).mkdir(parents=True, exist_ok=True)
            target = models_dir / folder / name
            if not target.exists():  # a reused --workdir keeps its placeholders
                files.write_bytes(target, b"")

    def write(self, models_dir: Path, which: str, dit_format: str, pack_module: str) -> None:
        """Write the models of `which` (dits | all) as .safetensors files under the shipped names, the two DiTs in
        `dit_format`; the host's loaders then read them from disk (mmap) as a user's files."""
        import bench_weights

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        for name, (folder, build) in self.builders.items():
            spec = build()
            if not isinstance(spec, ModelSpec) or which == "dits" and not spec.blocks:
                continue
            layers = bench_weights.quantized_layers(spec.module, spec.blocks) if dit_format == "fp8" else []
            entries = bench_weights.plan(spec.module, spec.dtype, self.lib.init_value, self.lib.fp32_island,
                                         layers, spec.fixed)
            metadata = {**spec.metadata, **bench_weights.quantization_metadata(layers)}
            target = models_dir / folder / name
            if target.exists() and target.stat().st_size == 0:
                target.unlink()  # a placeholder of place()
            info = bench_weights.write(target, entries, metadata, self.pool.tensor, pack_module, device, self.seed)
            self.built[name] = {**info, "params": sum(math.prod(e.shape) for e in entries if e.scale_of is None),
                                "format": dit_format if spec.blocks else str(spec.dtype).replace("torch.", ""),
                                "fp8_layers": len(layers)}
            self.on_disk.add(name)
            print(json.dumps({"model_file": self.built[name]}), flush=True)

    def load(self, path: str) -> tuple[dict, dict] | None:
        name = Path(path).name
        if name not in self.builders or name in self.on_disk:
            return None
        start = time.perf_counter()
        spec = self.builders[name][1]()
        if isinstance(spec, ModelSpec):
            sd = self.lib.synthetic_state_dict(spec.module, self.pool, spec.dtype)
            sd.update(spec.fixed)
            metadata = spec.metadata
        else:
            sd, metadata = spec
        params = sum(t.numel() for t in sd.values())
        self.built[name] = {"params": params, "gib": round(sum(t.numel() * t.element_size() for t in sd.values()) / GIB,
                                                            2), "build_s": round(time.perf_counter() - start, 2)}
        return sd, metadata

    def _meta(self, factory):
        """The host's module built on the meta device with its plain layers (no memory). With comfy-aimdo on, the
        host's Linear skips creating its weight until a state dict is loaded, so it is off while building here."""
        import comfy.memory_management as memory

        was, memory.aimdo_enabled = memory.aimdo_enabled, False
        try:
            with torch.device("meta"):
                return factory()
        finally:
            memory.aimdo_enabled = was

    def h3_dit(self) -> ModelSpec:
        import comfy.ops
        from comfy.ldm.minimax.model import MiniMaxH3Model
        module = self._meta(lambda: MiniMaxH3Model(**(H3_DIT_TINY if self.tiny else H3_DIT), dtype=torch.bfloat16,
                                                   operations=comfy.ops.disable_weight_init))
        rope = module.state_dict()["rope.inv_freq"]
        return ModelSpec(module, torch.bfloat16, fixed={"rope.inv_freq": self.lib.h3_inv_freq(rope.numel())},
                         blocks=("blocks.",))

    def h3_lora(self):
        cfg = H3_DIT_TINY if self.tiny else H3_DIT
        hidden, inner, ffn = cfg["hidden_size"], cfg["num_attention_heads"] * cfg["attention_head_dim"], cfg["ffn_hidden_size"]
        rank = 4 if self.tiny else LORA_RANK
        shapes = {"attn.qkv_proj": (3 * inner, hidden), "attn.out_proj": (hidden, inner), "mlp.fc1": (2 * ffn, hidden),
                  "mlp.fc2": (hidden, ffn)}
        sd = {}
        for block in range(cfg["num_layers"]):
            for layer, (out_f, in_f) in shapes.items():
                key = f"diffusion_model.blocks.{block}.{layer}"
                up, down = torch.empty(out_f, rank, dtype=torch.bfloat16), torch.empty(rank, in_f, dtype=torch.bfloat16)
                self.pool.fill_(down, 0.0, 1.0 / in_f ** 0.5)
                self.pool.fill_(up, 0.0, 0.02 / rank ** 0.5)
                sd[f"{key}.lora_down.weight"], sd[f"{key}.lora_up.weight"] = down, up
                sd[f"{key}.alpha"] = torch.tensor(float(rank))
        return sd, {}

    def h3_video_vae(self) -> ModelSpec:
        from comfy.ldm.minimax.vae import MiniMaxH3VideoVAE
        return ModelSpec(self._meta(lambda: MiniMaxH3VideoVAE(**tiny_h3_vae_kwargs() if self.tiny else {})),
                         torch.float16)

    def h3_audio_vae(self) -> ModelSpec:
        from comfy.ldm.minimax.audio_vae import MiniMaxH3AudioVAE
        return ModelSpec(self._meta(lambda: MiniMaxH3AudioVAE(**tiny_h3_audio_kwargs() if self.tiny else {})),
                         torch.float32)

    def ltx_vae(self) -> ModelSpec:
        from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
        config = ltx_vae_config(self.tiny)
        module = self._meta(lambda: VideoVAE(version=2, config=config))
        return ModelSpec(module, torch.bfloat16, {"config": json.dumps({"vae": config})})

    def upsampler(self) -> ModelSpec:
        import comfy.ops
        from comfy.ldm.lightricks.latent_upsampler import LatentUpsampler
        config = dict(UPSAMPLER, mid_channels=32, num_blocks_per_stage=1) if self.tiny else UPSAMPLER
        module = self._meta(lambda: LatentUpsampler.from_config(config, operations=comfy.ops.disable_weight_init))
        return ModelSpec(module, torch.bfloat16, {"config": json.dumps(config)})

    def ltx_dit(self) -> ModelSpec:
        import comfy.ops
        from comfy.ldm.lightricks.av_model import LTXAVModel
        config = LTX_DIT_TINY if self.tiny else LTX_DIT
        module = self._meta(lambda: LTXAVModel(**config, dtype=torch.bfloat16, operations=comfy.ops.disable_weight_init))
        return ModelSpec(module, torch.bfloat16, {"config": json.dumps({"transformer": config})},
                         blocks=("transformer_blocks.",))


def tiny_h3_vae_kwargs() -> dict:
    return {"ch": 32, "ch_mult": (1, 1, 1, 1, 1, 1)}


def tiny_h3_audio_kwargs() -> dict:
    return {"encoder_dim": 4, "latent_dim": 32, "decoder_dim": 512}


TINY_VIT_DECODER = {"num_layers": 1, "heads": 2, "dim_head": 16}


def ltx_vae_config(tiny: bool) -> dict:
    from comfy.ldm.lightricks.vae.causal_video_autoencoder import VideoVAE
    config = VideoVAE.get_default_config(None, 2)
    if tiny:
        config = dict(config, encoder_base_channels=8, decoder_base_channels=8)
    return config


def tiny_host_classes() -> None:
    """--tiny only: the host builds its H3 VAEs with fixed sizes; make those defaults tiny (CPU plumbing check)."""
    import comfy.ldm.minimax.audio_vae as audio_vae
    import comfy.ldm.minimax.vae as video_vae

    video_cls, audio_cls, decoder_cls = video_vae.MiniMaxH3VideoVAE, audio_vae.MiniMaxH3AudioVAE, video_vae.ViT3DDecoder

    class TinyDecoder(decoder_cls):
        def __init__(self, **kwargs):
            super().__init__(**{**kwargs, **TINY_VIT_DECODER})

    class TinyVideo(video_cls):
        def __init__(self, **kwargs):
            super().__init__(**{**tiny_h3_vae_kwargs(), **kwargs})

    class TinyAudio(audio_cls):
        def __init__(self, **kwargs):
            super().__init__(**{**tiny_h3_audio_kwargs(), **kwargs})
    video_vae.MiniMaxH3VideoVAE, audio_vae.MiniMaxH3AudioVAE = TinyVideo, TinyAudio
    video_vae.ViT3DDecoder = TinyDecoder


# ------------------------------------------------------------------------------------------
# cached text


class CachedTextClip:
    """What H3's MiniMaxH3ImageToVideo asks of a CLIP, answered with one cached conditioning."""

    def __init__(self, conditioning: torch.Tensor):
        self.conditioning = conditioning

    def tokenize(self, text: str, **_kwargs: Any) -> dict:
        return {"text": text}

    def encode_from_tokens_scheduled(self, _tokens: Any, **_kwargs: Any) -> list:
        return [[self.conditioning, {"pooled_output": None}]]


class H3KitBenchCachedText:
    """Bench-only node (registered by this script, not by the pack): a CLIP that returns cached conditioning."""

    CATEGORY = "H3Kit/bench"
    FUNCTION = "load"
    RETURN_TYPES = ("CLIP",)
    DESCRIPTION = "bench_clip.py: cached H3 text conditioning in place of the Qwen3-VL text encoder."
    shape = H3_TEXT

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {"required": {}}

    def load(self):
        gen = torch.Generator().manual_seed(11)
        return (CachedTextClip(torch.randn(1, *self.shape, generator=gen).to(torch.bfloat16)),)


def write_ltx_cache(pack_module: str, folder: Path, tiny: bool) -> None:
    """The stage-2 text as a cache file in the pack's own format, written with the pack's own writer."""
    save_conditioning = import_module(f"{pack_module}.nodes.cond_cache_format").save_conditioning
    length, width = (16, 64) if tiny else LTX_TEXT
    gen = torch.Generator().manual_seed(12)
    cond = [[torch.randn(1, length, width, generator=gen).to(torch.bfloat16), {"pooled_output": None}]]
    folder.mkdir(parents=True, exist_ok=True)
    save_conditioning(folder, "ltx_generic_refine", cond, prompt_text="bench_clip: random",
                      encoder="bench_clip (random values)", h3kit_version="bench", overwrite=True)


# ------------------------------------------------------------------------------------------
# graphs


VARIANT_NODES = {
    "host": (),
    "pack": (("H3KitLowVRAMAttention", {"head_chunks": 0}), ("H3KitChunkFeedForward", {"chunks": 0, "seq_threshold": 4096}),
             ("H3KitAttentionBackend", {"backend": "cudnn"})),
    "cudnn": (("H3KitAttentionBackend", {"backend": "cudnn"}),),
    "sage": (("H3KitSageAttention", {"config": "package-default"}),),  # SageAttention 1.0.6: int8 QK, inexact
}


def build_graph(kind: str, variant: str, seed: int, tiny: bool, lora: bool = True) -> dict:
    """The shipped two-stage graph, or its stage 1 alone at 1344x768 ("native"), with or without the pack's nodes."""
    graph = json.loads(GRAPH.read_text())
    graph = {k: v for k, v in graph.items() if isinstance(v, dict) and "class_type" in v}
    if not lora:  # the turbo LoRA node bypassed: the shift node takes the loader's model
        graph["3"]["inputs"]["model"] = ["1", 0]
        del graph["2"]
    graph["4"] = {"class_type": "H3KitBenchCachedText", "inputs": {}}
    for node in graph.values():
        if node["class_type"] in ("H3KitLatentGuard", "H3KitFrameGuard"):
            node["inputs"]["mode"] = "warn"
        if node["class_type"] == "RandomNoise":
            node["inputs"]["noise_seed"] = seed
    draft_w, draft_h, frames = TINY_SIZES["draft"] if tiny else (672, 384, 124)
    target_w, target_h = TINY_SIZES["target"] if tiny else (1344, 768)
    graph["8"]["inputs"].update(width=draft_w, height=draft_h, length=frames)
    graph["16"]["inputs"].update(target_width=target_w, target_height=target_h)
    if kind == "native":
        graph["8"]["inputs"].update(width=target_w, height=target_h)
        keep = {str(i) for i in range(1, 16)}
        graph = {k: v for k, v in graph.items() if k in keep}
        graph["40"] = {"class_type": "CreateVideo", "inputs": {"images": ["14", 0], "audio": ["15", 0], "fps": 24.0}}
        graph["41"] = {"class_type": "SaveVideo", "inputs": {"video": ["40", 0], "filename_prefix": "bench/native",
                                                               "format": "mp4", "format.codec": "h264"}}
    if VARIANT_NODES[variant]:
        _insert(graph, VARIANT_NODES[variant], source=["3", 0], consumers=[("9", "model"), ("11", "model")], first_id=90)
        if kind == "two_stage":
            _insert(graph, VARIANT_NODES[variant], source=["30", 0], consumers=[("29", "model")], first_id=95)
    return graph


def _insert(graph: dict, chain: tuple, source: list, consumers: list, first_id: int) -> None:
    """The pack's nodes last before the sampler (docs/lowvram.md): source -> chain -> the consumers."""
    previous = source
    for offset, (class_type, inputs) in enumerate(chain):
        node_id = str(first_id + offset)
        graph[node_id] = {"class_type": class_type, "inputs": {"model": previous, **inputs}}
        previous = [node_id, 0]
    for node_id, name in consumers:
        graph[node_id]["inputs"][name] = previous


STAGES = {  # node id -> stage, for both graphs
    "13": "H3 sampling", "14": "H3 video decode", "15": "H3 audio decode", "16": "handoff", "22": "LTX encode",
    "24": "latent upsample", "32": "LTX refine sampling", "33": "guards", "34": "LTX decode", "35": "guards",
    "40": "video mux + save", "41": "video mux + save",
}
def stage_of(graph: dict, node_id: str) -> str:
    if node_id in STAGES:
        return STAGES[node_id]
    return "loaders" if graph.get(node_id, {}).get("class_type") in LOADERS else "other"


LOADERS = {"UNETLoader", "LoraLoaderModelOnly", "VAELoader", "LatentUpscaleModelLoader", "H3KitBenchCachedText",
           "H3KitLoadConditioning"}


# ------------------------------------------------------------------------------------------
# running


class StubServer:
    """What PromptExecutor needs of ComfyUI's server: it records when each node starts (CUDA synchronised), and
    per node the peak allocated by torch while it ran (the peak counter is reset at each node start)."""

    def __init__(self):
        self.client_id, self.last_node_id, self.last_prompt_id = None, None, None
        self.sockets_metadata: dict = {}
        self.events: list[tuple[float, str, Any]] = []
        self.current: str | None = None
        self.peaks: dict[str, int] = {}

    def send_sync(self, event: str, data: Any, sid: Any = None) -> None:
        if event in ("executing", "execution_error", "execution_success", "execution_cached", "execution_interrupted"):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                if self.current is not None:
                    self.peaks[self.current] = max(self.peaks.get(self.current, 0), torch.cuda.max_memory_allocated())
                torch.cuda.reset_peak_memory_stats()
            self.events.append((time.perf_counter(), event, data))
            if event == "executing":
                node = data.get("node") if isinstance(data, dict) else None
                self.current = str(node) if node is not None else None

    def queue_updated(self) -> None:
        pass

    def clear(self) -> None:
        self.events.clear()
        self.peaks.clear()
        self.current = None


class LoadTimer:
    """Wraps the host's load_models_gpu: seconds spent in it (CUDA synchronised), per node of `server`, and what each
    call left on the GPU: per model, GiB resident of its size (a partial load leaves the rest in RAM)."""

    def __init__(self, mm, server: StubServer):
        self.mm, self.server, self.seconds, self.calls = mm, server, 0.0, 0
        self.per_node: dict[str, float] = {}
        self.resident: dict[str, list[str]] = {}
        self.original = mm.load_models_gpu

        def timed(models, *args, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            start = time.perf_counter()
            try:
                return self.original(models, *args, **kwargs)
            finally:
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
                self.seconds += seconds
                self.calls += 1
                node = self.server.current or "?"
                self.per_node[node] = self.per_node.get(node, 0.0) + seconds
                self.resident.setdefault(node, []).extend(_resident(models))
        mm.load_models_gpu = timed

    def clear(self) -> None:
        self.seconds, self.calls = 0.0, 0
        self.per_node.clear()
        self.resident.clear()


def _resident(models) -> list[str]:
    out = []
    for patcher in models:
        try:
            name = type(patcher.model).__name__
            formats: dict[str, int] = {}
            for module in patcher.model.modules():
                quant = getattr(module, "quant_format", None)
                if quant:
                    formats[quant] = formats.get(quant, 0) + 1
            quantized = "".join(f", {count} {fmt} layers" for fmt, count in formats.items())
            out.append(f"{name} {patcher.loaded_size() / GIB:.1f}/{patcher.model_size() / GIB:.1f} GiB{quantized}")
        except Exception as exc:  # noqa: BLE001 - a report line, never a reason to stop the run
            out.append(f"{type(patcher).__name__}: {type(exc).__name__}")
    return out


class MemoryLog(logging.Handler):
    """The host's own lines about loading and offloading ("loaded partially; ... offloaded", dynamic VRAM's
    "prepared ..."), kept per node of `server`."""

    KEYS = ("loaded partially", "loaded completely", "Unloaded partially", "prepared for dynamic VRAM",
            "models unloaded", "Requested to load")

    def __init__(self, server: StubServer):
        super().__init__(logging.INFO)
        self.server, self.lines = server, []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(key in message for key in self.KEYS):
            self.lines.append(f"[{self.server.current}] {message[:220]}")


class LatentCatcher:
    """Keeps each sampling's output latent (float32, CPU), in order, by wrapping the host's CFGGuider.sample (the
    guider of both stages): the last one of a run is the clip's final latent."""

    def __init__(self):
        import comfy.samplers

        self.latents: list[torch.Tensor] = []
        original = comfy.samplers.CFGGuider.sample

        def sample(guider, *args, **kwargs):
            out = original(guider, *args, **kwargs)
            tensors = out.unbind() if getattr(out, "is_nested", False) else [out]
            self.latents.append(torch.cat([t.detach().float().flatten().cpu() for t in tensors]))
            return out
        comfy.samplers.CFGGuider.sample = sample


class Bench:
    def __init__(self, args):
        self.args = args
        self.device = torch.device(args.device)
        sys.path.insert(0, str(ROOT / "scripts"))
        import bench_hostlib as lib

        self.lib = lib
        argv = (["--cpu"] if self.device.type == "cpu" else []) + args.host_args.split()
        self.host = lib.import_host(args.host, argv, dynamic_vram=self.device.type == "cuda")
        self.work = Path(args.workdir or tempfile.mkdtemp(prefix="h3kit-bench-clip-"))
        self._set_up_host()

    def _set_up_host(self) -> None:
        import comfy.utils
        import execution
        import folder_paths

        import nodes

        if self.args.tiny:
            tiny_host_classes()
        models = self.work / "models"
        self.files = SyntheticFiles(self.host, self.args.tiny)
        models = Path(self.args.models_dir) if self.args.models_dir else models
        self.files.place(models)
        for kind in ("diffusion_models", "loras", "vae", "latent_upscale_models"):
            folder_paths.add_model_folder_path(kind, str(models / kind), is_default=True)
        folder_paths.add_model_folder_path("conditioning_cache", str(models / "conditioning_cache"), is_default=True)
        folder_paths.set_output_directory(str(self.work / "output"))
        folder_paths.set_temp_directory(str(self.work / "temp"))
        custom = self.work / "custom_nodes"
        custom.mkdir(parents=True, exist_ok=True)
        link = custom / "h3kit"
        if not link.exists():
            link.symlink_to(ROOT, target_is_directory=True)
        folder_paths.folder_names_and_paths["custom_nodes"] = ([str(custom)], set())
        original_load = comfy.utils.load_torch_file
        files = self.files

        def load_torch_file(ckpt, safe_load=False, device=None, return_metadata=False, **kwargs):
            synthetic = files.load(ckpt)
            if synthetic is None:
                return original_load(ckpt, safe_load=safe_load, device=device, return_metadata=return_metadata, **kwargs)
            return synthetic if return_metadata else synthetic[0]
        comfy.utils.load_torch_file = load_torch_file
        H3KitBenchCachedText.shape = (16, H3_DIT_TINY["text_dim"]) if self.args.tiny else H3_TEXT
        asyncio.run(nodes.init_extra_nodes(init_custom_nodes=True, init_api_nodes=False))
        nodes.NODE_CLASS_MAPPINGS["H3KitBenchCachedText"] = H3KitBenchCachedText
        self.pack_module = str(link).replace(".", "_x_")  # the module name ComfyUI's loader gives the pack
        write_ltx_cache(self.pack_module, models / "conditioning_cache", self.args.tiny)
        if self.args.files != "none":
            self.files.write(models, self.args.files, self.args.dit_format, self.pack_module)
        missing = [n for n in ("H3KitDraftToLTX", "H3KitAttentionBackend", "MiniMaxH3ImageToVideo", "SaveVideo")
                   if n not in nodes.NODE_CLASS_MAPPINGS]
        if missing:
            raise SystemExit(f"the host did not register {missing}: see the log above")
        self.server = StubServer()
        self.executor = execution.PromptExecutor(self.server, cache_type=execution.CacheType.CLASSIC,
                                                 cache_args={"lru": 0, "ram": 0, "ram_inactive": 0})
        self.execution = execution
        self.loads = LoadTimer(self.host.mm, self.server)
        self.memory_log = MemoryLog(self.server)
        logging.getLogger().addHandler(self.memory_log)
        logging.getLogger().setLevel(logging.INFO)  # the host logs its loads at INFO, as main.py's logger shows them
        self.latents = LatentCatcher()
        self.nvml = None

    def free(self) -> None:
        """What ComfyUI's prompt worker does for POST /free {"unload_models": true, "free_memory": true} (the
        frontend's "Free model and node cache", the field reports' cold start): unload every model, drop the
        executor's caches (the loaders run again: models are rebuilt from their files), collect, empty the cache.
        Done between prompts, outside inference mode, as main.py does it; dropping the cached models is what keeps
        the parameters that unload moved outside inference mode from reaching the next prompt (issue 31)."""
        mm = self.host.mm
        mm.unload_all_models()
        self.executor.reset()
        gc.collect()
        mm.soft_empty_cache()

    def run(self, kind: str, variant: str, cap_gib: float | None, warm: bool, seed: int) -> list[dict]:
        self.free()
        rows = []
        cap = None if cap_gib is None else int(cap_gib * GIB)
        with self.lib.VramCap(cap) as vram_cap:
            for phase in (("cold", "warm") if warm else ("cold",)):
                rows.append(self._one(kind, variant, cap_gib, vram_cap, phase, seed + (phase == "warm")))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "final_latent"}), flush=True)
                if rows[-1].get("error"):
                    break
            self.free()
        return rows

    def adapt(self, graph: dict) -> tuple[dict, list[str]]:
        """The graph in this host's input layout (the pack's checks/host_layout.py, as `run` does before queueing)."""
        import nodes
        host_layout = import_module(f"{self.pack_module}.checks.host_layout")
        schemas = {}
        for class_type in {node["class_type"] for node in graph.values()}:
            cls = nodes.NODE_CLASS_MAPPINGS.get(class_type)
            if cls is not None and hasattr(cls, "GET_NODE_INFO_V1"):
                schemas[class_type] = cls.GET_NODE_INFO_V1()
        adaptation = host_layout.adapt_graph(graph, schemas)
        return adaptation.graph, [change.text() for change in adaptation.changes]

    def _one(self, kind: str, variant: str, cap_gib, vram_cap, phase: str, seed: int) -> dict:
        graph, adapted = self.adapt(build_graph(kind, variant, seed, self.args.tiny, lora=not self.args.no_lora))
        valid = asyncio.run(self.execution.validate_prompt("bench", graph, None))
        row: dict[str, Any] = {"graph": kind, "variant": variant, "cap_gib": cap_gib, "phase": phase, "seed": seed,
                               "cap": vram_cap.how, "adapted": adapted}
        if not valid[0]:
            row["error"] = f"graph invalid: {valid[1]} {json.dumps(valid[3], default=str)[:600]}"
            print(json.dumps(row), flush=True)
            return row
        self.server.clear()
        self.loads.clear()
        self.memory_log.lines.clear()
        self.latents.latents.clear()
        ballast = 0
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            ballast = vram_cap.ballast
        sampler = self.lib.NvmlSampler(self.device.index or 0)
        start = time.perf_counter()
        with sampler:
            self.executor.execute(graph, f"bench-{kind}-{variant}-{phase}-{seed}", {"client_id": "bench"}, valid[2])
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
        nodes_s = self._node_times(graph, start)
        construct = sum(s for nid, s in nodes_s.items() if graph.get(nid, {}).get("class_type") in LOADERS)
        total = wall - construct
        stages: dict[str, dict] = {}
        for nid, seconds in nodes_s.items():
            stage = stages.setdefault(stage_of(graph, nid), {"s": 0.0, "load_s": 0.0, "peak_gib": 0.0})
            stage["s"] = round(stage["s"] + seconds, 2)
            stage["load_s"] = round(stage["load_s"] + self.loads.per_node.get(nid, 0.0), 2)
            stage["peak_gib"] = max(stage["peak_gib"], round(self.server.peaks.get(nid, 0) / GIB, 2))
            if self.loads.resident.get(nid):
                stage.setdefault("resident", []).extend(self.loads.resident[nid])
        row.update(success=bool(self.executor.success), wall_s=round(wall, 2), total_s=round(total, 2),
                   load_s=round(self.loads.seconds, 2), total_excl_load_s=round(total - self.loads.seconds, 2),
                   construct_s=round(construct, 2), load_calls=self.loads.calls, stages=stages,
                   patcher=self.host.patcher, memory_log=self.memory_log.lines[-40:])
        if self.device.type == "cuda":
            row.update(torch_peak_gib=round(max([torch.cuda.max_memory_allocated(), *self.server.peaks.values()]) / GIB,
                                            2),
                       torch_reserved_peak_gib=round(torch.cuda.max_memory_reserved() / GIB, 2),
                       device_peak_gib=round((sampler.peak - (ballast or 0)) / GIB, 2) if sampler.peak else None)
        if not self.executor.success:
            errors = [data for _t, event, data in self.server.events if event == "execution_error"]
            row["error"] = json.dumps(errors, default=str)[:1500] if errors else "failed (no error message)"
        if self.latents.latents:
            row["final_latent"] = self.latents.latents[-1]
        return row

    def _node_times(self, graph: dict, start: float) -> dict[str, float]:
        """Seconds from each node's start to the next node's start (the last one to the end of the prompt)."""
        marks = [(t, data.get("node") if isinstance(data, dict) else None) for t, event, data in self.server.events
                 if event == "executing"]
        end = self.server.events[-1][0] if self.server.events else time.perf_counter()
        times: dict[str, float] = {}
        for (t0, node), (t1, _next) in zip(marks, marks[1:] + [(end, None)], strict=True):
            if node is not None:
                times[str(node)] = times.get(str(node), 0.0) + (t1 - t0)
        return times


def run_order(plan: str, caps: str) -> list[tuple[float | None, str, str, bool]]:
    """(cap GiB or None, graph, variant, warm) in run order. Plan items are graph:variant[:warm][@cap]; items
    without @cap run for every cap of `caps`, caps outermost; items with @cap run where they are listed."""
    default_caps = [_cap(c) for c in caps.split(",")]
    items = []
    for item in plan.split(","):
        spec, _, cap_text = item.partition("@")
        parts = spec.split(":")
        if len(parts) not in (2, 3) or parts[0] not in GRAPHS or parts[1] not in VARIANT_NODES or parts[2:] not in ([], ["warm"]):
            raise SystemExit(f"--plan item {item!r}: write graph:variant[:warm][@cap] with graph one of "
                             f"{', '.join(GRAPHS)} and variant one of {', '.join(VARIANT_NODES)}")
        items.append((None if not cap_text else [_cap(cap_text)], parts[0], parts[1], parts[2:] == ["warm"]))
    if any(fixed is not None for fixed, *_ in items):
        return [(cap, kind, variant, warm) for fixed, kind, variant, warm in items for cap in (fixed or default_caps)]
    return [(cap, kind, variant, warm) for cap in default_caps for _fixed, kind, variant, warm in items]


GRAPHS = ("two_stage", "native")


def _cap(text: str) -> float | None:
    """'none' or a positive number of GiB."""
    if text == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < 1e6:
        raise SystemExit(f"VRAM cap {text!r}: write a number of GiB above 0, or none")
    return value


def compare_latents(rows: list[dict]) -> None:
    """For each (graph, cap, phase, seed): every variant's final latent vs the host's (max |d|, cosine)."""
    import bench_hostlib as lib
    by_key = {}
    for row in rows:
        by_key.setdefault((row["graph"], row["cap_gib"], row["phase"], row["seed"]), {})[row["variant"]] = row
    for variants in by_key.values():
        host = variants.get("host")
        for name, row in variants.items():
            if name != "host" and host and "final_latent" in host and "final_latent" in row:
                row["final_latent_vs_host"] = lib.deviation(row["final_latent"], host["final_latent"])


def environment(bench: Bench) -> dict:
    import importlib.metadata
    info = {"date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "python": platform.python_version(),
            "torch": torch.__version__, "host": f"ComfyUI {bench.host.version} ({bench.host.dir})",
            "patcher": bench.host.patcher, "command": " ".join(sys.argv)}
    for package in ("comfy-kitchen", "comfy-aimdo"):
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = "missing"
    if bench.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(bench.device)
        info["total_gib"] = round(torch.cuda.mem_get_info()[1] / GIB, 1)
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", type=Path, required=True, help="a ComfyUI source tree with native H3 (0.33.0)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--host-args", default="", help="ComfyUI command-line options for the host, written "
                        "--host-args='--disable-dynamic-vram' (the legacy ModelPatcher) or --host-args='--reserve-vram 2'")
    parser.add_argument("--plan", default="two_stage:pack:warm,two_stage:host:warm,native:pack:warm,native:host:warm",
                        help="comma list of graph:variant[:warm]; graph two_stage | native; variant host (the graph "
                        "as shipped) | pack (+ low-VRAM auto + cuDNN attention) | cudnn | sage (SageAttention 1.0.6, "
                        "inexact); warm = also a warm run after the cold one; @CAP = only under this cap (GiB or none), run where "
                        "listed. Items without @ run for every --caps value, caps outermost")
    parser.add_argument("--caps", default="none", help="comma list of VRAM caps in GiB, 'none' = the whole card")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--no-lora", action="store_true", help="bypass the turbo LoRA node (its weight backups "
                        "take RAM next to two models held in RAM)")
    parser.add_argument("--tiny", action="store_true", help="tiny models and sizes (checks the script on a CPU)")
    parser.add_argument("--workdir", type=Path, help="folder for placeholder files, caches and outputs (default: temp)")
    parser.add_argument("--files", choices=("none", "dits", "all"), default="none", help="write these models as "
                        ".safetensors files (reused when already there) and let the host's loaders read them from "
                        "disk; the others stay random state dicts in RAM (default none: all in RAM, as in run D7)")
    parser.add_argument("--dit-format", choices=("bf16", "fp8"), default="fp8", help="format of the two DiT files: "
                        "fp8 = ComfyUI's fp8 e4m3 scaled (block Linears fp8 + per-tensor scale, the rest bf16)")
    parser.add_argument("--models-dir", type=Path, help="where --files writes and the host looks (default: "
                        "WORKDIR/models); give the same folder to later processes to reuse the files")
    parser.add_argument("--json", type=Path, help="write environment + rows here")
    args = parser.parse_args()
    output = bench_output.JsonOutput(args.json)
    bench = Bench(args)
    env = environment(bench)
    print(json.dumps(env), flush=True)
    rows: list[dict] = []
    for cap, kind, variant, warm in run_order(args.plan, args.caps):
        try:
            new = bench.run(kind, variant, cap, warm, args.seed)
        except Exception as exc:  # noqa: BLE001 - one failed configuration is a result, the others still run
            new = [{"graph": kind, "variant": variant, "cap_gib": cap, "phase": "cold", "seed": args.seed,
                    "error": f"{type(exc).__name__}: {exc}"[:800], "trace": traceback.format_exc()[-1500:]}]
        rows += new
        compare_latents(rows)
        # after every configuration, so a run cut short keeps what it measured
        partial = [{k: v for k, v in row.items() if k != "final_latent"} for row in rows]
        output.write({"environment": env, "rows": partial}, default=str)
    for row in rows:
        row.pop("final_latent", None)
        if "final_latent_vs_host" in row:
            print(json.dumps({"graph": row["graph"], "variant": row["variant"], "cap_gib": row["cap_gib"],
                              "phase": row["phase"], "final_latent_vs_host": row["final_latent_vs_host"]}), flush=True)
    env["models"] = bench.files.built
    print(json.dumps({"models": bench.files.built}), flush=True)
    output.write({"environment": env, "rows": rows}, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
