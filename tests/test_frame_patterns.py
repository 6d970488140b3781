"""Issue 30 item 10: H3KitFrameGuard's picture-pattern checks, on synthetic frames.

Reported silent garbage: a structured mosaic of 16x16 coloured blocks whatever the prompt says
(Comfy-Org/ComfyUI#15805) and i2v frames made of square tiles each decoded as if it were the whole frame
(Comfy-Org/ComfyUI#15548). The guard measures (kernels/frames.py): the median step on the VAE's latent grid lines
(16 px H3, 32 px LTX, from pixel 0) against the frame's typical step, in both directions; and how far a frame is
from itself moved one tile over (2x2/3x3/4x4), in both directions. Decisions pinned here: block sizes off the VAE
grid (15, 17 px) pass; a checkerboard of 16-px squares is a mosaic (it is one); drawn 1-px lines on the grid (the
pack's test pattern) are not; a picture repeated side by side only (2x1) passes.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from h3kit.kernels import frames as fk
from h3kit.kernels import testpattern
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.pipeline import H3KitDraftToLTX, H3KitFrameGuard
from hypothesis import given, settings
from hypothesis import strategies as st


def natural(height: int, width: int, seed: int = 0) -> torch.Tensor:
    """A picture that behaves like a photo: colour gradients, detail at every scale (1/f-like), soft-edged discs
    of other colours, a little sensor noise. [H, W, 3] in 0..1."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.linspace(0, 1, height)[:, None, None]
    x = torch.linspace(0, 1, width)[None, :, None]
    img = 0.3 + 0.4 * x * torch.tensor([0.9, 0.5, 0.2]) + 0.3 * y * torch.tensor([0.1, 0.4, 0.8])
    for scale in (4, 8, 16, 32, 64, 128):
        field = torch.randn(1, 3, max(2, height // scale), max(2, width // scale), generator=gen)
        up = F.interpolate(field, size=(height, width), mode="bicubic", align_corners=False)[0].permute(1, 2, 0)
        img = img + 0.08 * (scale / 128) ** 0.5 * up
    rows, cols = torch.meshgrid(torch.arange(height) / height, torch.arange(width) / width, indexing="ij")
    for _ in range(12):
        cy, cx, r = (float(v) for v in torch.rand(3, generator=gen))
        disc = (rows - cy) ** 2 + (cols - cx) ** 2 < (0.03 + 0.1 * r) ** 2
        img[disc] = 0.6 * img[disc] + 0.4 * torch.rand(3, generator=gen)
    return (img + 0.01 * torch.randn(height, width, 3, generator=gen)).clamp(0, 1)


def mosaic(img: torch.Tensor, block: int, noise: float = 0.0, seed: int = 1) -> torch.Tensor:
    """`img` as flat block x block squares from pixel 0 (each its mean), plus optional pixel noise."""
    height, width = img.shape[:2]
    small = F.avg_pool2d(img.permute(2, 0, 1)[None], block, ceil_mode=True)
    out = F.interpolate(small, scale_factor=block, mode="nearest")[0, :, :height, :width].permute(1, 2, 0)
    return (out + noise * torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))).clamp(0, 1)


def tile_grid(img: torch.Tensor, tiles: int, across: int | None = None) -> torch.Tensor:
    """`img` shrunk to one tile and repeated `tiles` x `tiles` (or `across` x `tiles` when given)."""
    height, width = img.shape[:2]
    across = across or tiles
    small = F.interpolate(img.permute(2, 0, 1)[None], size=(height // tiles, width // across), mode="bilinear",
                          antialias=True, align_corners=False)[0].permute(1, 2, 0)
    return small.repeat(tiles, across, 1)


def checkerboard(height: int, width: int, square: int) -> torch.Tensor:
    rows, cols = torch.meshgrid(torch.arange(height) // square, torch.arange(width) // square, indexing="ij")
    return (0.1 + 0.8 * ((rows + cols) % 2).float())[..., None].expand(height, width, 3).contiguous()


def clip(frame: torch.Tensor, count: int = 3) -> torch.Tensor:
    return frame[None].expand(count, *frame.shape).contiguous()


def guard(images, **kwargs):
    out = H3KitFrameGuard().execute(images, **kwargs)
    return out[0], json.loads(out[1])


def measured(frame: torch.Tensor) -> tuple[float | None, float | None]:
    return fk.mosaic_ratio(frame)[0], fk.repeat_error(frame)[0]


SIZES = [(768, 1344), (480, 864), (128, 256), (77, 131)]  # H3 native, a 480p draft, the tier-(b) size, odd sides


# ------------------------------------------------------------------------------------------ documented numbers
def test_thresholds_and_bounds_are_the_documented_ones():
    assert fk.MOSAIC_GRIDS == (16, 32)  # H3 video VAE x16, LTX-2 video VAE x32
    assert fk.MOSAIC_MAX_RATIO == 3.0 and fk.MOSAIC_MIN_LINES == 2
    assert fk.TILE_GRIDS == (2, 3, 4) and fk.TILE_MIN_REPEAT_ERROR == 0.3 and fk.TILE_MIN_SIDE == 8
    assert fk.PATTERN_SAMPLE_FRAMES == 8


def test_the_sample_is_bounded_spread_and_includes_both_ends():
    assert fk.pattern_sample(1) == [0] and fk.pattern_sample(8) == list(range(8))
    assert fk.pattern_sample(1000) == [0, 143, 285, 428, 571, 714, 856, 999]


# ------------------------------------------------------------------------------------------ what must pass
@pytest.mark.parametrize("size", SIZES)
def test_a_natural_looking_picture_passes_both_checks_with_room(size):
    ratio, error = measured(natural(*size))
    assert ratio < 1.5 and error > 0.8, (ratio, error)  # thresholds 3.0 / 0.3
    _, report = guard(clip(natural(*size)))
    assert report["status"] == "ok"
    assert report["block_mosaic"]["fails_above"] == 3.0 and report["block_mosaic"]["failed"] is False
    assert report["tile_grid"]["fails_below"] == 0.3 and report["tile_grid"]["frames_measured"] == 3


@pytest.mark.parametrize("size", [(128, 256), (192, 320), (512, 512), (768, 1344)])
def test_the_packs_test_pattern_passes_though_its_grid_lines_sit_on_the_latent_grid(size):
    """At 256x128 the pattern's 1-px lines of eighths fall on every 32-px (and 16-px) grid line: a check that counted
    edges at grid lines (not steps between blocks) calls it a mosaic."""
    frames = torch.from_numpy(testpattern.draft_frames(3, size[1], size[0], 24.0))
    for frame in frames:
        ratio, error = measured(frame)
        assert ratio < 1.5 and error > 0.8, (size, ratio, error)
    if size == (128, 256):
        on_grid = frames[0][:, 32::32].mean(dim=-1)  # columns 32, 64, ...: the grid lines are drawn there
        assert (on_grid[:20] < 0.15).float().mean() > 0.6


def test_the_demo_graphs_handoff_frames_pass():
    """workflows/api/h3kit_handoff_demo.json: a 320x192 test pattern handed off to 512x256, FrameGuard in error mode."""
    frames = torch.from_numpy(testpattern.draft_frames(56, 320, 192, 24.0))
    handoff = H3KitDraftToLTX().execute(frames, 512, 256)[0]
    _, report = guard(handoff)
    assert report["status"] == "ok" and report["block_mosaic"]["frames_measured"] == 8


# ------------------------------------------------------------------------------------------ block mosaic
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("block", [16, 32])
def test_a_block_mosaic_on_the_vae_grid_fails(size, block):
    ratio, _error = measured(mosaic(natural(*size), block))
    if block == 32 and min(size) < 2 * 32 + 2:
        assert ratio is None or ratio <= 3.0  # fewer than two 32-px lines on a side: not measured at 32
        return
    assert ratio > 10.0, ratio


@pytest.mark.parametrize("noise", [2 / 255, 5 / 255])
def test_a_mosaic_under_pixel_noise_still_fails(noise):
    """Noise fools a check that wants the blocks flat; block edges averaged along their length stay steps."""
    ratio, _error = measured(mosaic(natural(480, 864), 16, noise))
    assert ratio > 4.0, ratio  # 5/255: 5.2; 2/255: 13


def test_the_mosaic_stops_the_run_naming_node_input_value_and_fix():
    images = clip(mosaic(natural(128, 256), 16, 2 / 255), 12)
    with pytest.raises(H3KitInputError) as err:
        guard(images)
    text = str(err.value)
    assert err.value.node == "H3KitFrameGuard" and err.value.input_name == "images"
    assert "[12, 128, 256, 3]" in text and "16x16-pixel block mosaic" in text and "fails above 3" in text
    assert "median of 8 sampled frames" in text and "Comfy-Org/ComfyUI#15805" in text
    _, report = guard(images, mode="warn")
    assert report["status"] == "problems" and report["block_mosaic"]["failed"] is True
    assert report["block_mosaic"]["grid"] == 16 and report["block_mosaic"]["value"] > 3.0
    assert report["warnings"][0].startswith("the frames are a 16x16-pixel block mosaic")


@pytest.mark.parametrize("block", [15, 17])
def test_blocks_off_the_vae_grid_pass_by_design(block):
    """The decoders here paint on 16/32-px grids from pixel 0; other block sizes are not this failure."""
    ratio, _error = measured(mosaic(natural(480, 864), block))
    assert ratio < 1.0, ratio


def test_a_checkerboard_of_16px_squares_is_a_mosaic_and_of_20px_squares_is_not():
    """Decided: a picture of flat 16-px squares on the grid is exactly what the check looks for. A synthetic test card
    like that needs mode 'warn'."""
    assert measured(checkerboard(256, 512, 16))[0] > 100.0
    assert measured(checkerboard(256, 512, 20))[0] < 1.0


def test_stripes_on_the_grid_in_one_direction_only_pass():
    stripes = checkerboard(256, 512, 16)[:1].expand(256, 512, 3).contiguous()  # 16-px vertical bars
    assert measured(stripes)[0] < 1.0


def test_a_few_mosaic_frames_in_a_clip_do_not_fail_it_and_fades_do_not_hide_a_mosaic():
    healthy = clip(natural(128, 256), 30)
    healthy[10:12] = mosaic(natural(128, 256), 16)
    assert guard(healthy)[1]["status"] == "ok"  # median of the sample
    broken = clip(mosaic(natural(128, 256), 16), 30)
    broken[:6] = 0.0  # a fade from black: solid frames are left out of the pattern checks
    with pytest.raises(H3KitInputError, match="block mosaic"):
        guard(broken)


# ------------------------------------------------------------------------------------------ tile grid
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tiles", [2, 3, 4])
def test_a_picture_repeated_as_tiles_fails(size, tiles):
    frame = tile_grid(natural(*size), tiles)
    error = fk.repeat_error(frame)[0]
    assert error < 0.05, error
    noisy = (frame + 2 / 255 * torch.randn(frame.shape, generator=torch.Generator().manual_seed(4))).clamp(0, 1)
    assert fk.repeat_error(noisy)[0] < 0.2


def test_tiles_that_do_not_divide_the_frame_evenly_are_found():
    """A 130-px side as 43 + 43 + 44: both tile widths are tried."""
    tile = tile_grid(natural(129, 129), 3)  # 3 x 43 px
    frame = torch.cat([tile, tile[:, -1:]], dim=1)  # 130 px wide
    assert fk.repeat_error(frame)[0] < 0.05


def test_the_tile_grid_stops_the_run_with_its_statistic_and_fix():
    images = clip(tile_grid(natural(128, 256), 3), 5)
    with pytest.raises(H3KitInputError) as err:
        guard(images)
    text = str(err.value)
    assert "repeats itself as a 3x3 grid of tiles" in text and "fails below 0.3" in text
    assert "Comfy-Org/ComfyUI#15548" in text and "median of 5 sampled frames" in text
    _, report = guard(images, mode="warn")
    assert report["tile_grid"]["grid"] == 3 and report["tile_grid"]["value"] < 0.05
    assert report["block_mosaic"]["failed"] is False  # one problem, named once


def test_a_picture_repeated_side_by_side_only_passes_by_design():
    """A split screen (2x1) repeats in one direction only; the reported failure is a grid in both."""
    frame = tile_grid(natural(128, 256), 1, across=2)
    assert fk.repeat_error(frame)[0] > 0.8


def test_each_check_names_only_its_own_failure():
    assert measured(tile_grid(natural(480, 864), 2))[0] < 1.5  # tiles are not a mosaic
    assert measured(mosaic(natural(480, 864), 16))[1] > 0.8  # a mosaic is not a tile grid


# ------------------------------------------------------------------------------------------ bounds
def test_frames_too_small_or_flat_are_not_measured_and_said_so():
    _, report = guard(torch.rand(4, 20, 30, 3), mode="warn")
    assert report["block_mosaic"]["value"] is None and report["block_mosaic"]["frames_measured"] == 0
    _, report = guard(torch.full((4, 64, 64, 3), 0.5), mode="warn")  # solid: its own check reports it
    assert report["tile_grid"]["frames_measured"] == 0 and report["solid_frames"] == 4


@settings(max_examples=60, deadline=None)
@given(frames=st.integers(1, 3), height=st.integers(1, 90), width=st.integers(1, 90),
       kind=st.sampled_from(["noise", "flat", "mosaic", "tiles"]), dtype=st.sampled_from([torch.float32, torch.float16]),
       seed=st.integers(0, 2**16))
def test_any_frame_size_and_content_gives_bounded_values(frames, height, width, kind, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    picture = torch.rand(height, width, 3, generator=gen)
    if kind == "flat":
        picture = torch.full((height, width, 3), 0.25)
    elif kind == "mosaic":
        picture = mosaic(picture, 16)
    elif kind == "tiles" and height >= 2 and width >= 2:
        picture = F.pad(tile_grid(picture, 2).permute(2, 0, 1), (0, width % 2, 0, height % 2)).permute(1, 2, 0)
    checks = fk.pattern_checks(clip(picture, frames).to(dtype))
    assert [c.name for c in checks] == ["block_mosaic", "tile_grid"]
    for check in checks:
        assert 0 <= check.frames_measured <= min(frames, fk.PATTERN_SAMPLE_FRAMES)
        assert check.value is None or (check.value >= 0.0 and check.value == check.value)
        assert (check.value is None) == (check.frames_measured == 0) == (check.grid is None)
        json.dumps(check.as_dict(), allow_nan=False)
