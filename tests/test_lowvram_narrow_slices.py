"""Low-VRAM LTX attention: the narrow-slice rule (kernels/chunked.py SLICE_ROW_MULTIPLE, docs/lowvram.md).

CPU float32 matmuls of a narrow row slice of a weight (8 rows) do not give the same bits as those rows of the whole
product; multiples of 16 rows do (measured with torch 2.9.1 and 2.13.0). The tiny LTXAV of the tier-b test on
ComfyUI 0.12.1 (2 heads x 8, head_chunks=2) differed from the host by 4.77e-7 because of it. Here, in float32 on
the CPU, with the host-semantics stand-ins: a layer whose to_v slices would be narrow projects v whole, is
bitwise the host, and the report and the ledger name it; a layer with 16-row slices still runs per group, and no
op that reads its to_v weight produces a whole-width v.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("comfy_kitchen", reason="the host's kernel library is the oracle here (pip install -e '.[test]')")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from h3kit.nodes.lowvram import H3KitLowVRAMAttention  # noqa: E402
from lowvram_fakes import BaseModel, FakeModelPatcher, LTXNet, ltx_pe  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

BATCH, TOKENS, CTX_TOKENS, AUDIO_TOKENS = 2, 12, 5, 7
NARROW = ("to_v row slices of 8 rows are not a multiple of 16 (such narrow matmuls are not bitwise the whole "
          "projection); v projected whole, attention still per group")
LAYERS = ("attn1", "attn2", "audio_to_video_attn")


def _model(dim_head: int, seed: int = 0) -> FakeModelPatcher:
    """Float32 LTX blocks in the 0.12.1 style; video and audio attention both 2 heads x dim_head."""
    torch.manual_seed(seed)
    net = LTXNet("v0121", heads=2, dim_head=dim_head, a_heads=2, a_dim_head=dim_head)
    return FakeModelPatcher(BaseModel(net.to(torch.float32)))


def _inputs(dim_head: int):
    gen = torch.Generator().manual_seed(4)
    vx = torch.randn(BATCH, TOKENS, 64, generator=gen)
    ax = torch.randn(BATCH, AUDIO_TOKENS, 32, generator=gen)
    ctx = torch.randn(BATCH, CTX_TOKENS, 32, generator=gen)
    return vx, ax, ctx, ltx_pe("v0121", BATCH, TOKENS, 2, dim_head, True)


def _run(model, inputs):
    vx, ax, ctx, pe = inputs
    return model.run(vx.clone(), ax, ctx, pe=pe)


def _patched(model):
    patched, report = H3KitLowVRAMAttention().patch(model, 2)
    return patched, json.loads(report)


def _ledger(patched):
    return patched.object_patches["diffusion_model.transformer_blocks.0.attn1.forward"].ledger.counts["LTX attention"]


class ToVOutputs(TorchDispatchMode):
    """Shapes of every new tensor computed by an op that reads one of the given weights' storage (views skipped)."""

    def __init__(self, weights):
        super().__init__()
        self.storages = {w.untyped_storage().data_ptr() for w in weights}
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        reads = any(type(a) is torch.Tensor and a.untyped_storage().data_ptr() in self.storages for a in args)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if reads and type(t) is torch.Tensor and t.untyped_storage().data_ptr() not in self.storages:
                self.shapes.append(tuple(t.shape))
        return out


def _to_v_weights(model):
    return [getattr(block, name).to_v.weight for block in model.model.diffusion_model.transformer_blocks
            for name in LAYERS]


def test_cpu_float32_row_slices_of_16_rows_are_bitwise_the_whole_product():
    """The premise of the rule, on this machine: multiples of 16 rows are exact slices (8 rows are not, here)."""
    gen = torch.Generator().manual_seed(0)
    for k in (16, 32, 2048):
        for m in (1, 12, 96):
            x = torch.randn(1, m, k, generator=gen)
            for rows in (16, 32, 64, 128):
                w, b = torch.randn(2 * rows, k, generator=gen) / k ** 0.5, torch.randn(2 * rows, generator=gen)
                whole = F.linear(x, w, b)
                for g in range(2):
                    part = F.linear(x, w[g * rows:(g + 1) * rows], b[g * rows:(g + 1) * rows])
                    assert torch.equal(part, whole[..., g * rows:(g + 1) * rows]), (k, m, rows, g)


def test_narrow_slices_project_v_whole_bitwise_the_host_and_are_reported():
    model, inputs = _model(8), _inputs(8)
    expected = _run(model, inputs)
    patched, report = _patched(model)
    with ToVOutputs(_to_v_weights(model)) as seen:
        got = _run(patched, inputs)
    assert torch.equal(got, expected)
    assert report["fallbacks"] == [
        "transformer_blocks.0.attn1, transformer_blocks.0.attn2, transformer_blocks.0.audio_to_video_attn, "
        "transformer_blocks.1.attn1, transformer_blocks.1.attn2, transformer_blocks.1.audio_to_video_attn: " + NARROW]
    assert _ledger(patched) == {"whole: " + NARROW: 6}
    assert (BATCH * TOKENS, 16) in seen.shapes            # the tracker sees the whole v when it is built


def test_the_rule_is_what_makes_narrow_slices_exact_here(monkeypatch):
    """Without the rule the 8-row slices run per group; on this CPU that is not the host's output."""
    from h3kit.kernels import chunked

    model, inputs = _model(8), _inputs(8)
    expected = _run(model, inputs)
    monkeypatch.setattr(chunked, "SLICE_ROW_MULTIPLE", 1)
    patched, report = _patched(model)
    got = _run(patched, inputs)
    assert report["fallbacks"] == [] and _ledger(patched) == {"per_group": 6}
    if torch.equal(got, expected):
        pytest.skip("this CPU's float32 matmul is bitwise for 8-row slices; the rule only costs memory here")
    assert (got - expected).abs().max() < 1e-5


def test_16_row_slices_still_run_per_group_without_a_whole_v():
    model, inputs = _model(16), _inputs(16)
    expected = _run(model, inputs)
    patched, report = _patched(model)
    with ToVOutputs(_to_v_weights(model)) as seen:
        got = _run(patched, inputs)
    assert torch.equal(got, expected)
    assert report["fallbacks"] == [] and _ledger(patched) == {"per_group": 6}
    assert seen.shapes and all(shape[-1] == 16 for shape in seen.shapes), seen.shapes  # 1 head x 16 per group
    assert not [shape for shape in seen.shapes if shape[-1] == 32]  # never the whole 2 x 16


def test_auto_names_layers_whose_head_dim_may_give_narrow_slices():
    model = _model(8)
    _patched_model, report = H3KitLowVRAMAttention().patch(model, 0)
    (note,) = json.loads(report)["fallbacks"]
    assert note.startswith("transformer_blocks.0.attn1, ") and note.endswith(
        "head_dim 8: if auto splits these layers into groups whose to_v row slices are not a multiple of 16 rows, "
        "v is projected whole (not bitwise otherwise)")


@pytest.mark.parametrize("heads, dim_head, groups, narrow_rows", [
    (2, 8, 2, "8"),          # the tiny LTXAV's audio layers
    (3, 8, 2, "8"),          # groups of 16 and 8 rows: the second one decides
    (5, 8, 2, "24"),         # 24 and 16 rows: 24 is not a multiple of 16
    (2, 8, 1, ""),           # one group is the whole projection
    (32, 128, 5, ""),        # LTX-2 video: 7/7/6/6/6 heads x 128 rows
    (32, 64, 32, ""),        # LTX-2 audio, one head per group: 64 rows
    (2, 16, 2, ""),
])
def test_narrow_slice_rule_table(heads, dim_head, groups, narrow_rows):
    from h3kit.kernels import chunked

    reason = chunked.narrow_slice_reason(heads, dim_head, groups)
    if narrow_rows:
        assert reason.startswith(f"to_v row slices of {narrow_rows} rows are not a multiple of 16 ")
    else:
        assert reason == ""
