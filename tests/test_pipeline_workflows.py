"""Issue 3: the shipped two-stage workflows validate, and `validate`'s grid rules catch broken variants."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import h3kit
import pytest
from h3kit.adapters.workflow_file import validate_file
from h3kit.scripts import schemas as schema_src

API_DIR = Path(h3kit.__file__).resolve().parent / "workflows" / "api"
TWO_STAGE = ["h3_ltx_two_stage.json", "h3_ltx_two_stage_cached_cond.json", "h3_ltx_two_stage_turing.json",
             "h3_ltx_two_stage_544.json"]


@pytest.fixture(scope="module")
def schemas():
    return schema_src.offline_schemas()


def load(name: str) -> dict:
    return json.loads((API_DIR / name).read_text(encoding="utf-8"))


def problems_of(graph: dict, schemas: dict, tmp_path: Path) -> list:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph))
    return validate_file(path, schemas)


def errors(problems) -> list:
    return [p for p in problems if p.severity == "error"]


def by_class(graph: dict, class_type: str) -> list[dict]:
    return [node for node in graph.values() if node["class_type"] == class_type]


@pytest.mark.parametrize("name", TWO_STAGE)
def test_shipped_two_stage_workflow_validates(name, schemas):
    problems = validate_file(API_DIR / name, schemas)
    assert problems == [], "\n".join(map(str, problems))


@pytest.mark.parametrize("name", TWO_STAGE)
def test_shipped_workflow_follows_the_recipe(name):
    graph = load(name)
    (draft,) = by_class(graph, "MiniMaxH3ImageToVideo")
    (handoff,) = by_class(graph, "H3KitDraftToLTX")
    (setup,) = by_class(graph, "H3KitRefineSetup")
    d, h = draft["inputs"], handoff["inputs"]
    assert d["length"] == 124 and (d["width"] * 2, d["height"] * 2) == (h["target_width"], h["target_height"])
    assert setup["inputs"]["schedule"] == "identity_0.78" and setup["inputs"]["allow_repaint"] is False
    (guard,) = by_class(graph, "H3KitLatentGuard")
    assert guard["inputs"]["mode"] == "error" and "reference" in guard["inputs"]
    (create,) = by_class(graph, "CreateVideo")
    handoff_id = next(k for k, v in graph.items() if v is handoff)
    assert create["inputs"]["audio"] == [handoff_id, 1]  # H3's trimmed audio reaches the mux (F21)
    assert all("_meta" in node and node["_meta"]["title"] for node in graph.values())


def test_variants_differ_where_the_issue_says():
    assert by_class(load("h3_ltx_two_stage.json"), "CLIPTextEncode")
    cached = load("h3_ltx_two_stage_cached_cond.json")
    assert not by_class(cached, "CLIPTextEncode") and not by_class(cached, "CLIPLoader")[1:]
    assert by_class(cached, "H3KitLoadConditioning")[0]["inputs"]["name"] == "ltx_generic_refine.safetensors"
    turing = load("h3_ltx_two_stage_turing.json")
    assert by_class(turing, "UnetLoaderGGUF")[0]["inputs"]["unet_name"].endswith("Q4_K_M.gguf")
    assert all("fp16" in n["inputs"]["vae_name"] for n in by_class(turing, "VAELoader") if "ltx" in n["inputs"]["vae_name"])
    small = by_class(load("h3_ltx_two_stage_544.json"), "H3KitDraftToLTX")[0]["inputs"]
    assert (small["target_width"], small["target_height"]) == (1088, 640)


def _node_id(graph: dict, class_type: str) -> str:
    return next(k for k, v in graph.items() if v["class_type"] == class_type)


def test_rule_draft_must_be_exactly_half_the_output(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph[_node_id(graph, "H3KitDraftToLTX")]["inputs"].update(target_width=1280, target_height=768)
    found = errors(problems_of(graph, schemas, tmp_path))
    # issue 15: one message for the one wrong input, with the value that satisfies every rule
    assert len(found) == 1 and found[0].input == "target_width"
    assert "must be exactly twice the H3 draft's width 672" in found[0].message and found[0].fix == "use 1344"


def test_f20_off_grid_length_through_a_primitive_is_caught(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph["90"] = {"class_type": "PrimitiveInt", "inputs": {"value": 121}, "_meta": {"title": "length"}}
    graph[_node_id(graph, "MiniMaxH3ImageToVideo")]["inputs"]["length"] = ["90", 0]
    (found,) = errors(problems_of(graph, schemas, tmp_path))
    assert found.input == "length" and "17k+5" in found.message and "F20" in found.message
    assert "107 or 124" in found.fix


def test_f19_off_grid_sizes_through_primitives_are_caught(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph["91"] = {"class_type": "PrimitiveInt", "inputs": {"value": 540}, "_meta": {"title": "h"}}
    graph["92"] = {"class_type": "PrimitiveInt", "inputs": {"value": 1080}, "_meta": {"title": "H"}}
    graph[_node_id(graph, "MiniMaxH3ImageToVideo")]["inputs"]["height"] = ["91", 0]
    graph[_node_id(graph, "H3KitDraftToLTX")]["inputs"]["target_height"] = ["92", 0]
    found = errors(problems_of(graph, schemas, tmp_path))
    messages = " | ".join(p.message for p in found)
    assert "height 540 is not a multiple of 32" in messages and "F19" in messages
    assert "target_height 1080 must be twice the H3 draft's height, which is off its grid too" in messages


def test_target_widget_off_64_gets_the_one_width_that_fits_the_draft(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph[_node_id(graph, "H3KitDraftToLTX")]["inputs"]["target_width"] = 1056
    (found,) = errors(problems_of(graph, schemas, tmp_path))  # the schema's "1024 or 1088" is superseded
    assert found.input == "target_width" and found.fix == "use 1344"


def test_strict_policy_with_an_h3_length_is_caught(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph[_node_id(graph, "H3KitDraftToLTX")]["inputs"]["frame_policy"] = "strict"
    (found,) = errors(problems_of(graph, schemas, tmp_path))
    assert found.input == "frame_policy" and "124 frames" in found.message


@pytest.mark.parametrize("schedule", ["ltx2_5_stage2", "ltx2_0_distilled_stage2", "nvidia_official"])
def test_f23_repaint_schedule_needs_allow_repaint(schemas, tmp_path, schedule):
    graph = load("h3_ltx_two_stage.json")
    setup = graph[_node_id(graph, "H3KitRefineSetup")]["inputs"]
    setup["schedule"] = schedule  # the legacy name too: the schema check accepts a saved graph's old combo value
    (found,) = errors(problems_of(graph, schemas, tmp_path))
    assert "F23" in found.message
    setup["allow_repaint"] = True
    allowed = problems_of(graph, schemas, tmp_path)
    assert not errors(allowed) and any("F23" in p.message for p in allowed)
    assert len([p for p in allowed if "old name of 'ltx2_0_distilled_stage2'" in p.message]) == (
        schedule == "nvidia_official")


def test_bad_manual_sigmas_are_caught_offline(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph[_node_id(graph, "H3KitRefineSetup")]["inputs"].update(schedule="manual", manual_sigmas="0.5, 0.6, 0")
    (found,) = errors(problems_of(graph, schemas, tmp_path))
    assert found.input == "manual_sigmas" and "descending" in found.message


def test_ltx_length_off_8n_plus_1_is_caught(schemas, tmp_path):
    graph = {
        "1": {"class_type": "PrimitiveInt", "inputs": {"value": 124}},
        "2": {"class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 768, "height": 512, "length": ["1", 0],
                                                               "batch_size": 1}},
        "3": {"class_type": "SaveLatent", "inputs": {"samples": ["2", 0], "filename_prefix": "x"}},
    }
    found = errors(problems_of(graph, schemas, tmp_path))
    assert [p.input for p in found] == ["length"] and "121 or 129" in found[0].fix


def test_mux_fps_mismatch_is_a_warning(schemas, tmp_path):
    graph = load("h3_ltx_two_stage.json")
    graph[_node_id(graph, "CreateVideo")]["inputs"]["fps"] = 30.0
    found = problems_of(graph, schemas, tmp_path)
    assert not errors(found) and any("drift" in p.message for p in found)


def test_rules_leave_unrelated_graphs_alone(schemas, tmp_path):
    graph = copy.deepcopy({
        "1": {"class_type": "EmptyImage", "inputs": {"width": 100, "height": 60, "batch_size": 3, "color": 0}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}},
    })
    assert problems_of(graph, schemas, tmp_path) == []
