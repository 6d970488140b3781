"""The handoff on one picture, drawn from H3KitDraftToLTX's own report: every draft frame as a thumbnail (kept
ones framed in KEPT_RGB with the crop box LTX encodes in CROP_RGB, dropped ones framed and bannered in
DROPPED_RGB), then the draft's audio waveform on a time axis with the cut as a CUT_RGB line and a strip of the
frames, kept and dropped, under it. Colours are exact so a test can find them in the PNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

KEPT_RGB = (40, 190, 70)
DROPPED_RGB = (225, 40, 40)
CROP_RGB = (255, 200, 0)
CUT_RGB = (255, 0, 255)
AXIS_RGB = (110, 150, 255)
BACKGROUND_RGB = (18, 18, 22)
TEXT_RGB = (235, 235, 235)
WAVE_RGB = (200, 200, 200)
WAVE_CUT_RGB = (120, 60, 60)

SHEET_W, MARGIN, GAP, BORDER, COLUMNS = 1600, 16, 6, 3, 10
TEXT_SIZE, LINE_H, WAVE_H, STRIP_H = 18, 24, 150, 10


class SheetInputError(ValueError):
    """The report is not H3KitDraftToLTX's, or does not match the draft frames."""


@dataclass(frozen=True)
class HandoffFacts:
    frames: int
    width: int
    height: int
    fps: float
    kept: int
    dropped: int
    padded: int
    encoder: tuple[int, int]
    target: tuple[int, int]
    fit: str
    crop_box: tuple[float, float, float, float] | None  # in draft pixels; None when nothing is cut away
    audio_in_s: float | None
    audio_out_s: float | None

    @property
    def kept_from_draft(self) -> int:
        return self.kept - self.padded


def handoff_facts(report: dict[str, Any]) -> HandoffFacts:
    """What the sheet shows, read from the report of H3KitDraftToLTX."""
    try:
        source, encoder, target = report["source"], report["encoder"], report["target"]
        frames, width, height = int(source["frames"]), int(source["width"]), int(source["height"])
        enc_w, enc_h = int(encoder["width"]), int(encoder["height"])
        scale_x, scale_y = (float(s) for s in report["scale"])
        crop_x, crop_y = float(report["crop"]["x"]), float(report["crop"]["y"])
        audio = report.get("audio")
        facts = HandoffFacts(
            frames, width, height, float(report["fps"]), int(report["kept_frames"]), int(report["dropped_frames"]),
            int(report.get("padded_frames", 0)), (enc_w, enc_h), (int(target["width"]), int(target["height"])),
            str(report.get("fit", "")), None,
            float(audio["in_s"]) if audio else None, float(audio["out_s"]) if audio else None)
    except (KeyError, TypeError, ValueError) as exc:
        raise SheetInputError(f"not an H3KitDraftToLTX report (missing or wrong {exc})") from exc
    box = (crop_x / scale_x, crop_y / scale_y, (crop_x + enc_w) / scale_x, (crop_y + enc_h) / scale_y)
    cuts = box[0] > 0.5 or box[1] > 0.5 or box[2] < width - 0.5 or box[3] < height - 0.5
    return HandoffFacts(**{**facts.__dict__, "crop_box": box if cuts else None})


@lru_cache(maxsize=4)
def _font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _summary_lines(f: HandoffFacts) -> list[str]:
    change = (f"{f.dropped} dropped from the tail (red)" if f.dropped else
              f"{f.padded} padded by repeating the last frame" if f.padded else "none dropped")
    if f.crop_box is not None:
        x0, y0, x1, y1 = f.crop_box
        crop = f"{f.fit} to the yellow box ({x0:.0f},{y0:.0f})-({x1:.0f},{y1:.0f}) of the draft"
    elif (f.width, f.height) == f.encoder:
        crop = "none: the draft is exactly half the target"
    else:
        crop = f"{f.fit}: rescaled, nothing cut away"
    audio = ("no audio connected: the final video would be silent (F21)" if f.audio_in_s is None else
             f"{f.audio_in_s:.3f} s -> {f.audio_out_s:.3f} s (= {f.kept} frames / {f.fps:g} fps), cut at the "
             "magenta line")
    return [
        f"H3KitDraftToLTX: {f.frames} draft frames {f.width}x{f.height} @ {f.fps:g} fps -> {f.kept} frames for LTX "
        f"(8n+1); {change}",
        f"LTX encodes {f.encoder[0]}x{f.encoder[1]} (half of {f.target[0]}x{f.target[1]}); crop: {crop}",
        f"audio: {audio}",
    ]


def _legend(draw: ImageDraw.ImageDraw, x: int, y: int) -> None:
    font = _font(TEXT_SIZE - 2)
    for colour, label in ((KEPT_RGB, "kept"), (DROPPED_RGB, "dropped"), (CROP_RGB, "crop (what LTX encodes)"),
                          (CUT_RGB, "audio cut")):
        draw.rectangle((x, y + 4, x + 14, y + 18), fill=colour)
        draw.text((x + 20, y + 2), label, font=font, fill=TEXT_RGB)
        x += 40 + int(draw.textlength(label, font=font))


def _tile_size(f: HandoffFacts) -> tuple[int, int]:
    columns = min(COLUMNS, f.frames)
    tile_w = (SHEET_W - 2 * MARGIN - (columns - 1) * GAP) // columns - 2 * BORDER
    tile_w = min(tile_w, 2 * f.width)
    return tile_w, max(8, round(tile_w * f.height / f.width))


def _draw_tiles(sheet: Image.Image, draft: np.ndarray, f: HandoffFacts, top: int) -> int:
    draw = ImageDraw.Draw(sheet)
    tile_w, tile_h = _tile_size(f)
    columns = min(COLUMNS, f.frames)
    font = _font(max(10, tile_h // 5))
    for i in range(f.frames):
        x = MARGIN + (i % columns) * (tile_w + 2 * BORDER + GAP)
        y = top + (i // columns) * (tile_h + 2 * BORDER + GAP)
        kept = i < f.kept_from_draft
        colour = KEPT_RGB if kept else DROPPED_RGB
        draw.rectangle((x, y, x + tile_w + 2 * BORDER - 1, y + tile_h + 2 * BORDER - 1), fill=colour)
        thumb = Image.fromarray((np.clip(draft[i], 0, 1) * 255).round().astype(np.uint8))
        sheet.paste(thumb.resize((tile_w, tile_h), Image.Resampling.BILINEAR), (x + BORDER, y + BORDER))
        if kept and f.crop_box is not None:
            sx, sy = tile_w / f.width, tile_h / f.height
            x0, y0, x1, y1 = f.crop_box
            draw.rectangle((x + BORDER + round(x0 * sx), y + BORDER + round(y0 * sy),
                            x + BORDER + round(x1 * sx) - 1, y + BORDER + round(y1 * sy) - 1), outline=CROP_RGB, width=2)
        if not kept:
            band = max(8, tile_h // 5)
            draw.rectangle((x + BORDER, y + BORDER, x + BORDER + tile_w - 1, y + BORDER + band), fill=DROPPED_RGB)
            draw.text((x + BORDER + tile_w // 2, y + BORDER + band // 2), "dropped", font=font, fill=TEXT_RGB,
                      anchor="mm")
    rows = math.ceil(f.frames / columns)
    return top + rows * (tile_h + 2 * BORDER + GAP)


def _draw_audio(sheet: Image.Image, waveform: np.ndarray | None, sample_rate: int | None, f: HandoffFacts,
                top: int) -> None:
    draw = ImageDraw.Draw(sheet)
    font = _font(TEXT_SIZE - 4)
    left, right = MARGIN, SHEET_W - MARGIN
    span_s = max(f.frames / f.fps, f.audio_in_s or 0.0)

    def x_at(seconds: float) -> int:
        return left + round((right - left - 1) * seconds / span_s)

    draw.rectangle((left, top, right - 1, top + WAVE_H - 1), outline=AXIS_RGB)
    middle = top + WAVE_H // 2
    if waveform is not None and sample_rate and f.audio_out_s is not None:
        mono = waveform.mean(axis=0)
        peak = max(float(np.abs(mono).max()), 1e-6)
        for column in range(left + 1, right - 1):
            start = int((column - left) / (right - left) * span_s * sample_rate)
            stop = max(start + 1, int((column - left + 1) / (right - left) * span_s * sample_rate))
            chunk = mono[start:stop]
            if chunk.size == 0:
                continue
            lo, hi = float(chunk.min()) / peak, float(chunk.max()) / peak
            cut = start / sample_rate >= f.audio_out_s
            draw.line((column, middle - round(hi * (WAVE_H // 2 - 6)), column, middle - round(lo * (WAVE_H // 2 - 6))),
                      fill=WAVE_CUT_RGB if cut else WAVE_RGB)
        cut_x = x_at(f.audio_out_s)
        draw.rectangle((cut_x - 1, top + 1, cut_x, top + WAVE_H - 2), fill=CUT_RGB)
        draw.text((min(cut_x + 6, right - 160), top + 4), f"cut {f.audio_out_s:.3f} s", font=font, fill=CUT_RGB)
    else:
        draw.text((left + 10, middle - 8), "no audio connected (F21)", font=font, fill=TEXT_RGB)
    for second in range(math.floor(span_s) + 1):
        draw.line((x_at(second), top + WAVE_H, x_at(second), top + WAVE_H + 4), fill=AXIS_RGB)
        draw.text((x_at(second) + 2, top + WAVE_H + 2), f"{second} s", font=font, fill=TEXT_RGB)
    strip_top = top + WAVE_H + LINE_H
    for i in range(f.frames):
        colour = KEPT_RGB if i < f.kept_from_draft else DROPPED_RGB
        draw.rectangle((x_at(i / f.fps), strip_top, max(x_at(i / f.fps), x_at((i + 1) / f.fps) - 2),
                        strip_top + STRIP_H), fill=colour)


def handoff_sheet(draft: np.ndarray, report: dict[str, Any], waveform: np.ndarray | None = None,
                  sample_rate: int | None = None) -> Image.Image:
    """draft: [frames, height, width, 3] floats 0..1 (the handoff's input); waveform: [channels, samples] of the
    draft's audio (before the cut)."""
    f = handoff_facts(report)
    if draft.ndim != 4 or draft.shape[0] != f.frames or draft.shape[1:3] != (f.height, f.width):
        raise SheetInputError(f"the report describes {f.frames} frames {f.width}x{f.height} but the draft is "
                              f"{list(draft.shape)}")
    tile_w, tile_h = _tile_size(f)
    rows = math.ceil(f.frames / min(COLUMNS, f.frames))
    tiles_top = MARGIN + 4 * LINE_H + 6
    audio_top = tiles_top + rows * (tile_h + 2 * BORDER + GAP) + LINE_H
    height = audio_top + WAVE_H + 2 * LINE_H + STRIP_H + MARGIN
    sheet = Image.new("RGB", (SHEET_W, height), BACKGROUND_RGB)
    draw = ImageDraw.Draw(sheet)
    for n, line in enumerate(_summary_lines(f)):
        draw.text((MARGIN, MARGIN + n * LINE_H), line, font=_font(TEXT_SIZE), fill=TEXT_RGB)
    _legend(draw, MARGIN, MARGIN + 3 * LINE_H)
    _draw_tiles(sheet, draft, f, tiles_top)
    draw.text((MARGIN, audio_top - LINE_H + 2), "draft audio (the handoff keeps everything left of the cut)",
              font=_font(TEXT_SIZE - 2), fill=TEXT_RGB)
    _draw_audio(sheet, waveform, sample_rate, f, audio_top)
    return sheet
