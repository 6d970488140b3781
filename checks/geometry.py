"""Pure geometry of the two-stage handoff: how a draft frame is resized and cropped to the LTX size, and
how many audio samples cover the kept frames. Shared by H3KitDraftToLTX (nodes/pipeline.py), its kernels
(kernels/frames.py) and run's output expectations. The grids it builds on are in checks/facts.py.
"""

from __future__ import annotations

from dataclasses import dataclass

FIT_MODES = ("cover_crop", "stretch")


# ----------------------------------------------------------------------------------------------- sizes
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
