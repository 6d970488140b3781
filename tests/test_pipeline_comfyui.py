"""Issue 3, tier (b): the handoff and the guards inside a real ComfyUI, on images made by core nodes."""

from __future__ import annotations

import json

import pytest
from comfyui_host import combo_options, execution_error

pytestmark = pytest.mark.comfyui

RED = 0xFF0000


def draft_graph(frame_guard_inputs: dict, pad_left: int = 32) -> dict:
    """124 red 96x64 frames (EmptyImage) padded with grey on the left to 128x64 -> handoff -> frame guard."""
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 96, "height": 64, "batch_size": 124, "color": RED}},
        "2": {"class_type": "ImagePadForOutpaint", "inputs": {"image": ["1", 0], "left": pad_left, "top": 0,
                                                              "right": 0, "bottom": 0, "feathering": 0}},
        "3": {"class_type": "H3KitDraftToLTX", "inputs": {"frames": ["2", 0], "target_width": 256, "target_height": 128,
                                                          "frame_policy": "trim_to_8n_plus_1", "fit": "cover_crop",
                                                          "fps": 24.0}},
        "4": {"class_type": "H3KitFrameGuard", "inputs": {"images": ["3", 0], **frame_guard_inputs}},
        "5": {"class_type": "PreviewAny", "inputs": {"source": ["3", 4]}},
        "6": {"class_type": "PreviewAny", "inputs": {"source": ["4", 1]}},
    }


def report_of(entry: dict, node_id: str) -> dict:
    return json.loads(entry["outputs"][node_id]["text"][0])


def test_handoff_and_frame_guard_run_on_core_images(comfyui_server):
    entry = comfyui_server.run_graph(draft_graph({"mode": "error", "max_solid_fraction": 0.25}))
    assert entry["status"]["status_str"] == "success", entry["status"]
    handoff = report_of(entry, "5")
    assert handoff["source"] == {"width": 128, "height": 64, "frames": 124, "on_h3_grid": True}
    assert handoff["encoder"] == {"width": 128, "height": 64, "frames": 121} and handoff["dropped_frames"] == 3
    assert handoff["resample"] is False and any("F21" in w for w in handoff["warnings"])
    guard = report_of(entry, "6")
    assert guard["status"] == "ok" and guard["frames"] == 121 and guard["solid_frames"] == 0


def test_frame_guard_stops_a_solid_video_in_the_server(comfyui_server):
    graph = draft_graph({"mode": "error", "max_solid_fraction": 0.25}, pad_left=0)  # every frame plain red
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "error"
    error = execution_error(entry)
    assert error["node_type"] == "H3KitFrameGuard"
    assert "121 of 121 frames are black or solid-colour" in error["exception_message"]
    assert "Fix:" in error["exception_message"]


def test_frame_guard_warn_mode_passes_and_reports(comfyui_server):
    entry = comfyui_server.run_graph(draft_graph({"mode": "warn", "max_solid_fraction": 0.25}, pad_left=0))
    assert entry["status"]["status_str"] == "success", entry["status"]
    guard = report_of(entry, "6")
    assert guard["status"] == "problems" and guard["solid_frames"] == 121 and guard["black_frames"] == 0


def test_latent_guard_stops_an_all_zero_latent(comfyui_server):
    graph = {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "2": {"class_type": "H3KitLatentGuard", "inputs": {"latent": ["1", 0], "mode": "error", "min_correlation": 0.5}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 1]}},
    }
    entry = comfyui_server.run_graph(graph)
    error = execution_error(entry)
    assert error["node_type"] == "H3KitLatentGuard" and "all zeros" in error["exception_message"]


def test_refine_setup_offers_the_servers_samplers(comfyui_server):
    info = comfyui_server.object_info()
    ours = info["H3KitRefineSetup"]["input"]["required"]["sampler"]
    core = info["KSamplerSelect"]["input"]["required"]["sampler_name"]  # classic or V3 layout, by host
    assert ours[0] == combo_options(core) and ours[1]["default"] == "euler"


def test_server_rejects_an_off_grid_target_before_running(comfyui_server):
    graph = draft_graph({"mode": "error", "max_solid_fraction": 0.25})
    graph["3"]["inputs"]["target_width"] = 1056
    status, body = comfyui_server.submit(graph)
    if status == 200:  # this host does not enforce widget steps: the node itself must refuse it
        entry = comfyui_server.run_graph(graph)
        assert "1024 or 1088" in execution_error(entry)["exception_message"]
    else:
        assert status == 400
