"""Tier (b): H3KitComputeDtype's Turing mode and the startup adapter on a real host with native MiniMax-H3.

tests/turing_h3_probe.py runs in each host's own Python (hosts without `comfy.ldm.minimax` are skipped): the node
as on an sm_75 GPU, on the host's real DiTBlock inside its real ModelPatcher, plain (manual cast fp32), without a
manual cast (the node switches one on), int8 tensor-wise with convrot through the host's own loader (the Turing
checkpoint's format), and with a feed-forward whose fp16 result overflows. Each must equal, bitwise, the real
block's order of operations rebuilt from the host's own functions with attention and MLP called in fp16; the
overflowing one must come back finite. The startup adapter, on the host's real supported_models, moves LTXV/LTXAV
to fp16 and keeps MiniMaxH3 at [bf16, fp32].
"""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import run as run_process

import pytest
from comfyui_host import host_checkout, host_id, host_params

pytestmark = pytest.mark.comfyui
PACK_ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("turing_h3_probe.py")


@pytest.fixture(scope="module", params=host_params(), ids=host_id)
def probe(request):
    folder, python = host_checkout(request.param)
    if not (Path(folder) / "comfy" / "ldm" / "minimax" / "model.py").is_file():
        pytest.skip(f"{folder} has no native MiniMax-H3")
    done = run_process([python, str(PROBE), str(PACK_ROOT)], cwd=folder, capture_output=True, text=True,
                       timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["plain", "no_manual_cast", "int8_convrot"])
def test_mixed_mode_is_the_real_block_with_fp16_attention_and_ffn(probe, case):
    result = probe[case]
    assert result["equal_oracle"] and result["finite"] and result["dtype"] == "torch.float32"
    assert result["ledger"] == {"attn": {"fp16": 2}, "mlp": {"fp16": 2}}
    assert result["rel_l2_vs_fp32"] < 2e-3
    assert result["report"]["compute_dtype"].startswith("mixed: fp16 attention and feed-forward")
    forced = "manual_cast_dtype" in result["patch_keys"]
    assert forced is (case == "no_manual_cast")  # a quantized model keeps its int8 path: no forced cast


def test_an_overflowing_fp16_feed_forward_is_recomputed_in_fp32(probe):
    result = probe["overflow"]
    assert result["equal_oracle"] and result["finite"]
    assert result["ledger"]["mlp"] == {"recomputed in fp32: the fp16 result overflowed (not finite)": 1, "fp16": 1}


def test_startup_adapter_moves_ltx_to_fp16_and_keeps_h3(probe):
    startup = probe["startup"]
    assert startup["before"]["MiniMaxH3"] == ["torch.bfloat16", "torch.float32"]
    assert startup["changed"] == ["LTXAV", "LTXV"]
    assert startup["h3_after"] == ["torch.bfloat16", "torch.float32"]
    assert startup["note"].startswith("MiniMaxH3 [bfloat16, float32] kept")
