"""Issue 6, tier (b): H3KitEffectPrompt inside a real ComfyUI with synthetic effect files in its embeddings folder."""

from __future__ import annotations

import json

import pytest
import torch
from comfyui_host import execution_errors
from safetensors.torch import save_file

pytestmark = pytest.mark.comfyui

PROMPT = "integrated_multimodal_description: [Shot 1] A kite rises over a beach. The wind drops."
FILES = {"h3kit_fx_good.safetensors": (9, 5120), "h3kit_fx_t5.safetensors": (50, 4096)}


@pytest.fixture
def server_effects(comfyui_server):
    """Synthetic effect files in the server's models/embeddings, removed afterwards so other tests see the
    folder as it was (the combo lists whatever is there)."""
    folder = comfyui_server.base_dir / "models" / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, shape in FILES.items():
        save_file({"qwen3vl_32b": torch.randn(*shape, generator=torch.Generator().manual_seed(0))}, str(folder / name))
        paths.append(folder / name)
    yield comfyui_server
    for path in paths:
        path.unlink(missing_ok=True)


def effect_graph(effect: str, position: str = "after_first_shot_tag") -> dict:
    return {
        "1": {"class_type": "H3KitEffectPrompt",
              "inputs": {"prompt": PROMPT, "effect": effect, "effect_2": "none", "effect_3": "none",
                         "position": position, "strict": False}},
        "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}},
    }


def test_effect_combo_lists_the_server_embeddings_folder(server_effects):
    options = server_effects.object_info()["H3KitEffectPrompt"]["input"]["required"]["effect"][0]
    assert options[0] == "none" and set(FILES) <= set(options)


@pytest.mark.parametrize(("position", "expected"), [
    ("after_first_shot_tag",
     "integrated_multimodal_description: [Shot 1] embedding:h3kit_fx_good A kite rises over a beach. The wind drops."),
    ("end", PROMPT + " embedding:h3kit_fx_good"),
])
def test_effect_prompt_runs_on_the_server(server_effects, position, expected):
    entry = server_effects.run_graph(effect_graph("h3kit_fx_good.safetensors", position))
    assert entry["status"]["status_str"] == "success", entry["status"]
    (text,) = entry["outputs"]["2"]["text"]
    assert text == expected
    report = json.loads(entry["outputs"]["3"]["text"][0])
    assert report["effects"][0]["rows"] == 9 and report["effects"][0]["width"] == 5120
    assert report["position_used"] == position


def test_wrong_width_effect_fails_loudly_on_the_server(server_effects):
    entry = server_effects.run_graph(effect_graph("h3kit_fx_t5.safetensors"))
    assert entry["status"]["status_str"] == "error"
    errors = execution_errors(entry)
    assert errors and "4096" in errors[0]["exception_message"] and "T5-XXL" in errors[0]["exception_message"]
    assert errors[0]["node_type"] == "H3KitEffectPrompt"
