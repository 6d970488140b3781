"""The two-stage handoff on a synthetic H3 draft, no GPU and no weights. The draft (124 frames 672x384) shows its
frame number, clock and a frame code on every frame; its audio is a tone that changes every second. It goes
through H3KitDraftToLTX and the guards, is muxed to mp4 (h264 + aac), decoded back and checked, and a contact sheet
PNG shows what the handoff did: every frame kept or dropped, the crop box, the waveform with the audio cut.

The LTX-2.5 refine itself needs the model weights, so the demo muxes the handoff frames (672x384, the size LTX's
VAE encodes) with the trimmed draft audio. Exit status 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from ..checks.filetypes import output_name_problem
from ..checks.problem import printable
from . import console

EXIT_STATUSES = {
    EXIT_OK: "every check passed; the mp4 and the contact sheet are written",
    EXIT_FAILED: "a check failed (the files are written so you can look at them)",
    EXIT_INVALID: "refused, nothing written: --output exists (add --overwrite) or does not end in .mp4",
}

DRAFT_FRAMES, DRAFT_W, DRAFT_H, FPS = 124, 672, 384, 24.0
DEFAULT_NAME = "h3kit_demo.mp4"
TARGET_W, TARGET_H = 1344, 768
SAMPLE_RATE = 44100


@dataclass
class DemoResult:
    path: Path
    sheet: Path
    lines: list[str] = field(default_factory=list)
    checks: list[tuple[bool, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks)

    def check(self, ok: bool, text: str) -> None:
        self.checks.append((bool(ok), text))


def sheet_path(video: Path) -> Path:
    return video.with_name(video.stem + "_sheet.png")


def synthetic_draft():
    """The H3KitTestPattern draft: 124 frames 672x384 at 24 fps and its stepped stereo tone of the same length."""
    from ..nodes.demo import H3KitTestPattern

    frames, audio, _ = H3KitTestPattern().execute(DRAFT_W, DRAFT_H, DRAFT_FRAMES, FPS, SAMPLE_RATE)
    return frames, audio


def read_frame_code(image, width: int, height: int) -> int:
    """The frame number burned into a decoded frame (uint8 [H, W, 3]) as black/white cells."""
    from ..kernels.testpattern import frame_code_cells

    value = 0
    for x0, y0, x1, y1 in frame_code_cells(width, height):
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        value = value * 2 + int(float(image[cy - 2:cy + 3, cx - 2:cx + 3].mean()) > 127)
    return value


def _guards_catch_planted_faults(result: DemoResult, handoff_frames) -> None:
    """The guards on a healthy stand-in refine (no alarm) and on planted F10 / F01 / black-video faults (caught)."""
    import torch

    from ..nodes.common import H3KitInputError
    from ..nodes.pipeline import H3KitFrameGuard, H3KitLatentGuard

    # A stand-in for the refine's latents: the handoff frames pooled to LTX's latent grid (/32), and that plus noise.
    pooled = torch.nn.functional.avg_pool2d(handoff_frames.movedim(-1, 1), 32).movedim(0, 1).unsqueeze(0)
    gen = torch.Generator().manual_seed(0)
    refined = pooled + 0.05 * torch.randn(pooled.shape, generator=gen)
    report = json.loads(H3KitLatentGuard().execute({"samples": refined}, reference={"samples": pooled})[1])
    corr = report["correlation"]["samples"]
    result.check(report["status"] == "ok", f"H3KitLatentGuard passes a healthy refine (correlation {corr:.2f} >= 0.5)")
    planted = {
        "NaN latent (F10)": (H3KitLatentGuard(), ({"samples": torch.full_like(pooled, float("nan"))},), {}),
        "uncorrelated refine (F01)": (H3KitLatentGuard(), ({"samples": torch.randn(pooled.shape, generator=gen)},),
                                      {"reference": {"samples": pooled}}),
        "all-black video (F10)": (H3KitFrameGuard(), (torch.zeros_like(handoff_frames),), {}),
    }
    for name, (node, args, kwargs) in planted.items():
        try:
            node.execute(*args, **kwargs)
        except H3KitInputError as exc:
            result.check(True, f"{type(node).__name__} stops a planted {name}: {exc.problem}")
        else:
            result.check(False, f"{type(node).__name__} let a planted {name} through")


def _verify_file(result: DemoResult, frames, audio) -> None:
    from ..kernels.mux import read_mp4

    info = read_mp4(result.path)
    kept = frames.shape[0]
    frame_s = 1.0 / FPS
    result.check(info.video_codec == "h264" and info.audio_codec == "aac",
                 f"streams: video {info.video_codec}, audio {info.audio_codec}")
    result.check((info.width, info.height) == (DRAFT_W, DRAFT_H), f"size {info.width}x{info.height}")
    result.check(info.frames == kept == 121, f"{info.frames} frames at {info.fps:g} fps = {info.video_seconds:.3f} s")
    gap = abs(info.audio_seconds - info.video_seconds)
    result.check(gap <= frame_s, f"audio {info.audio_seconds:.3f} s at {info.sample_rate} Hz, {info.channels} ch: "
                                 f"{gap * 1000:.1f} ms from the video (limit one frame = {frame_s * 1000:.1f} ms)")
    result.check(info.audio_rms > 0.1, f"audio is the tone, not silence (RMS {info.audio_rms:.3f})")
    first = read_frame_code(info.first_frame, DRAFT_W, DRAFT_H)
    last = read_frame_code(info.last_frame, DRAFT_W, DRAFT_H)
    result.check((first, last) == (0, kept - 1),
                 f"the decoded video runs from draft frame {first} to {last} (read from the burned-in frame code): "
                 f"the dropped frames {kept}..{DRAFT_FRAMES - 1} are the tail")
    audio_s = audio["waveform"].shape[-1] / audio["sample_rate"]
    result.lines.append(f"  video      {printable(result.path)} ({result.path.stat().st_size / 1024:.0f} KiB; handoff audio "
                        f"{audio_s:.3f} s)")


def _tone_steps(result: DemoResult, audio, changes: list[float]) -> None:
    """The handoff kept the tone's timing: the loudest frequency of each second is the one the pattern plays."""
    import numpy as np

    from ..kernels.testpattern import GAP_S, TONE_STEP_S, TONE_STEPS_HZ

    wave = audio["waveform"][0, 0].double().numpy()
    rate = audio["sample_rate"]
    heard, expected = [], []
    for k in range(len(changes) + 1):
        window = wave[round((k * TONE_STEP_S + GAP_S) * rate):round((k + 1) * TONE_STEP_S * rate)]
        if window.size < rate // 4:
            break
        spectrum = np.abs(np.fft.rfft(window * np.hanning(window.size)))
        heard.append(float(np.fft.rfftfreq(window.size, 1 / rate)[int(spectrum.argmax())]))
        expected.append(TONE_STEPS_HZ[k % len(TONE_STEPS_HZ)])
    ok = len(heard) >= 4 and all(abs(h - e) <= 4 for h, e in zip(heard, expected, strict=True))
    result.check(ok, "handoff audio keeps the tone's steps at " + ", ".join(f"{t:g} s" for t in changes) + ": "
                 + ", ".join(f"{h:.0f}" for h in heard) + " Hz per second (expected "
                 + ", ".join(f"{e:.0f}" for e in expected) + ")")


def _draw_sheet(result: DemoResult, draft, draft_audio, report: dict, overwrite: bool) -> None:
    from PIL import Image

    from ..adapters.files import write_bytes
    from ..kernels.contact_sheet import handoff_sheet

    sheet = handoff_sheet(draft.numpy(), report, draft_audio["waveform"][0].numpy(), draft_audio["sample_rate"])
    buffer = io.BytesIO()
    sheet.save(buffer, format="PNG")
    write_bytes(result.sheet, buffer.getvalue(), overwrite=overwrite)
    with Image.open(result.sheet) as saved:
        result.check(saved.size == sheet.size, f"contact sheet {saved.size[0]}x{saved.size[1]} written and re-read")
    result.lines.append(f"  sheet      {printable(result.sheet)} (all {report['source']['frames']} draft frames: "
                        f"{report['kept_frames']} kept in green, {report['dropped_frames']} dropped in red; "
                        "waveform with the audio cut)")


def run_demo(output: Path, overwrite: bool = False) -> DemoResult:
    from ..kernels.mux import write_mp4
    from ..kernels.testpattern import tone_changes
    from ..nodes.pipeline import H3KitDraftToLTX, H3KitFrameGuard

    result = DemoResult(Path(output), sheet_path(Path(output)))
    draft, draft_audio = synthetic_draft()
    seconds = draft_audio["waveform"].shape[-1] / draft_audio["sample_rate"]
    changes = tone_changes(seconds)
    result.lines.append(f"  draft      {DRAFT_FRAMES} frames {DRAFT_W}x{DRAFT_H} @ {FPS:g} fps ({DRAFT_FRAMES / FPS:.3f} s), "
                        f"frame number + clock burned in; stereo tone {seconds:.3f} s @ {SAMPLE_RATE} Hz changing at "
                        + ", ".join(f"{t:g}" for t in changes) + " s")
    frames, audio, kept, dropped, report_json = H3KitDraftToLTX().execute(
        draft, TARGET_W, TARGET_H, "trim_to_8n_plus_1", "cover_crop", FPS, audio=draft_audio)
    report = json.loads(report_json)
    result.lines.append(f"  handoff    H3KitDraftToLTX -> {kept} frames {frames.shape[2]}x{frames.shape[1]} "
                        f"(half of {TARGET_W}x{TARGET_H}; {dropped} tail frames dropped for LTX's 8n+1 grid), "
                        f"audio cut to {report['audio']['out_s']:.3f} s")
    result.check(kept == 121 and dropped == 3, f"handoff kept {kept} of {DRAFT_FRAMES} frames (8n+1), dropped {dropped}")
    guard = json.loads(H3KitFrameGuard().execute(frames)[1])
    result.check(guard["status"] == "ok", f"H3KitFrameGuard passes the handoff frames ({guard['solid_frames']} solid, "
                                          f"{guard['nan_count']} NaN)")
    _tone_steps(result, audio, [t for t in changes if t < report["audio"]["out_s"]])
    _guards_catch_planted_faults(result, frames)
    result.lines.append("  refine     LTX-2.5 x2 refine skipped (needs weights); muxing the handoff frames")
    write_mp4(result.path, frames, FPS, audio, overwrite=overwrite)
    _verify_file(result, frames, audio)
    _draw_sheet(result, draft, draft_audio, report, overwrite)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, help="the mp4 to write (default: a new temporary folder), or an "
                                                    "existing folder to write h3kit_demo.mp4 into; the contact sheet "
                                                    "goes next to it as <name>_sheet.png")
    parser.add_argument("--overwrite", action="store_true", help="replace --output and its sheet if they exist")


def output_path(given: Path | None) -> Path:
    """The mp4 to write: the default in a new temporary folder, a name inside a given folder, or the given name,
    which must end in .mp4 (the demo writes an MP4 video)."""
    if given is None:
        return Path(tempfile.mkdtemp(prefix="h3kit-demo-")) / DEFAULT_NAME
    if given.is_dir():
        return given / DEFAULT_NAME
    wrong = output_name_problem(given, "mp4")
    if wrong:
        raise ValueError(wrong)
    return given


def run(args: argparse.Namespace) -> int:
    try:
        output = output_path(args.output)
    except ValueError as exc:
        console.problem(f"ERROR: --output {printable(exc)}")
        return EXIT_INVALID
    for path in (output, sheet_path(output)):
        if path.exists() and not args.overwrite:
            console.problem(f"ERROR: {printable(path)} exists. Choose another --output, or add --overwrite to replace it.")
            return EXIT_INVALID
    console.result("H3Kit demo: synthetic H3 draft -> H3KitDraftToLTX -> guards -> mp4 (h264 + aac) -> decoded "
                   "back; contact sheet")
    result = run_demo(output, overwrite=args.overwrite)
    console.result("\n".join(result.lines))
    console.result("checks:")
    for ok, text in result.checks:
        (console.result if ok else console.problem)(f"  [{'ok' if ok else 'FAIL'}] {text}")
    summary = f"{sum(ok for ok, _ in result.checks)}/{len(result.checks)} checks"
    if result.passed:
        console.result(f"demo passed: {summary}")
    console.result(f"video:         {printable(result.path)}")
    console.result(f"contact sheet: {printable(result.sheet)}  (open it: every draft frame kept/dropped, crop box, audio cut)")
    if not result.passed:
        console.problem(f"demo FAILED: {summary}")
        return EXIT_FAILED
    return EXIT_OK
