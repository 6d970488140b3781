"""Issue 30 row 5, tier (a): where the first shot's description starts in every H3 prompt form (checks/h3_prompt.py),
on the official templates' own prompts and on fuzzed ones; H3's dialogue tokens found in a prompt."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from h3kit.checks import facts
from h3kit.checks.h3_prompt import description_bounds, dialogue_tokens_in, first_shot_description
from h3kit.nodes.ref2va import build_prompt
from hypothesis import given, settings
from hypothesis import strategies as st

DATA = Path(__file__).parent / "data"
OFFICIAL = json.loads((DATA / "official_h3_prompts.json").read_text(encoding="utf-8"))["prompts"]
PUBLISHED = (DATA / "ref2va_published_example.txt").read_text(encoding="utf-8")


def test_the_official_prompt_corpus_covers_both_template_versions_and_every_h3_template():
    sources = {(s["version"], s["template"]) for item in OFFICIAL for s in item["sources"]}
    assert {version for version, _ in sources} == {"0.1.47", "0.1.123"}
    assert {template for version, template in sources if version == "0.1.123"} == {
        "video_minimax_h3_i2v.json", "video_minimax_h3_i2v_continuation.json", "video_minimax_h3_t2v.json",
        "video_minimax_h3_r2v.json", "video_minimax_h3_multiframe_reference.json",
        "video_minimax_h3_fun_controlnet_union.json"}
    assert len(OFFICIAL) == 6


@pytest.mark.parametrize("item", OFFICIAL, ids=lambda item: item["sources"][0]["template"] + ":" +
                         item["first_shot"]["heading"])
def test_first_shot_description_of_every_official_template_prompt(item):
    shot = first_shot_description(item["prompt"])
    assert shot is not None and shot.heading == item["first_shot"]["heading"]
    assert item["prompt"][shot.start:].startswith(item["first_shot"]["description_starts_with"])


def test_the_official_multiframe_reference_prompt_is_read_inside_detailed_description():
    # Its subject_definitions cite "[Shot 1]" first ("<Picture 1> is the first frame of [Shot 1], showing ..."):
    # the effect used to land there, inside a reference sentence (issue 30 row 5).
    (item,) = [i for i in OFFICIAL if i["prompt"].startswith("subject_definitions:")]
    text = item["prompt"]
    shot = first_shot_description(text)
    assert text.index("[Shot 1]") < text.index("detailed_description:") < shot.start
    assert shot.section == "detailed_description"


@pytest.mark.parametrize(("text", "heading", "description"), [
    ("integrated_multimodal_description: [Shot 1] A dancer leaps.", "[Shot 1]", "A dancer leaps."),
    ("<Picture 1> is the first frame of [Shot 1], showing a cat.\n"
     "integrated_multimodal_description: [Shot 1] The cat jumps.", "[Shot 1]", "The cat jumps."),
    ("Use <Picture 1> as the first frame of [Shot 1]. [Shot 1] The cat jumps.", "[Shot 1]", "The cat jumps."),
    ("A moody noir film. [Shot 1] A man lights a cigarette.", "[Shot 1]", "A man lights a cigarette."),
    ("[Shot 1] 0-3s <Subject 1>, the woman, waits.", "[Shot 1]", "<Subject 1>, the woman, waits."),
    ("[Shot 2] At 00:03.000, the shot cuts.", "[Shot 2]", "the shot cuts."),
    ("[Shot 1]A cat.", "[Shot 1]", "A cat."),
    ("  shot 1 - low angle on the street", "shot 1 -", "low angle on the street"),
    ("Cut 1: top-down view", "Cut 1:", "top-down view"),
    ("雨夜。[Shot 1] 一只猫跳上墙。", "[Shot 1]", "一只猫跳上墙。"),
])
def test_each_heading_form(text, heading, description):
    shot = first_shot_description(text)
    assert shot is not None and (shot.heading, text[shot.start:]) == (heading, description)


@pytest.mark.parametrize("text", [
    "A cat sleeps. It wakes.",
    "<Picture 1> is the first frame of [Shot 1], showing a cat on a wall.",  # a reference, not a heading
    "<Subject 1> (appears in [Shot 1], [Shot 2]): fully_preserved - kept.",
    "The shot 1 looks fine.",  # no separator after the label
    "",
])
def test_no_heading(text):
    assert first_shot_description(text) is None


def test_a_ref2va_prompt_from_the_pack_is_read_in_detailed_description_never_in_retention_analysis():
    fields = {"subjects": "<Subject 1>: a tall woman with a red wool coat and curly auburn hair",
              "summary": "[reference generation] <Subject 1> waits at a tram stop.",
              "retention": "<Subject 1> (appears in [Shot 1], [Shot 2]): fully_preserved - face and coat kept.",
              "shots": "Realistic style.\n[Shot 1] 0-3s <Subject 1>, the tall woman in the red coat, waits.\n"
                       "[Shot 2] 3-6s <Subject 1>, the woman with auburn hair, boards the tram.",
              "soundscape": "Tram bells.", "music": "N/A"}
    prompt, problems, _ = build_prompt(fields, {"ref_images": 1, "ref_videos": 0, "ref_video_audios": 0,
                                                "ref_audios": 0}, 243)
    assert problems == []
    shot = first_shot_description(prompt)
    assert prompt.index("retention_analysis:") < prompt.index("detailed_description:") < shot.start
    assert prompt[shot.start:].startswith("<Subject 1>, the tall woman in the red coat, waits.")


def test_the_published_ref2va_example_first_shot():
    shot = first_shot_description(PUBLISHED)
    assert PUBLISHED[shot.start:].startswith("A medium shot establishes <Subject 1>")


def test_description_bounds_are_the_detailed_description_body():
    start, end, section = description_bounds(PUBLISHED)
    assert section == "detailed_description"
    assert PUBLISHED[start:end].strip().startswith("The target video uses a realistic multi-camera sitcom style")
    assert PUBLISHED[end:].startswith("overall_soundscape:")
    assert description_bounds("A cat.") == (0, 6, None)


# ------------------------------------------------------------------------------------------- fuzz
HEADINGS = ["[Shot 1]", "[shot 2]", "SHOT 1:", "Shot 3 -", "CUT 1:", "[0s-1.5s] Shot 1:", "[0s-1s]", "[00:00-00:03]"]
TIMES = ["", "0-3s ", "At 00:01.500, ", "1.5-3s: "]
WORDS = st.text(alphabet="abcxyz ,<>'\"", min_size=1, max_size=30).map(lambda t: "w" + t.replace("\n", " "))
REFERENCES = st.sampled_from(["<Picture 1> is the first frame of [Shot 1], showing a cat.",
                              "<Subject 1> (appears in [Shot 1], [Shot 2]): fully_preserved - kept.",
                              "Use <Picture 2> as the keyframe of [Shot 2] and SHOT 1 as the plan.",
                              "Scene overview: a chase at dusk."])


@settings(max_examples=300, deadline=None)
@given(preamble=st.lists(REFERENCES, max_size=4), heading=st.sampled_from(HEADINGS), time=st.sampled_from(TIMES),
       description=WORDS, rest=st.lists(st.tuples(st.sampled_from(HEADINGS), WORDS), max_size=3),
       header=st.sampled_from(["", "integrated_multimodal_description: "]))
def test_fuzz_the_built_position_is_found_after_any_reference_sentences(preamble, heading, time, description, rest,
                                                                        header):
    head = "\n".join(preamble) + ("\n" if preamble else "") + header + heading + " " + time
    text = head + description + "".join(f"\n{h} {d}" for h, d in rest)
    shot = first_shot_description(text)
    assert shot is not None and shot.heading == heading and shot.start == len(head)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(list("[]Shotcu 0123456789:.-s\n\tAtd_,<>/|") +
                                ["detailed_description:", "retention_analysis:", "[Shot 1]", "SHOT 1:", "[0s-1s]",
                                 "<d>", "</d>", "<|cutoff|>", "\u3002", "At 00:01.5,"]), max_size=80).map("".join))
def test_fuzz_any_text_gives_a_position_inside_the_description_after_its_heading(text):
    shot = first_shot_description(text)
    start, end, _ = description_bounds(text)
    if shot is None:
        return
    assert start <= shot.start <= end
    heading_at = text.rfind(shot.heading, start, shot.start)
    assert heading_at >= start and any(ch.isalnum() for ch in text[:shot.start])  # never the first token (F15)


@pytest.mark.parametrize("text", ["[Shot 1" * 200_000, "[0s-" * 200_000, ("a. " * 100_000) + "[Shot 1] x",
                                  "\n" * 300_000 + "SHOT 1: x", "detailed_description:\n" * 40_000])
def test_the_parser_is_linear_on_hostile_prompts(text):
    began = time.perf_counter()
    first_shot_description(text)
    dialogue_tokens_in(text)
    assert time.perf_counter() - began < 3.0  # linear: ~0.1-0.5 s for these 0.6-1 MB texts on this 2-core box


# ------------------------------------------------------------------------------------------- dialogue tokens
def test_the_dialogue_token_table_is_upstreams():
    # Comfy-Org/ComfyUI#15808 / MiniMax-H3 tokenizer_config.json: seven tokens numbered from 151669 in this order.
    assert facts.H3_DIALOGUE_TOKENS == {"<d>": 151669, "</d>": 151670, "<|cutoff|>": 151671,
                                        "<|lyrics_start|>": 151672, "<|lyrics_end|>": 151673,
                                        "<|caption_start|>": 151674, "<|caption_end|>": 151675}


@pytest.mark.parametrize(("text", "found"), [
    ("says <d>[Chinese] 你好。</d> and <d>[Chinese] 再见。</d>", ["<d>", "</d>"]),
    ("<|lyrics_start|>la la<|lyrics_end|><|cutoff|>", ["<|lyrics_start|>", "<|lyrics_end|>", "<|cutoff|>"]),
    ("<dd> <d > </ d> <|cutoff>", []),
])
def test_dialogue_tokens_in(text, found):
    assert dialogue_tokens_in(text) == found
