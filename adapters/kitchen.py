"""The host's kernel library, comfy-kitchen, reached the way ComfyUI reaches it, and its quantized tensors.

ComfyUI imports comfy-kitchen as `comfy.quant_ops.ck`; when ComfyUI has loaded that module, its `ck` is the
library the host's own forwards call. Outside ComfyUI (tests, benchmarks) the installed `comfy_kitchen` is the
same library. Nothing here imports ComfyUI.

Layouts come from the host's registry. A quantized weight names its layout (`_layout_cls`, e.g.
`TensorCoreFP8E4M3Layout` on ComfyUI 0.33.0, `TensorCoreFP8Layout` elsewhere); the host maps the name to a class
(`comfy.quant_ops.get_layout_class`, which reads comfy-kitchen's registry that `comfy.quant_ops` registers into).
What a layout allows is decided from that class: the comfy-kitchen layout it derives from (ComfyUI's fp8 classes
subclass kitchen's `TensorCoreFP8Layout`) and, for the activation side, the host's own `quantize`.

Row slices of quantized weights. A projection's output rows [a, b) need only weight rows [a, b). A row slice is
exact when every per-row parameter is cut with the data, every other parameter is per tensor, and the cut falls
on the layout's scale tiles (`ROW_RULES`, one per kitchen layout; each checked against real comfy-kitchen tensors
in tests/test_lowvram_layouts.py: the slices dequantize to the same rows and, where the CPU path multiplies, give
the same columns bitwise). A layout without a rule, a transposed, padded or packed tensor, or unaligned rows: no
slice (None, why), and the caller runs the projection whole and reports it.

Token chunks of quantized inputs. A layer that quantizes its input with a scale taken from the whole input gives
other numbers on token chunks. Whether it does is read from the host: the format's `quantize_input` entry in
`comfy.quant_ops.QUANT_ALGOS` (weight-only formats leave the input to the matmul, which quantizes per token for
the kitchen layouts marked so below), a stored `input_scale` (one constant), else the host's own
`QuantizedTensor.from_float(x, layout, scale=None)` probed once per layout on CPU: if quantizing a token depends on
the other tokens, the layer is input-scaled (ComfyUI's fp8 classes use scale 1.0 then; NVFP4 takes the amax).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

TILE_ROWS = 128  # NVFP4 / MXFP8 block scales are stored in 128-row x 4-column swizzled tiles


@dataclass(frozen=True)
class RowRule:
    """How rows [a, b) of one comfy-kitchen layout's weight are cut exactly.

    `per_row`: parameters cut with the rows, as (field, axis); tensor parameters of one element and `shared` ones
    belong to the whole tensor; any other tensor parameter refuses the slice. `tile_rows`: a and b must be
    multiples of it. `refuse_flags`: parameter flags under which the stored data is not row-major per output row.
    `per_token_activations`: its matmul quantizes a plain input per token (weight-only formats).
    """

    kitchen_class: str
    per_row: tuple[tuple[str, int], ...] = ()
    shared: tuple[str, ...] = ()
    tile_rows: int = 1
    refuse_flags: tuple[str, ...] = ("transposed",)
    per_token_activations: bool = False


# Keyed by the class names comfy-kitchen exports from `comfy_kitchen.tensor` (its API), matched by subclass.
ROW_RULES: tuple[RowRule, ...] = (
    RowRule("TensorWiseINT8Layout", per_row=(("scale", 0),), per_token_activations=True),  # tensor or row scale
    RowRule("TensorCoreFP8Layout"),  # one scale per tensor
    RowRule("TensorCoreNVFP4Layout", per_row=(("block_scale", 0),), tile_rows=TILE_ROWS),
    RowRule("TensorCoreMXFP8Layout", per_row=(("scale", 0),), tile_rows=TILE_ROWS),
    RowRule("TensorCoreConvRotW4A4Layout", per_row=(("scale", 0),), per_token_activations=True),
    RowRule("AsymW4A8Int8Layout", per_row=(("scale", 0), ("s_channel", 0), ("correction", 1)), shared=("codebook",),
            refuse_flags=("transposed", "mma_packed"), per_token_activations=True),
)


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


def _kitchen_tensor_module() -> ModuleType | None:
    ck, _origin = host_kitchen()
    if ck is None:
        return None
    return sys.modules.get(f"{ck.__name__}.tensor") or getattr(ck, "tensor", None)


def quantized_tensor_type() -> type | None:
    """comfy-kitchen's QuantizedTensor class, or None when comfy-kitchen is not loaded."""
    return getattr(_kitchen_tensor_module(), "QuantizedTensor", None)


def is_quantized(tensor: Any) -> bool:
    """True for a comfy-kitchen QuantizedTensor (without importing comfy-kitchen when it is absent)."""
    return hasattr(tensor, "_qdata") and hasattr(tensor, "_layout_cls") and hasattr(tensor, "_params")


def layout_name(tensor: Any) -> str:
    layout = getattr(tensor, "_layout_cls", "")
    return layout if isinstance(layout, str) else getattr(layout, "__name__", str(layout))


# ----------------------------------------------------------------------------------------------
# the host's registry


def layout_class(name: str) -> type | None:
    """The class the host registered under `name` (comfy.quant_ops's lookup when ComfyUI is loaded), or None."""
    quant_ops = sys.modules.get("comfy.quant_ops")
    lookup = getattr(quant_ops, "get_layout_class", None) or getattr(_kitchen_tensor_module(), "get_layout_class", None)
    if lookup is None:
        return None
    try:
        found = lookup(name)
    except (KeyError, ValueError):
        return None
    return found if isinstance(found, type) else None


def registered_layouts() -> dict[str, type]:
    """Every layout name the host's registry holds (kitchen's own and those comfy.quant_ops registered)."""
    tensor_module = _kitchen_tensor_module()
    base = sys.modules.get(f"{tensor_module.__name__}.base") if tensor_module is not None else None
    names = set(getattr(base, "LAYOUTS", {}) or {})
    algos = getattr(sys.modules.get("comfy.quant_ops"), "QUANT_ALGOS", {}) or {}
    names |= {entry.get("comfy_tensor_layout") for entry in algos.values() if isinstance(entry, dict)} - {None}
    found = {name: layout_class(name) for name in sorted(names)}
    return {name: cls for name, cls in found.items() if cls is not None}


def row_rule(cls: type | None) -> RowRule | None:
    """The rule of the most derived comfy-kitchen layout `cls` is (or derives from), or None."""
    tensor_module = _kitchen_tensor_module()
    if cls is None or tensor_module is None:
        return None
    for ancestor in cls.__mro__:
        for rule in ROW_RULES:
            if ancestor is getattr(tensor_module, rule.kitchen_class, None):
                return rule
    return None


def slice_verdict(name: str) -> str:
    """One line per registered layout: what the per-group path does with weights of it."""
    cls = layout_class(name)
    if cls is None:
        return "not in this host's layout registry: projection whole"
    rule = row_rule(cls)
    if rule is None:
        return f"{cls.__name__}: no exact row slice known: projection whole"
    tiles = f", groups on {rule.tile_rows}-row scale tiles" if rule.tile_rows > 1 else ""
    return f"row slices as kitchen {rule.kitchen_class}{tiles}"


def quantized_rows(weight: Any, start: int, stop: int) -> tuple[Any | None, str]:
    """(rows [start, stop) of a quantized [out, in] weight as a new QuantizedTensor, "") or (None, why not)."""
    name = layout_name(weight)
    cls = layout_class(name)
    if cls is None:
        return None, f"{name} is not in this host's layout registry; no exact row slice here"
    rule = row_rule(cls)
    if rule is None:
        return None, f"{name} weights have no exact row slice here ({cls.__name__} derives from no kitchen layout " \
                     "with a known row layout)"
    params, qdata = weight._params, weight._qdata
    rows = int(params.orig_shape[0])
    for flag in rule.refuse_flags:
        if getattr(params, flag, False):
            return None, f"{name} weight is {flag}"
    if qdata.dim() != 2 or qdata.shape[0] != rows:
        return None, f"{name} weight is padded ({tuple(qdata.shape)} stored for {rows} rows)"
    if start % rule.tile_rows or stop % rule.tile_rows:
        return None, f"{name} rows {start}:{stop} are not aligned to its {rule.tile_rows}-row scale tiles"
    axes = dict(rule.per_row)
    tiled_rows = -(-rows // rule.tile_rows) * rule.tile_rows
    sliced: dict[str, torch.Tensor] = {}
    for field in dataclasses.fields(params):
        value = getattr(params, field.name)
        if not torch.is_tensor(value) or value.numel() <= 1 or field.name in rule.shared:
            continue
        axis = axes.get(field.name)
        if axis is None or value.dim() <= axis or value.shape[axis] not in (rows, tiled_rows):
            return None, f"{name} parameter '{field.name}' {tuple(value.shape)} is neither per tensor nor per row"
        sliced[field.name] = value.narrow(axis, start, stop - start)
    new_params = dataclasses.replace(params, orig_shape=(stop - start, *params.orig_shape[1:]), **sliced)
    return type(weight)(qdata[start:stop], weight._layout_cls, new_params), ""


# ----------------------------------------------------------------------------------------------
# activations: per token or scaled by the whole input

_PER_TOKEN_PROBES: dict[tuple[str, int], tuple[bool, str]] = {}
PROBE_TOKENS, PROBE_WIDTH, PROBE_LOUD = 32, 256, 1024.0


def layer_quantizes_input(layer: Any, cls: type | None) -> bool:
    """Whether the host quantizes this layer's input before its matmul (else the matmul takes the plain input)."""
    algos = getattr(sys.modules.get("comfy.quant_ops"), "QUANT_ALGOS", None)
    entry = algos.get(getattr(layer, "quant_format", None)) if isinstance(algos, dict) else None
    if isinstance(entry, dict):
        return bool(entry.get("quantize_input", True))
    return bool(getattr(cls, "QUANTIZES_INPUT", True))  # MixedPrecisionOps quantizes unless the format says not


def quantize_is_per_token(name: str) -> tuple[bool, str]:
    """Whether the host's `from_float(x, name, scale=None)` quantizes each token alone: (answer, how it was found).

    Probed once per layout class on CPU: the first half of a [32, 256] input is quantized with its loud second half
    (x 1024) and alone; equal dequantized rows mean per-token scales. A layout that cannot run on CPU counts as
    whole-input scaled (the safe answer) and says why.
    """
    cls = layout_class(name)
    key = (name, id(cls))
    if key not in _PER_TOKEN_PROBES:
        _PER_TOKEN_PROBES[key] = _probe_per_token(name)
    return _PER_TOKEN_PROBES[key]


def _probe_per_token(name: str) -> tuple[bool, str]:
    tensor_type = quantized_tensor_type()
    if tensor_type is None:
        return False, "comfy-kitchen is not loaded"
    gen = torch.Generator().manual_seed(0)
    probe = torch.randn(PROBE_TOKENS, PROBE_WIDTH, generator=gen).to(torch.bfloat16)
    probe[PROBE_TOKENS // 2:] *= PROBE_LOUD
    half = PROBE_TOKENS // 2
    try:
        together = tensor_type.from_float(probe, name, scale=None).dequantize()[:half]
        alone = tensor_type.from_float(probe[:half].contiguous(), name, scale=None).dequantize()
    except Exception as exc:  # noqa: BLE001 - any layout that cannot quantize here is treated as input-scaled, reported
        return False, f"{name} could not be probed on CPU ({type(exc).__name__}: {exc})"[:300]
    if torch.equal(together, alone):
        return True, f"{name} quantizes each token alone (probed)"
    return False, f"{name} quantizes the input with one scale for all tokens (probed)"


def whole_input_scaling(layer: Any) -> str:
    """Why a quantized layer's numbers for one token depend on the other tokens of its input ("" when they do not).

    Such a layer gives other numbers when its input is cut into token chunks. Unquantized layers, layers with a
    stored `input_scale`, weight-only formats whose matmul quantizes per token, and layouts whose host `quantize`
    is per token (probed) do not.
    """
    weight = getattr(layer, "weight", None)
    if not is_quantized(weight) or getattr(layer, "input_scale", None) is not None:
        return ""
    name = layout_name(weight)
    cls = layout_class(name)
    if not layer_quantizes_input(layer, cls):
        rule = row_rule(cls)
        if rule is not None and rule.per_token_activations:
            return ""
        return f"{name}: weight-only format whose matmul is not known to quantize per token"
    per_token, how = quantize_is_per_token(name)
    return "" if per_token else how
