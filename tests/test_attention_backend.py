"""Issue 25: H3KitAttentionBackend (nodes/attention.py, kernels/sdpa_backend.py) on CPU.

What is pinned here: the backend function returns exactly what the host's `attention_pytorch` returns for every call
form (one backend forced for both: bitwise), the override runs the host's attention unchanged wherever the backend
cannot serve a call (CPU tensors, small inputs, grouped-query attention, a backend error), counts every path, chains
to an override installed before it, and the node reports which backend will run and why not. cuDNN itself needs a
CUDA GPU: its speed and its rounding difference to the host's flash kernel are measured on an H200
(docs/benchmarks.md, scripts/bench_lowvram.py --host, scripts/bench_clip.py).
"""

from __future__ import annotations

import copy
import json
import logging

import lowvram_fakes as fakes
import pytest
import torch
import torch.nn.functional as F
from h3kit.kernels import sdpa_backend
from h3kit.nodes import attention as node_module
from h3kit.nodes.attention import HOST_PATH_SMALL, BackendOverride, H3KitAttentionBackend
from h3kit.nodes.common import H3KitInputError
from torch.nn.attention import SDPBackend, sdpa_kernel


def host_attention_pytorch(q, k, v, heads, mask=None, skip_reshape=False, skip_output_reshape=False, **kwargs):
    """ComfyUI 0.33.0's attention_pytorch call form (comfy/ldm/modules/attention.py), restated."""
    if skip_reshape:
        b, _, _, dim_head = q.shape
    else:
        b, _, dim_head = q.shape
        dim_head //= heads
        q, k, v = (t.view(b, -1, heads, dim_head).transpose(1, 2) for t in (q, k, v))
    if mask is not None and mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if mask is not None and mask.ndim == 3:
        mask = mask.unsqueeze(1)
    extra = {key: value for key, value in kwargs.items() if key == "scale"}
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False, **extra)
    if not skip_output_reshape:
        out = out.transpose(1, 2).reshape(b, -1, heads * dim_head)
    return out


def _qkv(skip_reshape: bool, heads=4, tokens=48, dim=16, kv_tokens=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kv_tokens = kv_tokens or tokens
    if skip_reshape:
        shapes = [(2, heads, tokens, dim), (2, heads, kv_tokens, dim), (2, heads, kv_tokens, dim)]
    else:
        shapes = [(2, tokens, heads * dim), (2, kv_tokens, heads * dim), (2, kv_tokens, heads * dim)]
    return [torch.randn(shape, generator=gen) for shape in shapes]


MASKS = {"none": None, "2d": (48, 40), "3d": (2, 48, 40), "4d": (2, 1, 48, 40)}


@pytest.mark.parametrize("skip_reshape", [False, True])
@pytest.mark.parametrize("skip_output_reshape", [False, True])
@pytest.mark.parametrize("mask_kind", sorted(MASKS))
def test_backend_function_is_the_host_call_form_bitwise(skip_reshape, skip_output_reshape, mask_kind):
    q, k, v = _qkv(skip_reshape, kv_tokens=40)
    mask = None if MASKS[mask_kind] is None else torch.randn(MASKS[mask_kind], generator=torch.Generator().manual_seed(3))
    with sdpa_kernel([SDPBackend.MATH]):
        host = host_attention_pytorch(q, k, v, 4, mask=mask, skip_reshape=skip_reshape,
                                      skip_output_reshape=skip_output_reshape, scale=0.3)
    ours = sdpa_backend.attention(q, k, v, 4, "math", mask=mask, skip_reshape=skip_reshape,
                                  skip_output_reshape=skip_output_reshape, scale=0.3)
    assert ours.shape == host.shape and torch.equal(ours, host)


def test_backend_that_cannot_run_is_reported_not_raised_as_a_torch_error():
    q, k, v = _qkv(True)
    with pytest.raises(sdpa_backend.BackendUnavailable, match="cudnn cannot run .* on cpu"):
        sdpa_backend.attention(q, k, v, 4, "cudnn", skip_reshape=True)


def test_chosen_backend_names_torch_dispatch():
    q, k, v = _qkv(True)
    with sdpa_kernel([SDPBackend.MATH]):
        assert sdpa_backend.chosen_backend(q, k, v) == "MATH"


def _host_fn_calls():
    calls = []

    def original(q, k, v, heads, **kwargs):
        calls.append(kwargs)
        return host_attention_pytorch(q, k, v, heads, **kwargs)
    return original, calls


def test_cpu_calls_run_the_host_attention_unchanged_and_are_counted(caplog):
    override = BackendOverride("cudnn")
    original, calls = _host_fn_calls()
    q, k, v = _qkv(True)
    with caplog.at_level(logging.WARNING, logger="H3Kit"):
        out = override(original, q, k, v, 4, skip_reshape=True, transformer_options={}, _inside_attn_wrapper=True)
    assert torch.equal(out, host_attention_pytorch(q, k, v, 4, skip_reshape=True))
    assert calls[0]["transformer_options"] == {} and calls[0]["_inside_attn_wrapper"] is True
    assert override.paths == {"host: not a CUDA tensor (cpu)": 1}
    assert "sampling done: 1 attention calls, 0 on torch SDPA cudnn; 1x host: not a CUDA tensor (cpu)" in override.summary()
    assert any("the host's attention runs instead of cudnn" in r.getMessage() for r in caplog.records)


def _pretend_cuda(monkeypatch):
    """Let CPU tensors through the device check (the real check needs a GPU); the rest of the logic is unchanged."""
    monkeypatch.setattr(node_module, "on_cuda", lambda q: True)


def test_served_calls_equal_the_backend_function_and_count_as_the_backend(monkeypatch):
    _pretend_cuda(monkeypatch)
    override = BackendOverride("math")
    original, calls = _host_fn_calls()
    q, k, v = _qkv(False, tokens=2048)
    out = override(original, q, k, v, 4, mask=None, skip_reshape=False, transformer_options={})
    assert not calls and override.paths == {"math": 1}
    assert torch.equal(out, sdpa_backend.attention(q, k, v, 4, "math"))


def test_a_failing_backend_is_remembered_per_signature_and_falls_back(monkeypatch):
    _pretend_cuda(monkeypatch)
    attempts = []

    def failing(*args, **kwargs):
        attempts.append(1)
        raise sdpa_backend.BackendUnavailable("head size 16 unsupported")
    monkeypatch.setattr(sdpa_backend, "attention", failing)
    override = BackendOverride("cudnn")
    original, calls = _host_fn_calls()
    q, k, v = _qkv(True, tokens=2048)
    for _ in range(3):
        out = override(original, q, k, v, 4, skip_reshape=True)
    assert len(attempts) == 1 and len(calls) == 3  # tried once per signature, then straight to the host
    assert override.paths == {"host: head size 16 unsupported": 3}
    assert torch.equal(out, host_attention_pytorch(q, k, v, 4, skip_reshape=True))


def test_small_inputs_and_grouped_query_attention_stay_on_the_host(monkeypatch):
    _pretend_cuda(monkeypatch)
    override = BackendOverride("cudnn")
    original, calls = _host_fn_calls()
    q, k, v = _qkv(True)  # 2 * 4 * 48 * 16 elements: under the host's small-input cut
    override(original, q, k, v, 4, skip_reshape=True)
    assert override.paths == {HOST_PATH_SMALL: 1}
    override.reset()
    q, k, v = _qkv(True, tokens=2048)  # 2 * 4 * 2048 * 16 = 262144 elements: over the cut
    override(original, q, k, v, 4, skip_reshape=True, enable_gqa=True)
    assert override.paths == {"host: grouped-query attention": 1}
    assert calls[-1]["enable_gqa"] is True


def test_host_path_goes_through_an_override_installed_before(monkeypatch):
    seen = []

    def previous(original_fn, q, k, v, heads, **kwargs):
        seen.append(heads)
        return original_fn(q, k, v, heads, **kwargs)
    override = BackendOverride("cudnn", previous)
    original, calls = _host_fn_calls()
    q, k, v = _qkv(True)
    override(original, q, k, v, 4, skip_reshape=True)
    assert seen == [4] and len(calls) == 1


def test_counts_start_at_zero_each_sampling_and_are_logged(caplog):
    override = BackendOverride("cudnn")
    original, _calls = _host_fn_calls()
    q, k, v = _qkv(True)
    override(original, q, k, v, 4, skip_reshape=True)

    def sampling():
        return override(original, q, k, v, 4, skip_reshape=True)
    with caplog.at_level(logging.INFO, logger="H3Kit"):
        override.sampling_wrapper(sampling)
    lines = [r for r in caplog.records if "sampling done" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert "1 attention calls" in lines[0].getMessage()


def test_deep_copies_of_model_options_share_the_counter():
    override = BackendOverride("cudnn")
    options = {"transformer_options": {"optimized_attention_override": override}}
    assert copy.deepcopy(options)["transformer_options"]["optimized_attention_override"] is override


# ---------------------------------------------------------------------------- the node


def _model():
    net = fakes.H3Net(32, 2, 16, 64, layers=1)
    return fakes.FakeModelPatcher(fakes.BaseModel(net))


def test_node_installs_the_override_on_a_clone_and_reports_the_cpu_fallback():
    model = _model()
    patched, report_text = H3KitAttentionBackend().patch(model, "cudnn")
    report = json.loads(report_text)
    override = patched.model_options["transformer_options"]["optimized_attention_override"]
    assert isinstance(override, BackendOverride) and override.backend == "cudnn"
    assert "optimized_attention_override" not in model.model_options["transformer_options"]
    assert report["backend"] == "torch SDPA cudnn"
    assert "not a CUDA device" in report["probe"] and report["fallbacks"][0] == report["probe"]


@pytest.mark.skipif(not fakes.HAS_KITCHEN_ROPE, reason=fakes.NO_KITCHEN_ROPE)
def test_node_output_on_cpu_is_bitwise_the_hosts():
    """Through the host-semantics H3 block (q/k/v in containers, the override hook): the patched model's output is
    the unpatched one's, because every CPU call runs the host's attention."""
    model = _model()
    patched, _report = H3KitAttentionBackend().patch(model, "cudnn")
    x, t_emb, segments, rope = fakes.h3_inputs(96, 32, 8, torch.float32)
    host = model.run(x.clone(), t_emb, segments, rope)
    ours = patched.run(x.clone(), t_emb, segments, rope)
    assert torch.equal(host, ours)
    override = patched.model_options["transformer_options"]["optimized_attention_override"]
    assert override.paths == {"host: not a CUDA tensor (cpu)": 1}


def test_reapplying_replaces_its_own_override_and_keeps_a_foreign_one():
    def foreign(original_fn, *args, **kwargs):
        return original_fn(*args, **kwargs)
    model = _model()
    model.model_options = {"transformer_options": {"optimized_attention_override": foreign}}
    once, report1 = H3KitAttentionBackend().patch(model, "cudnn")
    twice, _report2 = H3KitAttentionBackend().patch(once, "efficient")
    outer = twice.model_options["transformer_options"]["optimized_attention_override"]
    assert outer.backend == "efficient" and outer.previous is foreign
    assert "another attention override (function)" in json.loads(report1)["warnings"][0]


def test_unknown_backend_names_node_input_value_and_fix():
    with pytest.raises(H3KitInputError, match=r"H3KitAttentionBackend: input 'backend' = 'sage'.*choose one of cudnn"):
        H3KitAttentionBackend().patch(_model(), "sage")


def test_small_input_cut_is_the_hosts():
    """ComfyUI 0.33.0's comfy/ops.py: `if q.nelement() < 1024 * 128` -> default SDPA (cuDNN is slower there)."""
    assert sdpa_backend.SMALL_INPUT_ELEMENTS == 131072


def test_choices_are_exact_backends_only():
    """Every choice is an exact softmax-attention kernel of torch SDPA (no int8 / sparse approximation)."""
    assert node_module.CHOICES == ("cudnn", "flash", "efficient")
    assert set(node_module.CHOICES) <= set(sdpa_backend.BACKEND_NAMES)
