"""Convert model files. `bf16-to-fp16 IN OUT`: bf16 tensors of a .safetensors file become fp16, nothing else changes.

GPUs without bf16 (RTX 20xx, sm_75) load bf16 VAEs and upscalers as fp32, twice their size (F06). The input
is checked by the safetensors library's rules, streamed in chunks, its metadata kept exactly (F14), values
beyond fp16's range refused unless --clamp, and OUT written atomically after the output was re-read and
verified. The work is done by adapters/bf16_convert.py; this is its command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..adapters.bf16_convert import FP16_MAX, ConversionResult, ConvertError, bf16_to_fp16, read_source
from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from ..checks.problem import printable
from . import console

EXIT_STATUSES = {
    EXIT_OK: "converted, the output re-read and verified",
    EXIT_FAILED: "refused, nothing written: values beyond fp16's 65504 (add --clamp to clamp them)",
    EXIT_INVALID: "refused, nothing written: bad arguments, an input that is not a safetensors file, an output "
                  "that exists (add --overwrite), is the input or does not end in .safetensors",
}


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
    parser.add_argument("--quiet", action="store_true", help="no progress bar (it is also off when stderr is not a terminal)")


def _row(row) -> str:
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
    return f"{printable(row.name, 200):<60} {dtype:<12} {shape:<22} {peak:>12}  {', '.join(notes)}"


def format_summary(result: ConversionResult) -> str:
    lines = [f"{'tensor':<60} {'dtype':<12} {'shape':<22} {'max |x|':>12}  note"]
    lines += [_row(row) for row in result.tensors]
    lines.append(f"{result.converted} bf16 tensors converted, {len(result.tensors) - result.converted} "
                 "tensors copied unchanged")
    return "\n".join(lines)


def _progress_bar(source: Path, quiet: bool):
    """A tqdm byte bar on stderr, off with --quiet or when stderr is not a terminal (logs, pipes, CI)."""
    from tqdm import tqdm

    total = read_source(source).data_bytes
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"converting {printable(source.name, 60)}",
                file=sys.stderr, disable=quiet or not sys.stderr.isatty(), leave=False)


def run(args: argparse.Namespace) -> int:
    try:
        with _progress_bar(args.input, getattr(args, "quiet", False)) as bar:
            result = bf16_to_fp16(args.input, args.output, clamp=args.clamp, overwrite=args.overwrite,
                                  progress=bar.update)
    except ConvertError as exc:
        console.problem(f"convert: {printable(exc)}")
        return EXIT_INVALID
    if result.overflow:
        worst = ", ".join(f"{printable(row.name, 200)} (max |x| {row.max_abs:.6g})" for row in result.overflow)
        console.problem(f"convert: refused, nothing written: {len(result.overflow)} tensors exceed fp16's 65504: "
                        f"{worst}. Re-run with --clamp to clamp them, or keep the bf16 file.")
        return EXIT_FAILED
    console.result(format_summary(result))
    console.result(f"wrote {printable(args.output)} (header re-read: names, shapes, dtypes and __metadata__ verified)")
    return EXIT_OK
