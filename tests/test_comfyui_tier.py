"""Issue 2, tier (b): the pack inside a real ComfyUI server (COMFYUI_DIR)."""

from __future__ import annotations

import json
import sys
from subprocess import run as run_process

import pytest
from comfyui_host import NATIVE_H3
from h3kit import NODE_CLASS_MAPPINGS
from h3kit.checks.schemas import class_info

pytestmark = pytest.mark.comfyui


def test_pack_imports_cleanly_in_the_server_log(comfyui_server):
    log = comfyui_server.log()
    assert "H3Kit" in log, "the server never mentioned the pack: was it linked into custom_nodes?"
    bad = [line for line in log.splitlines() if "H3Kit" in line and ("IMPORT FAILED" in line or "Traceback" in line)]
    assert not bad, "\n".join(bad)
    assert "Cannot import" not in log


def _comparable(inputs: dict) -> dict:
    """Host-filled combo lists (sampler names, model files) legitimately differ between this process and
    the server, which fills them from its own registry; every other part of the schema must match."""
    out = {}
    for section, specs in inputs.items():
        for name, spec in specs.items():
            head, opts = spec[0], (spec[1] if len(spec) > 1 else {})
            out[(section, name)] = ("COMBO", opts.get("default"), opts.get("tooltip")) if isinstance(head, list) else (head, opts)
    return out


def test_every_node_is_served_with_exactly_our_schema(comfyui_server):
    served = comfyui_server.object_info()
    missing = sorted(set(NODE_CLASS_MAPPINGS) - set(served))
    assert not missing, f"not registered by the server: {missing}"
    for node_id, cls in NODE_CLASS_MAPPINGS.items():
        ours = json.loads(json.dumps(class_info(node_id, cls)))
        theirs = served[node_id]
        assert _comparable(theirs["input"]) == _comparable(ours["input"]), node_id
        for key in ("input_order", "output", "output_name", "output_is_list", "output_node", "category"):
            assert theirs[key] == ours[key], f"{node_id}.{key}: server {theirs[key]!r} != class {ours[key]!r}"
        for specs in theirs["input"].values():
            for name, spec in specs.items():
                if isinstance(spec[0], list) and spec[1:] and "default" in spec[1]:
                    assert spec[1]["default"] in spec[0], f"{node_id}.{name}: default not among the served options"


def test_a_graph_runs_through_prompt_and_history(comfyui_server):
    graph = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 32, "height": 32, "batch_size": 1, "color": 255}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "h3kit_tier_b"}},
    }
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "success", entry["status"]
    (image,) = entry["outputs"]["2"]["images"]
    assert comfyui_server.output_path(image).is_file()


def test_server_rejection_names_the_node(comfyui_server):
    # not an H3Kit-like name: the installable host logs the rejected class at WARNING level, and the startup-log
    # test reads the H3Kit lines of the same server's log
    status, body = comfyui_server.submit({"1": {"class_type": "NoSuchNodeClass", "inputs": {}}})
    # Comfy-Org hosts answer invalid_prompt, the installable fork missing_node_type: both name the class
    assert status == 400 and body["error"]["type"] in ("invalid_prompt", "missing_node_type")
    assert "NoSuchNodeClass" in json.dumps(body)


def test_validate_against_the_live_server(comfyui_server, tmp_path):
    """Capability, not version: a host that serves EmptyMiniMaxH3LatentAV validates the H3 latent node; one that
    does not names the node as a core node it lacks. A planted error is found on every host."""
    graph = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 32, "height": 32, "batch_size": 1, "color": 0}},
        "2": {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 672, "height": 384, "length": 124}},
        "3": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}},
    }

    def validate(g: dict) -> tuple[int, str]:
        """(exit code, stdout + stderr): results go to stdout, problems to stderr (docs/cli.md)."""
        path = tmp_path / "g.json"
        path.write_text(json.dumps(g))
        done = run_process([sys.executable, "-m", "h3kit", "validate", str(path), "--server", comfyui_server.url],
                           capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr

    code, said = validate(graph)
    if comfyui_server.has(NATIVE_H3):
        assert code == 0 and said.startswith("OK "), said
    else:
        assert code == 2, said  # README: 2 = rejected by validation
        assert "node 2 (EmptyMiniMaxH3LatentAV)" in said
        assert "a ComfyUI core node this ComfyUI does not have" in said
    graph["1"]["inputs"]["width"] = 99999
    code, said = validate(graph)
    assert code == 2 and "node 1 (EmptyImage) input 'width'" in said, said
