"""Tier (a): the pack's routes inside ComfyUI (adapters/server_routes.py) without a ComfyUI.

The preflight route must answer what `validate` and `doctor --workflow` answer for the same graph (one rule
engine); it is exercised through a real aiohttp server with the routes registered on a stand-in PromptServer.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from re import compile as regex
from urllib.parse import quote

import pytest
from h3kit.adapters import preflight_request, server_routes
from h3kit.adapters.model_folders import folder_files
from h3kit.adapters.workflow_file import validate_file
from h3kit.checks.problem import FAIL, INFO, PASS, WARN, Check
from h3kit.checks.validator import validate_graph
from h3kit.checks.workflow import frontend_widget_inputs
from h3kit.scripts import doctor, workflows_ui
from h3kit.scripts.schemas import offline_schemas, providing_pack

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402
from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

PACK_ROOT = Path(__file__).resolve().parent.parent
API_DIR = PACK_ROOT / "workflows" / "api"
SCHEMAS = offline_schemas()
PACK_FOLDER = "H3Kit"
CLIFF_SIGMAS = "0.95, 0.7, 0.4, 0"  # F23: a refine above 0.8 repaints faces


PACK = server_routes.PackNodes({}, providing_pack)  # what __init__.py hands in (here: no disabled node)


def offline_host(graph: dict, pack: server_routes.PackNodes = PACK) -> server_routes.HostView:
    """A host that has every pinned core node and every H3Kit node, and no model folders."""
    return server_routes.HostView(SCHEMAS, set(SCHEMAS), disabled=pack.disabled, pack_of=pack.pack_of)


def shipped(name: str) -> dict:
    return json.loads((API_DIR / f"{name}.json").read_text(encoding="utf-8"))


def node_of(graph: dict, class_type: str) -> dict:
    return next(n for n in graph.values() if n["class_type"] == class_type)


def repaint_cliff() -> dict:
    graph = shipped("h3_ltx_two_stage")
    node_of(graph, "H3KitRefineSetup")["inputs"].update(schedule="manual", manual_sigmas=CLIFF_SIGMAS)
    return graph


def off_grid_length() -> dict:
    graph = shipped("h3_ltx_two_stage")
    node_of(graph, "MiniMaxH3ImageToVideo")["inputs"]["length"] = 100  # F20: H3 takes 17k+5 frames
    return graph


def odd_size() -> dict:
    graph = shipped("h3_ltx_two_stage")
    node_of(graph, "H3KitDraftToLTX")["inputs"]["target_width"] = 1300  # F19: output sides are multiples of 64
    return graph


SAMPLES = {**{p.stem: (lambda p=p: shipped(p.stem)) for p in sorted(API_DIR.glob("*.json"))},
           "f23_repaint_cliff": repaint_cliff, "f20_off_grid_length": off_grid_length, "f19_odd_size": odd_size}


def report_for(graph: dict) -> dict:
    return server_routes.preflight_report(graph, offline_host)


def graph_items(report: dict) -> Counter:
    """The route's workflow lines (missing nodes and the environment are reported by their own checks)."""
    return Counter((c["status"], c["detail"], c["fix"]) for c in report["checks"] if c["check"] != "nodes")


def doctor_items(graph: dict, tmp_path: Path, capsys) -> Counter:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    doctor.run(doctor_args(path))
    printed = json.loads(capsys.readouterr().out)
    # doctor without a models folder says it could not look for the files (or that the graph names none); the route
    # always has the host's folders (its offline stand-in here has none and checks no files)
    return Counter((c["status"], c["detail"], c["fix"]) for c in printed["checks"]
                   if not (c["name"] == "model files" and (c["detail"].startswith("not checked")
                                                           or c["status"] == "PASS")))


def doctor_args(path: Path):
    import argparse

    parser = argparse.ArgumentParser()
    doctor.add_arguments(parser)
    return parser.parse_args(["--workflow", str(path), "--json", "--no-local"])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_route_answers_what_doctor_workflow_answers(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("COMFYUI_DIR", raising=False)  # doctor would read headers from $COMFYUI_DIR/models
    graph = SAMPLES[name]()
    assert graph_items(report_for(graph)) == doctor_items(graph, tmp_path, capsys)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_route_reports_what_validate_reports(name, tmp_path):
    graph = SAMPLES[name]()
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    problems = validate_file(path, SCHEMAS, providing_pack)  # what `validate FILE` prints
    status_of = {"error": FAIL, "warning": WARN}
    expected = Counter((status_of[p.severity], p.message, p.fix) for p in problems)
    messages = [p.message for p in problems]
    report = report_for(graph)
    found = Counter((c["status"], next((m for m in messages if m in c["detail"]), c["detail"]), c["fix"])
                    for c in report["checks"] if c["status"] != PASS)
    assert not expected - found, "validate reports what the route does not"
    if not any(p.severity == "error" for p in validate_graph(graph, SCHEMAS, providing_pack)):
        assert found == expected  # validate runs the graph rules only on a schema-valid graph; doctor always
    assert report["status"] == max([PASS, *(s for s, _, _ in expected)], key=server_routes.STATUS_ORDER.index)


def test_f23_repaint_cliff_fails_with_the_node_and_the_fix():
    report = report_for(repaint_cliff())
    assert report["status"] == "FAIL" and report["fail"] == 1
    (item,) = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert "F23" in item["detail"] and "0.95" in item["detail"]
    assert item["node_id"] == next(k for k, n in repaint_cliff().items() if n["class_type"] == "H3KitRefineSetup")
    assert "H3KitRefineSetup" in item["detail"] and item["fix"]


def test_f35_missing_node_names_the_pack_that_provides_it():
    graph = shipped("h3_ltx_two_stage")
    host = server_routes.HostView(SCHEMAS, set(SCHEMAS) - {"LTXVLatentUpsampler"})
    report = server_routes.preflight_report(graph, lambda g: host)
    (item,) = [c for c in report["checks"] if c["check"] == "nodes"]
    assert item["status"] == "FAIL" and "LTXVLatentUpsampler" in item["detail"]
    assert item["fix"] == "update ComfyUI to 0.12.1 or later"  # a core node: the oldest test host that serves it
    assert graph[item["node_id"]]["class_type"] == "LTXVLatentUpsampler"


def test_model_files_are_checked_against_the_host_folders(tmp_path):
    graph = shipped("h3_ltx_two_stage")
    host = server_routes.HostView(SCHEMAS, set(SCHEMAS), files=folder_files(tmp_path))  # empty model folders
    report = server_routes.preflight_report(graph, lambda g: host)
    missing = [c for c in report["checks"] if c["check"] == "model files"]
    assert missing and all(c["status"] == "FAIL" and "models/" in c["fix"] and c["node_id"] in graph for c in missing)


def test_nodes_the_frontend_left_out_are_reported_missing_not_as_dangling_links(routes):
    """A frontend leaves nodes of unknown types out of the prompt; it names them in "absent"."""
    graph = shipped("h3_ltx_two_stage")
    absent = {k: n["class_type"] for k, n in graph.items() if n["class_type"].startswith("MiniMaxH3")}
    sent = {k: n for k, n in graph.items() if k not in absent}
    host = server_routes.HostView(SCHEMAS, set(SCHEMAS) - set(absent.values()), pack_of=providing_pack)
    report = server_routes.preflight_report(server_routes.with_absent_nodes(sent, absent), lambda g: host)
    missing = {c["node_id"] for c in report["checks"] if c["check"] == "nodes" and c["status"] == FAIL}
    assert missing == set(absent) and all("(ComfyUI 0.33.0 serves it)" in c["detail"] and c["fix"] == "update ComfyUI "
                                          "to 0.33.0 or later" for c in report["checks"] if c["check"] == "nodes")
    assert not [c for c in report["checks"] if "not in the graph" in c["detail"]]
    status, body = call(routes, "POST", "/h3kit/preflight", json={"prompt": sent, "absent": {**absent, "13": "X"}})
    assert status == 200 and json.loads(body)["status"] == FAIL  # an id already in the graph is not replaced
    assert server_routes.with_absent_nodes(sent, {"99": "A" * 201, "98": 5, "97": "Ok"}) == {**sent, "97": {
        "class_type": "Ok", "inputs": {}}}


def test_environment_checks_of_the_server_are_part_of_the_answer():
    env = Check(WARN, "torch", "a CPU-only build", "install a CUDA build")
    host = server_routes.HostView(SCHEMAS, set(SCHEMAS), environment=lambda graph: [env])
    report = server_routes.preflight_report(shipped("h3_ltx_two_stage"), lambda g: host)
    assert {"status": "WARN", "check": "torch", "detail": "a CPU-only build", "fix": "install a CUDA build"} in report["checks"]
    assert report["status"] == "WARN"


@pytest.mark.parametrize("graph", [[], {}, {"1": "KSampler"}, "text"])
def test_not_a_graph_is_one_fail_with_the_fix(graph):
    report = report_for(graph)
    assert report["status"] == "FAIL" and report["fail"] == 1 and "prompt" in report["checks"][0]["fix"]


def test_a_node_whose_schema_raises_is_named_and_the_rest_checked():
    class Broken:
        @classmethod
        def INPUT_TYPES(cls):
            raise IndexError("list index out of range")

    class Fine:
        CATEGORY, RETURN_TYPES = "test", ("IMAGE",)

        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"width": ("INT", {"default": 8})}}

    schemas, notes = server_routes.node_schemas({"Broken": Broken, "Fine": Fine}, ["Broken", "Fine", "Absent"])
    assert list(schemas) == ["Fine"] and schemas["Fine"]["input"]["required"]["width"][0] == "INT"
    assert [n.status for n in notes] == ["WARN"] and "Broken" in notes[0].detail and "IndexError" in notes[0].detail



class _BaseNodesOnly(Mapping):
    """Like the installable fork's `nodes` shim outside a running prompt: only the base nodes."""

    def __init__(self, names):
        self._names = {name: type(name, (), {}) for name in names}

    def __getitem__(self, name):
        return self._names[name]

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)


def test_the_route_reads_the_nodes_the_server_serves_not_the_forks_base_node_shim(monkeypatch):
    """On the installable 0.12.1 fork `nodes.NODE_CLASS_MAPPINGS` lists only base nodes outside a prompt; the
    served ones (H3Kit's, V3 nodes like PreviewAny) live on PromptServer.instance.nodes. Found in tier (d): the
    editor's Run stopped at "H3KitTestPattern is not registered on this host" for the pack's own demo."""
    from h3kit.nodes import NODE_CLASS_MAPPINGS as OWN

    graph = shipped("h3kit_handoff_demo")
    served = {n["class_type"]: OWN.get(n["class_type"], object) for n in graph.values()}
    fake_nodes = types.ModuleType("nodes")
    fake_nodes.NODE_CLASS_MAPPINGS = _BaseNodesOnly(["KSampler", "PreviewImage"])
    fake_server = types.ModuleType("server")
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(
        nodes=types.SimpleNamespace(NODE_CLASS_MAPPINGS=served)))
    monkeypatch.setitem(sys.modules, "nodes", fake_nodes)
    monkeypatch.setitem(sys.modules, "server", fake_server)
    assert server_routes.served_node_classes() is served
    host = server_routes.comfyui_host(graph, PACK)
    assert host.node_ids == set(served) and "H3KitTestPattern" in host.schemas
    report = server_routes.preflight_report(graph, lambda g: server_routes.HostView(
        host.schemas, host.node_ids, pack_of=providing_pack))
    assert [c for c in report["checks"] if c["check"] == "nodes" and c["status"] == FAIL] == []
    # Comfy-Org layout: no `nodes` on the PromptServer, the module's dict is the registry
    fake_server.PromptServer.instance = types.SimpleNamespace(routes=None)
    fake_nodes.NODE_CLASS_MAPPINGS = served
    assert server_routes.served_node_classes() is served


def test_values_of_the_editors_own_widgets_are_not_reported_as_typos():
    """Frontend 1.40 queues PreviewAny with its display widgets' values (`preview`, `previewMode`), which the node
    does not declare and ComfyUI ignores: no warning from the editor's check (found in tier (d) on 0.12.1), while
    `validate` on a file still names an undeclared input."""
    graph = shipped("h3kit_handoff_demo")
    previews = [k for k, n in graph.items() if n["class_type"] == "PreviewAny"]
    assert previews and "PreviewAny" in SCHEMAS
    for node_id in previews:
        graph[node_id]["inputs"].update(preview="", previewMode=False)
    assert report_for(graph) == report_for(shipped("h3kit_handoff_demo"))
    assert any("input not declared" in p.message for p in validate_graph(graph, SCHEMAS))
    linked = {**graph, previews[0]: {**graph[previews[0]], "inputs": {**graph[previews[0]]["inputs"], "extra": ["1", 0]}}}
    assert frontend_widget_inputs(linked, SCHEMAS) == {(node_id, name) for node_id in previews
                                                       for name in ("preview", "previewMode")}
    assert any(c.get("node_id") == previews[0] and "'extra'" in c["detail"] for c in report_for(linked)["checks"])

# --- through HTTP, registered on a stand-in PromptServer --------------------------------------------

@pytest.fixture
def routes(monkeypatch):
    table = web.RouteTableDef()
    fake_server = types.ModuleType("server")
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=table))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    monkeypatch.setattr(server_routes, "comfyui_host", offline_host)
    assert server_routes.register_routes(PACK_FOLDER, PACK) is True
    return table


def call(table: web.RouteTableDef, method: str, path: str, **kwargs) -> tuple[int, bytes]:
    async def go():
        app = web.Application()
        app.add_routes(table)
        async with TestClient(TestServer(app)) as client:
            response = await client.request(method, path, **kwargs)
            return response.status, await response.read()

    return asyncio.run(go())


def test_get_tells_the_extension_which_nodes_it_watches(routes):
    status, body = call(routes, "GET", "/h3kit/preflight")
    pattern = json.loads(body)["watch"]
    assert status == 200

    watched = regex(pattern)
    assert all(watched.search(t) for t in ("H3KitRefineSetup", "MiniMaxH3ImageToVideo", "LTXVLatentUpsampler",
                                           "EmptyMiniMaxH3LatentAV", "LTXAVTextEncoderLoader"))
    assert not any(watched.search(t) for t in ("KSampler", "SaveImage", "CLIPTextEncode", "MyLTXVNode"))


def test_post_returns_the_report_of_the_graph(routes):
    status, body = call(routes, "POST", "/h3kit/preflight", json={"prompt": repaint_cliff()})
    report = json.loads(body)
    assert status == 200 and report["status"] == "FAIL" and report["elapsed_ms"] >= 0
    assert {k: v for k, v in report.items() if k != "elapsed_ms"} == report_for(repaint_cliff())


@pytest.mark.parametrize("data, status", [
    (b"{not json", 400), (b'"a string"', 400), (b'{"graph": {}}', 400), (b'{"prompt": [1, 2]}', 400),
    (b"\xff\xfe", 400),
])
def test_post_rejects_bodies_that_are_not_a_prompt(routes, data, status):
    got, body = call(routes, "POST", "/h3kit/preflight", data=data, headers={"Content-Type": "application/json"})
    assert got == status and "prompt" in json.loads(body)["fix"]


def test_post_refuses_oversized_bodies_and_graphs(routes, monkeypatch):
    monkeypatch.setattr(preflight_request, "MAX_BODY_BYTES", 1000)
    got, _ = call(routes, "POST", "/h3kit/preflight", data=b"x" * 1001, headers={"Content-Type": "application/json"})
    assert got == 413
    monkeypatch.setattr(preflight_request, "MAX_BODY_BYTES", 10**6)
    monkeypatch.setattr(preflight_request, "MAX_NODES", 3)
    demo = shipped("h3kit_handoff_demo")
    got, body = call(routes, "POST", "/h3kit/preflight", json={"prompt": demo})
    assert got == 413 and f"{len(demo)} nodes" in json.loads(body)["error"]


def test_a_broken_check_is_a_500_that_says_why(routes, monkeypatch):
    def broken(graph, pack):
        raise RuntimeError("folder_paths exploded")

    monkeypatch.setattr(server_routes, "comfyui_host", broken)
    got, body = call(routes, "POST", "/h3kit/preflight", json={"prompt": repaint_cliff()})
    assert got == 500 and "folder_paths exploded" in json.loads(body)["error"]


def test_the_route_checks_with_the_pack_nodes_handed_in_at_registration(monkeypatch):
    """adapters/ never import nodes/: the registration (__init__.py) hands the pack's disabled nodes and its
    pack_of to register_routes, and every check of the editor's route builds its host view with them."""
    table = web.RouteTableDef()
    fake_server = types.ModuleType("server")
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=table))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    pack = server_routes.PackNodes({"sageattention": ["H3KitSageAttention"]}, providing_pack)
    seen = []

    def recording_host(graph, given):
        seen.append(given)
        return offline_host(graph, given)

    monkeypatch.setattr(server_routes, "comfyui_host", recording_host)
    assert server_routes.register_routes(PACK_FOLDER, pack) is True
    for _ in range(2):
        assert call(table, "POST", "/h3kit/preflight", json={"prompt": repaint_cliff()})[0] == 200
    assert seen == [pack, pack]


def test_templates_are_served_from_the_workflows_folder_only(routes):
    name = workflows_ui.ui_name("h3kit_handoff_demo")  # "Start here - no model needed": spaces and a comma in URLs
    for suffix in (".json", ".jpg"):
        got, body = call(routes, "GET", f"/workflow_templates/{PACK_FOLDER}/{quote(name)}{suffix}")
        assert got == 200 and body == (PACK_ROOT / "workflows" / f"{name}{suffix}").read_bytes()
    for hostile in ("..%2Fpyproject.toml", "%2E%2E%2F__init__.py", "api%2Fh3kit_handoff_demo.json", ".gitignore",
                    "missing.json", "..", "README.md", "..%5Cpyproject.toml"):
        got, _ = call(routes, "GET", f"/workflow_templates/{PACK_FOLDER}/{hostile}")
        assert got == 404, hostile
    got, _ = call(routes, "GET", f"/workflow_templates/OtherPack/{name}.json")
    assert got == 404  # another pack's templates stay the host's business


def test_routes_are_not_registered_outside_comfyui(monkeypatch):
    monkeypatch.delitem(sys.modules, "server", raising=False)
    assert server_routes.register_routes(PACK_FOLDER, PACK) is False
    no_routes = types.ModuleType("server")
    no_routes.PromptServer = types.SimpleNamespace(instance=None)
    monkeypatch.setitem(sys.modules, "server", no_routes)
    assert server_routes.register_routes(PACK_FOLDER, PACK) is False


def test_the_extension_is_declared_and_its_route_matches():
    import h3kit

    assert h3kit.WEB_DIRECTORY == "./web"
    source = (PACK_ROOT / "web" / "h3kit_preflight.js").read_text(encoding="utf-8")
    assert f'const ROUTE = "{server_routes.PREFLIGHT_ROUTE}"' in source
    assert [p.name for p in (PACK_ROOT / "web").glob("**/*.js")] == ["h3kit_preflight.js"]  # the host loads every .js
    assert "innerHTML" not in source  # server text goes in as text, never as markup


def test_a_model_file_the_host_lacks_is_one_problem_not_two(tmp_path):
    graph = shipped("h3_ltx_two_stage")
    schemas = {**SCHEMAS, "UNETLoader": {**SCHEMAS["UNETLoader"], "input": {"required": {
        "unet_name": [["someone_else.safetensors"], {}], "weight_dtype": [["default"], {}]}}}}
    host = server_routes.HostView(schemas, set(schemas), files=folder_files(tmp_path))
    report = server_routes.preflight_report(graph, lambda g: host)
    loader = next(nid for nid, n in graph.items() if n["class_type"] == "UNETLoader")
    about_it = [c for c in report["checks"] if c.get("node_id") == loader and "unet_name" in c["detail"]]
    assert [(c["status"], c["check"]) for c in about_it] == [("FAIL", "model files")]
    assert about_it[0]["fix"].startswith("put ") and "models/diffusion_models" in about_it[0]["fix"]


# --- issue 23: the graph is adapted to this host's input layout before it is queued --------------------

def savevideo_0330() -> dict:
    return json.loads((Path(__file__).parent / "data" / "savevideo_0.33.0.json").read_text())["SaveVideo"]


def host_0330(graph: dict) -> server_routes.HostView:
    schemas = {**SCHEMAS, "SaveVideo": savevideo_0330()}
    return server_routes.HostView(schemas, set(schemas), pack_of=providing_pack)


def test_the_route_judges_the_adapted_graph_and_returns_it_with_every_change():
    graph = shipped("h3_ltx_two_stage")
    report = server_routes.preflight_report(graph, host_0330)
    assert report["fail"] == 0, [c for c in report["checks"] if c["status"] == FAIL]
    (change,) = report["adapted"]["changes"]
    assert (change["node_id"], change["from"], change["to"], change["value"]) == ("41", "format.codec", "codec", "h264")
    assert report["adapted"]["prompt"]["41"]["inputs"]["codec"] == "h264"
    assert "format.codec" not in report["adapted"]["prompt"]["41"]["inputs"]
    assert graph["41"]["inputs"]["format.codec"] == "h264"  # the sent graph is not modified
    (line,) = [c for c in report["checks"] if c["check"] == "adapted"]
    assert line["status"] == INFO and line["node_id"] == "41" and line["detail"] == change["text"]
    assert (report["verdict"], report["status"], report["info"]) == ("ADAPTED", "INFO", 1)  # never a FAIL
    # a graph already in this host's layout needs nothing
    assert "adapted" not in server_routes.preflight_report(report["adapted"]["prompt"], host_0330)


def test_what_cannot_be_adapted_is_a_fail_before_queueing_with_the_hosts_options():
    graph = shipped("h3_ltx_two_stage")
    graph["41"]["inputs"]["format.codec"] = "av1"
    report = server_routes.preflight_report(graph, host_0330)
    (fail,) = [c for c in report["checks"] if c["status"] == FAIL]
    assert fail["node_id"] == "41" and fail["fix"].endswith("codec: choose one of: auto, h264")


def test_absent_nodes_are_checked_but_never_queued():
    graph = shipped("h3_ltx_two_stage")
    absent = {"99": "SomePackNode"}
    report = server_routes.preflight_report(graph, host_0330, absent)
    assert "99" not in report["adapted"]["prompt"]
    assert any(c["check"] == "nodes" and c.get("node_id") == "99" and c["status"] == FAIL for c in report["checks"])


def test_the_prompt_handler_adapts_what_any_client_queues(monkeypatch, caplog):
    """ComfyUI's on-prompt handler: a prompt queued by a script (not the editor) is moved to this host's layout
    before ComfyUI validates it, and the change is logged."""
    fake_server = types.ModuleType("server")
    handlers = []
    classes = {"SaveVideo": types.SimpleNamespace(GET_NODE_INFO_V1=savevideo_0330)}
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(
        routes=web.RouteTableDef(), add_on_prompt_handler=handlers.append,
        nodes=types.SimpleNamespace(NODE_CLASS_MAPPINGS=classes)))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    assert server_routes.register_routes(PACK_FOLDER, PACK) is True
    assert handlers == [server_routes.adapt_queued_prompt]
    sent = {"client_id": "c", "prompt": {"1": {"class_type": "SaveVideo", "inputs": {
        "video": ["2", 0], "filename_prefix": "x", "format": "mp4", "format.codec": "h264"}}}}
    with caplog.at_level("WARNING"):
        queued = handlers[0](sent)
    assert queued["client_id"] == "c" and queued["prompt"]["1"]["inputs"]["codec"] == "h264"
    assert sent["prompt"]["1"]["inputs"]["format.codec"] == "h264"  # the caller's object is not modified
    assert "input 'format.codec' -> 'codec'" in caplog.text
    # not a graph, or a schema that raises: passed on untouched (ComfyUI refuses it or validates it as sent)
    for hostile in (None, {"prompt": []}, {"prompt": {"1": 5}}, {"no": "prompt"}):
        assert handlers[0](hostile) is hostile
    classes["SaveVideo"] = types.SimpleNamespace(GET_NODE_INFO_V1=lambda: 1 / 0)
    assert handlers[0](sent) is sent


def test_a_host_without_on_prompt_handlers_still_registers_the_routes(monkeypatch):
    fake_server = types.ModuleType("server")
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=web.RouteTableDef()))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    assert server_routes.register_routes(PACK_FOLDER, PACK) is True


def test_the_extension_queues_the_adapted_prompt_and_says_what_changed():
    source = (PACK_ROOT / "web" / "h3kit_preflight.js").read_text(encoding="utf-8")
    # nodes the route was not sent (no class_type on a host without their type) stay in the queued prompt
    assert "prompt.output = { ...prompt.output, ...adapted.prompt }" in source and "useAdapted(prompt, report)" in source
