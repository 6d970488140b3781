"""Issue 15 (+ issue 17's wording): the user mistakes of the issue, each answered right the first time, in one
message, with the exact text and exit code. Server schemas are small hand-written /object_info entries in the
two layouts the real hosts have (flat SaveVideo format + codec; CLIPLoader without 'minimax')."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from h3kit.checks import environment, server
from h3kit.checks.problem import FAIL, PASS, WARN
from h3kit.checks.reports import report_checks
from h3kit.checks.schemas import core_document
from h3kit.checks.validator import validate_graph
from h3kit.checks.verdict import judge
from h3kit.scripts import schemas as schema_src
from h3kit.scripts.cli import main

API = Path(__file__).resolve().parent.parent / "workflows" / "api"


def two_stage() -> dict:
    return json.loads((API / "h3_ltx_two_stage.json").read_text())


def cli(capsys, *argv: str) -> tuple[int, str]:
    """(exit code, stderr): every message these tests read is an error or a warning, so it is on stderr
    (README, section 'Exit codes and output')."""
    code = main(list(argv))
    return code, capsys.readouterr().err


def written(tmp_path: Path, graph: dict) -> str:
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    return str(path)


# --- one fix that satisfies every rule --------------------------------------------------------------

def test_width_700_gets_the_one_width_that_fits_every_rule(tmp_path, capsys):
    graph = two_stage()
    graph["16"]["inputs"]["target_width"] = 700
    code, out = cli(capsys, "validate", written(tmp_path, graph))
    assert code == 2
    assert out.splitlines()[1:] == [
        "  ERROR: node 16 (H3KitDraftToLTX) input 'target_width': target_width 700 must be exactly twice the H3 "
        "draft's width 672 (node 8): otherwise the handoff resamples and the latent grids do not line up "
        "[value: 700]. Fix: use 1344"]
    code, out = cli(capsys, "doctor", "--no-local", "--workflow", written(tmp_path, graph))
    assert code == 2 and out.count("FAIL  ") == 1 and "fix: use 1344" in out  # one input, one message


def test_draft_width_700_names_the_draft_width_the_target_needs(tmp_path, capsys):
    graph = two_stage()
    graph["8"]["inputs"]["width"] = 700
    code, out = cli(capsys, "validate", written(tmp_path, graph))
    assert code == 2
    assert out.splitlines()[1:] == [
        "  ERROR: node 8 (MiniMaxH3ImageToVideo) input 'width': width 700 is not a multiple of 32 (H3's latent "
        "floors other sizes silently, F19) [value: 700]. Fix: use 672 (half of H3KitDraftToLTX node 16's "
        "target_width 1344)"]


def test_draft_and_target_both_off_grid_offer_pairs_that_fit(tmp_path):
    graph = two_stage()
    graph["8"]["inputs"]["width"] = 700
    graph["16"]["inputs"]["target_width"] = 1400
    problems = judge(graph, schema_src.offline_schemas(), schema_src.providing_pack).problems
    assert sorted((p.node_id, p.input, p.fix) for p in problems) == [
        ("16", "target_width", "use 1344 with draft width 672 or use 1408 with draft width 704"),
        ("8", "width", "use 672 (then target_width 1344 on H3KitDraftToLTX node 16) or 704 (then target_width 1408 "
                       "on H3KitDraftToLTX node 16)")]


def test_target_without_a_known_draft_keeps_the_multiple_of_64_rule():
    graph = {"1": {"class_type": "LoadImage", "inputs": {"image": "a.png"}},
             "2": {"class_type": "H3KitDraftToLTX", "inputs": {"frames": ["1", 0], "target_width": 700,
                                                               "target_height": 768}},
             "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 4]}}}
    problems = [p for p in judge(graph, schema_src.offline_schemas(), schema_src.providing_pack).problems
                if p.input == "target_width"]
    assert len(problems) == 1 and problems[0].fix == "use 640 or 704"


# --- unknown node ids ---------------------------------------------------------------------------------

def test_misspelt_h3kit_node_gets_did_you_mean_not_install_h3kit(tmp_path, capsys):
    graph = two_stage()
    graph["16"]["class_type"] = "H3KitDraftToLTXX"
    code, out = cli(capsys, "validate", written(tmp_path, graph))
    assert code == 2
    assert ("  ERROR: node 16 (H3KitDraftToLTXX): unknown node type on this host: no node is called "
            "'H3KitDraftToLTXX' (did you mean 'H3KitDraftToLTX'). Fix: set class_type to 'H3KitDraftToLTX'") in out
    assert "install H3Kit" not in out


def test_misspelt_core_node_gets_did_you_mean():
    graph = {"1": {"class_type": "PreviewImag", "inputs": {}}}
    (problem, *_) = validate_graph(graph, schema_src.offline_schemas(), schema_src.providing_pack)
    assert problem.fix == "set class_type to 'PreviewImage'"


def test_third_party_node_still_names_its_pack():
    graph = {"1": {"class_type": "CLIPLoaderGGUF", "inputs": {}}}
    (problem, *_) = validate_graph(graph, schema_src.offline_schemas(), schema_src.providing_pack)
    assert problem.fix == "install city96/ComfyUI-GGUF, then restart ComfyUI"


# --- core-version differences against an older host's schemas ----------------------------------------

def older_host_schemas() -> dict:
    """The pinned 0.34 schemas, with SaveVideo and CLIPLoader as this repo's older test hosts declare them."""
    schemas = copy.deepcopy(schema_src.offline_schemas())
    schemas["SaveVideo"]["input"] = {"required": {
        "video": ["VIDEO", {}], "filename_prefix": ["STRING", {"default": "video/ComfyUI"}],
        "format": [["auto", "mp4"], {"default": "auto"}], "codec": [["auto", "h264"], {"default": "auto"}]}}
    clip = schemas["CLIPLoader"]["input"]["required"]
    clip["type"] = [[t for t in clip["type"][0] if t != "minimax"], {}]
    clip["clip_name"] = [["t5xxl_fp16.safetensors"], {}]
    return schemas


def test_flat_savevideo_is_named_a_core_version_difference():
    graph = two_stage()
    problems = [p for p in validate_graph(graph, older_host_schemas()) if p.class_type == "SaveVideo"]
    assert [str(p) for p in problems] == [
        "ERROR: node 41 (SaveVideo) input 'format.codec': this ComfyUI's SaveVideo takes 'codec' where the workflow "
        "uses the ComfyUI >= 0.34.0 layout ('format.codec'), a core-version difference; `python -m h3kit run` and the "
        "editor's preflight adapt it before queueing [value: \"h264\"]. Fix: for this ComfyUI rename input "
        "'format.codec' to 'codec', or update ComfyUI to >= 0.34.0"]


def test_missing_combo_option_of_a_core_node_says_update_comfyui():
    graph = two_stage()
    problems = [p for p in validate_graph(graph, older_host_schemas()) if p.node_id == "4"]
    by_input = {p.input: p for p in problems}
    assert by_input["type"].message == ("this ComfyUI's CLIPLoader does not take type = 'minimax', which ComfyUI "
                                        "0.33.0 accepts: this ComfyUI is older than the workflow")
    assert by_input["type"].fix == "update ComfyUI to >= 0.33.0"
    # the model file is the user's to add, never a version difference
    assert by_input["clip_name"].message == ("'qwen3vl_32b_heretic_minimax_h3_nvfp4.safetensors' is not in this "
                                             "server's models/text_encoders (it has 1 there: t5xxl_fp16.safetensors)")
    assert by_input["clip_name"].fix == (
        "put qwen3vl_32b_heretic_minimax_h3_nvfp4.safetensors in models/text_encoders (14.61 GiB, field report R1), "
        "then press R in ComfyUI or restart it. Download: Hugging Face `coolthor/MiniMax-H3-pruned-NVFP4` (gated; "
        "folders in ComfyUI's models/ layout). Licence: MiniMax-H3 community licence: gated, excludes the EU, UK, "
        "South Korea and the USA (as the field reports give it)")


def test_missing_model_file_on_an_empty_server_folder_says_where_to_put_it():
    schemas = older_host_schemas()
    schemas["VAELoader"]["input"]["required"]["vae_name"] = [[], {}]
    problems = [p for p in validate_graph(two_stage(), schemas) if p.node_id == "21"]
    assert [(p.message, p.fix) for p in problems] == [(
        "'ltx-2.5-video-vae-conv-bf16.safetensors' is not in this server's models/vae (that folder is empty)",
        "put ltx-2.5-video-vae-conv-bf16.safetensors in models/vae (1.35 GiB, field report R7), then press R in "
        "ComfyUI or restart it. Download: Hugging Face `Lightricks/LTX-2.5` (gated) or the NVFP4 build "
        "`coolthor/MiniMax-H3-pruned-NVFP4`; the field report names both for this build. Licence: LTX-2.5 licence "
        "(Lightricks, gated, separate from H3's)")]


def test_choice_lists_are_complete():
    schemas = older_host_schemas()
    options = [f"type_{i}" for i in range(16)]
    schemas["CLIPLoader"]["input"]["required"]["type"] = [options, {}]
    schemas["CLIPLoader"] = {**schemas["CLIPLoader"], "pack": "third-party"}  # not a core difference here
    graph = {"1": {"class_type": "CLIPLoader", "inputs": {"clip_name": "t5xxl_fp16.safetensors", "type": "nope"}},
             "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}
    (problem,) = [p for p in validate_graph(graph, schemas) if p.input == "type"]
    assert problem.fix == "choose one of: " + ", ".join(options)


def test_core_node_missing_on_an_older_host():
    graph = {"1": {"class_type": "LTXVLatentUpsampler", "inputs": {}}}
    schemas = {k: v for k, v in older_host_schemas().items() if k != "LTXVLatentUpsampler"}
    (problem, *_) = validate_graph(graph, schemas, schema_src.providing_pack)
    assert problem.message == ("unknown node type on this host: 'LTXVLatentUpsampler' is a ComfyUI core node this "
                               "ComfyUI does not have: this ComfyUI is older than the workflow (ComfyUI 0.12.1 serves it)")
    assert problem.fix == "update ComfyUI to 0.12.1 or later"


# --- doctor: capabilities, not version numbers; only what matters on this machine ---------------------

# 0.12.1 as the graph sees it: LTX-2 AV, no H3 (every node of the graph except the H3 ones and the upscale loader)
LTXAV_HOST = {n["class_type"] for n in two_stage().values()} - {
    "LatentUpscaleModelLoader", "MiniMaxH3ImageToVideo", "MiniMaxH3SigmaShift"}


def test_fork_version_without_native_h3_is_not_the_f01_stack():
    check = server.comfyui_version_check("0.12.1", two_stage(), LTXAV_HOST)
    assert check.status == WARN  # the graph needs H3; each missing H3 node FAILs on its own
    assert check.detail == ("ComfyUI 0.12.1 lacks core nodes this workflow needs (LatentUpscaleModelLoader, "
                            "MiniMaxH3ImageToVideo, MiniMaxH3SigmaShift; read from its node list): this ComfyUI is "
                            "older than the workflow (ComfyUI 0.33.0 serves them)")
    assert check.fix == "update ComfyUI to 0.33.0 or later"
    assert "F01" not in check.detail
    assert server.comfyui_version_check("0.12.1", None, LTXAV_HOST).status == PASS


def test_a_native_h3_host_older_than_0_34_is_not_failed_for_its_version():
    h3_host = LTXAV_HOST | server.native_h3_nodes()
    check = server.comfyui_version_check("0.30.0", two_stage(), h3_host)
    assert check.status == PASS and "F01" in check.detail and "covered by neither" in check.detail
    assert "H3KitLatentGuard checks the refine output of node(s) 32" in check.detail


def test_kitchen_is_judged_against_the_comfyui_that_uses_it():
    assert environment.kitchen_checks("0.2.7", None, comfyui="0.12.1")[0].status == PASS
    assert environment.kitchen_checks("0.2.26", None, comfyui="0.34.0")[0].status == FAIL
    unknown = environment.kitchen_checks("0.2.7", None)[0]
    assert unknown.status == WARN and "python custom_nodes/H3Kit doctor" in unknown.fix
    assert environment.kitchen_checks(None, None)[0].status == PASS  # nothing here needs it


def test_no_cuda_build_warning_on_a_machine_without_a_gpu():
    assert environment.torch_cuda_check("2.11.0+cu128", "12.8", gpu_machine=False).status == PASS
    assert environment.torch_cuda_check("2.11.0+cu128", "12.8", gpu_machine=True).status == WARN
    assert environment.gpu_check(None, gpu_machine=False).status == PASS
    assert environment.gpu_check(None, gpu_machine=True).status == WARN  # a driver but no GPU for torch
    assert server.server_torch_check("2.9.1+cu128", [{"type": "cpu"}]).status == PASS


def test_local_comfyui_version_is_read_from_the_checkout(tmp_path, monkeypatch):
    (tmp_path / "comfyui_version.py").write_text('__version__ = "0.3.64"\n')
    monkeypatch.setattr(environment, "dist_version", lambda *names: None)
    assert environment.local_comfyui_version({"COMFYUI_DIR": str(tmp_path)}) == "0.3.64"


def test_doctor_models_dir_that_does_not_exist_is_a_fail(tmp_path, capsys):
    missing = tmp_path / "nope"
    code, out = cli(capsys, "doctor", "--no-local", "--models-dir", str(missing))
    assert code == 2
    assert out.splitlines()[:2] == [
        f"FAIL  models dir: --models-dir {missing} is not a folder, so no model file could be checked",
        "      fix: pass ComfyUI's models folder, e.g. --models-dir ComfyUI/models"]


def test_doctor_shows_the_optional_node_notes_once(capsys):
    from h3kit.nodes import OPTIONAL_NOTES
    from h3kit.scripts.doctor import optional_node_checks

    assert [c.detail for c in optional_node_checks()] == [n.removeprefix("H3Kit: optional node ")
                                                          for n in OPTIONAL_NOTES]


# --- run: what the H3Kit reports of a successful job said ---------------------------------------------

def test_run_turns_report_warnings_of_a_successful_job_into_lines():
    guard = {"node": "H3KitFrameGuard", "status": "problems", "warnings": [
        "121 of 121 frames are black or solid-colour (100% > max_solid_fraction 0.25). Fix: check the decode"],
        "fallbacks": []}
    outputs = {"7": {"text": [json.dumps(guard)]}, "8": {"images": []},
               "9": {"text": ["FAIL  comfyui version: too old\n      fix: update ComfyUI"]},
               "10": {"text": [json.dumps({"node": "SomethingElse", "warnings": ["x"]})]}}
    lines = [c.line() for c in report_checks(outputs)]
    assert lines == [
        "WARN  report: H3KitFrameGuard (shown by node 7): 121 of 121 frames are black or solid-colour (100% > "
        "max_solid_fraction 0.25). Fix: check the decode\n      fix: see the node's report in the UI",
        "FAIL  report: node 9: comfyui version: too old\n      fix: update ComfyUI"]


def test_pinned_schemas_are_the_reference_for_core_differences():
    doc = core_document()
    assert doc["comfyui_version"] == "0.33.0"  # the host with native H3, read from its /object_info
    assert doc["nodes"]["SaveVideo"]["version"] == "0.34.0"  # the layout the shipped graphs use
    assert {info.get("version") for info in doc["nodes"].values() if info.get("pack", "core") == "core"} == {
        "0.33.0", "0.34.0"}


@pytest.mark.parametrize("address", ["127.0.0.1:9", "http://127.0.0.1:9"])
def test_unreachable_server_exits_4_with_a_fix_for_validate_and_doctor(address, capsys):
    code, out = cli(capsys, "validate", "--server", address, str(API / "h3kit_handoff_demo.json"))
    assert code == 4 and "cannot reach ComfyUI at http://127.0.0.1:9" in out and "Is the server running" in out
    code, out = cli(capsys, "doctor", "--no-local", "--server", address)
    assert code == 4 and "fix: start ComfyUI or pass the right --server URL" in out
