"""A synthetic H3 draft you can read by eye and by machine, for the demo and H3KitTestPattern (no model needed).

Each frame: a colour gradient whose blue channel drifts with time, a grid of eighths (so a crop is visible),
a white bar sweeping left to right over the clip, the frame number and the clock (mm:ss.mmm at `fps`)
burned into a dark box in the middle, and the frame number as a row of FRAME_CODE_BITS black/white cells
under it (most significant bit first; `frame_code_cells` gives their boxes) so a test can read any frame back.

The audio is a stereo tone that changes every TONE_STEP_S seconds: the pitch steps through TONE_STEPS_HZ and
the loudness through TONE_LEVELS (so the change is visible in a waveform, not only audible), each new step
starting after a GAP_S silence.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FRAME_CODE_BITS = 9  # up to frame 511; H3 drafts have at most 362 frames
TONE_STEP_S = 1.0
TONE_STEPS_HZ = (440.0, 554.37, 659.25, 880.0)  # A4, C#5, E5, A5, then again
TONE_LEVELS = (0.2, 0.35, 0.5, 0.65)  # peak amplitude per step
GAP_S = 0.04


def clock_text(frame: int, fps: float) -> str:
    """mm:ss.mmm of the frame's start time."""
    millis = round(frame * 1000 / fps)
    return f"{millis // 60000:02d}:{millis // 1000 % 60:02d}.{millis % 1000:03d}"


def frame_code_cells(width: int, height: int) -> list[tuple[int, int, int, int]]:
    """(x0, y0, x1, y1) of each code cell, most significant bit first: a centred row below the middle."""
    cell_w, cell_h = max(2, width // 20), max(2, height // 10)
    left = (width - FRAME_CODE_BITS * cell_w) // 2
    top = height // 2 + height // 8
    return [(left + i * cell_w, top, left + (i + 1) * cell_w, top + cell_h) for i in range(FRAME_CODE_BITS)]


@lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)  # Pillow >= 10.1 ships a scalable default font


def _background(width: int, height: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """The still part (gradient + grid of eighths) and a per-frame blue drift."""
    x = np.linspace(0.15, 0.85, width, dtype=np.float32)[None, :]
    y = np.linspace(0.15, 0.85, height, dtype=np.float32)[:, None]
    base = np.stack([np.broadcast_to(x, (height, width)), np.broadcast_to(y, (height, width)),
                     np.full((height, width), 0.5, np.float32)], axis=-1).copy()
    for i in range(1, 8):
        base[:, i * width // 8, :] = 0.1
        base[i * height // 8, :, :] = 0.1
    drift = 0.3 * np.sin(2 * math.pi * np.arange(frames) / max(frames, 2)).astype(np.float32)
    return base, drift


def draft_frames(frames: int, width: int, height: int, fps: float) -> np.ndarray:
    """[frames, height, width, 3] float32 in 0..1 (ComfyUI's IMAGE layout)."""
    if frames < 1 or width < 64 or height < 64 or frames >= 2 ** FRAME_CODE_BITS:
        raise ValueError(f"test pattern needs 1..{2 ** FRAME_CODE_BITS - 1} frames and sides >= 64, "
                         f"got {frames} frames {width}x{height}")
    base, drift = _background(width, height, frames)
    font = _font(max(10, height // 9))
    bar_w = max(2, width // 48)
    box = (width // 4, height // 2 - height // 4, width - width // 4, height // 2 + height // 4 + height // 8)
    cells = frame_code_cells(width, height)
    out = np.empty((frames, height, width, 3), np.float32)
    for i in range(frames):
        frame = base.copy()
        frame[..., 2] += drift[i]
        left = round((width - bar_w) * i / max(frames - 1, 1))
        frame[:, left:left + bar_w, :] = 1.0
        image = Image.fromarray((frame.clip(0, 1) * 255).round().astype(np.uint8))
        draw = ImageDraw.Draw(image)
        draw.rectangle(box, fill=(24, 24, 24))
        draw.text((width // 2, height // 2 - height // 8), f"frame {i}", font=font, fill=(255, 255, 255), anchor="mm")
        draw.text((width // 2, height // 2 + height // 24), clock_text(i, fps), font=font, fill=(255, 230, 120),
                  anchor="mm")
        for bit, cell in enumerate(cells):
            on = (i >> (FRAME_CODE_BITS - 1 - bit)) & 1
            draw.rectangle((cell[0], cell[1], cell[2] - 1, cell[3] - 1), fill=(255, 255, 255) if on else (0, 0, 0))
        out[i] = np.asarray(image, dtype=np.float32) / 255.0
    return out


def tone_changes(seconds: float) -> list[float]:
    """The times (s) at which the tone changes pitch and loudness."""
    return [k * TONE_STEP_S for k in range(1, math.ceil(seconds / TONE_STEP_S))]


def tone(seconds: float, sample_rate: int, channels: int = 2) -> np.ndarray:
    """[channels, samples] float32: the stepped tone described in the module docstring."""
    samples = round(seconds * sample_rate)
    t = np.arange(samples, dtype=np.float64) / sample_rate
    step = (t // TONE_STEP_S).astype(np.int64)
    hz = np.asarray(TONE_STEPS_HZ)[step % len(TONE_STEPS_HZ)]
    level = np.asarray(TONE_LEVELS)[step % len(TONE_LEVELS)]
    into_step = t - step * TONE_STEP_S
    wave = level * np.sin(2 * math.pi * hz * into_step) * ((step == 0) | (into_step >= GAP_S))
    return np.repeat(wave[None, :].astype(np.float32), channels, axis=0)
