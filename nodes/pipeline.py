"""The two-stage pipeline: MiniMax-H3 draft -> LTX-2.5 x2 refine, with guards that make garbage loud.

H3KitDraftToLTX     decoded H3 draft (+ its audio) -> frames at half the final size on LTX's 8n+1 grid,
                    audio trimmed/padded to the kept duration (the audio bypasses stage 2 and is muxed at the end).
H3KitRefineSetup    LTX-2.5 refiner model -> MODEL, SAMPLER, SIGMAS for SamplerCustomAdvanced (3 steps by default),
                    refusing first sigmas past the measured identity cliff (F23).
H3KitLatentGuard    NaN/Inf, constant and all-zero latents, and refine output uncorrelated with its input (F10, F01).
H3KitFrameGuard     NaN/Inf and black or solid-colour decoded frames (F10's black video).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..adapters.host import host_choices, host_loaded, host_module
from ..checks import facts
from ..checks import geometry as pm
from ..kernels import frames as fk
from .common import H3KitInputError, Report, category, install_inference_rebind

CATEGORY = category("Pipeline")
GUARD_MODES = ("error", "warn")

# NEW core's KSAMPLER_NAMES + ddim/uni_pc (workflows/schemas/comfyui-core.json, KSamplerSelect); used when
# ComfyUI is not loaded (offline validate, `python -m h3kit nodes`). Inside ComfyUI the host's own list wins.
PINNED_SAMPLERS = (
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2", "exp_heun_2_x0",
    "exp_heun_2_x0_sde", "dpm_2", "dpm_2_ancestral", "lms", "dpm_fast", "dpm_adaptive", "dpmpp_2s_ancestral",
    "dpmpp_2s_ancestral_cfg_pp", "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp", "dpmpp_2m_sde",
    "dpmpp_2m_sde_gpu", "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu", "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm",
    "lcm", "ipndm", "ipndm_v", "deis", "cfgpp_ud10_ab", "res_multistep", "res_multistep_cfg_pp",
    "res_multistep_ancestral", "res_multistep_ancestral_cfg_pp", "gradient_estimation", "gradient_estimation_cfg_pp",
    "er_sde", "seeds_2", "seeds_3", "sa_solver", "sa_solver_pece", "ddim", "uni_pc", "uni_pc_bh2",
)

FIX_F10 = (
    "the sampler produced NaN/Inf (F10). On RTX 20xx (sm_75) the int8-convrot LTX-2.5 refiner gives all-NaN "
    "latents: load the GGUF Q4_K_M refiner with UnetLoaderGGUF (workflows/api/h3_ltx_two_stage_turing.json). "
    "Elsewhere check the model file and fp16 overflow"
)
FIX_F01 = (
    "the refine output is not a refinement of its input (F01). Update ComfyUI >= "
    f"{facts.version_text(facts.MIN_COMFYUI)}, comfy-kitchen >= {facts.version_text(facts.MIN_KITCHEN)} "
    "and ComfyUI-Spectrum-MiniMax-H3 >= 4783a22 together, wire 'reference' to the latent that fed the sampler, "
    f"and keep the first refine sigma <= {facts.REPAINT_SIGMA_LIMIT:g}"
)
FIX_BROKEN_DRAFT = (
    "stage 1 produced it (the H3 model file, its LoRA or VAE, or an fp16 overflow in the H3 draft), and the refine "
    "cannot repair it: run the H3 half alone (VAEDecode -> PreviewImage) to see it and check those files; a draft "
    "computed in fp16 (RTX 20xx) can overflow: compute H3 in fp32"
)
FIX_NO_SIGNAL = "the sampler output carries no signal: check the refiner model file and the latent wiring"
FIX_MOSAIC = (
    "a mosaic on the VAE's latent grid is what a decoder paints from a latent with no picture in it (reported with "
    "'the prompt has no effect', Comfy-Org/ComfyUI#15805): check that the text encoder file and its CLIPLoader type "
    "belong to the diffusion model, that the positive conditioning reaches the sampler, and that the model, LoRA and "
    "VAE files are the ones the graph names; preview the H3 draft alone (VAEDecode -> PreviewImage) to see which "
    "stage makes it"
)
FIX_TILES = (
    "a picture repeated as tiles comes from a decode that treats each tile as the whole frame (H3's tiled VAE decode: "
    "Comfy-Org/ComfyUI#15548, fix proposed in #15561) or from a latent decoded with another width, height or length "
    "than it was made with: decode the same latent with the plain VAEDecode and check that the latent's size matches "
    "the decoder's"
)
FIX_SOLID = (
    "an all-black refine is usually a NaN latent (F10: on RTX 20xx load the GGUF Q4_K_M refiner, "
    "workflows/api/h3_ltx_two_stage_turing.json); solid grey is an all-zero latent. Put H3KitLatentGuard before "
    "the decode to see which"
)


def _guard_mode(node: str, mode: str) -> str:
    if mode not in GUARD_MODES:
        raise H3KitInputError(node, "mode", mode, "unknown mode", f"use one of: {', '.join(GUARD_MODES)}")
    return mode


def _raise_or_warn(report: Report, mode: str, input_name: str, value: Any, problems: list[tuple[str, str]]) -> None:
    """In 'error' mode the first problem stops the run; in 'warn' mode every problem goes to report and log."""
    if not problems:
        report.set(status="ok")
        return
    report.set(status="problems")
    if mode == "error":
        problem, fix = problems[0]
        more = f" (and {len(problems) - 1} more: {'; '.join(p for p, _ in problems[1:])})" if len(problems) > 1 else ""
        raise H3KitInputError(report.node, input_name, value, problem + more, fix)
    for problem, fix in problems:
        report.warn(f"{problem}. Fix: {fix}")


# ============================================================================== H3KitDraftToLTX
class H3KitDraftToLTX:
    DISPLAY_NAME = "H3Kit Draft to LTX (handoff)"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Prepares a decoded MiniMax-H3 draft for the LTX-2.5 refine: keeps an 8n+1 frame count, scales to exactly "
        "half the final size (LTX's VAE encodes it, the x2 latent upsampler doubles it) and trims the H3 audio to the "
        "kept duration so the final mux stays in sync. 124 H3 frames -> 121; 672x384 -> 1344x768 needs no resample. "
        "Stops a draft with NaN/Inf pixels or audio: stage 1 failed, and the refine would only pass the NaN on."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("IMAGE", "AUDIO", "INT", "INT", "STRING")
    RETURN_NAMES = ("frames", "audio", "kept_frames", "dropped_frames", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        side = {"min": facts.OUTPUT_SIDE_MULTIPLE, "max": 16384, "step": facts.OUTPUT_SIDE_MULTIPLE}
        return {
            "required": {
                "frames": ("IMAGE", {"tooltip": "The decoded H3 draft frames (VAEDecode of the H3 latent)."}),
                "target_width": ("INT", {**side, "default": 1344, "tooltip":
                                 "Final refined width after LTX's x2 upsampler; a multiple of 64. Frames leave at half."}),
                "target_height": ("INT", {**side, "default": 768, "tooltip":
                                  "Final refined height after LTX's x2 upsampler; a multiple of 64. Frames leave at half."}),
                "frame_policy": (list(facts.FRAME_POLICIES), {"default": "trim_to_8n_plus_1", "tooltip":
                                 "LTX needs 8n+1 frames. trim: keep the first 8n+1 (124 -> 121); pad: repeat the last "
                                 "frame up to 8n+1; strict: error unless the count is already 8n+1."}),
                "fit": (list(pm.FIT_MODES), {"default": "cover_crop", "tooltip":
                        "cover_crop: scale uniformly to cover half the target, then centre-crop (no distortion); "
                        "stretch: scale each axis to fit exactly (distorts when the aspect differs)."}),
                "fps": ("FLOAT", {"default": 24.0, "min": 1.0, "max": 240.0, "step": 0.001, "tooltip":
                        "Frame rate of the draft (H3: 24). Used to cut the audio to the kept frames' duration."}),
            },
            "optional": {
                "audio": ("AUDIO", {"tooltip": "The draft's audio (VAEDecodeAudio of the H3 latent). Trimmed or "
                                    "padded with silence to the kept frames; it never enters the LTX stage."}),
            },
        }

    def execute(self, frames, target_width, target_height, frame_policy="trim_to_8n_plus_1", fit="cover_crop",
                fps=24.0, audio=None):
        report = Report(type(self).__name__)
        out_w, out_h = self._encoder_size(target_width, target_height)
        fps = self._check_fps(fps)
        frames = self._check_frames(frames, report)
        count, src_h, src_w = frames.shape[0], frames.shape[1], frames.shape[2]
        kept = self._kept_count(count, frame_policy)
        plan = self._plan(src_w, src_h, out_w, out_h, fit)
        self._report_geometry(report, plan, fit)
        out = fk.resize_frames(fk.fit_frame_count(frames, kept), plan)
        dropped = max(0, count - kept)
        report.set(
            source={"width": src_w, "height": src_h, "frames": count, "on_h3_grid": facts.is_h3_length(count)},
            encoder={"width": out_w, "height": out_h, "frames": kept},
            target={"width": target_width, "height": target_height},
            frame_policy=frame_policy, kept_frames=kept, dropped_frames=dropped, padded_frames=max(0, kept - count),
            fps=fps, duration_s=round(kept / fps, 6),
        )
        if not facts.is_h3_length(count):
            below, above = facts.nearest_h3_lengths(count)
            report.warn(f"{count} draft frames is not an H3 length (17k+5, e.g. {below} or {above}); "
                        "check the draft's length input")
        if kept > count:
            report.warn(f"padded {kept - count} frame(s) by repeating the last frame (frame_policy pad_to_8n_plus_1)")
        audio_out = self._fit_audio(audio, kept, fps, report)
        return (out, audio_out, kept, dropped, report.json())

    # -- checks -------------------------------------------------------------------------------------------
    def _encoder_size(self, target_width: int, target_height: int) -> tuple[int, int]:
        node = type(self).__name__
        for name, value in (("target_width", target_width), ("target_height", target_height)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise H3KitInputError(node, name, value, "must be a positive whole number of pixels",
                                      "use a multiple of 64 such as 1344 x 768")
            if value % facts.OUTPUT_SIDE_MULTIPLE:
                raise H3KitInputError(
                    node, name, value,
                    f"{name} {value} is not a multiple of 64 (LTX VAE-encodes half of it, {value / 2:g}, which must "
                    "be a multiple of 32)",
                    f"use {facts.describe_nearest(value, facts.OUTPUT_SIDE_MULTIPLE)}",
                )
        return target_width // 2, target_height // 2

    def _check_fps(self, fps: Any) -> float:
        node = type(self).__name__
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
            raise H3KitInputError(node, "fps", fps, "must be a finite number above 0",
                                  "use the draft's frame rate (H3 renders 24 fps)")
        return float(fps)

    def _check_frames(self, frames: Any, report: Report) -> torch.Tensor:
        node = type(self).__name__
        if not isinstance(frames, torch.Tensor) or frames.ndim != 4:
            shape = list(frames.shape) if isinstance(frames, torch.Tensor) else type(frames).__name__
            raise H3KitInputError(node, "frames", shape, "expected an IMAGE batch [frames, height, width, channels]",
                                  "connect the IMAGE output of VAEDecode (the decoded H3 draft)")
        if min(frames.shape) == 0:
            raise H3KitInputError(node, "frames", list(frames.shape), "the image batch is empty",
                                  "check that the draft decoded to at least one frame")
        if not frames.is_floating_point():
            raise H3KitInputError(node, "frames", str(frames.dtype), "IMAGE must be float values 0..1",
                                  "connect a ComfyUI IMAGE output (VAEDecode, LoadImage, GetVideoComponents)")
        broken = fk.nonfinite_count(frames)
        if broken:
            raise H3KitInputError(node, "frames", f"{broken:,} NaN/Inf of {frames.numel():,} pixel values",
                                  "the H3 draft is broken", FIX_BROKEN_DRAFT)
        channels = frames.shape[-1]
        if channels == 4:
            report.set(alpha_dropped=True)
            return frames[..., :3]
        if channels == 1:
            report.set(grey_expanded_to_rgb=True)
            return frames.expand(*frames.shape[:3], 3)
        if channels != 3:
            raise H3KitInputError(node, "frames", list(frames.shape), f"{channels} colour channels (expected 3, or 4/1)",
                                  "connect an RGB IMAGE output")
        return frames

    def _kept_count(self, count: int, policy: str) -> int:
        node = type(self).__name__
        if policy not in facts.FRAME_POLICIES:
            raise H3KitInputError(node, "frame_policy", policy, "unknown policy",
                                  f"use one of: {', '.join(facts.FRAME_POLICIES)}")
        kept = facts.kept_frame_count(count, policy)
        if kept is None:
            below, above = facts.ltx_trim_length(count), facts.ltx_pad_length(count)
            raise H3KitInputError(node, "frames", f"{count} frames",
                                  f"{count} frames is not on LTX's 8n+1 grid and frame_policy is strict",
                                  f"give {below} or {above} frames, or set frame_policy to trim_to_8n_plus_1")
        return kept

    def _plan(self, src_w: int, src_h: int, out_w: int, out_h: int, fit: str) -> pm.CropPlan:
        if fit not in pm.FIT_MODES:
            raise H3KitInputError(type(self).__name__, "fit", fit, "unknown fit", f"use one of: {', '.join(pm.FIT_MODES)}")
        return pm.crop_plan(src_w, src_h, out_w, out_h, fit)

    def _report_geometry(self, report: Report, plan: pm.CropPlan, fit: str) -> None:
        report.set(fit=fit, resample=not plan.is_identity, scale=[round(plan.scale_x, 6), round(plan.scale_y, 6)],
                   crop={"x": plan.crop_x, "y": plan.crop_y, "from": [plan.resized_w, plan.resized_h]})
        if plan.is_identity:
            return
        if max(plan.scale_x, plan.scale_y) > 1.0:
            report.warn(f"the draft ({plan.src_w}x{plan.src_h}) is upscaled x{max(plan.scale_x, plan.scale_y):.3f} "
                        f"before encoding; a draft of exactly half the target ({plan.out_w}x{plan.out_h}) needs no resample")
        if fit == "stretch" and plan.aspect_change > 0.01:
            report.warn(f"stretch distorts the picture by {plan.aspect_change:.1%}; cover_crop keeps proportions")

    def _fit_audio(self, audio: Any, kept: int, fps: float, report: Report) -> dict | None:
        if audio is None:
            report.warn("no audio connected: the final video will be silent unless audio reaches CreateVideo (F21)")
            report.set(audio=None)
            return None
        waveform, sample_rate = self._check_audio(audio)
        samples = pm.audio_samples_for(kept, fps, sample_rate)
        have = waveform.shape[-1]
        if samples - have > sample_rate / fps:
            report.warn(f"the audio ({have / sample_rate:.3f} s) is shorter than the kept video "
                        f"({kept / fps:.3f} s); padded with {(samples - have) / sample_rate:.3f} s of silence")
        report.set(audio={"sample_rate": sample_rate, "channels": waveform.shape[1], "in_samples": have,
                          "out_samples": samples, "in_s": round(have / sample_rate, 6),
                          "out_s": round(samples / sample_rate, 6), "trimmed_s": round(max(0, have - samples) / sample_rate, 6)})
        return {**audio, "waveform": fk.fit_audio_length(waveform, samples), "sample_rate": sample_rate}

    def _check_audio(self, audio: Any) -> tuple[torch.Tensor, int]:
        node = type(self).__name__
        if not isinstance(audio, dict) or "waveform" not in audio or "sample_rate" not in audio:
            raise H3KitInputError(node, "audio", type(audio).__name__, "expected AUDIO {'waveform', 'sample_rate'}",
                                  "connect the AUDIO output of VAEDecodeAudio or LoadAudio")
        waveform, sample_rate = audio["waveform"], audio["sample_rate"]
        if not isinstance(waveform, torch.Tensor) or waveform.ndim != 3:
            shape = list(waveform.shape) if isinstance(waveform, torch.Tensor) else type(waveform).__name__
            raise H3KitInputError(node, "audio", shape, "waveform must be [batch, channels, samples]",
                                  "connect the AUDIO output of VAEDecodeAudio or LoadAudio")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, float)) or sample_rate <= 0:
            raise H3KitInputError(node, "audio", sample_rate, "sample_rate must be a positive number",
                                  "connect the AUDIO output of VAEDecodeAudio or LoadAudio")
        broken = fk.nonfinite_count(waveform)
        if broken:
            raise H3KitInputError(node, "audio", f"{broken:,} NaN/Inf of {waveform.numel():,} samples",
                                  "the H3 draft's audio is broken", FIX_BROKEN_DRAFT)
        return waveform, int(sample_rate)


# ============================================================================== H3KitRefineSetup
def available_samplers() -> list[str]:
    """The host's sampler names inside ComfyUI, else the pinned list."""
    if host_loaded("comfy.samplers"):
        return list(host_module("comfy.samplers").KSampler.SAMPLERS)
    return list(PINNED_SAMPLERS)


def schedule_tooltip() -> str:
    """Each schedule with its sigmas and what it is for (facts.SCHEDULE_NOTES), the legacy names last."""
    named = [f"{name}: {facts.sigma_text(values)} ({facts.SCHEDULE_NOTES[name]})"
             for name, values in facts.SIGMA_SCHEDULES.items()]
    legacy = [f"{old}: old name of {now}, kept so saved graphs load" for old, now in facts.LEGACY_SCHEDULES.items()]
    return "; ".join([*named, f"{facts.MANUAL_SCHEDULE}: the manual_sigmas text", *legacy]) + "."


class H3KitRefineSetup:
    DISPLAY_NAME = "H3Kit Refine Setup (LTX-2.5)"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        f"Model, sampler and sigmas for LTX-2.5 refining an H3 draft (feed SamplerCustomAdvanced). Default "
        f"{facts.DEFAULT_SCHEDULE} ({facts.SIGMA_EXAMPLE}) with euler, 3 steps: measured to keep the draft's identity "
        f"(field report). First sigmas above {facts.REPAINT_SIGMA_LIMIT:g} repaint the draft's faces (F23) and are "
        "refused unless allow_repaint is on. How this differs from ComfyUI's official LTX-2.5 two-stage, which refines "
        f"LTX's own stage 1: there stage 2 starts at {facts.SIGMA_SCHEDULES['ltx2_5_stage2'][0]:g} (schedule "
        f"ltx2_5_stage2), samples with {facts.LTX2_5_STAGE2_SAMPLER}, guides with {facts.LTX2_5_STAGE2_GUIDER} and "
        "refines an audio+video latent; here the first sigma is lower, the sampler euler, the guider yours (the shipped "
        "graphs: CFGGuider, cfg 1) and the latent video-only (the sound is H3's, muxed at the end)."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("MODEL", "SAMPLER", "SIGMAS", "STRING")
    RETURN_NAMES = ("model", "sampler", "sigmas", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "model": ("MODEL", {"tooltip": "The LTX-2.5 distilled refiner (UNETLoader or UnetLoaderGGUF). "
                                    "Returned with the same weights; each load re-marks parameters that ComfyUI's 'Unload Models' moved "
                                    "outside inference mode (issue 31)."}),
                "schedule": (list(facts.SCHEDULE_CHOICES), {"default": facts.DEFAULT_SCHEDULE,
                                                             "tooltip": schedule_tooltip()}),
                "manual_sigmas": ("STRING", {"default": facts.SIGMA_EXAMPLE, "multiline": False, "tooltip":
                                  "Used only with schedule 'manual': comma-separated, finite, in [0, 1], strictly "
                                  "descending, ending at 0."}),
                "sampler": (host_choices(cls.__name__, "sampler", available_samplers), {"default": "euler", "tooltip":
                            "Sampler for the refine steps (euler: what the identity schedules were measured with; the "
                            f"official LTX-2.5 stage 2 uses {facts.LTX2_5_STAGE2_SAMPLER})."}),
                "allow_repaint": ("BOOLEAN", {"default": False, "tooltip":
                                  f"Allow a first sigma above {facts.REPAINT_SIGMA_LIMIT:g}. Off: refused, because at "
                                  "0.85+ the refine repaints the H3 draft's face into another person (F23). The "
                                  "official LTX stage-2 tables start above it: they refine LTX's own stage 1."}),
            },
        }

    def execute(self, model, schedule=facts.DEFAULT_SCHEDULE, manual_sigmas="", sampler="euler", allow_repaint=False):
        node = type(self).__name__
        report = Report(node)
        if model is None:
            raise H3KitInputError(node, "model", None, "no model connected", "connect the LTX-2.5 refiner MODEL")
        self._check_model_family(model, report)
        values = self._sigmas(schedule, manual_sigmas)
        self._report_legacy_name(schedule, report)
        self._check_repaint(values, schedule, manual_sigmas, bool(allow_repaint), report)
        sampler_obj = self._sampler(sampler)
        sigmas = torch.tensor(values, dtype=torch.float32)
        report.set(schedule=schedule, sigmas=values, steps=len(values) - 1, first_sigma=values[0],
                   sampler=sampler, allow_repaint=bool(allow_repaint))
        model = install_inference_rebind(model, node, report)
        return (model, sampler_obj, sigmas, report.json())

    def _check_model_family(self, model: Any, report: Report) -> None:
        base = getattr(model, "model", None)
        family = type(base).__name__ if base is not None else None
        report.set(model_class=family)
        if family and "minimax" in family.lower():
            raise H3KitInputError(type(self).__name__, "model", family, "this is the MiniMax-H3 model, not LTX-2.5",
                                  "connect the LTX-2.5 refiner loader (UNETLoader / UnetLoaderGGUF) to 'model'")

    def _sigmas(self, schedule: str, manual: str) -> list[float]:
        node = type(self).__name__
        table = facts.schedule_sigmas(schedule)
        if table is not None:
            return list(table)
        if schedule != facts.MANUAL_SCHEDULE:
            raise H3KitInputError(node, "schedule", schedule, "unknown schedule",
                                  f"use one of: {', '.join(facts.SCHEDULE_CHOICES)}")
        try:
            return facts.parse_sigmas(manual if isinstance(manual, str) else str(manual))
        except facts.SigmaError as exc:
            raise H3KitInputError(node, "manual_sigmas", manual, str(exc),
                                  f"write e.g. {facts.SIGMA_EXAMPLE} (finite, in [0, 1], strictly descending, ending at 0)"
                                  ) from None

    @staticmethod
    def _report_legacy_name(schedule: str, report: Report) -> None:
        """A saved graph's old schedule name runs as before (ComfyUI refuses a vanished combo value); said once."""
        now = facts.LEGACY_SCHEDULES.get(schedule)
        if now is not None:
            report.fallback(f"legacy_schedule:{schedule}",
                            f"schedule '{schedule}' is the old name of '{now}' "
                            f"({facts.sigma_text(facts.SIGMA_SCHEDULES[now])}): {facts.SCHEDULE_NOTES[now]}. "
                            f"Same sigmas; pick '{now}' to stop this message")

    def _check_repaint(self, values: list[float], schedule: str, manual: str, allow: bool, report: Report) -> None:
        first = values[0]
        if first <= facts.REPAINT_SIGMA_LIMIT:
            return
        where = "manual_sigmas" if schedule == facts.MANUAL_SCHEDULE else "schedule"
        shown = manual if schedule == facts.MANUAL_SCHEDULE else schedule
        if not allow:
            raise H3KitInputError(
                type(self).__name__, where, shown,
                f"first sigma {first:g} is above {facts.REPAINT_SIGMA_LIMIT:g}: from 0.85 up, refining an H3 draft "
                "repaints the face into another person (F23)",
                f"use schedule {facts.DEFAULT_SCHEDULE} (measured to keep identity), or turn allow_repaint on to accept "
                "repainting",
            )
        report.warn(f"first sigma {first:g} > {facts.REPAINT_SIGMA_LIMIT:g} allowed by allow_repaint: expect an H3 "
                    "draft's faces and details to be repainted (F23)")

    def _sampler(self, name: str) -> Any:
        samplers = host_module("comfy.samplers")
        known = list(samplers.KSampler.SAMPLERS)
        if name not in known:
            raise H3KitInputError(type(self).__name__, "sampler", name, "not a sampler of this ComfyUI",
                                  f"choose one of: {', '.join(known[:12])}, ...")
        return samplers.sampler_object(name)


# ============================================================================== guards
def latent_streams(samples: Any) -> list[tuple[str, torch.Tensor]] | None:
    """[(name, tensor)] for a plain tensor or a nested (video, audio) pair; None for anything else."""
    if isinstance(samples, torch.Tensor) and not hasattr(samples, "tensors"):
        return [("samples", samples)]
    parts = getattr(samples, "tensors", samples)
    if isinstance(parts, (list, tuple)) and parts and all(isinstance(t, torch.Tensor) for t in parts):
        names = ["video", "audio"] if len(parts) == 2 else [f"stream_{i}" for i in range(len(parts))]
        return list(zip(names, parts, strict=True))
    return None


class H3KitLatentGuard:
    DISPLAY_NAME = "H3Kit Latent Guard"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Stops (or warns about) a broken latent before it is decoded into a 'successful' black or noise video: "
        "NaN/Inf values (F10), constant or all-zero latents, and - with 'reference' = the latent fed to the refine "
        "sampler - a refine output that no longer correlates with its input (F01). Passes the latent through."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("LATENT", "STRING")
    RETURN_NAMES = ("latent", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "latent": ("LATENT", {"tooltip": "The latent to check, e.g. SamplerCustomAdvanced's output after the "
                                      "refine. Plain or nested video+audio latents."}),
                "mode": (list(GUARD_MODES), {"default": "error", "tooltip":
                         "error: stop the run with the reason and the fix; warn: log it, put it in the report, pass on."}),
                "min_correlation": ("FLOAT", {"default": 0.5, "min": 0.0, "max": 1.0, "step": 0.01, "tooltip":
                                    "With 'reference': the lowest allowed correlation between refine output and input "
                                    "(healthy runs measured >= 0.74, garbage 0.235)."}),
            },
            "optional": {
                "reference": ("LATENT", {"tooltip": "The latent the refine started from (LTXVLatentUpsampler's output). "
                                         "Enables the correlation check."}),
            },
        }

    def execute(self, latent, mode="error", min_correlation=0.5, reference=None):
        node = type(self).__name__
        mode = _guard_mode(node, mode)
        report = Report(node)
        streams = self._streams(latent, "latent")
        problems: list[tuple[str, str]] = []
        stats_out = {}
        for name, tensor in streams:
            stats = fk.tensor_stats(tensor)
            stats_out[name] = stats.as_dict()
            problems.extend(self._stream_problems(name, stats))
        report.set(streams=stats_out)
        if reference is not None:
            problems.extend(self._correlation_problems(streams, self._streams(reference, "reference"),
                                                       float(min_correlation), report))
        _raise_or_warn(report, mode, "latent", self._summary(streams), problems)
        return (latent, report.json())

    def _streams(self, latent: Any, input_name: str) -> list[tuple[str, torch.Tensor]]:
        samples = latent.get("samples") if isinstance(latent, dict) else None
        streams = latent_streams(samples) if samples is not None else None
        if not streams:
            raise H3KitInputError(type(self).__name__, input_name, type(latent).__name__,
                                  "expected a LATENT {'samples': tensor or nested (video, audio)}",
                                  "connect a LATENT output such as SamplerCustomAdvanced's")
        return streams

    @staticmethod
    def _summary(streams: list[tuple[str, torch.Tensor]]) -> str:
        return ", ".join(f"{name} {list(t.shape)}" for name, t in streams)

    @staticmethod
    def _stream_problems(name: str, stats: fk.TensorStats) -> list[tuple[str, str]]:
        if stats.nan_count or stats.inf_count:
            return [(f"{name} stream has {stats.nan_count:,} NaN and {stats.inf_count:,} Inf of {stats.numel:,} values "
                     f"({stats.nan_fraction:.1%} NaN)", FIX_F10)]
        if stats.all_zero:
            return [(f"{name} stream is all zeros ({stats.numel:,} values)", FIX_NO_SIGNAL)]
        if stats.constant:
            return [(f"{name} stream is constant ({stats.min:g} everywhere)", FIX_NO_SIGNAL)]
        return []

    def _correlation_problems(self, streams, ref_streams, threshold: float, report: Report) -> list[tuple[str, str]]:
        # The threshold applies to the first (video) stream, where it was measured; others are reported only.
        correlations = {}
        problems = []
        for index, ((name, out), (_, ref)) in enumerate(zip(streams, ref_streams, strict=False)):
            if out.shape != ref.shape:
                raise H3KitInputError(type(self).__name__, "reference", list(ref.shape),
                                      f"the {name} stream has shape {list(out.shape)}, the reference {list(ref.shape)}",
                                      "connect the latent that fed the sampler (LTXVLatentUpsampler's output)")
            corr = fk.correlation(out, ref)
            correlations[name] = None if corr is None else round(corr, 4)
            if index == 0 and corr is not None and corr < threshold:
                problems.append((f"refine output correlates {corr:.3f} with its input, below min_correlation "
                                 f"{threshold:g} (healthy >= 0.74, garbage 0.235)", FIX_F01))
        report.set(correlation=correlations, min_correlation=threshold)
        return problems


class H3KitFrameGuard:
    DISPLAY_NAME = "H3Kit Frame Guard"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Stops (or warns about) decoded frames that would be saved as a 'successful' broken video: NaN/Inf pixels, "
        "black or single-colour frames (F10's all-black refine), a block mosaic on the VAE's 16/32-px latent grid "
        "(ComfyUI#15805) and a picture repeated as a 2x2/3x3/4x4 grid of tiles (ComfyUI#15548). Fades are fine: the "
        "guard fires when more than max_solid_fraction of the frames are solid; the pattern checks measure up to "
        f"{fk.PATTERN_SAMPLE_FRAMES} frames spread over the clip and the report gives each statistic and threshold. "
        "Passes the frames through."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("IMAGE", "STRING")
    RETURN_NAMES = ("images", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "images": ("IMAGE", {"tooltip": "Decoded frames to check, e.g. VAEDecode's output after the refine."}),
                "mode": (list(GUARD_MODES), {"default": "error", "tooltip":
                         "error: stop the run with the reason and the fix; warn: log it, put it in the report, pass on."}),
                "max_solid_fraction": ("FLOAT", {"default": 0.25, "min": 0.0, "max": 1.0, "step": 0.01, "tooltip":
                                       "Largest share of black or single-colour frames accepted (fades and cuts to "
                                       "black are normal; an all-black video is not)."}),
            },
        }

    def execute(self, images, mode="error", max_solid_fraction=0.25):
        node = type(self).__name__
        mode = _guard_mode(node, mode)
        if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[0] == 0:
            shape = list(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise H3KitInputError(node, "images", shape, "expected a non-empty IMAGE batch [frames, H, W, C]",
                                  "connect an IMAGE output such as VAEDecode's")
        report = Report(node)
        scan = fk.scan_frames(images)
        report.set(frames=scan.frames, nan_count=scan.nan_count, inf_count=scan.inf_count,
                   black_frames=len(scan.black_frames), solid_frames=len(scan.solid_frames),
                   first_solid=scan.solid_frames[:8], min=scan.min, max=scan.max, mean=scan.mean,
                   max_solid_fraction=float(max_solid_fraction))
        problems = []
        if scan.nan_count or scan.inf_count:
            problems.append((f"{scan.nan_count:,} NaN and {scan.inf_count:,} Inf pixel values", FIX_F10))
        solid_share = len(scan.solid_frames) / scan.frames
        if solid_share > max_solid_fraction:
            kind = "black" if len(scan.black_frames) == len(scan.solid_frames) else "black or solid-colour"
            problems.append((f"{len(scan.solid_frames)} of {scan.frames} frames are {kind} ({solid_share:.0%} > "
                             f"max_solid_fraction {max_solid_fraction:g})",
                             FIX_SOLID))
        problems.extend(_pattern_problems(report, fk.pattern_checks(images)))
        _raise_or_warn(report, mode, "images", f"{list(images.shape)}", problems)
        return (images, report.json())


def _pattern_problems(report: Report, checks: list[fk.PatternCheck]) -> list[tuple[str, str]]:
    """Each pattern check in the report (statistic, value, threshold); a failed one as a problem with its fix."""
    problems = []
    for check in checks:
        report.set(**{check.name: check.as_dict()})
        if not check.failed:
            continue
        sampled = f"median of {check.frames_measured} sampled frames"
        if check.name == "block_mosaic":
            problems.append((f"the frames are a {check.grid}x{check.grid}-pixel block mosaic: steps on the block edges "
                             f"are {check.value:.1f}x the frame's typical step ({sampled}; fails above "
                             f"{check.threshold:g})", FIX_MOSAIC))
        else:
            problems.append((f"each frame repeats itself as a {check.grid}x{check.grid} grid of tiles: moved one tile "
                             f"over it differs by {check.value:.2f} of its spread ({sampled}; fails below "
                             f"{check.threshold:g})", FIX_TILES))
    return problems


NODES = [H3KitDraftToLTX, H3KitRefineSetup, H3KitLatentGuard, H3KitFrameGuard]
