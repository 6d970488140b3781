"""Issue 4: `python -m h3kit cond {build,info,list,import}` — tier (a); `build` talks to a stub ComfyUI over HTTP."""

from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from h3kit.adapters import comfy_jobs
from h3kit.nodes import cond_cache_format as fmt
from h3kit.scripts import cond
from test_conditioning_cache import assert_identical, h3_like, ltx_like


def run_cond(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cond.add_arguments(parser)
    return cond.run(parser.parse_args(list(argv)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("H3KIT_COND_CACHE_DIR", str(folder))
    return folder


# ------------------------------------------------------------------------------------------------ import


@pytest.mark.parametrize("zipfile", [True, False])
def test_import_converts_a_legacy_torch_cache_bitwise(cache_dir, tmp_path, capsys, zipfile):
    legacy = h3_like()
    torch.save(legacy, tmp_path / "old.cond", _use_new_zipfile_serialization=zipfile)
    assert run_cond("import", str(tmp_path / "old.cond"), "ltx_generic_refine", "--prompt-text", "4K") == 0
    out = capsys.readouterr().out
    assert "weights_only=True" in out and str(cache_dir / "ltx_generic_refine.safetensors") in out
    loaded = fmt.read_cache(cache_dir / "ltx_generic_refine.safetensors")
    assert_identical(legacy, loaded.conditioning)
    assert loaded.metadata["prompt_text"] == "4K"


class _SideEffect:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


def test_import_refuses_a_pickle_that_needs_full_unpickling_and_runs_nothing(cache_dir, tmp_path, capsys):
    marker = tmp_path / "pwned"
    torch.save([[torch.zeros(1, 2, 3), {"x": _SideEffect(marker)}]], tmp_path / "evil.pt")
    assert run_cond("import", str(tmp_path / "evil.pt"), "evil") == 2  # refused
    captured = capsys.readouterr()
    assert "weights_only=True" in captured.out
    assert "refused" in captured.err and "full unpickling" in captured.err and "makedirs" in captured.err
    assert not marker.exists()
    assert not cache_dir.exists() or not any(cache_dir.iterdir())


def test_import_of_something_that_is_not_conditioning_says_so(cache_dir, tmp_path, capsys):
    torch.save({"state": torch.zeros(2)}, tmp_path / "model.pt")
    assert run_cond("import", str(tmp_path / "model.pt"), "m") == 2
    assert "CONDITIONING" in capsys.readouterr().err


def test_import_never_replaces_an_existing_cache_unless_asked(cache_dir, tmp_path, capsys):
    torch.save(ltx_like(), tmp_path / "a.pt")
    torch.save(h3_like(), tmp_path / "b.pt")
    assert run_cond("import", str(tmp_path / "a.pt"), "x") == 0
    assert run_cond("import", str(tmp_path / "b.pt"), "x") == 2
    assert "overwrite" in capsys.readouterr().err
    assert_identical(ltx_like(), fmt.read_cache(cache_dir / "x.safetensors").conditioning)
    assert run_cond("import", str(tmp_path / "b.pt"), "x", "--overwrite") == 0
    assert_identical(h3_like(), fmt.read_cache(cache_dir / "x.safetensors").conditioning)


# ------------------------------------------------------------------------------------------- info / list


def test_info_prints_provenance_and_verifies_data(cache_dir, capsys):
    fmt.save_conditioning(cache_dir, "ltx", ltx_like(), prompt_text="4K, refined", encoder="gemma (type ltxv)")
    assert run_cond("info", "ltx") == 0
    out = capsys.readouterr().out
    assert '"4K, refined"' in out and "gemma (type ltxv)" in out and "bfloat16[1, 16, 32]" in out
    assert "attention_mask" in out and "frame_rate: 24.0" in out
    assert run_cond("info", str(cache_dir / "ltx.safetensors"), "--json") == 0
    info = json.loads(capsys.readouterr().out)
    assert info["prompt_text"] == "4K, refined" and len(info["entries"]) == 2


def test_info_on_a_corrupt_file_fails_with_the_reason(cache_dir, capsys):
    fmt.save_conditioning(cache_dir, "ltx", ltx_like())
    path = cache_dir / "ltx.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    assert run_cond("info", "ltx") == 2
    err = capsys.readouterr().err
    assert "truncated" in err and "delete" not in err  # never advise deleting a file the user passed


def test_list_shows_caches_and_flags_unusable_files(cache_dir, capsys):
    fmt.save_conditioning(cache_dir, "good", ltx_like(), prompt_text="4K, refined")
    (cache_dir / "bad.safetensors").write_bytes(b"\x00" * 3)
    assert run_cond("list", "--json") == 1  # a file in the folder is not a usable cache
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)["caches"]}
    assert rows["good.safetensors"]["prompt_text"] == "4K, refined"
    assert "too short" in rows["bad.safetensors"]["problem"]
    assert run_cond("list") == 1
    out, err = capsys.readouterr()
    assert "NOT USABLE" in err and "bad.safetensors" in err and "good.safetensors" in out


def test_without_a_folder_the_error_says_how_to_give_one(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("H3KIT_COND_CACHE_DIR", raising=False)
    monkeypatch.delenv("COMFYUI_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # not inside a ComfyUI folder
    assert run_cond("list") == 2
    assert "H3KIT_COND_CACHE_DIR" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- build


class StubComfyUI:
    """Answers the routes `cond build` uses, in the shapes of host-api.md §7, and records the posted graph."""

    def __init__(self, outcome: str = "success"):
        self.outcome = outcome
        self.posted: list[dict] = []
        self.history_polls = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                return

            def _send(self, status: int, body: object) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                self._send(200, stub.get(self.path))

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.posted.append(body)
                self._send(200, {"prompt_id": "p1", "number": 0, "node_errors": {}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def get(self, route: str) -> object:
        if route == "/object_info/H3KitSaveConditioning":
            return {"H3KitSaveConditioning": {"name": "H3KitSaveConditioning"}}
        if route == "/object_info/CLIPLoader":
            return {"CLIPLoader": {"input": {"required": {
                "clip_name": [["gemma.safetensors"], {}], "type": [["stable_diffusion", "ltxv", "minimax"], {}]}}}}
        if route == "/history/p1":
            self.history_polls += 1
            if self.history_polls < 2:
                return {}
            if self.outcome == "error":
                return {"p1": {"outputs": {}, "status": {"status_str": "error", "completed": False, "messages": [
                    ["execution_start", {"prompt_id": "p1"}],
                    ["execution_error", {"node_id": "1", "node_type": "CLIPLoader",
                                         "exception_message": "out of memory"}]]}}}
            return {"p1": {"outputs": {"3": {"text": ["saved /models/conditioning_cache/r.safetensors (1 entry)"]}},
                           "status": {"status_str": "success", "completed": True, "messages": []}}}
        return {}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.setattr(comfy_jobs, "POLL_INTERVAL_S", 0.01)
    server = StubComfyUI()
    yield server
    server.close()


def test_build_queues_loader_encode_save_and_reports_the_path(stub, capsys):
    code = run_cond("build", "--server", stub.url, "--text", "4K, refined", "--clip", "gemma.safetensors",
                    "--type", "ltxv", "--name", "r")
    assert code == 0
    assert "saved /models/conditioning_cache/r.safetensors" in capsys.readouterr().out
    (posted,) = stub.posted
    graph = posted["prompt"]
    assert graph["1"]["class_type"] == "CLIPLoader"
    assert graph["1"]["inputs"] == {"clip_name": "gemma.safetensors", "type": "ltxv", "device": "default"}
    assert graph["2"] == {"class_type": "CLIPTextEncode", "_meta": graph["2"]["_meta"],
                          "inputs": {"text": "4K, refined", "clip": ["1", 0]}}
    save = graph["3"]["inputs"]
    assert graph["3"]["class_type"] == "H3KitSaveConditioning" and save["conditioning"] == ["2", 0]
    assert save["name"] == "r" and save["overwrite"] is False and save["prompt_text"] == "4K, refined"
    assert "gemma.safetensors" in save["encoder_name"]


def test_build_reads_the_prompt_byte_exact_from_a_file(stub, tmp_path):
    text = "4K, refined,\nhigh quality  "
    (tmp_path / "p.txt").write_text(text, encoding="utf-8")
    assert run_cond("build", "--server", stub.url, "--text-file", str(tmp_path / "p.txt"),
                    "--clip", "gemma.safetensors", "--name", "r") == 0
    assert stub.posted[0]["prompt"]["2"]["inputs"]["text"] == text


def test_build_names_the_missing_text_encoder_and_what_exists(stub, capsys):
    assert run_cond("build", "--server", stub.url, "--text", "x", "--clip", "nope.safetensors", "--name", "r") == 2
    err = capsys.readouterr().err
    assert "nope.safetensors" in err and "gemma.safetensors" in err
    assert stub.posted == []


def test_build_rejects_an_unknown_clip_type(stub, capsys):
    assert run_cond("build", "--server", stub.url, "--text", "x", "--clip", "gemma.safetensors",
                    "--type", "ltx25", "--name", "r") == 2
    assert "ltx25" in capsys.readouterr().err


def test_build_reports_the_execution_error(monkeypatch, capsys):
    monkeypatch.setattr(comfy_jobs, "POLL_INTERVAL_S", 0.01)
    server = StubComfyUI(outcome="error")
    try:
        assert run_cond("build", "--server", server.url, "--text", "x", "--clip", "gemma.safetensors",
                        "--name", "r") == 1
    finally:
        server.close()
    assert "CLIPLoader (node 1): out of memory" in capsys.readouterr().err


def test_build_without_a_server_says_it_cannot_reach_it(capsys):
    stub = StubComfyUI()
    url = stub.url
    stub.close()
    assert run_cond("build", "--server", url, "--text", "x", "--clip", "g", "--name", "r") == 4
    assert "cannot reach ComfyUI" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["root", "custom_nodes"])
def test_list_inside_a_comfyui_folder_finds_its_cache_folder_as_doctor_finds_the_install(tmp_path, monkeypatch,
                                                                                        capsys, where):
    """Issue 27: run from the ComfyUI folder (or below it), `cond list` needs no --dir, like doctor."""
    from h3kit.checks.environment import find_comfyui

    comfyui = tmp_path / "ComfyUI"
    (comfyui / "custom_nodes").mkdir(parents=True)
    (comfyui / "main.py").write_text("")
    fmt.save_conditioning(comfyui / "models" / "conditioning_cache", "ltx_generic_refine", ltx_like())
    monkeypatch.delenv("H3KIT_COND_CACHE_DIR", raising=False)
    monkeypatch.delenv("COMFYUI_DIR", raising=False)
    monkeypatch.chdir(comfyui if where == "root" else comfyui / "custom_nodes")
    assert find_comfyui() == comfyui
    assert run_cond("list") == 0
    out = capsys.readouterr().out
    assert f"{comfyui / 'models' / 'conditioning_cache'} (from the ComfyUI folder {comfyui})" in out
    assert "ltx_generic_refine.safetensors" in out
    assert run_cond("info", "ltx_generic_refine") == 0


# ------------------------------------------------------------------------------------------- issue 33 item 6
def _cache_with_header(folder: Path, header: int) -> Path:
    """An H3Kit cache whose safetensors header is exactly `header` bytes (its first bytes then spell a pickle's
    \\x80\\x02..\\x05 opcode), tuned through the prompt text's length."""
    cond_value = [[torch.zeros(1, 2, 4), {"pooled_output": None}]]
    for pad in range(header):
        result = fmt.save_conditioning(folder, f"h{header}", cond_value, prompt_text="p" * pad, overwrite=True)
        if int.from_bytes(result.path.read_bytes()[:8], "little") == header:
            return result.path
    raise AssertionError(f"no prompt length gives a {header}-byte header")


@pytest.mark.parametrize("header", [640, 896, 1152, 1408])
def test_our_own_cache_is_never_taken_for_a_pickle(cache_dir, tmp_path, capsys, header):
    path = _cache_with_header(cache_dir, header)
    assert path.read_bytes()[0] == 0x80
    assert run_cond("info", str(path)) == 0
    capsys.readouterr()
    assert run_cond("import", str(path), "again") == 2  # the old code fed it to torch.load
    err = capsys.readouterr().err
    assert "already a safetensors file" in err and "torch.load" not in err and "pickle" not in err
    cut = tmp_path / f"cut{header}.safetensors"
    cut.write_bytes(path.read_bytes()[:header])  # truncated inside its header
    assert run_cond("info", str(cut)) == 2
    err = capsys.readouterr().err
    assert "cond import" not in err and "pickle" not in err and "safetensors" in err


@pytest.mark.parametrize("text", ["ID3 tags fly off a record at night.", "OggS, the town crier, rings.",
                                  "fLaC: a flag in the wind.", "GIF89a looping cat"])
def test_build_reads_a_prompt_that_starts_like_a_media_signature(stub, tmp_path, text):
    (tmp_path / "p.txt").write_text(text, encoding="utf-8")
    assert run_cond("build", "--server", stub.url, "--text-file", str(tmp_path / "p.txt"),
                    "--clip", "gemma.safetensors", "--name", "r") == 0
    assert stub.posted[0]["prompt"]["2"]["inputs"]["text"] == text
