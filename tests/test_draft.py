"""Issue 32, tier (a): the draft file (nodes/draft.py: H3KitSaveDraft / H3KitLoadDraft) and the split graphs
(checks/graph_split.py, `workflows split`): bitwise round trip with provenance, never overwritten, bounded, never
unpickled, names that never leave their folder; each shipped two-stage graph cut at the handoff by the one function."""

from __future__ import annotations

import copy
import json
import os
import struct
from pathlib import Path

import pytest
import torch
from h3kit.checks.facts import MAX_DRAFT_BYTES
from h3kit.checks.graph_split import (
    DRAFT_PLACEHOLDER,
    LOAD_DRAFT,
    SAVE_DRAFT,
    SplitError,
    is_two_stage,
    split_graph,
    stage_names,
)
from h3kit.nodes import draft as dn
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.cond_cache_format import MAX_CACHE_HEADER_BYTES, save_conditioning
from h3kit.scripts import schemas as schema_src
from h3kit.scripts.cli import main
from h3kit.scripts.workflows_split import expected_split_files, stale_split_files
from safetensors.torch import save_file

API = Path(__file__).resolve().parent.parent / "workflows" / "api"
SHIPPED = {p.stem: json.loads(p.read_text()) for p in sorted(API.glob("*.json"))}
TWO_STAGE = ["h3_ltx_two_stage", "h3_ltx_two_stage_cached_cond", "h3_ltx_two_stage_turing", "h3_ltx_two_stage_544",
             "h3_ref2va_two_stage"]


@pytest.fixture
def folders(tmp_path, monkeypatch):
    out, inp = tmp_path / "output", tmp_path / "input"
    out.mkdir()
    inp.mkdir()
    monkeypatch.setattr(dn, "comfy_folder", lambda kind: out if kind == "output" else inp)
    return out, inp


def latent_and_audio() -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(0)
    samples = torch.randn(1, 128, 3, 2, 4, generator=g)
    samples.view(-1)[0] = struct.unpack("<f", struct.pack("<I", 0x7FC00123))[0]  # a NaN payload: bitwise, not ==
    return {"samples": samples}, {"waveform": torch.randn(1, 2, 800, generator=g), "sample_rate": 32000}


def stage1_prompt() -> dict:
    return split_graph(SHIPPED["h3_ltx_two_stage"]).stage1


def save(latent, audio=None, prefix="h3kit_drafts/draft", prompt=None) -> dict:
    split = split_graph(SHIPPED["h3_ltx_two_stage"])
    return dn.H3KitSaveDraft().save(latent, prefix, audio, prompt if prompt is not None else split.stage1,
                                    split.draft_id)


def uploaded(out: Path, inp: Path, result: dict) -> str:
    """Move the saved draft into the input folder as /upload/image would, return H3KitLoadDraft's name for it."""
    (item,) = result["ui"]["h3kit_drafts"]
    (inp / "h3kit_drafts").mkdir(exist_ok=True)
    (inp / "h3kit_drafts" / item["filename"]).write_bytes((out / item["subfolder"] / item["filename"]).read_bytes())
    return f"h3kit_drafts/{item['filename']}"


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.contiguous().view(torch.uint8).equal(
        b.contiguous().view(torch.uint8))


# --- the file

def test_a_draft_round_trips_bitwise_with_its_provenance(folders):
    out, inp = folders
    latent, audio = latent_and_audio()
    result = save(latent, audio)
    name = uploaded(out, inp, result)
    loaded_latent, loaded_audio, provenance = dn.H3KitLoadDraft().load(name)
    assert same_bits(loaded_latent["samples"], latent["samples"]) and same_bits(loaded_audio["waveform"], audio["waveform"])
    assert loaded_audio["sample_rate"] == 32000
    info = json.loads(provenance)
    assert info["seeds"] == {"12.noise_seed": 42} and info["latent_vae"] == "ltx-2.5-video-vae-conv-bf16.safetensors"
    assert info["sizes"]["latent"] == {"samples": "float32[1, 128, 3, 2, 4]"}
    assert info["sizes"]["audio"]["sample_rate"] == 32000 and info["sizes"]["audio"]["seconds"] == 0.025
    assert info["sizes"]["graph"]["16 H3KitDraftToLTX"]["target_width"] == 1344
    assert info["host"]["torch"] == torch.__version__ and info["h3kit_version"]
    report = json.loads(result["result"][0])
    assert report["file"] == name and report["bytes"] < 100_000


def test_the_graph_it_came_from_is_kept_in_the_file(folders):
    from safetensors import safe_open

    out, _ = folders
    latent, audio = latent_and_audio()
    result = save(latent, audio)
    with safe_open(json.loads(result["result"][0])["path"], "pt") as handle:
        metadata = handle.metadata()
    assert json.loads(metadata["graph"]) == stage1_prompt() and len(metadata["graph_sha256"]) == 64
    assert metadata["h3kit_format"] == "h3kit.draft" and metadata["h3kit_format_version"] == "1"


def test_saving_twice_never_overwrites(folders):
    out, _ = folders
    latent, audio = latent_and_audio()
    first, second = save(latent, audio), save(latent, audio)
    names = {first["ui"]["h3kit_drafts"][0]["filename"], second["ui"]["h3kit_drafts"][0]["filename"]}
    assert len(names) == 2 and len(list((out / "h3kit_drafts").glob("*.safetensors"))) == 2
    assert not [p for p in (out / "h3kit_drafts").iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_draft_without_audio_loads_none_and_both_nodes_say_the_video_will_be_silent(folders):
    out, inp = folders
    latent, _ = latent_and_audio()
    result = save(latent)
    assert any("silent" in w for w in json.loads(result["result"][0])["warnings"])
    _, audio, provenance = dn.H3KitLoadDraft().load(uploaded(out, inp, result))
    assert audio is None and any("silent" in w for w in json.loads(provenance)["warnings"])


def test_load_warns_when_the_graph_decodes_with_another_vae(folders):
    out, inp = folders
    latent, audio = latent_and_audio()
    name = uploaded(out, inp, save(latent, audio))
    stage2 = copy.deepcopy(split_graph(SHIPPED["h3_ltx_two_stage"]).stage2)
    draft_id = next(n for n, node in stage2.items() if node["class_type"] == LOAD_DRAFT)
    _, _, same = dn.H3KitLoadDraft().load(name, stage2, draft_id)
    assert json.loads(same)["warnings"] == []
    stage2["21"]["inputs"]["vae_name"] = "another_vae.safetensors"
    _, _, other = dn.H3KitLoadDraft().load(name, stage2, draft_id)
    assert any("another_vae.safetensors" in w and "noise" in w for w in json.loads(other)["warnings"])


@pytest.mark.parametrize("prefix", ["../x", "/abs/x", "a\\b", ".hidden/x", "h3kit_drafts/../../x", "CON", "a/b/c/d/e",
                                    "", "x:y"])
def test_a_prefix_that_would_leave_the_output_folder_is_refused(folders, prefix):
    latent, audio = latent_and_audio()
    with pytest.raises(H3KitInputError) as err:
        save(latent, audio, prefix)
    assert err.value.node == SAVE_DRAFT and err.value.input_name == "filename_prefix" and "Fix:" in str(err.value)
    assert not list(folders[0].rglob("*.safetensors"))


def test_a_prefix_through_a_link_out_of_the_output_folder_is_refused(folders, tmp_path):
    out, _ = folders
    (tmp_path / "elsewhere").mkdir()
    (out / "h3kit_drafts").symlink_to(tmp_path / "elsewhere")
    latent, audio = latent_and_audio()
    with pytest.raises(H3KitInputError, match="leads out of"):
        save(latent, audio)
    assert not list((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("name", ["../x.safetensors", "/etc/passwd", "a/b/c.safetensors", "h3kit_drafts/x.png",
                                  ".x.safetensors", "h3kit_drafts\\x.safetensors", "nothing.safetensors"])
def test_a_load_name_never_leaves_the_input_folder(folders, name):
    with pytest.raises(H3KitInputError) as err:
        dn.H3KitLoadDraft().load(name)
    assert err.value.node == LOAD_DRAFT and err.value.input_name == "draft"
    message = dn.H3KitLoadDraft.VALIDATE_INPUTS(name)
    assert isinstance(message, str) and "Fix:" in message


def test_a_link_out_of_the_input_folder_is_refused(folders, tmp_path):
    out, inp = folders
    latent, audio = latent_and_audio()
    real = Path(json.loads(save(latent, audio)["result"][0])["path"])
    (inp / "h3kit_drafts").mkdir()
    (inp / "h3kit_drafts" / "link.safetensors").symlink_to(real)  # a real draft, but outside input/
    with pytest.raises(H3KitInputError, match="leads out of"):
        dn.H3KitLoadDraft().load("h3kit_drafts/link.safetensors")


def test_a_missing_draft_names_the_ones_there(folders):
    out, inp = folders
    latent, audio = latent_and_audio()
    name = uploaded(out, inp, save(latent, audio))
    assert dn.available_drafts() == [name]
    message = dn.H3KitLoadDraft.VALIDATE_INPUTS("h3kit_drafts/other.safetensors")
    assert "does not exist" in message and name in message
    assert dn.H3KitLoadDraft.VALIDATE_INPUTS(name) is True


def test_a_pickle_is_named_and_never_unpickled(folders):
    _, inp = folders
    torch.save({"samples": torch.zeros(2)}, inp / "old.safetensors")
    message = dn.H3KitLoadDraft.VALIDATE_INPUTS("old.safetensors")
    assert "never unpickles" in message


def test_a_conditioning_cache_or_a_model_is_not_a_draft(folders):
    _, inp = folders
    save_conditioning(inp, "cond", [[torch.zeros(1, 2, 3), {}]], prompt_text="p")
    save_file({"weight": torch.zeros(2)}, str(inp / "model.safetensors"))
    for name in ("cond.safetensors", "model.safetensors"):
        assert "not an H3Kit two-stage draft" in dn.H3KitLoadDraft.VALIDATE_INPUTS(name)


def test_a_draft_over_the_cap_is_refused_from_its_header_before_anything_is_allocated(folders):
    """A sparse file whose header claims MAX_DRAFT_BYTES + 4 bytes of tensor: refused by size, nothing read."""
    _, inp = folders
    count = MAX_DRAFT_BYTES // 4 + 1
    header = json.dumps({"__metadata__": {"h3kit_format": "h3kit.draft", "h3kit_format_version": "1",
                                          "structure": "{}", "tensors": "{}"},
                         "t0": {"dtype": "F32", "shape": [count], "data_offsets": [0, count * 4]}}).encode()
    path = inp / "huge.safetensors"
    with open(path, "wb") as handle:
        handle.write(len(header).to_bytes(8, "little") + header)
        handle.truncate(8 + len(header) + count * 4)
    message = dn.H3KitLoadDraft.VALIDATE_INPUTS("huge.safetensors")
    assert "is at most 1 GiB" in message and "two-stage draft" in message
    with pytest.raises(H3KitInputError, match="at most 1 GiB"):
        dn.H3KitLoadDraft().load("huge.safetensors")


def test_a_header_over_the_caches_cap_is_refused_before_it_is_read(folders):
    _, inp = folders
    path = inp / "head.safetensors"
    path.write_bytes((MAX_CACHE_HEADER_BYTES + 1).to_bytes(8, "little") + b"{" + b" " * 64)
    assert "at most" in dn.H3KitLoadDraft.VALIDATE_INPUTS("head.safetensors")


def test_a_damaged_draft_fails_its_checksum(folders):
    out, inp = folders
    latent, audio = latent_and_audio()
    name = uploaded(out, inp, save(latent, audio))
    path = inp / name
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(H3KitInputError, match="fails its checksum"):
        dn.H3KitLoadDraft().load(name)


def test_is_changed_follows_the_file(folders):
    out, inp = folders
    latent, audio = latent_and_audio()
    name = uploaded(out, inp, save(latent, audio))
    before = dn.H3KitLoadDraft.IS_CHANGED(name)
    os.utime(inp / name, ns=(1, 1))
    assert dn.H3KitLoadDraft.IS_CHANGED(name) != before


def test_an_audio_video_latent_is_refused_with_what_to_connect(folders):
    class Nested(torch.Tensor):
        pass

    with pytest.raises(H3KitInputError, match="plain tensors") as err:
        save({"samples": torch.zeros(2).as_subclass(Nested)})
    assert "VAEEncode" in err.value.fix


# --- the split

@pytest.mark.parametrize("name", TWO_STAGE)
def test_each_two_stage_graph_is_cut_at_the_handoff_keeping_every_node_and_link(name):
    whole = SHIPPED[name]
    split = split_graph(whole)
    first, second = split.stage1, split.stage2
    assert set(first) | set(second) == set(whole) | {split.draft_id}
    assert first[split.draft_id]["class_type"] == SAVE_DRAFT and second[split.draft_id]["class_type"] == LOAD_DRAFT
    assert first[split.draft_id]["inputs"]["latent"] == [split.encode_id, 0]
    assert first[split.draft_id]["inputs"]["audio"] == [split.handoff_id, 1]
    assert second[split.draft_id]["inputs"]["draft"] == DRAFT_PLACEHOLDER
    for nid in set(first) & set(second) - {split.draft_id}:  # only loaders run in both stages
        assert not [v for v in whole[nid]["inputs"].values() if isinstance(v, list)], nid
    for stage in (first, second):
        for nid, node in stage.items():
            if nid == split.draft_id:
                continue
            for key, value in node["inputs"].items():
                moved = isinstance(value, list) and value[0] == split.draft_id
                assert value == whole[nid]["inputs"][key] or moved, (nid, key)
    classes = lambda stage: {n["class_type"] for n in stage.values()}  # noqa: E731
    assert not classes(second) & {"MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo", "H3KitDraftToLTX"}
    assert not classes(first) & {"LTXVLatentUpsampler", "SaveVideo", "H3KitRefineSetup"}


@pytest.mark.parametrize("name", TWO_STAGE)
def test_the_shipped_stage_graphs_are_the_split_of_the_shipped_graph_and_validate(name):
    split = split_graph(SHIPPED[name])
    first, second = stage_names(name)
    assert SHIPPED[first] == split.stage1 and SHIPPED[second] == split.stage2
    assert is_two_stage(SHIPPED[name]) and not is_two_stage(SHIPPED[first]) and not is_two_stage(SHIPPED[second])


def test_the_committed_stage_graphs_are_current_and_only_two_stage_graphs_split():
    assert stale_split_files(API) == []
    assert sorted(p.stem for p in expected_split_files(API)) == sorted(s for n in TWO_STAGE for s in stage_names(n))
    assert main(["workflows", "split", "--check"]) == 0


def test_a_stale_stage_graph_is_found(tmp_path, capsys):
    for name in ("h3_ltx_two_stage", "h3_ltx_two_stage_stage1", "h3_ltx_two_stage_stage2"):
        (tmp_path / f"{name}.json").write_text(json.dumps(SHIPPED[name]))
    graph = json.loads((tmp_path / "h3_ltx_two_stage.json").read_text())
    graph["12"]["inputs"]["noise_seed"] = 7
    (tmp_path / "h3_ltx_two_stage.json").write_text(json.dumps(graph))
    (tmp_path / "gone_stage2.json").write_text("{}")
    assert main(["workflows", "split", "--check", "--api-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "h3_ltx_two_stage_stage1.json: stale" in err and "gone_stage2.json: left over" in err


def test_a_stage_2_node_needing_a_value_the_draft_does_not_carry_is_refused():
    graph = copy.deepcopy(SHIPPED["h3_ltx_two_stage"])
    graph["40"]["inputs"]["fps"] = ["16", 2]  # the mux takes a number the handoff computes (its kept_frames)
    with pytest.raises(SplitError, match="node 40 .CreateVideo. input 'fps' takes output 2 of node 16"):
        split_graph(graph)
    graph = copy.deepcopy(SHIPPED["h3_ltx_two_stage"])
    graph["35"]["inputs"]["images"] = ["16", 0]  # the refined video's guard reads the handoff's frames
    with pytest.raises(SplitError, match="feed node 22 .VAEEncode., node 35 .H3KitFrameGuard."):
        split_graph(graph)
    graph = copy.deepcopy(SHIPPED["h3_ltx_two_stage"])
    graph["30"]["inputs"]["model"] = ["2", 0]  # the refine takes the H3 LoRA's output: computed in stage 1
    with pytest.raises(SplitError, match="node 29 .* node 30 .H3KitRefineSetup., which is computed in stage 1"):
        split_graph(graph)


def test_graphs_without_a_handoff_into_ltx_are_not_two_stage():
    assert not is_two_stage(SHIPPED["h3kit_handoff_demo"]) and not is_two_stage(SHIPPED["h3_effects_t2va"])
    with pytest.raises(SplitError, match="feed node 3 .H3KitFrameGuard."):
        split_graph(SHIPPED["h3kit_handoff_demo"])
    with pytest.raises(SplitError, match="already split"):
        split_graph(SHIPPED["h3_ltx_two_stage_stage1"])


def test_loaders_both_stages_use_are_copied_and_stage_1_previews_stay_in_stage_1():
    split = split_graph(SHIPPED["h3_ltx_two_stage"])
    assert "21" in split.stage1 and "21" in split.stage2  # the LTX VAE: encodes in stage 1, decodes in stage 2
    assert "42" in split.stage1 and "42" not in split.stage2  # the handoff report's preview


def test_offline_validation_lets_load_draft_check_its_own_file_as_comfyui_does():
    """ComfyUI skips the option list of an input the node's VALIDATE_INPUTS takes: a new upload's name is valid.
    Before, the offline schema of a pack node had no 'validate_inputs' and the validator refused any name it did not
    list (offline: every name)."""
    info = schema_src.offline_schemas()
    assert info[LOAD_DRAFT]["validate_inputs"] == ["draft"]
    assert info["H3KitLoadConditioning"]["validate_inputs"] == ["name"]
    assert main(["validate", str(API / "h3_ltx_two_stage_stage2.json")]) == 0
