"""F01 guard (H3KitLatentGuard with `reference`): pinned to the documented numbers, on data that fools weaker checks.

The promise (README F01, failure-catalogue F01): the refine output's correlation with its input is 0.235 on the
broken stack and >= 0.74 on a healthy one; the guard stops the run below `min_correlation`, default 0.5. The
correlation is Pearson's: centred (an offset shared by both latents proves nothing) and signed (anti-correlated
output is garbage, not a refinement). Every number below is a literal from those documents, never the module's own.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.pipeline import H3KitLatentGuard

SHAPE = (1, 128, 3, 12, 16)  # a small LTX-2.5 video latent [B, C, T, H, W]
DEFAULT_MIN_CORRELATION = 0.5  # README: "correlation below min_correlation 0.5 (F01)"
HEALTHY = 0.74  # failure-catalogue F01: "input + noise would still give 0.74"
GARBAGE = 0.235  # failure-catalogue F01: "its correlation with its input is 0.235"


def noise(seed: int, shape=SHAPE) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def with_correlation(reference: torch.Tensor, r: float, seed: int) -> torch.Tensor:
    """A latent whose Pearson correlation with `reference` is exactly r (unit spread, zero mean)."""
    a = reference - reference.mean()
    a = a / a.norm()
    b = noise(seed, reference.shape)
    b = b - b.mean()
    b = b - (b * a).sum() * a
    b = b / b.norm()
    out = r * a + math.sqrt(1.0 - r * r) * b
    return (out / out.std()).float()


def pearson(a: torch.Tensor, b: torch.Tensor) -> float:
    """The test's own centred correlation, independent of the code under test."""
    x, y = a.double().flatten(), b.double().flatten()
    return float(torch.corrcoef(torch.stack([x, y]))[0, 1])


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """The weaker (uncentred) check the guard must not be."""
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def guard(out: torch.Tensor, reference: torch.Tensor, **kwargs) -> dict:
    passed, report = H3KitLatentGuard().execute({"samples": out}, reference={"samples": reference}, **kwargs)
    assert passed["samples"] is out
    return json.loads(report)


def refused(out: torch.Tensor, reference: torch.Tensor, **kwargs) -> H3KitInputError:
    with pytest.raises(H3KitInputError, match="correlates") as err:
        guard(out, reference, **kwargs)
    assert "F01" in err.value.fix
    return err.value


def test_f01_default_threshold_is_the_documented_0_5():
    options = H3KitLatentGuard.INPUT_TYPES()["required"]["min_correlation"][1]
    assert options["default"] == DEFAULT_MIN_CORRELATION
    reference = noise(1).float()
    below, above = with_correlation(reference, 0.49, seed=2), with_correlation(reference, 0.51, seed=2)
    refused(below, reference)  # no min_correlation given: the default applies
    assert guard(above, reference)["status"] == "ok"


def test_f01_documented_garbage_0_235_is_stopped_and_healthy_0_74_passes():
    reference = noise(3).float()
    garbage, healthy = with_correlation(reference, GARBAGE, seed=4), with_correlation(reference, HEALTHY, seed=5)
    assert pearson(garbage, reference) == pytest.approx(GARBAGE, abs=1e-4)
    err = refused(garbage, reference, min_correlation=DEFAULT_MIN_CORRELATION)
    assert "0.235" in err.problem
    report = guard(healthy, reference, min_correlation=DEFAULT_MIN_CORRELATION)
    assert report["status"] == "ok" and report["correlation"]["samples"] == pytest.approx(HEALTHY, abs=1e-3)
    assert report["min_correlation"] == DEFAULT_MIN_CORRELATION


@pytest.mark.parametrize("offset", [2.0, -2.0, 5.0])
def test_f01_independent_latents_with_a_shared_offset_mean_fail(offset):
    # Two unrelated latents of mean 2: cosine 4/5 = 0.8 would pass a 0.5 (even a 0.74) threshold; Pearson ~0.
    reference, garbage = noise(6) + offset, noise(7) + offset
    assert cosine(garbage, reference) > HEALTHY  # the data fools an uncentred check
    assert abs(pearson(garbage, reference)) < 0.05
    refused(garbage.float(), reference.float())


def test_f01_healthy_refine_with_an_offset_is_not_a_false_alarm():
    # A good refine whose output mean moved (LTX latents are not zero-mean per stream): cosine ~0.35, Pearson 0.74.
    reference = noise(8).float()
    healthy = with_correlation(reference, HEALTHY, seed=9) + 3.0
    assert cosine(healthy, reference) < DEFAULT_MIN_CORRELATION  # an uncentred check raises a false alarm here
    report = guard(healthy, reference)
    assert report["status"] == "ok" and report["correlation"]["samples"] == pytest.approx(HEALTHY, abs=1e-3)


@pytest.mark.parametrize("r", [-1.0, -HEALTHY, -0.9])
def test_f01_anti_correlated_garbage_fails_and_keeps_its_sign(r):
    reference = noise(10).float()
    flipped = -reference if r == -1.0 else with_correlation(reference, r, seed=11)
    assert abs(pearson(flipped, reference)) >= HEALTHY  # |corr| would pass
    err = refused(flipped, reference)
    assert f"{r:.3f}" in err.problem
    report = guard(flipped, reference, mode="warn")
    assert report["status"] == "problems" and report["correlation"]["samples"] == pytest.approx(r, abs=1e-3)


@pytest.mark.parametrize("scale", [0.05, 0.3, 3.0, 40.0])
def test_f01_scaled_copy_passes(scale):
    # A refine that only changed the latent's spread is perfectly correlated with its input.
    reference = noise(12).float()
    report = guard(reference * scale + 1.5, reference)
    assert report["status"] == "ok" and report["correlation"]["samples"] == pytest.approx(1.0, abs=1e-6)


def test_f01_offset_reference_and_healthy_output_of_another_scale_pass():
    reference = (noise(13) * 0.2 + 2.0).float()
    healthy = with_correlation(reference, 0.8, seed=14) * 5.0 - 1.0
    report = guard(healthy, reference)
    assert report["correlation"]["samples"] == pytest.approx(0.8, abs=1e-3)


def test_f01_min_correlation_is_compared_strictly_below():
    reference = noise(15).float()
    out = with_correlation(reference, 0.6, seed=16)
    measured = guard(out, reference, min_correlation=0.0)["correlation"]["samples"]
    assert guard(out, reference, min_correlation=round(measured, 4) - 1e-4)["status"] == "ok"
    refused(out, reference, min_correlation=round(measured, 4) + 1e-3)
