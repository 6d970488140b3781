"""Measurement: is a matmul on a slice the same bits as that slice of the whole matmul? (docs/lowvram.md)

Run: python -m h3kit.scripts.bench_slice_exactness [--device cpu] [--dtype float32]

Row slices (what the low-VRAM head groups do to a projection weight): F.linear(x, w[a:b], bias[a:b]) against
columns a:b of F.linear(x, w, bias), for equal groups of `rows` output rows. Token chunks (what the chunked
feed-forward does): F.linear(x[:, a:b], w, bias) against rows a:b of the whole, for equal chunks of `tokens`.
Each line: how many (K, tokens or width, groups) cases were bitwise, and the largest difference seen.
The rule built on it: kernels/chunked.py SLICE_ROW_MULTIPLE.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

ROWS = (1, 2, 4, 8, 12, 13, 15, 16, 24, 32, 48, 64, 128, 256, 2048)
TOKEN_CHUNKS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 256, 1024)
INNER = (16, 32, 64, 128, 2048, 4096)  # K, the input width
OTHER = (1, 8, 12, 96, 384, 1000)      # tokens for row slices, output width/16 for token chunks
GROUPS = (2, 4, 16)
MAX_ELEMENTS = 10**8


def compare(whole: torch.Tensor, parts: list[torch.Tensor], cut) -> tuple[bool, float]:
    diffs = [(part - cut(whole, i)).abs().max().item() for i, part in enumerate(parts)]
    return all(torch.equal(part, cut(whole, i)) for i, part in enumerate(parts)), max(diffs)


def exactness(shapes, split: str, size: int, device: str, dtype: torch.dtype, gen: torch.Generator):
    """(cases, bitwise cases, worst |d|) over `shapes` = (tokens, out width N, K, groups); `split` "rows" cuts the
    weight into groups of `size` output rows, "tokens" cuts the input into chunks of `size` tokens."""
    cases = exact = 0
    worst = 0.0
    for tokens, n, k, groups in shapes:
        if n * k * tokens > MAX_ELEMENTS:
            continue
        x = torch.randn(1, tokens, k, generator=gen).to(device, dtype)
        w = (torch.randn(n, k, generator=gen) / k ** 0.5).to(device, dtype)
        b = (torch.randn(n, generator=gen) * 0.1).to(device, dtype)
        if split == "rows":
            parts = [F.linear(x, w[g * size:(g + 1) * size], b[g * size:(g + 1) * size]) for g in range(groups)]
            same, diff = compare(F.linear(x, w, b), parts, lambda t, g: t[..., g * size:(g + 1) * size])
        else:
            parts = [F.linear(x[:, g * size:(g + 1) * size], w, b) for g in range(groups)]
            same, diff = compare(F.linear(x, w, b), parts, lambda t, g: t[:, g * size:(g + 1) * size])
        cases, exact, worst = cases + 1, exact + same, max(worst, diff)
    return cases, exact, worst


def row_slices(rows: int, device: str, dtype: torch.dtype, gen: torch.Generator) -> tuple[int, int, float]:
    shapes = [(tokens, rows * groups, k, groups) for k in INNER for tokens in OTHER for groups in GROUPS]
    return exactness(shapes, "rows", rows, device, dtype, gen)


def token_chunks(chunk: int, device: str, dtype: torch.dtype, gen: torch.Generator) -> tuple[int, int, float]:
    shapes = [(chunk * groups, 16 * width, k, groups) for k in INNER for width in OTHER for groups in GROUPS]
    return exactness(shapes, "tokens", chunk, device, dtype, gen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {args.device}, {args.dtype}, {torch.get_num_threads()} threads")
    for label, sizes, measure in (("row slice", ROWS, row_slices), ("token chunk", TOKEN_CHUNKS, token_chunks)):
        for size in sizes:
            cases, exact, worst = measure(size, args.device, dtype, gen)
            print(f"{label} {size:5d}: {exact:3d}/{cases:3d} bitwise, max |d| {worst:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
