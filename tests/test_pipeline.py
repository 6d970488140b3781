"""Issue 3: the two-stage nodes (handoff, refine setup, latent/frame guards) on CPU tensors."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest
import torch
from h3kit.adapters.host import HostUnavailable
from h3kit.checks import facts as pm
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.pipeline import H3KitDraftToLTX, H3KitFrameGuard, H3KitLatentGuard, H3KitRefineSetup

H3_LENGTHS = list(range(5, 363, 17))


def numbered_frames(count: int, height: int = 32, width: int = 32) -> torch.Tensor:
    """Frame i is filled with (i + 1) / (count + 1), so every output frame names its source frame."""
    values = (torch.arange(count, dtype=torch.float32) + 1) / (count + 1)
    return values.view(count, 1, 1, 1).expand(count, height, width, 3).clone()


def source_index(frame: torch.Tensor, count: int) -> int:
    return round(float(frame.mean()) * (count + 1)) - 1


def handoff(frames, target=(64, 64), **kwargs):
    out = H3KitDraftToLTX().execute(frames, target[0], target[1], **kwargs)
    return out[0], out[1], out[2], out[3], json.loads(out[4])


# ------------------------------------------------------------------------------------------ frame arithmetic
def test_h3_grid_has_the_documented_lengths():
    assert H3_LENGTHS[0] == 5 and 124 in H3_LENGTHS and 243 in H3_LENGTHS and H3_LENGTHS[-1] == 362
    assert all(pm.is_h3_length(n) for n in H3_LENGTHS)
    assert not any(pm.is_h3_length(n) for n in (4, 121, 125, 240, 361))


@pytest.mark.parametrize("count", H3_LENGTHS)
def test_trim_keeps_the_longest_8n_plus_1_head(count):
    frames, _, kept, dropped, report = handoff(numbered_frames(count))
    assert (kept - 1) % 8 == 0 and kept <= count < kept + 8
    assert kept + dropped == count and frames.shape[0] == kept
    assert [source_index(f, count) for f in frames] == list(range(kept))
    assert report["encoder"]["frames"] == kept and report["source"]["on_h3_grid"]


@pytest.mark.parametrize("count", H3_LENGTHS)
def test_pad_repeats_the_last_frame_up_to_8n_plus_1(count):
    frames, _, kept, dropped, report = handoff(numbered_frames(count), frame_policy="pad_to_8n_plus_1")
    assert (kept - 1) % 8 == 0 and count <= kept < count + 8 and dropped == 0
    indices = [source_index(f, count) for f in frames]
    assert indices == list(range(count)) + [count - 1] * (kept - count)
    assert report["padded_frames"] == kept - count


def test_known_lengths_from_the_field_notes():
    # 124 -> 121 (Spark line), 243 -> 241, 345 is the only lossless 10-15 s length
    assert [handoff(numbered_frames(n))[2] for n in (124, 243, 345, 362)] == [121, 241, 345, 361]


@pytest.mark.parametrize("count", H3_LENGTHS)
def test_strict_accepts_only_8n_plus_1(count):
    if (count - 1) % 8 == 0:
        assert handoff(numbered_frames(count), frame_policy="strict")[2] == count
    else:
        with pytest.raises(H3KitInputError, match="8n\\+1") as err:
            handoff(numbered_frames(count), frame_policy="strict")
        assert "trim_to_8n_plus_1" in err.value.fix


# ------------------------------------------------------------------------------------------ sizes and geometry
@pytest.mark.parametrize(("name", "value", "nearest"), [
    ("target_width", 1056, "1024 or 1088"), ("target_height", 720, "704 or 768"), ("target_width", 32, "64"),
])
def test_f19_target_sides_off_64_name_the_nearest_sizes(name, value, nearest):
    kwargs = {"target_width": 1344, "target_height": 768, name: value}
    with pytest.raises(H3KitInputError) as err:
        H3KitDraftToLTX().execute(numbered_frames(9), kwargs["target_width"], kwargs["target_height"])
    assert err.value.input_name == name and err.value.value == value
    assert nearest in str(err.value) and "64" in str(err.value)


def test_exact_half_draft_is_passed_through_without_resampling():
    frames = torch.rand(9, 384, 672, 3, generator=torch.Generator().manual_seed(1))
    out, _, _, _, report = handoff(frames, target=(1344, 768))
    assert out.shape == (9, 384, 672, 3) and torch.equal(out, frames)
    assert report["resample"] is False


def ramp_frames(width: int, height: int, axis: str) -> torch.Tensor:
    """A ramp from 0 to 1 along x or y (pixel centres), identical in every frame and channel."""
    n = width if axis == "x" else height
    ramp = (torch.arange(n, dtype=torch.float32) + 0.5) / n
    image = ramp.view(1, n).expand(height, n) if axis == "x" else ramp.view(n, 1).expand(n, width)
    return image.unsqueeze(0).unsqueeze(-1).expand(2, height, width, 3).clone()


@pytest.mark.parametrize(("src", "target", "axis", "kept_share"), [
    # landscape 16:9 -> 7:4: scale 384/360, width 682.7 -> 683, 672 of 683 columns kept, centred
    ((640, 360), (1344, 768), "x", 672 / 683),
    # portrait draft into a landscape target: scale 672/384 = 1.75, height 1176, 384 of 1176 rows kept
    ((384, 672), (1344, 768), "y", 384 / 1176),
    # square into landscape: scale 672/512, height 672, 384 rows kept
    ((512, 512), (1344, 768), "y", 384 / 672),
    # landscape into square: scale 384/384 = 1, 384 of 672 columns kept
    ((672, 384), (768, 768), "x", 384 / 672),
])
def test_cover_crop_scales_uniformly_and_crops_the_centre(src, target, axis, kept_share):
    frames = ramp_frames(src[0], src[1], axis)
    out, _, _, _, report = handoff(frames, target=target)
    assert out.shape[1:3] == (target[1] // 2, target[0] // 2)
    line = out[0, out.shape[1] // 2, :, 0] if axis == "x" else out[0, :, out.shape[2] // 2, 0]
    # the kept window of a 0..1 ramp is centred on 0.5 and spans kept_share of it
    assert float(line.mean()) == pytest.approx(0.5, abs=0.01)
    assert float(line[-1] - line[0]) == pytest.approx(kept_share, abs=0.02)
    assert report["scale"][0] == report["scale"][1]


def test_stretch_fills_the_target_and_reports_distortion():
    frames = ramp_frames(640, 360, "x")
    out, _, _, _, report = handoff(frames, target=(1344, 768), fit="stretch")
    assert out.shape[1:3] == (384, 672)
    assert float(out[0, 0, -1, 0] - out[0, 0, 0, 0]) == pytest.approx(1.0, abs=0.02)  # nothing cropped
    assert any("distorts" in w for w in report["warnings"])


def test_alpha_is_dropped_and_values_stay_in_range():
    frames = torch.rand(9, 40, 70, 4, generator=torch.Generator().manual_seed(2))
    out, _, _, _, report = handoff(frames, target=(128, 64))
    assert out.shape == (9, 32, 64, 3) and report["alpha_dropped"] is True
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


@pytest.mark.parametrize("bad", [torch.rand(32, 32, 3), torch.rand(0, 32, 32, 3), torch.rand(9, 32, 32, 2),
                                 torch.zeros(9, 32, 32, 3, dtype=torch.uint8), "frames"])
def test_bad_frames_are_refused(bad):
    with pytest.raises(H3KitInputError) as err:
        H3KitDraftToLTX().execute(bad, 64, 64)
    assert err.value.input_name == "frames"


@pytest.mark.parametrize("fps", [0, -24.0, math.nan, math.inf])
def test_fps_must_be_finite_and_positive(fps):
    with pytest.raises(H3KitInputError) as err:
        H3KitDraftToLTX().execute(numbered_frames(9), 64, 64, fps=fps)
    assert err.value.input_name == "fps"


# ------------------------------------------------------------------------------------------ audio sync
def tone(seconds: float, rate: int, channels: int = 2) -> dict:
    t = torch.arange(round(seconds * rate), dtype=torch.float64) / rate
    wave = torch.sin(2 * math.pi * 440 * t).float()
    return {"waveform": wave.view(1, 1, -1).repeat(1, channels, 1), "sample_rate": rate}


@pytest.mark.parametrize("fps", [24.0, 25.0, 30.0, 24000 / 1001])
@pytest.mark.parametrize("rate", [32000, 44100, 48000])
def test_audio_is_cut_to_the_kept_frames_within_one_frame(fps, rate):
    count = 124
    audio = tone(count / fps + 0.01, rate)
    _, out, kept, _, report = handoff(numbered_frames(count), fps=fps, audio=audio)
    seconds = out["waveform"].shape[-1] / out["sample_rate"]
    assert abs(seconds - kept / fps) <= 1 / fps
    assert abs(seconds - kept / fps) <= 1 / rate  # in fact within one sample
    assert torch.equal(out["waveform"], audio["waveform"][..., : out["waveform"].shape[-1]])  # head kept, in order
    assert report["audio"]["out_samples"] == out["waveform"].shape[-1]


def test_short_audio_is_padded_with_silence_and_reported():
    audio = tone(2.0, 32000)
    _, out, kept, _, report = handoff(numbered_frames(124), audio=audio)
    assert out["waveform"].shape[-1] == round(kept / 24 * 32000)
    assert torch.equal(out["waveform"][..., :64000], audio["waveform"])
    assert float(out["waveform"][..., 64000:].abs().max()) == 0.0
    assert any("silence" in w for w in report["warnings"])


def test_padded_frames_get_padded_audio():
    _, out, kept, _, _ = handoff(numbered_frames(124), frame_policy="pad_to_8n_plus_1", audio=tone(124 / 24, 32000))
    assert kept == 129 and out["waveform"].shape[-1] == round(129 / 24 * 32000)


def test_missing_audio_is_reported_not_silent():
    _, out, _, _, report = handoff(numbered_frames(9))
    assert out is None and any("F21" in w for w in report["warnings"])


def test_malformed_audio_is_refused():
    with pytest.raises(H3KitInputError) as err:
        handoff(numbered_frames(9), audio={"waveform": torch.zeros(2, 100), "sample_rate": 32000})
    assert err.value.input_name == "audio"



@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_broken_draft_stops_at_the_handoff_not_at_the_refiners_guard(bad):
    """One non-finite pixel (or audio sample) of 22 frames: stage 1 failed. Passed on, the refine turns it into an
    all-NaN latent and H3KitLatentGuard blames the LTX refiner (measured on ComfyUI 0.33.0 with a NaN tiny H3)."""
    frames = numbered_frames(22)
    frames[21, 31, 31, 2] = bad
    with pytest.raises(H3KitInputError, match="the H3 draft is broken") as err:
        handoff(frames)
    assert err.value.input_name == "frames" and err.value.value == "1 NaN/Inf of 67,584 pixel values"
    assert "stage 1" in err.value.fix and "H3 model" in err.value.fix
    audio = torch.full((1, 2, 48000), 0.1)
    audio[0, 1, -1] = bad
    with pytest.raises(H3KitInputError, match="the H3 draft's audio is broken") as err:
        handoff(numbered_frames(22), audio={"waveform": audio, "sample_rate": 48000})
    assert err.value.input_name == "audio" and err.value.value == "1 NaN/Inf of 96,000 samples"

# ------------------------------------------------------------------------------------------ refine setup
@pytest.fixture
def fake_samplers(monkeypatch):
    """A stand-in for comfy.samplers with the attributes the node uses (KSampler.SAMPLERS, sampler_object)."""
    made = []
    module = types.ModuleType("comfy.samplers")
    module.KSampler = type("KSampler", (), {"SAMPLERS": ["euler", "euler_ancestral", "res_multistep"]})
    module.sampler_object = lambda name: made.append(name) or ("sampler", name)
    monkeypatch.setitem(sys.modules, "comfy", types.ModuleType("comfy"))
    monkeypatch.setitem(sys.modules, "comfy.samplers", module)
    return made


def refine(model=None, **kwargs):
    out = H3KitRefineSetup().execute(object() if model is None else model, **kwargs)
    return out[0], out[1], out[2], json.loads(out[3])


@pytest.mark.parametrize(("schedule", "expected"), [
    ("identity_0.78", [0.78, 0.643, 0.546, 0.0]), ("identity_0.5", [0.5, 0.412, 0.350, 0.0]),
])
def test_schedules_give_the_measured_sigmas(fake_samplers, schedule, expected):
    model = object()
    out_model, sampler, sigmas, report = refine(model, schedule=schedule)
    assert out_model is model and sampler == ("sampler", "euler") and fake_samplers == ["euler"]
    assert sigmas.dtype == torch.float32 and sigmas.ndim == 1
    assert sigmas.tolist() == pytest.approx(expected)
    assert report["steps"] == 3


def test_f23_first_sigma_above_the_cliff_is_refused(fake_samplers):
    with pytest.raises(H3KitInputError, match="F23") as err:
        refine(schedule="nvidia_official")
    assert "identity_0.78" in err.value.fix and "allow_repaint" in err.value.fix
    with pytest.raises(H3KitInputError, match="F23"):
        refine(schedule="manual", manual_sigmas="0.85, 0.5, 0")


def test_f23_repaint_allowed_is_reported(fake_samplers):
    _, _, sigmas, report = refine(schedule="nvidia_official", allow_repaint=True)
    assert sigmas.tolist() == pytest.approx([0.909375, 0.725, 0.421875, 0.0])
    assert any("F23" in w for w in report["warnings"])


def test_first_sigma_of_exactly_0_8_is_allowed(fake_samplers):
    assert refine(schedule="manual", manual_sigmas="0.8, 0.4, 0")[2].tolist() == pytest.approx([0.8, 0.4, 0.0])


def test_f23_first_sigma_just_above_0_8_is_refused(fake_samplers):
    with pytest.raises(H3KitInputError, match="F23"):
        refine(schedule="manual", manual_sigmas="0.8000001, 0.4, 0")


@pytest.mark.parametrize(("schedule", "expected"), [
    ("ltx2_5_stage2", [0.85, 0.725, 0.4219, 0.0]),  # official LTX-2.5 templates' stage 2
    ("ltx2_0_distilled_stage2", [0.909375, 0.725, 0.421875, 0.0]),  # official LTX-2 templates' stage 2
])
def test_f23_official_stage2_tables_need_allow_repaint_on_an_h3_draft(fake_samplers, schedule, expected):
    with pytest.raises(H3KitInputError, match="F23"):
        refine(schedule=schedule)
    _, _, sigmas, report = refine(schedule=schedule, allow_repaint=True)
    assert sigmas.tolist() == pytest.approx(expected) and report["fallbacks"] == []


def test_f23_legacy_nvidia_official_still_runs_as_the_ltx2_0_table_and_says_so(fake_samplers):
    # Saved graphs hold schedule 'nvidia_official': ComfyUI refuses a combo value that is not offered, so it stays.
    assert "nvidia_official" in H3KitRefineSetup.INPUT_TYPES()["required"]["schedule"][0]
    _, _, sigmas, report = refine(schedule="nvidia_official", allow_repaint=True)
    assert sigmas.tolist() == pytest.approx([0.909375, 0.725, 0.421875, 0.0])
    (said,) = report["fallbacks"]
    assert "'ltx2_0_distilled_stage2'" in said and "LTX-2.0" in said and "not LTX-2.5" in said


def test_f23_refine_setup_says_how_it_differs_from_the_official_ltx2_5_refine():
    schedule = H3KitRefineSetup.INPUT_TYPES()["required"]["schedule"]
    assert schedule[0] == ["identity_0.78", "identity_0.5", "ltx2_5_stage2", "ltx2_0_distilled_stage2", "manual",
                           "nvidia_official"] and schedule[1]["default"] == "identity_0.78"
    assert "ltx2_5_stage2: 0.85, 0.725, 0.4219, 0" in schedule[1]["tooltip"]
    assert "ltx2_0_distilled_stage2: 0.909375, 0.725, 0.421875, 0" in schedule[1]["tooltip"]
    text = H3KitRefineSetup.DESCRIPTION
    assert all(word in text for word in ("0.85", "euler_ancestral", "LTXVDualCFGGuider", "audio+video", "video-only"))


@pytest.mark.parametrize(("text", "expected"), [
    ("0.78, 0.643, 0.546, 0", [0.78, 0.643, 0.546, 0.0]),
    ("0.5;0.35;0", [0.5, 0.35, 0.0]),
    (" 0.5  0.2 0.0 ", [0.5, 0.2, 0.0]),
    ("0.6 → 0.3 → 0", [0.6, 0.3, 0.0]),
    ("1, 0", [1.0, 0.0]),
])
def test_manual_sigmas_parse(text, expected):
    assert pm.parse_sigmas(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "why"), [
    ("", "at least two"), ("0.5", "at least two"), ("0.5, 0.5, 0", "descending"), ("0.3, 0.5, 0", "descending"),
    ("0.5, 0.35", "end at 0"), ("nan, 0", "finite"), ("inf, 0", "finite"), ("1.2, 0", "outside"),
    ("0.5, -0.1", "outside"), ("abc, 0", "not a number"), ("0.5,,x", "not a number"),
])
def test_bad_manual_sigmas_are_refused_with_the_reason(fake_samplers, text, why):
    with pytest.raises(H3KitInputError, match=why) as err:
        refine(schedule="manual", manual_sigmas=text)
    assert err.value.input_name == "manual_sigmas"


def test_unknown_sampler_is_refused(fake_samplers):
    with pytest.raises(H3KitInputError) as err:
        refine(sampler="no_such_sampler")
    assert err.value.input_name == "sampler" and "euler" in err.value.fix


def test_h3_model_in_the_refiner_slot_is_refused(fake_samplers):
    patcher = types.SimpleNamespace(model=type("MiniMaxH3", (), {})())
    with pytest.raises(H3KitInputError, match="LTX-2.5"):
        refine(patcher)


def test_outside_comfyui_the_sampler_needs_the_host(monkeypatch):
    monkeypatch.setitem(sys.modules, "comfy.samplers", None)  # import of it fails
    with pytest.raises(HostUnavailable, match="comfy.samplers"):
        refine()


def test_offline_sampler_list_offers_the_common_samplers():
    options = H3KitRefineSetup.INPUT_TYPES()["required"]["sampler"][0]
    assert {"euler", "euler_ancestral", "res_multistep"} <= set(options)


# ------------------------------------------------------------------------------------------ latent guard
def latent(shape=(1, 128, 2, 6, 8), seed=0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def refined_from(reference: torch.Tensor, noise: float, seed=1) -> torch.Tensor:
    return reference + noise * latent(reference.shape, seed)


def guard_latent(samples, **kwargs):
    out = H3KitLatentGuard().execute({"samples": samples}, **kwargs)
    return out[0], json.loads(out[1])


def test_healthy_latent_passes_with_stats():
    value = latent()
    passed, report = guard_latent(value)
    assert passed["samples"] is value and report["status"] == "ok"
    stats = report["streams"]["samples"]
    assert stats["nan_count"] == 0 and stats["min"] == pytest.approx(float(value.min()))
    assert stats["std"] == pytest.approx(float(value.std(unbiased=False)), rel=1e-5)


def test_f10_nan_latent_is_reported():
    value = torch.full((1, 128, 2, 6, 8), float("nan"))
    with pytest.raises(H3KitInputError, match="NaN") as err:
        guard_latent(value)
    assert "12,288 NaN" in str(err.value) and "GGUF" in err.value.fix
    _, report = guard_latent(value, mode="warn")
    assert report["status"] == "problems" and report["streams"]["samples"]["nan_count"] == 12288
    assert report["streams"]["samples"]["nan_fraction"] == 1.0


def test_f10_partial_nan_and_inf_are_counted():
    value = latent()
    value[0, 0, 0, 0, :3] = float("nan")
    value[0, 1, 0, 0, 0] = float("inf")
    _, report = guard_latent(value, mode="warn")
    stats = report["streams"]["samples"]
    assert (stats["nan_count"], stats["inf_count"]) == (3, 1)


@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_f10_inf_alone_stops_the_run(bad):
    value = latent()
    value[0, 5, 1, 2, 3] = bad
    with pytest.raises(H3KitInputError, match="0 NaN and 1 Inf") as err:
        guard_latent(value)
    assert "F10" in err.value.fix


@pytest.mark.parametrize(("value", "what"), [(torch.zeros(1, 128, 2, 6, 8), "all zeros"),
                                             (torch.full((1, 128, 2, 6, 8), 0.3), "constant")])
def test_signal_free_latents_are_reported(value, what):
    with pytest.raises(H3KitInputError, match=what):
        guard_latent(value)


def test_f01_uncorrelated_refine_is_reported():
    reference = latent(seed=3)
    garbage = latent(seed=4)
    with pytest.raises(H3KitInputError, match="correlates") as err:
        guard_latent(garbage, reference={"samples": reference})
    assert "F01" in err.value.fix


def test_f01_healthy_refine_is_not_a_false_alarm():
    reference = latent(seed=5)
    # noise 0.9 x the reference's spread gives correlation ~0.74, the lowest healthy value measured
    _, report = guard_latent(refined_from(reference, 0.9), reference={"samples": reference})
    assert report["status"] == "ok" and 0.7 < report["correlation"]["samples"] < 0.8


def test_min_correlation_is_the_threshold():
    reference = latent(seed=6)
    value = refined_from(reference, 0.9)  # ~0.74
    guard_latent(value, reference={"samples": reference}, min_correlation=0.7)
    with pytest.raises(H3KitInputError):
        guard_latent(value, reference={"samples": reference}, min_correlation=0.8)


def test_reference_of_another_shape_is_a_wiring_error():
    with pytest.raises(H3KitInputError) as err:
        guard_latent(latent(), reference={"samples": latent((1, 128, 2, 3, 4))})
    assert err.value.input_name == "reference"


class Nested:
    """Duck type of comfy.nested_tensor.NestedTensor: a `.tensors` list."""

    def __init__(self, tensors):
        self.tensors = tensors


@pytest.mark.parametrize("wrap", [Nested, tuple, list])
def test_nested_av_latent_names_the_broken_stream(wrap):
    video = latent((1, 128, 2, 6, 8))
    audio = latent((1, 8, 20, 16), seed=2)
    audio[0, 0, 0, :4] = float("nan")
    with pytest.raises(H3KitInputError, match="audio stream has 4 NaN"):
        guard_latent(wrap([video, audio]))
    _, report = guard_latent(wrap([video, audio]), mode="warn")
    assert report["streams"]["video"]["nan_count"] == 0 and report["streams"]["audio"]["nan_count"] == 4


def test_nested_correlation_checks_the_video_stream():
    ref_video, audio = latent(seed=7), latent((1, 8, 20, 16), seed=8)
    healthy = Nested([refined_from(ref_video, 0.3), audio])
    _, report = guard_latent(healthy, reference={"samples": Nested([ref_video, audio])})
    assert report["correlation"]["video"] > 0.9 and report["correlation"]["audio"] == pytest.approx(1.0)
    with pytest.raises(H3KitInputError, match="correlates"):
        guard_latent(Nested([latent(seed=9), audio]), reference={"samples": Nested([ref_video, audio])})


@pytest.mark.parametrize("bad", [None, {}, {"samples": "x"}, torch.zeros(3)])
def test_non_latents_are_refused(bad):
    with pytest.raises(H3KitInputError):
        H3KitLatentGuard().execute(bad)


# ------------------------------------------------------------------------------------------ frame guard
def guard_frames(images, **kwargs):
    out = H3KitFrameGuard().execute(images, **kwargs)
    return out[0], json.loads(out[1])


def textured_video(count=12, seed=0):
    return torch.rand(count, 24, 40, 3, generator=torch.Generator().manual_seed(seed))


def test_healthy_video_passes():
    images = textured_video()
    out, report = guard_frames(images)
    assert out is images and report["status"] == "ok" and report["solid_frames"] == 0


def test_f10_black_video_is_reported():
    images = torch.zeros(12, 24, 40, 3)
    with pytest.raises(H3KitInputError, match="12 of 12 frames are black"):
        guard_frames(images)
    _, report = guard_frames(images, mode="warn")
    assert report["black_frames"] == 12 and report["status"] == "problems"


def test_solid_colour_video_is_reported():
    images = torch.empty(12, 24, 40, 3)
    images[..., 0], images[..., 1], images[..., 2] = 0.2, 0.5, 0.9
    with pytest.raises(H3KitInputError, match="solid-colour"):
        guard_frames(images)


def test_nan_frames_are_reported():
    images = textured_video()
    images[3, 0, 0, 0] = float("nan")
    with pytest.raises(H3KitInputError, match="1 NaN"):
        guard_frames(images)


def test_a_fade_from_black_is_not_a_false_alarm():
    images = textured_video(count=20)
    images[0] = 0.0  # one black frame of twenty: 5%
    _, report = guard_frames(images)
    assert report["status"] == "ok" and report["black_frames"] == 1 and report["first_solid"] == [0]


def test_solid_detection_ignores_faint_grain_but_not_texture():
    gen = torch.Generator().manual_seed(3)
    flat = 0.5 + (torch.rand(4, 24, 40, 3, generator=gen) - 0.5) * (1 / 255)  # below 1.5/255 spread
    assert guard_frames(flat, mode="warn")[1]["solid_frames"] == 4
    assert guard_frames(textured_video(count=4), mode="warn")[1]["solid_frames"] == 0


def test_unknown_guard_mode_is_refused():
    with pytest.raises(H3KitInputError) as err:
        H3KitFrameGuard().execute(textured_video(), mode="ignore")
    assert err.value.input_name == "mode"
