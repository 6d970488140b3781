"""Issue 15: the shipped h3kit_handoff_demo graph builds a draft worth looking at, passes its own guards and shows
the contact sheet; the two demo nodes refuse what they cannot draw, naming the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from h3kit.kernels.contact_sheet import CROP_RGB, CUT_RGB, DROPPED_RGB, KEPT_RGB
from h3kit.nodes import NODE_CLASS_MAPPINGS
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.demo import H3KitHandoffSheet, H3KitTestPattern

DEMO = Path(__file__).resolve().parent.parent / "workflows" / "api" / "h3kit_handoff_demo.json"
SINKS = {"PreviewImage", "PreviewAny"}  # core output nodes: the test records what reaches them


def execute_graph(graph: dict) -> dict[str, list]:
    """Run an API graph of H3Kit nodes in dependency order, the way ComfyUI calls classic nodes."""
    outputs: dict[str, tuple] = {}
    shown: dict[str, list] = {}

    def value(v):
        return outputs[str(v[0])][v[1]] if isinstance(v, list) else v

    pending = dict(graph)
    while pending:
        ready = [nid for nid, n in pending.items()
                 if all(str(v[0]) in outputs for v in n["inputs"].values() if isinstance(v, list))]
        assert ready, f"cycle or missing node among {sorted(pending)}"
        for nid in ready:
            node = pending.pop(nid)
            kwargs = {k: value(v) for k, v in node["inputs"].items()}
            if node["class_type"] in SINKS:
                shown.setdefault(node["class_type"], []).append(next(iter(kwargs.values())))
                outputs[nid] = ()
                continue
            cls = NODE_CLASS_MAPPINGS[node["class_type"]]
            outputs[nid] = getattr(cls(), cls.FUNCTION)(**kwargs)
    return shown


def _count(image: np.ndarray, rgb) -> int:
    return int(np.all(image == np.array(rgb, np.uint8), axis=-1).sum())


def test_shipped_demo_graph_passes_its_guards_and_shows_the_sheet():
    graph = json.loads(DEMO.read_text())
    assert {n["class_type"] for n in graph.values()} <= set(NODE_CLASS_MAPPINGS) | SINKS  # runs on any ComfyUI
    shown = execute_graph(graph)  # FrameGuard is in 'error' mode: a solid/black/NaN frame would raise here
    reports = [json.loads(text) for text in shown["PreviewAny"]]
    guard = next(r for r in reports if r["node"] == "H3KitFrameGuard")
    handoff = next(r for r in reports if r["node"] == "H3KitDraftToLTX")
    assert guard["status"] == "ok" and guard["solid_frames"] == 0 and guard["warnings"] == []
    assert (handoff["kept_frames"], handoff["dropped_frames"]) == (49, 7) and handoff["warnings"] == []
    assert handoff["crop"]["y"] > 0  # the demo shows a real cover crop, not a no-op
    (sheet,) = shown["PreviewImage"]
    assert sheet.ndim == 4 and sheet.shape[0] == 1 and sheet.shape[-1] == 3
    image = (sheet[0].numpy() * 255).round().astype(np.uint8)
    for colour in (KEPT_RGB, DROPPED_RGB, CROP_RGB, CUT_RGB):
        assert _count(image, colour) > 100, colour


def test_test_pattern_frames_differ_and_carry_their_number():
    frames, audio, report = H3KitTestPattern().execute(256, 128, 22, 24.0, 8000)
    assert frames.shape == (22, 128, 256, 3) and frames.dtype == torch.float32
    assert float((frames[0] - frames[-1]).abs().mean()) > 0.01  # a moving picture, not a still
    assert audio["waveform"].shape == (1, 2, round(22 / 24 * 8000)) and audio["sample_rate"] == 8000
    assert json.loads(report)["tone_changes_s"] == []  # 0.917 s: no change yet


def test_test_pattern_refuses_frames_it_cannot_number():
    with pytest.raises(H3KitInputError) as err:
        H3KitTestPattern().execute(256, 128, 600, 24.0, 8000)
    assert str(err.value) == ("H3KitTestPattern: input 'frames' = 600: must be 1 .. 511. "
                              "Fix: use an H3 length such as 124")


def test_sheet_refuses_a_report_that_is_not_the_handoffs():
    frames, _, pattern_report = H3KitTestPattern().execute(256, 128, 22, 24.0, 8000)
    with pytest.raises(H3KitInputError) as err:
        H3KitHandoffSheet().execute(frames, pattern_report)
    assert str(err.value) == (
        f"H3KitHandoffSheet: input 'handoff_report' = '{len(pattern_report)} characters': not an H3KitDraftToLTX "
        "report (missing or wrong 'source'). Fix: connect 'draft' and 'handoff_report' to the input and the report "
        "of the same H3KitDraftToLTX")


def test_sheet_refuses_audio_that_is_not_audio():
    frames, _, _ = H3KitTestPattern().execute(256, 128, 22, 24.0, 8000)
    handoff = NODE_CLASS_MAPPINGS["H3KitDraftToLTX"]().execute(frames, 256, 128)
    with pytest.raises(H3KitInputError) as err:
        H3KitHandoffSheet().execute(frames, handoff[4], audio={"waveform": [0.0]})
    assert "input 'audio'" in str(err.value) and "Fix: connect the AUDIO that feeds H3KitDraftToLTX" in str(err.value)
