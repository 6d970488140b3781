"""Issue 15, tier (b): the shipped h3kit_handoff_demo graph runs in a real ComfyUI, passes its own guards, and the
contact sheet reaches the UI through PreviewImage; the startup log carries the optional-node note once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from h3kit.kernels.contact_sheet import CROP_RGB, DROPPED_RGB, KEPT_RGB
from PIL import Image

pytestmark = pytest.mark.comfyui

DEMO = Path(__file__).resolve().parent.parent / "workflows" / "api" / "h3kit_handoff_demo.json"


def test_shipped_demo_graph_runs_and_previews_the_contact_sheet(comfyui_server):
    entry = comfyui_server.run_graph(json.loads(DEMO.read_text()))
    assert entry["status"]["status_str"] == "success", entry["status"]
    reports = [json.loads(out["text"][0]) for out in entry["outputs"].values() if "text" in out]
    guard = next(r for r in reports if r["node"] == "H3KitFrameGuard")
    assert guard["status"] == "ok" and guard["solid_frames"] == 0
    (shown,) = [out["images"] for out in entry["outputs"].values() if "images" in out]
    assert len(shown) == 1 and shown[0]["type"] == "temp"
    sheet = np.asarray(Image.open(comfyui_server.output_path(shown[0])).convert("RGB"))
    for colour in (KEPT_RGB, DROPPED_RGB, CROP_RGB):
        assert np.all(sheet == np.array(colour, np.uint8), axis=-1).sum() > 100, colour


def test_startup_log_notes_an_optional_node_once_without_warning(comfyui_server):
    log = comfyui_server.log()
    notes = [line for line in log.splitlines() if "optional node H3KitSageAttention is off" in line]
    if "H3KitSageAttention" in comfyui_server.object_info():
        assert notes == []  # the host has sageattention: nothing to say
    else:
        assert len(notes) == 1 and "sageattention==1.0.6" in notes[0] and "Triton 3.2" in notes[0]
    # Start-up only: later, a host may log a rejected prompt that names an H3Kit class at WARNING (the 0.12.1 fork).
    startup = log.split("To see the GUI go to", 1)[0]
    assert "WARNING" not in "\n".join(line for line in startup.splitlines() if "H3Kit" in line)


def test_run_prints_the_guard_warnings_of_a_successful_job(comfyui_server, tmp_path, capsys):
    """A FrameGuard in 'warn' mode lets an all-black video through with status success: `run` must say so."""
    from h3kit.scripts.cli import main

    graph = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 9, "color": 0}},
        "2": {"class_type": "H3KitFrameGuard", "inputs": {"images": ["1", 0], "mode": "warn",
                                                          "max_solid_fraction": 0.25}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 1]}},
    }
    path = tmp_path / "guard_warns.json"
    path.write_text(json.dumps(graph))
    code = main(["run", str(path), "--server", comfyui_server.url, "--out", str(tmp_path / "out"), "--quiet"])
    captured = capsys.readouterr()
    out = captured.out + captured.err  # WARN lines go to stderr (docs/cli.md)
    lines = [line for line in out.splitlines() if "WARN  report: H3KitFrameGuard (shown by node 3):" in line]
    assert code == 0 and len(lines) == 1 and "9 of 9 frames are black" in lines[0], out
