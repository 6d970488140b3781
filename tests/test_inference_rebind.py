"""Issue 31: parameters a device move outside inference mode leaves without a version counter
(adapters/inference_tensors.py), and H3KitRefineSetup's load callback that re-marks them. Tier (a): plain torch,
a patcher double; the real LTX-2 AV class under the host's own patcher is tests/test_inference_rebind_comfyui.py."""

from __future__ import annotations

import json
import logging
import sys
import types

import pytest
import torch
from h3kit.adapters import log as pack_log
from h3kit.adapters.inference_tensors import counter_detached, rebind_as_inference
from h3kit.nodes.common import INFERENCE_REBIND_KEY
from h3kit.nodes.pipeline import H3KitRefineSetup

ON_LOAD = "on_load_after"


class Block(torch.nn.Module):
    """A non-leaf parameter next to a leaf layer, as LTX-2's BasicAVTransformerBlock holds its scale_shift_table."""

    def __init__(self):
        super().__init__()
        self.scale_shift_table = torch.nn.Parameter(torch.randn(6, 8))
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("freqs", torch.arange(4.0))

    def ada(self, indices: slice) -> torch.Tensor:
        return self.scale_shift_table[indices].unsqueeze(0)  # the view av_model.py takes


def loaded_block() -> Block:
    with torch.inference_mode():  # a loader node: ComfyUI's executor runs it under inference mode
        return Block()


def moved_outside_inference_mode(block: Block) -> Block:
    """What Module.to(<another device>) does when called outside inference mode (the prompt worker's
    unload_all_models): each moved copy is assigned to .data. On a CPU box a clone stands in for the device copy."""
    block._apply(lambda t: t.clone())
    return block


def test_a_move_outside_inference_mode_detaches_the_counter_and_breaks_the_first_view():
    block = moved_outside_inference_mode(loaded_block())
    assert all(counter_detached(t) for t in block.parameters())
    assert not counter_detached(block.freqs)  # Module._apply replaces buffers instead of assigning .data
    with torch.inference_mode(), pytest.raises(RuntimeError, match="Inference tensors do not track version counter"):
        block.ada(slice(0, 2))


def test_inference_tensors_and_ordinary_tensors_are_not_detached():
    with torch.inference_mode():
        inference = torch.ones(3)
    ordinary = torch.nn.Parameter(torch.ones(3))
    view_in_inference_mode = None
    with torch.inference_mode():
        view_in_inference_mode = ordinary[1:]  # an ordinary tensor's view made in inference mode stays ordinary
    assert not counter_detached(inference) and not counter_detached(ordinary)
    assert not counter_detached(view_in_inference_mode)


def test_rebind_remarks_in_place_without_copying_and_the_view_works():
    block = moved_outside_inference_mode(loaded_block())
    before = {name: (t.data_ptr(), t.detach().clone()) for name, t in [*block.named_parameters(),
                                                                         *block.named_buffers()]}
    done = rebind_as_inference(block)
    assert sorted(done.rebound) == ["proj.bias", "proj.weight", "scale_shift_table"] and done.skipped == []
    for name, tensor in [*block.named_parameters(), *block.named_buffers()]:
        assert not counter_detached(tensor) and tensor.is_inference() == (name != "freqs")
        assert tensor.data_ptr() == before[name][0] and torch.equal(tensor, before[name][1])
    assert isinstance(block.scale_shift_table, torch.nn.Parameter)
    with torch.inference_mode():
        assert torch.equal(block.ada(slice(0, 2))[0], before["scale_shift_table"][1][:2])


def test_rebind_leaves_ordinary_parameters_alone():
    """A weaker test (`not is_inference()`) would re-mark these too and make a trainable model inference-only."""
    block = Block()
    block.scale_shift_table.data.mul_(2)
    version = block.scale_shift_table._version
    assert rebind_as_inference(block).rebound == []
    assert not block.scale_shift_table.is_inference() and block.scale_shift_table._version == version


def test_rebind_reports_a_detached_tensor_subclass_it_cannot_remark():
    class Quantized(torch.Tensor):
        pass

    block = loaded_block()
    with torch.inference_mode():
        block.proj.weight = torch.nn.Parameter(torch.randn(8, 8).as_subclass(Quantized), requires_grad=False)
    block.proj.weight.data = torch.randn(8, 8)  # moved outside inference mode
    assert type(block.proj.weight) is Quantized and counter_detached(block.proj.weight)
    done = rebind_as_inference(block)
    assert done.skipped == ["proj.weight (Quantized)"] and done.rebound == []


class Patcher:
    """The part of ComfyUI's ModelPatcher that H3KitRefineSetup uses."""

    def __init__(self, model, callbacks=None):
        self.model, self.callbacks = model, callbacks or {}

    def clone(self):
        return Patcher(self.model, {k: {k1: list(v1) for k1, v1 in v.items()} for k, v in self.callbacks.items()})

    def add_callback_with_key(self, call_type, key, callback):
        self.callbacks.setdefault(call_type, {}).setdefault(key, []).append(callback)

    def remove_callbacks_with_key(self, call_type, key):
        self.callbacks.get(call_type, {}).pop(key, None)

    def load(self):
        for callbacks in self.callbacks.get(ON_LOAD, {}).values():
            for callback in callbacks:
                callback(self, None, 0, False, True)


@pytest.fixture
def host(monkeypatch):
    samplers = types.ModuleType("comfy.samplers")
    samplers.KSampler = type("KSampler", (), {"SAMPLERS": ["euler"]})
    samplers.sampler_object = lambda name: ("sampler", name)
    extension = types.ModuleType("comfy.patcher_extension")
    extension.CallbacksMP = type("CallbacksMP", (), {"ON_LOAD": ON_LOAD})
    monkeypatch.setitem(sys.modules, "comfy", types.ModuleType("comfy"))
    monkeypatch.setitem(sys.modules, "comfy.samplers", samplers)
    monkeypatch.setitem(sys.modules, "comfy.patcher_extension", extension)
    monkeypatch.setattr(pack_log, "_LOGGED_ONCE", set())


def test_refine_setup_returns_a_clone_whose_load_remarks_the_parameters(host, caplog):
    block = loaded_block()
    model = Patcher(block)
    out = H3KitRefineSetup().execute(model)
    patched, report = out[0], json.loads(out[3])
    assert patched is not model and patched.model is block and model.callbacks == {}
    assert list(patched.callbacks[ON_LOAD]) == [INFERENCE_REBIND_KEY] and report["inference_rebind"]
    moved_outside_inference_mode(block)
    with caplog.at_level(logging.WARNING, logger="H3Kit"):
        patched.load()
    assert not any(counter_detached(t) for t in block.parameters())
    with torch.inference_mode():
        block.ada(slice(2, 3))
    assert "3 parameters of Block" in caplog.text and "Unload Models" in caplog.text


def test_refine_setup_twice_installs_one_callback(host):
    once = H3KitRefineSetup().execute(Patcher(loaded_block()))[0]
    twice = H3KitRefineSetup().execute(once)[0]
    assert [len(v) for v in twice.callbacks[ON_LOAD].values()] == [1]


def test_refine_setup_without_load_callbacks_says_so(host, monkeypatch):
    monkeypatch.setitem(sys.modules, "comfy.patcher_extension", types.ModuleType("comfy.patcher_extension"))
    model = Patcher(loaded_block())
    out = H3KitRefineSetup().execute(model)
    assert out[0] is model
    assert any("Free model and node cache" in text for text in json.loads(out[3])["fallbacks"])
