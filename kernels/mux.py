"""Write frames + audio into an mp4 (h264 + aac) with PyAV, and read one back to verify it.

`av` is imported inside the functions so importing the pack stays fast.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

AUDIO_LAYOUTS = {1: "mono", 2: "stereo"}


def _to_uint8_frames(frames: torch.Tensor) -> np.ndarray:
    return (frames.detach().float().clamp(0, 1) * 255.0).round().to(torch.uint8).cpu().numpy()


def write_mp4(path: Path, frames: torch.Tensor, fps: float, audio: dict | None = None, *,
              overwrite: bool = False, crf: int = 18) -> Path:
    """Encode [N, H, W, 3] frames (0..1) and an optional AUDIO dict; atomic (temp file + os.replace)."""
    import av

    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; choose another path or allow overwriting")
    if frames.shape[1] % 2 or frames.shape[2] % 2:
        raise ValueError(f"h264 (yuv420p) needs even sides, got {frames.shape[2]}x{frames.shape[1]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".mp4", dir=path.parent)
    os.close(fd)
    try:
        with av.open(tmp_name, mode="w", format="mp4") as container:
            video = container.add_stream("h264", rate=Fraction(fps).limit_denominator(1001))
            video.width, video.height, video.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
            video.options = {"crf": str(crf), "preset": "veryfast"}
            audio_stream = _add_audio_stream(container, audio) if audio is not None else None
            for array in _to_uint8_frames(frames):
                container.mux(video.encode(av.VideoFrame.from_ndarray(array, format="rgb24")))
            container.mux(video.encode())
            if audio_stream is not None:
                _encode_audio(container, audio_stream, audio)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


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
    first_frame: np.ndarray  # uint8 [H, W, 3] of the decoded first frame
    last_frame: np.ndarray  # uint8 [H, W, 3] of the decoded last frame
    audio_rms: float | None  # of every decoded sample, all channels

    @property
    def video_seconds(self) -> float:
        return self.frames / self.fps

    @property
    def audio_seconds(self) -> float | None:
        return None if not self.sample_rate else self.audio_samples / self.sample_rate


def read_mp4(path: Path) -> Mp4Info:
    """Decode every frame and audio sample of an mp4 and describe what is really in it."""
    import av

    with av.open(str(path)) as container:
        vstream = container.streams.video[0]
        astream = container.streams.audio[0] if container.streams.audio else None
        count, first, last = 0, None, None
        for frame in container.decode(vstream):
            last = frame.to_ndarray(format="rgb24")
            first = last if first is None else first
            count += 1
        video = (vstream.codec_context.name, vstream.codec_context.width, vstream.codec_context.height,
                 count, float(vstream.average_rate))
    audio, rms = (None, None, None, None), None
    if astream is not None:
        with av.open(str(path)) as container:
            astream = container.streams.audio[0]
            chunks = [frame.to_ndarray().reshape(-1) for frame in container.decode(astream)]
            pcm = np.concatenate(chunks).astype(np.float64) if chunks else np.zeros(0)
            channels = astream.codec_context.channels
            audio = (astream.codec_context.name, astream.codec_context.sample_rate, channels, pcm.size // channels)
            rms = float(np.sqrt(np.mean(pcm * pcm))) if pcm.size else 0.0
    return Mp4Info(*video, *audio, first_frame=first, last_frame=last, audio_rms=rms)
