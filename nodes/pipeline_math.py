"""Pure arithmetic of the two-stage pipeline: frame grids, sizes, crop geometry, audio samples, sigmas.

No torch and no ComfyUI here, so the offline validator (scripts/) and the nodes share one definition of
each rule. Facts (shared/reference/field-notes.md §A2, §A4):
- H3 drafts on a 17k+5 frame grid (5 ... 362); LTX-2.5 needs 8n+1 frames.
- LTX's VAE encodes half the final size (the x2 latent upsampler doubles it), and that half must be a
  multiple of 32, so the final sides must be multiples of 64.
- The first refine sigma decides how much is repainted: identity held at 0.78, a different face at 0.85+.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

H3_LENGTH_MIN = 5
H3_LENGTH_STEP = 17
H3_LENGTH_MAX = 362  # 15.08 s at 24 fps: the longest trained H3 clip
LTX_FRAME_STEP = 8
H3_SIDE_MULTIPLE = 32  # NEW core H3 latent nodes take width/height in steps of 32
OUTPUT_SIDE_MULTIPLE = 64  # half of it is VAE-encoded by LTX and must be a multiple of 32
REPAINT_SIGMA_LIMIT = 0.8  # measured cliff: identity held at 0.78, face repainted at 0.85 and above

FRAME_POLICIES = ("trim_to_8n_plus_1", "pad_to_8n_plus_1", "strict")
FIT_MODES = ("cover_crop", "stretch")

SIGMA_SCHEDULES: dict[str, tuple[float, ...]] = {
    "identity_0.78": (0.78, 0.643, 0.546, 0.0),
    "identity_0.5": (0.5, 0.412, 0.350, 0.0),
    "nvidia_official": (0.909375, 0.725, 0.421875, 0.0),
}
MANUAL_SCHEDULE = "manual"


# ----------------------------------------------------------------------------------------- frame grids
def is_h3_length(frames: int) -> bool:
    return frames >= H3_LENGTH_MIN and (frames - H3_LENGTH_MIN) % H3_LENGTH_STEP == 0


def nearest_h3_lengths(frames: int) -> tuple[int, int]:
    """The H3 grid lengths just below and just above `frames` (equal when it is on the grid)."""
    k = max(0, (frames - H3_LENGTH_MIN) // H3_LENGTH_STEP)
    below = H3_LENGTH_MIN + k * H3_LENGTH_STEP
    return below, below if below == frames else below + H3_LENGTH_STEP


def is_ltx_length(frames: int) -> bool:
    return frames >= 1 and (frames - 1) % LTX_FRAME_STEP == 0


def ltx_trim_length(frames: int) -> int:
    """The longest 8n+1 count that is <= frames (frames >= 1)."""
    return LTX_FRAME_STEP * ((frames - 1) // LTX_FRAME_STEP) + 1


def ltx_pad_length(frames: int) -> int:
    """The shortest 8n+1 count that is >= frames (frames >= 1)."""
    return LTX_FRAME_STEP * math.ceil((frames - 1) / LTX_FRAME_STEP) + 1


def kept_frame_count(frames: int, policy: str) -> int | None:
    """Frames LTX receives under `policy`; None when `strict` and `frames` is off the 8n+1 grid."""
    if policy == "trim_to_8n_plus_1":
        return ltx_trim_length(frames)
    if policy == "pad_to_8n_plus_1":
        return ltx_pad_length(frames)
    if policy == "strict":
        return frames if is_ltx_length(frames) else None
    raise ValueError(f"unknown frame policy {policy!r}; use one of {', '.join(FRAME_POLICIES)}")


# ----------------------------------------------------------------------------------------------- sizes
def nearest_multiples(value: int, multiple: int) -> tuple[int, int]:
    """The multiples of `multiple` just below and above `value` (below is at least `multiple`)."""
    below = max(multiple, (value // multiple) * multiple)
    above = below if below == value else max(multiple, -(-value // multiple) * multiple)
    return below, above


def describe_nearest(value: int, multiple: int) -> str:
    below, above = nearest_multiples(value, multiple)
    return f"{below}" if below == above else f"{below} or {above}"


@dataclass(frozen=True)
class CropPlan:
    """How a (src_w x src_h) frame becomes (out_w x out_h): resize to (resized_w x resized_h), then crop."""

    src_w: int
    src_h: int
    out_w: int
    out_h: int
    resized_w: int
    resized_h: int
    crop_x: int
    crop_y: int
    scale_x: float
    scale_y: float

    @property
    def is_identity(self) -> bool:
        return (self.src_w, self.src_h) == (self.out_w, self.out_h)

    @property
    def aspect_change(self) -> float:
        """Relative stretch of the picture (0 for uniform scaling)."""
        return abs(self.scale_x / self.scale_y - 1.0)


def crop_plan(src_w: int, src_h: int, out_w: int, out_h: int, fit: str) -> CropPlan:
    """cover_crop: scale uniformly until both sides cover the output, then centre-crop; stretch: scale per axis."""
    if fit == "stretch":
        return CropPlan(src_w, src_h, out_w, out_h, out_w, out_h, 0, 0, out_w / src_w, out_h / src_h)
    if fit != "cover_crop":
        raise ValueError(f"unknown fit {fit!r}; use one of {', '.join(FIT_MODES)}")
    scale = max(out_w / src_w, out_h / src_h)
    # The covering side must land exactly on the output size; the other side rounds, never below it.
    resized_w = max(out_w, round(src_w * scale))
    resized_h = max(out_h, round(src_h * scale))
    return CropPlan(
        src_w, src_h, out_w, out_h, resized_w, resized_h,
        (resized_w - out_w) // 2, (resized_h - out_h) // 2, scale, scale,
    )


# ----------------------------------------------------------------------------------------------- audio
def audio_samples_for(frames: int, fps: float, sample_rate: int) -> int:
    """Audio samples that cover exactly `frames` video frames at `fps`."""
    return round(frames * sample_rate / fps)


# ---------------------------------------------------------------------------------------------- sigmas
class SigmaError(ValueError):
    """A manual sigma schedule that cannot be used; the message says why."""


_SIGMA_SEPARATORS = re.compile(r"[,;\s]+|->|→")


def parse_sigmas(text: str) -> list[float]:
    """'0.78, 0.643, 0.546, 0' -> floats; finite, in [0, 1], strictly descending, ending at 0, >= 2 values."""
    tokens = [tok for tok in _SIGMA_SEPARATORS.split(text.strip()) if tok]
    if len(tokens) < 2:
        raise SigmaError(f"needs at least two values ending at 0, got {len(tokens)}")
    values = []
    for tok in tokens:
        try:
            value = float(tok)
        except ValueError:
            raise SigmaError(f"'{tok}' is not a number") from None
        if not math.isfinite(value):
            raise SigmaError(f"'{tok}' is not finite")
        if not 0.0 <= value <= 1.0:
            raise SigmaError(f"{value} is outside [0, 1]")
        values.append(value)
    for prev, nxt in zip(values, values[1:], strict=False):
        if nxt >= prev:
            raise SigmaError(f"not strictly descending ({prev} then {nxt})")
    if values[-1] != 0.0:
        raise SigmaError(f"must end at 0 so the last step fully denoises (ends at {values[-1]})")
    return values


def format_sigmas(values: list[float] | tuple[float, ...]) -> str:
    return ", ".join(f"{v:g}" for v in values)
