"""bf16 -> fp16 for .safetensors files: bf16 tensors become fp16, everything else is kept byte for byte.

Why: GPUs without bf16 (RTX 20xx, sm_75) load bf16 VAEs and upscalers as fp32, twice their size (F06).
The input is checked by the safetensors library's own rules first (adapters/safetensors_file.py: a file the
library refuses is refused here, before anything is written). Then tensors stream chunk by chunk (memory
stays small whatever the file size); the `__metadata__` block is kept exactly (ComfyUI's VAELoader and
LatentUpscaleModelLoader read `config` from it, F14); values beyond the fp16 range are refused unless
`clamp`; the output goes to a temporary file in OUT's folder, is re-read with the safetensors library
(names, shapes, dtypes, metadata) and only then renamed to OUT.

Self-contained (stdlib, torch, safetensors, the pack's adapters) so scripts/bf16_to_fp16.py can run it from a
plain clone.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..checks.filetypes import output_name_problem
from .files import TargetExists, atomic_path, is_folder, name_problem, os_reason, regular_file_problem
from .safetensors_file import MAX_HEADER_BYTES, SafetensorsHeader, SafetensorsHeaderError, read_header

FP16_MAX = 65504.0
CHUNK_ELEMENTS = 8 * 1024 * 1024  # 16 MiB of bf16 per read: bounded memory, few Python round trips
COPY_CHUNK_BYTES = 64 * 1024 * 1024

Progress = Callable[[int], None]  # called with the number of source bytes just processed


class ConvertError(Exception):
    """A refusal or a failed check; the message says what to do. Nothing was written."""


class _NothingToWrite(Exception):
    """Overflow without clamp: leave the atomic write without publishing."""


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

    @property
    def converted(self) -> int:
        return sum(1 for row in self.tensors if row.dtype_in == "BF16")


def read_source(path: Path) -> SafetensorsHeader:
    try:
        return read_header(path)
    except SafetensorsHeaderError as exc:
        if exc.kind is not None:
            extra = " (GGUF files keep their own quantized formats; they need no fp16 copy)" if exc.kind.key == "gguf" else ""
            raise ConvertError(f"{path} is {exc.kind.text}, not a .safetensors model file: bf16-to-fp16 converts "
                               f"safetensors weights only{extra}. Nothing was written") from exc
        raise ConvertError(f"{path} is not a safetensors file the safetensors library would load: {exc}. Nothing was "
                           "written; use an intact copy of the model (compare its size with the download page)") from exc
    except OSError as exc:
        raise ConvertError(f"cannot read {path}: it {os_reason(exc)}") from exc


def plan_bf16_to_fp16(header: SafetensorsHeader) -> list[TensorPlan]:
    """Tensors in data order (the header reader checked they tile the data exactly), bf16 marked for conversion."""
    return [
        TensorPlan(entry.name, entry.dtype, list(entry.shape), header.data_start + entry.begin, entry.nbytes,
                   "F16" if entry.dtype == "BF16" else entry.dtype)
        for entry in header.tensors.values()
    ]


def build_header(plans: list[TensorPlan], metadata: dict[str, str] | None) -> bytes:
    """The output header: same names, shapes and metadata, contiguous offsets, padded to 8 bytes."""
    header: dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for plan in plans:
        header[plan.name] = {"dtype": plan.out_dtype, "shape": plan.shape, "data_offsets": [offset, offset + plan.nbytes]}
        offset += plan.nbytes
    encoded = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    if len(encoded) > MAX_HEADER_BYTES:
        raise ConvertError(f"the converted header would be {len(encoded)} bytes, over safetensors' limit of "
                           f"{MAX_HEADER_BYTES} (the input writes its tensor entries in a shorter form)")
    return struct.pack("<Q", len(encoded)) + encoded


def _read_exact(handle: BinaryIO, count: int) -> bytes:
    data = handle.read(count)
    if len(data) != count:
        raise ConvertError(f"the input ended early (wanted {count} bytes, got {len(data)}): it changed while being read")
    return data


def _chunks(handle: BinaryIO, plan: TensorPlan, size: int) -> Iterator[bytes]:
    handle.seek(plan.source_begin)
    remaining = plan.nbytes
    while remaining:
        step = min(remaining, size)
        remaining -= step
        yield _read_exact(handle, step)


def convert_bf16_tensor(src: BinaryIO, dst: BinaryIO | None, plan: TensorPlan, clamp: bool,
                        progress: Progress) -> TensorResult:
    """Convert one bf16 tensor chunk by chunk; dst None = only measure (after an overflow was found)."""
    import torch

    result = TensorResult(plan.name, plan.dtype, plan.out_dtype, plan.shape, max_abs=0.0)
    for chunk in _chunks(src, plan, CHUNK_ELEMENTS * 2):
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
        progress(len(chunk))
    return result


def copy_tensor(src: BinaryIO, dst: BinaryIO | None, plan: TensorPlan, progress: Progress) -> TensorResult:
    for chunk in _chunks(src, plan, COPY_CHUNK_BYTES):
        if dst is not None:
            dst.write(chunk)
        progress(len(chunk))
    return TensorResult(plan.name, plan.dtype, plan.out_dtype, plan.shape)


def verify_output(path: Path, plans: list[TensorPlan], metadata: dict[str, str] | None) -> None:
    """Re-read the written file with safetensors itself: names, shapes, dtypes and metadata must match."""
    from safetensors import SafetensorError, safe_open

    expected = {plan.name: (plan.shape, plan.out_dtype) for plan in plans}
    try:
        with safe_open(str(path), framework="numpy") as handle:
            written_meta = handle.metadata()
            names = set(handle.keys())
            found = {name: (list(handle.get_slice(name).get_shape()), handle.get_slice(name).get_dtype())
                     for name in names}
    except SafetensorError as exc:
        raise ConvertError(f"verification failed: the safetensors library cannot read the output ({exc})") from exc
    if names != set(expected):
        raise ConvertError(f"verification failed: tensor names differ ({sorted(names ^ set(expected))[:5]})")
    for name, (shape, dtype) in found.items():
        if (shape, dtype) != expected[name]:
            raise ConvertError(f"verification failed: {name} is {dtype} {shape}, expected {expected[name]}")
    if (written_meta or None) != (metadata or None):
        raise ConvertError("verification failed: __metadata__ differs from the input's")


def check_paths(source: Path, target: Path, overwrite: bool) -> None:
    problem = regular_file_problem(source)
    if problem is not None:
        raise ConvertError(f"input {source} {problem}")
    problem = name_problem(target.name)
    if problem is not None:
        raise ConvertError(f"the output file name {problem}: choose another name")
    wrong_name = output_name_problem(target, "safetensors")
    if wrong_name:
        raise ConvertError(wrong_name)
    if not is_folder(target.parent):
        raise ConvertError(f"output folder {target.parent} does not exist")
    if target.exists() and os.path.samefile(source, target):
        raise ConvertError(f"input and output are the same file ({source}); give a new output name")
    if target.exists() and not overwrite:
        raise ConvertError(f"output {target} exists; pass --overwrite to replace it, or choose another name")
    if target.exists() and not target.is_file():
        raise ConvertError(f"output {target} is not a regular file")


def _check_space(target: Path, needed: int) -> None:
    free = shutil.disk_usage(target.parent).free
    if free < needed:
        raise ConvertError(f"the output needs {needed / 2**30:.2f} GiB but {target.parent} has {free / 2**30:.2f} GiB "
                           "free; free some space or write to another disk")


def bf16_to_fp16(source: Path, target: Path, clamp: bool = False, overwrite: bool = False,
                 progress: Progress | None = None) -> ConversionResult:
    """Convert; raises ConvertError (nothing written) on refusal or a failed check. An overflow without
    `clamp` returns a result with `overflow` set and `written` False (nothing written either)."""
    source, target = Path(source), Path(target)
    check_paths(source, target, overwrite)
    header = read_source(source)
    plans = plan_bf16_to_fp16(header)
    out_header = build_header(plans, header.metadata)
    _check_space(target, len(out_header) + header.data_bytes)
    tick = progress or (lambda _n: None)
    result = ConversionResult()
    try:
        with atomic_path(target, overwrite=overwrite, check=lambda tmp: verify_output(tmp, plans, header.metadata)) \
                as temp, open(temp, "wb") as dst, open(source, "rb") as src:
            dst.write(out_header)
            for plan in plans:
                sink = None if result.overflow else dst  # after an overflow only measure, to list them all
                if plan.dtype == "BF16":
                    row = convert_bf16_tensor(src, sink, plan, clamp, tick)
                else:
                    row = copy_tensor(src, sink, plan, tick)
                result.tensors.append(row)
                if row.max_abs is not None and row.max_abs > FP16_MAX and not clamp:
                    result.overflow.append(row)
            if result.overflow:
                raise _NothingToWrite
    except _NothingToWrite:
        return result  # the temporary file is gone, OUT untouched
    except TargetExists as exc:
        raise ConvertError(f"output {target} appeared while converting; nothing was written") from exc
    except OSError as exc:
        raise ConvertError(f"writing {target} failed ({exc.strerror or exc}); nothing was written") from exc
    result.written = True
    return result
