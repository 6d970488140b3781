"""Issue 14, hostile workflow JSON: one regression test per reported case, on every surface that reads a graph
(`validate`, `doctor --workflow`, H3KitPreflight's pasted JSON). Each gives a clear problem and exit 2 (or an
H3KitInputError in the node), never a traceback."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path

import pytest
from h3kit.adapters.workflow_file import validate_file
from h3kit.checks.workflow import workflow_checks
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.preflight import H3KitPreflight
from h3kit.scripts import doctor, validate
from h3kit.scripts import schemas as schema_src

ROOT = Path(__file__).resolve().parent.parent
GOOD = json.loads((ROOT / "workflows" / "api" / "h3_ltx_two_stage.json").read_text())
SCHEMAS = schema_src.offline_schemas()


def run_cli(module, *argv: str) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(list(argv)))


def every_surface(path: Path, capsys, expected: str) -> None:
    """validate and doctor --workflow exit 2 naming `expected`; the preflight node raises H3KitInputError or
    reports it (a pasted text that parses)."""
    assert run_cli(validate, str(path)) == 2
    out = capsys.readouterr().err
    assert expected in out and "Traceback" not in out
    assert run_cli(doctor, "--workflow", str(path), "--no-local") == 2
    assert expected in capsys.readouterr().err
    text = path.read_bytes().decode("utf-8", "replace")
    try:
        result = H3KitPreflight().execute(strict=False, check_environment=False, workflow_json=text, prompt=None)
    except H3KitInputError as exc:
        assert exc.input_name == "workflow_json"
        return
    assert json.loads(result["result"][0])["fail"] >= 1


def write(tmp_path: Path, data: str | bytes) -> Path:
    path = tmp_path / "wf.json"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


def test_deeply_nested_json(tmp_path, capsys):
    every_surface(write(tmp_path, '{"1": {"class_type": "X", "inputs": {"a": ' + "[" * 100_000 + "]" * 100_000
                        + "}}}"), capsys, "nests deeper than 64 levels")


def test_non_utf8_file(tmp_path, capsys):
    data = json.dumps(GOOD).encode().replace(b"dusk", b"d\xe9sk")  # Latin-1 é, as a Windows editor saves it
    assert b"\xe9" in data
    assert run_cli(validate, str(write(tmp_path, data))) == 2
    assert "not UTF-8 text (byte 0xe9" in capsys.readouterr().err


@pytest.mark.parametrize("class_type, expected", [(5, "class_type is a JSON number"),
                                                  (["KSampler"], "class_type is a JSON array"),
                                                  (None, "has no type: the editor exported a node whose type it did not know"),
                                                  ("KSampler\x00", "class_type is not printable text")])
def test_non_string_class_type(tmp_path, capsys, class_type, expected):
    graph = {**GOOD, "1": {**GOOD["1"], "class_type": class_type}}
    every_surface(write(tmp_path, json.dumps(graph)), capsys, expected)


def test_inputs_given_as_a_list(tmp_path, capsys):
    graph = {**GOOD, "1": {**GOOD["1"], "inputs": ["unet_name", "x.safetensors"]}}
    every_surface(write(tmp_path, json.dumps(graph)), capsys, "'inputs' is a JSON array, not an object")


@pytest.mark.parametrize("length", [1_500, 20_000])
@pytest.mark.parametrize("cyclic", [False, True])
def test_long_chains_need_no_recursion(length, cyclic):
    """The reported cycle check recursed per node (> ~1,000 nodes: RecursionError). Proof of no recursion:
    the checks run with the interpreter's recursion limit only 150 frames above the current depth."""
    graph = {"1": {"class_type": "PrimitiveInt", "inputs": {"value": 1}}}
    for i in range(2, length + 1):
        graph[str(i)] = {"class_type": "RepeatLatentBatch", "inputs": {"samples": [str(i - 1), 0], "amount": 1}}
    if cyclic:
        graph["1"] = {"class_type": "RepeatLatentBatch", "inputs": {"samples": [str(length), 0], "amount": 1}}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)
    try:
        checks = workflow_checks(graph, SCHEMAS, None)
    finally:
        sys.setrecursionlimit(limit)
    assert any("cycle" in c.detail for c in checks) is cyclic


def test_model_name_with_nul_and_a_models_folder(tmp_path, capsys):
    graph = {**GOOD, "1": {**GOOD["1"], "inputs": {**GOOD["1"]["inputs"], "unet_name": "h3\x00.safetensors"}}}
    path = write(tmp_path, json.dumps(graph))
    (tmp_path / "models" / "diffusion_models").mkdir(parents=True)
    assert run_cli(doctor, "--workflow", str(path), "--no-local", "--models-dir", str(tmp_path / "models")) == 2
    assert "NUL or control characters" in capsys.readouterr().err
    every_surface(path, capsys, "NUL or control characters")


def test_node_id_with_control_characters(tmp_path, capsys):
    graph = {**GOOD, "1\x1b[2J": GOOD["1"]}
    every_surface(write(tmp_path, json.dumps(graph)), capsys, "node id contains control characters")


def test_duplicate_node_ids_are_refused(tmp_path, capsys):
    text = json.dumps(GOOD)
    duplicated = text[:-1] + ', "1": {"class_type": "SaveVideo", "inputs": {}}}'
    every_surface(write(tmp_path, duplicated), capsys, "has the key '1' twice in one object")


def test_5000_digit_number(tmp_path, capsys):
    every_surface(write(tmp_path, '{"1": {"class_type": "X", "inputs": {"a": ' + "9" * 5000 + "}}}"), capsys,
                  "a number with 5000 digits")


def test_huge_file_is_refused_before_parsing(tmp_path, capsys):
    path = tmp_path / "wf.json"
    with open(path, "wb") as handle:
        handle.truncate(65 * 2**20)  # 65 MiB of NULs, over the 64 MiB limit
    assert run_cli(validate, str(path)) == 2
    assert "at most 67108864 are accepted" in capsys.readouterr().err
    assert validate_file(path, SCHEMAS)[0].message.endswith("at most 67108864 are accepted")
