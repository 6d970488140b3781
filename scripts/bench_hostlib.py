"""Benchmark helpers: a ComfyUI source tree imported in-process and models built through its own classes.

Used by scripts/bench_lowvram.py --host and scripts/bench_clip.py (never by the nodes). What is the host's here:
its argument parser, its CUDA allocator choice (cuda_malloc.py) and its dynamic-VRAM start (comfy-aimdo), called in
the order main.py calls them; model configs, classes, operations, ModelPatcher and load_models_gpu. What is ours:
random weights (every value drawn, scaled so activations keep their size through the layers) instead of a file
read; the compute of a forward does not depend on the values.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import torch

POOL_ELEMENTS = 1 << 26  # 64 Mi N(0, 1) values, the source of every synthetic tensor
POOL_SLACK = 1 << 20  # a tensor is a view at a random offset in [0, 1 Mi] of the pool for its dtype and scale


def import_host(host_dir: Path, argv: list[str], dynamic_vram: bool = False) -> SimpleNamespace:
    """Import the host at `host_dir` as main.py does it with `argv` (its own parser, allocator and VRAM set-up).

    dynamic_vram: also start comfy-aimdo and switch to ModelPatcherDynamic where main.py would (it does so by
    default on NVIDIA, unless --disable-dynamic-vram); `patcher` says which patcher the host uses. Call
    bench_hoststart.start_from_argv before torch is imported, or the host's allocator choice cannot apply.
    """
    import bench_hoststart

    state = bench_hoststart.start(host_dir, argv, dynamic_vram)
    host_dir, args, aimdo = state["host_dir"], state["args"], state["aimdo"]
    import comfy.memory_management
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy.ops
    import comfy.supported_models
    patcher = "ModelPatcher (legacy)"
    if aimdo is not None and mm.is_nvidia() and mm.torch_version_numeric >= (2, 8):
        devices = ((d.index, int(args.vram_headroom * 1024 ** 3)) for d in mm.get_all_torch_devices())
        if aimdo.init_devices(devices):
            comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
            comfy.memory_management.aimdo_enabled = True
            patcher = "ModelPatcherDynamic (comfy-aimdo)"
        else:
            patcher = "ModelPatcher (legacy): comfy-aimdo found no working device"
    version = (host_dir / "comfyui_version.py").read_text().split('"')[1]
    return SimpleNamespace(dir=host_dir, args=args, mm=mm, model_patcher=comfy.model_patcher, ops=comfy.ops,
                           supported_models=comfy.supported_models, patcher=patcher, version=version)


def host_module(name: str) -> ModuleType:
    from importlib import import_module

    return import_module(name)


# ---------------------------------------------------------------------------------------------- random weights


def _fan_in(shape: tuple[int, ...]) -> int:
    return max(1, math.prod(shape[1:])) if len(shape) > 1 else 1


def init_value(name: str, shape: tuple[int, ...]) -> tuple[float, float, bool]:
    """(mean, std, positive) for a tensor called `name`: weights ~ N(0, 1/fan_in) so activations keep their size,
    norm gains ~ 1, biases small, statistics that divide (std, scale) positive."""
    leaf = name.rsplit(".", 1)[-1]
    if "std" in leaf or leaf in ("latents_std", "std-of-means"):
        return 1.0, 0.05, True
    if len(shape) <= 1:
        if leaf == "weight" or leaf.endswith("gamma") or leaf == "scale":
            return 1.0, 0.02, False
        return 0.0, 0.02, False
    return 0.0, 1.0 / math.sqrt(_fan_in(shape)), False


class RandomPool:
    """N(0, 1) values shared by every synthetic tensor. `tensor()` returns a view at a random offset of a pool scaled
    to the tensor's (dtype, mean, std rounded to a power of sqrt(2)), as long as the largest such tensor: tens of GB
    of weights cost a few GB of pools, and the host's loader copies them into its own parameters as it copies a
    file's. Tensors of one scale overlap (shifted copies); a forward's compute does not depend on the values."""

    def __init__(self, seed: int = 0, elements: int = POOL_ELEMENTS, device: str = "cpu"):
        gen = torch.Generator(device=device).manual_seed(seed)
        self.values = torch.randn(elements, generator=gen, device=device).cpu()
        self.rng = torch.Generator().manual_seed(seed + 1)
        self.scaled: dict[tuple, torch.Tensor] = {}

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype, mean: float, std: float,
               positive: bool = False) -> torch.Tensor:
        count = math.prod(shape)
        std = 2.0 ** (round(math.log2(std) * 2) / 2) if std > 0 else 0.0  # a few scales, so a few pools
        key = (dtype, round(mean, 6), std, positive)
        pool = self.scaled.get(key)
        if pool is None or pool.numel() < count + POOL_SLACK:
            base = self.values.repeat(-(-(count + POOL_SLACK) // self.values.numel()))[:count + POOL_SLACK]
            scaled = base * std + mean
            pool = self.scaled[key] = (scaled.abs_().add_(0.05) if positive else scaled).to(dtype)
        offset = int(torch.randint(0, pool.numel() - count + 1, (1,), generator=self.rng))
        return pool[offset:offset + count].view(shape)

    def fill_(self, tensor: torch.Tensor, mean: float, std: float, positive: bool = False) -> torch.Tensor:
        flat = tensor.view(-1)
        size, start = self.values.numel(), 0
        while start < flat.numel():
            offset = int(torch.randint(0, size // 2, (1,), generator=self.rng))
            n = min(flat.numel() - start, size - offset)
            flat[start:start + n].copy_(self.values[offset:offset + n])
            start += n
        tensor.mul_(std).add_(mean)
        if positive:
            tensor.abs_().add_(0.05)
        return tensor


def randomize_(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random values in every floating parameter and buffer, on the device they are on (fast on a GPU)."""
    gen = {}
    for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        mean, std, positive = init_value(name, tuple(tensor.shape))
        device = tensor.device
        if device not in gen:
            gen[device] = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            values = torch.randn(tensor.shape, generator=gen[device], device=device, dtype=torch.float32)
            values.mul_(std).add_(mean)
            if positive:
                values.abs_().add_(0.05)
            tensor.copy_(values)
    return module


def synthetic_state_dict(module: torch.nn.Module, pool: RandomPool, dtype: torch.dtype | None = None,
                         prefix: str = "") -> dict[str, torch.Tensor]:
    """A CPU state dict with `module`'s keys and shapes (built on the meta device: no memory) and random values.

    Floating tensors take `dtype` when given (a checkpoint's storage dtype), except float32 islands the module
    keeps in float32 (the host builds those layers in float32 whatever the checkpoint holds)."""
    out = {}
    for name, meta in module.state_dict().items():
        if meta.is_floating_point():
            target = meta.dtype if dtype is None or meta.dtype == torch.float32 and fp32_island(name) else dtype
            mean, std, positive = init_value(name, tuple(meta.shape))
            tensor = pool.tensor(tuple(meta.shape), target, mean, std, positive)
        else:
            tensor = torch.zeros(meta.shape, dtype=meta.dtype)
        out[prefix + name] = tensor
    return out


def fp32_island(name: str) -> bool:
    return any(part in name for part in ("patch_proj", "video_out", "audio_out", "time_embedder", "adaln_t_table",
                                         "rope.inv_freq"))


# ---------------------------------------------------------------------------------------------- H3 through the host


H3_FULL = {"hidden_size": 5376, "num_attention_heads": 56, "attention_head_dim": 128, "ffn_hidden_size": 14336,
           "text_dim": 5120, "num_layers": 50}
H3_TINY = {"hidden_size": 128, "num_attention_heads": 4, "attention_head_dim": 32, "ffn_hidden_size": 160,
           "text_dim": 48, "num_layers": 2, "time_embed_dim": 32, "time_embed_hidden_size": 64,
           "rope_inv_freq_len": 4}  # RoPE on 3 axes x 2 x 4 = 24 of 32 dims
ROPE_THETA = 10000.0


def h3_inv_freq(length: int) -> torch.Tensor:
    """Per-axis inverse frequencies (16 per axis in H3); the checkpoint's own values are not public here, so the
    usual 1/theta^(i/n) ladder: the benchmark's compute does not depend on them."""
    return 1.0 / ROPE_THETA ** (torch.arange(length, dtype=torch.float32) / length)


def build_h3(host: SimpleNamespace, config: dict, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """`supported_models.MiniMaxH3` -> `model_base.MiniMaxH3` -> `MiniMaxH3Model(**config)` with the operations the
    host picks for `dtype`, random weights, wrapped in the host's ModelPatcher (load device `device`)."""
    unet_config = {"image_model": "minimax_h3", **config}
    model_config = host.supported_models.MiniMaxH3(unet_config)
    model_config.set_inference_dtype(dtype, None)
    model = model_config.get_model({}, device=device)
    randomize_(model.diffusion_model, seed)
    rope = model.diffusion_model.rope.inv_freq
    rope.copy_(h3_inv_freq(rope.numel()).to(rope.device))
    offload = torch.device("cpu")
    return host.model_patcher.ModelPatcher(model, load_device=device, offload_device=offload)


def h3_latents(width: int, height: int, frames: int, device, dtype=torch.float32, seed: int = 0):
    """Random video [1, 24, T, H/16, W/16] and audio [1, 32, 2, A] latents of the host's shapes for a clip."""
    mh3 = host_module("comfy_extras.nodes_minimax_h3")
    _count, latent_t, audio_t = mh3.temporal_shape(frames)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    video = torch.randn(1, 24, latent_t, height // 16, width // 16, generator=gen, dtype=dtype)
    audio = torch.randn(1, 32, 2, audio_t, generator=gen, dtype=dtype)
    return video.to(device), audio.to(device)


def h3_tokens(width: int, height: int, frames: int, text_len: int) -> int:
    mh3 = host_module("comfy_extras.nodes_minimax_h3")
    _count, latent_t, audio_t = mh3.temporal_shape(frames)
    return text_len + 2 * audio_t + latent_t * (height // 32) * (width // 32)


# ---------------------------------------------------------------------------------------------- measuring


class BlockProbe:
    """CUDA-event time and transient peak of one module's forward, read through forward hooks while the probe is
    entered, so the module runs inside the host's own model forward with the host's own inputs. peak = max
    allocated during the module minus allocated when it starts (its input and everything older excluded);
    `input_bytes` is the size of the module's first input."""

    def __init__(self, module: torch.nn.Module):
        self.module, self.keep_output = module, False
        self.times: list[float] = []
        self.peak = 0
        self.input_bytes = 0
        self.output: torch.Tensor | None = None
        self._start: Any = None
        self._base = 0
        self.handles: list[Any] = []

    def __enter__(self) -> BlockProbe:
        self.handles = [self.module.register_forward_pre_hook(self._pre), self.module.register_forward_hook(self._post)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def reset(self) -> None:
        self.times.clear()
        self.peak = 0

    def _pre(self, _module, args):
        cuda = args[0].is_cuda
        self.input_bytes = args[0].numel() * args[0].element_size()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def _post(self, _module, _args, output):
        out = output[0] if isinstance(output, (tuple, list)) else output
        if out.is_cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            self.times.append(self._start.elapsed_time(end) / 1000)
            self.peak = max(self.peak, torch.cuda.max_memory_allocated() - self._base)
        else:
            self.times.append(time.perf_counter() - self._start)
        if self.keep_output:
            self.output = out.detach().clone()


class NvmlSampler:
    """Device memory in use (NVML, every `interval` s) in a thread: the peak a user sees in nvidia-smi."""

    def __init__(self, device_index: int = 0, interval: float = 0.05):
        self.peak, self.interval, self.running = 0, interval, False
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle, self.nvml = pynvml.nvmlDeviceGetHandleByIndex(device_index), pynvml
        except Exception:  # noqa: BLE001 - no NVML (CPU box): the torch allocator numbers still stand
            self.handle = None

    def used(self) -> int:
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used) if self.handle is not None else 0

    def __enter__(self) -> NvmlSampler:
        self.peak, self.running = self.used(), True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.used())
            time.sleep(self.interval)

    def __exit__(self, *exc: object) -> None:
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.used())


class VramCap:
    """Holds (device total - cap) bytes with a raw cudaMalloc outside torch's allocator (CuPy), so the whole
    process, the host's own allocator and comfy-aimdo included, sees a card of `cap` bytes; torch's allocator gets
    the same limit as a fraction where CuPy is missing."""

    def __init__(self, cap_bytes: int | None):
        self.cap, self.pointer, self.how, self.ballast = cap_bytes, None, "uncapped", 0

    def __enter__(self) -> VramCap:
        if self.cap is None:
            return self
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        ballast = max(0, free - self.cap)
        try:
            import cupy

            self.pointer, self.ballast = cupy.cuda.runtime.malloc(ballast), ballast
            self.how = f"{ballast / 2**30:.1f} GiB held by cudaMalloc: {self.cap / 2**30:.1f} GiB left free"
        except ImportError:
            torch.cuda.set_per_process_memory_fraction(self.cap / total)
            self.how = f"torch allocator limited to {self.cap / 2**30:.1f} GiB (CuPy missing)"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pointer is not None:
            import cupy

            cupy.cuda.runtime.free(self.pointer)
            self.pointer = None
        elif self.cap is not None:
            torch.cuda.set_per_process_memory_fraction(1.0)


def deviation(a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """max |a - b|, cosine similarity and bitwise equality of two outputs (float64 arithmetic)."""
    a64, b64 = a.detach().double().flatten().cpu(), b.detach().double().flatten().cpu()
    cos = float(torch.nn.functional.cosine_similarity(a64, b64, dim=0)) if a64.numel() else 1.0
    return {"bitwise_equal": bool(torch.equal(a, b)), "max_abs_diff": float((a64 - b64).abs().max()),
            "cosine": round(cos, 8), "max_abs_ref": float(b64.abs().max())}
