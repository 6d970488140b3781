"""The host's kernel library, comfy-kitchen, reached the way ComfyUI reaches it, and its quantized tensors.

ComfyUI imports comfy-kitchen as `comfy.quant_ops.ck`; when ComfyUI has loaded that module, its `ck` is the
library the host's own forwards call. Outside ComfyUI (tests, benchmarks) the installed `comfy_kitchen` is the
same library. Nothing here imports ComfyUI.

Row slices of quantized weights. A projection's output rows [a, b) need only weight rows [a, b). Quantized
weights are comfy-kitchen `QuantizedTensor`s (quantized data + layout parameters); a row slice is exact when every
per-row parameter is sliced with the data and every other parameter is per tensor:
- `TensorWiseINT8Layout`: one scale per tensor or per row (per-channel); activations are quantized per row.
- `TensorCoreFP8Layout`: one scale per tensor.
- `TensorCoreNVFP4Layout`: one global scale plus fp8 block scales stored in 128-row x 4-column swizzled tiles;
  rows [a, b) with a and b multiples of 128 are whole tiles, i.e. rows [a, b) of the stored scale matrix
  (a head of 128 rows is one tile row).
Any other layout, a transposed or padded tensor, or unaligned rows: no slice (None), and the caller runs the
projection whole.
"""

from __future__ import annotations

import dataclasses
import sys
from types import ModuleType
from typing import Any

import torch

NVFP4_TILE_ROWS = 128
ROW_SLICEABLE_LAYOUTS = ("TensorWiseINT8Layout", "TensorCoreFP8Layout", "TensorCoreNVFP4Layout")
# Layouts whose activation quantization is per row (per token): token chunks quantize exactly as the whole input.
PER_TOKEN_ACTIVATION_LAYOUTS = ("TensorWiseINT8Layout",)


def host_kitchen() -> tuple[ModuleType | None, str]:
    """(comfy-kitchen module, where it came from), or (None, why not)."""
    quant_ops = sys.modules.get("comfy.quant_ops")
    ck = getattr(quant_ops, "ck", None)
    if ck is not None:
        return ck, "comfy.quant_ops.ck"
    try:
        import comfy_kitchen
    except ImportError as exc:
        return None, f"comfy-kitchen is not importable here ({exc})"
    return comfy_kitchen, "comfy_kitchen"


def quantized_tensor_type() -> type | None:
    """comfy-kitchen's QuantizedTensor class, or None when comfy-kitchen is not loaded."""
    ck, _origin = host_kitchen()
    if ck is None:
        return None
    tensor_module = sys.modules.get(f"{ck.__name__}.tensor") or getattr(ck, "tensor", None)
    return getattr(tensor_module, "QuantizedTensor", None)


def is_quantized(tensor: Any) -> bool:
    """True for a comfy-kitchen QuantizedTensor (without importing comfy-kitchen when it is absent)."""
    return hasattr(tensor, "_qdata") and hasattr(tensor, "_layout_cls") and hasattr(tensor, "_params")


def layout_name(tensor: Any) -> str:
    layout = getattr(tensor, "_layout_cls", "")
    return layout if isinstance(layout, str) else getattr(layout, "__name__", str(layout))


def quantized_rows(weight: Any, start: int, stop: int) -> tuple[Any | None, str]:
    """(rows [start, stop) of a quantized [out, in] weight as a new QuantizedTensor, "") or (None, why not)."""
    layout = layout_name(weight)
    if layout not in ROW_SLICEABLE_LAYOUTS:
        return None, f"{layout} weights have no exact row slice here"
    params, qdata = weight._params, weight._qdata
    rows = int(params.orig_shape[0])
    if getattr(params, "transposed", False) or qdata.dim() != 2 or qdata.shape[0] != rows:
        return None, f"{layout} weight is transposed or padded"
    if layout == "TensorCoreNVFP4Layout" and (start % NVFP4_TILE_ROWS or stop % NVFP4_TILE_ROWS):
        return None, f"NVFP4 rows {start}:{stop} are not aligned to its {NVFP4_TILE_ROWS}-row scale tiles"
    sliced: dict[str, torch.Tensor] = {}
    for field in dataclasses.fields(params):
        value = getattr(params, field.name)
        if not torch.is_tensor(value) or value.numel() <= 1:
            continue
        if value.dim() >= 1 and value.shape[0] in (rows, _padded(rows)):
            sliced[field.name] = value[start:stop]
        else:
            return None, f"{layout} parameter '{field.name}' {tuple(value.shape)} is neither per tensor nor per row"
    new_params = dataclasses.replace(params, orig_shape=(stop - start, *params.orig_shape[1:]), **sliced)
    return type(weight)(qdata[start:stop], weight._layout_cls, new_params), ""


def _padded(rows: int) -> int:
    return -(-rows // NVFP4_TILE_ROWS) * NVFP4_TILE_ROWS


def activation_scale_is_global(layer: Any) -> bool:
    """True when a quantized layer scales its input by the whole input (amax over all tokens).

    Such a layer gives other numbers when its input is cut into token chunks. Layers with a stored
    `input_scale`, unquantized layers and per-token activation layouts do not.
    """
    weight = getattr(layer, "weight", None)
    if not is_quantized(weight) or getattr(layer, "input_scale", None) is not None:
        return False
    return layout_name(weight) not in PER_TOKEN_ACTIVATION_LAYOUTS
