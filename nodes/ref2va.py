"""Ref2VA multi-reference prompts: compose H3's six-section prompt from structured inputs and lint it.

MiniMax-H3's Ref2VA mode reads references as `<Picture i>` / `<Video k>` / `<Audio j>` (core
`MiniMaxH3ReferenceToVideo`, 1-based per type, in wiring order) and identities as `<Subject N>`.
The prompt has six sections in a fixed order (field-notes §C3, the official `ref-en.txt` guide):
subject_definitions, summary, retention_analysis, detailed_description, overall_soundscape,
non_diegetic_music. What goes wrong (field-notes §C6): labels without appearance text invent a
person (F30), Traditional-Chinese dialogue breaks mid-sentence (F29), lengths off the 17k+5 grid
(F20), labels that point at references that are not connected.

Every check names the section and the line. By default a problem stops the node
(H3KitInputError); `strict=false` composes anyway and lists the problems as report warnings.

Dialogue tokens: the prompt's `<d> ... </d>` are one token each for H3 (upstream Comfy-Org/ComfyUI#15808); ComfyUI
0.33.0's tokenizer splits them into ordinary BPE pieces, which weakens dialogue / lip-sync conditioning. With the text
encoder on `clip`, the node asks its tokenizer (nodes/effect_tokens.py) and hands on a `clip` whose tokenizer reads
them as upstream where the host splits them (the encoder itself unchanged where it does not); without it, the node
asks this ComfyUI's own MiniMax-H3 tokenizer and warns with the fix. The report's `dialogue_tokens` says which.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from re import compile as regex
from typing import Any

from ..checks import facts
from ..checks.rules_lints import prompt_encoders
from . import effect_tokens
from .common import H3KitInputError, Report, category

NODE_ID = "H3KitRef2VAPrompt"
SECTIONS = (
    "subject_definitions",
    "summary",
    "retention_analysis",
    "detailed_description",
    "overall_soundscape",
    "non_diegetic_music",
)
VISUAL_MARKERS = ("fully_preserved", "partially_preserved", "attribute_transfer", "weak_reference")
AUDIO_MARKERS = ("fully_copy", "partially_copy", "reference", "weak_reference")
TASK_TYPES = (
    "keyframe completion", "reference generation", "video editing",
    "video continuation", "audio reuse", "audio reference",
)
FPS = 24
MAX_REFS = facts.H3_REF_SLOTS  # the host's Autogrow slots per reference kind
MIN_DEFINITION_WORDS = 3
CHINESE_TAGS = ("chinese", "mandarin", "cantonese", "中文", "汉语", "漢語", "普通话", "国语", "國語")
ZH_TABLE_FILE = Path(__file__).resolve().parent.parent / "data" / "zh_trad_to_simp.json"

LABEL_LOOSE = regex(r"<\s*(subject|picture|video|audio)\s*(\d+)\s*>", re.IGNORECASE)
LABEL = regex(r"<(Subject|Picture|Video|Audio) ([1-9]\d*)>")
SHOT_TAG = regex(r"^\[Shot\s+(\d+)\]\s*(.*)$")
RANGE_TIME = regex(r"^(\d+(?:\.\d+)?)\s*s?\s*[-–~]\s*(\d+(?:\.\d+)?)\s*s\b[,:]?\s*")
AT_TIME = regex(r"^At\s+(\d{1,2}):(\d{2}(?:\.\d+)?)\s*[,:]?\s*", re.IGNORECASE)
DIALOGUE = regex(r"<d>(.*?)</d>", re.DOTALL)
DIALOGUE_BODY = regex(r"^\[([^\[\]<>()]+)\]\s*(\S.*)$", re.DOTALL)
SPEAKER = regex(r"\((S\d+(?:\s*,\s*S\d+)*)\)")
SUBJECT_SPEAKER = regex(r"<Subject ([1-9]\d*)>\s*\((S\d+)\)")
HEADER_LINE = regex(r"^\s*(" + "|".join(SECTIONS) + r"|integrated_multimodal_description)\s*:", re.MULTILINE)
SUMMARY_PREFIX = regex(r"^\[([^\]]+)\]\s*\S")
RETENTION_LINE = regex(r"^(<(?:Subject|Picture|Video|Audio) \d+>)[^:]*:\s*([A-Za-z_]+)\b")
HAN = regex(r"[\u3400-\u9fff\U00020000-\U0002ffff]")
WORD = regex(r"[a-z]+|[\u3400-\u9fff]")
# Words that say nothing about how a subject looks, so they never count as appearance text.
NOT_APPEARANCE = frozenset(
    "the and with from into onto that this these those who whom which whose what when where while "
    "is are was were be been being has have had its his her hers their them they she him you your "
    "for but not all any one two three some each very also just then than there here same other "
    "subject picture video audio shot shots reference references appears appear scene frame "
    "defined definition label labels target source asset assets featuring wearing looking "
    "left right front back side toward towards near beside behind over under across through "
    "says said speaks voice line lines 的 是 在 和 了 一 个 有 着 与 及".split()
)


@dataclass
class PromptProblem:
    """One problem in the composed prompt, located by section and line (1-based; 0 = whole section)."""

    section: str
    line: int
    text: str
    message: str
    fix: str
    input_name: str

    def __str__(self) -> str:
        where = f"{self.section} line {self.line}" if self.line else self.section
        excerpt = self.text if len(self.text) <= 90 else self.text[:87] + "..."
        shown = f" ({excerpt!r})" if excerpt else ""
        return f"{where}{shown}: {self.message}. Fix: {self.fix}"


@dataclass
class Shot:
    number: int
    line: int  # line of the [Shot k] tag inside detailed_description
    text: str  # the shot's full text, continuation lines included
    start: float | None
    end: float | None


# ----------------------------------------------------------------------------- data


@lru_cache(maxsize=1)
def trad_to_simp_table() -> dict[str, str]:
    """Single-character Traditional -> Simplified map shipped in data/zh_trad_to_simp.json (OpenCC data)."""
    return json.loads(ZH_TABLE_FILE.read_text(encoding="utf-8"))["map"]


def traditional_characters(text: str) -> list[tuple[str, str]]:
    """[(traditional, simplified)] for each distinct Traditional character in `text`, in order of appearance."""
    table = trad_to_simp_table()
    found: dict[str, str] = {}
    for char in text:
        if char in table and char not in found:
            found[char] = table[char]
    return list(found.items())


def to_simplified(text: str) -> str:
    """`text` with every Traditional character in the table replaced by its Simplified form."""
    table = trad_to_simp_table()
    return "".join(table.get(char, char) for char in text)


# ----------------------------------------------------------------------------- composing


def clean_lines(text: str) -> list[str]:
    """Non-empty lines with trailing whitespace removed (the sections are line-oriented)."""
    return [line.rstrip() for line in (text or "").replace("\r\n", "\n").split("\n") if line.strip()]


def compose_sections(sections: dict[str, list[str]]) -> str:
    """The published layout: `name:` on its own line, its lines below, one blank line between sections."""
    return "\n\n".join(f"{name}:\n" + "\n".join(sections[name]) for name in SECTIONS)


# ----------------------------------------------------------------------------- checks


class PromptLinter:
    """Checks one composed prompt; `problems` collects every finding (nothing stops at the first)."""

    def __init__(self, sections: dict[str, list[str]], origins: dict[str, list[tuple[str, int]]],
                 counts: dict[str, int], length: int):
        self.sections = sections
        self.origins = origins  # section -> [(input name, line in that input)] per composed line
        self.counts = counts
        self.length = length
        self.problems: list[PromptProblem] = []
        self.notes: list[PromptProblem] = []  # warnings that never stop the node (beyond trained/documented range)
        self.definitions: dict[str, tuple[int, str]] = {}  # own-line label -> (line, text)
        self.cited: set[str] = set()  # Picture/Video labels cited as a source inside a definition
        self.shots: list[Shot] = []
        self.speakers: dict[str, str] = {}

    def add(self, section: str, line: int, message: str, fix: str) -> None:
        lines = self.sections.get(section, [])
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        origin = self.origins.get(section, [])
        input_name = origin[line - 1][0] if 0 < line <= len(origin) else SECTION_INPUT[section]
        self.problems.append(PromptProblem(section, line, text, message, fix, input_name))

    def run(self) -> list[PromptProblem]:
        self.check_length()
        self.check_headers_and_spelling()
        self.check_empty_sections()
        self.check_definitions()
        self.check_labels_defined()
        self.check_reference_counts()
        self.check_summary()
        self.check_retention()
        self.parse_shots()
        self.check_shot_times()
        self.check_appearance()
        self.check_dialogue()
        self.check_speakers()
        return self.problems

    # -- length (F20): the host's limits stop the node, the trained range is a warning
    def check_length(self) -> None:
        n, low, high, trained = self.length, facts.H3_LENGTH_MIN, facts.H3_LENGTH_HOST_MAX, facts.H3_LENGTH_MAX
        if not low <= n <= high:
            fix = low if n < low else facts.nearest_h3_lengths(high)[0]
            self.problems.append(PromptProblem(
                "length", 0, str(n), f"length {n} is outside {low}..{high}, what MiniMaxH3ReferenceToVideo accepts",
                f"use {fix} (124 = 5.17 s, 243 = 10.125 s, {trained} = 15.08 s: the longest trained clip)", "length"))
        elif not facts.is_h3_length(n):
            below, above = facts.nearest_h3_lengths(n)
            nearest = f"{below}" if above > high else f"{below} or {above}"
            self.problems.append(PromptProblem(
                "length", 0, str(n), f"length {n} is not on H3's 17k+5 frame grid (5, 22, 39 ... 124, 243 ... "
                f"{trained}); the host snaps it up to {above} frames silently, so shot times would be checked "
                "against the wrong clip (F20)", f"use {nearest} (243 = 10.125 s, {trained} = 15.08 s)", "length"))
        elif n > trained:
            self.notes.append(PromptProblem(
                "length", 0, str(n), f"length {n} ({n / FPS:.2f} s) is beyond H3's trained range (up to {trained} = "
                f"15.08 s); the host accepts up to {high} frames, longer clips are untested",
                f"use {trained} or less for the quality H3 was trained for", "length"))

    # -- structure
    def check_headers_and_spelling(self) -> None:
        for section, lines in self.sections.items():
            for i, line in enumerate(lines, 1):
                if HEADER_LINE.match(line):
                    self.add(section, i, "a section header inside a field: the node writes the six headers itself",
                             "remove the header line and paste only that section's text into its input")
                for m in LABEL_LOOSE.finditer(line):
                    canonical = f"<{m.group(1).capitalize()} {int(m.group(2))}>"
                    if m.group(0) != canonical:
                        self.add(section, i, f"label {m.group(0)!r} is not written the way H3 reads labels",
                                 f"write {canonical}")

    def check_empty_sections(self) -> None:
        for section in ("subject_definitions", "summary", "retention_analysis", "detailed_description",
                        "overall_soundscape", "non_diegetic_music"):
            if not self.sections[section]:
                fix = ("write N/A when there is no score" if section == "non_diegetic_music"
                       else f"fill the '{SECTION_INPUT[section]}' input")
                self.add(section, 0, "the section is empty", fix)

    def check_definitions(self) -> None:
        for i, line in enumerate(self.sections["subject_definitions"], 1):
            labels = LABEL.findall(line)
            first = LABEL.match(line.lstrip())
            if not first:
                self.add("subject_definitions", i, "a definition line must start with the label it defines",
                         "start the line with <Subject N>, <Picture N>, <Video N> or <Audio N>")
                continue
            label = first.group(0)
            if label in self.definitions:
                self.add("subject_definitions", i,
                         f"{label} is defined twice (first on line {self.definitions[label][0]})",
                         "define each label exactly once; merge the two lines")
                continue
            self.definitions[label] = (i, line)
            for kind, number in labels[1:]:
                if kind in ("Picture", "Video"):
                    self.cited.add(f"<{kind} {number}>")
            if first.group(1) == "Subject" and len(appearance_words(line)) < MIN_DEFINITION_WORDS:
                self.add("subject_definitions", i,
                         f"{label} has almost no appearance text; a bare label makes the model invent a person (F30)",
                         "describe the subject head to toe: hair, face, clothing, build, colours")

    def check_labels_defined(self) -> None:
        known = set(self.definitions) | self.cited
        for section, lines in self.sections.items():
            for i, line in enumerate(lines, 1):
                for m in LABEL.finditer(line):
                    label = m.group(0)
                    if label in known:
                        continue
                    if section == "subject_definitions" and m.group(1) in ("Picture", "Video"):
                        continue  # a source citation, recorded in check_definitions
                    self.add(section, i, f"{label} is used but never defined in subject_definitions",
                             f"add a line '{label} is ...' to the definitions (input "
                             f"'{LABEL_INPUT[m.group(1)]}'), or fix the number")
                    known.add(label)  # report each undefined label once

    def check_reference_counts(self) -> None:
        """Labels against the connected references, numbered as MiniMaxH3ReferenceToVideo numbers them: pictures
        1..images, videos 1..videos, audios first the soundtracks (in video order), then the standalone audios."""
        images, videos = self.counts["ref_images"], self.counts["ref_videos"]
        soundtracks, standalone = self.counts["ref_video_audios"], self.counts["ref_audios"]
        audios = soundtracks + standalone
        if soundtracks > videos:
            self.add("subject_definitions", 0,
                     f"ref_video_audios={soundtracks} but only ref_videos={videos}: the host pairs each soundtrack "
                     "with the video of the same number (ref_video_audio_N with ref_video_N) and drops a soundtrack "
                     "whose video is not connected, so the <Audio N> numbers shift",
                     "connect the video of each soundtrack, or use ref_audios for standalone audio")
        if audios > facts.H3_REF_AUDIO_CLIPS_MAX:
            self.notes.append(PromptProblem(
                "subject_definitions", 0, "", f"{audios} audio references (soundtracks + ref_audios); the Ref2VA "
                f"checkpoint is documented for at most {facts.H3_REF_AUDIO_CLIPS_MAX} audio clips (15 s in all, "
                "field-notes §C1); the host accepts more, untested", "use at most "
                f"{facts.H3_REF_AUDIO_CLIPS_MAX} audio clips", "ref_audios"))
        if images + videos + audios > facts.H3_REF_FILES_MAX:
            self.notes.append(PromptProblem(
                "subject_definitions", 0, "", f"{images + videos + audios} reference files; the Ref2VA checkpoint is "
                f"documented for at most {facts.H3_REF_FILES_MAX} (field-notes §C1); the host accepts more, untested",
                f"use at most {facts.H3_REF_FILES_MAX} references", "ref_images"))
        available = {"Picture": images, "Video": videos, "Audio": audios}
        wiring = {"Picture": "ref_images", "Video": "ref_videos", "Audio": "ref_video_audios + ref_audios"}
        used: set[str] = set()
        for section, lines in self.sections.items():
            for i, line in enumerate(lines, 1):
                for kind, number in LABEL.findall(line):
                    label = f"<{kind} {number}>"
                    first_use = label not in used
                    used.add(label)
                    if kind in available and int(number) > available[kind] and first_use:
                        self.add(section, i, f"{label} needs {number} connected {kind.lower()} reference(s) but "
                                             f"{wiring[kind]} = {available[kind]}",
                                 f"connect {kind.lower()} reference {number} to MiniMaxH3ReferenceToVideo and set "
                                 f"the count input to match, or renumber the label")
        for label, (line, text) in self.definitions.items():
            kind, number = LABEL.match(label).groups()
            sources = [k for k, _ in LABEL.findall(text)[1:] if k in ("Picture", "Video")]
            if kind == "Subject" and not sources and int(number) > images + videos:
                self.add("subject_definitions", line,
                         f"{label} cites no reference and there are only {images + videos} visual references "
                         "connected, so no reference can carry it",
                         "cite its source ('... in <Picture k>') or connect another reference image")
        implicit = {f"<Picture {LABEL.match(label).group(2)}>" for label, (_, text) in self.definitions.items()
                    if label.startswith("<Subject") and not re.search(r"<(?:Picture|Video) \d+>", text)}
        for kind, count in available.items():
            for k in range(1, count + 1):
                label = f"<{kind} {k}>"
                if label not in used and label not in implicit:
                    self.add("subject_definitions", 0,
                             f"reference {NOUN[kind]} {k} is connected but no label points at it ({label})",
                             f"define or cite {label}, or disconnect the reference and lower the count")

    def check_summary(self) -> None:
        lines = self.sections["summary"]
        if not lines:
            return
        m = SUMMARY_PREFIX.match(lines[0])
        if not m:
            self.add("summary", 1, "the summary must start with its task type in brackets",
                     "start with [reference generation] (or e.g. [reference generation + audio reference])")
            return
        declared = [t.strip() for t in m.group(1).split("+")]
        for task in declared:
            if task not in TASK_TYPES:
                self.add("summary", 1, f"'{task}' is not a Ref2VA task type", "use " + ", ".join(TASK_TYPES))
        if len(set(declared)) != len(declared):
            self.add("summary", 1, "a task type is repeated", "name each task type once")

    def check_retention(self) -> None:
        seen: dict[str, int] = {}
        for i, line in enumerate(self.sections["retention_analysis"], 1):
            m = RETENTION_LINE.match(line.lstrip())
            if not m:
                self.add("retention_analysis", i, "not a retention line",
                         "write '<Subject N> (appears in [Shot 1]): fully_preserved - ...', one line per label")
                continue
            label, marker = m.groups()
            kind = LABEL.match(label).group(1)
            allowed = AUDIO_MARKERS if kind == "Audio" else VISUAL_MARKERS
            if marker not in allowed:
                which = "an audio" if kind == "Audio" else "a visual"
                self.add("retention_analysis", i, f"{label} is {which} reference; {marker!r} is not one of its markers",
                         "use one of: " + ", ".join(allowed))
            if label in seen:
                self.add("retention_analysis", i, f"{label} has a second retention line (first on line {seen[label]})",
                         "keep one marker per reference")
            seen[label] = i
            if SPEAKER.search(line):
                self.add("retention_analysis", i, "speaker ids (Sx) do not belong in retention_analysis",
                         "remove the (Sx); speaker ids go in subject_definitions and detailed_description")
        for label in self.definitions:
            if label not in seen:
                kind = LABEL.match(label).group(1)
                example = "reference" if kind == "Audio" else "fully_preserved"
                self.add("retention_analysis", 0, f"{label} has no retention marker",
                         f"add a line '{label}: {example} - ...' to the 'retention' input")

    # -- shots
    def parse_shots(self) -> None:
        current: Shot | None = None
        for i, line in enumerate(self.sections["detailed_description"], 1):
            m = SHOT_TAG.match(line.strip())
            if not m:
                if current is not None:
                    current.text += "\n" + line
                continue
            rest = m.group(2)
            start = end = None
            if r := RANGE_TIME.match(rest):
                start, end = float(r.group(1)), float(r.group(2))
            elif a := AT_TIME.match(rest):
                start = int(a.group(1)) * 60 + float(a.group(2))
            current = Shot(int(m.group(1)), i, rest, start, end)
            self.shots.append(current)
        if self.sections["detailed_description"] and not self.shots:
            self.add("detailed_description", 0, "no [Shot 1] line",
                     "write timed shots: '[Shot 1] 0-3s <Subject 1>, the woman in the red coat, ...'")

    def check_shot_times(self) -> None:
        clip = self.length / FPS
        previous_end = 0.0
        for index, shot in enumerate(self.shots):
            if shot.number != index + 1:
                self.add("detailed_description", shot.line, f"[Shot {shot.number}] is shot {index + 1} in order",
                         f"number the shots 1, 2, 3 ... in playback order (this one: [Shot {index + 1}])")
            if shot.start is None:
                if index == 0:
                    shot.start = 0.0  # the published format leaves the opening shot untimed
                else:
                    self.add("detailed_description", shot.line, f"[Shot {shot.number}] has no time",
                             "give its range after the tag, '[Shot 2] 3-6s ...' or '[Shot 2] At 00:03.000, ...'")
                    continue
            if shot.end is not None and shot.end <= shot.start:
                self.add("detailed_description", shot.line, f"[Shot {shot.number}] ends ({shot.end:g} s) before it starts "
                         f"({shot.start:g} s)", "write the range as start-end with end > start")
            if shot.start < previous_end - 1e-6:
                self.add("detailed_description", shot.line,
                         f"[Shot {shot.number}] starts at {shot.start:g} s, before the previous shot ends "
                         f"({previous_end:g} s)", "keep shots in order and non-overlapping")
            last = shot.end if shot.end is not None else shot.start
            if last > clip + 1e-6 or shot.start >= clip:
                self.add("detailed_description", shot.line,
                         f"[Shot {shot.number}] reaches {last:g} s but the clip is {clip:.3f} s (length {self.length})",
                         f"end every shot by {clip:.3f} s, or raise length on the 17k+5 grid")
            previous_end = max(previous_end, last)

    def check_appearance(self) -> None:
        """F30: every shot that names a subject also carries appearance words for it."""
        described = {label: appearance_words(text) for label, (_, text) in self.definitions.items()
                     if label.startswith("<Subject")}
        for shot in self.shots:
            visible = DIALOGUE.sub(" ", shot.text)
            shot_words = appearance_words(visible)
            for label in dict.fromkeys(m.group(0) for m in LABEL.finditer(visible) if m.group(1) == "Subject"):
                if label in described and not (described[label] & shot_words):
                    self.add("detailed_description", shot.line,
                             f"[Shot {shot.number}] names {label} without appearance words; the label alone makes "
                             "the model invent a person (F30)",
                             f"restate identifying appearance next to {label}, e.g. '{label}, the "
                             + " ".join(sorted(described[label])[:3]) + " ...'")

    def check_dialogue(self) -> None:
        for section, lines in self.sections.items():
            text = "\n".join(lines)
            if section != "detailed_description" and "<d>" in text:
                line = next(i for i, ln in enumerate(lines, 1) if "<d>" in ln)
                self.add(section, line, "dialogue <d> belongs in detailed_description only",
                         "move the line into the shot where it is spoken")
        for shot in self.shots:
            opened, closed = shot.text.count("<d>"), shot.text.count("</d>")
            if opened != closed:
                self.add("detailed_description", shot.line, f"[Shot {shot.number}] has {opened} <d> and {closed} </d>",
                         "close every line: <d>[Chinese] ...</d>")
            for m in DIALOGUE.finditer(shot.text):
                self.check_dialogue_body(shot, m.group(1))
            if "<d>" in shot.text and not SPEAKER.search(shot.text) and "<Audio " not in shot.text:
                self.add("detailed_description", shot.line, f"[Shot {shot.number}] has dialogue but no speaker id",
                         "put the speaker id after the speaker, e.g. '<Subject 1> (S1) says, <d>[Chinese] ...</d>'")

    def check_dialogue_body(self, shot: Shot, body: str) -> None:
        m = DIALOGUE_BODY.match(body.strip())
        if not m:
            self.add("detailed_description", shot.line,
                     f"[Shot {shot.number}] <d>{body}</d> must hold only the [Language] tag and the spoken line",
                     "write <d>[Chinese] the exact words</d>; speaker, tone and action go outside the tag")
            return
        language, words = m.group(1).strip(), m.group(2).strip()
        if LABEL_LOOSE.search(words) or re.search(r"\[[^\]]*\]|<[^>]*>|\([^)]*\)|（[^）]*）", words):
            self.add("detailed_description", shot.line,
                     f"[Shot {shot.number}] <d> holds more than the language tag and the line: {words!r}",
                     "keep labels, speaker ids, [tags] and (stage directions) outside <d>...</d>")
        if any(tag in language.lower() for tag in CHINESE_TAGS):
            found = traditional_characters(words)
            if found:
                pairs = ", ".join(f"{t}→{s}" for t, s in found)
                self.add("detailed_description", shot.line,
                         f"[Shot {shot.number}] Chinese dialogue has Traditional characters ({pairs}); H3 breaks "
                         "Traditional lines mid-sentence (F29)",
                         f"use Simplified: <d>[{language}] {to_simplified(words)}</d>")

    def check_speakers(self) -> None:
        """Speaker ids are stable: one id per subject, one subject per id, introduced S1, S2, ... in order."""
        owner_line: dict[str, int] = {}
        subject_of: dict[str, str] = {}
        id_of: dict[str, str] = {}
        introduced: list[int] = []
        for shot in self.shots:
            visible = DIALOGUE.sub(" ", shot.text)
            for m in SPEAKER.finditer(visible):
                for sid in re.split(r"\s*,\s*", m.group(1)):
                    number = int(sid[1:])
                    if number not in introduced:
                        expected = len(introduced) + 1
                        if number != expected:
                            self.add("detailed_description", shot.line,
                                     f"[Shot {shot.number}] introduces ({sid}) before (S{expected})",
                                     "number speakers in the order they first speak: S1, S2, ...")
                        introduced.append(number)
            for number, sid in SUBJECT_SPEAKER.findall(visible):
                subject = f"<Subject {number}>"
                if sid in subject_of and subject_of[sid] != subject:
                    self.add("detailed_description", shot.line,
                             f"[Shot {shot.number}] gives ({sid}) to {subject}, but it was {subject_of[sid]}'s id "
                             f"(shot line {owner_line[sid]})", "keep each speaker id on one subject for the whole clip")
                elif subject in id_of and id_of[subject] != sid:
                    self.add("detailed_description", shot.line,
                             f"[Shot {shot.number}] calls {subject} ({sid}), but it spoke as ({id_of[subject]}) before",
                             f"keep ({id_of[subject]}) for {subject} in every shot")
                else:
                    subject_of.setdefault(sid, subject)
                    id_of.setdefault(subject, sid)
                    owner_line.setdefault(sid, shot.line)
        self.speakers = {sid: subject for sid, subject in subject_of.items()}


def appearance_words(text: str) -> set[str]:
    """Words that can describe how something looks: labels, speaker ids, dialogue and filler removed."""
    text = DIALOGUE.sub(" ", LABEL_LOOSE.sub(" ", SPEAKER.sub(" ", text)))
    return {w for w in WORD.findall(text.lower()) if (len(w) >= 3 or HAN.match(w)) and w not in NOT_APPEARANCE}


SECTION_INPUT = {
    "subject_definitions": "subjects", "summary": "summary", "retention_analysis": "retention",
    "detailed_description": "shots", "overall_soundscape": "soundscape", "non_diegetic_music": "music",
    "length": "length",
}
NOUN = {"Picture": "image", "Video": "video", "Audio": "audio"}
LABEL_INPUT = {"Subject": "subjects", "Picture": "pictures", "Video": "videos", "Audio": "audios"}


def build_prompt(fields: dict[str, str], counts: dict[str, int], length: int
                 ) -> tuple[str, list[PromptProblem], PromptLinter]:
    """Compose the six sections from the node's text inputs and lint them. Pure: no host, no I/O."""
    sections: dict[str, list[str]] = {}
    origins: dict[str, list[tuple[str, int]]] = {}
    definition_inputs = ("subjects", "pictures", "videos", "audios")
    sections["subject_definitions"], origins["subject_definitions"] = [], []
    for name in definition_inputs:
        for n, line in enumerate(clean_lines(fields.get(name, "")), 1):
            sections["subject_definitions"].append(line)
            origins["subject_definitions"].append((name, n))
    for section in SECTIONS[1:]:
        name = SECTION_INPUT[section]
        lines = clean_lines(fields.get(name, ""))
        sections[section] = lines
        origins[section] = [(name, n) for n in range(1, len(lines) + 1)]
    linter = PromptLinter(sections, origins, counts, length)
    problems = linter.run()
    return compose_sections(sections), problems, linter


# ----------------------------------------------------------------------------- node


def _text(tooltip: str, default: str = "") -> tuple[str, dict]:
    return ("STRING", {"multiline": True, "default": default, "tooltip": tooltip})


COUNT_TOOLTIPS = {
    "ref_images": "images wired into MiniMaxH3ReferenceToVideo's ref_images (<Picture 1..N>)",
    "ref_videos": "videos wired into ref_videos (<Video 1..N>)",
    "ref_video_audios": "connected videos whose soundtrack is wired too: ref_video_audio_N next to ref_video_N "
                        "(the host pairs them by number; their <Audio> labels come first, in video order)",
    "ref_audios": "standalone audios wired into ref_audios (<Audio> labels after the soundtracks)",
}


def _count(name: str) -> tuple[str, dict]:
    return ("INT", {"default": 0, "min": 0, "max": MAX_REFS[name], "tooltip":
                    f"How many {COUNT_TOOLTIPS[name]} (0..{MAX_REFS[name]}, the host's slots); labels are "
                    "checked against it."})


def audio_numbering(counts: dict[str, int]) -> dict[str, str]:
    """Which reference each <Audio j> is, in the order MiniMaxH3ReferenceToVideo numbers them."""
    soundtracks, standalone = counts["ref_video_audios"], counts["ref_audios"]
    numbering = {}
    if soundtracks:
        numbering[_label_range("Audio", 1, soundtracks)] = "soundtracks of the connected videos, in video order"
    if standalone:
        numbering[_label_range("Audio", soundtracks + 1, soundtracks + standalone)] = "ref_audios, in slot order"
    return numbering


def _label_range(kind: str, first: int, last: int) -> str:
    return f"<{kind} {first}>" if first == last else f"<{kind} {first}>..<{kind} {last}>"


class H3KitRef2VAPrompt:
    """Compose and lint a MiniMax-H3 Ref2VA prompt (six sections, fixed order)."""

    DISPLAY_NAME = "H3Kit Ref2VA Prompt"
    CATEGORY = category("Prompt")
    DESCRIPTION = (
        "Builds the six-section Ref2VA prompt for MiniMaxH3ReferenceToVideo (subject_definitions, summary, "
        "retention_analysis, detailed_description, overall_soundscape, non_diegetic_music) and checks it: "
        "labels defined once and matching the connected references (numbered as the host numbers them: a video's "
        "soundtrack is the <Audio> before the standalone audios), retention markers, appearance text in every shot "
        "(bare labels invent people), shot times inside the clip, <d>[Language] line</d>, stable speaker ids, "
        "Simplified Chinese, length on the 17k+5 grid within the host's 5..3600. Problems stop the node unless "
        "strict is off; a length beyond the trained 362 frames or more references than the checkpoint is "
        "documented for are warnings. Connect the text encoder to 'clip' and feed its 'clip' output to "
        "MiniMaxH3ReferenceToVideo: where this ComfyUI's tokenizer splits the dialogue tokens <d> </d> into BPE "
        "pieces (0.33.0), that clip reads them as one token each, as upstream ComfyUI does (#15808); the report says "
        "which happened."
    )
    FUNCTION = "compose"
    RETURN_TYPES = ("STRING", "STRING", "CLIP")
    RETURN_NAMES = ("prompt", "report", "clip")

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "subjects": _text("One line per subject: '<Subject 1> is the young woman in <Picture 1>, with long "
                                  "dark hair, a blue cardigan ...' (or '<Subject 1>: appearance'). Full appearance."),
                "summary": _text("One paragraph starting with the task type, e.g. '[reference generation] "
                                 "<Subject 1> meets <Subject 2> in a rainy street.'"),
                "retention": _text("One line per defined label: '<Subject 1> (appears in [Shot 1]): fully_preserved "
                                   "- ...'. Visual: fully_preserved, partially_preserved, attribute_transfer, "
                                   "weak_reference. Audio: fully_copy, partially_copy, reference, weak_reference."),
                "shots": _text("Optional style sentence, then one line per shot: '[Shot 1] 0-3s <Subject 1> (S1), "
                               "the woman in the blue cardigan, says <d>[Chinese] 你好。</d>' (or '[Shot 2] At "
                               "00:03.000, ...'). Restate identifying appearance in every shot."),
                "soundscape": _text("overall_soundscape: diegetic sounds only (ambience, physical sounds)."),
                "music": _text("non_diegetic_music: the score only the audience hears, or N/A.", "N/A"),
                "length": ("INT", {"default": 243, "min": facts.H3_LENGTH_MIN, "max": facts.H3_LENGTH_HOST_MAX,
                                   "step": facts.H3_LENGTH_STEP, "tooltip":
                                   f"Frames at 24 fps on H3's 17k+5 grid (124 = 5.17 s, 243 = 10.125 s, "
                                   f"{facts.H3_LENGTH_MAX} = 15.08 s, the longest trained clip; the host accepts up "
                                   f"to {facts.H3_LENGTH_HOST_MAX}, longer than {facts.H3_LENGTH_MAX} is a warning). "
                                   "Use the same value as MiniMaxH3ReferenceToVideo's length."}),
                "ref_images": _count("ref_images"),
                "ref_videos": _count("ref_videos"),
                "ref_video_audios": _count("ref_video_audios"),
                "ref_audios": _count("ref_audios"),
                "strict": ("BOOLEAN", {"default": True, "tooltip":
                                       "On: any problem stops the node with the list of fixes. Off: the prompt is "
                                       "composed anyway and the problems are warnings in the report."}),
            },
            "optional": {
                "pictures": _text("Standalone <Picture N> lines, for images used as concrete frames: '<Picture 2> is "
                                  "the first frame of [Shot 1], ...'. Images that only define a subject are cited in "
                                  "its line instead."),
                "videos": _text("<Video N> lines: '<Video 1> is the source video for the target video edit.'"),
                "audios": _text("<Audio N> lines: '<Audio 1> is the voice-timbre reference for <Subject 1> (S1).'"),
                "clip": ("CLIP", {"tooltip": "The MiniMax-H3 text encoder (CLIPLoader type 'minimax'). Its copy on the "
                                             "'clip' output reads the dialogue tokens <d> </d> as one token each (as "
                                             "upstream ComfyUI #15808) where this host splits them; give "
                                             "MiniMaxH3ReferenceToVideo that clip together with the prompt."}),
            },
            "hidden": {"graph": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    def compose(self, subjects: str, summary: str, retention: str, shots: str, soundscape: str, music: str,
                length: int, ref_images: int, ref_videos: int, ref_video_audios: int, ref_audios: int,
                strict: bool = True, pictures: str = "", videos: str = "", audios: str = "", clip: Any = None,
                graph: dict | None = None, unique_id: Any = None) -> tuple[str, str, Any]:
        counts = {"ref_images": ref_images, "ref_videos": ref_videos,
                  "ref_video_audios": ref_video_audios, "ref_audios": ref_audios}
        for name, value in counts.items():
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_REFS[name]:
                raise H3KitInputError(NODE_ID, name, value, f"must be a whole number 0..{MAX_REFS[name]}",
                                      f"set it to the number of references wired into {name}")
        fields = {"subjects": subjects, "summary": summary, "retention": retention, "shots": shots,
                  "soundscape": soundscape, "music": music, "pictures": pictures, "videos": videos, "audios": audios}
        prompt, problems, linter = build_prompt(fields, counts, length)
        if problems and strict:
            first = problems[0]
            listing = [f"  {i}. {p}" for i, p in enumerate(problems, 1)]
            raise H3KitInputError(NODE_ID, first.input_name, first.text or length,
                                  [f"{len(problems)} Ref2VA prompt problem(s):", *listing, ""],
                                  "correct the lines listed above, or set strict to false to compose anyway "
                                  "with these as report warnings")
        report = Report(NODE_ID).set(
            length=length, seconds=round(length / FPS, 3), references=counts,
            labels=sorted(linter.definitions, key=_label_order),
            shots=[{"shot": s.number, "start_s": s.start, "end_s": s.end} for s in linter.shots],
            speakers=linter.speakers, strict=strict, problems=len(problems),
            audio_numbering=audio_numbering(counts),
        )
        for problem in problems + linter.notes:
            report.warn(str(problem))
        encoder = dialogue_clip(clip, prompt, report, graph, unique_id)
        return prompt, report.json(), encoder


FIX_DIALOGUE = ("connect the text encoder (CLIPLoader) to H3KitRef2VAPrompt's 'clip' input and its 'clip' output to "
                "MiniMaxH3ReferenceToVideo's 'clip'")


def dialogue_clip(clip: Any, prompt: str, report: Report, graph: Any, unique_id: Any) -> Any:
    """The clip to hand on (None without one), the report saying how the prompt's dialogue tokens are read, and a
    warning for each encoder of the prompt that bypasses the fix on a host that splits them."""
    if clip is None:
        split = effect_tokens.report_served_dialogue(NODE_ID, prompt, [], report, FIX_DIALOGUE) is False
        encoder = None
    else:
        if not callable(getattr(clip, "clone", None)) or getattr(clip, "tokenizer", None) is None:
            raise H3KitInputError(NODE_ID, "clip", type(clip).__name__, "not a ComfyUI CLIP (no tokenizer/clone)",
                                  effect_tokens.FIX_ENCODER)
        tokenizer = effect_tokens.prepare_dialogue(NODE_ID, clip.tokenizer, prompt, report)
        split = tokenizer is not clip.tokenizer
        encoder = clip
        if split:
            encoder = clip.clone()
            encoder.tokenizer = tokenizer
    if split and isinstance(graph, dict) and unique_id is not None:
        for cid, consumer, ours in prompt_encoders(graph, str(unique_id)):
            if not ours:
                report.warn(f"node {cid} ({consumer.get('class_type', '?')}) encodes this prompt with another clip, "
                            "so its dialogue tokens are split into BPE pieces there; fix: " + FIX_DIALOGUE)
    return encoder


def _label_order(label: str) -> tuple[int, int]:
    kind, number = LABEL.match(label).groups()
    return ("Subject", "Picture", "Video", "Audio").index(kind), int(number)


NODES = [H3KitRef2VAPrompt]
