"""Benchmark helper: full-size random checkpoints written as files a user has, for the host's own loaders to read.

Used by scripts/bench_clip.py --files (never by the nodes). A checkpoint is planned from the host class built on the
meta device (its keys, shapes and the dtypes it keeps), then streamed to a .safetensors file tensor by tensor: the
values come from bench_hostlib's random pool (the compute does not depend on them), so no whole state dict is held
in RAM. Formats:
- "bf16": every floating tensor in the model's storage dtype (float32 islands kept), as the shipped bf16 files;
- "fp8": ComfyUI's fp8 e4m3 "scaled" checkpoint: every Linear of the transformer blocks stored as float8_e4m3fn
  with a per-tensor float32 `weight_scale` (amax / 448), listed in the `_quantization_metadata` header entry that
  0.33.0's loader reads (comfy/utils.py convert_old_quants -> per-layer comfy_quant), the rest in bf16.
The header is the pack's own safetensors header builder (adapters/bf16_convert.py) and the file is published
through the pack's atomic writer (adapters/files.py). A file already there with the same plan digest is reused.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

import torch

FP8_FORMAT = "float8_e4m3fn"
FP8_MAX = 448.0  # largest finite float8_e4m3fn
FORMATS = ("bf16", "fp8")
DIGEST_KEY = "h3kit_bench_plan"
SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
                      torch.float8_e4m3fn: "F8_E4M3", torch.uint8: "U8", torch.int8: "I8", torch.int32: "I32",
                      torch.int64: "I64", torch.bool: "BOOL"}

Values = Callable[[tuple[int, ...], torch.dtype, float, float, bool], torch.Tensor]


@dataclass
class Entry:
    """One tensor of the file: `init` (mean, std, positive) for random values, `fixed` for a given tensor,
    `scale_of` = the quantized weight whose float32 scale this is."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    init: tuple[float, float, bool] | None = None
    fixed: torch.Tensor | None = None
    quantized: bool = False
    scale_of: str | None = None

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.dtype).element_size()


def quantized_layers(module: torch.nn.Module, prefixes: tuple[str, ...]) -> list[str]:
    """Linear layers under `prefixes` (the transformer blocks) whose weight fp8 matmuls take (both sides % 16)."""
    out = []
    for name, layer in module.named_modules():
        weight = getattr(layer, "weight", None)
        if isinstance(layer, torch.nn.Linear) and name.startswith(prefixes) and weight is not None \
                and weight.ndim == 2 and weight.shape[0] % 16 == 0 and weight.shape[1] % 16 == 0:
            out.append(name)
    return out


def plan(module: torch.nn.Module, dtype: torch.dtype, init_value, keep_fp32: Callable[[str], bool],
         quantize: list[str] = (), fixed: dict[str, torch.Tensor] | None = None) -> list[Entry]:
    """The entries of `module`'s checkpoint (built on the meta device): floating tensors in `dtype` except
    float32 islands, weights of the `quantize` layers as fp8 + scale, `fixed` tensors as given."""
    fixed, layers, entries = fixed or {}, set(quantize), []
    for name, meta in module.state_dict().items():
        shape = tuple(meta.shape)
        if name in fixed:
            entries.append(Entry(name, fixed[name].dtype, shape, fixed=fixed[name]))
        elif not meta.is_floating_point():
            entries.append(Entry(name, meta.dtype, shape, fixed=torch.zeros(shape, dtype=meta.dtype)))
        elif name.endswith(".weight") and name[:-len(".weight")] in layers:
            entries.append(Entry(name, torch.float8_e4m3fn, shape, init=init_value(name, shape), quantized=True))
            entries.append(Entry(f"{name[:-len('.weight')]}.weight_scale", torch.float32, (), scale_of=name))
        else:
            target = meta.dtype if meta.dtype == torch.float32 and keep_fp32(name) else dtype
            entries.append(Entry(name, target, shape, init=init_value(name, shape)))
    return entries


def quantization_metadata(layers: list[str]) -> dict[str, str]:
    """The header entry 0.33.0's loader turns into each layer's comfy_quant config."""
    if not layers:
        return {}
    return {"_quantization_metadata": json.dumps({"format_version": "1.0",
                                                  "layers": {name: {"format": FP8_FORMAT} for name in layers}})}


def digest(entries: list[Entry], metadata: dict[str, str], seed: int) -> str:
    text = json.dumps([[e.name, str(e.dtype), e.shape, e.init, e.scale_of] for e in entries] + [metadata, seed])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().contiguous().reshape(-1).cpu()
    return memoryview(flat.view(torch.uint8).numpy())


def write(path: Path, entries: list[Entry], metadata: dict[str, str], values: Values, pack_module: str,
          device: torch.device, seed: int = 0) -> dict:
    """Stream the checkpoint to `path` (reused when its plan digest matches); returns size and seconds."""
    import time

    convert = import_module(f"{pack_module}.adapters.bf16_convert")
    files = import_module(f"{pack_module}.adapters.files")
    headers = import_module(f"{pack_module}.adapters.safetensors_file")
    metadata = {**metadata, DIGEST_KEY: digest(entries, metadata, seed)}
    size = sum(e.nbytes for e in entries)
    if path.exists():
        try:
            if headers.read_header(path).metadata == metadata:
                return {"file": path.name, "gib": round(size / 2**30, 2), "written_s": 0.0, "reused": True}
        except headers.SafetensorsHeaderError:
            pass  # not ours or cut short: written again below
    start = time.perf_counter()
    plans = [convert.TensorPlan(e.name, SAFETENSORS_DTYPES[e.dtype], list(e.shape), 0, e.nbytes,
                                SAFETENSORS_DTYPES[e.dtype]) for e in entries]
    header = convert.build_header(plans, metadata)
    scales: dict[str, torch.Tensor] = {}
    with files.atomic_file(path, overwrite=True) as handle:
        handle.write(header)
        for entry in entries:
            if entry.fixed is not None:
                tensor = entry.fixed.to(entry.dtype)
            elif entry.scale_of is not None:
                tensor = scales.pop(entry.scale_of)
            elif entry.quantized:
                mean, std, positive = entry.init
                weight = values(entry.shape, torch.bfloat16, mean, std, positive).to(device).float()
                scale = (weight.abs().amax() / FP8_MAX).clamp_min(1e-12)
                tensor = (weight / scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
                scales[entry.name] = scale.reshape(())
            else:
                tensor = values(entry.shape, entry.dtype, *entry.init)
            handle.write(_bytes(tensor))
    return {"file": path.name, "gib": round(size / 2**30, 2), "written_s": round(time.perf_counter() - start, 1),
            "reused": False}
