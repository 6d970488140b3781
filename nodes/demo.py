"""See the handoff without a model: a readable synthetic draft, and a contact sheet of what the handoff did.

H3KitTestPattern    a synthetic H3 draft: frame number, clock and a frame code burned in, a bar sweeping across,
                    and a stereo tone that changes pitch and loudness every second (kernels/testpattern.py).
H3KitHandoffSheet   one IMAGE of the handoff, from H3KitDraftToLTX's report: every draft frame marked kept or
                    dropped, the crop box LTX encodes, the audio waveform with the cut (kernels/contact_sheet.py).
Workflow: workflows/api/h3kit_handoff_demo.json.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from ..checks import facts
from ..kernels import contact_sheet, testpattern
from .common import H3KitInputError, Report, category

CATEGORY = category("Demo")


class H3KitTestPattern:
    DISPLAY_NAME = "H3Kit Test Pattern (synthetic draft)"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "A synthetic H3 draft for trying the pipeline without a model: each frame shows its number, the clock and "
        "a binary frame code, over a gradient with a grid and a bar sweeping left to right; the audio is a stereo "
        "tone that changes pitch and loudness every second. Feed it to H3KitDraftToLTX like a decoded H3 draft."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("IMAGE", "AUDIO", "STRING")
    RETURN_NAMES = ("frames", "audio", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {"required": {
            "width": ("INT", {"default": 672, "min": 64, "max": 4096, "step": 32, "tooltip":
                              "Frame width in pixels (an H3 draft is a multiple of 32; 672 for a 1344 wide output)."}),
            "height": ("INT", {"default": 384, "min": 64, "max": 4096, "step": 32, "tooltip":
                               "Frame height in pixels (an H3 draft is a multiple of 32; 384 for a 768 high output)."}),
            "frames": ("INT", {"default": 124, "min": 5, "max": facts.H3_LENGTH_MAX, "step": facts.H3_LENGTH_STEP,
                               "tooltip": "Number of frames, on H3's 17k+5 grid like a real draft (124 = 5.17 s "
                                          "at 24 fps; the handoff keeps 121)."}),
            "fps": ("FLOAT", {"default": 24.0, "min": 1.0, "max": 240.0, "step": 0.001, "tooltip":
                              "Frame rate the clock counts in (H3 renders 24)."}),
            "sample_rate": ("INT", {"default": 44100, "min": 8000, "max": 192000, "tooltip":
                                    "Audio sample rate of the tone, in Hz."}),
        }}

    def execute(self, width: int, height: int, frames: int, fps: float, sample_rate: int = 44100):
        node = type(self).__name__
        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 64:
                raise H3KitInputError(node, name, value, "must be a whole number of pixels, at least 64",
                                      "use e.g. 672 x 384")
        if isinstance(frames, bool) or not isinstance(frames, int) or not 1 <= frames < 2 ** testpattern.FRAME_CODE_BITS:
            raise H3KitInputError(node, "frames", frames, f"must be 1 .. {2 ** testpattern.FRAME_CODE_BITS - 1}",
                                  "use an H3 length such as 124")
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps <= 240:
            raise H3KitInputError(node, "fps", fps, "must be a number above 0 and at most 240", "use 24")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or not 8000 <= sample_rate <= 192000:
            raise H3KitInputError(node, "sample_rate", sample_rate, "must be 8000 .. 192000 Hz", "use 44100")
        seconds = frames / fps
        images = torch.from_numpy(testpattern.draft_frames(frames, width, height, float(fps)))
        wave = torch.from_numpy(testpattern.tone(seconds, sample_rate)).unsqueeze(0)
        report = Report(node).set(frames=frames, width=width, height=height, fps=fps, seconds=round(seconds, 6),
                                  sample_rate=sample_rate, tone_changes_s=testpattern.tone_changes(seconds),
                                  tone_hz=list(testpattern.TONE_STEPS_HZ))
        if not facts.is_h3_length(frames):
            report.warn(f"{frames} frames is not an H3 length (17k+5); a real draft never has that many")
        return images, {"waveform": wave, "sample_rate": sample_rate}, report.json()


class H3KitHandoffSheet:
    DISPLAY_NAME = "H3Kit Handoff Contact Sheet"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "One picture of what H3KitDraftToLTX did: every draft frame as a thumbnail, kept ones framed green with the "
        "crop box LTX encodes in yellow, dropped ones framed red; below, the draft's audio waveform with the cut as "
        "a magenta line and the frames on the same time axis. Connect a PreviewImage or SaveImage."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("IMAGE",)
    RETURN_NAMES = ("sheet",)

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "draft": ("IMAGE", {"tooltip": "The frames that went INTO H3KitDraftToLTX (the decoded draft)."}),
                "handoff_report": ("STRING", {"forceInput": True, "tooltip":
                                              "The 'report' output of that H3KitDraftToLTX."}),
            },
            "optional": {
                "audio": ("AUDIO", {"tooltip": "The audio that went into H3KitDraftToLTX, to draw the cut on."}),
            },
        }

    def execute(self, draft, handoff_report, audio=None):
        node = type(self).__name__
        if not isinstance(draft, torch.Tensor) or draft.ndim != 4 or draft.shape[-1] < 3:
            raise H3KitInputError(node, "draft", getattr(draft, "shape", type(draft).__name__),
                                  "expected an IMAGE batch [frames, height, width, 3]",
                                  "connect the same IMAGE that feeds H3KitDraftToLTX's 'frames'")
        try:
            report = json.loads(handoff_report)
        except (TypeError, ValueError) as exc:
            raise H3KitInputError(node, "handoff_report", handoff_report, f"not JSON ({exc})",
                                  "connect the 'report' output of H3KitDraftToLTX") from exc
        waveform, sample_rate = None, None
        if audio is not None:
            wave = audio.get("waveform") if isinstance(audio, dict) else None
            rate = audio.get("sample_rate") if isinstance(audio, dict) else None
            if not isinstance(wave, torch.Tensor) or wave.ndim != 3 or isinstance(rate, bool) \
                    or not isinstance(rate, (int, float)) or rate <= 0:
                raise H3KitInputError(node, "audio", type(audio).__name__, "expected AUDIO {'waveform' [batch, "
                                      "channels, samples], 'sample_rate'}",
                                      "connect the AUDIO that feeds H3KitDraftToLTX's 'audio'")
            waveform, sample_rate = wave[0].float().cpu().numpy(), int(rate)
        frames = draft[..., :3].float().cpu().numpy()
        try:
            sheet = contact_sheet.handoff_sheet(frames, report if isinstance(report, dict) else {}, waveform,
                                                sample_rate)
        except contact_sheet.SheetInputError as exc:
            raise H3KitInputError(node, "handoff_report", f"{len(handoff_report)} characters", str(exc),
                                  "connect 'draft' and 'handoff_report' to the input and the report of the same "
                                  "H3KitDraftToLTX") from exc
        return (torch.from_numpy(np.asarray(sheet, dtype=np.float32) / 255.0).unsqueeze(0),)


NODES = [H3KitTestPattern, H3KitHandoffSheet]
