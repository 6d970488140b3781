"""Tier (b): the low-VRAM stand-ins and every quantized layout against each real host's own classes.

For every checkout in COMFYUI_DIRS (python from H3KIT_HOST_PYTHON_<n>, else COMFYUI_PYTHON for the first),
tests/lowvram_real_classes_probe.py runs inside that host on CPU:
- each stand-in of tests/lowvram_fakes.py next to the real class it follows (H3 Attention / MLP / DiTBlock where
  the host has MiniMax-H3, plain and manual-cast, bf16 / fp16 / fp32, with and without RoPE; LTX CrossAttention and
  FeedForward in the host's style, self-attention with RoPE, masked and plain cross-attention, gated where the host
  has gates; the attention function): same forward signature, same output bitwise, same allocation peak;
- the host's quantized-layout registry and QUANT_ALGOS against the stand-in's, the pack's verdict for every layout
  the host registers, the host quantizer probed per token;
- where the host has MiniMax-H3: a real 2-block H3 quantized through the host's own loader in every format of its
  QUANT_ALGOS, the host's forward against the pack's nodes (2 head groups, 4 FFN chunks), bitwise.
Skips per capability: no MiniMax-H3, no LTX, no comfy.quant_ops / comfy-kitchen.
"""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import run as run_process

import pytest
from comfyui_host import host_checkout, host_id, host_params

pytestmark = pytest.mark.comfyui
PACK_ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("lowvram_real_classes_probe.py")
PER_TOKEN_EXPECTED = {"TensorCoreFP8Layout": True, "TensorCoreFP8E4M3Layout": True, "TensorCoreFP8E5M2Layout": True,
                      "TensorCoreMXFP8Layout": True, "TensorCoreNVFP4Layout": False}


@pytest.fixture(scope="module", params=host_params(), ids=host_id)
def probe(request):
    folder, python = host_checkout(request.param)
    done = run_process([python, str(PROBE), str(PACK_ROOT)], cwd=folder, capture_output=True, text=True,
                       timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cases(probe, prefix):
    return [c for c in probe["standins"] if c["case"].startswith(prefix)]


@pytest.mark.parametrize("family", ["h3.", "ltx."])
def test_every_standin_has_the_real_signature_output_and_peak(probe, family):
    if family == "h3." and not probe["has_h3"]:
        pytest.skip("this host has no native MiniMax-H3")
    if family == "ltx." and not probe["has_ltx"]:
        pytest.skip("this host has no LTX model")
    cases = _cases(probe, family)
    assert cases
    for case in cases:
        assert "error" not in case, f"{case['case']}: {case.get('error')}\n{case.get('traceback')}"
        assert case["signature_equal"], (case["case"], case["real_signature"], case["fake_signature"])
        assert case["state_dict_mismatch"] == [], case["case"]
        assert case["equal"], f"{case['case']}: max |real - stand-in| = {case['max_abs_diff']}"
        assert case["peak_real"] == case["peak_fake"], (case["case"], case["peak_real"], case["peak_fake"])
    if family == "h3.":
        assert len(cases) == 30  # 3 classes x plain/manual cast x bf16/fp16/fp32 x RoPE or not (MLP: no RoPE)
        block = [c for c in cases if c["case"].startswith("h3.DiTBlock")][0]
        assert [p[0] for p in block["real_signature"]] == ["self", "x", "t_emb", "mod_segments", "rope_freqs",
                                                             "transformer_options"]  # no attention=


def test_the_standin_attention_function_is_the_hosts_attention_pytorch(probe):
    assert probe["attention_function"]
    for case in probe["attention_function"]:
        assert case["equal"], case


def test_the_standin_layout_registry_is_the_hosts(probe):
    if "quant_ops" not in probe:
        pytest.skip("this host has no comfy.quant_ops with comfy-kitchen")
    table = probe["quant_ops"]
    for name, (real_rule, standin_rule) in table["rules"].items():
        assert real_rule == standin_rule, name
    for fmt, entry in table["algos"].items():
        assert table["standin_algos"][fmt] == entry, fmt
    real, standin = probe["per_token"]["real"], probe["per_token"]["standin"]
    for name, answer in standin.items():
        assert real[name] == answer, name


def test_every_layout_the_host_registers_has_a_verdict_and_fp8_is_per_token(probe):
    if "verdicts" not in probe:
        pytest.skip("this host has no comfy.quant_ops with comfy-kitchen")
    verdicts = probe["verdicts"]
    assert set(verdicts) == set(probe["quant_ops"]["registered"])
    for name, verdict in verdicts.items():
        assert verdict.startswith("row slices as kitchen") or verdict.endswith("projection whole"), (name, verdict)
    for name in ("TensorCoreFP8Layout", "TensorCoreFP8E4M3Layout", "TensorCoreFP8E5M2Layout", "TensorCoreNVFP4Layout"):
        assert verdicts[name].startswith("row slices as kitchen"), name  # every host here registers these four
    for name, expected in PER_TOKEN_EXPECTED.items():
        if name in probe["per_token"]["real"]:
            assert probe["per_token"]["real"][name][0] is expected, name


def test_a_real_quantized_h3_is_bitwise_per_group_in_every_format(probe):
    if not probe.get("quantized_h3"):
        pytest.skip("this host has no native MiniMax-H3 with comfy.quant_ops")
    formats = {q["format"]: q for q in probe["quantized_h3"]}
    assert set(formats) >= {"float8_e4m3fn", "float8_e5m2", "nvfp4", "mxfp8", "int8_tensorwise", "convrot_w4a4",
                            "asym_w4a8_int8"}
    for fmt, result in formats.items():
        assert result["load_problems"] == [], fmt
        assert "host_forward_error" not in result, (fmt, result.get("host_forward_error"))
        assert result["equal"], (fmt, result["max_abs_diff"])
        assert result["ledger"]["H3 attention"] == {"per_group": 2}, (fmt, result["ledger"])
        attention_report, ffn_report = result["reports"]
        assert attention_report["weights"].startswith(f"{result['layout']}: row slices as kitchen"), fmt
        ffn = result["ledger"]["feed-forward"]
        if fmt == "nvfp4":  # NVFP4 takes the amax of the whole input: not chunked, said so
            assert list(ffn)[0].startswith("whole: fc1: TensorCoreNVFP4Layout quantizes the input with one scale")
            assert ffn_report["fallbacks"]
        else:
            assert ffn == {"chunked": 2}, (fmt, ffn)
    assert formats["float8_e4m3fn"]["layout"] == "TensorCoreFP8E4M3Layout"
