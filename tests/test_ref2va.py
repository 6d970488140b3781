"""Issue 5: Ref2VA prompt composer + linter, Traditional->Simplified data, reference wiring in workflows."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import h3kit
import pytest
from comfyui_host import NATIVE_H3, execution_error
from h3kit.adapters.workflow_file import validate_file
from h3kit.checks.validator import validate_graph
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.ref2va import (
    HEADER_LINE,
    SECTIONS,
    H3KitRef2VAPrompt,
    build_prompt,
    to_simplified,
    traditional_characters,
)
from h3kit.scripts import schemas


def split_sections(prompt: str) -> dict[str, str]:
    """Inverse of the node's section layout for a composed prompt: {section: body text} (test helper)."""
    marks = [(m.group(1), m.start(), m.end()) for m in HEADER_LINE.finditer(prompt)]
    return {name: prompt[start:(marks[i + 1][1] if i + 1 < len(marks) else len(prompt))].strip()
            for i, (name, _, start) in enumerate(marks)}


PACK = Path(h3kit.__file__).resolve().parent
DATA = Path(__file__).parent / "data"
WORKFLOWS = ("h3_ref2va_two_characters.json", "h3_ref2va_two_stage.json")

# The complete example of the official full-reference guide (MiniMax-H3 skills/h3-prompt-writing/references/
# ref-en.txt, section 7), typed from that text: 4 subjects + 1 audio, three shots, two speakers.
PUBLISHED = (DATA / "ref2va_published_example.txt").read_text(encoding="utf-8").rstrip("\n")
PUBLISHED_COUNTS = {"ref_images": 4, "ref_videos": 2, "ref_video_audios": 0, "ref_audios": 1}

# A two-character, three-shot prompt in the issue's input format (written for these tests).
TWO = {
    "subjects": "<Subject 1>: a tall woman with a red wool coat, curly auburn hair and green eyes\n"
                "<Subject 2>: a stocky man with a shaved head, a grey hoodie and black-rimmed glasses",
    "summary": "[reference generation] <Subject 1> and <Subject 2> meet at a tram stop and talk.",
    "retention": "<Subject 1> (appears in [Shot 1], [Shot 3]): fully_preserved - face, coat and hair kept.\n"
                 "<Subject 2> (appears in [Shot 1], [Shot 2]): partially_preserved - face kept, hoodie swapped.",
    "shots": "Realistic style, overcast daylight.\n"
             "[Shot 1] 0-3s <Subject 1>, the tall woman in the red wool coat, waits; <Subject 2>, the man in the grey "
             "hoodie and glasses, walks up.\n"
             "[Shot 2] 3-6s <Subject 2> (S1), the shaved-head man in glasses, says <d>[Chinese] 好久不见。</d>\n"
             "[Shot 3] 6-10s <Subject 1> (S2), the woman with curly auburn hair, answers <d>[Chinese] 是啊，你还好吗？</d>",
    "soundscape": "Tram bells and light wind.",
    "music": "N/A",
}
TWO_COUNTS = {"ref_images": 2, "ref_videos": 0, "ref_video_audios": 0, "ref_audios": 0}


def lint(fields=None, counts=None, length=243, **changes):
    data = {**TWO, **(fields or {}), **changes}
    return build_prompt(data, counts or TWO_COUNTS, length)[1]


def messages(problems) -> list[str]:
    return [str(p) for p in problems]


def only(problems, needle: str):
    found = [p for p in problems if needle in str(p)]
    assert found, f"no problem mentions {needle!r}; got: {messages(problems)}"
    return found[0]


def published_fields() -> dict:
    body = split_sections(PUBLISHED)
    definitions = body["subject_definitions"].split("\n")
    return {"subjects": "\n".join(definitions[:4]), "audios": definitions[4], "summary": body["summary"],
            "retention": body["retention_analysis"], "shots": body["detailed_description"],
            "soundscape": body["overall_soundscape"], "music": body["non_diegetic_music"]}


# ----------------------------------------------------------------------------- composing


def test_published_example_composes_verbatim_and_passes():
    prompt, problems, _ = build_prompt(published_fields(), PUBLISHED_COUNTS, 243)
    assert problems == []
    assert prompt == PUBLISHED


def test_node_outputs_the_six_sections_in_fixed_order_and_a_report():
    prompt, report, _ = H3KitRef2VAPrompt().compose(length=243, strict=True, **TWO, **TWO_COUNTS)
    headers = [line[:-1] for line in prompt.split("\n") if line.endswith(":") and line[:-1] in SECTIONS]
    assert headers == ["subject_definitions", "summary", "retention_analysis", "detailed_description",
                       "overall_soundscape", "non_diegetic_music"]
    assert prompt.startswith("subject_definitions:\n<Subject 1>: a tall woman")
    assert prompt.endswith("non_diegetic_music:\nN/A")
    data = json.loads(report)
    assert data["problems"] == 0 and data["warnings"] == []
    assert data["speakers"] == {"S1": "<Subject 2>", "S2": "<Subject 1>"}
    assert [(s["start_s"], s["end_s"]) for s in data["shots"]] == [(0, 3), (3, 6), (6, 10)]


def test_strict_raises_naming_section_and_line():
    shots = TWO["shots"].replace("the shaved-head man in glasses, ", "")
    with pytest.raises(H3KitInputError) as err:
        H3KitRef2VAPrompt().compose(length=243, strict=True, **{**TWO, "shots": shots}, **TWO_COUNTS)
    text = str(err.value)
    assert "H3KitRef2VAPrompt" in text and "input 'shots'" in text
    assert "detailed_description line 3" in text and "strict" in text


def test_strict_false_composes_and_lists_problems_as_warnings():
    prompt, report, _ = H3KitRef2VAPrompt().compose(length=240, strict=False, **TWO, **TWO_COUNTS)
    assert "detailed_description:" in prompt
    data = json.loads(report)
    assert data["problems"] == 1 and "length 240" in data["warnings"][0]


def test_section_header_pasted_into_an_input_is_reported():
    problem = only(lint(summary="summary:\n[reference generation] they talk."), "section header")
    assert problem.section == "summary" and problem.line == 1


# ----------------------------------------------------------------------------- F30 bare labels


def test_f30_bare_label_in_a_shot_is_reported_with_the_shot():
    shots = TWO["shots"].replace("[Shot 2] 3-6s <Subject 2> (S1), the shaved-head man in glasses, says",
                                 "[Shot 2] 3-6s <Subject 2> (S1) says")
    problem = only(lint(shots=shots), "F30")
    assert problem.section == "detailed_description" and problem.line == 3
    assert "[Shot 2]" in problem.message and "<Subject 2>" in problem.message
    assert len(lint(shots=shots)) == 1


def test_f30_dialogue_words_do_not_count_as_appearance():
    shots = TWO["shots"].replace("the shaved-head man in glasses, says <d>[Chinese] 好久不见。</d>",
                                 "says <d>[English] Nice glasses and hoodie!</d>")
    only(lint(shots=shots), "[Shot 2] names <Subject 2> without appearance words")


def test_f30_definition_without_appearance_is_reported():
    problem = only(lint(subjects="<Subject 1>: a woman\n" + TWO["subjects"].split("\n")[1]), "almost no appearance")
    assert problem.section == "subject_definitions" and problem.line == 1


# ----------------------------------------------------------------------------- F29 Traditional Chinese


def test_f29_traditional_chinese_is_listed_with_simplified_forms_and_converted_line():
    shots = TWO["shots"].replace("<d>[Chinese] 好久不见。</d>", "<d>[Chinese] 我們好久不見了，這個地方變了很多。</d>")
    problem = only(lint(shots=shots), "F29")
    assert problem.line == 3
    for pair in ("們→们", "見→见", "這→这", "個→个", "變→变"):
        assert pair in problem.message
    assert "<d>[Chinese] 我们好久不见了，这个地方变了很多。</d>" in problem.fix


@pytest.mark.parametrize("traditional, simplified", [
    ("我們今天晚上去哪裡吃飯？", "我们今天晚上去哪里吃饭？"),
    ("這個問題很難說清楚。", "这个问题很难说清楚。"),
    ("請把門關上，外面風很大。", "请把门关上，外面风很大。"),
    ("電話響了，但是沒有人接。", "电话响了，但是没有人接。"),
])
def test_f29_real_sentences_convert_to_simplified(traditional, simplified):
    assert traditional_characters(traditional)
    assert to_simplified(traditional) == simplified
    assert traditional_characters(simplified) == []


def test_f29_simplified_and_non_chinese_dialogue_pass():
    assert lint() == []
    shots = TWO["shots"].replace("<d>[Chinese] 好久不见。</d>", "<d>[Japanese] 久しぶりですね、會いたかった。</d>")
    assert not [p for p in lint(shots=shots) if "F29" in str(p)]


def test_zh_table_ships_as_data_with_source_and_licence():
    doc = json.loads((PACK / "data" / "zh_trad_to_simp.json").read_text(encoding="utf-8"))
    assert "OpenCC" in doc["_source"] and "Apache" in doc["_licence"]
    table = doc["map"]
    assert len(table) > 3000 and all(len(k) == 1 and len(v) == 1 for k, v in table.items())
    assert table["說"] == "说" and table["國"] == "国" and table["愛"] == "爱"
    assert "乾" not in table and "于" not in table  # valid Simplified characters are never flagged
    pyproject = (PACK / "pyproject.toml").read_text(encoding="utf-8")
    assert '"data/*.json"' in pyproject


# ----------------------------------------------------------------------------- F20 length grid


# The host's length input (MiniMaxH3ReferenceToVideo, ComfyUI 0.33.0): min 5, max 3600, snapped up to 17k+5.
# Boundaries n-1, n, n+1 around each limit: 4/5/6, 361/362/363 (trained ceiling), 3599/3600/3601 (host maximum).
@pytest.mark.parametrize("length, fix", [
    (240, "use 226 or 243"), (4, "use 5"), (6, "use 5 or 22"), (361, "use 345 or 362"), (363, "use 362 or 379"),
    (3599, "use 3592"), (3600, "use 3592"), (3601, "use 3592"), (10**6, "use 3592"),
])
def test_f20_length_off_the_grid_or_outside_the_host_range_stops_the_node(length, fix):
    problem = only(lint(length=length), f"length {length}")
    assert problem.section == "length" and fix in problem.fix


def test_f20_off_grid_length_says_what_the_host_renders_instead():
    assert "snaps it up to 243 frames" in only(lint(length=240), "length 240").message
    assert "outside 5..3600" in only(lint(length=3601), "length 3601").message


SHORT_SHOTS = "[Shot 1] 0-0.2s <Subject 1>, the tall woman in the red wool coat, and <Subject 2>, the man in glasses."
SHORT_RETENTION = TWO["retention"].replace("[Shot 3]", "[Shot 1]").replace("[Shot 2]", "[Shot 1]")


def lint_all(fields=None, counts=None, length=243, **changes):
    """(problems that stop the node, warnings that never do)."""
    _, problems, linter = build_prompt({**TWO, **(fields or {}), **changes}, counts or TWO_COUNTS, length)
    return problems, linter.notes


@pytest.mark.parametrize("length", [5, 22, 124, 243, 362])
def test_f20_grid_lengths_pass(length):
    assert lint_all(length=length, shots=SHORT_SHOTS, retention=SHORT_RETENTION) == ([], [])


@pytest.mark.parametrize("length", [379, 1008, 3592])  # on the grid, beyond the 362 trained, within the host's 3600
def test_length_beyond_the_trained_range_is_a_warning_not_a_stop(length):
    problems, notes = lint_all(length=length)
    assert problems == []
    assert "beyond H3's trained range (up to 362 = 15.08 s)" in only(notes, f"length {length}").message
    prompt, report, _ = H3KitRef2VAPrompt().compose(length=length, strict=True, **TWO, **TWO_COUNTS)
    data = json.loads(report)
    assert data["problems"] == 0 and any("trained range" in w for w in data["warnings"])


def test_length_widget_takes_the_host_range():
    spec = H3KitRef2VAPrompt.INPUT_TYPES()["required"]["length"][1]
    assert (spec["min"], spec["max"], spec["step"]) == (5, 3600, 17)


# ----------------------------------------------------------------------------- labels and references


def test_undefined_label_names_section_and_line():
    problem = only(lint(summary="[reference generation] <Subject 1> meets <Subject 3>."), "<Subject 3> is used")
    assert problem.section == "summary" and problem.line == 1


def test_label_defined_twice():
    problem = only(lint(subjects=TWO["subjects"] + "\n<Subject 1>: a short man in a blue cap and jeans"),
                   "defined twice")
    assert problem.line == 3


def test_picture_label_beyond_connected_images():
    subjects = TWO["subjects"].replace("<Subject 2>: a stocky man", "<Subject 2>: from <Picture 3>, a stocky man")
    problem = only(lint(subjects=subjects), "<Picture 3> needs 3")
    assert "ref_images = 2" in problem.message and problem.line == 2


def test_connected_image_without_a_label():
    only(lint(counts={**TWO_COUNTS, "ref_images": 3}), "reference image 3 is connected but no label")


def test_subject_without_a_reference_to_carry_it():
    problem = only(lint(counts={**TWO_COUNTS, "ref_images": 1}), "<Subject 2> cites no reference")
    assert "only 1 visual" in problem.message


def test_audio_label_counts_soundtracks_and_standalone_audio():
    audios = "<Audio 1> is the voice-timbre reference for <Subject 1> (S2)."
    retention = TWO["retention"] + "\n<Audio 1>: reference - timbre only."
    assert only(lint(audios=audios, retention=retention), "<Audio 1> needs 1").input_name == "audios"
    ok = {**TWO_COUNTS, "ref_audios": 1}
    assert lint(audios=audios, retention=retention, counts=ok) == []


# ----------------------------------------------------------------------------- every reference kind and count
# The host's slots per kind (MiniMaxH3ReferenceToVideo Autogrow max, ComfyUI 0.33.0): 9 images, 3 videos, 3 video
# soundtracks, 3 standalone audios. <Audio j> numbers the soundtracks first (in video order), then the audios.
SLOTS = {"ref_images": 9, "ref_videos": 3, "ref_video_audios": 3, "ref_audios": 3}
KIND_OF = {"ref_images": "Picture", "ref_videos": "Video", "ref_audios": "Audio", "ref_video_audios": "Audio"}


def refs_fields(images: int = 2, videos: int = 0, audio_labels: int = 0) -> dict:
    """TWO (its two subjects carried by <Picture 1> and <Picture 2>) plus a definition and a retention line for
    <Picture 3..images>, <Video 1..videos> and <Audio 1..audio_labels>."""
    pictures = [f"<Picture {k}> is the background plate of [Shot 1], a grey stone bridge." for k in range(3, images + 1)]
    clips = [f"<Video {k}> is the camera-motion reference for [Shot 1], a slow dolly." for k in range(1, videos + 1)]
    sounds = [f"<Audio {j}> is the ambience reference for [Shot 1], rain on a tram roof." for j in
              range(1, audio_labels + 1)]
    retention = ([f"<Picture {k}>: fully_preserved - bridge kept." for k in range(3, images + 1)]
                 + [f"<Video {k}>: partially_preserved - motion only." for k in range(1, videos + 1)]
                 + [f"<Audio {j}>: reference - ambience only." for j in range(1, audio_labels + 1)])
    return {**TWO, "pictures": "\n".join(pictures), "videos": "\n".join(clips), "audios": "\n".join(sounds),
            "retention": "\n".join([TWO["retention"], *retention])}


def counts_of(images=2, videos=0, soundtracks=0, audios=0) -> dict:
    return {"ref_images": images, "ref_videos": videos, "ref_video_audios": soundtracks, "ref_audios": audios}


def lint_refs(images=2, videos=0, soundtracks=0, audios=0, labels=None):
    """Problems and warnings with `labels` = (pictures, videos, audio labels) defined (default: one per reference)."""
    pictures, clips, sounds = labels or (images, videos, soundtracks + audios)
    _, problems, linter = build_prompt(refs_fields(pictures, clips, sounds),
                                       counts_of(images, videos, soundtracks, audios), 243)
    return problems, linter.notes


def test_every_kind_at_its_maximum_at_once_composes():
    problems, notes = lint_refs(9, 3, 3, 3)
    assert problems == []
    assert {p.input_name for p in notes} == {"ref_audios", "ref_images"}  # 6 audio clips, 18 files: warnings only
    prompt, report, _ = H3KitRef2VAPrompt().compose(length=243, strict=True, **refs_fields(9, 3, 6),
                                                 **counts_of(9, 3, 3, 3))
    data = json.loads(report)
    assert data["references"] == counts_of(9, 3, 3, 3) and data["problems"] == 0
    assert data["audio_numbering"] == {"<Audio 1>..<Audio 3>": "soundtracks of the connected videos, in video order",
                                       "<Audio 4>..<Audio 6>": "ref_audios, in slot order"}
    assert "<Picture 9> is the background plate" in prompt and "<Audio 6> is the ambience" in prompt


def valid_counts(**changes) -> dict:
    counts = {**SLOTS, **changes}
    counts["ref_video_audios"] = min(counts["ref_video_audios"], counts["ref_videos"])  # a soundtrack needs its video
    return counts


def fields_for(counts: dict) -> dict:
    return refs_fields(counts["ref_images"], counts["ref_videos"], counts["ref_video_audios"] + counts["ref_audios"])


@pytest.mark.parametrize("kind", list(SLOTS))
def test_each_count_input_takes_the_hosts_slots_n_minus_1_n_n_plus_1(kind):
    n = SLOTS[kind]
    spec = H3KitRef2VAPrompt.INPUT_TYPES()["required"][kind][1]
    assert (spec["min"], spec["max"]) == (0, n)
    for value in (n - 1, n):
        counts = valid_counts(**{kind: value})
        _, report, _ = H3KitRef2VAPrompt().compose(length=243, strict=True, **fields_for(counts), **counts)
        assert json.loads(report)["references"][kind] == value
    for bad in (n + 1, -1):
        with pytest.raises(H3KitInputError, match=rf"'{kind}'.*0\.\.{n}"):
            H3KitRef2VAPrompt().compose(length=243, strict=True, **fields_for(SLOTS), **{**SLOTS, kind: bad})


@pytest.mark.parametrize(("counts", "labels", "needle"), [
    ((8, 3, 3, 3), (9, 3, 6), "<Picture 9> needs 9 connected picture reference(s) but ref_images = 8"),
    ((9, 2, 2, 3), (9, 3, 5), "<Video 3> needs 3 connected video reference(s) but ref_videos = 2"),
    ((9, 3, 2, 3), (9, 3, 6), "<Audio 6> needs 6 connected audio reference(s) but ref_video_audios + ref_audios = 5"),
    ((9, 3, 3, 2), (9, 3, 6), "<Audio 6> needs 6 connected audio reference(s) but ref_video_audios + ref_audios = 5"),
], ids=list(SLOTS))
def test_a_label_one_beyond_each_kinds_count_is_a_problem(counts, labels, needle):
    problems, _ = lint_refs(*counts, labels=labels)
    assert only(problems, needle).input_name in ("pictures", "videos", "audios")
    assert lint_refs(*counts)[0] == []  # the labels that match the count pass


@pytest.mark.parametrize(("kind", "counts"), [
    ("ref_images", (3, 0, 0, 0)), ("ref_videos", (2, 2, 0, 0)), ("ref_video_audios", (2, 2, 2, 0)),
    ("ref_audios", (2, 0, 0, 2)),
])
def test_a_connected_reference_without_a_label_is_a_problem_for_each_kind(kind, counts):
    images, videos, soundtracks, audios = counts
    missing = {"ref_images": (images - 1, videos, soundtracks + audios), "ref_videos": (images, videos - 1, 0),
               "ref_video_audios": (images, videos, soundtracks - 1), "ref_audios": (images, videos, audios - 1)}
    problems, _ = lint_refs(*counts, labels=missing[kind])
    last = {"ref_images": images, "ref_videos": videos}.get(kind, soundtracks + audios)
    only(problems, f"<{KIND_OF[kind]} {last}>)")
    assert lint_refs(*counts)[0] == []


@pytest.mark.parametrize(("videos", "soundtracks", "paired"), [(0, 1, False), (1, 2, False), (2, 3, False),
                                                                 (1, 1, True), (2, 1, True), (3, 3, True)])
def test_soundtracks_need_their_videos(videos, soundtracks, paired):
    problems, _ = lint_refs(2, videos, soundtracks, 0, labels=(2, videos, soundtracks))
    found = [p for p in problems if "pairs each soundtrack with the video of the same number" in str(p)]
    assert bool(found) != paired


@pytest.mark.parametrize(("counts", "warned"), [
    ((2, 1, 1, 2), False), ((2, 1, 1, 3), True), ((2, 0, 0, 3), False), ((2, 3, 3, 1), True),  # audio clips 3 | 4
])
def test_more_audio_clips_than_the_checkpoint_is_documented_for_is_a_warning(counts, warned):
    problems, notes = lint_refs(*counts)
    assert problems == []
    assert any("audio clips" in str(n) for n in notes) == warned


@pytest.mark.parametrize(("counts", "warned"), [((9, 3, 0, 0), False), ((9, 3, 0, 1), True), ((8, 3, 1, 0), False)])
def test_more_files_than_the_checkpoint_is_documented_for_is_a_warning(counts, warned):
    problems, notes = lint_refs(*counts)
    assert problems == []
    assert any("reference files" in str(n) for n in notes) == warned


def test_label_spelling_is_checked():
    only(lint(summary="[reference generation] <subject1> meets <Subject 2>."), "write <Subject 1>")


# ----------------------------------------------------------------------------- retention


def test_missing_retention_marker():
    only(lint(retention=TWO["retention"].split("\n")[0]), "<Subject 2> has no retention marker")


@pytest.mark.parametrize("line, needle", [
    ("<Subject 2>: fully_copy - audio marker on a subject", "'fully_copy' is not one of its markers"),
    ("<Subject 2>: kept mostly", "'kept' is not one of its markers"),
    ("<Subject 2> keeps his face", "not a retention line"),
])
def test_wrong_retention_marker(line, needle):
    retention = TWO["retention"].split("\n")[0] + "\n" + line
    assert only(lint(retention=retention), needle).line == 2


def test_audio_reference_takes_audio_markers():
    audios = "<Audio 1> is the voice-timbre reference for <Subject 1> (S2)."
    retention = TWO["retention"] + "\n<Audio 1>: fully_preserved - wrong set"
    only(lint(audios=audios, retention=retention, counts={**TWO_COUNTS, "ref_audios": 1}),
         "<Audio 1> is an audio reference")


# ----------------------------------------------------------------------------- shot timing


def test_overlapping_shots():
    problem = only(lint(shots=TWO["shots"].replace("[Shot 2] 3-6s", "[Shot 2] 2-6s")), "before the previous shot ends")
    assert problem.line == 3


def test_shot_beyond_the_clip():
    problem = only(lint(length=124), "the clip is 5.167 s")
    assert "[Shot 2]" in problem.message and problem.line == 3


def test_shots_out_of_order_and_untimed():
    shots = TWO["shots"].replace("[Shot 2] 3-6s", "[Shot 3] 3-6s").replace("[Shot 3] 6-10s", "[Shot 2]")
    problems = lint(shots=shots)
    only(problems, "[Shot 3] is shot 2 in order")
    only(problems, "[Shot 2] has no time")


def test_published_at_timestamps_are_read():
    shots = TWO["shots"].replace("[Shot 1] 0-3s", "[Shot 1]").replace("[Shot 2] 3-6s", "[Shot 2] At 00:03.000,") \
        .replace("[Shot 3] 6-10s", "[Shot 3] At 00:11.000,")
    only(lint(shots=shots), "[Shot 3] reaches 11 s")


# ----------------------------------------------------------------------------- dialogue and speakers


@pytest.mark.parametrize("dialogue, needle", [
    ("<d>好久不见。</d>", "must hold only the [Language] tag"),
    ("<d>[Chinese] 好久不见。(smiles)</d>", "holds more than the language tag"),
    ("<d>[Chinese] (S1) 好久不见。</d>", "holds more than the language tag"),
    ("<d>[Chinese] 好久不见。", "has 1 <d> and 0 </d>"),
])
def test_dialogue_tag_holds_only_language_and_line(dialogue, needle):
    shots = TWO["shots"].replace("<d>[Chinese] 好久不见。</d>", dialogue)
    assert only(lint(shots=shots), needle).line == 3


def test_dialogue_outside_detailed_description():
    only(lint(soundscape="Wind. <d>[Chinese] 你好。</d>"), "belongs in detailed_description")


def test_speaker_id_moves_to_another_subject():
    shots = TWO["shots"].replace("<Subject 1> (S2)", "<Subject 1> (S1)")
    problem = only(lint(shots=shots), "gives (S1) to <Subject 1>")
    assert problem.line == 4


def test_speaker_ids_introduced_out_of_order():
    shots = TWO["shots"].replace("(S1)", "(S9)")
    only(lint(shots=shots), "introduces (S9) before (S1)")


def test_dialogue_without_speaker_id():
    shots = TWO["shots"].replace("<Subject 2> (S1),", "<Subject 2>,").replace("<Subject 1> (S2),", "<Subject 1>,")
    only(lint(shots=shots), "[Shot 2] has dialogue but no speaker id")


def test_summary_needs_its_task_type():
    only(lint(summary="<Subject 1> and <Subject 2> talk."), "must start with its task type")
    only(lint(summary="[reference gen] <Subject 1> and <Subject 2> talk."), "'reference gen' is not")


# ----------------------------------------------------------------------------- workflows and validate


@pytest.fixture(scope="module")
def offline():
    return schemas.offline_schemas()


@pytest.mark.parametrize("name", WORKFLOWS)
def test_ref2va_workflows_validate(name, offline):
    problems = validate_file(PACK / "workflows" / "api" / name, offline)
    assert [p for p in problems if p.severity == "error"] == []
    graph = json.loads((PACK / "workflows" / "api" / name).read_text(encoding="utf-8"))
    assert all(node.get("_meta", {}).get("title") for node in graph.values())


def test_two_character_workflow_matches_the_issue(offline):
    graph = json.loads((PACK / "workflows" / "api" / WORKFLOWS[0]).read_text(encoding="utf-8"))
    ref = next(n for n in graph.values() if n["class_type"] == "MiniMaxH3ReferenceToVideo")["inputs"]
    assert (ref["width"], ref["height"], ref["length"]) == (1344, 768, 243)
    assert "audio_vae" in ref and graph[ref["prompt"][0]]["class_type"] == "H3KitRef2VAPrompt"
    assert [graph[ref[f"ref_images.ref_image_{i}"][0]]["class_type"] for i in (0, 1)] == ["LoadImage"] * 2
    classes = {n["class_type"] for n in graph.values()}
    assert {"H3KitLowVRAMAttention", "H3KitChunkFeedForward", "SaveVideo"} <= classes
    sched = next(n for n in graph.values() if n["class_type"] == "BasicScheduler")["inputs"]
    sampler = next(n for n in graph.values() if n["class_type"] == "KSamplerSelect")["inputs"]
    assert (sched["scheduler"], sched["steps"], sampler["sampler_name"]) == ("simple", 14, "res_multistep")
    prompt_inputs = {k: v for k, v in graph[ref["prompt"][0]]["inputs"].items() if k != "clip"}
    H3KitRef2VAPrompt().compose(**prompt_inputs)  # the shipped prompt passes its own strict check


@pytest.mark.parametrize("name", WORKFLOWS)
def test_shipped_ref2va_graphs_encode_through_the_prompt_nodes_clip_output(name):
    # Issue 30 row 6: the encoder's clip is H3KitRef2VAPrompt's clip output (dialogue tokens read as upstream where the
    # host splits them), and the text encoder feeds that node's clip input.
    graph = json.loads((PACK / "workflows" / "api" / name).read_text(encoding="utf-8"))
    ref = next(n for n in graph.values() if n["class_type"] == "MiniMaxH3ReferenceToVideo")["inputs"]
    prompt_id = ref["prompt"][0]
    assert ref["clip"] == [prompt_id, 2]
    loader = graph[graph[prompt_id]["inputs"]["clip"][0]]
    assert loader["class_type"] == "CLIPLoader" and loader["inputs"]["type"] == "minimax"


def _two_characters(offline):
    return json.loads((PACK / "workflows" / "api" / WORKFLOWS[0]).read_text(encoding="utf-8"))


def _rule_errors(graph, offline):
    from h3kit.checks.rules import RULES

    found = [p for p in validate_graph(graph, offline) if p.severity == "error"]
    for rule in RULES:
        found += [p for p in rule(graph, offline) if p.severity == "error"]
    return found


def _ref_node_id(graph):
    return next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ReferenceToVideo")


def test_list_of_links_autogrow_form_is_rejected_with_dotted_fix(offline, tmp_path):
    graph = _two_characters(offline)
    ref = graph[_ref_node_id(graph)]["inputs"]
    links = [ref.pop("ref_images.ref_image_0"), ref.pop("ref_images.ref_image_1")]
    ref["ref_images"] = links
    path = tmp_path / "list_form.json"
    path.write_text(json.dumps(graph), encoding="utf-8")
    errors = [p for p in validate_file(path, offline) if p.severity == "error"]
    problem = only(errors, "list of links")
    assert problem.input == "ref_images"
    assert '"ref_images.ref_image_0": ["8", 0]' in problem.fix and '"ref_images.ref_image_1": ["9", 0]' in problem.fix


def test_misspelled_autogrow_slot_is_an_error(offline):
    graph = _two_characters(offline)
    ref = graph[_ref_node_id(graph)]["inputs"]
    ref["ref_images.ref_images_1"] = ref.pop("ref_images.ref_image_1")
    only(_rule_errors(graph, offline), "is not a slot of 'ref_images'")


@pytest.mark.parametrize("vae", ["vae", "audio_vae"])
def test_missing_vae_is_the_hosts_required_input_error(offline, vae):
    """0.33.0 declares vae and audio_vae required on MiniMaxH3ReferenceToVideo (its /object_info): a missing one is a
    schema error, as /prompt reports it (no text-encoder-only path exists there)."""
    graph = _two_characters(offline)
    node_id = _ref_node_id(graph)
    del graph[node_id]["inputs"][vae]
    problem = only(_rule_errors(graph, offline), "required VAE input is missing")
    assert (problem.node_id, problem.input) == (node_id, vae)


def test_reference_images_take_image_only(offline):
    graph = _two_characters(offline)
    node_id = _ref_node_id(graph)
    graph["90"] = {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 672, "height": 384, "length": 124}}
    graph[node_id]["inputs"]["ref_images.ref_image_0"] = ["90", 0]
    problem = only(_rule_errors(graph, offline), "receives LATENT")
    assert problem.message.endswith("but needs IMAGE")


def test_prompt_counts_must_match_the_wired_references(offline):
    graph = _two_characters(offline)
    prompt_id = graph[_ref_node_id(graph)]["inputs"]["prompt"][0]
    bad = copy.deepcopy(graph)
    bad[prompt_id]["inputs"]["ref_images"] = 3
    problem = only(_rule_errors(bad, offline), "says 3 ref_images")
    assert problem.fix == "set ref_images to 2"
    bad = copy.deepcopy(graph)
    bad[prompt_id]["inputs"]["length"] = 124
    only(_rule_errors(bad, offline), "differs from node")


# ----------------------------------------------------------------------------- graph rules: every kind, pairing
def wired(graph: dict, images=(), videos=(), soundtracks=(), audios=(), declared=None) -> dict:
    """The two-character graph with references wired at the given slot numbers (links to a LoadImage/LoadAudio
    stand-in node "90"/"91"; the rules read the slot keys, not the source) and the prompt node's counts."""
    graph = copy.deepcopy(graph)
    graph["90"] = {"class_type": "LoadImage", "inputs": {"image": "ref.png"}}
    graph["91"] = {"class_type": "LoadAudio", "inputs": {"audio": "ref.wav"}}
    ref = graph[_ref_node_id(graph)]["inputs"]
    for key in [k for k in ref if k.startswith("ref_") and "." in k]:
        del ref[key]
    for group, slots, source in (("ref_images", images, "90"), ("ref_videos", videos, "90"),
                                 ("ref_video_audios", soundtracks, "91"), ("ref_audios", audios, "91")):
        for n in slots:
            ref[f"{group}.{group[:-1]}_{n}"] = [source, 0]
    prompt = graph[ref["prompt"][0]]["inputs"]
    prompt.update(declared or {"ref_images": len(images), "ref_videos": len(videos),
                               "ref_video_audios": len(set(soundtracks) & set(videos)), "ref_audios": len(audios)})
    return graph


def rule_problems(graph, offline, *names):
    from h3kit.checks import rules_ref2va

    rules = [getattr(rules_ref2va, name) for name in names] or rules_ref2va.REF2VA_RULES
    return [p for rule in rules for p in rule(graph, offline)]


def test_soundtrack_is_paired_with_its_video_by_number_not_by_count(offline):
    # Videos in slots 0 and 1, one soundtrack in slot 2: min(1, 2) would call it paired; the host drops it.
    graph = wired(_two_characters(offline), images=(0, 1), videos=(0, 1), soundtracks=(2,),
                  declared={"ref_images": 2, "ref_videos": 2, "ref_video_audios": 1, "ref_audios": 0})
    problems = rule_problems(graph, offline)
    drop = only(problems, "soundtrack slot 2 has no video at ref_videos.ref_video_2")
    assert drop.input == "ref_video_audios.ref_video_audio_2" and drop.severity == "error"
    assert "ref_video_audios.ref_video_audio_0" in drop.fix and "ref_audios" in drop.fix
    count = only(problems, "says 1 ref_video_audios")
    assert "has 0 soundtracks paired with a wired video of the same number" in count.message
    assert count.fix == "set ref_video_audios to 0"


@pytest.mark.parametrize(("videos", "soundtracks", "paired"), [
    ((0, 1, 2), (0, 1, 2), 3), ((0, 1, 2), (2,), 1), ((0, 2), (2,), 1), ((1,), (0, 1), 1), ((), (0, 1, 2), 0),
])
def test_several_videos_and_soundtracks_pair_slot_by_slot(offline, videos, soundtracks, paired):
    graph = wired(_two_characters(offline), images=(0, 1), videos=videos, soundtracks=soundtracks)
    prompt = graph[graph[_ref_node_id(graph)]["inputs"]["prompt"][0]]["inputs"]
    assert prompt["ref_video_audios"] == paired
    problems = rule_problems(graph, offline, "lint_ref2va_soundtrack_pairing", "lint_ref2va_prompt_counts")
    dropped = sorted(set(soundtracks) - set(videos))
    assert [p.input for p in problems] == [f"ref_video_audios.ref_video_audio_{n}" for n in dropped]


@pytest.mark.parametrize("group", list(SLOTS))
def test_each_prompt_count_is_checked_against_the_wiring_n_minus_1_n_n_plus_1(offline, group):
    slots = {"images": (0, 1, 2), "videos": (0, 1), "soundtracks": (0, 1), "audios": (0, 1)}
    graph = wired(_two_characters(offline), **slots)
    prompt_id = graph[_ref_node_id(graph)]["inputs"]["prompt"][0]
    wired_count = graph[prompt_id]["inputs"][group]
    assert wired_count == {"ref_images": 3}.get(group, 2)
    for declared in (wired_count - 1, wired_count, wired_count + 1):
        bad = copy.deepcopy(graph)
        bad[prompt_id]["inputs"][group] = declared
        problems = rule_problems(bad, offline, "lint_ref2va_prompt_counts")
        if declared == wired_count:
            assert problems == []
        else:
            assert only(problems, f"says {declared} {group}").fix == f"set {group} to {wired_count}"


@pytest.mark.parametrize("group", list(SLOTS))
def test_the_hosts_last_slot_is_taken_and_one_more_is_refused(offline, group):
    n = SLOTS[group]
    full = {"ref_images": "images", "ref_videos": "videos", "ref_video_audios": "soundtracks",
            "ref_audios": "audios"}
    slots = {"videos": tuple(range(3))} if group == "ref_video_audios" else {}
    graph = wired(_two_characters(offline), **{**slots, full[group]: tuple(range(n))})
    assert not [p for p in rule_problems(graph, offline, "lint_autogrow_api_form") if p.severity == "error"]
    ref = graph[_ref_node_id(graph)]["inputs"]
    ref[f"{group}.{group[:-1]}_{n}"] = ["90", 0]
    problem = only(rule_problems(graph, offline, "lint_autogrow_api_form"), "is not a slot of")
    assert problem.input == f"{group}.{group[:-1]}_{n}" and f"{group[:-1]}_{n - 1}" in problem.message


LIVE_REF2VA_GROUPS = {  # how ComfyUI 0.33.0's /object_info serves the Autogrow inputs (template holds the options)
    group: ["COMFY_AUTOGROW_V3", {"template": {"input": {"required": {group[:-1]: ["IMAGE", {}]}},
                                               "prefix": f"{group[:-1]}_", "min": 0, "max": n}}]
    for group, n in SLOTS.items()}


def test_the_served_autogrow_layout_is_read_too(offline):
    from h3kit.checks.rules_ref2va import autogrow_groups

    live = copy.deepcopy(offline)
    live["MiniMaxH3ReferenceToVideo"]["input"]["optional"].update(LIVE_REF2VA_GROUPS)
    groups = autogrow_groups(live["MiniMaxH3ReferenceToVideo"])
    assert {g: (o["prefix"], o["max"]) for g, o in groups.items()} == {
        g: (f"{g[:-1]}_", n) for g, n in SLOTS.items()}
    graph = wired(_two_characters(offline), images=tuple(range(10)))
    problem = only(rule_problems(graph, live, "lint_autogrow_api_form"), "is not a slot of")
    assert problem.input == "ref_images.ref_image_9"


# ----------------------------------------------------------------------------- tier (b)


@pytest.mark.comfyui
def test_ref2va_limits_are_the_hosts(comfyui_server):
    from h3kit.checks import facts
    from h3kit.checks.rules_ref2va import autogrow_groups, slot_prefix

    comfyui_server.require(NATIVE_H3)
    info = comfyui_server.object_info()["MiniMaxH3ReferenceToVideo"]
    length = info["input"]["required"]["length"][1]
    assert (length["min"], length["max"], length["step"]) == (facts.H3_LENGTH_MIN, facts.H3_LENGTH_HOST_MAX,
                                                              facts.H3_LENGTH_STEP)
    groups = autogrow_groups(info)
    assert {g: o["max"] for g, o in groups.items()} == facts.H3_REF_SLOTS
    assert all(o["prefix"] == slot_prefix(g) for g, o in groups.items())
    prompt = H3KitRef2VAPrompt.INPUT_TYPES()["required"]
    assert {g: prompt[g][1]["max"] for g in facts.H3_REF_SLOTS} == facts.H3_REF_SLOTS
    assert prompt["length"][1]["max"] == length["max"]


@pytest.mark.comfyui
def test_prompt_node_runs_on_the_real_server(comfyui_server):
    inputs = {**TWO, **TWO_COUNTS, "length": 243, "strict": True}
    graph = {
        "1": {"class_type": "H3KitRef2VAPrompt", "inputs": inputs, "_meta": {"title": "Ref2VA prompt"}},
        "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}, "_meta": {"title": "prompt"}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}, "_meta": {"title": "report"}},
    }
    entry = comfyui_server.run_graph(graph, timeout=60)
    assert entry["status"]["status_str"] == "success"
    prompt = entry["outputs"]["2"]["text"][0]
    assert prompt.startswith("subject_definitions:\n<Subject 1>") and "[Shot 3] 6-10s" in prompt
    report = json.loads(entry["outputs"]["3"]["text"][0])
    assert report["problems"] == 0
    if comfyui_server.has(NATIVE_H3):  # issue 30 row 6: no clip, so the node asks this server's own H3 tokenizer
        dialogue = report["dialogue_tokens"]
        if dialogue.startswith("split by this ComfyUI's MiniMax-H3 tokenizer (<d> -> ["):
            (warning,) = report["warnings"]
            assert "#15808" in warning and "H3KitRef2VAPrompt's 'clip' input" in warning
        else:
            assert dialogue.startswith("this ComfyUI's MiniMax-H3 tokenizer reads <d>, </d> as one token each")

    bad = copy.deepcopy(graph)
    bad["1"]["inputs"]["length"] = 240
    entry = comfyui_server.run_graph(bad, timeout=60)
    assert entry["status"]["status_str"] == "error"
    error = execution_error(entry)
    assert "length 240" in error["exception_message"] and "use 226 or 243" in error["exception_message"]
