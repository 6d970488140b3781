"""The pinned core schemas' regeneration (scripts/schemas.py pin): what it keeps, drops and marks.

The tool reads real hosts (docs/host-graphs.md); these tests give it a host's answers as data: a served entry with a
model file list that names the tool's marker, tooltips, a node an older host serves differently."""

from __future__ import annotations

import json

import pytest
from h3kit.checks import schemas as core
from h3kit.scripts import schemas as pin

SERVED_LOADER = {  # VAELoader as a host with the tool's markers in place serves it
    "input": {"required": {"vae_name": [["h3kit-pin-vae.safetensors", "pixel_space"], {"tooltip": "The VAE."}]}},
    "input_order": {"required": ["vae_name"]}, "output": ["VAE"], "output_is_list": [False], "output_name": ["VAE"],
    "output_node": False, "name": "VAELoader", "display_name": "Load VAE", "description": "Loads a VAE.",
    "category": "loaders", "search_aliases": ["vae"], "output_tooltips": [None]}
SERVED_IMAGE = {
    "input": {"required": {"image": ["COMBO", {"image_upload": True, "options": ["h3kit-pin-input.png"],
                                               "default": "h3kit-pin-input.png"}]}},
    "output": ["IMAGE", "MASK"], "output_is_list": [False, False], "output_name": ["IMAGE", "MASK"],
    "output_node": False}


def test_a_file_list_becomes_its_folder_and_tooltips_and_descriptions_go():
    entry = pin.pinned_entry("VAELoader", SERVED_LOADER)
    assert entry["input"] == {"required": {"vae_name": ["COMBO", {"model_folder": "vae"}]}}
    assert not {"description", "tooltip", "search_aliases", "output_tooltips", "input_order", "name"} & set(entry)
    assert entry["display_name"] == "Load VAE" and entry["output"] == ["VAE"]
    image = pin.pinned_entry("LoadImage", SERVED_IMAGE)
    assert image["input"]["required"]["image"] == ["COMBO", {"image_upload": True, "input_files": True}]
    assert image["validate_inputs"] == ["image"]  # its own check of the file replaces the option check on the host


@pytest.mark.parametrize(("options", "folder"), [
    (["h3kit-pin-diffusers"], "diffusers"), (["h3kit-pin-datasets"], "datasets"), (["a.safetensors"], None),
    (["h3kit-pin-text_encoders.gguf", "other.gguf"], "text_encoders")])
def test_marker_names_give_the_folder(options, folder):
    assert pin.marker_folder(options) == folder


def test_markers_of_two_folders_in_one_combo_stop_the_tool():
    with pytest.raises(SystemExit, match="several folders"):
        pin.marker_folder(["h3kit-pin-vae.safetensors", "h3kit-pin-loras.safetensors"])


class FolderHost:
    def __init__(self, base):
        self.base = base

    def get_json(self, route):
        assert route == "/internal/folder_paths"
        return {"vae": [str(self.base / "models" / "vae")], "custom_nodes": [str(self.base / "custom_nodes")]}


def test_markers_are_written_only_inside_the_base_folder_and_removed(tmp_path):
    with pin.markers(FolderHost(tmp_path), tmp_path):
        assert (tmp_path / "models" / "vae" / "h3kit-pin-vae.safetensors").is_file()
        assert (tmp_path / "models" / "vae" / "h3kit-pin-vae" / "model_index.json").is_file()
        assert (tmp_path / "input" / "h3kit-pin-input.png").is_file()
        assert not (tmp_path / "custom_nodes").exists()  # the host imports what is there: never written
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    with pytest.raises(SystemExit, match="outside"), pin.markers(FolderHost(tmp_path.parent / "elsewhere"), tmp_path):
        pass


def test_the_document_names_its_hosts_and_keeps_the_older_hosts_variant():
    newest = {"SaveVideo": {"input": {"required": {"format": ["COMFY_DYNAMICCOMBO_V3", {"options": []}]}},
                            "output": [], "output_node": True},
              "Only": {"input": {}, "output": ["INT"], "output_node": False},
              "Same": {"input": {"required": {"x": ["INT", {"min": 0, "max": 9, "default": 1}]}}, "output": ["INT"],
                       "output_node": False}}
    older = {"SaveVideo": {"input": {"required": {"format": [["auto", "mp4"], {}]}}, "output": [], "output_node": True},
             "Same": newest["Same"]}
    previous = {"nodes": {"Same": {"seen_in": "0.3.64"}, "Third": {"pack": "someone/pack", "input": {},
                                                                    "description": "x"}},
                "sources": {"someone/pack": {"nodes.py": "abc"}}}
    doc = pin.pin_document([("new @1", "0.33.0", "0.34.0", newest), ("old @2", "0.33.0", "0.33.0", older)], previous)
    nodes = core.unpack_specs(json.loads(pin.document_text(doc)))["nodes"]
    assert (nodes["Same"]["version"], nodes["Same"]["seen_in"]) == ("0.33.0", "0.3.64")
    assert (nodes["Only"]["version"], nodes["Only"]["seen_in"]) == ("0.34.0", "0.34.0")
    assert (nodes["SaveVideo"]["version"], nodes["SaveVideo"]["seen_in"]) == ("0.34.0", "0.33.0")
    assert nodes["SaveVideo"]["older"] == {"old @2": {"version": "0.33.0", **older["SaveVideo"]}}
    assert nodes["Third"] == {"pack": "someone/pack", "input": {}}
    assert doc["hosts"]["old @2"]["differs"] == ["SaveVideo"] and doc["hosts"]["new @1"]["nodes"] == 3
    assert doc["sources"]["someone/pack"] == {"nodes.py": "abc"}
