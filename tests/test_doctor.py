"""doctor and the workflow lints: each catalogue trap on a crafted graph, plus the environment checks."""

from __future__ import annotations

import argparse
import json
import struct
import types
from pathlib import Path

import pytest
from comfyui_host import execution_error
from h3kit.adapters.model_folders import folder_files
from h3kit.checks import environment, rules, rules_files, rules_lints, server
from h3kit.checks.problem import FAIL, PASS, WARN
from h3kit.scripts import doctor, schemas
from h3kit.scripts.schemas import offline_schemas

SCHEMAS = offline_schemas()


def refine_graph(sigmas: str = "0.78, 0.643, 0.546, 0", latent_from: str = "LTXVLatentUpsampler") -> dict:
    """LTX refining an H3 draft (H3 latent -> VAEDecode -> VAEEncode -> LTXVLatentUpsampler) with ManualSigmas;
    the sampler's latent comes from `latent_from`."""
    latent = {"LTXVLatentUpsampler": {"class_type": "LTXVLatentUpsampler",
                                      "inputs": {"samples": ["9", 0], "upscale_model": ["8", 0], "vae": ["7", 0]}},
              "EmptyLTXVLatentVideo": {"class_type": "EmptyLTXVLatentVideo",
                                       "inputs": {"width": 768, "height": 512, "length": 97, "batch_size": 1}}}[latent_from]
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "ltx.safetensors", "weight_dtype": "default"}},
        "2": {"class_type": "BasicGuider", "inputs": {"model": ["1", 0], "conditioning": ["3", 0]}},
        "3": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["3", 0]}},
        "4": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "5": {"class_type": "ManualSigmas", "inputs": {"sigmas": sigmas}},
        "6": {"class_type": "SamplerCustomAdvanced", "inputs": {"noise": ["10", 0], "guider": ["2", 0],
                                                                "sampler": ["4", 0], "sigmas": ["5", 0],
                                                                "latent_image": ["11", 0]}},
        "7": {"class_type": "VAELoader", "inputs": {"vae_name": "ltx_vae.safetensors"}},
        "8": {"class_type": "LatentUpscaleModelLoader", "inputs": {"model_name": "up.safetensors"}},
        "9": {"class_type": "VAEEncode", "inputs": {"pixels": ["12", 0], "vae": ["7", 0]}},
        "10": {"class_type": "RandomNoise", "inputs": {"noise_seed": 1}},
        "11": latent,
        "12": {"class_type": "VAEDecode", "inputs": {"samples": ["13", 1], "vae": ["14", 0]}},
        "13": {"class_type": "MiniMaxH3ImageToVideo", "inputs": {"clip": ["15", 0], "vae": ["14", 0], "prompt": "a cat",
                                                                "width": 672, "height": 384, "length": 124}},
        "14": {"class_type": "VAELoader", "inputs": {"vae_name": "h3_vae.safetensors"}},
        "15": {"class_type": "CLIPLoader", "inputs": {"clip_name": "qwen.safetensors", "type": "minimax"}},
    }


def all_rules(graph: dict) -> list:
    """What validate and doctor apply: every rule in RULES (issue 3's grid rules and these lints)."""
    return [problem for rule in rules.RULES for problem in rule(graph, SCHEMAS)]


def at(problems, node_id: str, input_name: str) -> list:
    return [p for p in problems if p.node_id == node_id and p.input == input_name]


# --- F23 refine first sigma -----------------------------------------------------------------------

def test_f23_refine_starting_above_cliff_is_an_error():
    problems = rules_lints.lint_refine_first_sigma(refine_graph("0.909375, 0.725, 0.421875, 0"), SCHEMAS)
    assert [p.severity for p in problems] == ["error"]
    assert problems[0].node_id == "5" and "F23" in problems[0].message and "0.909375" in problems[0].message


@pytest.mark.parametrize("first, fails", [(0.85, True), (0.81, True), (0.8, False), (0.78, False)])
def test_f23_offline_lint_cliff_is_the_documented_0_8(first, fails):
    # README/field notes: identity held at 0.78, details change at 0.85; the limit is 0.8 (strictly above fails).
    problems = rules_lints.lint_refine_first_sigma(refine_graph(f"{first}, 0.5, 0"), SCHEMAS)
    assert [p.severity for p in problems if "F23" in p.message] == (["error"] if fails else [])


def test_f23_identity_schedule_passes():
    assert rules_lints.lint_refine_first_sigma(refine_graph("0.78, 0.643, 0.546, 0"), SCHEMAS) == []


def test_f23_first_sigma_of_a_draft_from_an_empty_latent_is_not_a_refine():
    graph = refine_graph("1.0, 0.9, 0.5, 0", latent_from="EmptyLTXVLatentVideo")
    assert rules_lints.lint_refine_first_sigma(graph, SCHEMAS) == []


def refine_setup_graph(**inputs) -> dict:
    graph = refine_graph()
    graph["5"] = {"class_type": "H3KitRefineSetup", "inputs": {"model": ["1", 0], **inputs}}
    graph["6"]["inputs"]["sigmas"] = ["5", 2]
    graph["6"]["inputs"]["sampler"] = ["5", 1]
    return graph


@pytest.mark.parametrize(("inputs", "severity"), [
    ({"schedule": "ltx2_0_distilled_stage2", "allow_repaint": False}, "error"),
    ({"schedule": "ltx2_0_distilled_stage2", "allow_repaint": True}, "warning"),
    ({"schedule": "ltx2_5_stage2", "allow_repaint": False}, "error"),  # the node refines H3 drafts: 0.85 repaints
    ({"schedule": "ltx2_5_stage2", "allow_repaint": True}, "warning"),
    ({"schedule": "manual", "manual_sigmas": "0.85, 0.5, 0", "allow_repaint": False}, "error"),
    ({"schedule": "identity_0.78", "allow_repaint": False}, None),
    ({"schedule": "manual", "manual_sigmas": "0.7, 0.4, 0", "allow_repaint": False}, None),
])
def test_f23_refine_setup_schedules_are_checked_once(inputs, severity):
    problems = [p for p in all_rules(refine_setup_graph(sampler="euler", **inputs)) if "F23" in p.message]
    assert [p.severity for p in problems] == ([severity] if severity else [])


def test_f23_unparseable_manual_sigmas_are_reported_once_with_the_reason():
    graph = refine_setup_graph(schedule="manual", manual_sigmas="0.5, 0.7, 0", sampler="euler")
    problems = at(all_rules(graph), "5", "manual_sigmas")
    assert len(problems) == 1 and "descending" in problems[0].message


# --- F15 effect marker --------------------------------------------------------------------------

def h3_graph(prompt: str = "a cat", width: int = 672, height: int = 384, length: int | str = 124) -> dict:
    return {
        "1": {"class_type": "CLIPLoader", "inputs": {"clip_name": "qwen.safetensors", "type": "minimax"}},
        "2": {"class_type": "VAELoader", "inputs": {"vae_name": "h3_vae.safetensors"}},
        "3": {"class_type": "MiniMaxH3ImageToVideo", "inputs": {"clip": ["1", 0], "vae": ["2", 0], "prompt": prompt,
                                                                "width": width, "height": height, "length": length}},
    }


@pytest.mark.parametrize("prompt", ["embedding:minimaxh3_bullet_time a man jumps", "  embedding:x a man"])
def test_f15_marker_at_prompt_start_warns(prompt):
    problems = rules_lints.lint_effect_marker_position(h3_graph(prompt), SCHEMAS)
    assert any("F15" in p.message and "start" in p.message for p in problems)


def test_f15_marker_mid_sentence_is_fine():
    prompt = "integrated_multimodal_description: [Shot 1] embedding:minimaxh3_bullet_time a man jumps"
    assert rules_lints.lint_effect_marker_position(h3_graph(prompt), SCHEMAS) == []


def test_f15_marker_glued_to_text_is_literal():
    problems = rules_lints.lint_effect_marker_position(h3_graph("[Shot 1] (embedding:x:1.2) a man"), SCHEMAS)
    assert len(problems) == 1 and "literal" in problems[0].message


# --- F27 sampler / LoRA family --------------------------------------------------------------------

def lora_graph(lora: str, sampler: str) -> dict:
    graph = refine_graph()
    graph["13"] = {"class_type": "LoraLoaderModelOnly",
                   "inputs": {"model": ["1", 0], "lora_name": lora, "strength_model": 1.0}}
    graph["2"]["inputs"]["model"] = ["13", 0]
    graph["4"]["inputs"]["sampler_name"] = sampler
    return graph


@pytest.mark.parametrize(("lora", "sampler", "flagged"), [
    ("minimax_h3_fl2v_turbo_4step_v0.1_768p_sla.safetensors", "res_multistep", False),
    ("minimax_h3_fl2v_turbo_4step_v0.1_768p_sla.safetensors", "euler", True),
    ("wan_lightx2v_4step.safetensors", "euler_ancestral", True),
    ("h3_pdd_distill.safetensors", "euler", False),
    ("h3_pdd_distill.safetensors", "res_multistep", True),
    ("my_style.safetensors", "euler", False),
])
def test_f27_sampler_lora_family(lora, sampler, flagged):
    problems = rules_lints.lint_sampler_lora_family(lora_graph(lora, sampler), SCHEMAS)
    assert bool(problems) == flagged
    if flagged:
        assert "F27" in problems[0].message and problems[0].node_id == "6"


# --- F19 sizes, F20 lengths ---------------------------------------------------------------------

def test_f19_h3_size_off_grid_is_reported_once_with_neighbours():
    problems = at(all_rules(h3_graph(width=1920, height=1080)), "3", "height")
    assert len(problems) == 1 and "F19" in problems[0].message and problems[0].fix == "use 1056 or 1088"


def test_f19_sizes_through_a_primitive_node_are_checked():
    graph = h3_graph()
    graph["9"] = {"class_type": "PrimitiveInt", "inputs": {"value": 500}}
    graph["3"]["inputs"]["width"] = ["9", 0]
    assert len(at(all_rules(graph), "3", "width")) == 1


def test_f19_ltx_image_to_video_size_off_grid():
    graph = {"1": {"class_type": "LTXVImgToVideo", "inputs": {"width": 770, "height": 512, "length": 97}}}
    problems = all_rules(graph)
    assert [(p.input, p.fix) for p in problems] == [("width", "use 768 or 800")] and "F19" in problems[0].message


@pytest.mark.parametrize(("length", "fix"), [(120, "use 107 or 124"), (240, "use 226 or 243")])
def test_f20_h3_length_off_17k_plus_5_is_reported_once(length, fix):
    problems = at(all_rules(h3_graph(length=length)), "3", "length")
    assert len(problems) == 1 and "17k+5" in problems[0].message and problems[0].fix.startswith(fix)


@pytest.mark.parametrize("length", ["", None])
def test_f20_empty_length_is_an_error(length):
    problems = at(all_rules(h3_graph(length=length)), "3", "length")
    assert len(problems) == 1 and "empty" in problems[0].message and problems[0].severity == "error"


def test_f20_ltx_length_must_be_8n_plus_1():
    graph = refine_graph(latent_from="EmptyLTXVLatentVideo")
    graph["11"]["inputs"]["length"] = 124
    problems = at(all_rules(graph), "11", "length")
    assert len(problems) == 1 and problems[0].fix == "use 121 or 129"
    graph["11"]["inputs"]["length"] = 121
    assert at(all_rules(graph), "11", "length") == []


def test_f20_ltx_audio_latent_frames_on_8n_plus_1():
    graph = {"1": {"class_type": "LTXVEmptyLatentAudio", "inputs": {"frames_number": 124, "frame_rate": 24.0,
                                                                     "batch_size": 1}}}
    problems = all_rules(graph)
    assert [(p.input, p.fix) for p in problems] == [("frames_number", "use 121 or 129")]


def test_f19_f20_good_h3_draft_passes():
    assert all_rules(h3_graph()) == []


# --- F16 Spectrum warmup ------------------------------------------------------------------------

def spectrum_graph(warmup: int, steps: int) -> dict:
    graph = refine_graph(latent_from="EmptyLTXVLatentVideo")
    graph["14"] = {"class_type": "SpectrumApplyMiniMaxH3", "inputs": {"model": ["1", 0], "enabled": True,
                                                                      "warmup_steps": warmup}}
    graph["2"]["inputs"]["model"] = ["14", 0]
    graph["5"] = {"class_type": "BasicScheduler", "inputs": {"model": ["14", 0], "scheduler": "simple",
                                                              "steps": steps, "denoise": 1.0}}
    return graph


def test_f16_spectrum_warmup_at_or_above_steps_never_forecasts():
    problems = rules_lints.lint_spectrum_warmup(spectrum_graph(5, 4), SCHEMAS)
    assert len(problems) == 1 and "F16" in problems[0].message and problems[0].severity == "warning"


def test_f16_spectrum_with_room_to_forecast_passes():
    assert rules_lints.lint_spectrum_warmup(spectrum_graph(5, 14), SCHEMAS) == []


def test_f16_disabled_spectrum_is_ignored():
    graph = spectrum_graph(5, 4)
    graph["14"]["inputs"]["enabled"] = False
    assert rules_lints.lint_spectrum_warmup(graph, SCHEMAS) == []


# --- F13 safetensors headers, embedding widths ---------------------------------------------------

def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], metadata: dict | None) -> None:
    """A structurally valid safetensors file with zeroed tensor data."""
    sizes = {"U8": 1, "F8_E4M3": 1, "F16": 2, "BF16": 2, "F32": 4}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        nbytes = count * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


NVFP4_TENSORS = {"blk.weight": ("U8", [8, 4]), "blk.weight_scale": ("F8_E4M3", [8, 1]),
                 "blk.weight_scale_2": ("F32", []), "blk.comfy_quant": ("U8", [19])}


def header_graph() -> dict:
    graph = h3_graph("[Shot 1] embedding:fx a man")
    graph["4"] = {"class_type": "UNETLoader", "inputs": {"unet_name": "h3_nvfp4.safetensors", "weight_dtype": "default"}}
    return graph


def test_f13_quantized_file_without_quantization_metadata_is_an_error(tmp_path):
    write_safetensors(tmp_path / "diffusion_models" / "h3_nvfp4.safetensors", NVFP4_TENSORS, {"format": "pt"})
    problems = rules_files.safetensors_lint(folder_files(tmp_path))(header_graph(), SCHEMAS)
    f13 = [p for p in problems if "F13" in p.message]
    assert len(f13) == 1 and f13[0].node_id == "4" and f13[0].severity == "error"


def test_f13_quantized_file_with_metadata_passes(tmp_path):
    write_safetensors(tmp_path / "diffusion_models" / "h3_nvfp4.safetensors", NVFP4_TENSORS,
                      {"_quantization_metadata": "{}"})
    problems = rules_files.safetensors_lint(folder_files(tmp_path))(header_graph(), SCHEMAS)
    assert not [p for p in problems if p.node_id == "4"]


def test_f13_truncated_file_is_reported(tmp_path):
    target = tmp_path / "diffusion_models" / "h3_nvfp4.safetensors"
    target.parent.mkdir(parents=True)
    target.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    problems = rules_files.safetensors_lint(folder_files(tmp_path))(header_graph(), SCHEMAS)
    assert any(p.node_id == "4" and "does not fit" in p.message for p in problems)


def test_f14_vae_without_metadata_is_an_error(tmp_path):
    write_safetensors(tmp_path / "vae" / "h3_vae.safetensors", {"w": ("F16", [2])}, None)
    problems = rules_files.safetensors_lint(folder_files(tmp_path))(header_graph(), SCHEMAS)
    assert any(p.node_id == "2" and "F14" in p.message and p.severity == "error" for p in problems)


@pytest.mark.parametrize(("width", "flagged"), [(4096, True), (5120, False)])
def test_f15_embedding_width_must_match_h3(tmp_path, width, flagged):
    write_safetensors(tmp_path / "embeddings" / "fx.safetensors", {"qwen3vl_32b": ("F16", [3, width])}, {})
    problems = rules_files.safetensors_lint(folder_files(tmp_path))(header_graph(), SCHEMAS)
    assert any("wide" in p.message for p in problems) == flagged


def test_missing_embedding_is_reported(tmp_path):
    problems = rules_files.safetensors_lint(folder_files(tmp_path))(header_graph(), SCHEMAS)
    assert any("not in models/embeddings" in p.message for p in problems)


def test_locator_never_escapes_the_models_folder(tmp_path):
    (tmp_path / "secret.safetensors").write_bytes(b"x")
    files = folder_files(tmp_path / "models")
    assert files.locate("vae", "../../secret.safetensors") is None


def test_graph_lints_are_registered_in_validate_rules():
    for lint in rules_lints.GRAPH_LINTS:
        assert lint in rules.RULES


# --- environment checks -----------------------------------------------------------------------

def test_f12_cuda_12_torch_warns_and_names_the_fix():
    check = environment.torch_cuda_check("2.11.0+cu128", "12.8")
    assert check.status == WARN and "F12" in check.detail and "cu130" in check.fix
    assert environment.torch_cuda_check("2.13.0+cu130", "13.0").status == PASS


def test_f12_kitchen_registry_without_nvfp4_gemm_warns():
    registry = types.SimpleNamespace(is_enabled=lambda name: False, list_functions=lambda: ["quantize_nvfp4"])
    state = environment.kitchen_registry_state(types.SimpleNamespace(registry=registry))
    assert state == {"cuda_enabled": False, "capabilities": 1, "scaled_mm_nvfp4": False}
    checks = environment.kitchen_checks("0.2.31", state)
    assert [c.status for c in checks] == [PASS, WARN] and "F12" in checks[1].detail


def test_old_kitchen_fails():
    # issue 17: judged against the ComfyUI that uses it (0.34 needs >= 0.2.31; unknown ComfyUI: a WARN)
    assert environment.kitchen_checks("0.2.26", None, comfyui="0.34.0")[0].status == FAIL
    assert environment.kitchen_checks("0.2.26", None)[0].status == WARN


def test_server_torch_tag_cuda_major():
    assert environment.cuda_major_from_torch_tag("2.11.0+cu128") == 12
    assert server.server_torch_check("2.11.0+cu128").status == WARN
    assert server.server_torch_check("2.9.1+cpu").status == PASS


@pytest.mark.parametrize(("sage", "cap", "status"), [
    ("2.2.0", (7, 5), FAIL),
    ("1.0.6", (12, 0), WARN),
    ("1.0.6", (7, 5), PASS),
    ("2.2.0+cu130torch2.10.0", (12, 0), PASS),
])
def test_f28_sageattention_version_vs_architecture(sage, cap, status):
    checks = environment.sage_checks(sage, None, cap, 13)
    assert checks[0].status == status


def test_f28_sageattn3_is_flagged_as_a_separate_package():
    checks = environment.sage_checks(None, "1.0.0", (12, 0), 13)
    assert checks[-1].status == WARN and "F28" in checks[-1].detail


def test_gpu_without_bf16_warns():
    assert environment.gpu_check((7, 5), "RTX 2080 Ti", False).status == WARN
    assert environment.gpu_check((9, 0), "H200", True).status == PASS


def test_triton_cache_location_from_env(tmp_path):
    (tmp_path / "a").mkdir()
    check = environment.triton_check({"TRITON_CACHE_DIR": str(tmp_path)})
    assert str(tmp_path) in check.detail and "1 entries" in check.detail


# --- server-side checks (pure parts) -----------------------------------------------------------

H3_HOST = {"MiniMaxH3ImageToVideo", "EmptyMiniMaxH3LatentAV", "SamplerCustomAdvanced", "H3KitLatentGuard"}


def guarded(graph: dict) -> dict:
    """The refine output checked by H3KitLatentGuard against the latent the refine starts from (node 11)."""
    return {**graph, "20": {"class_type": "H3KitLatentGuard", "inputs": {
        "latent": ["6", 0], "mode": "error", "min_correlation": 0.5, "reference": ["11", 0]}}}


@pytest.mark.parametrize("version", ["0.33.0", "0.31.0", "0.34.0", "0.40.2", None])
def test_f01_a_native_h3_host_is_never_failed_for_its_version(version):
    """Issue 23 item 4: the evidence is two data points, not a version threshold."""
    for graph in (None, h3_graph(), refine_graph(), guarded(refine_graph())):
        assert server.comfyui_version_check(version, graph, H3_HOST).status != FAIL


def test_f01_states_the_two_data_points_and_where_the_host_stands():
    check = server.comfyui_version_check("0.33.0", guarded(refine_graph()), H3_HOST, kitchen="0.2.31")
    assert check.status == PASS
    assert check.detail == (
        "ComfyUI 0.33.0 with comfy-kitchen 0.2.31 serves native MiniMax-H3; the field report's two data points for "
        "the two-stage refine (F01): correct on ComfyUI 0.34.0 + comfy-kitchen 0.2.31, black or noise frames with "
        "status 'success' on 0.30.0 + 0.2.26; this stack is covered by neither; H3KitLatentGuard checks the refine "
        "output of node(s) 6 and stops a garbage refine")


def test_f01_an_unguarded_refine_on_an_untested_stack_warns_with_the_guard_as_fix():
    check = server.comfyui_version_check("0.33.0", refine_graph(), H3_HOST)
    assert check.status == WARN and check.node_id == "6"
    assert "nothing in this workflow checks the output of refine node(s) 6" in check.detail
    assert check.fix.startswith("put H3KitLatentGuard after the refine sampler with 'reference'")
    # a guard without 'reference' cannot correlate: it does not count
    no_reference = guarded(refine_graph())
    del no_reference["20"]["inputs"]["reference"]
    assert server.comfyui_version_check("0.33.0", no_reference, H3_HOST).status == WARN


def test_f01_the_correct_stack_passes_and_the_garbage_stack_warns_even_when_guarded():
    assert server.comfyui_version_check("0.34.0", refine_graph(), H3_HOST, "0.2.31").status == PASS
    garbage = server.comfyui_version_check("0.30.0", guarded(refine_graph()), H3_HOST, "0.2.26")
    assert garbage.status == WARN and "this is the stack that produced garbage" in garbage.detail
    assert "expect this run to stop there" in garbage.detail and "0.34.0" in garbage.fix
    # the kitchen decides: 0.30.0 with an unknown kitchen is "covered by neither"
    assert "covered by neither" in server.comfyui_version_check("0.30.0", None, H3_HOST).detail


def test_f01_no_refine_no_f01():
    check = server.comfyui_version_check("0.31.0", h3_graph(), H3_HOST)
    assert check.status == PASS and check.detail.endswith("this workflow has no refine stage, so F01 does not apply")


def test_f01_shipped_two_stage_graphs_are_guarded():
    for path in sorted(Path(schemas.API_WORKFLOWS_DIR).glob("*.json")):
        refines, guarded_ids = server.refine_guard_state(json.loads(path.read_text()))
        assert refines == guarded_ids, path.name


def test_f35_missing_nodes_name_the_providing_pack():
    graph = spectrum_graph(1, 14)
    checks = server.missing_node_checks(graph, [n["class_type"] for n in graph.values()
                                                if n["class_type"] != "SpectrumApplyMiniMaxH3"])
    assert len(checks) == 1 and checks[0].status == FAIL
    assert "SpectrumApplyMiniMaxH3" in checks[0].detail and "xmarre/ComfyUI-Spectrum-MiniMax-H3" in checks[0].fix


def test_doctor_offline_workflow_exit_status(tmp_path, capsys):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(refine_graph("0.909375, 0.725, 0.421875, 0")))
    parser = argparse.ArgumentParser()
    doctor.add_arguments(parser)
    code = doctor.run(parser.parse_args(["--workflow", str(path), "--no-local", "--json"]))
    report = json.loads(capsys.readouterr().out)
    assert code == 2 and any("F23" in c["detail"] for c in report["checks"])  # README: 2 = workflow errors


# --- H3KitPreflight node ------------------------------------------------------------------------

def test_preflight_node_lints_the_graph_it_sits_in():
    from h3kit.nodes.preflight import H3KitPreflight

    graph = {**refine_graph("0.909375, 0.725, 0.421875, 0"),
             "99": {"class_type": "H3KitPreflight", "inputs": {"strict": False, "check_environment": False,
                                                                "workflow_json": ""}}}
    out = H3KitPreflight().execute(strict=False, check_environment=False, workflow_json="", prompt=graph)
    report = json.loads(out["result"][0])
    assert report["source"] == "this graph" and report["fail"] == 1
    assert any("F23" in c["detail"] for c in report["checks"]) and "F23" in out["ui"]["text"][0]


def test_preflight_strict_raises_naming_the_problem_and_the_fix():
    from h3kit.nodes.common import H3KitInputError
    from h3kit.nodes.preflight import H3KitPreflight

    with pytest.raises(H3KitInputError, match=r"F23.*fix: use 0\.78"):
        H3KitPreflight().execute(strict=True, check_environment=False, workflow_json="",
                                 prompt=refine_graph("0.909375, 0.725, 0.421875, 0"))


def test_preflight_strict_passes_a_clean_graph_and_checks_pasted_json():
    from h3kit.nodes.common import H3KitInputError
    from h3kit.nodes.preflight import H3KitPreflight

    out = H3KitPreflight().execute(strict=True, check_environment=False, workflow_json="", prompt=refine_graph())
    assert json.loads(out["result"][0])["fail"] == 0
    pasted = H3KitPreflight().execute(strict=False, check_environment=False,
                                      workflow_json=json.dumps(h3_graph(length=120)), prompt=refine_graph())
    assert json.loads(pasted["result"][0])["source"] == "workflow_json" and "17k+5" in pasted["ui"]["text"][0]
    with pytest.raises(H3KitInputError, match="workflow_json"):
        H3KitPreflight().execute(strict=False, check_environment=False, workflow_json="{not json", prompt=None)


@pytest.mark.comfyui
def test_preflight_strict_stops_a_real_comfyui_run(comfyui_server):
    graph = {
        "1": {"class_type": "H3KitPreflight", "inputs": {"strict": True, "check_environment": True,
                                                         "workflow_json": ""}},
        "2": {"class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 64, "height": 64, "length": 124,
                                                               "batch_size": 1}},
    }
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "error"
    error = execution_error(entry)
    assert error["node_type"] == "H3KitPreflight" and "8n+1" in error["exception_message"]
    graph["1"]["inputs"]["strict"] = False
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "success"
    text = entry["outputs"]["1"]["text"][0]
    served = comfyui_server.get("/system_stats")["system"]["comfyui_version"]
    (version_line,) = [line for line in text.splitlines() if "comfyui version:" in line]
    assert "8n+1" in text and served in version_line  # the version this host serves, whichever host it is
