"""Issue 3: `python -m h3kit demo` writes a real mp4; the test decodes it itself with PyAV and checks it."""

from __future__ import annotations

import subprocess
import sys

import av
import numpy as np
import pytest


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo.mp4"
    proc = subprocess.run([sys.executable, "-m", "h3kit", "demo", "--output", str(out)],
                          capture_output=True, text=True, timeout=240)
    return proc, out


def test_demo_exits_zero_and_says_what_it_verified(demo_run):
    proc, out = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo passed" in proc.stdout and "[FAIL]" not in proc.stdout
    for fact in ("121 frames", "672x384", "h264", "aac", "F10", "F01"):
        assert fact in proc.stdout, fact
    assert str(out) in proc.stdout


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
    proc = subprocess.run([sys.executable, "-m", "h3kit", "demo", "--output", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--overwrite" in proc.stdout
    assert out.read_bytes() == before
