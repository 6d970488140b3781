"""The Registry icon, docs/img/icon.png: 400x400 (the Comfy Registry's limit, square), drawn with Pillow.

Run: python -m h3kit.scripts.make_icon   (writes the file again; tests/test_packaging.py checks the result)
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

SIZE = 400
ICON = Path(__file__).resolve().parent.parent / "docs" / "img" / "icon.png"
BACKGROUND, DRAFT, REFINE, ARROW, TEXT = (32, 33, 36), (44, 84, 112), (78, 78, 120), (230, 200, 90), (235, 235, 235)


def draw_icon() -> bytes:
    """Two frames, small to large (the draft and the x2 refine), an arrow between them, and the name."""
    image = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((40, 150, 136, 205), radius=8, fill=DRAFT, outline=TEXT, width=3)
    draw.rounded_rectangle((196, 106, 360, 200), radius=10, fill=REFINE, outline=TEXT, width=3)
    draw.polygon([(186, 170), (162, 154), (162, 186)], fill=ARROW)
    draw.line((136, 170, 166, 170), fill=ARROW, width=6)
    font = ImageFont.load_default(size=92)
    box = draw.textbbox((0, 0), "H3Kit", font=font)
    draw.text(((SIZE - (box[2] - box[0])) // 2 - box[0], 250), "H3Kit", font=font, fill=TEXT)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


if __name__ == "__main__":
    from ..adapters.files import write_bytes

    write_bytes(ICON, draw_icon(), overwrite=True)
    print(f"wrote {ICON}")
