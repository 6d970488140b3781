"""Tier (b), issue 31: the capped clip's "Inference tensors do not track version counter" reproduced on each host's
own LTX-2 AV model and ModelPatcher (CPU, tests/inference_rebind_probe.py), and H3KitRefineSetup's load callback
making the same partial load run, bitwise equal to a freshly loaded model. Skips a host without LTX-2 AV."""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import run as run_process

import pytest
from comfyui_host import host_checkout, host_id, host_params

pytestmark = pytest.mark.comfyui
PACK_ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("inference_rebind_probe.py")
VIEW_ERROR = "Inference tensors do not track version counter"


@pytest.fixture(scope="module", params=host_params(), ids=host_id)
def probe(request):
    folder, python = host_checkout(request.param)
    if not Path(folder, "comfy", "ldm", "lightricks", "av_model.py").exists():
        pytest.skip("this host has no LTX-2 audio-video model")
    done = run_process([python, str(PROBE), str(PACK_ROOT)], cwd=folder, capture_output=True, text=True,
                       timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_loader_builds_inference_tensors_and_an_unload_outside_inference_mode_detaches_them(probe):
    assert probe["loaded_as_inference"]
    assert probe["detached_after_unload"] == probe["params"]
    assert "transformer_blocks.0.scale_shift_table" in probe["non_leaf"]


def test_a_partial_load_after_it_stops_in_the_hosts_own_forward(probe):
    assert probe["host_partial"] and probe["host"]["error"].startswith(VIEW_ERROR)
    assert probe["host_leaf_moved_partial"]
    assert probe["host_leaf_moved"]["error"].startswith(VIEW_ERROR)
    assert probe["host_leaf_moved"]["at"].startswith("av_model.py:") and "scale_shift_table[" in \
        probe["host_leaf_moved"]["line"]  # the H200 clip's failure, line 66 on 0.33.0
    assert set(probe["host_leaf_moved_detached"]) >= set(probe["non_leaf"])


def test_refine_setup_makes_the_same_partial_load_run_bitwise(probe):
    assert probe["pack_partial"] and probe["pack_detached_after_load"] == []
    assert probe["pack"] == {"bitwise_equal_to_fresh": True}
