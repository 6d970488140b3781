"""F23 scoped to its evidence (issue 30, rows 3 and 4): the first-sigma limit 0.8 was measured refining an H3 draft
with LTX-2.5 (field-notes §A4), so the rule FAILs only a sampler that refines an H3 draft. ComfyUI's official LTX-2.x
two-stage templates (LTX refining its own stage 1 at 0.85 / 0.909375) and every stage 1 pass; a source H3Kit cannot
see gets a warning that names it. The graphs below are the official templates' sampler fragments as the frontend
converts their subgraphs to API (node ids "<subgraph node>:<inner node>"), with the templates' exact node values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from h3kit.checks import facts, rules, rules_lints, server
from h3kit.checks.graph import well_formed
from h3kit.scripts.schemas import offline_schemas
from hypothesis import given
from hypothesis import strategies as st
from official_templates import corpus

SCHEMAS = offline_schemas()

# ManualSigmas texts exactly as the official templates write them (comfyui-workflow-templates-json 0.1.47, 0.1.123).
LTX2_STAGE1 = "1.0, 0.99375, 0.9875, 0.98125, 0.975, 0.909375, 0.725, 0.421875, 0.0"  # video_ltx2_5_* / ltx2_3_*
LTX2_5_STAGE2 = "0.85, 0.7250, 0.4219, 0.0"  # video_ltx2_5_t2v/i2v.json, video_ltx2_3_t2v/i2v.json
LTX2_0_STAGE2 = "0.909375, 0.725, 0.421875, 0.0"  # video_ltx2_t2v/i2v.json (LTX-2.0)


def n(class_type: str, **inputs) -> dict:
    return {"class_type": class_type, "inputs": inputs}


def ltx2_5_t2v(p: str = "405:") -> dict:
    """video_ltx2_5_t2v.json, subgraph 'Text to Video (LTX-2.5)': stage 1 from an empty AV latent, stage 2 after
    LTXVLatentUpsampler; euler_ancestral, LTXVDualCFGGuider (1, 1), ManualSigmas as in the template."""
    return {
        f"{p}384": n("UNETLoader", unet_name="ltx-2.5-22b-distilled-transformer-comfy-int8-convrot.safetensors",
                     weight_dtype="default"),
        f"{p}385": n("VAELoader", vae_name="ltx-2.5-video-vae-bf16.safetensors"),
        f"{p}386": n("VAELoader", vae_name="ltx-2.5-audio-vae-bf16.safetensors"),
        f"{p}387": n("CLIPLoader", clip_name="gemma4-12b-with-proj-ltx-2.5-comfy-int8-convrot.safetensors",
                     type="ltxv", device="default"),
        f"{p}364": n("CLIPTextEncode", clip=[f"{p}387", 0], text="a hunter on an ice floe"),
        f"{p}373": n("CLIPTextEncode", clip=[f"{p}387", 0],
                     text="pc game, console game, video game, cartoon, childish, ugly"),
        f"{p}365": n("LTXVConditioning", positive=[f"{p}364", 0], negative=[f"{p}373", 0], frame_rate=24),
        f"{p}356": n("EmptyLTXVLatentVideo", width=768, height=512, length=97, batch_size=1),
        f"{p}366": n("LTXVEmptyLatentAudio", audio_vae=[f"{p}386", 0], frames_number=97, frame_rate=25, batch_size=1),
        f"{p}377": n("LTXVConcatAVLatent", video_latent=[f"{p}356", 0], audio_latent=[f"{p}366", 0]),
        f"{p}404": n("ManualSigmas", sigmas=LTX2_STAGE1),
        f"{p}388": n("LTXVDualCFGGuider", model=[f"{p}384", 0], positive=[f"{p}365", 0], negative=[f"{p}365", 1],
                     video_cfg=1, audio_cfg=1),
        f"{p}352": n("KSamplerSelect", sampler_name="euler_ancestral"),
        f"{p}339": n("RandomNoise", noise_seed=926314962774309),
        f"{p}344": n("SamplerCustomAdvanced", noise=[f"{p}339", 0], guider=[f"{p}388", 0], sampler=[f"{p}352", 0],
                     sigmas=[f"{p}404", 0], latent_image=[f"{p}377", 0]),
        f"{p}367": n("LTXVSeparateAVLatent", av_latent=[f"{p}344", 0]),
        f"{p}371": n("LatentUpscaleModelLoader", model_name="ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors"),
        f"{p}348": n("LTXVLatentUpsampler", samples=[f"{p}367", 0], upscale_model=[f"{p}371", 0], vae=[f"{p}385", 0]),
        f"{p}340": n("LTXVConcatAVLatent", video_latent=[f"{p}348", 0], audio_latent=[f"{p}367", 1]),
        f"{p}395": n("ManualSigmas", sigmas=LTX2_5_STAGE2),
        f"{p}391": n("LTXVDualCFGGuider", model=[f"{p}384", 0], positive=[f"{p}365", 0], negative=[f"{p}365", 1],
                     video_cfg=1, audio_cfg=1),
        f"{p}341": n("KSamplerSelect", sampler_name="euler_ancestral"),
        f"{p}338": n("RandomNoise", noise_seed=42),
        f"{p}368": n("SamplerCustomAdvanced", noise=[f"{p}338", 0], guider=[f"{p}391", 0], sampler=[f"{p}341", 0],
                     sigmas=[f"{p}395", 0], latent_image=[f"{p}340", 0]),
        f"{p}369": n("LTXVSeparateAVLatent", av_latent=[f"{p}368", 0]),
        f"{p}374": n("VAEDecodeTiled", samples=[f"{p}369", 0], vae=[f"{p}385", 0], tile_size=512, overlap=64,
                     temporal_size=64, temporal_overlap=16),
        f"{p}358": n("LTXVAudioVAEDecode", samples=[f"{p}369", 1], audio_vae=[f"{p}386", 0]),
    }


def ltx2_5_i2v(p: str = "398:") -> dict:
    """video_ltx2_5_i2v.json, subgraph 'Image to Video (LTX-2.5)': the t2v wiring plus LTXVImgToVideoInplace on
    both stages (strength 0.7 on the empty latent, 1 on the upsampled one), the picture from LoadImage."""
    graph = ltx2_5_t2v(p)
    graph.update({
        "395": n("LoadImage", image="neon_cyborg_portrait.png"),
        f"{p}351": n("ResizeImageMaskNode", input=["395", 0], resize_type="scale longer dimension",
                     **{"resize_type.longer_size": 1536}, scale_method="lanczos"),
        f"{p}350": n("LTXVPreprocess", image=[f"{p}351", 0], img_compression=18),
        f"{p}363": n("PrimitiveBoolean", value=False),
        f"{p}357": n("LTXVImgToVideoInplace", vae=[f"{p}385", 0], image=[f"{p}350", 0], latent=[f"{p}356", 0],
                     strength=0.7, bypass=[f"{p}363", 0]),
        f"{p}349": n("LTXVImgToVideoInplace", vae=[f"{p}385", 0], image=[f"{p}350", 0], latent=[f"{p}348", 0],
                     strength=1, bypass=[f"{p}363", 0]),
    })
    graph[f"{p}377"]["inputs"]["video_latent"] = [f"{p}357", 0]
    graph[f"{p}340"]["inputs"]["video_latent"] = [f"{p}349", 0]
    return graph


def ltx2_3_i2v(p: str = "320:") -> dict:
    """video_ltx2_3_i2v.json, subgraph 'Image to Video (LTX-2.3)': CFGGuider (cfg 1) and euler on both stages,
    stage 2's conditioning through LTXVCropGuides, the same 0.85 stage-2 table after LTXVLatentUpsampler."""
    return {
        f"{p}316": n("CheckpointLoaderSimple", ckpt_name="ltx-2.3-22b-dev-fp8.safetensors"),
        f"{p}285": n("LoraLoaderModelOnly", model=[f"{p}316", 0], strength_model=0.5,
                     lora_name="ltx_2.3_22b_distilled_1.1_lora_dynamic_fro09_avg_rank_111_bf16.safetensors"),
        f"{p}279": n("LTXVAudioVAELoader", ckpt_name="ltx-2.3-22b-dev-fp8.safetensors"),
        f"{p}304": n("LTXVConditioning", positive=[f"{p}303", 0], negative=[f"{p}313", 0], frame_rate=24),
        f"{p}303": n("CLIPTextEncode", clip=[f"{p}317", 0], text="an Egyptian royal walks forward"),
        f"{p}313": n("CLIPTextEncode", clip=[f"{p}317", 0], text=""),
        f"{p}317": n("LTXAVTextEncoderLoader", text_encoder="gemma_3_12B_it_fp4_mixed.safetensors",
                     ckpt_name="ltx-2.3-22b-dev-fp8.safetensors", device="default"),
        "269": n("LoadImage", image="egyptian_queen.png"),
        f"{p}289": n("LTXVPreprocess", image=["269", 0], img_compression=18),
        f"{p}302": n("PrimitiveBoolean", value=False),
        f"{p}295": n("EmptyLTXVLatentVideo", width=768, height=512, length=97, batch_size=1),
        f"{p}296": n("LTXVImgToVideoInplace", vae=[f"{p}316", 2], image=[f"{p}289", 0], latent=[f"{p}295", 0],
                     strength=0.7, bypass=[f"{p}302", 0]),
        f"{p}305": n("LTXVEmptyLatentAudio", audio_vae=[f"{p}279", 0], frames_number=97, frame_rate=25, batch_size=1),
        f"{p}318": n("LTXVConcatAVLatent", video_latent=[f"{p}296", 0], audio_latent=[f"{p}305", 0]),
        f"{p}306": n("ManualSigmas", sigmas=LTX2_STAGE1),
        f"{p}314": n("CFGGuider", model=[f"{p}285", 0], positive=[f"{p}304", 0], negative=[f"{p}304", 1], cfg=1),
        f"{p}291": n("KSamplerSelect", sampler_name="euler"),
        f"{p}277": n("RandomNoise", noise_seed=60540193790228),
        f"{p}283": n("SamplerCustomAdvanced", noise=[f"{p}277", 0], guider=[f"{p}314", 0], sampler=[f"{p}291", 0],
                     sigmas=[f"{p}306", 0], latent_image=[f"{p}318", 0]),
        f"{p}307": n("LTXVSeparateAVLatent", av_latent=[f"{p}283", 0]),
        f"{p}284": n("LTXVCropGuides", positive=[f"{p}304", 0], negative=[f"{p}304", 1], latent=[f"{p}307", 0]),
        f"{p}311": n("LatentUpscaleModelLoader", model_name="ltx-2.3-spatial-upscaler-x2-1.1.safetensors"),
        f"{p}287": n("LTXVLatentUpsampler", samples=[f"{p}307", 0], upscale_model=[f"{p}311", 0], vae=[f"{p}316", 2]),
        f"{p}288": n("LTXVImgToVideoInplace", vae=[f"{p}316", 2], image=[f"{p}289", 0], latent=[f"{p}287", 0],
                     strength=1, bypass=[f"{p}302", 0]),
        f"{p}278": n("LTXVConcatAVLatent", video_latent=[f"{p}288", 0], audio_latent=[f"{p}307", 1]),
        f"{p}281": n("ManualSigmas", sigmas=LTX2_5_STAGE2),
        f"{p}282": n("CFGGuider", model=[f"{p}285", 0], positive=[f"{p}284", 0], negative=[f"{p}284", 1], cfg=1),
        f"{p}280": n("KSamplerSelect", sampler_name="euler"),
        f"{p}276": n("RandomNoise", noise_seed=42),
        f"{p}308": n("SamplerCustomAdvanced", noise=[f"{p}276", 0], guider=[f"{p}282", 0], sampler=[f"{p}280", 0],
                     sigmas=[f"{p}281", 0], latent_image=[f"{p}278", 0]),
        f"{p}309": n("LTXVSeparateAVLatent", av_latent=[f"{p}308", 0]),
    }


def h3_draft_into(graph: dict, upsampler: str, via_handoff: bool = True) -> dict:
    """The same graph with the upsampler fed an H3 draft instead of LTX's own stage 1: H3 latent -> H3 sampler ->
    VAEDecode -> (H3KitDraftToLTX | ImageScaleBy) -> VAEEncode (LTX VAE) -> LTXVLatentUpsampler."""
    graph = json.loads(json.dumps(graph))
    graph.update({
        "h1": n("CLIPLoader", clip_name="qwen3vl.safetensors", type="minimax"),
        "h2": n("VAELoader", vae_name="minimax_h3_vae.safetensors"),
        "h3": n("MiniMaxH3ImageToVideo", clip=["h1", 0], vae=["h2", 0], prompt="a woman with a necklace",
                width=672, height=384, length=124),
        "h4": n("UNETLoader", unet_name="minimax_h3.safetensors", weight_dtype="default"),
        "h5": n("BasicGuider", model=["h4", 0], conditioning=["h3", 0]),
        "h6": n("BasicScheduler", model=["h4", 0], scheduler="simple", steps=4, denoise=1.0),
        "h7": n("SamplerCustomAdvanced", noise=["h9", 0], guider=["h5", 0], sampler=["h8", 0], sigmas=["h6", 0],
                latent_image=["h3", 1]),
        "h8": n("KSamplerSelect", sampler_name="res_multistep"),
        "h9": n("RandomNoise", noise_seed=1),
        "h10": n("VAEDecode", samples=["h7", 0], vae=["h2", 0]),
        "h11": (n("H3KitDraftToLTX", frames=["h10", 0], target_width=1344, target_height=768,
                  frame_policy="trim_to_8n_plus_1", fit="cover_crop", fps=24.0) if via_handoff
                else n("ImageScaleBy", image=["h10", 0], upscale_method="lanczos", scale_by=1.0)),
        "h12": n("VAEEncode", pixels=["h11", 0], vae=[graph[upsampler]["inputs"]["vae"][0], 0]),
    })
    graph[upsampler]["inputs"]["samples"] = ["h12", 0]
    return graph


def f23(graph: dict) -> list:
    return rules_lints.lint_refine_first_sigma(graph, SCHEMAS)


def all_f23(graph: dict) -> list:
    """Every rule validate, doctor, run and the preflight apply, the F23 findings only."""
    return [p for rule in rules.RULES for p in rule(graph, SCHEMAS) if "F23" in p.message]


# --- the official templates pass --------------------------------------------------------------------------------

@pytest.mark.parametrize("template", [ltx2_5_t2v, ltx2_5_i2v, ltx2_3_i2v])
def test_f23_official_ltx_two_stage_templates_get_no_f23(template):
    # Before issue 30: stage 2 (0.85 after LTXVLatentUpsampler) FAILed in all three, and the i2v stage 1 (1.0 on
    # LTXVImgToVideoInplace) FAILed too; ComfyUI runs them as they are.
    assert all_f23(template()) == []


def test_f23_official_ltx2_0_stage2_table_after_ltx_stage1_is_not_judged():
    graph = ltx2_5_t2v()
    graph["405:395"]["inputs"]["sigmas"] = LTX2_0_STAGE2  # video_ltx2_t2v.json's stage 2 on the same wiring
    assert all_f23(graph) == []


def test_f23_i2v_stage1_is_not_a_refine_for_f01_either():
    graph = ltx2_5_i2v()
    refines, _ = server.refine_guard_state(graph)
    assert refines == ["398:368"]  # stage 2 refines LTX's own upsampled latent; stage 1 (398:344) starts from empty


def test_f23_an_i2v_guide_frame_from_an_h3_decode_does_not_make_a_refine_of_an_h3_draft():
    # The picture inputs only: LTXVImgToVideoInplace's image is a guide frame. A check that walks every input
    # would see the H3 nodes upstream and FAIL this LTX generation.
    graph = h3_draft_into(ltx2_5_i2v(), "398:348")
    graph["398:348"]["inputs"]["samples"] = ["398:367", 0]  # stage 2 refines LTX's own stage 1 again
    graph["398:351"]["inputs"]["input"] = ["h10", 0]  # the guide frame is the H3 draft's decode
    assert all_f23(graph) == []


def test_f23_h3_generating_its_own_latent_is_not_a_refine():
    # H3 sampling its own latent from 1.0 (ManualSigmas instead of BasicScheduler): a generation, not a refine.
    graph = h3_draft_into(ltx2_5_t2v(), "405:348")
    graph["h6"] = n("ManualSigmas", sigmas="1.0, 0.9, 0.5, 0")
    assert [p.node_id for p in f23(graph)] == ["405:395"]  # only the LTX refine of the draft


# --- an H3 draft is still judged, with the same limit --------------------------------------------------------------

@pytest.mark.parametrize("sigmas", [LTX2_5_STAGE2, LTX2_0_STAGE2])
@pytest.mark.parametrize("via_handoff", [True, False])
def test_f23_h3_draft_refined_in_the_official_wiring_fails(sigmas, via_handoff):
    # The official tables and AV wiring do not excuse an H3 draft: refining one above 0.8 repaints its faces.
    graph = h3_draft_into(ltx2_5_t2v(), "405:348", via_handoff)
    graph["405:395"]["inputs"]["sigmas"] = sigmas
    (problem,) = all_f23(graph)
    assert problem.severity == "error" and problem.node_id == "405:395" and problem.input == "sigmas"
    evidence = "H3KitDraftToLTX (node h11)" if via_handoff else "MiniMaxH3ImageToVideo (node h3)"
    assert evidence in problem.message and "405:368" in problem.message
    assert problem.value == pytest.approx(float(sigmas.split(",")[0]))


@pytest.mark.parametrize(("first", "fails"), [(0.8, False), (0.8000001, True)])
def test_f23_h3_draft_boundary_is_exactly_0_8(first, fails):
    # README / field notes: the limit is 0.8, strictly above fails.
    graph = h3_draft_into(ltx2_3_i2v(), "320:287")
    graph["320:281"]["inputs"]["sigmas"] = f"{first}, 0.5, 0"
    assert [p.severity for p in f23(graph)] == (["error"] if fails else [])


@given(first=st.floats(min_value=0.0, max_value=1.0, exclude_min=True))
def test_f23_only_the_h3_draft_is_judged_at_any_first_sigma(first):
    text = f"{first!r}, 0"
    official, draft = ltx2_5_t2v(), h3_draft_into(ltx2_5_t2v(), "405:348")
    official["405:395"]["inputs"]["sigmas"] = draft["405:395"]["inputs"]["sigmas"] = text
    assert f23(official) == []
    assert [p.severity for p in f23(draft)] == (["error"] if first > 0.8 else [])


# --- a source H3Kit cannot see: a warning that says what is unknown ---------------------------------------------

def test_f23_a_loaded_latent_gets_a_warning_naming_it():
    graph = ltx2_5_t2v()
    graph["405:900"] = n("LoadLatent", latent="stage1_00001_.latent")
    graph["405:348"]["inputs"]["samples"] = ["405:900", 0]
    (problem,) = all_f23(graph)
    assert problem.severity == "warning" and problem.node_id == "405:395"
    assert "LoadLatent (node 405:900) 'stage1_00001_.latent'" in problem.message
    assert "cannot tell whether it refines an H3 draft" in problem.message


def test_f23_a_loaded_video_encoded_for_the_refine_gets_a_warning():
    graph = ltx2_5_t2v()
    graph.update({"v1": n("LoadVideo", file="draft.mp4"), "v2": n("GetVideoComponents", video=["v1", 0]),
                  "v3": n("VAEEncode", pixels=["v2", 0], vae=["405:385", 0])})
    graph["405:348"]["inputs"]["samples"] = ["v3", 0]
    assert [(p.severity, "LoadVideo (node v1) 'draft.mp4'" in p.message) for p in all_f23(graph)] == [("warning", True)]


def test_f23_an_unknown_node_with_an_h3_draft_behind_it_gets_a_warning_not_a_fail():
    graph = h3_draft_into(ltx2_5_t2v(), "405:348")
    graph["x1"] = n("SomePackLatentBlend", a=["h12", 0], b=["405:367", 0], blend=0.5)
    graph["405:348"]["inputs"]["samples"] = ["x1", 0]
    (problem,) = all_f23(graph)
    assert problem.severity == "warning"
    assert "SomePackLatentBlend (node x1)" in problem.message and "upstream of it" in problem.message


def test_f23_an_unknown_node_on_a_pure_ltx_path_says_nothing():
    # Nothing H3 and no file upstream of it: the picture cannot be an H3 draft.
    graph = ltx2_5_t2v()
    graph["x1"] = n("SomePackLatentBlend", a=["405:367", 0], b=["405:367", 0], blend=0.5)
    graph["405:348"]["inputs"]["samples"] = ["x1", 0]
    assert all_f23(graph) == []


# --- the official corpus (tests/official_templates.py: converted by the real frontend) ------------------------------

@pytest.mark.parametrize("template", corpus(), ids=lambda t: t.label)
def test_f23_no_official_template_gets_an_f23_error(template):
    graph = well_formed(template.graph)
    assert [str(p) for p in all_f23(graph) if p.severity == "error"] == []


# --- schedules: named by what they are, the legacy name still loads ---------------------------------------------

def test_f23_schedule_tables_are_the_official_templates_sigmas():
    # Literals: the templates' ManualSigmas text, parsed by the one grammar.
    assert facts.SIGMA_SCHEDULES["ltx2_5_stage2"] == tuple(facts.parse_sigmas(LTX2_5_STAGE2)) == (0.85, 0.725, 0.4219, 0.0)
    assert facts.SIGMA_SCHEDULES["ltx2_0_distilled_stage2"] == tuple(facts.parse_sigmas(LTX2_0_STAGE2)) == (
        0.909375, 0.725, 0.421875, 0.0)
    assert facts.SIGMA_SCHEDULES["identity_0.78"] == (0.78, 0.643, 0.546, 0.0)  # field-notes §A4, the default
    assert facts.DEFAULT_SCHEDULE == "identity_0.78"
    assert facts.LTX2_5_STAGE2_SAMPLER == "euler_ancestral" and facts.LTX2_5_STAGE2_GUIDER == "LTXVDualCFGGuider"
    assert "nvidia_official" not in facts.SIGMA_SCHEDULES  # not sold as a current name any more


def test_f23_legacy_nvidia_official_is_the_ltx2_0_table():
    assert facts.LEGACY_SCHEDULES == {"nvidia_official": "ltx2_0_distilled_stage2"}
    assert facts.schedule_sigmas("nvidia_official") == (0.909375, 0.725, 0.421875, 0.0)
    assert "nvidia_official" in facts.SCHEDULE_CHOICES  # a saved graph's combo value stays valid
    assert facts.schedule_sigmas("manual") is None and facts.schedule_sigmas(["x"]) is None


def _refine_setup_graph(**inputs) -> dict:
    graph = h3_draft_into(ltx2_5_t2v(), "405:348")
    graph["405:395"] = n("H3KitRefineSetup", model=["405:384", 0], manual_sigmas=facts.SIGMA_EXAMPLE, sampler="euler",
                         **inputs)
    graph["405:368"]["inputs"].update(sigmas=["405:395", 2], sampler=["405:395", 1])
    return graph


def test_f23_legacy_schedule_name_warns_once_naming_what_it_is():
    graph = _refine_setup_graph(schedule="nvidia_official", allow_repaint=True)
    problems = [p for rule in rules.RULES for p in rule(graph, SCHEMAS) if p.node_id == "405:395"]
    legacy = [p for p in problems if "old name" in p.message]
    assert len(legacy) == 1 and legacy[0].severity == "warning" and legacy[0].input == "schedule"
    assert "'ltx2_0_distilled_stage2'" in legacy[0].message and "LTX-2.0" in legacy[0].message
    assert "0.909375, 0.725, 0.421875, 0" in legacy[0].message
    assert [p.severity for p in problems] == ["warning", "warning"]  # the name, and F23 allowed by allow_repaint


@pytest.mark.parametrize(("first", "severity"), [(0.8, None), (0.8000001, "error")])
def test_f23_refine_setup_manual_boundary_is_exactly_0_8(first, severity):
    graph = _refine_setup_graph(schedule="manual", allow_repaint=False)
    graph["405:395"]["inputs"]["manual_sigmas"] = f"{first}, 0.4, 0"
    assert [p.severity for p in all_f23(graph)] == ([severity] if severity else [])


def test_f23_docs_quote_each_schedule_as_the_facts_hold_it():
    # One source per fact: the failures page shows every table (and the legacy name) exactly as checks/facts.py has it.
    page = (Path(__file__).resolve().parent.parent / "docs" / "failures.md").read_text(encoding="utf-8")
    f23_entry = page[page.index('<a id="f23"></a>'):page.index('<a id="f19"></a>')]
    for name, values in facts.SIGMA_SCHEDULES.items():
        assert f"`{name}` ({facts.sigma_text(values)})" in f23_entry, name
    assert all(f"`{old}`, the old name of `{now}`" in f23_entry for old, now in facts.LEGACY_SCHEDULES.items())
