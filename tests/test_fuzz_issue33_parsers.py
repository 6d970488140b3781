"""Hypothesis fuzz of the parsers and bounds issues 32 and 33 added: the JSON value budget never undercounts what a
parse builds, and hostile input to the preflight body parser, the numeric option type, the model-paths YAML reader
and the draft reader ends in the documented refusal, never a traceback. Short in CI ("ci" profile), long on demand
(`pytest --hypothesis-profile=long tests/test_fuzz_issue33_parsers.py`)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
from h3kit.adapters import bounded_json, model_layout, preflight_request
from h3kit.nodes import draft
from h3kit.nodes.cond_cache_format import CacheError, read_stored
from h3kit.scripts.options import Number
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40)


def built(value) -> int:
    """Every value a parse builds: containers, scalars and object keys."""
    if isinstance(value, dict):
        return 1 + sum(1 + built(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(built(v) for v in value)
    return 1


@given(JSON_VALUES, st.booleans())
def test_the_value_budget_never_undercounts_what_parsing_builds(value, spaced):
    """count_values is the bound checked before parsing: an undercount would let a body past its budget."""
    text = json.dumps(value, indent=1 if spaced else None)
    assert bounded_json.count_values(text) >= built(json.loads(text))
    assert bounded_json.count_values(text.encode()) == bounded_json.count_values(text)


@given(st.integers(min_value=0, max_value=50))
def test_the_value_budget_boundary_is_inclusive(extra):
    text = json.dumps([[]] * extra)
    counted = bounded_json.count_values(text)
    assert bounded_json.check_budget(text, "x", counted) == counted  # value == limit is read
    with pytest.raises(bounded_json.JSONLimitError, match="JSON values"):
        bounded_json.check_budget(text, "x", counted - 1)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200), max_size=5) | st.builds(
    lambda v: [json.dumps(v).encode()], JSON_VALUES))
def test_a_hostile_preflight_body_is_a_graph_or_a_refusal(chunks):
    try:
        graph, _ = preflight_request.parse_body(chunks, lambda: None)
    except preflight_request.RequestRefused as exc:
        assert 400 <= exc.status < 500 and "\n" not in str(exc.args[0] if exc.args else "")
        return
    assert isinstance(graph, dict)


@given(st.text(max_size=30), st.sampled_from([float, int]))
def test_a_numeric_option_is_finite_and_above_zero_or_an_argparse_error(text, kind):
    try:
        value = Number(kind)(text)
    except (argparse.ArgumentTypeError, ValueError):
        return
    assert isinstance(value, kind) and math.isfinite(value) and value > 0


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("0", False), ("-1", False), ("nan", False), ("inf", False),
                                          ("1e-9", True)])
def test_a_numeric_option_at_its_boundary(text, ok):
    if ok:
        assert Number(float)(text) > 0
    else:
        with pytest.raises(argparse.ArgumentTypeError):
            Number(float)(text)


YAML_TEXT = st.text(alphabet=st.sampled_from(list("abc: \n-'\"[]{}&*!|>#/.~0")), max_size=200)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(YAML_TEXT)
def test_a_hostile_model_paths_yaml_is_folders_or_a_valueerror(tmp_path, text):
    path = tmp_path / "extra_model_paths.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        found = model_layout.read_extra_paths(path)
    except ValueError as exc:
        assert str(tmp_path) in str(exc) or "YAML" in str(exc) or "config" in str(exc)
        return
    assert all(isinstance(key, str) and isinstance(folder, Path) for key, folder, _ in found)


@pytest.fixture(scope="module")
def real_draft(tmp_path_factory) -> bytes:
    """A draft as H3KitSaveDraft writes it: a bf16 latent (as a file may carry) and a float32 waveform."""
    folder = tmp_path_factory.mktemp("drafts")
    latent = {"samples": torch.randn(1, 4, 2, 3, 3).to(torch.bfloat16)}
    audio = {"waveform": torch.randn(1, 2, 64), "sample_rate": 44100}
    from h3kit.nodes.common import Report

    path, _ = draft.write_draft(folder, "d.safetensors", latent, audio, Report("H3KitSaveDraft"))
    assert read_stored(path, draft.DRAFT).value["latent"]["samples"].dtype == torch.bfloat16  # kept bitwise
    return path.read_bytes()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(st.data())
def test_a_damaged_draft_is_read_whole_or_refused_with_a_fix(tmp_path, real_draft, data):
    """Cut, flipped or foreign bytes: read_stored gives the stored value or one CacheError with its fix."""
    raw = bytearray(real_draft)
    how = data.draw(st.sampled_from(["cut", "flip", "random"]))
    if how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    elif how == "flip":
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
    else:
        raw = bytearray(data.draw(st.binary(max_size=400)))
    path = tmp_path / "d.safetensors"
    path.write_bytes(bytes(raw))
    try:
        stored = read_stored(path, draft.DRAFT)
    except CacheError as exc:
        assert exc.fix and "\n" not in exc.problem
        return
    assert isinstance(stored.value, dict)
