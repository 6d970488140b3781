"""Verdicts on a downloaded output video: it decodes, is not black or one colour, moves, has the size and
frame count the graph asks for (F19, F20) and audible audio when the graph muxes audio (F21).
Pure: the decoded file comes in (kernels/mux.verify_video decodes it and calls these)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .expect import Expect
from .problem import FAIL, PASS, WARN, Check, printable

SILENCE_DBFS = -60.0  # audio RMS below this is silence


def video_checks(name: str, info: Any, expect: Expect) -> list[Check]:
    """Checks of a decoded video (an Mp4Info: frames, black/solid/still counts, size, audio)."""
    n = info.frames
    stopped = info.stopped
    if stopped:  # a verification limit: what follows covers the decoded part; the frame count is unknown
        partial = [Check(WARN, "video", f"{name}: {printable(stopped)}; the checks cover the decoded part",
                         "open the file to check the rest by eye")]
        known = Expect(expect.width, expect.height, None, expect.audio)
        return partial + (video_checks(name, dataclasses.replace(info, stopped=""), known) if n
                          else geometry_checks(name, info, known))
    if n == 0:
        return [Check(FAIL, "video", f"{name} has no decodable video frames", "check the server log")]
    checks = []
    if info.black_frames == n:
        checks.append(Check(FAIL, "video", f"{name}: all {n} frames are black (a NaN latent or a broken refine, F10/F01)",
                            "run doctor --server; put H3KitLatentGuard after the sampler to see where it breaks"))
    elif info.solid_frames == n:
        checks.append(Check(FAIL, "video", f"{name}: every frame is one solid colour",
                            "check the sampler output (H3KitLatentGuard) and the VAE"))
    else:
        if info.black_frames:
            checks.append(Check(WARN, "video", f"{name}: {info.black_frames} of {n} frames are black", "inspect those frames"))
        still = n > 1 and info.still_frames == n - 1
        checks.append(Check(WARN if still else PASS, "video", f"{name}: {n} frames decode, not black" +
                            ("; but every frame is the same picture (no motion)" if still else ", not constant"),
                            "a still video from a video model means the latent did not move: check the graph"))
    checks += geometry_checks(name, info, expect)
    checks.append(audio_check(name, info, expect))
    return checks


def geometry_checks(name: str, info: Any, expect: Expect) -> list[Check]:
    checks = []
    if expect.width and expect.height:
        got, want = (info.width, info.height), (expect.width, expect.height)
        checks.append(Check(PASS, "size", f"{name}: {got[0]}x{got[1]} as the graph asks") if got == want else
                      Check(FAIL, "size", f"{name}: {got[0]}x{got[1]}, but the graph asks for {want[0]}x{want[1]} (F19)",
                            "use sizes on the H3/LTX grids (multiples of 32; two-stage targets of 64)"))
    if expect.frames:
        checks.append(Check(PASS, "frames", f"{name}: {info.frames} frames as the graph asks")
                      if info.frames == expect.frames else
                      Check(FAIL, "frames", f"{name}: {info.frames} frames, but the graph asks for {expect.frames} "
                            "(F20)", "use lengths on the grid: H3 17k+5, LTX 8n+1"))
    return checks


def audio_check(name: str, info: Any, expect: Expect) -> Check:
    if info.audio_codec is None:
        if expect.audio is False:
            return Check(PASS, "audio", f"{name}: no audio stream (the graph muxes none)")
        why = ("the graph connects audio to CreateVideo" if expect.audio else
               "the graph decodes audio but CreateVideo.audio is not connected")
        return Check(FAIL, "audio", f"{name}: no audio stream, but {why} (F21)",
                     "wire VAEDecodeAudio (or the handoff's audio output) straight into CreateVideo.audio")
    level = info.audio_dbfs
    if level is None or level < SILENCE_DBFS:
        shown = "no samples" if level is None or level == float("-inf") else f"{level:.1f} dBFS"
        return Check(FAIL, "audio", f"{name}: the audio stream is silent ({shown} RMS, floor {SILENCE_DBFS:.0f}) (F21)",
                     "feed the decoded H3 audio (VAEDecodeAudio of the draft latent) into CreateVideo.audio")
    return Check(PASS, "audio", f"{name}: audio present, RMS {level:.1f} dBFS")
