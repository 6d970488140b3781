"""Issue 8, tier (b): the Turing nodes register in a real ComfyUI and the startup adapter stays inert on CPU."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.comfyui


def test_turing_nodes_register_with_tooltips(comfyui_server):
    info = comfyui_server.object_info()
    expected = ["H3KitComputeDtype"]
    if all(importlib.util.find_spec(p) for p in ("sageattention", "triton")):
        expected.append("H3KitSageAttention")  # the server runs this same interpreter's packages
    for node_id in expected:
        assert node_id in info, comfyui_server.log()[-2000:]
        for name, spec in info[node_id]["input"]["required"].items():
            assert spec[1].get("tooltip"), f"{node_id}.{name}"
    assert info["H3KitComputeDtype"]["input"]["required"]["dtype"][0] == ["auto", "fp16", "bf16", "fp32"]


def test_startup_adapter_is_inert_on_a_cpu_server(comfyui_server):
    log = comfyui_server.log()
    assert "nodes/turing.py failed" not in log
    assert "H3Kit Turing fp16 (" not in log  # the one 'changed' line appears only on GPUs without bf16
