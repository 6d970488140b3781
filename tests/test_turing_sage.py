"""SageAttention launcher (F07, F08) and the override's fallbacks, on CPU; Triton compile checks where possible.

The launcher tests need sageattention 1.0.6 (its kernel sources) and Triton 3.2.0 (compiling for sm_75 needs no
GPU). They skip where those are missing; CI runs them in a venv of their own with H3KIT_REQUIRE_SAGE=1, where a
skip is a failure (.ci/run). Numbers are literals from README F07/F08 and docs/benchmarks.md.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import importlib.util
import logging
import os
from ast import literal_eval as literal
from pathlib import Path

import pytest
import torch
from h3kit.kernels import sage_turing as st
from h3kit.nodes.turing import SageAttentionOverride

QUANTIZER_BLOCKS = (128, 64)  # README F08: "BLOCK_M/BLOCK_N from the quantizer's block sizes (128/64)"
SM75_SHARED_MEMORY = 65_536  # bytes per block on Turing
PACKAGE_LAUNCH_FP32 = 67_584  # README F07: "out of resource: shared memory, Required: 67584"
TURING_SAFE_96_128 = 34_816  # README F07: "34,816 B at head_dim 96/128 instead of 67,584 B"


def _missing(reason: str) -> None:
    """Skip here; fail in the CI job that installed the packages to run exactly these tests."""
    if os.environ.get("H3KIT_REQUIRE_SAGE") == "1":
        pytest.fail(f"H3KIT_REQUIRE_SAGE=1 but {reason}")
    pytest.skip(reason)


def _sage_source(module: str) -> ast.Module:
    spec = importlib.util.find_spec("sageattention")
    if spec is None or not spec.submodule_search_locations:
        _missing("sageattention is not installed here (pip install sageattention==1.0.6)")
    path = Path(next(iter(spec.submodule_search_locations))) / f"{module}.py"
    return ast.parse(path.read_text())


def _function_args(tree: ast.Module, name: str) -> list[str]:
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    return [arg.arg for arg in node.args.args]


def _arguments(head_dim: int, heads: int = 4, kv_heads: int = 2, qo_len: int = 300, kv_len: int = 200) -> dict:
    q = torch.zeros(2, heads, qo_len, head_dim, dtype=torch.int8)
    k = torch.zeros(2, kv_heads, kv_len, head_dim, dtype=torch.int8)
    v = torch.zeros(2, kv_heads, kv_len, head_dim, dtype=torch.float16)
    out = torch.empty(2, heads, qo_len, head_dim, dtype=torch.float16)
    return st.kernel_arguments(q, k, v, torch.zeros(1), torch.zeros(1), out, st.turing_safe_config(head_dim))


@pytest.mark.parametrize("head_dim", st.SUPPORTED_HEAD_DIMS)
def test_f08_launcher_arguments_match_the_kernel_signature(head_dim):
    expected = _function_args(_sage_source(st.KERNEL_MODULES[head_dim]), "_attn_fwd")
    args = _arguments(head_dim)
    assert sorted(args) == sorted(expected)
    assert args["num_kv_groups"] == 2 and args["H"] == 4 and args["qo_len"] == 300 and args["kv_len"] == 200
    assert args["stride_qn"] == head_dim and args["stride_kh"] == 200 * head_dim


@pytest.mark.parametrize("head_dim", st.SUPPORTED_HEAD_DIMS)
def test_f08_block_sizes_are_the_quantizers_for_every_config(head_dim):
    module, function = st.QUANT_FUNCTIONS[head_dim]
    tree = _sage_source(module)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    defaults = dict(zip([a.arg for a in node.args.args][-len(node.args.defaults):],
                        [literal(d) for d in node.args.defaults], strict=True))
    assert (defaults["BLKQ"], defaults["BLKK"]) == QUANTIZER_BLOCKS == (st.QUANT_BLOCK_Q, st.QUANT_BLOCK_K)
    for config in (st.turing_safe_config(head_dim), st.package_default_config(head_dim, torch.float32),
                   st.choose_config((7, 5), head_dim, torch.float32), st.choose_config((9, 0), head_dim, torch.float16)):
        args = _arguments(head_dim)
        assert (config.block_m, config.block_n) == (defaults["BLKQ"], defaults["BLKK"])
        assert (args["BLOCK_M"], args["BLOCK_N"]) == (defaults["BLKQ"], defaults["BLKK"])


@pytest.mark.parametrize("blocks", [{"block_m": 64}, {"block_m": 256}, {"block_n": 128}, {"block_n": 32},
                                    {"block_m": 64, "block_n": 128}])
def test_f08_a_config_with_other_block_sizes_is_refused(blocks):
    wrong = dataclasses.replace(st.turing_safe_config(128), **blocks)
    q = torch.zeros(1, 2, 8, 128)
    with pytest.raises(ValueError, match="F08"):
        st.sage_attention_hnd(q, q, q, wrong)


class _FakePackage:
    """sageattention 1.0.6 stand-in: records what the launcher passes to the quantizer and to the kernel."""

    def __init__(self):
        self.quant_kwargs: dict = {}
        self.launches: list = []

    def attr(self, module: str, name: str):
        if name == "_attn_fwd":
            return self
        return self.quant

    def quant(self, q, k, **kwargs):
        self.quant_kwargs = kwargs
        return q.to(torch.int8), torch.ones(1), k.to(torch.int8), torch.ones(1)

    def __getitem__(self, grid):
        return lambda **kwargs: self.launches.append((grid, kwargs))


@pytest.mark.parametrize("head_dim", [64, 96, 128])
def test_f08_quantizer_and_kernel_get_the_same_block_sizes(monkeypatch, head_dim):
    # Runs on CPU without the package: the launcher's wiring, with the documented 128/64 as literals.
    fake = _FakePackage()
    monkeypatch.setattr(st, "_package_attr", fake.attr)
    monkeypatch.setattr(st, "check_supported", lambda *a: None)
    q = torch.randn(1, 2, 300, head_dim)
    out = st.sage_attention_hnd(q, q, q, st.turing_safe_config(head_dim))
    assert out.shape == q.shape and out.dtype == q.dtype
    assert (fake.quant_kwargs["BLKQ"], fake.quant_kwargs["BLKK"]) == QUANTIZER_BLOCKS
    ((grid, kwargs),) = fake.launches
    assert (kwargs["BLOCK_M"], kwargs["BLOCK_N"]) == QUANTIZER_BLOCKS
    assert grid[0] == 3  # ceil(300 / BLOCK_M 128)
    assert kwargs["Out"].dtype == torch.float16  # README F07: fp16 output tile for an fp32 caller, cast after


def test_f07_turing_safe_on_sm7x_only_the_package_launch_from_sm80():
    for capability in ((7, 5), (7, 0)):
        config = st.choose_config(capability, 128, torch.float32)
        assert (config.name, config.num_stages, config.fp16_output) == ("turing-safe", 1, True)
    for capability in ((8, 0), (8, 6), (9, 0), (12, 0)):
        assert st.choose_config(capability, 128, torch.float32).name == "package-default"


def test_grid_matches_each_kernels_program_ids():
    assert st.kernel_grid(96, batch=2, heads=3, qo_len=129, block_m=128) == (2, 6, 1)  # h96: (m, b*h, 1)
    assert st.kernel_grid(128, batch=2, heads=3, qo_len=128, block_m=128) == (1, 3, 2)  # (m, h, b)


def test_f07_turing_config_is_chosen_on_sm75_only():
    assert st.choose_config((7, 5), 128, torch.float32).name == "turing-safe"
    assert st.choose_config((7, 5), 128, torch.float32).num_stages == 1
    assert st.choose_config((8, 6), 128, torch.float32).name == "package-default"


def _compile_or_skip(head_dim, config, out_dtype):
    for package in ("triton", "sageattention"):
        if importlib.util.find_spec(package) is None:
            _missing(f"{package} is not installed here; the sm_75 compile check needs it")
    import triton
    from h3kit.scripts.bench_sage_turing import compiled_shared_memory

    try:
        return compiled_shared_memory(head_dim, config, out_dtype, (7, 5))
    except RuntimeError as exc:  # Triton >= 3.3 cannot lower int8 tl.dot for sm_75 (PassManager failure)
        _missing(f"Triton {triton.__version__} cannot compile sageattention's int8 kernels for sm_75 "
                 f"({str(exc).splitlines()[0][:80]}); Triton 3.2.0 can")


@pytest.mark.parametrize("head_dim", st.SUPPORTED_HEAD_DIMS)
def test_f07_turing_safe_launch_fits_64k_shared_memory_on_sm75(head_dim):
    shared = _compile_or_skip(head_dim, st.turing_safe_config(head_dim), torch.float32)
    assert 0 < shared <= SM75_SHARED_MEMORY
    if head_dim in (96, 128):
        assert shared == TURING_SAFE_96_128


def test_f07_package_launch_for_fp32_models_overflows_sm75():
    shared = _compile_or_skip(128, st.package_default_config(128, torch.float32), torch.float32)
    assert shared == PACKAGE_LAUNCH_FP32 > SM75_SHARED_MEMORY


# ------------------------------------------------------------------------------------ override

def _reference(q, k, v, heads, mask=None, skip_reshape=False, skip_output_reshape=False, **kwargs):
    """The host attention's contract, in plain torch: [B,S,H*D] in and out unless told otherwise."""
    if not skip_reshape:
        b, s, inner = q.shape
        q, k, v = (t.view(b, -1, heads, inner // heads).transpose(1, 2) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if skip_output_reshape:
        return out
    return out.transpose(1, 2).reshape(out.shape[0], -1, out.shape[1] * out.shape[-1])


def test_cpu_calls_fall_back_to_the_original_and_are_counted(caplog):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 16, 4 * 64) for _ in range(3))
    override = SageAttentionOverride("auto")
    out = override(_reference, q, k, v, 4, transformer_options={})
    assert torch.equal(out, _reference(q, k, v, 4))
    mask = torch.zeros(16, 16)
    override(_reference, q, k, v, 4, mask=mask)
    assert override.calls == 2 and override.sage_calls == 0
    assert sum(override.fallbacks.values()) == 2
    assert any("mask" in reason for reason in override.fallbacks)
    with caplog.at_level(logging.INFO, logger="H3Kit"):
        result = override.sampling_wrapper(lambda *a, **kw: (override(_reference, q, k, v, 4), "sampled")[1])
    assert result == "sampled"
    summary = [r.getMessage() for r in caplog.records if "sampling done" in r.getMessage()]
    assert summary and "1 attention calls, 0 on SageAttention" in summary[0] and "1 fell back" in summary[0]


def test_unsupported_head_dim_falls_back_with_the_reason():
    q = torch.randn(1, 2, 8, 80)
    override = SageAttentionOverride("auto")
    out = override(_reference, q, q, q, 2, skip_reshape=True, skip_output_reshape=True)
    assert torch.equal(out, _reference(q, q, q, 2, skip_reshape=True, skip_output_reshape=True))
    assert list(override.fallbacks) == ["head_dim 80 (kernels exist for 64, 96, 128)"]


def test_counters_are_shared_by_copies_of_the_patch():
    override = SageAttentionOverride("auto")
    options = {"transformer_options": {"optimized_attention_override": override}}
    assert copy.deepcopy(options)["transformer_options"]["optimized_attention_override"] is override
    assert copy.copy(override) is override


def test_fallback_goes_through_a_previously_installed_override():
    seen = []

    def previous(original_fn, q, k, v, heads, **kwargs):
        seen.append(heads)
        return original_fn(q, k, v, heads, **kwargs)

    q = torch.randn(1, 8, 2 * 64)
    SageAttentionOverride("auto", previous)(_reference, q, q, q, 2)
    assert seen == [2]
