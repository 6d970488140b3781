"""Every quantized layout of the host's registry on the low-VRAM paths, with real comfy-kitchen tensors (tier a).

The registry is ComfyUI 0.33.0's (lowvram_fakes.install_host_quant_ops: its layout names incl.
`TensorCoreFP8E4M3Layout`, its fp8 subclasses, its QUANT_ALGOS; tier b checks the stand-in against the real
`comfy.quant_ops` and runs the same paths on the real classes). Layouts are recognised by class, through the
registry, never by name. For each layout comfy-kitchen's CPU path can quantize: head-group row slices dequantize
to the whole weight's rows bitwise; where the CPU path also multiplies (every format but NVFP4 and MXFP8, whose
CPU matmul needs swizzled scales), the per-group H3 attention is bitwise the host's without the fused qkv buffer
and the feed-forward is chunked exactly when the host's quantizer is per token.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

ck = pytest.importorskip("comfy_kitchen", reason="real comfy-kitchen tensors are the subject here")

import torch  # noqa: E402
from alloc_tracker import Allocations  # noqa: E402
from comfy_kitchen.tensor import QuantizedTensor  # noqa: E402
from h3kit.adapters import kitchen  # noqa: E402
from h3kit.nodes.lowvram import H3KitChunkFeedForward, H3KitLowVRAMAttention  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from lowvram_fakes import (  # noqa: E402
    BaseModel,
    FakeModelPatcher,
    H3Net,
    format_layout,
    h3_inputs,
    install_host_quant_ops,
    quantize_layers,
)

HIDDEN, HEADS, HEAD_DIM, FFN, TOKENS = 256, 4, 128, 512, 64  # K multiple of 256 for ConvRot/W4A8; 128-row heads
INNER = HEADS * HEAD_DIM

# (format, quantize kwargs): every format of the 0.33.0 QUANT_ALGOS, int8 in its three weight forms
FORMATS = [("float8_e4m3fn", {}), ("float8_e5m2", {}), ("nvfp4", {}), ("mxfp8", {}), ("int8_tensorwise", {}),
           ("int8_tensorwise", {"per_channel": True}), ("int8_tensorwise", {"per_channel": True, "convrot": True}),
           ("convrot_w4a4", {}), ("asym_w4a8_int8", {}), ("asym_w4a8_int8", {"symmetric": False})]
CPU_MATMUL = [f for f in FORMATS if f[0] not in ("nvfp4", "mxfp8")]
IDS = [f"{fmt}{'-' + '-'.join(kw) if kw else ''}" for fmt, kw in FORMATS]
CPU_IDS = [i for i, f in zip(IDS, FORMATS, strict=True) if f in CPU_MATMUL]


@pytest.fixture(autouse=True)
def host_quant_ops(monkeypatch):
    return install_host_quant_ops(monkeypatch)


def test_every_registered_layout_has_a_verdict_read_from_its_class():
    verdicts = {name: kitchen.slice_verdict(name) for name in kitchen.registered_layouts()}
    fp8 = "row slices as kitchen TensorCoreFP8Layout"
    tiles = ", groups on 128-row scale tiles"
    expected = {
        "TensorCoreFP8Layout": fp8, "TensorCoreFP8E4M3Layout": fp8, "TensorCoreFP8E5M2Layout": fp8,
        "TensorCoreNVFP4Layout": "row slices as kitchen TensorCoreNVFP4Layout" + tiles,
        "TensorCoreMXFP8Layout": "row slices as kitchen TensorCoreMXFP8Layout" + tiles,
        "TensorWiseINT8Layout": "row slices as kitchen TensorWiseINT8Layout",
        "TensorCoreConvRotW4A4Layout": "row slices as kitchen TensorCoreConvRotW4A4Layout",
        "AsymW4A8Int8Layout": "row slices as kitchen AsymW4A8Int8Layout",
    }
    for name, verdict in expected.items():
        assert verdicts.pop(name) == verdict, name
    # comfy-kitchen's own registrations without a known row layout (AWQ W4A16, SVDQuant W4A4): whole, said so
    assert verdicts and all(v.endswith("no exact row slice known: projection whole") for v in verdicts.values())


def test_f_fp8_e4m3_is_recognised_by_class_not_by_name():
    """ComfyUI 0.33.0 names fp8 weights TensorCoreFP8E4M3Layout: a subclass of kitchen's fp8 layout."""
    weight = QuantizedTensor.from_float(torch.randn(256, 64).to(torch.bfloat16), "TensorCoreFP8E4M3Layout")
    rows, why = kitchen.quantized_rows(weight, 128, 256)
    assert why == "" and rows._layout_cls == "TensorCoreFP8E4M3Layout"
    assert torch.equal(rows.dequantize(), weight.dequantize()[128:256])


@pytest.mark.parametrize("fmt, kw", FORMATS, ids=IDS)
@pytest.mark.parametrize("groups", [(0, 128, 256, 384, 512), (0, 256, 384, 512)])
def test_head_group_row_slices_dequantize_to_the_whole_weights_rows(fmt, kw, groups):
    gen = torch.Generator().manual_seed(3)
    weight = QuantizedTensor.from_float((torch.randn(3 * INNER, HIDDEN, generator=gen) * 0.05).to(torch.bfloat16),
                                        format_layout(fmt), **kw)
    whole = weight.dequantize()
    for part in range(3):  # q, k and v rows of each group, as the H3 path cuts them
        for a, b in zip(groups, groups[1:], strict=False):
            rows, why = kitchen.quantized_rows(weight, part * INNER + a, part * INNER + b)
            assert why == "", why
            assert torch.equal(rows.dequantize(), whole[part * INNER + a:part * INNER + b])


def _h3(fmt, kw, where=("attn.qkv_proj", "attn.out_proj")):
    torch.manual_seed(0)
    net = H3Net(HIDDEN, HEADS, HEAD_DIM, FFN, layers=2).to(torch.bfloat16)
    for p in net.parameters():
        p.data.mul_(0.2)
    quantize_layers(net, tuple(f"blocks.{i}.{w}" for i in range(2) for w in where), fmt, **kw)
    return FakeModelPatcher(BaseModel(net))


def _run(model):
    x, t_emb, segments, table = h3_inputs(TOKENS, HIDDEN, 96, torch.bfloat16)
    return model.run(x.clone(), t_emb, segments, table)


@pytest.mark.parametrize("fmt, kw", CPU_MATMUL, ids=CPU_IDS)
def test_quantized_h3_attention_runs_per_group_bitwise_without_the_fused_buffer(fmt, kw):
    model = _h3(fmt, kw)
    expected = _run(model)
    patched, report = H3KitLowVRAMAttention().patch(model, 2)
    report = json.loads(report)
    layout = format_layout(fmt)
    assert report["weights"].startswith(f"{layout}: row slices as kitchen")
    assert report["quantized_layouts"][layout] == kitchen.slice_verdict(layout)
    with Allocations() as seen:
        got = _run(patched)
    assert torch.equal(got, expected)
    assert [s for s in seen.widest(3 * INNER) if s[0] == TOKENS] == []  # (3, 1536) is the adaLN output
    ledger = patched.object_patches["diffusion_model.blocks.0.attn.forward"].ledger.counts["H3 attention"]
    assert ledger == {"per_group": 2}


@pytest.mark.parametrize("fmt, kw", CPU_MATMUL, ids=CPU_IDS)
def test_quantized_h3_ffn_is_chunked_bitwise_when_the_hosts_quantizer_is_per_token(fmt, kw):
    model = _h3(fmt, kw, where=("mlp.fc1", "mlp.fc2"))
    expected = _run(model)
    patched, report = H3KitChunkFeedForward().patch(model, 4, 0)
    with Allocations() as seen:
        got = _run(patched)
    assert torch.equal(got, expected)
    assert json.loads(report)["fallbacks"] == []
    assert {s[0] for s in seen.shapes if len(s) == 2 and s[-1] == 2 * FFN} == {TOKENS // 4}


@pytest.mark.parametrize("layout, per_token", [("TensorCoreFP8Layout", True), ("TensorCoreFP8E4M3Layout", True),
                                               ("TensorCoreFP8E5M2Layout", True), ("TensorCoreMXFP8Layout", True),
                                               ("TensorCoreNVFP4Layout", False)])
def test_the_hosts_input_quantizer_is_probed_per_layout(layout, per_token):
    """0.33.0's fp8 quantizer uses scale 1.0 without a stored input scale, MXFP8 scales 32-wide blocks of a row,
    NVFP4 takes the amax of the whole input."""
    answer, how = kitchen.quantize_is_per_token(layout)
    assert answer is per_token and layout in how and "probed" in how


def _int8(rows=256, cols=256):
    return QuantizedTensor.from_float(torch.randn(rows, cols).to(torch.bfloat16), "TensorWiseINT8Layout")


@pytest.mark.parametrize("make, start, stop, why", [
    (lambda: _int8().t(), 0, 128, "TensorWiseINT8Layout weight is transposed"),
    (lambda: QuantizedTensor.from_float(torch.randn(200, 64), "TensorCoreNVFP4Layout"), 0, 128, "is padded"),
    (lambda: QuantizedTensor.from_float(torch.randn(256, 64), "TensorCoreNVFP4Layout"), 64, 192,
     "rows 64:192 are not aligned to its 128-row scale tiles"),
    (lambda: QuantizedTensor.from_float(torch.randn(256, 64), "TensorCoreMXFP8Layout"), 0, 64,
     "not aligned to its 128-row scale tiles"),
])
def test_cuts_the_layout_does_not_allow_are_refused_with_the_reason(make, start, stop, why):
    rows, reason = kitchen.quantized_rows(make(), start, stop)
    assert rows is None and why in reason


def test_a_packed_w4a8_weight_is_refused():
    weight = QuantizedTensor.from_float(torch.randn(256, 256).to(torch.bfloat16), "AsymW4A8Int8Layout")
    weight._params = dataclasses.replace(weight._params, mma_packed=True, scale=torch.empty(0))
    rows, why = kitchen.quantized_rows(weight, 0, 128)
    assert rows is None and why == "AsymW4A8Int8Layout weight is mma_packed"


@pytest.mark.parametrize("name", ["SomeFutureLayout", "TensorCoreAWQW4A16Layout"])
def test_a_layout_without_a_known_row_layout_runs_whole_and_says_why(name):
    weight = _int8()
    weight._layout_cls = name  # unknown to the registry / registered without a row rule
    rows, why = kitchen.quantized_rows(weight, 0, 128)
    assert rows is None and name in why and "no exact row slice" in why


def test_a_parameter_that_is_neither_per_tensor_nor_per_row_refuses_the_slice():
    weight = _int8()
    weight._params = dataclasses.replace(weight._params, scale=torch.ones(3, 7))
    rows, why = kitchen.quantized_rows(weight, 0, 128)
    assert rows is None and "'scale' (3, 7) is neither per tensor nor per row" in why


# ------------------------------------------------------------------ every cut, fuzzed (hypothesis profile "ci")

_FUZZ_ROWS = 384
_FUZZ_WEIGHTS: dict[str, object] = {}


def _fuzz_weight(layout: str):
    if layout not in _FUZZ_WEIGHTS:
        gen = torch.Generator().manual_seed(5)
        kw = {"per_channel": True} if layout == "TensorWiseINT8Layout" else {}
        _FUZZ_WEIGHTS[layout] = QuantizedTensor.from_float(
            torch.randn(_FUZZ_ROWS, 256, generator=gen).to(torch.bfloat16), layout, **kw)
    return _FUZZ_WEIGHTS[layout]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the registry fixture is the same for all
@given(layout=st.sampled_from(["TensorWiseINT8Layout", "TensorCoreFP8E4M3Layout", "TensorCoreNVFP4Layout",
                               "TensorCoreMXFP8Layout", "AsymW4A8Int8Layout"]),
       bounds=st.tuples(st.integers(0, _FUZZ_ROWS), st.integers(0, _FUZZ_ROWS)).filter(lambda b: b[0] < b[1]))
def test_every_cut_is_either_the_exact_rows_or_refused_for_its_tiles(layout, bounds):
    weight, (start, stop) = _fuzz_weight(layout), bounds
    rows, why = kitchen.quantized_rows(weight, start, stop)
    tile = kitchen.row_rule(kitchen.layout_class(layout)).tile_rows
    if start % tile or stop % tile:
        assert rows is None and why.endswith(f"not aligned to its {tile}-row scale tiles")
    else:
        assert why == "" and torch.equal(rows.dequantize(), weight.dequantize()[start:stop])
