"""Issue 6, tier (a): effect embeddings placed where they take effect (F15) and spliced with proof."""

from __future__ import annotations

import builtins
import io
import json
import re
import struct
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.effects import H3KitEffectPrompt, H3KitEffectSplice
from safetensors.torch import save_file

H3_PROMPT = "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. It wakes and jumps."
WIDTH = 5120


def write_effect(folder: Path, name: str, shape: tuple[int, ...], key: str = "qwen3vl_32b", seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(*shape, generator=gen)
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({key: rows.contiguous()}, str(path))
    return rows


@pytest.fixture
def emb_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "embeddings"
    folder.mkdir()
    monkeypatch.setenv("H3KIT_EMBEDDINGS_DIR", str(folder))
    return folder


@pytest.fixture
def effects(emb_dir) -> dict[str, torch.Tensor]:
    return {
        "fx_a": write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH), seed=1),
        "fx_b": write_effect(emb_dir, "fx_b.safetensors", (3, WIDTH), seed=2),
        "fx_t5": write_effect(emb_dir, "fx_t5.safetensors", (50, 4096), seed=3),
    }


def run_prompt(prompt: str, effect: str = "fx_a.safetensors", **kw) -> tuple[str, dict]:
    text, report = H3KitEffectPrompt().execute(prompt, effect, **kw)
    return text, json.loads(report)


# ------------------------------------------------------------------------------------------- listing
def test_listing_opens_no_file_and_loads_no_tensor(emb_dir, effects, monkeypatch):
    (emb_dir / "sub").mkdir()
    write_effect(emb_dir, "sub/fx_c.safetensors", (2, WIDTH))
    (emb_dir / "notes.txt").write_text("not an embedding")

    def refuse(*_a, **_k):
        raise AssertionError("listing opened a file")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(io, "open", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    options = H3KitEffectPrompt.INPUT_TYPES()["required"]["effect"][0]
    splice_options = H3KitEffectSplice.INPUT_TYPES()["required"]["effect"][0]
    assert options == ["none", "fx_a.safetensors", "fx_b.safetensors", "fx_t5.safetensors", "sub/fx_c.safetensors"]
    assert splice_options == options[1:]


def test_prompt_check_reads_only_the_safetensors_header(emb_dir, effects, monkeypatch):
    import safetensors
    import safetensors.torch

    def refuse(*_a, **_k):
        raise AssertionError("tensor data was loaded")

    class HeaderOnly:  # the library may validate the header (memory-mapped), never read a tensor
        def __init__(self, handle):
            self._handle = handle

        def __enter__(self):
            self._handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self._handle.__exit__(*exc)

        get_tensor = get_slice = refuse

    real_safe_open = safetensors.safe_open
    monkeypatch.setattr(safetensors, "safe_open", lambda *a, **k: HeaderOnly(real_safe_open(*a, **k)))
    monkeypatch.setattr(safetensors.torch, "load_file", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    _, report = run_prompt(H3_PROMPT)
    assert report["effects"][0]["rows"] == 7 and report["effects"][0]["width"] == WIDTH


def test_truncated_data_is_listed_but_refused_at_use(emb_dir):
    write_effect(emb_dir, "fx_cut.safetensors", (10, WIDTH))
    path = emb_dir / "fx_cut.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])  # header intact, data section short
    assert "fx_cut.safetensors" in H3KitEffectPrompt.INPUT_TYPES()["required"]["effect"][0]
    with pytest.raises(H3KitInputError, match="truncated"):
        run_prompt(H3_PROMPT, "fx_cut.safetensors")


def test_listing_outside_comfyui_without_folder_is_empty(monkeypatch):
    monkeypatch.delenv("H3KIT_EMBEDDINGS_DIR", raising=False)
    assert H3KitEffectPrompt.INPUT_TYPES()["required"]["effect"][0] == ["none"]
    with pytest.raises(H3KitInputError, match="H3KIT_EMBEDDINGS_DIR"):
        run_prompt(H3_PROMPT)


# ------------------------------------------------------------------------------------------- positions
@pytest.mark.parametrize(("position", "expected"), [
    ("after_first_shot_tag",
     "integrated_multimodal_description: [Shot 1] embedding:fx_a A cat sleeps on a wall. It wakes and jumps."),
    ("after_first_sentence",
     "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. embedding:fx_a It wakes and jumps."),
    ("end",
     "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. It wakes and jumps. embedding:fx_a"),
])
def test_each_position_mode(effects, position, expected):
    text, report = run_prompt(H3_PROMPT, position=position)
    assert text == expected
    assert report["position_used"] == position and report["fallbacks"] == []
    assert report["effects"][0]["marker"] == "embedding:fx_a" and report["rows_total"] == 7


def test_three_effects_go_in_order_at_one_place(effects, emb_dir):
    write_effect(emb_dir, "fx_c.safetensors", (2, WIDTH))
    text, report = run_prompt("[Shot 1] Rain.\n[Shot 2] Sun.", "fx_b.safetensors", effect_2="fx_a.safetensors",
                              effect_3="fx_c.safetensors")
    assert text == "[Shot 1] embedding:fx_b embedding:fx_a embedding:fx_c Rain.\n[Shot 2] Sun."
    assert report["rows_total"] == 3 + 7 + 2


def test_missing_shot_tag_falls_back_visibly(effects):
    text, report = run_prompt("A cat sleeps. It wakes.")
    assert text == "A cat sleeps. embedding:fx_a It wakes."
    assert report["position_used"] == "after_first_sentence"
    assert any("[Shot k]" in f for f in report["fallbacks"])


def test_no_effect_leaves_the_prompt_alone(effects):
    text, report = run_prompt(H3_PROMPT, "none")
    assert text == H3_PROMPT and report["rows_total"] == 0


def test_shot_tag_glued_to_text_still_gets_spaces(effects):
    text, _ = run_prompt("[Shot 1]A cat.")
    assert text == "[Shot 1] embedding:fx_a A cat."


# ------------------------------------------------------------------------------------------- F15
def _first_word(text: str) -> str:
    return text.split()[0]


@pytest.mark.parametrize("prompt", [
    ". A cat sleeps. It wakes.",           # empty first sentence
    "   A cat sleeps. It wakes.",          # leading whitespace
    "\n\n. . A cat.",                      # only punctuation before the first real sentence
    "A cat sleeps",                        # no sentence end at all
])
@pytest.mark.parametrize("position", ["after_first_shot_tag", "after_first_sentence", "end"])
def test_f15_marker_is_never_the_first_token(effects, prompt, position):
    text, _ = run_prompt(prompt, position=position)
    assert not _first_word(text).startswith("embedding:")
    start = text.index("embedding:fx_a")
    assert re.search(r"\w", text[:start]), "no word before the marker"
    assert text[start - 1] in " \n", "ComfyUI parses a marker only after a space or newline"


def test_f15_empty_first_sentence_is_skipped(effects):
    text, _ = run_prompt(". A cat sleeps. It wakes.", position="after_first_sentence")
    assert text == ". A cat sleeps. embedding:fx_a It wakes."


@pytest.mark.parametrize("prompt", ["", "   ", "...", "\n"])
def test_f15_prompt_without_a_word_is_refused(effects, prompt):
    with pytest.raises(H3KitInputError, match="F15"):
        run_prompt(prompt, position="end")


@pytest.mark.parametrize("lead", ["", "  ", "\n"])
def test_f15_leading_marker_is_moved_and_reported(effects, lead):
    text, report = run_prompt(lead + "embedding:fx_b " + H3_PROMPT, "none")
    assert text == "integrated_multimodal_description: [Shot 1] embedding:fx_b A cat sleeps on a wall. It wakes and jumps."
    assert report["moved_markers"] == ["embedding:fx_b"]
    assert any("F15" in w for w in report["warnings"])


def test_f15_strict_refuses_a_leading_marker_and_shows_the_fixed_prompt(effects):
    with pytest.raises(H3KitInputError) as err:
        run_prompt(" embedding:fx_b " + H3_PROMPT, "fx_a.safetensors", strict=True)
    fixed = "integrated_multimodal_description: [Shot 1] embedding:fx_b embedding:fx_a A cat sleeps on a wall. It wakes and jumps."
    assert "F15" in str(err.value) and repr(fixed) in str(err.value)


def test_f15_marker_glued_to_text_is_reported_or_refused(effects):
    glued = H3_PROMPT + " A dog,embedding:fx_b runs."
    _, report = run_prompt(glued)
    assert any("plain text" in w for w in report["warnings"])
    with pytest.raises(H3KitInputError, match="plain text"):
        run_prompt(glued, strict=True)


def test_marker_for_a_missing_file_is_reported(effects):
    _, report = run_prompt(H3_PROMPT + " embedding:nope here.")
    assert any("embedding:nope" in w and "ignores" in w for w in report["warnings"])


# ------------------------------------------------------------------------------------------- file errors
def test_width_mismatch_names_the_encoder(effects):
    with pytest.raises(H3KitInputError) as err:
        run_prompt(H3_PROMPT, "fx_t5.safetensors")
    message = str(err.value)
    assert "4096" in message and "5120" in message and "T5-XXL" in message and "'effect'" in message


def test_gemma_width_is_recognised(emb_dir):
    write_effect(emb_dir, "fx_ltx.safetensors", (5, 3840))
    with pytest.raises(H3KitInputError, match="Gemma-3-12B"):
        run_prompt(H3_PROMPT, "none", effect_2="fx_ltx.safetensors")


@pytest.mark.parametrize("shape", [(WIDTH,), (2, 3, WIDTH)])
def test_tensor_that_is_not_2d_is_refused(emb_dir, shape):
    write_effect(emb_dir, "fx_bad.safetensors", shape)
    with pytest.raises(H3KitInputError, match="2-D"):
        run_prompt(H3_PROMPT, "fx_bad.safetensors")


@pytest.mark.parametrize("name", ["fx_missing.safetensors", "../outside.safetensors", "/etc/passwd.safetensors"])
def test_unknown_or_escaping_file_is_refused(effects, emb_dir, name):
    write_effect(emb_dir.parent, "outside.safetensors", (2, WIDTH))
    with pytest.raises(H3KitInputError) as err:
        run_prompt(H3_PROMPT, name)
    assert "effect" in str(err.value) and "Fix:" in str(err.value)


def test_several_tensors_without_the_h3_key_are_refused(emb_dir):
    save_file({"a": torch.zeros(2, WIDTH), "b": torch.zeros(3, WIDTH)}, str(emb_dir / "fx_two.safetensors"))
    with pytest.raises(H3KitInputError, match="qwen3vl_32b"):
        run_prompt(H3_PROMPT, "fx_two.safetensors")


def test_same_effect_twice_is_refused(effects):
    with pytest.raises(H3KitInputError, match="effect_2"):
        run_prompt(H3_PROMPT, "fx_a.safetensors", effect_2="fx_a.safetensors")


def test_corrupt_header_is_refused(emb_dir):
    (emb_dir / "fx_junk.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(H3KitInputError, match="safetensors"):
        run_prompt(H3_PROMPT, "fx_junk.safetensors")


# ------------------------------------------------------------------------------------------- legacy files and names
class NotAWeight:
    pass


def test_legacy_pt_is_read_with_weights_only(emb_dir):
    torch.save({"string_to_param": {"*": torch.ones(4, WIDTH)}}, emb_dir / "fx_old.pt")
    _, report = run_prompt(H3_PROMPT, "fx_old.pt")
    assert report["effects"][0]["rows"] == 4
    torch.save({"qwen3vl_32b": torch.ones(4, WIDTH), "junk": NotAWeight()}, emb_dir / "fx_pickle.pt")
    with pytest.raises(H3KitInputError, match="safely"):
        run_prompt(H3_PROMPT, "fx_pickle.pt")


def test_marker_resolves_to_exactly_the_chosen_file(emb_dir):
    write_effect(emb_dir, "fx.safetensors", (2, WIDTH))
    torch.save({"qwen3vl_32b": torch.ones(3, WIDTH)}, emb_dir / "fx.pt")
    write_effect(emb_dir, "sub/deep.safetensors", (2, WIDTH))
    # ComfyUI tries name.safetensors before name.pt, so the .pt one needs its extension in the marker
    assert run_prompt("A cat.", "fx.pt", position="end")[0] == "A cat. embedding:fx.pt"
    assert run_prompt("A cat.", "fx.safetensors", position="end")[0] == "A cat. embedding:fx"
    assert run_prompt("A cat.", "sub/deep.safetensors", position="end")[0] == "A cat. embedding:sub/deep"


def test_same_name_in_a_subfolder_is_reported_as_ambiguous(emb_dir):
    write_effect(emb_dir, "fx.safetensors", (2, WIDTH))
    write_effect(emb_dir, "other/fx.safetensors", (2, WIDTH))
    with pytest.raises(H3KitInputError, match="ambiguous"):
        run_prompt("A cat.", "fx.safetensors")


def test_file_name_with_space_cannot_become_a_marker(emb_dir):
    write_effect(emb_dir, "my fx.safetensors", (2, WIDTH))
    with pytest.raises(H3KitInputError, match="rename"):
        run_prompt("A cat.", "my fx.safetensors")


# ------------------------------------------------------------------------------------------- splice stand-in
VOCAB = 97
PAD = 0


class WordTokenizer:
    """Inner-tokenizer stand-in with ComfyUI's token-list contract (NEW sd1_clip): words -> int ids, and
    `embedding:<name>` after whitespace (or at the very start) -> one (row tensor, weight) entry per row."""

    def __init__(self, folder: Path, width: int, declare: bool = True):
        self.folder = folder
        if declare:
            self.embedding_size = width

    def _rows(self, name: str) -> torch.Tensor | None:
        from safetensors.torch import load_file

        for candidate in (self.folder / name, self.folder / f"{name}.safetensors"):
            if candidate.is_file():
                return next(iter(load_file(str(candidate)).values()))
        return None

    def tokenize_with_weights(self, text: str) -> list:
        entries: list = []
        for i, piece in enumerate(re.split(r"(?<=\s)embedding:", text)):
            if i > 0 or piece.startswith("embedding:"):
                name, _, piece = piece.removeprefix("embedding:").partition(" ")
                rows = self._rows(name)
                if rows is not None:
                    entries.extend((row, 1.0) for row in rows)
            entries.extend((zlib.crc32(word.encode()) % (VOCAB - 1) + 1, 1.0) for word in piece.split())
        return [entries]


class StandInClip:
    """CLIP stand-in: tokenize() -> {key: [[(token, weight), ...]]}; encode_from_tokens_scheduled() embeds ints,
    splices tensor entries like SDClipModel.process_tokens (wrong width: dropped, pad appended) and mixes
    causally (running mean), returning [[cond [1, L, W], {"pooled_output": None}]]."""

    key = "qwen3vl_32b"

    def __init__(self, folder: Path, width: int = WIDTH, declare: bool = True, drop_rows: bool = False):
        self.width, self.drop_rows = width, drop_rows
        self.tokenizer = SimpleNamespace(clip=self.key, **{self.key: WordTokenizer(folder, width, declare)})
        self.table = torch.randn(VOCAB, width, generator=torch.Generator().manual_seed(7))
        self.encoded: list = []

    def tokenize(self, text: str, return_word_ids: bool = False, **_) -> dict:
        return {self.key: getattr(self.tokenizer, self.key).tokenize_with_weights(text)}

    def encode_from_tokens_scheduled(self, tokens: dict) -> list:
        (batch,) = tokens[self.key]
        self.encoded.append(batch)
        vectors, padding = [], 0
        for token, _ in batch:
            if not torch.is_tensor(token):
                vectors.append(self.table[token])
            elif token.shape[-1] == self.width:
                vectors.append(token.float())
            elif not self.drop_rows:
                padding += 1
        vectors += [self.table[PAD]] * padding
        seq = torch.stack(vectors)
        mixed = seq.cumsum(0) / torch.arange(1, len(seq) + 1).unsqueeze(1)
        return [[mixed.unsqueeze(0), {"pooled_output": None}]]


def splice(clip, prompt: str = H3_PROMPT, effect: str = "fx_a.safetensors", **kw) -> tuple[torch.Tensor, dict]:
    cond, report = H3KitEffectSplice().execute(clip, prompt, effect, **kw)
    return cond[0][0], json.loads(report)


@pytest.mark.parametrize(("position", "words_before"), [
    ("after_first_shot_tag", 3),     # "integrated_multimodal_description:", "[Shot", "1]"
    ("after_first_sentence", 9),     # the three above + "A", "cat", "sleeps", "on", "a", "wall."
    ("end", 13),
])
def test_splice_inserts_exactly_n_rows_at_the_position(effects, emb_dir, position, words_before):
    clip = StandInClip(emb_dir)
    words = len(H3_PROMPT.split())
    cond, report = splice(clip, position=position)
    (batch,) = clip.encoded
    assert len(batch) == words + 7
    inserted = [t for t, _ in batch[words_before:words_before + 7]]
    assert all(torch.is_tensor(t) and t.shape == (WIDTH,) for t in inserted)
    assert torch.equal(torch.stack(inserted), effects["fx_a"])
    assert not any(torch.is_tensor(t) for t, _ in batch[:words_before] + batch[words_before + 7:])
    assert report["rows_spliced"] == 7 and report["insert_at_token"] == words_before
    assert report["tokens_before"] == words and report["tokens_after"] == words + 7
    assert report["conditioning_shape"] == [1, words + 7, WIDTH]


def test_splice_matches_the_native_marker_path_and_leaves_the_prefix_alone(effects, emb_dir):
    clip = StandInClip(emb_dir)
    marked, _ = run_prompt(H3_PROMPT)
    native = clip.encode_from_tokens_scheduled(clip.tokenize(marked))[0][0]
    plain = clip.encode_from_tokens_scheduled(clip.tokenize(H3_PROMPT))[0][0]
    spliced, _ = splice(clip)
    assert torch.equal(spliced, native)
    assert torch.equal(spliced[:, :3], plain[:, :3])      # causal: tokens before the effect are unchanged
    assert not torch.allclose(spliced[:, -1], plain[:, -1])


def test_splice_never_uses_position_zero(effects, emb_dir):
    clip = StandInClip(emb_dir)
    _, report = splice(clip, prompt="Cat", position="after_first_shot_tag")
    assert report["insert_at_token"] == 1 and report["position_used"] == "end"
    assert not torch.is_tensor(clip.encoded[0][0][0])
    with pytest.raises(H3KitInputError, match="F15"):
        splice(clip, prompt="  ")


def test_splice_strength_scales_the_rows(effects, emb_dir):
    clip = StandInClip(emb_dir)
    splice(clip, effect="fx_b.safetensors", position="end", strength=0.5)
    rows = torch.stack([t for t, _ in clip.encoded[0] if torch.is_tensor(t)])
    torch.testing.assert_close(rows, effects["fx_b"] * 0.5)


def test_splice_refuses_an_encoder_declaring_another_width(emb_dir):
    write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH))
    with pytest.raises(H3KitInputError, match="3840.*Gemma-3-12B"):
        splice(StandInClip(emb_dir, width=3840))


def test_splice_catches_rows_dropped_by_an_undeclared_encoder(emb_dir):
    write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH))
    with pytest.raises(H3KitInputError, match="were not applied"):
        splice(StandInClip(emb_dir, width=3840, declare=False))


def test_splice_counts_the_encoded_positions(emb_dir):
    write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH))
    clip = StandInClip(emb_dir, width=3840, declare=False, drop_rows=True)
    clip.width = WIDTH  # claims the right width but silently loses tensor entries
    clip.encode_from_tokens_scheduled = lambda tokens: [[torch.zeros(1, len(H3_PROMPT.split()), WIDTH), {}]]
    with pytest.raises(H3KitInputError, match="cannot be verified"):
        splice(clip)


@pytest.mark.parametrize("tokenized", [torch.arange(5), {"qwen3vl_32b": torch.arange(5)},
                                       {"qwen3vl_32b": [[1, 2, 3]]}, {"qwen3vl_32b": [[("a", 1.0)]]}])
def test_splice_refuses_a_tokenizer_without_the_token_list_form(effects, emb_dir, tokenized):
    clip = StandInClip(emb_dir)
    clip.tokenize = lambda text, **_: tokenized
    with pytest.raises(H3KitInputError, match="token-list form"):
        splice(clip)


def test_f15_splice_refuses_a_prompt_starting_with_a_marker(effects, emb_dir):
    with pytest.raises(H3KitInputError, match="F15"):
        splice(StandInClip(emb_dir), prompt=" embedding:fx_b " + H3_PROMPT)


def test_splice_refuses_a_wrong_width_file(effects, emb_dir):
    with pytest.raises(H3KitInputError, match="4096"):
        splice(StandInClip(emb_dir), effect="fx_t5.safetensors")


# ------------------------------------------------------------------------------------------- splice: independent proof
KEY = "qwen3vl_32b"
MARKED = {  # the prompt as a user would write it with the marker (H3_PROMPT's words: 3 before the shot text)
    "after_first_shot_tag": ("integrated_multimodal_description: [Shot 1] embedding:fx_a A cat sleeps on a wall. "
                             "It wakes and jumps.", 3),
    "after_first_sentence": ("integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. embedding:fx_a "
                             "It wakes and jumps.", 9),
    "end": ("integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. It wakes and jumps. embedding:fx_a", 13),
}


def same_token(x, y) -> bool:
    if torch.is_tensor(x) or torch.is_tensor(y):
        return torch.is_tensor(x) and torch.is_tensor(y) and torch.equal(x, y)
    return x == y


def same_entries(a: list, b: list) -> bool:
    return len(a) == len(b) and all(same_token(x[0], y[0]) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("position", list(MARKED))
def test_splice_equals_an_independent_encoding_with_and_without_the_effect(effects, emb_dir, position):
    # Encode the prompt once without and once with the effect through the tokenizer stand-in (which loads the
    # file itself, like ComfyUI's embedding: markers) and compare token lists with what the node encoded.
    marked, before = MARKED[position]
    clip = StandInClip(emb_dir)
    without = clip.tokenize(H3_PROMPT)[KEY][0]
    with_effect = clip.tokenize(marked)[KEY][0]
    splice(clip, position=position)
    (encoded,) = clip.encoded
    assert len(without) == 13 and len(with_effect) == 13 + 7
    assert same_entries(encoded, with_effect)
    assert same_entries(encoded[:before] + encoded[before + 7:], without)
    assert all(torch.is_tensor(t) for t, _ in encoded[before:before + 7])


def test_splice_rows_are_cross_checked_with_the_encoders_tokenizer(effects, emb_dir):
    _, report = splice(StandInClip(emb_dir), strength=0.5)
    assert report["host_rows"] == "7 rows equal to the encoder tokenizer's embedding:fx_a"
    assert report["fallbacks"] == []


def test_splice_refuses_rows_the_encoders_tokenizer_loads_differently(effects, emb_dir, tmp_path):
    other = tmp_path / "host_embeddings"
    write_effect(other, "fx_a.safetensors", (7, WIDTH), seed=99)  # same name, other rows, in the host's folder
    with pytest.raises(H3KitInputError, match="differ") as err:
        splice(StandInClip(other))
    assert err.value.input_name == "effect"


def test_splice_without_the_host_cross_check_says_so(effects, emb_dir, tmp_path):
    _, report = splice(StandInClip(tmp_path / "no_such_folder"))
    assert report["host_rows"] == "not checked"
    assert any("does not resolve embedding:fx_a" in text for text in report["fallbacks"])


def test_splice_proof_does_not_trust_the_list_it_built(effects, emb_dir, tmp_path, monkeypatch):
    # The rows read at execution lose one (file rewritten after its header was read, or a splice bug): the proof
    # compares the encoder's positions with the header's 7 rows, so it notices; re-counting the list would not.
    from h3kit.nodes import effects as fx

    real = fx.load_effect_rows
    monkeypatch.setattr(fx, "load_effect_rows", lambda *a: real(*a)[:6])
    with pytest.raises(H3KitInputError, match=r"13 prompt tokens \+ 7 effect rows = 20 positions"):
        splice(StandInClip(tmp_path / "no_such_folder"))
