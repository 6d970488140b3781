"""Write frames + audio into an mp4 (h264 + aac) with PyAV, and read one back to verify it.

`av` is imported inside the functions so importing the pack stays fast.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

from ..adapters.files import atomic_path
from ..checks.expect import Expect
from ..checks.media import video_checks
from ..checks.problem import FAIL, Check, printable

AUDIO_LAYOUTS = {1: "mono", 2: "stereo"}
TALLY_CHUNK_FRAMES = 4  # decoded frames classified at once (a 1344x768 float copy is 12 MB each)
# What the verifier decodes at most (a downloaded file says nothing trustworthy about its own length):
MAX_VERIFY_FRAMES = 20_000  # 13.9 min at 24 fps; the pipeline renders at most 362 (15 s)
MAX_VERIFY_PIXELS = 3840 * 2160  # one frame (4K UHD); the pipeline renders 1344x768
MAX_VERIFY_AUDIO_S = 3600.0  # seconds of audio
MAX_VERIFY_S = 600.0  # seconds of decoding for one file


def _to_uint8_frames(frames: torch.Tensor) -> np.ndarray:
    return (frames.detach().float().clamp(0, 1) * 255.0).round().to(torch.uint8).cpu().numpy()


def write_mp4(path: Path, frames: torch.Tensor, fps: float, audio: dict | None = None, *,
              overwrite: bool = False, crf: int = 18) -> Path:
    """Encode [N, H, W, 3] frames (0..1) and an optional AUDIO dict; written atomically (adapters/files.py)."""
    import av

    if frames.shape[1] % 2 or frames.shape[2] % 2:
        raise ValueError(f"h264 (yuv420p) needs even sides, got {frames.shape[2]}x{frames.shape[1]}")
    with atomic_path(path, overwrite) as tmp:
        with av.open(str(tmp), mode="w", format="mp4") as container:
            video = container.add_stream("h264", rate=Fraction(fps).limit_denominator(1001))
            video.width, video.height, video.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
            video.options = {"crf": str(crf), "preset": "veryfast"}
            audio_stream = _add_audio_stream(container, audio) if audio is not None else None
            for array in _to_uint8_frames(frames):
                container.mux(video.encode(av.VideoFrame.from_ndarray(array, format="rgb24")))
            container.mux(video.encode())
            if audio_stream is not None:
                _encode_audio(container, audio_stream, audio)
    return Path(path)


def _add_audio_stream(container, audio: dict):
    channels = audio["waveform"].shape[1]
    if channels not in AUDIO_LAYOUTS:
        raise ValueError(f"aac via this muxer takes 1 or 2 audio channels, got {channels}")
    stream = container.add_stream("aac", rate=int(audio["sample_rate"]))
    stream.layout = AUDIO_LAYOUTS[channels]
    return stream


def _encode_audio(container, stream, audio: dict) -> None:
    import av

    waveform = audio["waveform"][0].detach().float().clamp(-1, 1).cpu().numpy()  # [channels, samples]
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(waveform), format="fltp",
                                       layout=AUDIO_LAYOUTS[waveform.shape[0]])
    frame.sample_rate = int(audio["sample_rate"])
    frame.pts = 0
    container.mux(stream.encode(frame))
    container.mux(stream.encode())


@dataclass
class Mp4Info:
    video_codec: str
    width: int
    height: int
    frames: int
    fps: float
    audio_codec: str | None
    sample_rate: int | None
    channels: int | None
    audio_samples: int | None
    first_frame: np.ndarray | None  # uint8 [H, W, 3] of the decoded first frame (None: none decoded)
    last_frame: np.ndarray | None  # uint8 [H, W, 3] of the decoded last frame
    audio_rms: float | None  # of every decoded sample, all channels, -1..1
    black_frames: int = 0
    solid_frames: int = 0  # includes the black ones
    still_frames: int = 0  # frames identical (within STILL_FRAME_DIFF) to the one before
    stopped: str = ""  # why decoding stopped before the end (a verification limit), "" when it read everything

    @property
    def audio_dbfs(self) -> float | None:
        if self.audio_rms is None:
            return None
        return 20.0 * math.log10(self.audio_rms) if self.audio_rms > 0 else float("-inf")

    @property
    def video_seconds(self) -> float:
        return self.frames / self.fps

    @property
    def audio_seconds(self) -> float | None:
        return None if not self.sample_rate else self.audio_samples / self.sample_rate


def read_mp4(path: Path, seconds: float | None = None) -> Mp4Info:
    """Decode every frame and audio sample of a video file and describe what is really in it: streams, size,
    frame count, black / solid / still frames (the thresholds of kernels/frames.py, the same the frame guard
    uses), audio length and level. The one media verifier: `demo` and `run` both read files through it.

    Streaming, in memory that does not grow with the file's length: frames are judged a few at a time, the
    audio level is a running sum of squares. Bounded in work too: at most MAX_VERIFY_FRAMES frames of at most
    MAX_VERIFY_PIXELS each, MAX_VERIFY_AUDIO_S of audio and MAX_VERIFY_S (or the caller's fewer `seconds`) of decoding; where a limit stops it,
    `stopped` says which (the counts then cover what was decoded)."""
    import av

    stop_at = time.monotonic() + min(MAX_VERIFY_S, MAX_VERIFY_S if seconds is None else seconds)
    with av.open(str(path)) as container:
        if not container.streams.video:
            raise ValueError(f"{Path(path).name} has no video stream")
        vstream = container.streams.video[0]
        width, height = vstream.codec_context.width, vstream.codec_context.height
        tally, stopped = FrameTally(), ""
        if width * height > MAX_VERIFY_PIXELS:
            stopped = f"frames of {width}x{height} are over the {MAX_VERIFY_PIXELS:,} pixels H3Kit decodes to verify"
        for frame in () if stopped else container.decode(vstream):
            tally.add(frame.to_ndarray(format="rgb24"))
            stopped = _limit(tally.count + len(tally.pending), MAX_VERIFY_FRAMES, "frames", stop_at)
            if stopped:
                break
        tally.flush()
        video = (vstream.codec_context.name, width, height, tally.count, float(vstream.average_rate or 0))
        has_audio = bool(container.streams.audio)
    audio, rms = (None, None, None, None), None
    if has_audio:
        with av.open(str(path)) as container:
            astream = container.streams.audio[0]
            level = AudioLevel()
            rate = astream.codec_context.sample_rate or 0
            for frame in container.decode(astream):
                level.add(frame)
                over = _limit(level.samples / max(rate, 1), MAX_VERIFY_AUDIO_S, "seconds of audio", stop_at)
                if over:
                    stopped = stopped or over
                    break
            channels = astream.codec_context.channels or 1
            audio = (astream.codec_context.name, rate, channels, level.samples)
            rms = level.rms()
    return Mp4Info(*video, *audio, first_frame=tally.first, last_frame=tally.last, audio_rms=rms,
                   black_frames=tally.black, solid_frames=tally.solid, still_frames=tally.still, stopped=stopped)


def verify_video(path: Path, expect: Expect, seconds: float | None = None) -> list[Check]:
    """Decode the file (read_mp4, the one media verifier; within `seconds` when given, always within its own
    limits) and judge it against what the graph asks (checks/media.py)."""
    try:
        info = read_mp4(path, seconds)
    except Exception as exc:  # noqa: BLE001 - any decode failure (PyAV raises many types) is the finding
        return [Check(FAIL, "video", f"{path.name} does not decode: {type(exc).__name__}: {printable(exc, 200)}",
                      "check the server log; the file may be truncated")]
    return video_checks(path.name, info, expect)


def _limit(done: float, most: float, what: str, stop_at: float) -> str:
    """Why decoding must stop now ("" to go on): `most` of `what` decoded, or the time is up."""
    if done >= most:
        return f"verified the first {most:,.0f} {what} (the limit of what H3Kit decodes to verify)"
    if time.monotonic() > stop_at:
        return f"stopped after {done:,.0f} {what}: the time allowed for verifying ran out"
    return ""


class AudioLevel:
    """Sample count and RMS of decoded audio frames, as running sums: memory does not grow with duration."""

    def __init__(self) -> None:
        self.values = 0  # samples x channels
        self.samples = 0  # per channel
        self.squares = 0.0

    def add(self, frame) -> None:
        pcm = _normalised_pcm(frame)
        self.values += pcm.size
        self.samples += frame.samples
        self.squares += float(np.dot(pcm, pcm))

    def rms(self) -> float:
        return math.sqrt(self.squares / self.values) if self.values else 0.0


def _normalised_pcm(frame) -> np.ndarray:
    """One frame's samples as float64 in -1..1 whatever the decoder's sample format."""
    samples = frame.to_ndarray().reshape(-1).astype(np.float64)
    scale = {"s16": 32768.0, "s16p": 32768.0, "s32": 2147483648.0, "s32p": 2147483648.0}.get(frame.format.name)
    return samples / scale if scale else samples


class FrameTally:
    """Counts black, solid-colour and still frames of decoded uint8 RGB frames, a few frames at a time."""

    def __init__(self):
        self.count = self.black = self.solid = self.still = 0
        self.first = self.last = None
        self.pending: list[np.ndarray] = []

    def add(self, rgb: np.ndarray) -> None:
        self.first = rgb if self.first is None else self.first
        self.pending.append(rgb)
        if len(self.pending) >= TALLY_CHUNK_FRAMES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        from .frames import STILL_FRAME_DIFF, scan_frames

        batch = torch.from_numpy(np.stack(self.pending)).float().div_(255.0)
        scan = scan_frames(batch)
        self.black += len(scan.black_frames)
        self.solid += len(scan.solid_frames)
        previous = None if self.last is None else torch.from_numpy(self.last).float().div_(255.0)[None]
        chain = batch if previous is None else torch.cat([previous, batch])
        if chain.shape[0] > 1:
            self.still += int(((chain[1:] - chain[:-1]).abs().mean(dim=(1, 2, 3)) < STILL_FRAME_DIFF).sum())
        self.count += batch.shape[0]
        self.last = self.pending[-1]
        self.pending = []
