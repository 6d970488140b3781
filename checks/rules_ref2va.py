"""Validate rules for Ref2VA graphs: Autogrow reference inputs in API form, VAEs, prompt counts vs wiring.

API-format prompts carry a V3 Autogrow group as one dotted key per slot: the core expands the group's
template into `finalize_prefix([group], prefix + i)` = `"ref_images.ref_image_0"`, ... and looks those
keys up in the node's inputs (comfy_api/latest/_io.py, Autogrow._expand_schema_for_dynamic). A list of
links under the bare group name (the shape some guides copy from UI workflows) matches no slot, so the
references never arrive and the node runs without them. Each rule: (graph, schemas) -> [Problem].
"""

from __future__ import annotations

import json

from .graph import input_kind, is_link
from .problem import Problem

REF2VA = "MiniMaxH3ReferenceToVideo"
PROMPT_NODE = "H3KitRef2VAPrompt"
VISUAL_GROUPS = ("ref_images", "ref_videos")
AUDIO_GROUPS = ("ref_video_audios", "ref_audios")


def autogrow_groups(info: dict) -> dict[str, dict]:
    """{group name: options} for every Autogrow input of a node schema."""
    groups = {}
    for section in ("required", "optional"):
        for name, spec in info.get("input", {}).get(section, {}).items():
            kind, opts = input_kind(spec)
            if kind == "AUTOGROW":
                groups[name] = opts
    return groups


def _dotted_fix(group: str, prefix: str, links: list) -> str:
    keys = ", ".join(f'"{group}.{prefix}{i}": {json.dumps(link)}' for i, link in enumerate(links))
    return f"write one dotted key per reference: {keys}"


def lint_autogrow_api_form(graph: dict, schemas: dict) -> list[Problem]:
    """A list of links under the group name, or a misspelled dotted slot, silently drops references."""
    problems = []
    for nid, node in graph.items():
        if not isinstance(node, dict):
            continue
        ct = node.get("class_type")
        groups = autogrow_groups(schemas.get(ct, {}))
        inputs = node.get("inputs", {}) if isinstance(node.get("inputs"), dict) else {}
        for group, opts in groups.items():
            prefix, top = opts.get("prefix", ""), int(opts.get("max", 0))
            if group in inputs:
                value = inputs[group]
                links = [value] if is_link(value) else value if isinstance(value, list) else []
                links = [link for link in links if is_link(link)][:top] or [["<node id>", 0]]
                problems.append(Problem(
                    str(nid), ct, group, value,
                    f"the Autogrow group '{group}' is written as a list of links (UI-workflow form); the API prompt "
                    f"reads one dotted key per slot, so ComfyUI ignores this and runs without these references",
                    _dotted_fix(group, prefix, links)))
            valid = {f"{group}.{prefix}{i}" for i in range(top)}
            for name in inputs:
                if name.startswith(group + ".") and name not in valid:
                    problems.append(Problem(
                        str(nid), ct, name, inputs[name],
                        f"'{name}' is not a slot of '{group}' (slots: {group}.{prefix}0 .. {group}.{prefix}{top - 1}); "
                        "ComfyUI ignores it and the reference never arrives",
                        f"rename it to {group}.{prefix}<0..{top - 1}>"))
            used = sorted(int(name.rsplit("_", 1)[-1]) for name in inputs if name in valid)
            if used and used != list(range(len(used))):
                problems.append(Problem(
                    str(nid), ct, group, [f"{group}.{prefix}{i}" for i in used],
                    f"slots {used} are not numbered from 0 without gaps; the core numbers references in slot order, "
                    f"so the labels in the prompt shift (slot {used[0]} becomes number 1)",
                    f"use {group}.{prefix}0 .. {group}.{prefix}{len(used) - 1}", severity="warning"))
    return problems


def connected_slots(node: dict, group: str) -> int:
    return sum(1 for name, value in node.get("inputs", {}).items() if name.startswith(group + ".") and is_link(value))


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
        for group in (*VISUAL_GROUPS, *AUDIO_GROUPS):
            wired, declared = connected_slots(node, group), pinputs.get(group, 0)
            if isinstance(declared, int) and declared != wired:
                problems.append(Problem(
                    pid, PROMPT_NODE, group, declared,
                    f"says {declared} {group} but node {nid} ({REF2VA}) has {wired} connected; the label checks "
                    "run against the wrong count",
                    f"set {group} to {wired}"))
        length, ref_length = pinputs.get("length"), node.get("inputs", {}).get("length")
        if isinstance(length, int) and isinstance(ref_length, int) and length != ref_length:
            problems.append(Problem(
                pid, PROMPT_NODE, "length", length,
                f"differs from node {nid} ({REF2VA}) length {ref_length}; shot times are checked against the wrong clip",
                f"use the same length in both ({ref_length})"))
    return problems


REF2VA_RULES = [lint_autogrow_api_form, lint_ref2va_prompt_counts]
