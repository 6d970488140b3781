"""Convert model files. `bf16-to-fp16 IN OUT`: bf16 tensors of a .safetensors file become fp16, nothing else changes.

Why: GPUs without bf16 (RTX 20xx, sm_75) load bf16 VAEs and upscalers as fp32, twice their size (F06).
The converter streams tensor by tensor in chunks (memory stays small whatever the file size), copies
every non-bf16 tensor byte for byte, keeps the `__metadata__` block exactly (ComfyUI's VAELoader and
LatentUpscaleModelLoader read `config` from it, F14), refuses values beyond the fp16 range unless
--clamp, writes a temporary file in OUT's folder, re-reads its header with safetensors to verify names,
shapes, dtypes and metadata, and only then renames it to OUT.

Self-contained (stdlib, torch, safetensors) so scripts/bf16_to_fp16.py can load it from a plain clone.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..adapters.safetensors_file import SafetensorsHeaderError, read_safetensors_header

FP16_MAX = 65504.0
CHUNK_ELEMENTS = 8 * 1024 * 1024  # 16 MiB of bf16 per read: bounded memory, few Python round trips
COPY_CHUNK_BYTES = 64 * 1024 * 1024
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1}


class ConvertError(Exception):
    """A refusal or a failed check; the message says what to do."""


@dataclass
class TensorPlan:
    name: str
    dtype: str
    shape: list[int]
    source_begin: int  # absolute file offset of the tensor's bytes in IN
    nbytes: int
    out_dtype: str


@dataclass
class TensorResult:
    name: str
    dtype_in: str
    dtype_out: str
    shape: list[int]
    max_abs: float | None = None  # None for tensors that were copied, not read as numbers
    clamped: int = 0
    flushed_to_zero: int = 0
    nan: int = 0


@dataclass
class ConversionResult:
    tensors: list[TensorResult] = field(default_factory=list)
    overflow: list[TensorResult] = field(default_factory=list)
    written: bool = False


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """(header dict, absolute offset where the data section starts) of a .safetensors file."""
    try:
        return read_safetensors_header(path)
    except SafetensorsHeaderError as exc:
        raise ConvertError(f"{path} is not a safetensors file ({exc})") from exc


def plan_bf16_to_fp16(header: dict[str, Any], data_start: int) -> list[TensorPlan]:
    """Tensors in data order, bf16 marked for conversion; checks the offsets describe the data exactly."""
    plans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = entry["dtype"]
        count = 1
        for dim in entry["shape"]:
            count *= dim
        if dtype in DTYPE_BYTES and count * DTYPE_BYTES[dtype] != end - begin:
            raise ConvertError(f"tensor {name!r}: {dtype} {entry['shape']} does not match its {end - begin} bytes")
        plans.append(TensorPlan(name, dtype, list(entry["shape"]), data_start + begin, end - begin,
                                "F16" if dtype == "BF16" else dtype))
    plans.sort(key=lambda plan: plan.source_begin)
    return plans


def build_header(plans: list[TensorPlan], metadata: dict[str, str] | None) -> bytes:
    """The output header: same names, shapes and metadata, contiguous offsets, padded to 8 bytes."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for plan in plans:
        header[plan.name] = {"dtype": plan.out_dtype, "shape": plan.shape, "data_offsets": [offset, offset + plan.nbytes]}
        offset += plan.nbytes
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded


def _read_exact(handle: BinaryIO, count: int) -> bytes:
    data = handle.read(count)
    if len(data) != count:
        raise ConvertError(f"input ended early (wanted {count} bytes, got {len(data)}): the file is truncated")
    return data


def _bf16_chunks(handle: BinaryIO, plan: TensorPlan) -> Iterator[bytes]:
    handle.seek(plan.source_begin)
    remaining = plan.nbytes
    while remaining:
        size = min(remaining, CHUNK_ELEMENTS * 2)
        remaining -= size
        yield _read_exact(handle, size)


def convert_bf16_tensor(src: BinaryIO, dst: BinaryIO | None, plan: TensorPlan, clamp: bool) -> TensorResult:
    """Convert one bf16 tensor chunk by chunk; dst None = only measure (after an overflow was found)."""
    import torch

    result = TensorResult(plan.name, plan.dtype, plan.out_dtype, plan.shape, max_abs=0.0)
    for chunk in _bf16_chunks(src, plan):
        values = torch.frombuffer(bytearray(chunk), dtype=torch.bfloat16).float()
        nan = torch.isnan(values)
        result.nan += int(nan.sum())
        finite_abs = values.abs().masked_fill(nan, 0.0)
        if finite_abs.numel():
            result.max_abs = max(result.max_abs or 0.0, float(finite_abs.max()))
        over = finite_abs > FP16_MAX
        if clamp:
            result.clamped += int(over.sum())
            values = values.clamp(-FP16_MAX, FP16_MAX)
        half = values.to(torch.float16)
        result.flushed_to_zero += int(((values != 0) & (half == 0)).sum())
        if dst is not None:
            dst.write(half.numpy().tobytes())
    return result


def copy_tensor(src: BinaryIO, dst: BinaryIO | None, plan: TensorPlan) -> TensorResult:
    src.seek(plan.source_begin)
    remaining = plan.nbytes
    while remaining:
        size = min(remaining, COPY_CHUNK_BYTES)
        data = _read_exact(src, size)
        if dst is not None:
            dst.write(data)
        remaining -= size
    return TensorResult(plan.name, plan.dtype, plan.out_dtype, plan.shape)


def verify_output(path: Path, plans: list[TensorPlan], metadata: dict[str, str] | None) -> None:
    """Re-read the written file with safetensors itself: names, shapes, dtypes and metadata must match."""
    from safetensors import safe_open

    expected = {plan.name: (plan.shape, plan.out_dtype) for plan in plans}
    with safe_open(str(path), framework="pt") as handle:
        written_meta = handle.metadata()
        names = set(handle.keys())
        if names != set(expected):
            raise ConvertError(f"verification failed: tensor names differ ({sorted(names ^ set(expected))[:5]})")
        for name in names:
            info = handle.get_slice(name)
            shape, dtype = list(info.get_shape()), info.get_dtype()
            if (shape, dtype) != (expected[name][0], expected[name][1]):
                raise ConvertError(f"verification failed: {name} is {dtype} {shape}, expected {expected[name]}")
    if (written_meta or None) != (metadata or None):
        raise ConvertError(f"verification failed: __metadata__ differs ({written_meta!r} vs {metadata!r})")


def _check_paths(source: Path, target: Path, overwrite: bool) -> None:
    if not source.is_file():
        raise ConvertError(f"input {source} does not exist or is not a file")
    if source.resolve() == target.resolve() or (target.exists() and os.path.samefile(source, target)):
        raise ConvertError(f"input and output are the same file ({source}); give a new output name")
    if target.exists() and not overwrite:
        raise ConvertError(f"output {target} exists; pass --overwrite to replace it, or choose another name")
    if target.exists() and not target.is_file():
        raise ConvertError(f"output {target} is not a regular file")
    if not target.parent.is_dir():
        raise ConvertError(f"output folder {target.parent} does not exist")


def bf16_to_fp16(source: Path, target: Path, clamp: bool = False, overwrite: bool = False) -> ConversionResult:
    """Convert; raises ConvertError (nothing written) on refusal, overflow without clamp or a failed check."""
    source, target = Path(source), Path(target)
    _check_paths(source, target, overwrite)
    header, data_start = read_header(source)
    metadata = header.get("__metadata__")
    plans = plan_bf16_to_fp16(header, data_start)
    result = ConversionResult()
    handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp", delete=False)
    temp = Path(handle.name)
    try:
        with handle as dst, open(source, "rb") as src:
            dst.write(build_header(plans, metadata))
            for plan in plans:
                sink = None if result.overflow else dst  # after an overflow only measure, to list them all
                row = convert_bf16_tensor(src, sink, plan, clamp) if plan.dtype == "BF16" else copy_tensor(src, sink, plan)
                result.tensors.append(row)
                if row.max_abs is not None and row.max_abs > FP16_MAX and not clamp:
                    result.overflow.append(row)
            dst.flush()
            os.fsync(dst.fileno())
        if result.overflow:
            return result
        verify_output(temp, plans, metadata)
        os.replace(temp, target)
        result.written = True
        return result
    finally:
        if temp.exists():  # any failure or interruption: no partial OUT, no stray temp file
            temp.unlink()


def format_summary(result: ConversionResult) -> str:
    lines = [f"{'tensor':<60} {'dtype':<12} {'shape':<22} {'max |x|':>12}  note"]
    for row in result.tensors:
        shape = "x".join(str(d) for d in row.shape) or "scalar"
        dtype = f"{row.dtype_in}->{row.dtype_out}" if row.dtype_in != row.dtype_out else f"{row.dtype_in} kept"
        peak = f"{row.max_abs:.6g}" if row.max_abs is not None else "-"
        notes = []
        if row.max_abs is not None and row.max_abs > FP16_MAX:
            notes.append(f"clamped {row.clamped}" if row.clamped else "EXCEEDS fp16 max 65504")
        if row.flushed_to_zero:
            notes.append(f"{row.flushed_to_zero} tiny values -> 0")
        if row.nan:
            notes.append(f"{row.nan} NaN in source")
        lines.append(f"{row.name:<60} {dtype:<12} {shape:<22} {peak:>12}  {', '.join(notes)}")
    converted = sum(1 for row in result.tensors if row.dtype_in == "BF16")
    lines.append(f"{converted} bf16 tensors converted, {len(result.tensors) - converted} tensors copied unchanged")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="conversion", metavar="CONVERSION", required=True)
    command = sub.add_parser("bf16-to-fp16", help="bf16 tensors -> fp16, metadata kept, atomic and verified",
                             description=__doc__)
    add_bf16_to_fp16_arguments(command)


def add_bf16_to_fp16_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", type=Path, help="source .safetensors file (never modified)")
    parser.add_argument("output", type=Path, help="new .safetensors file to write")
    parser.add_argument("--clamp", action="store_true",
                        help="clamp values beyond +-65504 instead of refusing (changes those weights)")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it already exists")


def run(args: argparse.Namespace) -> int:
    try:
        result = bf16_to_fp16(args.input, args.output, clamp=args.clamp, overwrite=args.overwrite)
    except ConvertError as exc:
        print(f"convert: {exc}", file=sys.stderr)
        return 2
    print(format_summary(result))
    if result.overflow:
        worst = ", ".join(f"{row.name} (max |x| {row.max_abs:.6g})" for row in result.overflow)
        print(f"convert: refused, nothing written: {len(result.overflow)} tensors exceed fp16's 65504: {worst}. "
              "Re-run with --clamp to clamp them, or keep the bf16 file.", file=sys.stderr)
        return 1
    print(f"wrote {args.output} (header re-read: names, shapes, dtypes and __metadata__ verified)")
    return 0
