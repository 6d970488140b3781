"""Issue 27: what a user must download for each shipped graph.

The README's "What you need" tables are checked against checks/model_files.py (one home for folder, size, source
and licence) and against the graphs themselves; `doctor --workflow F --models-dir D` FAILs each file a graph
names that D lacks (naming folder, size and source), WARNs where the graph runs without it, and passes when
every file is there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from h3kit.checks.model_files import LICENCES, MODEL_FILES, NO_PUBLIC_SOURCE, SOURCES, folder_name, setup_of
from h3kit.checks.rules_files import model_inputs
from h3kit.scripts import schemas as schema_src
from h3kit.scripts.cli import main
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parent.parent
API = REPO / "workflows" / "api"
GRAPHS = sorted(API.glob("*.json"))
README = (REPO / "README.md").read_text(encoding="utf-8")


def graph_files(path: Path) -> list[tuple[str, str]]:
    """(file name, folder key) of every model file the graph names, in graph order, once each."""
    seen: dict[str, str] = {}
    for *_, folder, name in model_inputs(json.loads(path.read_text()), schema_src.offline_schemas()):
        seen.setdefault(name, folder)
    return list(seen.items())


def readme_file_rows() -> dict[int, tuple[str, str, str]]:
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| (\w+) \| ([^|]+?) \|", README, flags=re.M)
    return {int(n): (name, folder, size) for n, name, folder, size in rows}


def readme_graph_rows() -> dict[str, tuple[str, str, str, str]]:
    """{graph: (files it loads, files needed once, download cell, host cell)}."""
    rows = re.findall(r"^\| `(h3[\w]+)` \| ([^|]+) \| ([\d ]+|none)(?:, once ([\d ]+))? \| ([^|]+) \| ([^|]+) \|$",
                      README, flags=re.M)
    return {name: (files, once, download, host) for name, _, files, once, download, host in rows}


def test_every_catalogued_file_is_in_the_readme_with_its_folder_and_size():
    rows = readme_file_rows()
    assert sorted(name for name, _, _ in rows.values()) == sorted(MODEL_FILES)
    for name, folder, size in rows.values():
        entry = MODEL_FILES[name]
        assert folder == folder_name(entry.folder) == entry.folder
        assert size.startswith(entry.size), name
        if entry.size_source.startswith("field report"):
            assert entry.size_source.removeprefix("field report ") in size, name  # the source beside the number
        elif entry.size_source.startswith("estimate"):
            assert "estimate" in size, name


NO_SOURCE = "no public source known for {files} — the graph cannot be set up from public files"


def test_every_shipped_graph_has_a_row_listing_exactly_its_files_and_their_total():
    """One source: the graphs name the files, checks/model_files.setup_of says what setting each up takes (the
    files made from others need those once, they count in the download; a file without a public source makes the
    graph impossible to set up from public files). The README row must say exactly that."""
    numbers = {name: n for n, (name, _, _) in readme_file_rows().items()}
    rows = readme_graph_rows()
    assert sorted(rows) == sorted(p.stem for p in GRAPHS)  # every shipped graph (9 whole, 10 split halves), no other
    for path in GRAPHS:
        files, once, download, host = rows[path.stem]
        needed = graph_files(path)
        setup = setup_of(name for name, _ in needed)
        listed = [] if files == "none" else [int(n) for n in files.split()]
        assert sorted(listed) == sorted(numbers[name] for name in setup.loads), path.stem
        assert sorted(int(n) for n in once.split()) == sorted(numbers[name] for name in setup.once), path.stem
        total = "0" if not needed else f"{setup.download_gib:.2f} GiB"
        unpublished = " ".join(str(numbers[name]) for name in setup.unpublished)
        assert download == (f"{total}; **{NO_SOURCE.format(files=', '.join(unpublished.split()))}**"
                            if unpublished else total), path.stem
        needs_gguf = any(folder == "unet_gguf" for _, folder in needed)
        assert ("ComfyUI-GGUF" in host) == needs_gguf, path.stem


def test_the_readme_names_four_graphs_that_cannot_be_set_up_from_public_files():
    """Files 2, 3 and 5 have no published download location (sources T and R); they are H3 files, so a split
    graph's stage 2 can be set up."""
    unpublished = {n for n, (name, _, _) in readme_file_rows().items() if MODEL_FILES[name].source in NO_PUBLIC_SOURCE}
    assert unpublished == {2, 3, 5}
    marked = {g for g, (_, _, download, _) in readme_graph_rows().items() if "cannot be set up" in download}
    assert marked == {"h3_ltx_two_stage_turing", "h3_ltx_two_stage_544", "h3_ref2va_two_characters",
                      "h3_ref2va_two_stage",  # and the stage-1 halves of the split ones (issue 32): the H3 side
                      "h3_ltx_two_stage_turing_stage1", "h3_ltx_two_stage_544_stage1", "h3_ref2va_two_stage_stage1"}


def test_the_one_time_files_count_in_the_download():
    """cond build reads file 12 once, convert reads 13 and 14 once: the cached-cond graph downloads what the plain
    two-stage graph does."""
    setup = setup_of(name for name, _ in graph_files(API / "h3_ltx_two_stage_cached_cond.json"))
    assert setup.once == ("gemma4-12b-with-proj-ltx-2.5-comfy-int8-convrot.safetensors",)
    assert f"{setup.download_gib:.2f}" == "67.55"
    turing = setup_of(name for name, _ in graph_files(API / "h3_ltx_two_stage_turing.json"))
    assert f"{turing.download_gib:.2f}" == "67.94" and len(turing.once) == 3


def test_the_source_and_licence_keys_are_a_table_with_the_licences_excluded_regions():
    keys = dict(re.findall(r"^\| (\w+) \| (.+) \|$", README.split("| key | source or licence |", 1)[1], flags=re.M))
    for key in SOURCES:
        if key != "made":
            assert key in keys, key
            assert ("no public source known" in keys[key]) == (key in NO_PUBLIC_SOURCE), key
    assert "excludes the EU, the UK, South Korea and the USA" in keys["H3"]
    for key in ("H3", "LTX"):
        assert key in LICENCES and "gated" in keys[key]


def test_every_field_report_tag_in_the_readme_is_explained_once():
    explained = README.split("**Where the numbers come from.**", 1)[1].split("\n\n", 1)[0]
    ranges = {f"R{n}" for a, b in re.findall(r"\bR(\d)\*{0,2}-\*{0,2}R(\d)\b", explained) for n in range(int(a), int(b) + 1)}
    tags = set(re.findall(r"\b(R\d|SPK\d+|TUR\d+)\b", README))
    assert tags and tags <= set(re.findall(r"\b(R\d|SPK\d+|TUR\d+)\b", explained)) | ranges, tags
    assert '"field notes §A7", "§C1" and the like' in explained and README.count("**Where the numbers come from.**") == 1


def test_every_file_a_graph_names_is_catalogued_in_the_folder_its_loader_reads():
    for path in GRAPHS:
        for name, folder in graph_files(path):
            assert name in MODEL_FILES, (path.stem, name)
            assert folder_name(folder) == MODEL_FILES[name].folder, (path.stem, name)


def test_catalogue_entries_name_a_known_source_and_licence_and_sizes_parse():
    for entry in MODEL_FILES.values():
        assert entry.source in SOURCES and entry.licence in LICENCES
        assert entry.gib is not None and entry.gib > 0
        assert bool(entry.make) == (entry.source == "made")
        assert entry.size_source.startswith(("field report ", "estimate", "same size as"))


# --- doctor --workflow F --models-dir D -----------------------------------------------------------------


def doctor(capsys, graph: Path, models: Path) -> tuple[int, str, str]:
    code = main(["doctor", "--no-local", "--workflow", str(graph), "--models-dir", str(models)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("graph", [p for p in GRAPHS if graph_files(p)], ids=lambda p: p.stem)
def test_an_empty_models_folder_fails_every_file_with_folder_size_and_source(graph, tmp_path, capsys):
    code, out, err = doctor(capsys, graph, tmp_path)
    needed = graph_files(graph)
    assert code == 1  # a FAIL of this machine: files missing
    blocks = err.split("\nFAIL  ")
    for name, folder in needed:
        entry = MODEL_FILES[name]
        (block,) = [b for b in blocks if f"'{name}' is not in {tmp_path}/{folder_name(folder)}" in b]
        assert entry.size in block
        assert (SOURCES[entry.source] in block) if not entry.make else ("make it" in block and "convert" in block
                                                                          or "cond build" in block)
    assert err.count("model files:") == len(needed) and "0 FAIL" not in out


def _fake(models: Path, folder: str, name: str) -> None:
    """A stand-in file: header-valid safetensors (with the metadata VAE/upscaler loaders read), or GGUF bytes."""
    path = models / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if name.endswith(".gguf"):
        path.write_bytes(b"GGUF" + bytes(20))
    else:
        save_file({"w": torch.zeros(2, 5120)}, str(path), metadata={"config": "{}"})


def test_a_complete_models_folder_passes(tmp_path, capsys):
    graph = API / "h3_ltx_two_stage_turing.json"
    for name, folder in graph_files(graph):
        _fake(tmp_path, folder_name(folder), name)
    code, out, err = doctor(capsys, graph, tmp_path)
    assert code == 0, err
    assert f"PASS  model files: every model file the workflow names is in {tmp_path}" in out


def test_a_loader_that_leads_to_no_output_is_a_warn_not_a_fail(tmp_path, capsys):
    graph = json.loads((API / "h3kit_handoff_demo.json").read_text())
    graph["90"] = {"class_type": "VAELoader", "inputs": {"vae_name": "minimax_h3_video_vae_fp16.safetensors"}}
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(graph))
    (tmp_path / "models").mkdir()
    code, _, err = doctor(capsys, path, tmp_path / "models")
    assert code == 0
    assert "WARN  model files: node 90 (VAELoader) vae_name = 'minimax_h3_video_vae_fp16.safetensors' is not in" in err
    assert "the graph runs without it" in err and "4.85 GiB" in err


def test_the_models_folder_defaults_to_the_comfyui_doctor_runs_in(tmp_path, capsys, monkeypatch):
    comfyui = tmp_path / "ComfyUI"
    (comfyui / "models").mkdir(parents=True)
    (comfyui / "main.py").write_text("")
    monkeypatch.chdir(comfyui)
    monkeypatch.delenv("COMFYUI_DIR", raising=False)
    code = main(["doctor", "--no-local", "--workflow", str(API / "h3_effects_t2va.json")])
    err = capsys.readouterr().err
    assert code == 1 and f"is not in {comfyui / 'models'}/embeddings" in err


def test_a_failed_download_in_the_models_folder_is_named_as_what_it_is(tmp_path, capsys):
    graph = API / "h3_ltx_two_stage_turing.json"
    for name, folder in graph_files(graph):
        _fake(tmp_path, folder_name(folder), name)
    login_page = "<!DOCTYPE html><html><body>Access to this model is restricted</body></html>"
    (tmp_path / "unet" / "ltx-2.5-22b-distilled-transformer-bf16-Q4_K_M.gguf").write_text(login_page)
    (tmp_path / "vae" / "minimax_h3_video_vae_fp16.safetensors").write_text(login_page)
    code, _, err = doctor(capsys, graph, tmp_path)
    assert code == 2  # the graph's files fail their checks (F13-style): workflow errors
    assert "Q4_K_M.gguf is an HTML page (a download that returned a web page" in err and "not a GGUF model file" in err
    assert "minimax_h3_video_vae_fp16.safetensors: it is an HTML page" in err
