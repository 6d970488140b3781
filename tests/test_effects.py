"""Issue 6, tier (a): effect embeddings placed where they take effect (F15) and spliced with proof."""

from __future__ import annotations

import builtins
import copy
import io
import json
import re
import struct
from pathlib import Path

import pytest
import torch
from h3_standins import KEY, StandInMiniMaxH3Tokenizer, h3_clip, hash_ids
from h3kit.checks.rules_lints import lint_effect_markers_reach_the_encoder
from h3kit.nodes import effect_tokens as et
from h3kit.nodes import effects as fx
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.effect_tokens import EffectTokenizer
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
    text, report, _ = H3KitEffectPrompt().execute(prompt, effect, **kw)
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
    assert report["position_used"] == position and not [f for f in report["fallbacks"] if "placed" in f]
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


# ------------------------------------------------------------------------------------------- issue 30 row 5
OFFICIAL = json.loads((Path(__file__).parent / "data" / "official_h3_prompts.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("item", OFFICIAL["prompts"], ids=lambda item: item["sources"][0]["template"])
def test_f15_the_effect_goes_into_the_first_shots_description_of_every_official_prompt(effects, item):
    # Before: a [Shot k] anywhere (multiframe_reference: a reference sentence in subject_definitions), or the first
    # sentence of the style preamble where the template writes SHOT 1: / CUT 1: / [0s-1s].
    text, report = run_prompt(item["prompt"])
    head, _, tail = text.partition(" embedding:fx_a ")
    assert tail.startswith(item["first_shot"]["description_starts_with"])
    assert head.endswith(item["first_shot"]["heading"])
    assert report["position_used"] == "after_first_shot_tag" and not [f for f in report["fallbacks"] if "placed" in f]
    assert report["shot_heading"] == item["first_shot"]["heading"]


def ref2va_prompt() -> str:
    from h3kit.nodes.ref2va import H3KitRef2VAPrompt

    prompt, _, _ = H3KitRef2VAPrompt().compose(
        subjects="<Subject 1> is the young woman in <Picture 1>, with a short black bob and a yellow raincoat.",
        summary="[reference generation] <Subject 1> waits under a stall awning in the rain.",
        retention="<Subject 1> (appears in [Shot 1], [Shot 2]): fully_preserved - face, bob and raincoat kept.",
        shots="Realistic street scene at dusk.\n[Shot 1] 0-3s <Subject 1>, the woman in the yellow raincoat, runs in."
              "\n[Shot 2] 3-6s <Subject 1>, the woman with the black bob, laughs.",
        soundscape="Rain on canvas.", music="N/A", length=243, ref_images=1, ref_videos=0, ref_video_audios=0,
        ref_audios=0)
    return prompt


def test_f15_in_the_ref2va_prompt_nodes_output_the_effect_goes_into_shot_1_never_retention_analysis(effects):
    prompt = ref2va_prompt()
    text, report = run_prompt(prompt)
    assert text.index("detailed_description:") < text.index(
        "[Shot 1] 0-3s embedding:fx_a <Subject 1>, the woman in the yellow raincoat")
    assert text.count("embedding:") == 1 and report["section"] == "detailed_description"
    retention = text[text.index("retention_analysis:"):text.index("detailed_description:")]
    assert "embedding:" not in retention and retention == prompt[prompt.index("retention_analysis:"):
                                                                 prompt.index("detailed_description:")]


@pytest.mark.parametrize(("position", "before"), [
    ("after_first_shot_tag", "Realistic street scene at dusk. embedding:fx_a The woman runs in."),
    ("after_first_sentence", "Realistic street scene at dusk. embedding:fx_a The woman runs in."),
    ("end", "Realistic street scene at dusk. The woman runs in. embedding:fx_a\n\noverall_soundscape:"),
])
def test_f15_a_six_section_prompt_without_shot_headings_keeps_the_effect_in_detailed_description(effects, position,
                                                                                                  before):
    prompt = ref2va_prompt().replace(
        "Realistic street scene at dusk.\n[Shot 1] 0-3s <Subject 1>, the woman in the yellow raincoat, runs in.\n"
        "[Shot 2] 3-6s <Subject 1>, the woman with the black bob, laughs.",
        "Realistic street scene at dusk. The woman runs in.")
    text, report = run_prompt(prompt, position=position)
    assert before in text and report["section"] == "detailed_description"
    if position == "after_first_shot_tag":
        (fallback,) = [f for f in report["fallbacks"] if "placed" in f]
        assert "no shot heading" in fallback and "detailed_description" in fallback


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


# ------------------------------------------------------------------------------------------- the encoder path
# Stand-ins follow ComfyUI 0.33.0's classes (tests/h3_standins.py; checked against the real ones in
# tests/test_effects_comfyui.py). parse_markers=False is 0.33.0, whose MiniMax-H3 tokenizer reads markers as text.
SHIPPED = json.loads((Path(fx.__file__).resolve().parents[1] / "workflows" / "api" / "h3_effects_t2va.json")
                     .read_text(encoding="utf-8"))


def image_to_video(clip, prompt: str, images=()) -> torch.Tensor:
    """What MiniMaxH3ImageToVideo does with its clip and prompt (comfy_extras/nodes_minimax_h3.py)."""
    return clip.encode_from_tokens_scheduled(clip.tokenize(prompt, images=list(images)))[0][0]


def prompt_node(prompt: str = H3_PROMPT, effect: str = "fx_a.safetensors", **kw):
    text, report, clip = H3KitEffectPrompt().execute(prompt, effect, **kw)
    return text, json.loads(report), clip


def table_rows(clip, text: str) -> torch.Tensor:
    return clip.cond_stage_model.rows(hash_ids(text))


def test_f15_the_033_tokenizer_reads_a_marker_as_text(effects, emb_dir):
    clip = h3_clip(emb_dir)
    marked, _ = run_prompt(H3_PROMPT)
    (batch,) = clip.tokenize(marked)[KEY]
    assert not any(torch.is_tensor(entry[0]) for entry in batch)
    assert [entry[0] for entry in batch] == hash_ids(marked)  # " embedding:fx_a" became text ids


@pytest.mark.parametrize(("position", "before"), [
    ("after_first_shot_tag", "integrated_multimodal_description: [Shot 1] "),
    ("after_first_sentence", "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. "),
    ("end", "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall. It wakes and jumps. "),
])
@pytest.mark.parametrize("strength", [1.0, 0.5, 2.0])
def test_f15_the_clip_output_carries_the_rows_at_the_position_scaled_once(effects, emb_dir, position, before,
                                                                          strength):
    text, report, clip = prompt_node(position=position, strength=strength, clip=h3_clip(emb_dir))
    cond = image_to_video(clip, text)
    after = text.split("embedding:fx_a", 1)[1].split()
    start = len(hash_ids(before))
    assert report["effects"][0]["token_index"] == start and report["prompt_tokens"] == cond.shape[1]
    assert cond.shape == (1, start + 7 + len(hash_ids(" ".join(after))), 5120)
    assert torch.equal(cond[0, :start], table_rows(clip, before))
    assert torch.equal(cond[0, start:start + 7], effects["fx_a"] * strength)
    assert torch.equal(cond[0, start + 7:], table_rows(clip, " ".join(after)))
    assert "plain text" in report["markers_resolved_by"]


def test_three_effects_in_a_row_keep_their_own_rows_and_order(effects, emb_dir):
    write_effect(emb_dir, "fx_c.safetensors", (2, WIDTH), seed=5)
    text, report, clip = prompt_node(effect="fx_b.safetensors", effect_2="fx_a.safetensors",
                                     effect_3="fx_c.safetensors", strength=0.25, clip=h3_clip(emb_dir))
    cond = image_to_video(clip, text)
    start = len(hash_ids("integrated_multimodal_description: [Shot 1] "))
    starts = [e["token_index"] for e in report["effects"]]
    assert starts == [start, start + 3, start + 10]
    from safetensors.torch import load_file

    expected = torch.cat([effects["fx_b"], effects["fx_a"], load_file(str(emb_dir / "fx_c.safetensors"))[KEY]])
    assert torch.equal(cond[0, start:start + 12], expected * 0.25)


def test_reference_images_come_first_and_shift_the_rows(effects, emb_dir):
    images = [torch.rand(1, 8, 8, 3), torch.rand(1, 8, 8, 3)]
    text, report, clip = prompt_node(clip=h3_clip(emb_dir))
    (batch,) = clip.tokenize(text, images=images)[KEY]
    host = StandInMiniMaxH3Tokenizer(None)
    (prefix,) = host.tokenize_with_weights("", images=images)[KEY]
    assert [type(e[0]) for e in batch[:len(prefix)]] == [type(e[0]) for e in prefix]
    start = len(prefix) + report["effects"][0]["token_index"]
    assert torch.equal(torch.stack([e[0] for e in batch[start:start + 7]]), effects["fx_a"])
    cond = image_to_video(clip, text, images)
    assert cond.shape[1] == len(batch)  # one vision row each in the stand-in encoder


def test_with_a_marker_parsing_host_the_clip_output_tokenizes_exactly_like_it(effects, emb_dir):
    # The newer upstream tokenizer parses markers itself: the clip output must give the same entries (strength 1).
    native = h3_clip(emb_dir, parse_markers=True)
    text, report, clip = prompt_node(clip=native)
    (ours,) = clip.tokenize(text)[KEY]
    (theirs,) = native.tokenize(text)[KEY]
    assert len(ours) == len(theirs)
    for x, y in zip(ours, theirs, strict=True):
        assert (torch.equal(x[0], y[0]) if torch.is_tensor(x[0]) else x[0] == y[0]) and x[1] == y[1] == 1.0
    assert report["markers_resolved_by"].startswith("the host's MiniMax-H3 tokenizer (it parses markers)")


def test_the_clip_output_is_a_clone_and_the_input_clip_is_untouched(effects, emb_dir):
    raw = h3_clip(emb_dir)
    _, _, clip = prompt_node(clip=raw)
    assert clip is not raw and raw.tokenizer.__class__ is StandInMiniMaxH3Tokenizer
    assert isinstance(clip.tokenizer, EffectTokenizer) and clip.cond_stage_model is raw.cond_stage_model
    assert clip.tokenizer.untokenize([(5, 1.0)]) == raw.tokenizer.untokenize([(5, 1.0)])


def test_chained_effect_prompts_apply_strength_once(effects, emb_dir):
    _, _, first = prompt_node(strength=3.0, clip=h3_clip(emb_dir))
    text, report, second = prompt_node(strength=0.5, clip=first)
    start = report["effects"][0]["token_index"]
    assert torch.equal(image_to_video(second, text)[0, start:start + 7], effects["fx_a"] * 0.5)
    assert any("strength replaces" in w for w in report["warnings"])


def test_a_typed_marker_the_encoder_cannot_load_stops_the_node(effects, emb_dir):
    with pytest.raises(H3KitInputError, match="cannot load embedding:nope"):
        prompt_node(H3_PROMPT + " Then embedding:nope here.", clip=h3_clip(emb_dir))


def test_a_typed_marker_it_can_load_gets_the_strength_too(effects, emb_dir):
    text, report, clip = prompt_node(H3_PROMPT + " Then embedding:fx_b here.", "none", strength=2.0,
                                     clip=h3_clip(emb_dir))
    cond = image_to_video(clip, text)
    (span,) = clip.tokenizer.prompt_tokens(text)[1]
    assert span[0] == "embedding:fx_b" and span[2] == 3
    assert torch.equal(cond[0, span[1]:span[1] + 3], effects["fx_b"] * 2.0)


def test_rows_the_encoders_loader_reads_differently_are_refused(effects, emb_dir, tmp_path):
    other = tmp_path / "host_embeddings"
    write_effect(other, "fx_a.safetensors", (7, WIDTH), seed=99)  # same name, other rows, in the encoder's folder
    with pytest.raises(H3KitInputError, match="differ from the") as err:
        prompt_node(clip=h3_clip(other))
    assert err.value.input_name == "effect"


def test_an_encoder_without_the_file_is_refused_naming_its_folders(effects, emb_dir, tmp_path):
    with pytest.raises(H3KitInputError, match="finds no embedding:fx_a in its folders") as err:
        prompt_node(clip=h3_clip(tmp_path / "elsewhere"))
    assert str(tmp_path / "elsewhere") in str(err.value)


def test_another_encoder_width_is_refused(effects, emb_dir):
    clip = h3_clip(emb_dir)
    clip.tokenizer.qwen3vl_32b.embedding_size = 3840
    with pytest.raises(H3KitInputError, match="3840-wide"):
        prompt_node(clip=clip)


@pytest.mark.parametrize("bad", [float("nan"), -0.5, float("inf")])
def test_strength_must_be_finite_and_not_negative(effects, emb_dir, bad):
    with pytest.raises(H3KitInputError, match="strength"):
        prompt_node(strength=bad, clip=h3_clip(emb_dir))


def test_strength_without_clip_is_refused(effects):
    with pytest.raises(H3KitInputError, match="needs|not connected"):
        prompt_node(strength=0.5)


@pytest.mark.parametrize(("parses", "outcome"), [(False, "error"), (True, "checked")])
def test_f15_without_clip_the_hosts_own_tokenizer_is_asked(effects, emb_dir, monkeypatch, parses, outcome):
    monkeypatch.setattr(et, "served_h3_tokenizer", lambda folders: StandInMiniMaxH3Tokenizer(
        list(folders), parse_markers=parses))
    if outcome == "error":
        with pytest.raises(H3KitInputError, match="reads embedding: markers as plain text") as err:
            prompt_node()
        assert "'clip' output" in str(err.value) and err.value.input_name == "clip"
    else:
        assert "checked: it parses markers" in prompt_node()[1]["markers_resolved_by"]


def test_without_clip_or_host_the_check_is_a_visible_fallback(effects):
    _, report, clip = prompt_node()
    assert clip is None and report["markers_resolved_by"] == "not checked"
    assert any("cannot check" in f for f in report["fallbacks"])


def test_no_effect_and_no_marker_needs_no_encoder(effects, emb_dir):
    text, report, clip = prompt_node(effect="none", clip=h3_clip(emb_dir))
    assert text == H3_PROMPT and report["markers_resolved_by"] == "nothing to resolve"
    assert torch.equal(image_to_video(clip, text), table_rows(clip, H3_PROMPT).unsqueeze(0))


# ------------------------------------------------------------------------------------------- wiring (graph)
def shipped() -> dict:
    return copy.deepcopy(SHIPPED)


def test_f15_the_shipped_graph_feeds_prompt_and_clip_from_the_effect_prompt():
    graph = shipped()
    effect_id = next(k for k, n in graph.items() if n["class_type"] == "H3KitEffectPrompt")
    encoder = next(n for n in graph.values() if n["class_type"] == "MiniMaxH3ImageToVideo")["inputs"]
    assert encoder["prompt"] == [effect_id, 0] and encoder["clip"] == [effect_id, 2]
    loader = graph[effect_id]["inputs"]["clip"][0]
    assert graph[loader]["class_type"] == "CLIPLoader" and graph[loader]["inputs"]["type"] == "minimax"
    assert lint_effect_markers_reach_the_encoder(graph, {}) == []


def bypassed() -> tuple[dict, str, str]:
    """The shipped effects graph with MiniMaxH3ImageToVideo taking the loader's clip, not the effect prompt's."""
    graph = shipped()
    effect_id = next(k for k, n in graph.items() if n["class_type"] == "H3KitEffectPrompt")
    encoder_id = next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ImageToVideo")
    graph[encoder_id]["inputs"]["clip"] = graph[effect_id]["inputs"]["clip"]
    return graph, effect_id, encoder_id


def test_f15_an_encoder_taking_the_raw_clip_is_a_warning_naming_both_hosts_offline():
    # Issue 30 row 8: offline nothing says whether the host parses markers (#15697), so never an error.
    graph, _, encoder_id = bypassed()
    (problem,) = lint_effect_markers_reach_the_encoder(graph, {})
    assert problem.severity == "warning" and problem.node_id == encoder_id and "'clip' output" in problem.fix
    assert "#15697" in problem.message and "0.33.0" in problem.message and "plain text" in problem.message
    assert "every host" in problem.fix


def test_f15_an_encoder_taking_the_raw_clip_stops_the_node_where_the_host_reads_markers_as_text(effects, emb_dir):
    graph, effect_id, _ = bypassed()
    with pytest.raises(H3KitInputError, match="not from H3KitEffectPrompt's clip output") as err:
        prompt_node(clip=h3_clip(emb_dir), graph=graph, unique_id=effect_id)
    assert "reads embedding: markers as plain text" in str(err.value)
    assert prompt_node(clip=h3_clip(emb_dir), graph=shipped(), unique_id=effect_id)[2] is not None


def test_f15_where_the_host_parses_markers_the_raw_clip_works_and_the_report_says_so(effects, emb_dir):
    graph, effect_id, encoder_id = bypassed()
    _, report, clip = prompt_node(clip=h3_clip(emb_dir, parse_markers=True), graph=graph, unique_id=effect_id)
    assert clip is not None and report["warnings"] == []
    assert report["encoders"] == {encoder_id: "MiniMaxH3ImageToVideo: clip of node 3 (this host's MiniMax-H3 "
                                              "tokenizer parses the markers itself)"}
    _, report, _ = prompt_node(clip=h3_clip(emb_dir), graph=shipped(), unique_id=effect_id)
    assert report["encoders"] == {encoder_id: "MiniMaxH3ImageToVideo: this node's clip output"}


def test_f15_where_the_host_parses_markers_a_strength_the_raw_clip_would_lose_stops_the_node(effects, emb_dir):
    graph, effect_id, _ = bypassed()
    graph[effect_id]["inputs"]["strength"] = 0.5
    with pytest.raises(H3KitInputError, match="strength 0.5 would be lost"):
        prompt_node(clip=h3_clip(emb_dir, parse_markers=True), strength=0.5, graph=graph, unique_id=effect_id)


def test_f15_without_clip_on_a_host_that_parses_markers_the_node_works_and_says_which_path(effects, emb_dir,
                                                                                          monkeypatch):
    graph, effect_id, encoder_id = bypassed()
    del graph[effect_id]["inputs"]["clip"]
    monkeypatch.setattr(et, "served_h3_tokenizer", lambda folders: StandInMiniMaxH3Tokenizer(
        list(folders), parse_markers=True))
    text, report, clip = prompt_node(graph=graph, unique_id=effect_id)
    assert clip is None and "embedding:fx_a" in text and report["warnings"] == []
    assert report["markers_resolved_by"] == "the host's MiniMax-H3 tokenizer (checked: it parses markers)"
    assert "parses the markers itself" in report["encoders"][encoder_id]


def test_f15_no_clip_into_the_effect_prompt_is_a_warning_offline():
    graph = shipped()
    effect_id = next(k for k, n in graph.items() if n["class_type"] == "H3KitEffectPrompt")
    encoder_id = next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ImageToVideo")
    graph[encoder_id]["inputs"]["clip"] = graph[effect_id]["inputs"].pop("clip")
    (problem,) = lint_effect_markers_reach_the_encoder(graph, {})
    assert problem.severity == "warning" and problem.node_id == effect_id and "plain text" in problem.message
    graph[effect_id]["inputs"]["effect"] = "none"
    assert lint_effect_markers_reach_the_encoder(graph, {}) == []


def test_the_clip_output_wired_without_a_clip_input_is_an_error_offline_and_at_run_time(effects):
    graph = shipped()
    effect_id = next(k for k, n in graph.items() if n["class_type"] == "H3KitEffectPrompt")
    del graph[effect_id]["inputs"]["clip"]
    problems = [p for p in lint_effect_markers_reach_the_encoder(graph, {}) if p.severity == "error"]
    (problem,) = problems
    assert "has no text encoder on its 'clip' input" in problem.message and problem.input == "clip"
    with pytest.raises(H3KitInputError, match="no text encoder on its 'clip' input"):
        prompt_node(graph=graph, unique_id=effect_id)


def test_a_host_tokenizer_that_cannot_be_asked_is_a_visible_fallback(effects, monkeypatch):
    def broken(folders):
        raise OSError("qwen25_tokenizer/vocab.json missing")

    monkeypatch.setattr(et, "served_h3_tokenizer", broken)
    _, report, _ = prompt_node()
    assert report["markers_resolved_by"] == "not checked"
    assert any("OSError" in f and "vocab.json" in f for f in report["fallbacks"])


@pytest.mark.parametrize("through_primitive", [False, True])
def test_f15_a_marker_typed_into_the_h3_node_is_a_warning_naming_both_hosts(through_primitive):
    # The official templates document typing embedding:<name> into the prompt (ComfyUI#15697): it works on hosts
    # with that change and is text on 0.33.0, so offline it is a warning that says both, never a demand.
    graph = shipped()
    encoder_id = next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ImageToVideo")
    text = "A cat. embedding:fx_a It jumps."
    if through_primitive:
        graph["90"] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": text}}
        graph[encoder_id]["inputs"]["prompt"] = ["90", 0]
    else:
        graph[encoder_id]["inputs"]["prompt"] = text
    graph[encoder_id]["inputs"]["clip"] = ["3", 0]
    problems = lint_effect_markers_reach_the_encoder(graph, {})
    assert [(p.node_id, p.input, p.severity) for p in problems] == [(encoder_id, "prompt", "warning")]
    assert "#15697" in problems[0].message and "0.33.0" in problems[0].message
    assert problems[0].fix.startswith("on a host with #15697 nothing is needed")


# ------------------------------------------------------------------------------------------- splice
def splice(clip, prompt: str = H3_PROMPT, effect: str = "fx_a.safetensors", **kw) -> tuple[torch.Tensor, dict]:
    cond, report = H3KitEffectSplice().execute(clip, prompt, effect, **kw)
    return cond[0][0], json.loads(report)


CUTS = {"after_first_shot_tag": "integrated_multimodal_description: [Shot 1]",
        "after_first_sentence": "integrated_multimodal_description: [Shot 1] A cat sleeps on a wall.",
        "end": H3_PROMPT}


@pytest.mark.parametrize("position", list(CUTS))
def test_splice_inserts_exactly_n_rows_at_the_position(effects, emb_dir, position):
    clip = h3_clip(emb_dir)
    cond, report = splice(clip, position=position)
    before, total = len(hash_ids(CUTS[position])), len(hash_ids(H3_PROMPT))
    (batch,) = clip.cond_stage_model.encoded
    assert len(batch) == total + 7
    assert torch.equal(torch.stack([t for t, _ in batch[before:before + 7]]), effects["fx_a"])
    assert not any(torch.is_tensor(t) for t, _ in batch[:before] + batch[before + 7:])
    assert torch.equal(cond[0, before:before + 7], effects["fx_a"])  # passthrough encoder: rows = conditioning
    assert report["rows_spliced"] == 7 and report["insert_at_token"] == before
    assert report["tokens_before"] == total and report["tokens_after"] == total + 7
    assert report["conditioning_shape"] == [1, total + 7, WIDTH]


def test_splice_leaves_the_tokens_before_the_effect_alone(effects, emb_dir):
    clip = h3_clip(emb_dir, kind="mix")
    plain = image_to_video(clip, H3_PROMPT)
    spliced, report = splice(clip)
    before = report["insert_at_token"]
    assert torch.equal(spliced[:, :before], plain[:, :before])  # causal: tokens before the effect are unchanged
    assert not torch.allclose(spliced[:, -1], plain[:, -1])


def test_splice_never_uses_position_zero(effects, emb_dir):
    clip = h3_clip(emb_dir)
    _, report = splice(clip, prompt="Cat", position="after_first_shot_tag")
    assert report["insert_at_token"] == 1 and report["position_used"] == "end"
    assert not torch.is_tensor(clip.cond_stage_model.encoded[0][0][0])
    with pytest.raises(H3KitInputError, match="F15"):
        splice(clip, prompt="  ")


@pytest.mark.parametrize("strength", [0.5, 2.0])
def test_splice_strength_scales_the_rows_once(effects, emb_dir, strength):
    clip = h3_clip(emb_dir)
    cond, report = splice(clip, effect="fx_b.safetensors", position="end", strength=strength)
    start = report["insert_at_token"]
    assert torch.equal(cond[0, start:start + 3], effects["fx_b"] * strength)


def test_splice_refuses_an_encoder_declaring_another_width(emb_dir):
    write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH))
    clip = h3_clip(emb_dir)
    clip.tokenizer.qwen3vl_32b.embedding_size = 3840
    with pytest.raises(H3KitInputError, match="3840.*Gemma-3-12B"):
        splice(clip)


def test_splice_catches_rows_the_encoder_drops(emb_dir):
    write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH))
    clip = h3_clip(emb_dir, table=torch.randn(1024, 3840))  # a 3840-wide model behind a tokenizer that says 5120
    with pytest.raises(H3KitInputError, match="were not applied"):
        splice(clip)


def test_splice_counts_the_encoded_positions(emb_dir):
    write_effect(emb_dir, "fx_a.safetensors", (7, WIDTH))
    clip = h3_clip(emb_dir)
    clip.encode_from_tokens_scheduled = lambda tokens: [[torch.zeros(1, len(hash_ids(H3_PROMPT)), WIDTH), {}]]
    with pytest.raises(H3KitInputError, match="cannot be verified"):
        splice(clip)


@pytest.mark.parametrize("tokenized", [torch.arange(5), {"qwen3vl_32b": torch.arange(5)},
                                       {"qwen3vl_32b": [[1, 2, 3]]}, {"qwen3vl_32b": [[("a", 1.0)]]}])
def test_splice_refuses_a_tokenizer_without_the_token_list_form(effects, emb_dir, tokenized):
    clip = h3_clip(emb_dir)
    clip.tokenize = lambda text, **_: tokenized
    with pytest.raises(H3KitInputError, match="token-list form"):
        splice(clip)


def test_f15_splice_refuses_a_prompt_starting_with_a_marker(effects, emb_dir):
    with pytest.raises(H3KitInputError, match="F15"):
        splice(h3_clip(emb_dir), prompt=" embedding:fx_b " + H3_PROMPT)


def test_splice_refuses_a_wrong_width_file(effects, emb_dir):
    with pytest.raises(H3KitInputError, match="4096"):
        splice(h3_clip(emb_dir), effect="fx_t5.safetensors")


def test_splice_rows_are_cross_checked_with_the_encoders_loader_on_the_033_tokenizer(effects, emb_dir):
    _, report = splice(h3_clip(emb_dir), strength=0.5)
    assert report["host_rows"] == "7 rows equal to the encoder's embedding loader's embedding:fx_a"
    assert report["fallbacks"] == []


def test_splice_refuses_rows_the_encoders_loader_reads_differently(effects, emb_dir, tmp_path):
    other = tmp_path / "host_embeddings"
    write_effect(other, "fx_a.safetensors", (7, WIDTH), seed=99)  # same name, other rows, in the host's folder
    with pytest.raises(H3KitInputError, match="differ") as err:
        splice(h3_clip(other))
    assert err.value.input_name == "effect"


def test_splice_without_the_host_cross_check_says_why(effects, emb_dir, tmp_path):
    _, report = splice(h3_clip(tmp_path / "no_such_folder"))
    assert report["host_rows"] == "not checked"
    (reason,) = report["fallbacks"]
    assert "finds no embedding:fx_a in its embeddings folders" in reason and "no_such_folder" in reason


def test_splice_proof_does_not_trust_the_list_it_built(effects, emb_dir, tmp_path, monkeypatch):
    # The rows read at execution lose one (file rewritten after its header was read, or a splice bug): the proof
    # compares the encoder's positions with the header's 7 rows, so it notices; re-counting the list would not.
    real = fx.load_effect_rows
    monkeypatch.setattr(fx, "load_effect_rows", lambda *a: real(*a)[:6])
    total = len(hash_ids(H3_PROMPT))
    with pytest.raises(H3KitInputError, match=rf"{total} prompt tokens \+ 7 effect rows = {total + 7} positions"):
        splice(h3_clip(tmp_path / "no_such_folder"))
