"""Turing adapter decisions, the startup hook, the F10 warning and H3KitComputeDtype (tier a, CPU)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import types
from subprocess import run as run_process

import pytest
import torch
from h3kit.adapters import turing
from h3kit.nodes import turing as turing_nodes
from h3kit.nodes.common import H3KitInputError


@pytest.mark.parametrize("capability", [(7, 5), (7, 0)])
def test_f04_sm7x_gets_fp16_compute_for_ltx(capability):
    decision = turing.decide_turing_fp16(capability)
    assert decision.apply and "no bf16" in decision.reason


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (8, 9), (9, 0), (12, 0)])
def test_bf16_devices_are_left_alone(capability):
    assert not turing.decide_turing_fp16(capability, bf16_supported=True).apply
    assert not turing.decide_turing_fp16(capability).apply


def test_f04_device_reporting_no_bf16_gets_fp16_whatever_its_capability():
    assert turing.decide_turing_fp16((8, 6), bf16_supported=False).apply
    assert turing.decide_turing_fp16((6, 1)).apply


def test_opt_out_and_no_device_are_inert():
    assert not turing.decide_turing_fp16((7, 5), env_value="0").apply
    assert "opts out" in turing.decide_turing_fp16((7, 5), env_value="off").reason
    assert turing.decide_turing_fp16((7, 5), env_value="1").apply
    assert not turing.decide_turing_fp16(None).apply


def _fake_supported_models():
    class BASE:
        supported_inference_dtypes = [torch.float16, torch.bfloat16, torch.float32]

    class LTXV(BASE):
        supported_inference_dtypes = [torch.bfloat16, torch.float32]

    class LTXAV(LTXV):
        pass

    class Lumina2(BASE):
        supported_inference_dtypes = [torch.bfloat16, torch.float32]

    return types.SimpleNamespace(LTXV=LTXV, LTXAV=LTXAV, Lumina2=Lumina2)


def test_f05_only_ltx_configs_change_and_twice_is_once():
    models = _fake_supported_models()
    changed = turing.install_fp16_preference(models, torch.float16)
    assert set(changed) == {"LTXV", "LTXAV"}
    assert models.LTXV.supported_inference_dtypes == [torch.float16, torch.bfloat16, torch.float32]
    assert models.LTXAV.supported_inference_dtypes == [torch.float16, torch.bfloat16, torch.float32]
    assert models.Lumina2.supported_inference_dtypes == [torch.bfloat16, torch.float32]
    assert turing.install_fp16_preference(models, torch.float16) == {}


@pytest.fixture
def fake_comfy(monkeypatch):
    """A ComfyUI that has initialised CUDA on a device of the capability the test sets."""
    models = _fake_supported_models()
    management = types.SimpleNamespace(get_torch_device=lambda: torch.device("cuda", 0))
    monkeypatch.setitem(sys.modules, "comfy.supported_models", models)
    monkeypatch.setitem(sys.modules, "comfy.model_management", management)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.delenv(turing.OPT_OUT_ENV, raising=False)

    def set_device(capability):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: capability >= (8, 0))

    return models, set_device


def _h3kit_lines(caplog, level=logging.INFO):
    return [r for r in caplog.records if r.name == "H3Kit" and r.levelno >= level and "Turing" in r.getMessage()]


def test_f04_startup_on_sm75_switches_ltx_and_logs_one_line(fake_comfy, caplog):
    models, set_device = fake_comfy
    set_device((7, 5))
    with caplog.at_level(logging.DEBUG, logger="H3Kit"):
        assert turing.apply_turing_fp16_at_startup().apply
    assert models.LTXV.supported_inference_dtypes[0] is torch.float16
    assert models.LTXAV.supported_inference_dtypes[0] is torch.float16
    lines = _h3kit_lines(caplog)
    assert len(lines) == 1 and "LTXV" in lines[0].getMessage() and "H3KIT_TURING_FP16=0" in lines[0].getMessage()


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (8, 9), (9, 0), (12, 0)])
def test_startup_on_bf16_gpus_changes_nothing_and_stays_quiet(fake_comfy, caplog, capability):
    models, set_device = fake_comfy
    set_device(capability)
    with caplog.at_level(logging.DEBUG, logger="H3Kit"):
        assert not turing.apply_turing_fp16_at_startup().apply
    assert models.LTXV.supported_inference_dtypes == [torch.bfloat16, torch.float32]
    assert _h3kit_lines(caplog) == []


def test_startup_opt_out_leaves_ltx_and_says_so(fake_comfy, caplog, monkeypatch):
    models, set_device = fake_comfy
    set_device((7, 5))
    monkeypatch.setenv(turing.OPT_OUT_ENV, "0")
    with caplog.at_level(logging.DEBUG, logger="H3Kit"):
        assert not turing.apply_turing_fp16_at_startup().apply
    assert models.LTXV.supported_inference_dtypes == [torch.bfloat16, torch.float32]
    assert len(_h3kit_lines(caplog)) == 1


def test_plain_import_touches_neither_comfy_nor_cuda():
    code = ("import sys, torch, h3kit; "
            "assert not [m for m in sys.modules if m == 'comfy' or m.startswith('comfy.')]; "
            "assert not torch.cuda.is_initialized(); print('clean')")
    done = run_process([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "clean" in done.stdout


# ------------------------------------------------------------------------------------------ F10

LTX_CONVROT = "ltx-2.5-22b-distilled-transformer-int8_convrot.safetensors"


def test_f10_int8_convrot_ltx_on_sm75_warns_with_the_gguf_fix():
    warning = turing.int8_convrot_refine_warning(LTX_CONVROT, (7, 5))
    assert warning and "Q4_K_M" in warning and "NaN" in warning


@pytest.mark.parametrize("source, capability", [
    (LTX_CONVROT, (8, 9)),  # other GPUs are fine
    (LTX_CONVROT, None),
    ("ltx-2.5-22b-distilled-transformer-bf16-Q4_K_M.gguf", (7, 5)),  # the fix itself
    ("minimax_h3_fl2va_pruned_int8_convrot.safetensors", (7, 5)),  # H3's own convrot works on sm_75
])
def test_f10_no_warning_outside_the_failing_combination(source, capability):
    assert turing.int8_convrot_refine_warning(source, capability) is None


def _patcher(config_name="LTXAV", quant=None, device="cpu", weight=torch.bfloat16, cast=None):
    config_cls = type(config_name, (), {})
    config = config_cls()
    config.quant_config = quant
    base = types.SimpleNamespace(model_config=config, manual_cast_dtype=cast)

    class Patcher:
        def __init__(self):
            self.model, self.load_device, self.object_patches = base, torch.device(device), {}

        def clone(self):
            twin = Patcher()
            twin.object_patches = dict(self.object_patches)
            return twin

        def model_dtype(self):
            return weight

        def get_model_object(self, name):
            return self.object_patches.get(name, getattr(self.model, name))

        def set_model_compute_dtype(self, dtype):
            self.object_patches["manual_cast_dtype"] = dtype

    return Patcher()


def test_f10_quant_config_of_an_ltx_model_is_recognised():
    quant = {"transformer_blocks.0.attn1.to_q": {"format": "int8_tensorwise", "convrot": True}}
    assert turing.int8_convrot_refine_warning(_patcher("LTXAV", quant), (7, 5))
    assert turing.int8_convrot_refine_warning(_patcher("MiniMaxH3", quant), (7, 5)) is None
    assert turing.int8_convrot_refine_warning(quant, (7, 5), is_ltx=True)
    plain_int8 = {"x": {"format": "int8_tensorwise"}}
    assert turing.int8_convrot_refine_warning(_patcher("LTXAV", plain_int8), (7, 5)) is None


# ------------------------------------------------------------------------------ H3KitComputeDtype

def test_compute_dtype_fp16_clones_and_reports_the_dtype_used():
    model = _patcher()
    patched, report = turing_nodes.H3KitComputeDtype().apply(model, "fp16")
    facts = json.loads(report)
    assert patched is not model and model.object_patches == {}
    assert patched.get_model_object("manual_cast_dtype") is torch.float16
    assert facts["compute_dtype"] == "float16" and facts["compute_dtype_before"] == "bfloat16" and facts["changed"]


def test_compute_dtype_auto_without_cuda_returns_the_input_and_says_why():
    model = _patcher()
    patched, report = turing_nodes.H3KitComputeDtype().apply(model, "auto")
    assert patched is model
    assert "no CUDA device" in json.loads(report)["note"]


def test_f04_compute_dtype_auto_on_sm75_picks_fp16_and_warns_f10(monkeypatch):
    monkeypatch.setattr(turing_nodes, "device_capability", lambda device: (7, 5))
    quant = {"a": {"format": "int8_tensorwise", "convrot": True}}
    patched, report = turing_nodes.H3KitComputeDtype().apply(_patcher("LTXV", quant, weight=torch.float16), "auto")
    facts = json.loads(report)
    assert facts["compute_dtype"] == "float16" and facts["capability"] == "sm_75"
    assert any("Q4_K_M" in w for w in facts["warnings"])


def test_compute_dtype_refuses_bf16_on_sm75(monkeypatch):
    monkeypatch.setattr(turing_nodes, "device_capability", lambda device: (7, 5))
    with pytest.raises(H3KitInputError, match="choose fp16"):
        turing_nodes.H3KitComputeDtype().apply(_patcher(), "bf16")


def test_every_input_has_a_tooltip():
    for node in (turing_nodes.H3KitComputeDtype, turing_nodes.H3KitSageAttention):
        for name, (_, options) in node.INPUT_TYPES()["required"].items():
            assert options.get("tooltip"), f"{node.__name__}.{name}"
