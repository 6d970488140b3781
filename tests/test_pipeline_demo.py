"""Issue 3: `python -m h3kit demo` writes a real mp4; the test decodes it itself with PyAV and checks it.
Issue 15: it also writes a contact sheet PNG, which the test decodes: one tile per draft frame, kept tiles framed
green, dropped ones red, each tile read back through the frame code burned into the draft."""

from __future__ import annotations

import sys
from collections import deque
from subprocess import run as run_process

import av
import numpy as np
import pytest
from h3kit.kernels.contact_sheet import AXIS_RGB, CUT_RGB, DROPPED_RGB, KEPT_RGB
from h3kit.kernels.testpattern import frame_code_cells
from PIL import Image


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo.mp4"
    proc = run_process([sys.executable, "-m", "h3kit", "demo", "--output", str(out)],
                          capture_output=True, text=True, timeout=240)
    return proc, out


def test_demo_exits_zero_and_says_what_it_verified(demo_run):
    proc, out = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo passed" in proc.stdout and "[FAIL]" not in proc.stdout
    for fact in ("121 frames", "672x384", "h264", "aac", "F10", "F01"):
        assert fact in proc.stdout, fact
    lines = proc.stdout.splitlines()
    assert f"video:         {out}" in lines
    assert any(line.startswith(f"contact sheet: {out.with_name('demo_sheet.png')}") for line in lines)
    assert proc.stderr == ""


def _mask(image: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.all(image == np.array(rgb, np.uint8), axis=-1).astype(np.uint8)


def _components(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Bounding boxes (x, y, w, h) of the 8-connected regions of a boolean mask (a plain flood fill: the test
    needs no image library beyond Pillow)."""
    height, width = mask.shape
    seen = np.zeros_like(mask, dtype=bool)
    boxes = []
    for y0, x0 in zip(*np.nonzero(mask), strict=True):
        if seen[y0, x0]:
            continue
        seen[y0, x0] = True
        queue, xs, ys = deque([(y0, x0)]), [x0], [y0]
        while queue:
            y, x = queue.popleft()
            for dy in (-1, 0, 1):
                for dx in (-1, 0, 1):
                    ny, nx = y + dy, x + dx
                    if 0 <= ny < height and 0 <= nx < width and mask[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        queue.append((ny, nx))
                        xs.append(nx)
                        ys.append(ny)
        boxes.append((min(xs), min(ys), max(xs) - min(xs) + 1, max(ys) - min(ys) + 1))
    return boxes


def _tiles(image: np.ndarray, rgb) -> list[tuple[int, int, int, int]]:
    """Bounding boxes (x, y, w, h) of the frames drawn in `rgb`, in reading order; small marks (legend, strip) skipped."""
    boxes = [b for b in _components(_mask(image, rgb).astype(bool)) if b[2] >= 40 and b[3] >= 24]
    return sorted(boxes, key=lambda b: (b[1] // 10, b[0]))


def _frame_number(image: np.ndarray, box: tuple[int, int, int, int], border: int = 3) -> int:
    """Read the 9-cell frame code out of one tile, scaling the pattern's cell layout to the thumbnail."""
    x, y, w, h = box
    inner_w, inner_h = w - 2 * border, h - 2 * border
    value = 0
    for x0, y0, x1, y1 in frame_code_cells(672, 384):
        cx = x + border + round((x0 + x1) / 2 * inner_w / 672)
        cy = y + border + round((y0 + y1) / 2 * inner_h / 384)
        value = value * 2 + int(image[cy, cx].mean() > 127)
    return value


def test_demo_contact_sheet_marks_kept_and_dropped_frames(demo_run):
    _, out = demo_run
    sheet = out.with_name("demo_sheet.png")
    with Image.open(sheet) as png:
        image = np.asarray(png.convert("RGB"))
    kept, dropped = _tiles(image, KEPT_RGB), _tiles(image, DROPPED_RGB)
    assert (len(kept), len(dropped)) == (121, 3)  # every one of the 124 draft frames, once
    assert [_frame_number(image, b) for b in kept] == list(range(121))
    assert [_frame_number(image, b) for b in dropped] == [121, 122, 123]
    # the waveform panel: the cut line sits at 121/24 = 5.042 s of a 124/24 = 5.167 s axis
    panel = max(_tiles(image, AXIS_RGB), key=lambda b: b[2])
    cut_columns = np.flatnonzero(_mask(image, CUT_RGB)[panel[1] + 5:panel[1] + 60].all(axis=0))
    assert cut_columns.size >= 1
    where = (cut_columns.mean() - panel[0]) / panel[2]
    assert abs(where - (121 / 124)) < 0.005


def test_demo_mp4_decodes_to_121_frames_with_audio_in_sync(demo_run):
    _, out = demo_run
    with av.open(str(out)) as container:
        video = container.streams.video[0]
        assert video.codec_context.name == "h264"
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video)]
        fps = float(video.average_rate)
    with av.open(str(out)) as container:
        audio = container.streams.audio[0]
        assert audio.codec_context.name == "aac"
        pcm = np.concatenate([f.to_ndarray() for f in container.decode(audio)], axis=1)
        rate = audio.codec_context.sample_rate
    assert len(frames) == 121 and frames[0].shape == (384, 672, 3) and fps == 24
    video_s, audio_s = len(frames) / fps, pcm.shape[1] / rate
    assert abs(audio_s - video_s) <= 1 / fps
    assert float(np.sqrt((pcm.astype(np.float64) ** 2).mean())) > 0.1  # the tone, not silence
    # the picture is not blank and moves (a moving square): first and last frames differ
    assert frames[0].std() > 20 and np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 1


def test_demo_never_overwrites_an_existing_file(demo_run):
    _, out = demo_run
    before = out.read_bytes()
    proc = run_process([sys.executable, "-m", "h3kit", "demo", "--output", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr and proc.stdout == ""
    assert out.read_bytes() == before


def test_demo_never_overwrites_an_existing_contact_sheet(tmp_path):
    sheet = tmp_path / "new_sheet.png"
    sheet.write_bytes(b"mine")
    proc = run_process([sys.executable, "-m", "h3kit", "demo", "--output", str(tmp_path / "new.mp4")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"ERROR: {sheet} exists. Choose another --output, or add --overwrite to replace it.\n"
    assert sheet.read_bytes() == b"mine" and not (tmp_path / "new.mp4").exists()
