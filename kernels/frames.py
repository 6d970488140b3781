"""Torch ops of the two-stage handoff and its guards: resize/crop frames, fit audio, tensor statistics.

IMAGE batches are [frames, H, W, C] float 0..1 (ComfyUI's layout); AUDIO waveforms are [B, channels, samples].
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from ..checks.geometry import CropPlan

RESIZE_CHUNK_FRAMES = 16  # bounds the float32 working copy while resizing long clips
SOLID_FRAME_STD = 1.5 / 255  # a frame whose every channel varies less than this is one solid colour
BLACK_FRAME_MEAN = 0.02  # a solid frame this dark is black
STILL_FRAME_DIFF = 0.5 / 255  # mean absolute change below this from one frame to the next = the same picture
SCAN_STRIDE = 4  # colour spread is measured on every 4th row and column


def resize_frames(frames: torch.Tensor, plan: CropPlan) -> torch.Tensor:
    """Apply `plan` to [N, H, W, C] frames; an identity plan returns the input's values untouched."""
    if plan.is_identity:
        return frames.contiguous()
    out = torch.empty((frames.shape[0], plan.out_h, plan.out_w, frames.shape[3]), dtype=frames.dtype, device=frames.device)
    for start in range(0, frames.shape[0], RESIZE_CHUNK_FRAMES):
        chunk = frames[start:start + RESIZE_CHUNK_FRAMES].movedim(-1, 1).float()
        resized = F.interpolate(
            chunk, size=(plan.resized_h, plan.resized_w), mode="bicubic", align_corners=False, antialias=True
        )
        cropped = resized[:, :, plan.crop_y:plan.crop_y + plan.out_h, plan.crop_x:plan.crop_x + plan.out_w]
        # bicubic overshoots at hard edges; IMAGE values must stay in 0..1
        out[start:start + chunk.shape[0]] = cropped.clamp_(0.0, 1.0).movedim(1, -1).to(frames.dtype)
    return out


def fit_frame_count(frames: torch.Tensor, count: int) -> torch.Tensor:
    """The first `count` frames; when `count` exceeds the clip, the last frame is repeated."""
    if count <= frames.shape[0]:
        return frames[:count]
    extra = frames[-1:].expand(count - frames.shape[0], *frames.shape[1:])
    return torch.cat([frames, extra], dim=0)


def fit_audio_length(waveform: torch.Tensor, samples: int) -> torch.Tensor:
    """Trim the sample axis to `samples`, or pad it with silence at the end."""
    have = waveform.shape[-1]
    if have >= samples:
        return waveform[..., :samples].contiguous()
    return F.pad(waveform, (0, samples - have))


@dataclass
class TensorStats:
    shape: list[int]
    dtype: str
    numel: int
    nan_count: int
    inf_count: int
    nan_fraction: float
    min: float | None
    max: float | None
    mean: float | None
    std: float | None

    @property
    def non_finite(self) -> int:
        return self.nan_count + self.inf_count

    @property
    def all_zero(self) -> bool:
        return self.numel > 0 and self.non_finite == 0 and self.min == 0.0 and self.max == 0.0

    @property
    def constant(self) -> bool:
        return self.numel > 1 and self.min is not None and self.min == self.max

    def as_dict(self) -> dict:
        return asdict(self)


def tensor_stats(tensor: torch.Tensor) -> TensorStats:
    """min/max/mean/std over the finite values, plus NaN/Inf counts (float64 accumulation)."""
    flat = tensor.detach().reshape(-1)
    if not flat.is_floating_point():
        flat = flat.double()
    nan = torch.isnan(flat)
    inf = torch.isinf(flat)
    finite = flat[~(nan | inf)].double()
    numel = flat.numel()
    nan_count = int(nan.sum())
    if finite.numel() == 0:
        lo = hi = mean = std = None
    else:
        lo, hi = float(finite.min()), float(finite.max())
        mean = float(finite.mean())
        std = float(finite.std(unbiased=False))
    return TensorStats(
        shape=list(tensor.shape), dtype=str(tensor.dtype).replace("torch.", ""), numel=numel,
        nan_count=nan_count, inf_count=int(inf.sum()), nan_fraction=(nan_count / numel) if numel else 0.0,
        min=lo, max=hi, mean=mean, std=std,
    )


def correlation(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Pearson correlation of two same-shape tensors; None when either is constant or not finite."""
    x = a.detach().reshape(-1).double()
    y = b.detach().reshape(-1).to(x.device).double()
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        return None
    x = x - x.mean()
    y = y - y.mean()
    denom = float(torch.sqrt((x * x).sum() * (y * y).sum()))
    if denom == 0.0:
        return None
    return float((x * y).sum()) / denom


def nonfinite_count(tensor: torch.Tensor) -> int:
    """NaN and Inf values in `tensor`, counted one slice of the first dimension at a time (no full-size mask)."""
    if not tensor.is_floating_point():
        return 0
    parts = tensor if tensor.ndim > 1 else (tensor,)
    return sum(int((~torch.isfinite(part)).sum()) for part in parts)


@dataclass
class FrameScan:
    frames: int
    nan_count: int
    inf_count: int
    black_frames: list[int]
    solid_frames: list[int]  # includes the black ones
    min: float | None
    max: float | None
    mean: float | None


def scan_frames(frames: torch.Tensor) -> FrameScan:
    """Per-frame black / solid-colour detection and NaN/Inf counts for an [N, H, W, C] batch, in chunks.

    NaN/Inf and the mean use every pixel (one summing pass); colour spread, min and max use a
    SCAN_STRIDE grid of pixels, which keeps a 121-frame 1344x768 clip near a second on two CPU cores.
    """
    black: list[int] = []
    solid: list[int] = []
    nan_count = inf_count = 0
    lo, hi, total, counted = None, None, 0.0, 0
    for start in range(0, frames.shape[0], RESIZE_CHUNK_FRAMES):
        chunk = frames[start:start + RESIZE_CHUNK_FRAMES].detach()
        sums = chunk.sum(dim=(1, 2, 3), dtype=torch.float64)
        finite = torch.isfinite(sums).cpu()
        if not bool(finite.all()):
            nan_count += int(torch.isnan(chunk).sum())
            inf_count += int(torch.isinf(chunk).sum())
        if not bool(finite.any()):
            continue  # frames with NaN/Inf are reported by count; their colour statistics are meaningless
        grid = chunk[finite.to(chunk.device), ::SCAN_STRIDE, ::SCAN_STRIDE, :].float()
        grid = grid.reshape(grid.shape[0], -1, grid.shape[-1])
        std, mean = torch.std_mean(grid, dim=1, unbiased=False)
        indices = torch.arange(start, start + chunk.shape[0])[finite]
        is_solid = (std.amax(dim=1) < SOLID_FRAME_STD).cpu()
        is_black = is_solid & (mean.mean(dim=1) < BLACK_FRAME_MEAN).cpu()
        solid.extend(indices[is_solid].tolist())
        black.extend(indices[is_black].tolist())
        c_lo, c_hi = float(grid.amin()), float(grid.amax())
        lo = c_lo if lo is None else min(lo, c_lo)
        hi = c_hi if hi is None else max(hi, c_hi)
        total += float(sums[finite.to(sums.device)].sum())
        counted += int(finite.sum()) * chunk[0].numel()
    return FrameScan(frames.shape[0], nan_count, inf_count, black, solid, lo, hi, (total / counted) if counted else None)


# --- picture-pattern guards: a block mosaic on the VAE's latent grid, a picture repeated as a grid of tiles

PATTERN_SAMPLE_FRAMES = 8  # frames measured per clip, evenly spaced: the cost does not grow with the clip's length
MOSAIC_GRIDS = (16, 32)  # pixels per latent cell: MiniMax-H3's video VAE (x16), LTX-2's (x32)
MOSAIC_MAX_RATIO = 3.0  # healthy H3 decodes measured 1.09-1.24 at their 16-px seams (antirez/h3.c#1)
MOSAIC_FLOOR = 0.5 / 255  # the interior edge strength a flat block counts as (sum over the channels)
MOSAIC_MIN_LINES = 2  # grid lines a side must hold to be measured
TILE_GRIDS = (2, 3, 4)  # tiles per side
TILE_MIN_SIDE = 8  # pixels: a smaller tile is not measured
TILE_MIN_REPEAT_ERROR = 0.3  # below this the frame repeats itself one tile over, in both directions


@dataclass
class PatternCheck:
    name: str  # "block_mosaic" | "tile_grid"
    statistic: str
    fails: str  # "above" | "below": which side of the threshold fails
    threshold: float
    value: float | None  # median over the measured frames; None: no frame could be measured
    grid: int | None  # block side in pixels / tiles per side of the median frame's worst grid
    frames_measured: int

    @property
    def failed(self) -> bool:
        if self.value is None:
            return False
        return self.value > self.threshold if self.fails == "above" else self.value < self.threshold

    def as_dict(self) -> dict:
        value = None if self.value is None else round(self.value, 4)
        return {"statistic": self.statistic, "value": value, f"fails_{self.fails}": self.threshold,
                "grid": self.grid, "frames_measured": self.frames_measured, "failed": self.failed}


def pattern_sample(count: int) -> list[int]:
    """Up to PATTERN_SAMPLE_FRAMES frame indices spread evenly over a clip of `count` frames, first and last included."""
    if count <= PATTERN_SAMPLE_FRAMES:
        return list(range(count))
    step = (count - 1) / (PATTERN_SAMPLE_FRAMES - 1)
    return sorted({round(i * step) for i in range(PATTERN_SAMPLE_FRAMES)})


def _pool(frame: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """Means of `size` consecutive pixels along `dim` (0: rows, 1: columns); a remainder is dropped."""
    kept = frame.shape[dim] - frame.shape[dim] % size
    shape = list(frame.shape)
    shape[dim:dim + 1] = [kept // size, size]
    return frame.narrow(dim, 0, kept).reshape(shape).mean(dim=dim + 1)


def _steps(pooled: torch.Tensor, dim: int) -> torch.Tensor:
    """Step strength at each pixel boundary along `dim` of a pooled [.., .., C] frame, as [block rows, boundaries]
    (NaN where undefined). Boundary e (between pixels e-1 and e) gets |x[e+1] - x[e-2]| summed over the channels:
    the two pixels beside the boundary are skipped, so a block edge (a step) counts and a drawn line up to 2 px wide
    on the boundary does not. The pooling averaged a block's length along the edge first: a block's edge is the same
    all along it, pixel noise is not."""
    length = pooled.shape[dim]
    diff = (pooled.narrow(dim, 3, length - 3) - pooled.narrow(dim, 0, length - 3)).abs().sum(dim=-1)
    diff = diff if dim == 1 else diff.transpose(0, 1)
    steps = torch.full((diff.shape[0], length + 1), float("nan"))
    steps[:, 2:length - 1] = diff
    return steps


def _grid_ratio(steps: torch.Tensor, period: int) -> float | None:
    """Median step over the block sides on a `period` grid that starts at pixel 0 (where a VAE's latent grid starts)
    / the median step over all boundaries (floored at MOSAIC_FLOOR); None with fewer than MOSAIC_MIN_LINES lines."""
    on_line = steps[:, period::period]
    on_line = on_line[:, ~torch.isnan(on_line[0])] if on_line.numel() else on_line
    if on_line.shape[0] == 0 or on_line.shape[1] < MOSAIC_MIN_LINES:
        return None
    return float(on_line.median()) / max(float(torch.nanmedian(steps)), MOSAIC_FLOOR)


def mosaic_ratio(frame: torch.Tensor) -> tuple[float | None, int | None]:
    """(edge ratio, block side) for one [H, W, C] frame: the finest grid of MOSAIC_GRIDS whose ratio is over
    MOSAIC_MAX_RATIO (a 16-px mosaic also has steps on every 32-px line: it is named 16), else the highest ratio. A
    picture made of flat blocks has its steps on the grid lines in both directions and none between them. Two passes
    over the frame (block means along rows and along columns); the rest works on those means."""
    best: tuple[float | None, int | None] = (None, None)
    finest = MOSAIC_GRIDS[0]
    if min(frame.shape[0], frame.shape[1]) < MOSAIC_MIN_LINES * finest + 2:
        return best  # no side holds MOSAIC_MIN_LINES lines of even the finest grid
    rows, columns = _pool(frame, 0, finest), _pool(frame, 1, finest)
    for period in MOSAIC_GRIDS:
        group = period // finest  # the coarser grids pool the finest grid's block means
        across = _grid_ratio(_steps(_pool(rows, 0, group), 1), period)
        down = _grid_ratio(_steps(_pool(columns, 1, group), 0), period)
        if across is None or down is None:
            continue
        ratio = min(across, down)
        if ratio > MOSAIC_MAX_RATIO:
            return ratio, period
        if best[0] is None or ratio > best[0]:
            best = (ratio, period)
    return best


def _shift_error(frame: torch.Tensor, spread: float, shift: int, dim: int) -> float:
    """mean |frame - frame moved by `shift` along dim| over their overlap, / `spread` (mean |frame - its mean|); every
    second line across the shift is enough."""
    lines = frame[::2] if dim == 1 else frame[:, ::2]
    length = frame.shape[dim]
    return float((lines.narrow(dim, shift, length - shift) - lines.narrow(dim, 0, length - shift)).abs().mean()) / spread


def repeat_error(frame: torch.Tensor) -> tuple[float | None, int | None]:
    """(repeat error, tiles per side) of the most tile-like grid of TILE_GRIDS for one [H, W, C] frame: a picture
    repeated k x k times equals itself moved one tile right and one tile down (error 0); None for a flat frame."""
    sample = frame[::2, ::2]
    spread = float((sample - sample.mean(dim=(0, 1))).abs().mean())
    if spread == 0.0:
        return None, None
    best: tuple[float | None, int | None] = (None, None)
    height, width = frame.shape[0], frame.shape[1]
    for tiles in TILE_GRIDS:
        if height // tiles < TILE_MIN_SIDE or width // tiles < TILE_MIN_SIDE:
            continue
        # both directions must repeat; a side that does not divide evenly is tried with both tile widths
        error = max(min(_shift_error(frame, spread, shift, dim) for shift in {side // tiles, -(-side // tiles)})
                    for side, dim in ((width, 1), (height, 0)))
        if best[0] is None or error < best[0]:
            best = (error, tiles)
    return best


def _median_check(name: str, statistic: str, fails: str, threshold: float, measured: list[tuple[float, int]]
                  ) -> PatternCheck:
    if not measured:
        return PatternCheck(name, statistic, fails, threshold, None, None, 0)
    ordered = sorted(measured)
    value, grid = ordered[(len(ordered) - 1) // 2]  # the lower median: a real frame's value, never a mean of two
    return PatternCheck(name, statistic, fails, threshold, value, grid, len(measured))


def pattern_checks(frames: torch.Tensor) -> list[PatternCheck]:
    """The block-mosaic and tile-grid checks over up to PATTERN_SAMPLE_FRAMES frames of an [N, H, W, C] batch.

    Frames that are not finite or are one flat colour are left out (the NaN and solid checks report those). Work:
    a few passes over each sampled frame, each linear in its pixels, plus one median per grid line phase."""
    mosaic: list[tuple[float, int]] = []
    tiles: list[tuple[float, int]] = []
    for index in pattern_sample(frames.shape[0]):
        frame = frames[index].detach().float()
        if not bool(torch.isfinite(frame).all()) or float(frame.std(dim=(0, 1), correction=0).amax()) < SOLID_FRAME_STD:
            continue
        ratio, block = mosaic_ratio(frame)
        if ratio is not None:
            mosaic.append((ratio, block))
        error, count = repeat_error(frame)
        if error is not None:
            tiles.append((error, count))
    return [
        _median_check("block_mosaic", f"median edge strength on the {'/'.join(map(str, MOSAIC_GRIDS))}-px latent grid "
                      "lines / between them, the weaker of the two directions (median frame)", "above",
                      MOSAIC_MAX_RATIO, mosaic),
        _median_check("tile_grid", "mean |frame - frame moved one tile| / mean |frame - its mean|, the larger of the "
                      f"two directions, best of {'/'.join(f'{k}x{k}' for k in TILE_GRIDS)} tiles (median frame)",
                      "below", TILE_MIN_REPEAT_ERROR, tiles),
    ]
