"""Issue 30 item 8, tier (a): one graph, one verdict.

One table of graphs (every shipped API graph, a graph in each of SaveVideo's three layouts, graphs with a real
error) x every entry point, on every kind of host (the pinned schemas offline; a server in each SaveVideo layout):
doctor (`--workflow` offline, `--server --workflow`), validate (offline, `--server`), run's pre-queue check, the
editor's preflight route, the /prompt hook and the H3KitPreflight node (a pasted workflow) give the same verdict,
the same moved inputs and the same failing nodes. An input moved to the host's layout is an INFO line and exit 0,
never a FAIL. Before: on a 0.33.0-layout server `doctor --server` and `validate --server` FAILed (exit 2) every
shipped video graph over SaveVideo's `format.codec`, which `run`, the route and the hook moved to `codec`.
"""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path

import pytest
from fake_comfy import FakeComfy
from h3kit.adapters import server_routes
from h3kit.checks import environment, server
from h3kit.checks.problem import PASS, WARN
from h3kit.checks.rules_files import model_inputs
from h3kit.checks.validator import is_input_file_combo
from h3kit.checks.verdict import judge
from h3kit.nodes.preflight import H3KitPreflight
from h3kit.scripts import schemas as schema_src
from h3kit.scripts.cli import main
from verdict_readers import doctor, from_checks, from_route_report, outcome, run_pre_queue, validate, word

DATA = Path(__file__).parent / "data"
API = Path(schema_src.API_WORKFLOWS_DIR)
SHIPPED = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(API.glob("*.json"))}
PINNED = schema_src.offline_schemas()
SAVEVIDEO_0330 = json.loads((DATA / "savevideo_0.33.0.json").read_text())["SaveVideo"]
SAVEVIDEO_FLAT = {"input": {"required": {  # v0.3.64 and 0.12.1: both combos flat
    "video": ["VIDEO", {}], "filename_prefix": ["STRING", {"default": "video/ComfyUI"}],
    "format": ["COMBO", {"options": ["auto", "mp4"], "default": "auto"}],
    "codec": ["COMBO", {"options": ["auto", "h264"], "default": "auto"}]}},
    "output": ["VIDEO"], "output_node": True}
# SaveVideo's inputs as each layout's own editor writes them (the shipped graphs: >= 0.34)
WRITTEN = {"flat": {"format": "mp4", "codec": "h264"},
           "0.33.0": {"format": "mp4", "codec": "h264", "codec.encoding": "auto"},
           ">=0.34": {"format": "mp4", "format.codec": "h264"}}


def savevideo_id(graph: dict) -> str:
    return next(nid for nid, node in graph.items() if node["class_type"] == "SaveVideo")


def in_layout(layout: str) -> dict:
    graph = copy.deepcopy(SHIPPED["h3_ltx_two_stage"])
    save = graph[savevideo_id(graph)]
    save["inputs"] = {"video": save["inputs"]["video"], "filename_prefix": save["inputs"]["filename_prefix"],
                      **WRITTEN[layout]}
    return graph


def without_filename_prefix() -> dict:  # a schema error: a required input missing
    graph = copy.deepcopy(SHIPPED["h3_ltx_two_stage"])
    del graph[savevideo_id(graph)]["inputs"]["filename_prefix"]
    return graph


def off_grid_h3_length() -> dict:  # a rule error (F20): H3 takes 17k+5 frames
    graph = copy.deepcopy(SHIPPED["h3_ltx_two_stage"])
    next(n for n in graph.values() if n["class_type"] == "MiniMaxH3ImageToVideo")["inputs"]["length"] = 100
    return graph


GRAPHS = {**SHIPPED, **{f"savevideo {layout}": in_layout(layout) for layout in WRITTEN},
          "error: required input missing": without_filename_prefix(), "error: F20 off-grid length": off_grid_h3_length()}


def served(schemas: dict) -> dict:
    """`schemas` as a server serves them: every file combo lists the files the table's graphs name (so the host has
    them all and the verdict is about the graph), H3Kit's own loaders keeping their folder marker as on a host."""
    files: dict[tuple[str, str], set[str]] = {}
    for graph in GRAPHS.values():
        for _, ct, name, _, filename in model_inputs(graph, schemas):
            files.setdefault((ct, name), set()).add(filename)
        for node in graph.values():
            for name, value in node.get("inputs", {}).items():
                if isinstance(value, str):
                    files.setdefault((node["class_type"], name), set()).add(value)
    out = json.loads(json.dumps(schemas))  # as JSON: every spec a list
    for ct, info in out.items():
        for section in ("required", "optional"):
            specs = info.get("input", {}).get(section) or {}
            for name, spec in specs.items():
                opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
                if not (opts.get("model_folder") or is_input_file_combo(opts)):
                    continue
                listed = sorted(files.get((ct, name), set()))
                kept = {k: v for k, v in opts.items() if k != "input_files"}
                if ct.startswith("H3Kit"):
                    specs[name] = [listed, kept]
                else:
                    specs[name] = ["COMBO", {**{k: v for k, v in kept.items() if k != "model_folder"}, "options": listed}]
    return out


HOSTS = {">=0.34": served(PINNED), "0.33.0": served({**PINNED, "SaveVideo": SAVEVIDEO_0330}),
         "flat": served({**PINNED, "SaveVideo": SAVEVIDEO_FLAT})}


def route(graph: dict, schemas: dict) -> dict:
    return from_route_report(server_routes.preflight_report(
        graph, lambda full: server_routes.HostView(schemas, set(schemas), pack_of=schema_src.providing_pack)))


def node_pasted(graph: dict) -> dict:
    result = H3KitPreflight().execute(check_environment=False, workflow_json=json.dumps(graph))
    changes, failing = from_checks(json.loads(result["result"][0])["checks"])
    return outcome(word(failing, changes), changes, failing)


def hook_queues(graph: dict, schemas: dict, monkeypatch) -> dict:
    """What the /prompt hook queues: ComfyUI's validation then judges that prompt."""
    fake_server = types.ModuleType("server")
    classes = {ct: types.SimpleNamespace(GET_NODE_INFO_V1=lambda info=info: copy.deepcopy(info))
               for ct, info in schemas.items()}
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(
        nodes=types.SimpleNamespace(NODE_CLASS_MAPPINGS=classes)))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    return server_routes.adapt_queued_prompt({"prompt": graph, "client_id": "t"})["prompt"]


@pytest.fixture(autouse=True)
def no_local_comfyui(monkeypatch, tmp_path):
    """doctor looks for a ComfyUI models folder from $COMFYUI_DIR and the current folder: none here."""
    monkeypatch.delenv("COMFYUI_DIR", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def fakes():
    started = {name: FakeComfy() for name in HOSTS}
    for name, fake in started.items():
        fake.object_info = HOSTS[name]
    yield started
    for fake in started.values():
        fake.close()


def expected(name: str, host: str | None) -> dict:
    """The verdict by the issue's rule, written out: errors FAIL everywhere; otherwise a graph in the host's own
    layout is OK and one in another layout is ADAPTED (the SaveVideo inputs it moves), never a FAIL."""
    if name.startswith("error:"):
        return {"verdict": "FAIL"}
    layout = ">=0.34" if name in SHIPPED else name.removeprefix("savevideo ")
    has_video = "SaveVideo" in {n["class_type"] for n in GRAPHS[name].values()}
    # flat and 0.33.0 both name the codec 'codec' (0.33.0's extra codec.encoding is ignored by a flat host);
    # >= 0.34 names it 'format.codec'
    moved = has_video and (layout == ">=0.34") != ((host or ">=0.34") == ">=0.34")
    return {"verdict": "ADAPTED" if moved else "OK"}


@pytest.mark.parametrize("name", GRAPHS)
def test_offline_entry_points_give_one_verdict(name, tmp_path, capsys):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPHS[name]))
    verdict = judge(GRAPHS[name], PINNED, schema_src.providing_pack, schema_src.own_node_ids())
    seen = {"doctor --workflow": doctor(path, capsys), "validate": validate(path, capsys),
            "H3KitPreflight (pasted)": node_pasted(GRAPHS[name])}
    codes = {entry: result.pop("exit") for entry, result in seen.items()}
    assert len({json.dumps(r) for r in seen.values()}) == 1, seen
    (result,) = {json.dumps(r): r for r in seen.values()}.values()
    assert result["verdict"] == verdict.status == expected(name, None)["verdict"], (name, result)
    assert codes["doctor --workflow"] == codes["validate"] == (2 if result["verdict"] == "FAIL" else 0)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("name", GRAPHS)
def test_every_entry_point_gives_one_verdict_on_a_server(name, host, fakes, tmp_path, capsys, monkeypatch):
    graph, schemas, url = GRAPHS[name], HOSTS[host], fakes[host].url
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    seen = {"doctor --server --workflow": doctor(path, capsys, url), "validate --server": validate(path, capsys, url),
            "run (before queueing)": run_pre_queue(copy.deepcopy(graph), capsys, url), "editor route": route(graph, schemas)}
    codes = {entry: result.pop("exit") for entry, result in seen.items()}
    assert len({json.dumps(r) for r in seen.values()}) == 1, seen
    result = seen["editor route"]
    assert result["verdict"] == expected(name, host)["verdict"], (name, host, result)
    ok = result["verdict"] != "FAIL"
    assert codes == {"doctor --server --workflow": 0 if ok else 2, "validate --server": 0 if ok else 2,
                     "run (before queueing)": 0 if ok else 2, "editor route": None}
    verdict = judge(graph, schemas, schema_src.providing_pack, schema_src.own_node_ids())
    assert result["changes"] == sorted((c.node_id, c.old_key, c.new_key) for c in verdict.changes)
    # the hook queues the very graph run and the editor queue (ComfyUI's /prompt then judges it)
    assert hook_queues(graph, schemas, monkeypatch) == verdict.graph
    if result["verdict"] == "ADAPTED":
        assert {(old, new) for _, old, new in result["changes"]} <= {
            ("format.codec", "codec"), ("codec", "format.codec"), ("codec.encoding", "format.codec.encoding")}
    assert not ok or result["failing"] == []


def test_the_shipped_graphs_on_a_0_33_host_are_adapted_not_failed(fakes, tmp_path, capsys):
    """The measured bug, literally: `doctor --server` and `validate --server` on a 0.33.0-layout host exit 0 with
    an INFO line naming the move, for every shipped video graph."""
    url = fakes["0.33.0"].url
    for name, graph in SHIPPED.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(graph))
        assert main(["validate", str(path), "--server", url]) == 0, name
        out = capsys.readouterr().out
        assert main(["doctor", "--workflow", str(path), "--server", url, "--no-local"]) == 0, name
        out += capsys.readouterr().out
        if not any(node["class_type"] == "SaveVideo" for node in graph.values()):  # the demo, a split graph's
            assert "INFO" not in out and out.startswith(f"OK {path}")  # stage 1: nothing to move
            continue
        node = savevideo_id(graph)
        line = (f"INFO  adapted: node {node} (SaveVideo): input 'format.codec' -> 'codec' (value 'h264' unchanged): "
                "this ComfyUI's SaveVideo takes it there")
        assert out.count(line) == 2 and out.startswith(f"ADAPTED {path}: 0 error(s)"), out
        assert "verdict ADAPTED" in out and "1 INFO" in out


# --- the CUDA build: one rule for doctor --server and the editor's preflight --------------------------------

@pytest.mark.parametrize("devices, matters", [([{"type": "cpu"}], False), ([], False), ([{"type": "cuda"}], True),
                                              ([{"type": "cpu"}, {"type": "cuda"}], True), (None, True)])
def test_the_cuda_build_is_judged_by_one_rule_on_the_server_and_in_the_editor(devices, matters):
    """On a CPU server the editor warned "use a CUDA 13 torch build" (kitchen's CUDA backend is off) while doctor
    --server said the build does not matter there. Both now read ComfyUI's devices through `renders_on_cuda`."""
    assert environment.renders_on_cuda(devices) is matters
    registry = {"cuda_enabled": False, "capabilities": 3, "scaled_mm_nvfp4": False}
    kitchen = environment.kitchen_checks("0.2.31", registry, comfyui="0.33.0", gpu_machine=matters)
    torch_line = server.server_torch_check("2.9.1+cu128", devices)
    if matters:
        assert [c.status for c in kitchen if c.name == "kitchen registry"] == [WARN]
        assert torch_line.status == WARN
    else:
        (line,) = [c for c in kitchen if c.name == "kitchen registry"]
        assert line.status == PASS and "CUDA 13" not in line.fix and "do not matter" in line.detail
        assert torch_line.status == PASS and "does not matter there" in torch_line.detail


def test_the_editors_environment_lines_follow_comfyuis_device():
    """Inside ComfyUI the route's machine lines are judged with the device ComfyUI renders on (as /system_stats
    lists it): a CPU device gives no CUDA-build warning, whatever torch could see."""
    checks = environment.local_checks("0.33.0", [{"type": "cpu"}])
    assert not [c for c in checks if c.status != PASS and "CUDA" in f"{c.detail} {c.fix}"], [c.line() for c in checks]
