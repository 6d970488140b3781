"""Issues 23 and 24, tier (b): our verdict on a graph is the host's.

For every shipped graph and for planted schema errors, on every host: what the pack's validator says about the graph
it would queue (adapted to the host's layout, judged with the host's /object_info: `validate --server`, `run`, the
editor) names the same nodes (and inputs) as the host's own `/prompt`. Where we refuse what `/prompt` accepts, the
host then fails at execution or drops the output: that is asserted by running it, so a refusal is never a false
alarm. On a host with native H3 the pinned schemas (offline `validate`) are that host's /object_info, entry by entry.
Skips are per capability (tests/comfyui_host.py), never per version.
"""

from __future__ import annotations

import copy
import json
import re
import struct
import time
import zlib
from pathlib import Path

import pytest
import torch
from comfyui_host import NATIVE_H3, execution_errors
from h3kit.checks.graph_split import DRAFT_INPUT, LOAD_DRAFT
from h3kit.checks.host_layout import adapt_graph
from h3kit.checks.problem import ERROR, FAIL
from h3kit.checks.rules_files import model_inputs
from h3kit.checks.schemas import core_document
from h3kit.checks.validator import is_input_file_combo, validate_graph
from h3kit.nodes.common import Report
from h3kit.nodes.cond_cache_format import save_conditioning
from h3kit.nodes.draft import write_draft
from h3kit.scripts import schemas as schema_src
from verdict_readers import doctor, from_route_report, run_pre_queue, validate

pytestmark = pytest.mark.comfyui

API = Path(schema_src.API_WORKFLOWS_DIR)
SHIPPED = sorted(API.glob("*.json"))
CACHE_FOLDER = "conditioning_cache"
# Host error types that name the input they are about; the others (an exception inside the host's recursive
# validation: a dangling link, an output index out of range) are attributed to the node only.
INPUT_ERRORS = {"required_input_missing", "return_type_mismatch", "value_smaller_than_min", "value_bigger_than_max",
                "value_not_in_list", "invalid_input_type", "bad_linked_input"}

BASE = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
    "2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "bilinear", "width": 32,
                                                 "height": 32, "crop": "center"}},
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
}
VIDEO = {"5": {"class_type": "CreateVideo", "inputs": {"images": ["2", 0], "fps": 24.0}},
         "6": {"class_type": "SaveVideo", "inputs": {"video": ["5", 0], "filename_prefix": "h3kit/verdict",
                                                     "format": "mp4", "format.codec": "h264"}}}


def planted(change) -> dict:
    graph = copy.deepcopy(BASE)
    change(graph)
    return graph


PLANTED = {
    "valid": planted(lambda g: None),
    "wrong type": planted(lambda g: g["2"]["inputs"].update(image=["4", 0])),
    "missing required input": planted(lambda g: g["2"]["inputs"].pop("crop")),
    "int above max": planted(lambda g: g["1"]["inputs"].update(width=99999)),
    "int below min": planted(lambda g: g["1"]["inputs"].update(width=0)),
    "not a number": planted(lambda g: g["1"]["inputs"].update(width="abc")),
    "unknown combo value": planted(lambda g: g["2"]["inputs"].update(upscale_method="fancy")),
    "dangling link": planted(lambda g: g["2"]["inputs"].update(image=["42", 0])),
    "output index out of range": planted(lambda g: g["2"]["inputs"].update(image=["1", 5])),
    "no output node": planted(lambda g: g.pop("3")),
    "unknown node type": planted(lambda g: g.update({"8": {"class_type": "NoSuchNodeAnywhere", "inputs": {}}})),
    "savevideo, shipped layout": planted(lambda g: g.update(copy.deepcopy(VIDEO))),
    "savevideo, a codec no host offers": planted(lambda g: g.update(
        {**copy.deepcopy(VIDEO), "6": {**VIDEO["6"], "inputs": {**VIDEO["6"]["inputs"], "format.codec": "av1"}}})),
    "savevideo, no codec": planted(lambda g: g.update(
        {**copy.deepcopy(VIDEO), "6": {**VIDEO["6"], "inputs": {k: v for k, v in VIDEO["6"]["inputs"].items()
                                                                if k != "format.codec"}}})),
}

H3 = {
    "1": {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 672, "height": 384, "length": 124}},
    "2": {"class_type": "SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "h3kit/verdict"}},
}
H3_PLANTED = {
    "h3 valid": H3,
    "h3 length above max": {**H3, "1": {**H3["1"], "inputs": {**H3["1"]["inputs"], "length": 4000}}},
    "h3 width below min": {**H3, "1": {**H3["1"], "inputs": {**H3["1"]["inputs"], "width": 16}}},
    "h3 width as text": {**H3, "1": {**H3["1"], "inputs": {**H3["1"]["inputs"], "width": "wide"}}},
}


# --- the host's verdict -----------------------------------------------------------------------------------------

def host_verdict(server, graph: dict) -> tuple[bool, set[tuple[str, str | None]], dict]:
    """(accepted by /prompt, {(node id, input or None)} the host objects to, its answer). Accepted prompts are
    interrupted and the queue cleared, so nothing heavy runs."""
    status, body = server.submit(graph)
    errors: set[tuple[str, str | None]] = set()
    for node_id, info in (body.get("node_errors") or {}).items():
        for err in info.get("errors", []):
            name = (err.get("extra_info") or {}).get("input_name") if err.get("type") in INPUT_ERRORS else None
            errors.add((str(node_id), name))
    error = body.get("error") if isinstance(body, dict) else None
    if status != 200 and isinstance(error, dict):
        if error.get("type") == "prompt_no_outputs":
            errors.add(("-", None))
        for node_id in re.findall(r"#(\w+)", json.dumps(error)):  # invalid_prompt / missing_node_type: "Node ID '#8'"
            errors.add((node_id, None))
    if status == 200:
        settle(server)
    return status == 200, errors, body


def settle(server) -> None:
    server.post("/interrupt", {})
    server.post("/queue", {"clear": True})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        queue = server.get("/queue")
        if not queue.get("queue_running") and not queue.get("queue_pending"):
            return
        time.sleep(0.3)


def our_verdict(graph: dict, object_info: dict) -> tuple[dict, set[tuple[str, str | None]]]:
    """(the graph `run` would queue: adapted to the host's layout, {(node id, input)} our validator refuses)."""
    adapted = adapt_graph(graph, object_info).graph
    problems = validate_graph(adapted, object_info, schema_src.providing_pack, schema_src.own_node_ids())
    return adapted, {(p.node_id, p.input) for p in problems if p.severity == ERROR}


def compare(server, graph: dict, object_info: dict, what: str) -> None:
    adapted, ours = our_verdict(graph, object_info)
    accepted, theirs, body = host_verdict(server, adapted)
    our_nodes, their_nodes = {n for n, _ in ours}, {n for n, _ in theirs}
    unknown = {nid for nid, node in adapted.items() if node.get("class_type") not in object_info}
    if unknown:  # the host stops at the first unknown node: it must be one we name
        assert their_nodes and their_nodes <= our_nodes and their_nodes <= unknown | {"-"}, (what, ours, theirs)
        return
    assert their_nodes <= our_nodes, f"{what}: the host refuses {theirs - ours} that we let through ({body})"
    named = {(n, i) for n, i in theirs if i is not None}
    assert named <= ours, f"{what}: the host names inputs {named - ours}, we name {ours}"
    for node_id in sorted(our_nodes - their_nodes):
        # we refuse what /prompt lets through: the run must then fail at that node (or drop its output)
        assert_fails_at_execution(server, adapted, node_id, what)


def assert_fails_at_execution(server, graph: dict, node_id: str, what: str) -> None:
    status, body = server.submit(graph)
    dropped = node_id in (body.get("node_errors") or {})
    if status == 200 and not dropped:
        prompt_id = body["prompt_id"]
        entry = wait_for(server, prompt_id)
        failed = [e for e in execution_errors(entry) if str(e.get("node_id", node_id)) == node_id]
        assert entry["status"]["status_str"] == "error" and failed, (
            f"{what}: we refuse node {node_id}, but the host ran it: {entry['status']}")
    settle(server)


def wait_for(server, prompt_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = server.get(f"/history/{prompt_id}").get(prompt_id)
        if entry and entry.get("status", {}).get("status_str") in ("success", "error"):
            return entry
        time.sleep(0.3)
    raise AssertionError(f"prompt {prompt_id} did not finish within {timeout} s")


# --- planted errors ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", PLANTED)
def test_planted_error_verdict_is_the_hosts(comfyui_server, case):
    compare(comfyui_server, PLANTED[case], comfyui_server.object_info(), case)


@pytest.mark.parametrize("case", H3_PLANTED)
def test_planted_h3_error_verdict_is_the_hosts_online_and_offline(comfyui_server, case):
    """The H3 node's limits: the pinned (offline) schema refuses exactly what the host refuses."""
    comfyui_server.require(NATIVE_H3)
    graph = H3_PLANTED[case]
    compare(comfyui_server, graph, comfyui_server.object_info(), case)
    _, theirs, _ = host_verdict(comfyui_server, graph)
    offline = {(p.node_id, p.input) for p in validate_graph(graph, schema_src.offline_schemas()) if p.severity == ERROR}
    assert offline == theirs, case


# --- every shipped graph ----------------------------------------------------------------------------------------

def provide_files(server, graph: dict, object_info: dict) -> None:
    """Empty model files and tiny PNG/WAV inputs under the names the graph uses, so the host's /prompt judges the
    graph itself rather than this server's empty folders (nothing is loaded: accepted prompts are interrupted)."""
    for _, _, _, folder, filename in model_inputs(graph, object_info):
        path = server.models_dir / folder / filename
        if path.resolve().is_relative_to(server.models_dir.resolve()) and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            if folder == CACHE_FOLDER:  # H3KitLoadConditioning reads the header while validating: a real cache file
                save_conditioning(path.parent, Path(filename).stem, [[torch.zeros(1, 4, 8), {}]], encoder="test")
            elif path.suffix == ".safetensors":  # the editor's route reads headers (F13/F14): a readable one
                path.write_bytes(tiny_safetensors())
            else:
                path.write_bytes(b"")
    for node in graph.values():
        info = object_info.get(node.get("class_type"), {})
        for name, spec in {**info.get("input", {}).get("required", {}), **info.get("input", {}).get("optional", {})}.items():
            value = node.get("inputs", {}).get(name)
            opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
            if isinstance(value, str) and is_input_file_combo(opts) and "/" not in value:
                target = server.base_dir / "input" / value
                if not target.exists():
                    target.write_bytes(tiny_png() if not value.endswith((".wav", ".flac", ".mp3")) else tiny_wav())
        if node.get("class_type") == LOAD_DRAFT:  # a stage-2 graph: a real draft under its name (the node checks it)
            target = server.base_dir / "input" / node["inputs"][DRAFT_INPUT]
            if not target.exists():
                latent, audio = {"samples": torch.zeros(1, 128, 1, 2, 2)}, {"waveform": torch.zeros(1, 2, 8),
                                                                            "sample_rate": 32000}
                write_draft(target.parent, target.name, latent, audio, Report(LOAD_DRAFT))


def tiny_safetensors() -> bytes:
    """A one-tensor safetensors file whose metadata has a 'config' (as the VAE and upsampler loaders read it)."""
    header = json.dumps({"__metadata__": {"config": "{}"},
                         "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\x00" * 4


def tiny_png() -> bytes:
    raw = b"".join(b"\x00" + b"\x80\x80\x80" * 8 for _ in range(8))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def tiny_wav() -> bytes:
    frames = b"\x00\x00" * 4800
    return (b"RIFF" + struct.pack("<I", 36 + len(frames)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 48000,
            96000, 2, 16) + b"data" + struct.pack("<I", len(frames)) + frames)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_graph_verdict_is_the_hosts(comfyui_server, path):
    graph = json.loads(path.read_text())
    provide_files(comfyui_server, graph, comfyui_server.object_info())
    compare(comfyui_server, graph, comfyui_server.object_info(), path.stem)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_graph_offline_verdict_matches_a_host_that_serves_all_its_nodes(comfyui_server, path):
    """Offline `validate` (pinned schemas) passes every shipped graph; a host serving all of its nodes accepts the
    graph as `run` queues it, once its files are there."""
    graph = json.loads(path.read_text())
    offline = [p for p in validate_graph(graph, schema_src.offline_schemas()) if p.severity == ERROR]
    assert offline == []
    info = comfyui_server.object_info()
    missing = sorted({n["class_type"] for n in graph.values()} - set(info))
    if missing:
        pytest.skip(f"{comfyui_server.host.name} lacks {', '.join(missing)}")
    provide_files(comfyui_server, graph, info)
    info = comfyui_server.object_info()
    adapted, ours = our_verdict(graph, info)
    accepted, theirs, body = host_verdict(comfyui_server, adapted)
    assert accepted and not theirs and not ours, (ours, theirs, body)
    # not even a warning: Autogrow slots as served (ref_images.ref_image_N) and DynamicCombo keys are declared inputs
    assert [str(p) for p in validate_graph(adapted, info, schema_src.providing_pack)] == []


# --- the pinned schemas are the host's --------------------------------------------------------------------------

def _comparable(spec_section: dict) -> dict:
    """A served input section as pinned: tooltips dropped, file lists replaced by the folder marker."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "tooltip"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(spec_section)


def both(capsys) -> str:
    """What a command printed: results on stdout, problems and warnings on stderr (the CLI's stream rule)."""
    captured = capsys.readouterr()
    return captured.out + captured.err


def padded(spec: list) -> list:
    """A 1-element spec (['MODEL'], [[options]]) as the pinned convention writes it, with its empty options."""
    return list(spec) if len(spec) > 1 else [spec[0], {}]


def test_pinned_schemas_are_the_native_h3_hosts_object_info(comfyui_server):
    comfyui_server.require(NATIVE_H3)
    served = comfyui_server.object_info()
    version = comfyui_server.get("/system_stats")["system"]["comfyui_version"]
    pinned = {name: info for name, info in core_document()["nodes"].items()
              if info.get("pack", "core") == "core" and info.get("version") == version}
    assert "MiniMaxH3ReferenceToVideo" in pinned and "MiniMaxH3TextEncoderOnlyReference" not in served
    for name, entry in pinned.items():
        live = served[name]
        for section in ("required", "optional"):
            ours = entry["input"].get(section, {})
            theirs = _comparable(live["input"].get(section, {}))
            assert list(ours) == list(theirs), f"{name}.{section}"
            for key, spec in ours.items():
                opts = spec[1] if len(spec) > 1 else {}
                if opts.get("model_folder") or opts.get("input_files"):
                    continue  # the folder marker replaces the host's file list
                assert padded(spec) == padded(theirs[key]), f"{name}.{key}"
        for key in ("output", "output_name", "output_is_list", "output_node", "category"):
            assert entry[key] == live[key], f"{name}.{key}"
    ref = pinned["MiniMaxH3ReferenceToVideo"]["input"]
    assert {"vae", "audio_vae"} <= set(ref["required"])
    slot = ref["optional"]["ref_images"][1]["template"]["input"]["required"]["ref_image"]
    assert slot[0] == "IMAGE"


# --- validate --server: the fix it proposes validates, and the host runs it --------------------------------------

def test_validate_servers_fix_for_the_shipped_savevideo_layout_validates_and_runs(comfyui_server, tmp_path):
    from h3kit.scripts.cli import main

    graph = {**copy.deepcopy(BASE), **copy.deepcopy(VIDEO)}
    del graph["3"], graph["4"]
    info = comfyui_server.object_info()
    problems = [p for p in validate_graph(graph, info) if p.severity == ERROR]
    if not problems:
        assert adapt_graph(graph, info).changes == []  # this host takes the shipped layout as it is
        return
    (problem,) = problems
    renames = re.findall(r"'([^']+)' to '([^']+)'", problem.fix.split("rename input ", 1)[1])
    assert renames, problem.fix
    for old, new in renames:
        graph["6"]["inputs"][new] = graph["6"]["inputs"].pop(old)
    assert [p for p in validate_graph(graph, info) if p.severity == ERROR] == []
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(graph))
    assert main(["validate", str(path), "--server", comfyui_server.url]) == 0
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "success", execution_errors(entry)
    (video,) = entry["outputs"]["6"]["images"]
    assert comfyui_server.output_path(video).suffix == ".mp4"


def test_a_prompt_in_another_savevideo_layout_finishes_through_the_servers_prompt_handler(comfyui_server):
    """Queued by a plain client (no `run`, no editor): H3Kit's on-prompt handler moves format.codec to this host's
    layout, so SaveVideo writes the mp4 instead of failing after everything rendered (issue 23)."""
    graph = {**copy.deepcopy(BASE), **copy.deepcopy(VIDEO)}
    del graph["3"], graph["4"]
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "success", execution_errors(entry)
    (video,) = entry["outputs"]["6"]["images"]
    assert comfyui_server.output_path(video).stat().st_size > 0
    if adapt_graph(graph, comfyui_server.object_info()).changes:
        assert "H3Kit adapted a queued prompt to this ComfyUI's input layout" in comfyui_server.log()


def test_run_adapts_and_finishes_on_this_host(comfyui_server, tmp_path, capsys):
    from h3kit.scripts.cli import main

    graph = {**copy.deepcopy(BASE), **copy.deepcopy(VIDEO)}
    del graph["3"], graph["4"]
    graph["1"]["inputs"]["batch_size"] = 9
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    code = main(["run", str(path), "--server", comfyui_server.url, "--out", str(tmp_path / "out"), "--quiet",
                 "--timeout", "300"])
    out = both(capsys)
    assert code in (0, 1), out  # 1: the flat grey test video is judged "one solid colour" by run's verifier
    assert "REJECTED" not in out and "execution error" not in out
    assert list((tmp_path / "out").rglob("*.mp4")), out
    if adapt_graph(graph, comfyui_server.object_info()).changes:
        assert "INFO  adapted: node 6 (SaveVideo): input 'format.codec' -> 'codec'" in out


# --- F01: doctor, validate and run agree; no FAIL for a host's version ------------------------------------------

def test_doctor_server_has_no_fail_on_any_host(comfyui_server, capsys):
    from h3kit.scripts.cli import main

    code = main(["doctor", "--server", comfyui_server.url, "--no-local"])
    out = both(capsys)
    assert code == 0 and not [line for line in out.splitlines() if line.startswith(FAIL)], out
    (line,) = [line for line in out.splitlines() if "comfyui version:" in line]
    if comfyui_server.has(NATIVE_H3):
        assert line.startswith("PASS") and "serves native MiniMax-H3" in line and "0.30.0 + 0.2.26" in line


def test_f01_line_is_the_same_in_doctor_validate_and_run(comfyui_server, tmp_path, capsys):
    from h3kit.scripts.cli import main

    comfyui_server.require(NATIVE_H3)
    path = API / "h3_ltx_two_stage.json"
    main(["doctor", "--server", comfyui_server.url, "--workflow", str(path), "--no-local"])
    doctor_line = next(line for line in both(capsys).splitlines() if "comfyui version:" in line)
    main(["validate", str(path), "--server", comfyui_server.url])
    validate_line = next(line for line in both(capsys).splitlines() if "comfyui version:" in line)
    assert doctor_line.startswith("PASS") and "H3KitLatentGuard checks the refine output of node(s) 32" in doctor_line
    assert validate_line.strip() == doctor_line.strip()


# --- issue 30 item 8: one verdict, from every entry point and from the host ----------------------------------------

def without_filename_prefix() -> dict:
    """A real error the host refuses itself: SaveVideo's required filename_prefix missing."""
    graph = json.loads((API / "h3_ltx_two_stage.json").read_text())
    save = next(n for n in graph.values() if n["class_type"] == "SaveVideo")
    del save["inputs"]["filename_prefix"]
    return graph


ONE_VERDICT = {**{p.stem: (lambda p=p: json.loads(p.read_text())) for p in SHIPPED},
               "error: required input missing": without_filename_prefix}


@pytest.mark.parametrize("name", ONE_VERDICT)
def test_every_entry_point_and_the_hosts_prompt_give_one_verdict(comfyui_server, name, tmp_path, capsys):
    """doctor --server, validate --server, run's check before queueing and the editor's route (POST /h3kit/preflight)
    give the same verdict, moved inputs and failing nodes; the host's own /prompt, sent the graph as written (the
    pack's hook moves it first), accepts exactly what they pass and refuses only nodes they FAIL. Before issue 30, on
    0.33.0 doctor and validate FAILed (exit 2) every shipped video graph that run and the editor queued."""
    graph = ONE_VERDICT[name]()
    provide_files(comfyui_server, graph, comfyui_server.object_info())
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    status, report = comfyui_server.post("/h3kit/preflight", {"prompt": graph}, timeout=180)
    assert status == 200, report
    seen = {"doctor --server": doctor(path, capsys, comfyui_server.url),
            "validate --server": validate(path, capsys, comfyui_server.url),
            "run (before queueing)": run_pre_queue(copy.deepcopy(graph), capsys, comfyui_server.url),
            "editor route": from_route_report(report)}
    codes = {entry: result.pop("exit") for entry, result in seen.items()}
    assert len({json.dumps(r) for r in seen.values()}) == 1, seen
    result = seen["editor route"]
    ok = result["verdict"] != "FAIL"
    info = comfyui_server.object_info()
    served = {n["class_type"] for n in graph.values()} <= set(info)
    unserved = {nid for nid, n in graph.items() if n["class_type"] not in info}
    # each command's exit table (README): a node the server lacks is doctor's 1 ("a FAIL of the server"), a graph
    # error its 2, the worst of them when both (an older host also refuses values of the nodes it has); validate and
    # run refuse either with 2
    doctor_code = 0 if ok else 1 if set(result["failing"]) <= unserved else 2
    assert codes == {"doctor --server": doctor_code, "validate --server": 0 if ok else 2,
                     "run (before queueing)": 0 if ok else 2, "editor route": None}, (codes, seen)
    if name.startswith("error:"):
        assert not ok
    if name in {p.stem for p in SHIPPED} and served:
        assert ok, result  # every shipped graph whose nodes the host serves passes, adapted or not
    accepted, theirs, body = host_verdict(comfyui_server, graph)  # as written: the pack's hook adapts it
    # the host's verdict: queued with no node error (a 200 with node_errors drops those nodes' outputs)
    assert (accepted and not theirs) == ok, (result, body)
    assert {n for n, _ in theirs} <= set(result["failing"]) | {"-"}, (theirs, result)
    if result["changes"]:
        assert "H3Kit adapted a queued prompt to this ComfyUI's input layout" in comfyui_server.log()


def test_the_editor_and_doctor_agree_on_the_cuda_build(comfyui_server, capsys):
    """The editor's environment lines and doctor --server read the same fact (the device ComfyUI renders on,
    checks.environment.renders_on_cuda): on a CPU server neither asks for a CUDA 13 build."""
    from h3kit.scripts.cli import main

    devices = comfyui_server.get("/system_stats")["devices"]
    main(["doctor", "--server", comfyui_server.url, "--no-local"])
    (torch_line,) = [line for line in both(capsys).splitlines() if "server torch:" in line]
    status, report = comfyui_server.post("/h3kit/preflight", {"prompt": json.loads(
        (API / "h3kit_handoff_demo.json").read_text())}, timeout=180)
    assert status == 200, report
    cuda = [c for c in report["checks"] if c["status"] != "PASS" and "CUDA" in f"{c['detail']} {c['fix']}"]
    if all(d.get("type") != "cuda" for d in devices):
        assert torch_line.startswith("PASS") and "does not matter there" in torch_line
        assert cuda == [], cuda
