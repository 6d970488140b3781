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
BADGE, BADGE_TEXT = (246, 196, 64), (32, 33, 36)
MAX_ROWS = 7


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def _wrapped(draw: ImageDraw.ImageDraw, text: str, font, width: int, lines: int) -> list[str]:
    """`text` in at most `lines` lines of `width` px, the last one cut with an ellipsis when the text is longer."""
    found: list[str] = []
    words = text.split()
    while words and len(found) < lines:
        line = words.pop(0)
        while words and draw.textlength(f"{line} {words[0]}", font=font) <= width:
            line = f"{line} {words.pop(0)}"
        found.append(line)
    if words:
        found[-1] = _fit(draw, f"{found[-1]} {' '.join(words)}", font, width)
    return [_fit(draw, line, font, width) for line in found]


def draw_stage_diagram(title: str, stages: list[tuple[str, list[str]]], comment: str, description: str = "",
                       start_here: bool = False) -> bytes:
    """JPEG bytes: the template's title and description on top (the template browser shows a custom node's template
    only by its file name and this picture), a "START HERE" mark for the first graph to open, then one column box per
    stage with its node titles and arrows between consecutive stages. `comment` goes into the JPEG comment (the
    generator's staleness fingerprint)."""
    image = Image.new("RGB", (WIDTH, HEIGHT), BACKGROUND)
    draw = ImageDraw.Draw(image)
    title_font, text_font, stage_font, node_font = _font(20), _font(13), _font(15), _font(11)
    y = 10
    if start_here:
        badge = "START HERE  ·  no model needed"
        badge_w = int(draw.textlength(badge, font=text_font)) + 20
        draw.rounded_rectangle((14, y, 14 + badge_w, y + 22), radius=11, fill=BADGE)
        draw.text((24, y + 4), badge, font=text_font, fill=BADGE_TEXT)
        y += 30
    for line in _wrapped(draw, title, title_font, WIDTH - 28, 2):
        draw.text((14, y), line, font=title_font, fill=TEXT)
        y += 24
    for line in _wrapped(draw, description, text_font, WIDTH - 28, 2):
        draw.text((14, y + 2), line, font=text_font, fill=MUTED)
        y += 17
    count = max(len(stages), 1)
    gap, top, bottom = 22, y + 12, HEIGHT - 14
    box_w = (WIDTH - 28 - gap * (count - 1)) // count
    rows = max(1, min(MAX_ROWS, (bottom - top - 34) // 22))
    for i, (stage, titles) in enumerate(stages):
        x0 = 14 + i * (box_w + gap)
        draw.rounded_rectangle((x0, top, x0 + box_w, bottom), radius=8, fill=STAGE_FILL.get(stage, STAGE_FILL["other"]))
        draw.text((x0 + 8, top + 6), _fit(draw, stage, stage_font, box_w - 16), font=stage_font, fill=TEXT)
        shown = titles if len(titles) <= rows else titles[: rows - 1] + [f"+{len(titles) - rows + 1} more"]
        row_h = (bottom - top - 34) // rows
        for row, node_title in enumerate(shown):
            y0 = top + 30 + row * row_h
            draw.rounded_rectangle((x0 + 6, y0, x0 + box_w - 6, y0 + row_h - 5), radius=4, fill=(28, 28, 30))
            draw.text((x0 + 11, y0 + 4), _fit(draw, node_title, node_font, box_w - 22), font=node_font, fill=MUTED)
        if i + 1 < len(stages):
            ax, ay = x0 + box_w + 3, (top + bottom) // 2
            draw.line((ax, ay, ax + gap - 6, ay), fill=ARROW, width=3)
            draw.polygon([(ax + gap - 4, ay), (ax + gap - 11, ay - 6), (ax + gap - 11, ay + 6)], fill=ARROW)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=82, optimize=True, comment=comment)
    return buffer.getvalue()
