"""Validate rules for Ref2VA graphs: Autogrow reference inputs in API form, VAEs, prompt counts vs wiring.

API-format prompts carry a V3 Autogrow group as one dotted key per slot: the core expands the group's
template into `<group>.<slot name>`, numbered (TemplatePrefix: "ref_images.ref_image_0", ...) or named
(TemplateNames: ComfyMathExpression's "values.a" .. "values.z"), and looks those keys up in the node's inputs
(comfy_api/latest/_io.py, Autogrow._expand_schema_for_dynamic; node_inputs.autogrow_group here). A list of
links under the bare group name (the shape some guides copy from UI workflows) matches no slot, so the
references never arrive and the node runs without them. Each rule: (graph, schemas) -> [Problem].
"""

from __future__ import annotations

import json
import re
from re import compile as regex

from .graph import input_kind, is_link
from .node_inputs import SECTIONS
from .problem import Problem
from .schemas import did_you_mean

REF2VA = "MiniMaxH3ReferenceToVideo"
PROMPT_NODE = "H3KitRef2VAPrompt"
VISUAL_GROUPS = ("ref_images", "ref_videos")
AUDIO_GROUPS = ("ref_video_audios", "ref_audios")


def autogrow_groups(info: dict) -> dict[str, dict]:
    """{group name: its spelled-out options (checks.graph.autogrow_options: "names", "prefix" (None for a named
    template), "min", "max", "types")} for every top-level Autogrow input of a node schema, served (`template`) or
    pinned-normalised. The slot names come from node_inputs.autogrow_group, the one source."""
    groups = {}
    sections = info.get("input") if isinstance(info.get("input"), dict) else {}
    for section in SECTIONS:
        entries = sections.get(section) if isinstance(sections.get(section), dict) else {}
        for name, spec in entries.items():
            kind, opts = input_kind(spec)
            if kind == "AUTOGROW" and "names" in opts:
                groups[name] = opts
    return groups


def slots_text(group: str, names: list[str]) -> str:
    """The slot keys of a group as a message shows them: all of a few, else the first and the last."""
    keys = [f"{group}.{n}" for n in names]
    return ", ".join(keys) if len(keys) <= 4 else f"{keys[0]} .. {keys[-1]}"


def _dotted_fix(group: str, names: list[str], links: list) -> str:
    keys = ", ".join(f'"{group}.{name}": {json.dumps(link)}' for name, link in zip(names, links, strict=False))
    return f"write one dotted key per reference: {keys}"


def lint_autogrow_api_form(graph: dict, schemas: dict) -> list[Problem]:
    """A list of links under the group name, or a dotted key that is no slot of the group, silently drops inputs:
    the host reads exactly `<group>.<slot name>` (numbered or named templates alike) and ignores the rest."""
    problems = []
    for nid, node in graph.items():
        if not isinstance(node, dict):
            continue
        ct = node.get("class_type")
        info = schemas.get(ct) if isinstance(ct, str) else None
        inputs = node.get("inputs", {}) if isinstance(node.get("inputs"), dict) else {}
        for group, opts in (autogrow_groups(info) if isinstance(info, dict) else {}).items():
            names = opts["names"]
            if group in inputs:
                value = inputs[group]
                links = [value] if is_link(value) else value if isinstance(value, list) else []
                links = [link for link in links if is_link(link)][:len(names)] or [["<node id>", 0]]
                problems.append(Problem(
                    str(nid), ct, group, value,
                    f"the Autogrow group '{group}' is written as a list of links (UI-workflow form); the API prompt "
                    f"reads one dotted key per slot, so ComfyUI ignores this and runs without these inputs",
                    _dotted_fix(group, names, links)))
            problems += _stray_slots(str(nid), ct, inputs, group, names, opts.get("prefix"))
            if ct == REF2VA and opts.get("prefix") is not None:
                problems += _slot_numbering(str(nid), ct, inputs, group, opts["prefix"], names)
    return problems


def _stray_slots(nid: str, ct: str, inputs: dict, group: str, names: list[str], prefix: str | None) -> list[Problem]:
    valid = {f"{group}.{n}" for n in names}
    problems = []
    for name in inputs:
        if not name.startswith(group + ".") or name in valid:
            continue
        near = None if prefix is not None else did_you_mean(name, valid)
        fix = (f"rename it to {group}.{prefix}<0..{len(names) - 1}>" if prefix is not None and names
               else f"rename it to {near}" if near else f"use one of the slots {slots_text(group, names)}")
        problems.append(Problem(nid, ct, name, inputs[name],
                                f"'{name}' is not a slot of '{group}' (slots: {slots_text(group, names)}); ComfyUI "
                                "ignores it and the input never arrives", fix))
    return problems


def _slot_numbering(nid: str, ct: str, inputs: dict, group: str, prefix: str, names: list[str]) -> list[Problem]:
    """The Ref2VA node numbers its references in slot order (<Picture 1> is the first wired slot), so a gap shifts
    the labels the prompt uses. Only numbered (prefix) templates: named slots carry no number."""
    used = [i for i, name in enumerate(names) if f"{group}.{name}" in inputs]
    if not used or used == list(range(len(used))):
        return []
    return [Problem(nid, ct, group, [f"{group}.{names[i]}" for i in used],
                    f"slots {used} are not numbered from 0 without gaps; the core numbers references in slot order, "
                    f"so the labels in the prompt shift (slot {used[0]} becomes number 1)",
                    f"use {group}.{prefix}0 .. {group}.{prefix}{len(used) - 1}", severity="warning")]


def slot_prefix(group: str) -> str:
    """The host's slot prefix of a reference group: ref_images -> ref_image_ (TemplatePrefix in the core node)."""
    return group[:-1] + "_"


def slot_numbers(node: dict, group: str) -> set[int]:
    """The slot numbers N of the `group.<prefix>N` keys wired to a link (the host's own numbering of the slots).
    Misspelled keys are not slots (lint_autogrow_api_form reports them)."""
    pattern = regex(re.escape(f"{group}.{slot_prefix(group)}") + r"(\d+)")
    numbers = set()
    for name, value in node.get("inputs", {}).items():
        match = pattern.fullmatch(name)
        if match and is_link(value):
            numbers.add(int(match.group(1)))
    return numbers


def connected_slots(node: dict, group: str) -> int:
    return len(slot_numbers(node, group))


def paired_soundtracks(node: dict) -> tuple[set[int], set[int]]:
    """(soundtrack slots whose video slot of the same number is wired, soundtrack slots without one). The host looks
    up `ref_video_audio_<N>` for each connected `ref_video_<N>`; a soundtrack without its video is never read."""
    videos, soundtracks = slot_numbers(node, "ref_videos"), slot_numbers(node, "ref_video_audios")
    return soundtracks & videos, soundtracks - videos


def lint_ref2va_soundtrack_pairing(graph: dict, schemas: dict) -> list[Problem]:
    """A soundtrack whose video is not wired at the same number is dropped by the host without a word."""
    problems = []
    for nid, node in graph.items():
        if not isinstance(node, dict) or node.get("class_type") != REF2VA:
            continue
        videos = slot_numbers(node, "ref_videos")
        free = sorted(videos - slot_numbers(node, "ref_video_audios"))  # wired videos without a soundtrack
        for number in sorted(paired_soundtracks(node)[1]):
            name = f"ref_video_audios.ref_video_audio_{number}"
            where = f"videos are wired at {', '.join(f'ref_video_{v}' for v in sorted(videos))}" if videos else \
                "no video is wired"
            fix = (f"move it to ref_video_audios.ref_video_audio_{free[0]} if it is the soundtrack of ref_video_"
                   f"{free[0]}, or " if free else "")
            problems.append(Problem(
                str(nid), REF2VA, name, node["inputs"].get(name),
                f"soundtrack slot {number} has no video at ref_videos.ref_video_{number} ({where}): the host pairs "
                "each soundtrack with the video of the same number and drops this one without an error",
                fix + "wire it as standalone audio (ref_audios.ref_audio_<k>)"))
    return problems


def lint_ref2va_prompt_counts(graph: dict, schemas: dict) -> list[Problem]:
    """H3KitRef2VAPrompt's reference counts and length must match the Ref2VA node its prompt feeds."""
    problems = []
    for nid, node in graph.items():
        if not isinstance(node, dict) or node.get("class_type") != REF2VA:
            continue
        link = node.get("inputs", {}).get("prompt")
        if not is_link(link) or not isinstance(graph.get(str(link[0])), dict):
            continue
        pid, pnode = str(link[0]), graph[str(link[0])]
        if pnode.get("class_type") != PROMPT_NODE:
            continue
        pinputs = pnode.get("inputs", {})
        wired = {group: connected_slots(node, group) for group in (*VISUAL_GROUPS, *AUDIO_GROUPS)}
        wired["ref_video_audios"] = len(paired_soundtracks(node)[0])  # only soundtracks the host pairs count
        for group, count in wired.items():
            declared = pinputs.get(group, 0)
            if isinstance(declared, int) and not isinstance(declared, bool) and declared != count:
                what = ("soundtracks paired with a wired video of the same number" if group == "ref_video_audios"
                        else f"{group} connected")
                problems.append(Problem(
                    pid, PROMPT_NODE, group, declared,
                    f"says {declared} {group} but node {nid} ({REF2VA}) has {count} {what}; the label checks "
                    "run against the wrong count",
                    f"set {group} to {count}"))
        length, ref_length = pinputs.get("length"), node.get("inputs", {}).get("length")
        if isinstance(length, int) and isinstance(ref_length, int) and length != ref_length:
            problems.append(Problem(
                pid, PROMPT_NODE, "length", length,
                f"differs from node {nid} ({REF2VA}) length {ref_length}; shot times are checked against the wrong clip",
                f"use the same length in both ({ref_length})"))
    return problems


REF2VA_RULES = [lint_autogrow_api_form, lint_ref2va_soundtrack_pairing, lint_ref2va_prompt_counts]
