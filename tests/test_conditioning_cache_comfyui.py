"""Issue 4, tier (b): the conditioning-cache nodes and `cond build` against a real ComfyUI server."""

from __future__ import annotations

import json

import pytest
import torch
from comfyui_host import execution_errors
from h3kit.nodes import cond_cache_format as fmt
from test_conditioning_cache import ltx_like
from test_conditioning_cache_cli import run_cond

pytestmark = pytest.mark.comfyui


@pytest.fixture
def server_cache(comfyui_server):
    """The server's models/conditioning_cache, emptied afterwards so other tier-(b) tests see the usual schema."""
    folder = comfyui_server.base_dir / "models" / "conditioning_cache"
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    for path in folder.iterdir():
        path.unlink()


def _served_names(server) -> list[str]:
    info = server.get("/object_info/H3KitLoadConditioning")  # through the pack's own client
    return info["H3KitLoadConditioning"]["input"]["required"]["name"][0]


def test_load_zero_out_save_on_the_real_server(comfyui_server, server_cache):
    original = ltx_like()
    original[0][1]["pooled_output"] = torch.randn(1, 8)
    fmt.save_conditioning(server_cache, "source", original, prompt_text="4K, refined, high quality",
                          encoder="gemma.safetensors (type ltxv)")
    assert "source.safetensors" in _served_names(comfyui_server), "the Load combo did not pick up the new file"
    graph = {
        "1": {"class_type": "H3KitLoadConditioning", "inputs": {"name": "source.safetensors"}},
        "2": {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["1", 0]}},
        "3": {"class_type": "H3KitSaveConditioning",
              "inputs": {"conditioning": ["2", 0], "name": "zeros", "overwrite": False, "prompt_text": ["1", 1]}},
    }
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "success", entry["status"]
    written = server_cache / "zeros.safetensors"
    assert str(written) in entry["outputs"]["3"]["text"][0]
    result = fmt.read_cache(written)
    assert result.metadata["prompt_text"] == "4K, refined, high quality"
    assert result.metadata["prompt_sha256"] == fmt.read_cache(server_cache / "source.safetensors").metadata["prompt_sha256"]
    assert len(result.conditioning) == len(original)
    for (tensor, options), (src_tensor, src_options) in zip(result.conditioning, original, strict=True):
        assert tensor.dtype == src_tensor.dtype and tensor.shape == src_tensor.shape
        assert not tensor.any(), "ConditioningZeroOut output is not all zeros"
        assert list(options) == list(src_options)
        assert options["frame_rate"] == 24.0 and torch.equal(options["attention_mask"], src_options["attention_mask"])
        if src_options["pooled_output"] is not None:
            assert options["pooled_output"].shape == src_options["pooled_output"].shape
            assert not options["pooled_output"].any()


def test_missing_cache_is_rejected_at_queue_time_with_the_available_names(comfyui_server, server_cache):
    fmt.save_conditioning(server_cache, "ltx_generic_refine", ltx_like())
    graph = {
        "1": {"class_type": "H3KitLoadConditioning", "inputs": {"name": "nope.safetensors"}},
        "2": {"class_type": "H3KitSaveConditioning", "inputs": {"conditioning": ["1", 0], "name": "x", "overwrite": False}},
    }
    status, body = comfyui_server.submit(graph)
    assert status == 400, body
    details = json.dumps(body["node_errors"]["1"])
    assert "nope.safetensors" in details and "ltx_generic_refine.safetensors" in details


def test_save_refuses_to_replace_a_different_file_on_the_server(comfyui_server, server_cache):
    fmt.save_conditioning(server_cache, "src", ltx_like())
    fmt.save_conditioning(server_cache, "taken", ltx_like()[:1])
    before = (server_cache / "taken.safetensors").read_bytes()
    graph = {
        "1": {"class_type": "H3KitLoadConditioning", "inputs": {"name": "src.safetensors"}},
        "2": {"class_type": "H3KitSaveConditioning", "inputs": {"conditioning": ["1", 0], "name": "taken", "overwrite": False}},
    }
    entry = comfyui_server.run_graph(graph)
    assert entry["status"]["status_str"] == "error"
    errors = execution_errors(entry)
    assert errors and "overwrite" in errors[0]["exception_message"]
    assert (server_cache / "taken.safetensors").read_bytes() == before


def test_cond_build_preflight_names_the_missing_encoder(comfyui_server, capsys):
    code = run_cond("build", "--server", comfyui_server.url, "--text", "x", "--clip", "no_such_encoder.safetensors",
                    "--type", "ltxv", "--name", "r")
    assert code == 2  # README: 2 = refused before anything runs
    assert "no text encoder 'no_such_encoder.safetensors'" in capsys.readouterr().err
