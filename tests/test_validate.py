"""Issue 2: offline validation of API-format graphs names node, input, value and fix."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from subprocess import run as run_process

import pytest
from h3kit.checks import schemas as core_schemas
from h3kit.checks.validator import validate_graph
from h3kit.scripts import schemas

DATA = Path(__file__).parent / "data"

GOOD = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 2, "color": 0}},
    "2": {"class_type": "ImageScale",
          "inputs": {"image": ["1", 0], "upscale_method": "bilinear", "width": 32, "height": 32, "crop": "center"}},
    "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "ok"}},
}


@pytest.fixture(scope="module")
def offline():
    return schemas.offline_schemas()


def errors(graph, offline):
    return [p for p in validate_graph(graph, offline) if p.severity == "error"]


def mutate(change) -> dict:
    graph = copy.deepcopy(GOOD)
    change(graph)
    return graph


def test_good_graph_has_no_problems(offline):
    assert validate_graph(GOOD, offline) == []


def test_hand_made_broken_graph_reports_every_problem_and_exits_2():
    result = run_process([sys.executable, "-m", "h3kit", "validate", str(DATA / "broken_graph.json")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2  # README: 2 = rejected by validation
    out = result.stderr  # problems go to stderr (README, section 'Exit codes and output')
    assert "node 2 (ImageScaleFancyPlus)" in out and "unknown node type" in out
    assert "node 3 (ImageScale) input 'image'" in out and "node 42" in out
    assert "node 1 (EmptyImage) input 'batch_size'" in out and "99999" in out and "<= 4096" in out
    assert "node 3 (ImageScale) input 'crop'" in out and "missing" in out
    assert out.count("Fix:") >= 4


def test_good_file_exits_0(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD))
    result = run_process([sys.executable, "-m", "h3kit", "validate", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout
    assert result.stdout.startswith("OK")


def test_wrong_output_index_names_the_valid_range(offline):
    graph = mutate(lambda g: g["2"]["inputs"].__setitem__("image", ["1", 3]))
    (problem,) = errors(graph, offline)
    assert problem.input == "image" and "has 1 outputs" in problem.message and "0..0" in problem.fix


def test_type_mismatch_is_reported(offline):
    graph = mutate(lambda g: g.update({"9": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}}}))
    graph["2"]["inputs"]["image"] = ["9", 0]
    (problem,) = errors(graph, offline)
    assert "receives SAMPLER" in problem.message and "needs IMAGE" in problem.message


def test_combo_value_outside_options(offline):
    graph = mutate(lambda g: g["2"]["inputs"].__setitem__("upscale_method", "magic"))
    (problem,) = errors(graph, offline)
    assert problem.input == "upscale_method" and "bilinear" in problem.fix


def test_int_off_the_widget_step_suggests_neighbours(offline):
    graph = {
        "1": {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 1344, "height": 768, "length": 125}},
        "2": {"class_type": "SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "x"}},
    }
    found = validate_graph(graph, offline)  # a warning: ComfyUI's /prompt checks min/max only (tier b compares)
    assert [(p.input, p.severity, p.fix) for p in found] == [("length", "warning", "use 124 or 141")]


def test_widget_values_the_host_converts_are_warnings_and_what_it_cannot_convert_errors(offline):
    """ComfyUI's /prompt converts before it checks (int("64") = 64, int(64.5) = 64) and accepts both (measured on
    yzkee @783545f6, 2026-12-02: 200); "abc" fails int() there and here."""
    graph = mutate(lambda g: g["1"]["inputs"].update({"width": "64", "height": 64.5}))
    assert errors(graph, offline) == []
    found = {p.input: p for p in validate_graph(graph, offline)}
    assert found["width"].message == "ComfyUI reads it as 64 (int())" and found["width"].severity == "warning"
    assert found["height"].message == "ComfyUI reads it as 64 (int())"
    graph = mutate(lambda g: g["1"]["inputs"].update({"width": "abc"}))
    (problem,) = errors(graph, offline)
    assert problem.input == "width" and problem.message.startswith("expected INT: ComfyUI cannot convert it")


def test_literal_for_a_link_input(offline):
    """The host does not check a literal in a link input (measured: 200), the node gets the text: a warning."""
    graph = mutate(lambda g: g["2"]["inputs"].__setitem__("image", "not a link"))
    assert errors(graph, offline) == []
    (problem,) = validate_graph(graph, offline)
    assert "IMAGE comes from a link" in problem.message and problem.severity == "warning"


def test_graph_without_output_node(offline):
    graph = mutate(lambda g: g.pop("3"))
    assert any("no output node" in p.message for p in errors(graph, offline))


def test_cycle_is_reported(offline):
    graph = mutate(lambda g: g["2"]["inputs"].__setitem__("image", ["2", 0]))
    assert any("cycle" in p.message for p in errors(graph, offline))


def test_unknown_input_is_a_warning_not_an_error(offline):
    graph = mutate(lambda g: g["2"]["inputs"].__setitem__("widht", 32))
    problems = validate_graph(graph, offline)
    assert [p.severity for p in problems] == ["warning"] and problems[0].input == "widht"


def test_ui_format_file_is_recognised(offline):
    (problem,) = validate_graph({"nodes": [], "links": [], "version": 0.4}, offline)
    assert "UI-format" in problem.message and "API" in problem.fix


def test_f35_missing_pack_is_named(offline):
    graph = mutate(lambda g: g.update({"7": {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": "x.gguf"}}}))
    problems = validate_graph(graph, {k: v for k, v in offline.items() if k != "UnetLoaderGGUF"})
    assert any(p.node_id == "7" and "city96/ComfyUI-GGUF" in p.fix for p in problems)


def test_v3_dotted_keys_are_understood(offline):
    graph = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
        "2": {"class_type": "CreateVideo", "inputs": {"images": ["1", 0], "fps": 24.0}},
        "3": {"class_type": "SaveVideo",
              "inputs": {"video": ["2", 0], "filename_prefix": "v", "format": "mp4", "format.codec": "h264"}},
    }
    assert errors(graph, offline) == []
    graph["3"]["inputs"]["format.codec"] = "divx"
    assert [p.input for p in errors(graph, offline)] == ["format.codec"]


def test_server_mode_unreachable_exits_4(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(GOOD))
    result = run_process([sys.executable, "-m", "h3kit", "validate", str(path), "--server", "http://127.0.0.1:9"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 4 and "cannot reach ComfyUI" in result.stderr


def test_core_schema_file_is_pinned_to_a_version():
    doc = core_schemas.core_document()
    assert doc["comfyui_version"] and doc["sources"]
    for name, info in doc["nodes"].items():
        assert {"input", "output", "output_node"} <= set(info), name


# --- issue 23: validate's false alarms on a real host ---------------------------------------------------

def test_a_missing_input_image_is_the_users_file_not_an_older_comfyui(offline):
    """On a host, LoadImage's combo lists the input folder: a file that is not there is to upload, whatever the
    ComfyUI version (it was reported as "ComfyUI is older than the workflow")."""
    served = copy.deepcopy(offline)
    served["LoadImage"] = {**served["LoadImage"], "input": {"required": {
        "image": [["other.png", "ref_b.png"], {"image_upload": True}]}}}
    graph = {"1": {"class_type": "LoadImage", "inputs": {"image": "ref_a.png"}},
             "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}
    (problem,) = validate_graph(graph, served)
    assert problem.input == "image" and "older than" not in problem.message
    assert problem.message == "'ref_a.png' is not in this server's input folder (it has 2 there)"
    assert problem.fix == ("upload ref_a.png (python -m h3kit run --upload 1=PATH, or drop the file on the node in "
                           "ComfyUI), or copy it into ComfyUI's input folder")
    assert validate_graph(graph, offline) == []  # offline: which files a host has is the server's to say


def test_a_folder_validates_every_json_file_in_it(tmp_path):
    result = run_process([sys.executable, "-m", "h3kit", "validate", str(schemas.API_WORKFLOWS_DIR)],
                         capture_output=True, text=True, timeout=300)
    shipped = sorted(Path(schemas.API_WORKFLOWS_DIR).glob("*.json"))
    assert result.returncode == 0, result.stdout
    assert [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("OK ")] == [
        f"OK {p}" for p in shipped]
    assert "Is a directory" not in result.stdout + result.stderr


def test_a_folder_without_json_files_fails_with_a_clear_line(tmp_path):
    result = run_process([sys.executable, "-m", "h3kit", "validate", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""  # a problem: stderr
    assert result.stderr.strip() == (f"FAIL {tmp_path}: a folder with no .json file in it; pass workflow files or a "
                                     "folder that holds them (e.g. workflows/api)")


def test_run_and_doctor_name_a_folder_as_a_folder(tmp_path):
    from h3kit.adapters.workflow_file import load_graph_file

    graph, problem = load_graph_file(tmp_path)
    assert graph is None and problem.message == f"{tmp_path} is a folder, not a workflow file"
