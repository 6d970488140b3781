"""Tier (b): the low-VRAM patches on each real host's own LTX layers, RoPE format, LoRA loader and ModelPatcher.

For every checkout in COMFYUI_DIRS (python from H3KIT_HOST_PYTHON_<n>, else COMFYUI_PYTHON for the first),
tests/lowvram_host_probe.py runs inside that host: a LoRA on to_v and on the FFN projection, the model loaded
partially (the host installs LowVramPatch weight functions at load time) and fully; the patched output must be
bitwise the host's, and must differ from the output without the LoRA (the LoRA is applied, not dropped).
"""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import run as run_process

import pytest
from comfyui_host import host_checkout, host_id, host_params

pytestmark = pytest.mark.comfyui
PACK_ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("lowvram_host_probe.py")


@pytest.fixture(scope="module", params=host_params(), ids=host_id)
def probe(request):
    folder, python = host_checkout(request.param)
    done = run_process([python, str(PROBE), str(PACK_ROOT)], cwd=folder, capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0 and "No module named 'comfy.ldm.lightricks" in done.stderr:
        pytest.skip(f"{folder} has no LTX model")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["lowvram", "full"])
def test_lora_model_loaded_partially_or_fully_is_bitwise_the_host_with_the_lora_applied(probe, mode):
    result = probe[mode]
    assert result["lora_changes_output"], "the LoRA must change the host's output, or this proves nothing"
    assert result["patched_equals_host"], f"max |patched - host| = {result['max_abs_diff']}"
    assert not result["patched_equals_no_lora"]


def test_every_layer_really_ran_in_groups_and_chunks_on_the_hosts_rope_format(probe):
    assert probe["pe_format"] in ("(cos, sin)", "(cos, sin, split)", "(table, split)")
    assert probe["ledger"] == {"LTX attention": {"per_group": 8}, "feed-forward": {"chunked": 4}}
    attention_report, ffn_report = probe["reports"]
    assert attention_report["status"] == ffn_report["status"] == "patched"
    assert attention_report["fallbacks"] == [] and attention_report["layers_patched"] == 4
