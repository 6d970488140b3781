"""Where the first shot's description starts in a MiniMax-H3 prompt, and which of H3's dialogue tokens a prompt holds.

One parser for every prompt form the pack or the official templates write (the effect node places its markers with it,
the F15 lint names the same place in its fix). A shot heading opens a clause: it starts a line, follows a sentence end,
or follows the `integrated_multimodal_description:` / `detailed_description:` header on its line. A `[Shot k]` inside a
sentence is a reference to a shot, not a heading ("<Picture 1> is the first frame of [Shot 1], showing ...",
"<Subject 1> (appears in [Shot 1], [Shot 2])"). The forms, with where they come from:

  integrated_multimodal_description: [Shot 1] A dancer ...   the pack's prompts (field-notes §D: effects work there)
  detailed_description:\n ... [Shot 1] 0-3s <Subject 1> ...   six-section Ref2VA: H3KitRef2VAPrompt, ref-en.txt and the
                                                              official multiframe_reference template; only this
                                                              section is searched (subject_definitions and
                                                              retention_analysis cite [Shot k] too)
  [0s-1.5s] Shot 1: high side angle ...                       official t2v template (templates-json 0.1.47, 0.1.123)
  SHOT 1: The scene opens ...  /  CUT 1: top-down view ...    official i2v / r2v templates
  [0s-1s] VHS static opens the frame ...                      official templates' timed lines without a shot word

The description starts after the heading, a time prefix (`0-3s`, `At 00:01.500,`, `[0s-2s]`) and a separator.
Pure text, linear in the prompt's length: each pattern is anchored and its repetitions cannot overlap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from re import compile as regex

from .facts import H3_DIALOGUE_TOKENS

H3_SECTIONS = ("subject_definitions", "summary", "retention_analysis", "detailed_description", "overall_soundscape",
               "non_diegetic_music", "integrated_multimodal_description")
DESCRIPTION_SECTION = "detailed_description"
SECTION_HEADER = regex(r"^[ \t]*(" + "|".join(H3_SECTIONS) + r")[ \t]*:[ \t]*", re.MULTILINE)

_NUMBER = r"\d{1,4}(?:[.:]\d{1,3}){0,2}"
_SPAN = rf"{_NUMBER}[ \t]?s?[ \t]?(?:-|–|—|~|to)[ \t]?{_NUMBER}[ \t]?"  # 0-3, 0s-1.5, 00:03-00:05, 1 to 2
TIME_BRACKET = rf"\[[ \t]?{_SPAN}s?[ \t]?\]"  # [0s-1.5s], [00:00-00:03]
SHOT_LABEL = r"(?:\[[ \t]?shot[ \t]?\d{1,3}[ \t]?\]|(?:shot|cut)[ \t]?#?\d{1,3}[ \t]?[:\-–—])"
# A heading at a clause start: the label (optionally after a time bracket) or a time bracket alone.
HEADING = regex(rf"(?:{TIME_BRACKET}[ \t]{{0,4}})?{SHOT_LABEL}|{TIME_BRACKET}", re.IGNORECASE)
# After a heading: "0-3s" (seconds written out, as H3KitRef2VAPrompt reads shot times) or "At 00:01.500,".
TIME_PREFIX = regex(rf"[ \t]*(?:{TIME_BRACKET}|{_SPAN}s\b|at[ \t]\d{{1,2}}:\d{{2}}(?:\.\d{{1,3}})?)[ \t]*[,:]?",
                    re.IGNORECASE)
SEPARATOR = regex(r"[ \t]*[:\-–—,]?[ \t]*")
CLAUSE_START = regex(r"^[ \t]*|(?<=[.!?])[ \t]+|(?<=[\u3002\uff01\uff1f])[ \t]*", re.MULTILINE)
DIALOGUE_TOKEN = regex("|".join(re.escape(token) for token in H3_DIALOGUE_TOKENS))


@dataclass(frozen=True)
class ShotDescription:
    start: int  # index of the description's first character (after heading, time and separator)
    heading: str  # the heading as written, e.g. "[Shot 1]", "SHOT 1:", "[0s-1s]"
    section: str | None  # "detailed_description" in a six-section prompt, else None


def description_bounds(text: str) -> tuple[int, int, str | None]:
    """(start, end, section) of the part of the prompt that describes the video: the body of `detailed_description:`
    in a six-section prompt, else the whole text. Markers and fallbacks stay inside it."""
    headers = list(SECTION_HEADER.finditer(text))
    for index, header in enumerate(headers):
        if header.group(1) == DESCRIPTION_SECTION:
            end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
            return header.end(), end, DESCRIPTION_SECTION
    return 0, len(text), None


def clause_starts(text: str, start: int, end: int) -> list[int]:
    """Where a heading may begin: line starts, after a sentence end, after an H3 section header."""
    found = {match.end() for match in CLAUSE_START.finditer(text, start, end)}
    found.update(header.end() for header in SECTION_HEADER.finditer(text, start, end))
    found.add(start)
    return sorted(i for i in found if start <= i < end)


def first_shot_description(text: str) -> ShotDescription | None:
    """The first shot's description in `text` (see the module), or None when the prompt has no shot heading."""
    start, end, section = description_bounds(text)
    for at in clause_starts(text, start, end):
        heading = HEADING.match(text, at, end)
        if heading is None:
            continue
        after = heading.end()
        timed = TIME_PREFIX.match(text, after, end)
        if timed is not None and timed.end() > after:
            after = timed.end()
        after = SEPARATOR.match(text, after, end).end()
        return ShotDescription(after, heading.group(0), section)
    return None


def dialogue_tokens_in(text: str) -> list[str]:
    """H3's dialogue/lyrics special tokens present in `text`, each once, in order of first appearance."""
    seen: dict[str, None] = {}
    for match in DIALOGUE_TOKEN.finditer(text):
        seen.setdefault(match.group(0))
    return list(seen)
