"""UI-format workflow copies and thumbnails (`python -m h3kit workflows ui`), tier (a)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from h3kit.scripts import schemas as schema_src
from h3kit.scripts import workflows_ui as wui
from h3kit.scripts.cli import main as cli_main
from PIL import Image, ImageChops, ImageStat

WORKFLOWS = schema_src.WORKFLOWS_DIR
API_DIR = schema_src.API_WORKFLOWS_DIR
NAMES = sorted(p.stem for p in API_DIR.glob("*.json"))
TITLE_BAR = 30  # litegraph draws the title above `pos`


@pytest.fixture(scope="module")
def schemas() -> dict:
    return schema_src.offline_schemas()


def ui_to_api(workflow: dict, schemas: dict) -> dict:
    """The API graph the frontend would queue for a UI-format workflow (every widget value included).

    Test-only (issue 16): the inverse of the generator, used to prove the UI copies round-trip."""
    by_link = {link[0]: link for link in workflow["links"]}
    ui_to_api_id = {n["id"]: n.get("properties", {}).get("h3kit_api_id", str(n["id"])) for n in workflow["nodes"]}
    graph: dict[str, dict] = {}
    for node in workflow["nodes"]:
        info = schemas[node["type"]]
        inputs: dict[str, Any] = {}
        linked_names = {s["name"] for s in node["inputs"] if s.get("link") is not None}
        slot_names = {s["name"] for s in node["inputs"]}
        widgets = wui.widget_layout(info, {name: None for name in slot_names})
        for widget, value in zip(widgets, node.get("widgets_values", []), strict=True):
            if widget.is_value and widget.name not in linked_names:
                inputs[widget.name] = value
        for slot in node["inputs"]:
            if slot.get("link") is not None:
                _link_id, origin, origin_slot, _target, _target_slot, _type = by_link[slot["link"]]
                inputs[slot["name"]] = [ui_to_api_id[origin], origin_slot]
        api_node = {"inputs": inputs, "class_type": node["type"]}
        if node.get("title"):
            api_node["_meta"] = {"title": node["title"]}
        graph[ui_to_api_id[node["id"]]] = api_node
    return graph


def _api(name: str) -> dict:
    return json.loads((API_DIR / f"{name}.json").read_text(encoding="utf-8"))


def _ui(name: str) -> dict:
    return json.loads((WORKFLOWS / f"{wui.ui_name(name)}.json").read_text(encoding="utf-8"))


def _is_link(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and isinstance(value[1], int)


def _spec_default(spec: list):
    head, opts = spec[0], (spec[1] if len(spec) > 1 else {})
    if "default" in opts:
        return opts["default"]
    options = head if isinstance(head, list) else opts.get("options", [])
    return options[0]


def test_shipped_workflows_exist():
    assert NAMES, "workflows/api/ has no graphs"


def test_generated_files_are_current(schemas):
    stale = wui.stale_files(API_DIR, WORKFLOWS, schemas)
    assert stale == [], f"run `python -m h3kit workflows ui` and commit: {stale}"


def test_no_api_format_file_directly_in_workflows():
    for path in WORKFLOWS.glob("*.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc.get("version") == 0.4 and isinstance(doc.get("nodes"), list), f"{path.name} is not UI format"
        assert not any(isinstance(v, dict) and "class_type" in v for v in doc.values()), f"{path.name} is API format"


@pytest.mark.parametrize("name", NAMES)
def test_committed_ui_file_round_trips_to_its_api_graph(schemas, name):
    source, back = _api(name), ui_to_api(_ui(name), schemas)
    assert set(back) == set(source)
    for node_id, node in source.items():
        got = back[node_id]
        assert got["class_type"] == node["class_type"]
        assert got["_meta"]["title"] == node["_meta"]["title"]
        for key, value in node["inputs"].items():
            expected = [str(value[0]), value[1]] if _is_link(value) else value
            assert got["inputs"].get(key) == expected, f"node {node_id} input {key}"
        declared = schemas[node["class_type"]]["input"]
        for key in set(got["inputs"]) - set(node["inputs"]):  # widgets the API graph left at their default
            spec = declared.get("required", {}).get(key) or declared.get("optional", {}).get(key)
            assert spec is not None, f"node {node_id}: {key} is not a declared input"
            assert got["inputs"][key] == _spec_default(spec), f"node {node_id} input {key}"


@pytest.mark.parametrize("name", NAMES)
def test_links_are_consistent(name):
    ui, source = _ui(name), _api(name)
    nodes = {n["id"]: n for n in ui["nodes"]}
    api_links = sorted((str(v[0]), v[1], nid, key) for nid, n in source.items()
                       for key, v in n["inputs"].items() if _is_link(v))
    assert len(ui["links"]) == len(api_links)
    assert ui["last_link_id"] == max((lk[0] for lk in ui["links"]), default=0)
    assert ui["last_node_id"] == max(nodes)
    seen = []
    for link_id, origin, origin_slot, target, target_slot, link_type in ui["links"]:
        out, slot = nodes[origin]["outputs"][origin_slot], nodes[target]["inputs"][target_slot]
        assert link_id in out["links"] and slot["link"] == link_id
        assert out["type"] == link_type
        seen.append((str(origin), origin_slot, str(target), slot["name"]))
    assert sorted(seen) == api_links
    for node in ui["nodes"]:  # no dangling references
        for slot in node["inputs"]:
            assert slot["link"] is None or any(lk[0] == slot["link"] for lk in ui["links"])


@pytest.mark.parametrize("name", NAMES)
def test_layout_reads_forward_without_overlaps(name):
    """No node covers another; every link runs right, or down into a later row (the pipeline wraps into rows to fit
    the window), never back up."""
    ui = _ui(name)
    nodes = {n["id"]: n for n in ui["nodes"]}
    boxes = {i: (n["pos"][0], n["pos"][1] - TITLE_BAR, n["pos"][0] + n["size"][0], n["pos"][1] + n["size"][1])
             for i, n in nodes.items()}
    ids = sorted(boxes)
    for a_index, a in enumerate(ids):
        for b in ids[a_index + 1:]:
            ax0, ay0, ax1, ay1 = boxes[a]
            bx0, by0, bx1, by1 = boxes[b]
            assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, f"nodes {a} and {b} overlap"
    for _id, origin, _os, target, _ts, _type in ui["links"]:
        assert boxes[origin][2] < boxes[target][0] or boxes[origin][1] < boxes[target][1], \
            f"link {origin} -> {target} runs back up and left"


# A 1600 x 1000 window: the canvas below the tab bar, less the side bar and toolbars over it (scripts/workflows_ui.py).
WINDOW_CANVAS, CANVAS_CLEAR = (1600, 960), (60, 60, 20)  # (left, top, right/bottom margin)
TEXT_ZOOM = 8 / 14  # 1.49/1.58: MinFontSizeForLOD 8 px / node text 14 px; below it nodes are drawn without text


@pytest.mark.parametrize("name", NAMES)
def test_every_graph_opens_whole_at_a_zoom_where_its_text_is_drawn(name):
    """Issue 30: the two-stage graph opened as a strip at 13 %, every node a grey box. The view each file saves
    (extra.ds, which the pack's extension applies to its templates) shows every node and group inside the window's
    free canvas at a zoom >= 8/14."""
    ui = _ui(name)
    scale, (ox, oy) = ui["extra"]["ds"]["scale"], ui["extra"]["ds"]["offset"]
    assert TEXT_ZOOM <= scale <= 1, scale
    left, top, margin = CANVAS_CLEAR
    rects = [(n["pos"][0], n["pos"][1] - TITLE_BAR, n["pos"][0] + n["size"][0], n["pos"][1] + n["size"][1])
             for n in ui["nodes"]] + [(g["bounding"][0], g["bounding"][1], g["bounding"][0] + g["bounding"][2],
                                       g["bounding"][1] + g["bounding"][3]) for g in ui["groups"]]
    for x0, y0, x1, y1 in rects:
        sx0, sy0, sx1, sy1 = ((x0 + ox) * scale, (y0 + oy) * scale, (x1 + ox) * scale, (y1 + oy) * scale)
        assert sx0 >= left - 1 and sy0 >= top - 1, (name, x0, y0)
        assert sx1 <= WINDOW_CANVAS[0] - margin + 1 and sy1 <= WINDOW_CANVAS[1] - margin + 1, (name, x1, y1)


LOAD_IMAGE_MIN_HEIGHT = 314  # the smallest LoadImage in the official templates (comfyui-workflow-templates-json 0.1.47)


def test_picture_upload_nodes_hold_room_for_the_picture(schemas):
    """The editor draws a picked picture inside LoadImage and grows the node to fit; a node sized for its widgets only
    then covers the node under it (the Ref2VA prompt, found on 0.33.0's editor)."""
    uploads = [(name, n) for name in NAMES for n in _ui(name)["nodes"]
               if any(w.spec == [wui.PICTURE_UPLOAD] for w in wui.widget_layout(schemas[n["type"]], {}))]
    assert {n["type"] for _name, n in uploads} == {"LoadImage"}
    assert len(uploads) == 6  # two pictures in each Ref2VA graph and in the Ref2VA two-stage graph's stage 1
    for name, node in uploads:
        assert node["size"][1] >= LOAD_IMAGE_MIN_HEIGHT, f"{name}: node {node['id']} is {node['size'][1]} px tall"


@pytest.mark.parametrize("name", NAMES)
def test_groups_hold_their_stage_and_do_not_overlap(name):
    ui = _ui(name)
    titles = [g["title"] for g in ui["groups"]]
    assert titles and set(titles) <= {"H3 draft", "handoff", "LTX refine", "output"}
    assert len(titles) == len(set(titles))
    rects = [(g["bounding"][0], g["bounding"][1], g["bounding"][0] + g["bounding"][2], g["bounding"][1] + g["bounding"][3])
             for g in ui["groups"]]
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], f"groups overlap in {name}"
    inside = 0
    for node in ui["nodes"]:
        x, y = node["pos"]
        holders = [r for r in rects if r[0] <= x and x + node["size"][0] <= r[2] and r[1] <= y - TITLE_BAR
                   and y + node["size"][1] <= r[3]]
        assert len(holders) <= 1
        inside += len(holders)
    assert inside >= len(ui["nodes"]) // 2


def test_stages_follow_the_pipeline_on_the_two_stage_graph():
    """Groups in reading order: each next stage starts right of the one before, or below it."""
    ui = _ui("h3_ltx_two_stage")
    assert [g["title"] for g in ui["groups"]] == ["H3 draft", "handoff", "LTX refine", "output"]
    corners = [(g["bounding"][0], g["bounding"][1]) for g in ui["groups"]]
    for (x0, y0), (x1, y1) in zip(corners, corners[1:], strict=False):
        assert x1 > x0 or y1 > y0, corners


# --- the template browser: titles, descriptions, the demo first (issue 30) ----------------------------------------

CARD_TITLE_CHARS = 32  # what a card shows of a title before cutting it with "..." (1.49.6 and 1.58.1 at 1600 px)


def test_every_shipped_graph_has_a_title_and_a_description():
    for name in NAMES:
        template = wui.TEMPLATES[name]
        assert 0 < len(template.title) <= CARD_TITLE_CHARS and template.description, name
        assert (WORKFLOWS / f"{template.title}.json").is_file() and (WORKFLOWS / f"{template.title}.jpg").is_file()
        assert _ui(name)["extra"]["h3kit"]["description"] == template.description
    assert len({wui.TEMPLATES[n].title for n in NAMES}) == len(NAMES)


def test_the_demo_is_marked_start_here_no_model_needed():
    (first,) = [n for n in NAMES if wui.TEMPLATES[n].start_here]
    assert first == "h3kit_handoff_demo" and wui.TEMPLATES[first].title == "Start here - no model needed"
    assert not {n["type"] for n in _ui(first)["nodes"]} & {"UNETLoader", "CLIPLoader", "VAELoader", "LoraLoaderModelOnly"}


def test_the_thumbnail_shows_the_title_the_description_and_the_start_here_mark():
    """The card's picture is where a custom node's template can say what it is: the description and the mark are
    drawn (the pixels under the title differ from the same picture without them)."""
    from h3kit.scripts.workflow_thumbnail import draw_stage_diagram

    stages = [("handoff", ["a node"]), ("output", ["a report"])]

    def pixels(**kwargs) -> Image.Image:
        return Image.open(io.BytesIO(draw_stage_diagram("A title", stages, "c", **kwargs))).convert("L")

    plain, described, marked = pixels(), pixels(description="what it does"), pixels(start_here=True)
    band = (14, 34, 498, 52)  # the line under the title
    assert ImageStat.Stat(ImageChops.difference(plain, described).crop(band)).mean[0] > 5
    assert ImageStat.Stat(marked.crop((14, 10, 200, 32))).mean[0] > 100  # the yellow mark above the title
    assert ImageStat.Stat(plain.crop((14, 10, 200, 32))).mean[0] < 100


@pytest.mark.parametrize("title", ["a/b", "a\\b", "a:b", "a?b", "a#b", "a%b", "a+b", "it's", " lead", "dot.", "x" * 101])
def test_a_title_that_is_no_safe_file_name_is_refused(monkeypatch, title):
    monkeypatch.setitem(wui.TEMPLATES, "g", wui.Template(title, "d"))
    with pytest.raises(wui.WorkflowUIError, match="cannot be a file name"):
        wui.ui_name("g")


def test_the_thumbnail_goes_stale_when_the_description_changes(tmp_path: Path, monkeypatch, capsys):
    api_dir, out_dir = tmp_path / "api", tmp_path
    api_dir.mkdir()
    shutil.copy(API_DIR / f"{NAMES[0]}.json", api_dir / "g.json")
    args = ["workflows", "ui", "--api-dir", str(api_dir), "--out-dir", str(out_dir)]
    monkeypatch.setitem(wui.TEMPLATES, "g", wui.Template("A title", "one description"))
    assert cli_main(args) == 0 and (out_dir / "A title.jpg").is_file()
    monkeypatch.setitem(wui.TEMPLATES, "g", wui.Template("A title", "another description"))
    capsys.readouterr()
    assert cli_main([*args, "--check"]) == 1
    assert "A title.jpg: stale" in capsys.readouterr().err


def test_widget_values_follow_the_frontends_serialisation(schemas):
    # Expected lists as ComfyUI frontend 1.27.10 serialises these nodes (observed in tier d's browser).
    graph = {
        "1": {"class_type": "RandomNoise", "inputs": {"noise_seed": 7}, "_meta": {"title": "Seed"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "a.png"}, "_meta": {"title": "Image"}},
        "3": {"class_type": "ImageScale", "inputs": {"image": ["2", 0], "upscale_method": "nearest-exact",
                                                      "width": 64, "height": 32, "crop": "disabled"}, "_meta": {"title": "Scale"}},
        "4": {"class_type": "CreateVideo", "inputs": {"images": ["3", 0], "fps": 24.0}, "_meta": {"title": "Mux"}},
        "5": {"class_type": "SaveVideo", "inputs": {"video": ["4", 0], "filename_prefix": "v/x", "format": "mp4",
                                                    "format.codec": "h264"}, "_meta": {"title": "Save"}},
    }
    ui = {n["id"]: n for n in wui.api_to_ui("probe", graph, schemas)["nodes"]}
    assert ui[1]["widgets_values"] == [7, "fixed"]
    assert ui[2]["widgets_values"] == ["a.png", "image"]
    assert ui[3]["widgets_values"][:4] == ["nearest-exact", 64, 32, "disabled"]
    assert ui[5]["widgets_values"] == ["v/x", "mp4", "h264"]
    # link-only sockets come first, then one socket per widget (the frontend's slot order)
    assert [s["name"] for s in ui[4]["inputs"]][:2] == ["images", "audio"]
    assert ui[4]["inputs"][1].get("shape") == 7  # optional socket
    assert [s["name"] for s in ui[5]["inputs"]] == ["video", "filename_prefix", "format", "format.codec"]


def test_autogrow_slots_are_sockets_named_by_their_api_key(schemas):
    graph = {
        "1": {"class_type": "LoadImage", "inputs": {"image": "a.png"}, "_meta": {"title": "A"}},
        "2": {"class_type": "LoadImage", "inputs": {"image": "b.png"}, "_meta": {"title": "B"}},
        "3": {"class_type": "CLIPLoader", "inputs": {"clip_name": "c.safetensors", "type": "minimax", "device": "default"},
              "_meta": {"title": "CLIP"}},
        "4": {"class_type": "MiniMaxH3ReferenceToVideo", "_meta": {"title": "Ref"}, "inputs": {
            "clip": ["3", 0], "prompt": "p", "width": 672, "height": 384, "length": 124, "ref_image_size": "match",
            "ref_images.ref_image_0": ["1", 0], "ref_images.ref_image_1": ["2", 0]}},
        "5": {"class_type": "PreviewAny", "inputs": {"source": ["4", 0]}, "_meta": {"title": "Out"}},
    }
    ui = wui.api_to_ui("probe", graph, schemas)
    ref = next(n for n in ui["nodes"] if n["id"] == 4)
    slots = {s["name"]: s for s in ref["inputs"]}
    assert slots["ref_images.ref_image_0"]["link"] is not None and "widget" not in slots["ref_images.ref_image_0"]
    assert ui_to_api(ui, schemas)["4"]["inputs"]["ref_images.ref_image_1"] == ["2", 0]


def test_unknown_node_type_is_named_with_the_fix(schemas):
    graph = {"7": {"class_type": "NoSuchNode", "inputs": {}, "_meta": {"title": "x"}}}
    with pytest.raises(wui.WorkflowUIError, match=r"node 7 .*NoSuchNode"):
        wui.api_to_ui("probe", graph, schemas)


def test_non_numeric_api_ids_survive_the_round_trip(schemas):
    graph = {
        "src": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0},
                "_meta": {"title": "Empty"}},
        "out": {"class_type": "PreviewImage", "inputs": {"images": ["src", 0]}, "_meta": {"title": "Show"}},
    }
    ui = wui.api_to_ui("probe", graph, schemas)
    assert all(isinstance(n["id"], int) for n in ui["nodes"])
    assert ui_to_api(ui, schemas)["out"]["inputs"]["images"] == ["src", 0]


@pytest.mark.parametrize("name", NAMES)
def test_thumbnail_is_a_small_diagram_of_the_graph(name):
    data = (WORKFLOWS / f"{wui.ui_name(name)}.jpg").read_bytes()
    assert len(data) < 60_000
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "JPEG"
        assert image.size == (512, 320)  # the template card is 16:10; a square image hides under its badge
        spread = ImageStat.Stat(image.convert("L")).stddev[0]
    assert spread > 10, "thumbnail is (nearly) blank"


def test_thumbnails_differ_between_workflows():
    digests = {(WORKFLOWS / f"{wui.ui_name(n)}.jpg").read_bytes() for n in NAMES}
    assert len(digests) == len(NAMES)


def test_check_reports_stale_copy_and_generate_fixes_it(tmp_path: Path, capsys):
    api_dir, out_dir = tmp_path / "api", tmp_path
    api_dir.mkdir()
    shutil.copy(API_DIR / f"{NAMES[0]}.json", api_dir / "g.json")
    args = ["workflows", "ui", "--api-dir", str(api_dir), "--out-dir", str(out_dir)]
    assert cli_main([*args, "--check"]) == 1  # nothing generated yet
    assert cli_main(args) == 0
    assert (out_dir / "g.json").is_file() and (out_dir / "g.jpg").is_file()
    assert cli_main([*args, "--check"]) == 0
    graph = json.loads((api_dir / "g.json").read_text())
    next(iter(graph.values()))["_meta"]["title"] = "renamed"
    (api_dir / "g.json").write_text(json.dumps(graph))
    capsys.readouterr()
    assert cli_main([*args, "--check"]) == 1
    out = capsys.readouterr().err  # problems go to stderr
    assert "g.json: stale" in out and "g.jpg: stale" in out


def test_thumbnail_of_the_wrong_size_is_stale(tmp_path: Path, capsys):
    api_dir, out_dir = tmp_path / "api", tmp_path
    api_dir.mkdir()
    shutil.copy(API_DIR / f"{NAMES[0]}.json", api_dir / "g.json")
    args = ["workflows", "ui", "--api-dir", str(api_dir), "--out-dir", str(out_dir)]
    assert cli_main(args) == 0
    with Image.open(out_dir / "g.jpg") as image:
        comment = image.info["comment"]
        image.resize((400, 400)).save(out_dir / "g.jpg", format="JPEG", comment=comment)  # same fingerprint
    capsys.readouterr()
    assert cli_main([*args, "--check"]) == 1
    assert "g.jpg: stale" in capsys.readouterr().err
