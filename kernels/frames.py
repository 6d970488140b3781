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
