"""Fuzz tier, issue 26: each command's entry point (`python -m h3kit ...`, scripts/cli.main, the one top-level
handler) on generated files and against a generated hostile server, in a subprocess under resource limits
(tests/bounded_worker.py: RLIMIT_AS 3 GiB), with time and memory asserted on every example:

- it ends within its wall-clock limit (else: a hang) with a documented exit code (0-4);
- no traceback and no "unexpected" crash line reaches the terminal; no control character the input carried;
- its peak resident memory during the example stays under PEAK_BYTES above the worker's idle size.

Profiles (tests/conftest.py): "ci" 100 examples per file-command test, 10 per server test; "long" 20,000/2,000.
"""

from __future__ import annotations

import json
import struct
import unicodedata
from pathlib import Path

import pytest
from bounded_worker import Worker
from fake_comfy import GRAPH, OBJECT_INFO, FakeComfy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak reset")

API_DIR = Path(__file__).resolve().parent.parent / "workflows" / "api"
SECONDS = 60.0  # one example, wall clock (the worker shares 2 cores with the test process)
PEAK_BYTES = 512 * 2**20  # above the worker's idle resident size
EXIT_CODES = {0, 1, 2, 3, 4}
FILES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SERVER = settings(FILES, max_examples=max(settings.default.max_examples // 10, 10))

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                         st.text(max_size=12), st.sampled_from(["\x1b[2J", "\nPASS  injected", "../x", "CON", ""]))
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
    st.text(max_size=8), kids, max_size=4), max_leaves=12)


@pytest.fixture(scope="module")
def worker():
    w = Worker("cli")
    w.start()
    w.idle = w.peak_bytes()
    yield w
    w.stop()


def check(worker: Worker, argv: list[str], seconds: float = SECONDS) -> dict:
    """One example: the promises of every command."""
    result = worker.command([str(a) for a in argv], seconds)
    shown = result["out"] + result["err"]
    assert result["code"] in EXIT_CODES, shown
    assert "Traceback" not in shown and "unexpected" not in shown, shown
    assert not [ch for ch in shown if ch not in "\n" and unicodedata.category(ch) in ("Cc", "Cf")], shown
    assert not [line for line in shown.splitlines() if line.startswith("PASS  injected")], shown
    assert result["peak"] - worker.idle < PEAK_BYTES, f"peak {(result['peak'] - worker.idle) / 2**20:.0f} MiB"
    return result


# ---------------------------------------------------------------------------------------------- workflow files
@st.composite
def workflow_bytes(draw) -> bytes:
    """A shipped API graph mutated (values, class types, inputs, ids), arbitrary JSON, deep nesting, or bytes."""
    kind = draw(st.sampled_from(["graph", "graph", "json", "deep", "bytes"]))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "deep":
        depth = draw(st.integers(0, 100_000))
        return b'{"1": {"class_type": "X", "inputs": {"a": ' + b"[" * depth + b"]" * depth + b"}}}"
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    paths = sorted(API_DIR.glob("*.json"))
    graph = json.loads(draw(st.sampled_from(paths)).read_text())
    for _ in range(draw(st.integers(1, 6))):
        nid = draw(st.sampled_from(sorted(graph)))
        where = draw(st.sampled_from(["value", "class_type", "inputs", "node", "id"]))
        if where == "value" and isinstance(graph[nid], dict) and isinstance(graph[nid].get("inputs"), dict) \
                and graph[nid]["inputs"]:
            graph[nid]["inputs"][draw(st.sampled_from(sorted(graph[nid]["inputs"])))] = draw(json_values)
        elif where in ("class_type", "inputs") and isinstance(graph[nid], dict):
            graph[nid][where] = draw(json_values)
        elif where == "node":
            graph[nid] = draw(json_values)
        else:
            graph[draw(st.text(max_size=6))] = graph.pop(nid)
    return json.dumps(graph).encode()


@FILES
@given(workflow_bytes())
def test_validate_and_doctor_on_any_workflow_file(worker, tmp_path_factory, data):
    path = tmp_path_factory.mktemp("wf") / "wf.json"
    path.write_bytes(data)
    check(worker, ["validate", path])
    check(worker, ["doctor", "--workflow", path, "--no-local", "--models-dir", path.parent])


# ------------------------------------------------------------------------------------------ safetensors files
def safetensors_bytes(header: object, data: bytes) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


shapes = st.lists(st.one_of(st.integers(0, 8), st.sampled_from([2**31, 2**63, 2**64 - 1])), max_size=4)


@st.composite
def model_files(draw) -> bytes:
    """Small safetensors files whose entries, shapes, offsets, metadata and bytes are perturbed."""
    count = draw(st.integers(0, 4))
    header: dict = {}
    offset = 0
    for i in range(count):
        shape = draw(shapes)
        size = draw(st.integers(0, 16))
        dtype = draw(st.sampled_from(["BF16", "F16", "F32", "U8", "I64", "F8_E4M3", "BOGUS"]))
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=20), json_values),
                                                      max_size=3))
    raw = bytearray(safetensors_bytes(header, bytes(draw(st.binary(min_size=offset, max_size=offset + 4)))))
    for position, value in draw(st.lists(st.tuples(st.integers(0, max(len(raw) - 1, 0)), st.integers(0, 255)),
                                         max_size=3)):
        if raw:
            raw[position] = value
    return bytes(raw)


@FILES
@given(model_files())
def test_convert_on_any_model_file(worker, tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("convert")
    (folder / "in.safetensors").write_bytes(data)
    check(worker, ["convert", "bf16-to-fp16", folder / "in.safetensors", folder / "out.safetensors"])
    assert not list(folder.glob(".*.tmp")), list(folder.iterdir())


@st.composite
def cache_files(draw) -> bytes:
    """H3Kit conditioning caches whose metadata (structure, tensor table, version) and shapes are generated."""
    shape = draw(st.one_of(st.just([1, 2]), shapes))
    nbytes = 2 if shape == [1, 2] else 0
    structure = draw(st.one_of(st.just([[{"$tensor": "t0"}, {}]]), json_values,
                               st.builds(lambda v: [[{"$tensor": "t0"}, {"k": v}]], json_values)))
    record = {"path": "[0][0]", "dtype": "uint8", "shape": shape, "crc32": draw(st.sampled_from(["00000000", "x"]))}
    metadata = {"h3kit_format": "h3kit.conditioning",
                "h3kit_format_version": draw(st.sampled_from(["1", "2", "0", "\u00b2", ""])),
                "structure": json.dumps(structure), "tensors": json.dumps({"t0": record}),
                "prompt_text": draw(st.text(max_size=20))}
    header = {"__metadata__": metadata, "t0": {"dtype": "U8", "shape": shape, "data_offsets": [0, nbytes]}}
    return safetensors_bytes(header, b"\x00" * nbytes)


@FILES
@given(cache_files())
def test_cond_info_and_list_on_any_cache(worker, tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("caches")
    (folder / "c.safetensors").write_bytes(data)
    check(worker, ["cond", "info", folder / "c.safetensors"])
    check(worker, ["cond", "list", "--dir", folder])


# ------------------------------------------------------------------------------------------ a hostile server
@st.composite
def object_infos(draw) -> dict:
    """The fake server's /object_info with entries and input specs replaced by generated JSON."""
    info = json.loads(json.dumps(OBJECT_INFO))
    for _ in range(draw(st.integers(1, 4))):
        node = draw(st.sampled_from(sorted(info)))
        where = draw(st.sampled_from(["entry", "input", "section", "spec", "options", "autogrow"]))
        entry = info[node] if isinstance(info[node], dict) else {}
        if where == "entry":
            info[node] = draw(json_values)
        elif where == "input":
            entry["input"] = draw(json_values)
        elif where == "section" and isinstance(entry.get("input"), dict):
            entry["input"][draw(st.sampled_from(["required", "optional"]))] = draw(json_values)
        elif where in ("spec", "options") and isinstance(entry.get("input"), dict) and isinstance(
                entry["input"].get("required"), dict) and entry["input"]["required"]:
            name = draw(st.sampled_from(sorted(entry["input"]["required"])))
            kind = draw(st.sampled_from(["INT", "FLOAT", "COMBO", "STRING", "COMFY_DYNAMICCOMBO_V3"]))
            entry["input"]["required"][name] = (draw(json_values) if where == "spec" else [kind, draw(
                st.dictionaries(st.sampled_from(["min", "max", "step", "options", "default", "inputs"]), json_values,
                                max_size=3))])
        elif where == "autogrow" and isinstance(entry.get("input"), dict):
            live = draw(st.booleans())
            group = {"prefix": "r", "max": draw(st.one_of(st.integers(0, 10**15), json_values)), "types": ["IMAGE"]}
            spec = (["COMFY_AUTOGROW_V3", {"template": {**group, "input": {"required": {"x": ["IMAGE", {}]}}}}]
                    if live else ["AUTOGROW", group])
            entry["input"]["optional"] = {"refs": spec}
    return info


@pytest.fixture(scope="module")
def server():
    fake = FakeComfy()
    yield fake
    fake.close()


@SERVER
@given(object_infos(), st.sampled_from(["run", "validate", "doctor"]))
def test_server_commands_on_any_object_info(worker, server, tmp_path_factory, info, command):
    server.reset()
    server.object_info = info
    folder = tmp_path_factory.mktemp("server")
    workflow = folder / "wf.json"
    workflow.write_text(json.dumps(GRAPH))
    argv = {"run": ["run", workflow, "--server", server.url, "--out", folder / "out", "--quiet", "--timeout", "20"],
            "validate": ["validate", workflow, "--server", server.url, "--timeout", "20"],
            "doctor": ["doctor", "--server", server.url, "--workflow", workflow, "--no-local", "--timeout", "20"]}
    check(worker, argv[command])
    assert {p.relative_to(folder).parts[0] for p in folder.rglob("*") if p.is_file()} <= {"wf.json", "out"}


# ------------------------------------------------------------------------------------- any command line at all
@st.composite
def command_lines(draw, folder: Path, server_url: str) -> list[str]:
    """A command of COMMANDS (not `demo`, which renders for seconds, nor `workflows`, which rewrites the shipped
    UI copies) with arguments drawn from what users and attackers type: flags, paths to hostile files, odd text."""
    from h3kit.scripts.cli import COMMANDS

    command = draw(st.sampled_from(sorted(set(COMMANDS) - {"demo", "workflows"})))
    sub = {"cond": [draw(st.sampled_from(["info", "list", "import", "build", "bogus"]))],
           "convert": [draw(st.sampled_from(["bf16-to-fp16", "x"]))]}.get(command, [])
    files = [str(p) for p in sorted(folder.iterdir())]
    words = st.one_of(st.sampled_from(files + ["--json", "--server", server_url, "--timeout", "1", "--dir", str(folder),
                                               "--models-dir", "--no-local", "--overwrite", "--quiet", "--text", "--clip",
                                               "--name", "--out", str(folder / "out"), "-", "", "CON", "a" * 300,
                                               "é" * 200, "/dev/zero", "../../etc", "--runs", "0", "--seed", "random",
                                               "--set", "1.x=2", "--max-job-download", "-5", "nan"]),
                      st.text(max_size=12))
    return [command, *sub, *draw(st.lists(words, max_size=6))]


@pytest.fixture(scope="module")
def hostile_folder(tmp_path_factory):
    """Files of every kind a command may be handed: workflows good and bad, a cache, a model, a pickle, a FIFO."""
    import os

    folder = tmp_path_factory.mktemp("hostile")
    (folder / "good.json").write_text(json.dumps(GRAPH))
    (folder / "deep.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    (folder / "model.safetensors").write_bytes(safetensors_bytes({"t": {"dtype": "BF16", "shape": [0, 2**64 - 1],
                                                                        "data_offsets": [0, 0]}}, b""))
    (folder / "cache.safetensors").write_bytes(safetensors_bytes({"__metadata__": {
        "h3kit_format": "h3kit.conditioning", "h3kit_format_version": "1", "structure": "[" * 70 + "]" * 70,
        "tensors": "{}"}}, b""))
    (folder / "old.pt").write_bytes(b"\x80\x04\x95" + b"\x00" * 20)
    (folder / "page.html").write_text("<html>not a model</html>")
    os.mkfifo(folder / "pipe.json")
    return folder


@SERVER
@given(st.data())
def test_any_command_line(worker, server, hostile_folder, data):
    server.reset()
    argv = data.draw(command_lines(hostile_folder, server.url))
    check(worker, argv)
