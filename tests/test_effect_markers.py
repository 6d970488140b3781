"""Issue 33 item 4, tier (a): an `embedding:<name>` marker typed into a prompt passes the checks a chosen effect file
passes (nodes/effect_files.py: [N, 5120], N <= 1,024, a float dtype, every value finite; at most 16 markers and
4,096 rows per prompt), on the 0.33.0 path - the clip output's tokenizer, which ComfyUI's own nodes call - and in
H3KitEffectPrompt / H3KitEffectSplice; the embeddings folders are walked once per prompt, never once per marker,
and a typed marker never reaches the host's loader (it reads any file whole and walks every folder each time).

The old code handed every typed marker to the host's loader: 1,025 rows accepted, int64 rows of 2**40 accepted, a
200,000-row file spliced (+4.3 GiB); 100,000 markers or a 10,000-folder tree walked the tree once per marker.
Tier (b), the same on ComfyUI 0.33.0's real tokenizer: tests/test_effects_comfyui.py (tests/effects_host_probe.py).
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
import torch
from h3_standins import KEY, h3_clip
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.effects import H3KitEffectPrompt, H3KitEffectSplice
from safetensors.torch import save_file

H3_PROMPT = "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. It wakes and jumps."
WIDTH = 5120


@pytest.fixture
def emb_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "embeddings"
    folder.mkdir()
    monkeypatch.setenv("H3KIT_EMBEDDINGS_DIR", str(folder))
    save_file({KEY: torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(2))}, str(folder / "fx_b.safetensors"))
    return folder


def write(folder: Path, name: str, tensor: torch.Tensor) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if name.endswith(".safetensors"):
        save_file({KEY: tensor.contiguous()}, str(path))
    else:
        torch.save({KEY: tensor}, path)
    return path


def sparse_rows(folder: Path, name: str, rows: int) -> Path:
    """A valid safetensors header of `rows` bf16 rows over a sparse data section (no disk, never read)."""
    header = json.dumps({KEY: {"dtype": "BF16", "shape": [rows, WIDTH], "data_offsets": [0, rows * WIDTH * 2]}}).encode()
    path = folder / name
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + rows * WIDTH * 2)
    return path


def clip_output(emb_dir: Path):
    """The clip output of H3KitEffectPrompt on the 0.33.0 stand-in (markers are text to the host tokenizer)."""
    _, _, clip = H3KitEffectPrompt().execute(H3_PROMPT, "fx_b.safetensors", clip=h3_clip(emb_dir))
    return clip


def host_encode(clip, text: str):
    """What MiniMaxH3ImageToVideo / CLIPTextEncode do with the clip and their own prompt widget."""
    return clip.encode_from_tokens_scheduled(clip.tokenize(text))


BAD_FILES = {
    "rows_1025": (lambda f: write(f, "big.safetensors", torch.zeros(1025, WIDTH)), "1,025 rows; an effect has at most 1,024"),
    "rows_200000": (lambda f: sparse_rows(f, "big.safetensors", 200_000), "200,000 rows; an effect has at most 1,024"),
    "int64_2_40": (lambda f: write(f, "big.safetensors", torch.full((4, WIDTH), 2**40, dtype=torch.int64)),
                   "dtype I64, not a float type"),
    "int64_pt": (lambda f: write(f, "big.pt", torch.full((4, WIDTH), 2**40, dtype=torch.int64)),
                 "dtype I64, not a float type"),
    "nan": (lambda f: write(f, "big.safetensors", torch.full((2, WIDTH), float("nan"))), "NaN or infinite"),
    "inf_bf16": (lambda f: write(f, "big.safetensors", torch.full((2, WIDTH), float("inf")).to(torch.bfloat16)),
                 "NaN or infinite"),
    "width_4096": (lambda f: write(f, "big.safetensors", torch.zeros(3, 4096)), "rows are 4096 wide"),
    "one_d": (lambda f: write(f, "big.safetensors", torch.zeros(WIDTH)), "2-D"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_typed_marker_on_the_host_nodes_clip_passes_the_effect_checks(emb_dir, case):
    make, message = BAD_FILES[case]
    make(emb_dir)
    clip = clip_output(emb_dir)
    loaded = clip.tokenizer.host.qwen3vl_32b.loaded
    with pytest.raises(H3KitInputError, match=message) as err:
        host_encode(clip, H3_PROMPT + " Then embedding:big here.")
    assert err.value.input_name == "prompt" and "embedding:big" in str(err.value)
    assert "big" not in loaded  # never handed to the host's loader


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_typed_marker_in_the_effect_prompt_passes_the_effect_checks(emb_dir, case):
    make, message = BAD_FILES[case]
    make(emb_dir)
    for clip in (h3_clip(emb_dir), None):  # with the clip, and without (the node checks the file itself)
        with pytest.raises(H3KitInputError, match=message):
            H3KitEffectPrompt().execute(H3_PROMPT + " Then embedding:big here.", "none", clip=clip)


@pytest.mark.parametrize("case", ["rows_1025", "int64_2_40", "nan"])
def test_a_typed_marker_in_the_splice_prompt_passes_the_effect_checks(emb_dir, case):
    make, message = BAD_FILES[case]
    make(emb_dir)
    with pytest.raises(H3KitInputError, match=message):
        H3KitEffectSplice().execute(h3_clip(emb_dir), H3_PROMPT + " Then embedding:big here.", "fx_b.safetensors")


@pytest.mark.parametrize("case", ["nan", "inf_bf16"])
def test_a_chosen_effect_file_must_be_finite_too(emb_dir, case):
    BAD_FILES[case][0](emb_dir)
    with pytest.raises(H3KitInputError, match="NaN or infinite"):
        H3KitEffectPrompt().execute(H3_PROMPT, "big.safetensors", clip=h3_clip(emb_dir))
    with pytest.raises(H3KitInputError, match="NaN or infinite"):
        H3KitEffectSplice().execute(h3_clip(emb_dir), H3_PROMPT, "big.safetensors")


def test_the_row_cap_is_the_documented_number():
    from h3kit.nodes import effect_files

    assert (effect_files.MAX_EFFECT_ROWS, effect_files.MAX_MARKERS_PER_PROMPT,
            effect_files.MAX_PROMPT_EFFECT_ROWS) == (1024, 16, 4096)


def test_1024_rows_are_still_an_effect(emb_dir):
    write(emb_dir, "edge.safetensors", torch.ones(1024, WIDTH))
    clip = clip_output(emb_dir)
    cond = host_encode(clip, H3_PROMPT + " Then embedding:edge here.")
    assert cond[0][0].shape[1] >= 1024


def test_17_markers_are_refused_from_the_text(emb_dir):
    clip = clip_output(emb_dir)
    host_encode(clip, H3_PROMPT + " x embedding:fx_b" * 16)  # 16 is the limit
    with pytest.raises(H3KitInputError, match="holds 17 embedding: markers; a prompt takes at most 16"):
        host_encode(clip, H3_PROMPT + " x embedding:fx_b" * 17)
    with pytest.raises(H3KitInputError, match="holds 17 embedding: markers"):
        H3KitEffectPrompt().execute(H3_PROMPT + " x embedding:fx_b" * 17, "none")


def test_100000_markers_cost_nothing_before_they_are_refused(emb_dir, monkeypatch):
    scanned = []
    real_scandir = os.scandir
    clip = clip_output(emb_dir)
    monkeypatch.setattr(os, "scandir", lambda p: scanned.append(p) or real_scandir(p))
    text = H3_PROMPT + " embedding:fx_b" * 100_000
    started = time.monotonic()
    for run in (lambda: host_encode(clip, text), lambda: H3KitEffectPrompt().execute(text, "none"),
                lambda: H3KitEffectPrompt().execute(text, "fx_b.safetensors", clip=h3_clip(emb_dir))):
        with pytest.raises(H3KitInputError, match="100,00[0-3] embedding: markers"):
            run()
    assert time.monotonic() - started < 10 and scanned == []  # refused from the text, before any folder is read


def test_the_rows_of_a_prompt_are_capped_before_any_is_read(emb_dir, monkeypatch):
    from h3kit.nodes import effect_files

    sparse_rows(emb_dir, "k.safetensors", 1000)  # a valid header; reading the rows would fail (sparse zeros: fine,
    clip = clip_output(emb_dir)  # but the budget must refuse first)

    def no_read(*_a, **_k):
        raise AssertionError("rows were read")

    monkeypatch.setattr(effect_files, "load_rows", no_read)
    with pytest.raises(H3KitInputError, match="5,000 rows together; a prompt takes at most 4,096"):
        host_encode(clip, H3_PROMPT + " x embedding:k" * 5)


def test_the_embeddings_tree_is_walked_once_per_prompt(emb_dir, monkeypatch):
    for i in range(300):
        (emb_dir / f"d{i:03d}").mkdir()
    clip = clip_output(emb_dir)
    text = H3_PROMPT + " x embedding:fx_b" * 16
    scanned = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: scanned.append(p) or real_scandir(p))
    entries, spans = clip.tokenizer.prompt_tokens(text)
    assert len(spans) == 16 and len(scanned) == 301  # one walk: the folder and its 300 subfolders, once
    scanned.clear()
    H3KitEffectPrompt().execute(text, "none")
    assert len(scanned) == 301


def test_a_marker_naming_several_files_is_refused_naming_them(emb_dir):
    write(emb_dir, "sub/fx_b.safetensors", torch.zeros(2, WIDTH))
    with pytest.raises(H3KitInputError, match="ambiguous"):
        H3KitEffectPrompt().execute(H3_PROMPT, "fx_b.safetensors", clip=h3_clip(emb_dir))
    write(emb_dir, "solo.safetensors", torch.zeros(2, WIDTH))
    _, _, clip = H3KitEffectPrompt().execute(H3_PROMPT, "solo.safetensors", clip=h3_clip(emb_dir))
    with pytest.raises(H3KitInputError, match="embedding:fx_b names 2 files"):
        host_encode(clip, H3_PROMPT + " Then embedding:fx_b here.")


@pytest.mark.parametrize("tail", [
    " Then embedding:fx_b here.",
    " Then embedding:fx_b, here.",
    " Then embedding:fx_b,, here",
    " Then embedding:fx_b<Picture 1> here.",
    " Then embedding:fx_b[x] here.",
    " Then embedding:fx_b.safetensors here.",
    " Then embedding:sub/fx_c   here  with   spaces.",
    " Then embedding:fx_b\nnext line.",
    " Two embedding:fx_b embedding:sub/fx_c done.",
])
def test_typed_markers_give_exactly_the_hosts_own_parse(emb_dir, tail):
    # The newer upstream inner SDTokenizer (the stand-in's) resolves the marker itself: H3Kit's resolution, text
    # after the name included, must give the same entries (strength 1).
    write(emb_dir, "sub/fx_c.safetensors", torch.randn(2, WIDTH))
    clip = clip_output(emb_dir)
    text = H3_PROMPT + tail
    ours, _ = clip.tokenizer.prompt_tokens(text)
    (theirs,) = h3_clip(emb_dir).tokenizer.qwen3vl_32b.tokenize_with_weights(text, disable_weights=True)
    assert len(ours) == len(theirs)
    for x, y in zip(ours, theirs, strict=True):
        assert (torch.equal(x[0], y[0].to(torch.float32)) if torch.is_tensor(x[0]) else x[0] == y[0]) and x[1] == y[1]
