"""Template thumbnails: a small diagram of a workflow's stages drawn with Pillow (used by workflows_ui)."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 512, 320  # the template card is 16:10; a square image is cropped under the badge
BACKGROUND = (32, 33, 36)
STAGE_FILL = {
    "H3 draft": (44, 84, 112), "handoff": (104, 40, 100), "LTX refine": (78, 78, 120),
    "output": (60, 100, 60), "other": (70, 70, 70),
}
TEXT = (235, 235, 235)
MUTED = (185, 185, 185)
ARROW = (230, 200, 90)
MAX_ROWS = 7


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def draw_stage_diagram(name: str, stages: list[tuple[str, list[str]]], comment: str) -> bytes:
    """JPEG bytes: the workflow name on top, one column box per stage with its node titles, arrows between
    consecutive stages. `comment` goes into the JPEG comment (the generator's staleness fingerprint)."""
    image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(image)
    title_font, stage_font, node_font = _font(20), _font(15), _font(11)
    draw.text((14, 10), _fit(draw, name, title_font, WIDTH - 28), font=title_font, fill=TEXT)
    count = max(len(stages), 1)
    gap, top, bottom = 22, 48, HEIGHT - 14
    box_w = (WIDTH - 28 - gap * (count - 1)) // count
    for i, (stage, titles) in enumerate(stages):
        x0 = 14 + i * (box_w + gap)
        draw.rounded_rectangle((x0, top, x0 + box_w, bottom), radius=8, fill=STAGE_FILL.get(stage, STAGE_FILL["other"]))
        draw.text((x0 + 8, top + 6), _fit(draw, stage, stage_font, box_w - 16), font=stage_font, fill=TEXT)
        shown = titles if len(titles) <= MAX_ROWS else titles[: MAX_ROWS - 1] + [f"+{len(titles) - MAX_ROWS + 1} more"]
        row_h = (bottom - top - 34) // MAX_ROWS
        for row, title in enumerate(shown):
            y0 = top + 30 + row * row_h
            draw.rounded_rectangle((x0 + 6, y0, x0 + box_w - 6, y0 + row_h - 5), radius=4, fill=(28, 28, 30))
            draw.text((x0 + 11, y0 + 4), _fit(draw, title, node_font, box_w - 22), font=node_font, fill=MUTED)
        if i + 1 < len(stages):
            ax, ay = x0 + box_w + 3, (top + bottom) // 2
            draw.line((ax, ay, ax + gap - 6, ay), fill=ARROW, width=3)
            draw.polygon([(ax + gap - 4, ay), (ax + gap - 11, ay - 6), (ax + gap - 11, ay + 6)], fill=ARROW)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=82, optimize=True, comment=comment)
    return buffer.getvalue()
