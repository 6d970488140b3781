"""The two-stage handoff on a synthetic H3 draft, no GPU and no weights: build a 124-frame 672x384 draft with a
5.17 s tone, run H3KitDraftToLTX and the guards, mux the result to mp4 (h264 + aac), decode it back and check it.

The LTX-2.5 refine itself needs the model weights, so the demo muxes the handoff frames (672x384, the size LTX's
VAE encodes) with the trimmed draft audio. Exit status 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

DRAFT_FRAMES, DRAFT_W, DRAFT_H, FPS = 124, 672, 384, 24.0
TARGET_W, TARGET_H = 1344, 768
AUDIO_SECONDS, SAMPLE_RATE, TONE_HZ = 5.17, 32000, 440.0
SQUARE, SQUARE_SPEED = 64, 4  # a moving square makes every frame distinct, so trimming is visible


@dataclass
class DemoResult:
    path: Path
    lines: list[str] = field(default_factory=list)
    checks: list[tuple[bool, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for ok, _ in self.checks)

    def check(self, ok: bool, text: str) -> None:
        self.checks.append((bool(ok), text))


def synthetic_draft():
    """124 frames 672x384: a colour gradient with a white square moving right; a 440 Hz stereo tone of 5.17 s."""
    import torch

    x = torch.linspace(0, 1, DRAFT_W).view(1, DRAFT_W)
    y = torch.linspace(0, 1, DRAFT_H).view(DRAFT_H, 1)
    base = torch.stack([x.expand(DRAFT_H, -1), y.expand(-1, DRAFT_W), (1 - x) * 0.6 + 0.2 * y], dim=-1)
    frames = base.unsqueeze(0).repeat(DRAFT_FRAMES, 1, 1, 1)
    top = (DRAFT_H - SQUARE) // 2
    for i in range(DRAFT_FRAMES):
        left = 16 + i * SQUARE_SPEED
        frames[i, top:top + SQUARE, left:left + SQUARE, :] = 1.0
    samples = round(AUDIO_SECONDS * SAMPLE_RATE)
    t = torch.arange(samples, dtype=torch.float64) / SAMPLE_RATE
    tone = (0.3 * torch.sin(2 * math.pi * TONE_HZ * t)).float()
    return frames, {"waveform": tone.view(1, 1, -1).repeat(1, 2, 1), "sample_rate": SAMPLE_RATE}


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


def _verify_file(result: DemoResult, frames, audio, draft) -> None:
    import numpy as np

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
    src = (frames.clamp(0, 1) * 255).round().byte().numpy()
    first_err = float(np.abs(info.first_frame.astype(float) - src[0]).mean()) / 255
    last_err = float(np.abs(info.last_frame.astype(float) - src[-1]).mean()) / 255
    draft_last = (draft[-1].clamp(0, 1) * 255).round().byte().numpy()
    tail_err = float(np.abs(info.last_frame.astype(float) - draft_last).mean()) / 255
    result.check(first_err < 0.03 and last_err < 0.03,
                 f"decoded first/last frames match the kept draft frames 0 and {kept - 1} "
                 f"(mean abs error {first_err:.4f} / {last_err:.4f})")
    result.check(last_err < tail_err, f"the dropped frames are the tail: the last decoded frame is draft frame "
                                      f"{kept - 1}, not {draft.shape[0] - 1} (error {last_err:.4f} vs {tail_err:.4f})")
    audio_s = audio["waveform"].shape[-1] / audio["sample_rate"]
    result.lines.append(f"  file       {result.path} ({result.path.stat().st_size / 1024:.0f} KiB; handoff audio "
                        f"{audio_s:.3f} s)")


def run_demo(output: Path, overwrite: bool = False) -> DemoResult:
    from ..kernels.mux import write_mp4
    from ..nodes.pipeline import H3KitDraftToLTX, H3KitFrameGuard

    result = DemoResult(Path(output))
    draft, draft_audio = synthetic_draft()
    result.lines.append(f"  draft      {DRAFT_FRAMES} frames {DRAFT_W}x{DRAFT_H} @ {FPS:g} fps "
                        f"({DRAFT_FRAMES / FPS:.3f} s) + {TONE_HZ:g} Hz tone {AUDIO_SECONDS} s @ {SAMPLE_RATE} Hz stereo")
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
    _guards_catch_planted_faults(result, frames)
    result.lines.append("  refine     LTX-2.5 x2 refine skipped (needs weights); muxing the handoff frames")
    write_mp4(result.path, frames, FPS, audio, overwrite=overwrite)
    _verify_file(result, frames, audio, draft)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", type=Path, help="where to write the mp4 (default: a new temporary folder)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")


def run(args: argparse.Namespace) -> int:
    output = args.output or Path(tempfile.mkdtemp(prefix="h3kit-demo-")) / "h3kit_demo.mp4"
    if output.exists() and not args.overwrite:
        print(f"ERROR: {output} exists. Choose another --output, or add --overwrite to replace it.")
        return 2
    print("H3Kit demo: synthetic H3 draft -> H3KitDraftToLTX -> guards -> mp4 (h264 + aac) -> decoded back")
    result = run_demo(output, overwrite=args.overwrite)
    print("\n".join(result.lines))
    print("checks:")
    for ok, text in result.checks:
        print(f"  [{'ok' if ok else 'FAIL'}] {text}")
    print(f"demo {'passed' if result.passed else 'FAILED'}: {sum(ok for ok, _ in result.checks)}/{len(result.checks)} "
          f"checks; video at {result.path}")
    return 0 if result.passed else 1
