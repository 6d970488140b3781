"""Validate rules for the two-stage pipeline's grids: sizes, frame lengths, draft vs output, refine sigmas.

The schema checks already catch widget values off a node's step (H3 length step 17, sizes step 32/64). These
rules add what a schema cannot see: values that arrive through Primitive nodes, the relation between the H3
draft and the LTX output (draft exactly half the output, 17k+5 -> 8n+1), and the refine's first sigma (F23).
Each rule: (graph, schemas) -> [Problem]. Arithmetic comes from nodes/pipeline_math.py, shared with the nodes.
"""

from __future__ import annotations

from typing import Any

from ..nodes import pipeline_math as pm
from .validate import Problem, is_link

H3_LATENT_NODES = ("EmptyMiniMaxH3LatentAV", "MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo")
LTX_LATENT_NODES = ("EmptyLTXVLatentVideo",)
HANDOFF = "H3KitDraftToLTX"
REFINE_SETUP = "H3KitRefineSetup"
PRIMITIVES = ("PrimitiveInt", "PrimitiveFloat", "PrimitiveString", "PrimitiveBoolean")
UNKNOWN = object()


def resolve(graph: dict, value: Any) -> Any:
    """A widget value, or the value of the Primitive node it links to; UNKNOWN when only the run knows it."""
    if not is_link(value):
        return value
    src = graph.get(str(value[0]))
    if isinstance(src, dict) and src.get("class_type") in PRIMITIVES and value[1] == 0:
        inner = src.get("inputs", {}).get("value", UNKNOWN)
        return UNKNOWN if is_link(inner) else inner
    return UNKNOWN


def _int_input(graph: dict, node: dict, name: str) -> int | None:
    value = resolve(graph, node.get("inputs", {}).get(name, UNKNOWN))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return None
    return int(value)


def _nodes(graph: dict, class_types: tuple[str, ...]):
    for node_id, node in graph.items():
        if isinstance(node, dict) and node.get("class_type") in class_types:
            yield str(node_id), node


# ------------------------------------------------------------------------------------ sizes and lengths
def _side_problems(graph, node_id, node, names, multiple, why) -> list[Problem]:
    problems = []
    for name in names:
        value = _int_input(graph, node, name)
        if value is not None and value % multiple:
            problems.append(Problem(node_id, node["class_type"], name, value, f"{name} {value} is not a multiple of "
                                    f"{multiple} ({why})", f"use {pm.describe_nearest(value, multiple)}"))
    return problems


def lint_sizes_and_lengths(graph: dict, schemas: dict) -> list[Problem]:
    """H3 sides on 32 and length on 17k+5 (F19, F20); LTX sides on 32 and length on 8n+1; handoff target on 64."""
    problems: list[Problem] = []
    for node_id, node in _nodes(graph, H3_LATENT_NODES):
        problems += _side_problems(graph, node_id, node, ("width", "height"), pm.H3_SIDE_MULTIPLE,
                                   "H3's latent floors other sizes silently, F19")
        length = _int_input(graph, node, "length")
        if length is not None and not pm.is_h3_length(length):
            below, above = pm.nearest_h3_lengths(length)
            problems.append(Problem(node_id, node["class_type"], "length", length,
                                    f"{length} frames is not on H3's 17k+5 grid; the node snaps it up silently (F20)",
                                    f"use {below} or {above} (124 = 5.17 s at 24 fps)"))
        elif length is not None and length > pm.H3_LENGTH_MAX:
            problems.append(Problem(node_id, node["class_type"], "length", length,
                                    f"{length} frames is beyond H3's trained range (up to {pm.H3_LENGTH_MAX} = 15.08 s)",
                                    f"use at most {pm.H3_LENGTH_MAX}", severity="warning"))
    for node_id, node in _nodes(graph, LTX_LATENT_NODES):
        problems += _side_problems(graph, node_id, node, ("width", "height"), 32, "LTX latents are /32")
        length = _int_input(graph, node, "length")
        if length is not None and not pm.is_ltx_length(length):
            problems.append(Problem(node_id, node["class_type"], "length", length,
                                    f"{length} frames is not on LTX's 8n+1 grid",
                                    f"use {pm.ltx_trim_length(length)} or {pm.ltx_pad_length(length)}"))
    for node_id, node in _nodes(graph, (HANDOFF,)):
        problems += _side_problems(graph, node_id, node, ("target_width", "target_height"), pm.OUTPUT_SIDE_MULTIPLE,
                                   "LTX VAE-encodes half of it, which must be a multiple of 32")
    return problems


# --------------------------------------------------------------------------------- draft vs output grid
def upstream_nodes(graph: dict, start: Any) -> list[str]:
    """Every node id reachable upstream from a link value (breadth first, each once)."""
    seen: list[str] = []
    queue = [str(start[0])] if is_link(start) else []
    while queue:
        node_id = queue.pop(0)
        if node_id in seen or not isinstance(graph.get(node_id), dict):
            continue
        seen.append(node_id)
        queue += [str(v[0]) for v in graph[node_id].get("inputs", {}).values() if is_link(v)]
    return seen


def lint_two_stage_grid(graph: dict, schemas: dict) -> list[Problem]:
    """For each H3KitDraftToLTX fed by an H3 draft: draft exactly half the output, and strict needs 8n+1 frames."""
    problems: list[Problem] = []
    for node_id, node in _nodes(graph, (HANDOFF,)):
        target = (_int_input(graph, node, "target_width"), _int_input(graph, node, "target_height"))
        policy = resolve(graph, node.get("inputs", {}).get("frame_policy", UNKNOWN))
        for src_id in upstream_nodes(graph, node.get("inputs", {}).get("frames")):
            src = graph[src_id]
            if src.get("class_type") not in H3_LATENT_NODES:
                continue
            draft = (_int_input(graph, src, "width"), _int_input(graph, src, "height"))
            if None not in draft and None not in target and (draft[0] * 2, draft[1] * 2) != target:
                problems.append(Problem(
                    node_id, HANDOFF, "target_width", f"{target[0]}x{target[1]}",
                    f"the output {target[0]}x{target[1]} is not exactly twice the H3 draft {draft[0]}x{draft[1]} "
                    f"(node {src_id}): the handoff would resample and the latent grids would not line up",
                    f"set target {draft[0] * 2}x{draft[1] * 2}, or draft at {target[0] // 2}x{target[1] // 2}"))
            length = _int_input(graph, src, "length")
            if policy == "strict" and length is not None and not pm.is_ltx_length(length):
                problems.append(Problem(
                    node_id, HANDOFF, "frame_policy", policy,
                    f"the H3 draft (node {src_id}) has {length} frames, not 8n+1, so strict fails at run time",
                    "use frame_policy trim_to_8n_plus_1 (keeps "
                    f"{pm.ltx_trim_length(length)}) or an H3 length that is also 8n+1 (73, 209, 345)"))
    return problems


def lint_mux_fps(graph: dict, schemas: dict) -> list[Problem]:
    """The handoff cuts the audio at its fps; a CreateVideo at another fps drifts the audio out of sync."""
    problems: list[Problem] = []
    handoff_fps = {resolve(graph, n.get("inputs", {}).get("fps", UNKNOWN)) for _, n in _nodes(graph, (HANDOFF,))}
    handoff_fps = {f for f in handoff_fps if isinstance(f, (int, float)) and not isinstance(f, bool)}
    if len(handoff_fps) != 1:
        return problems
    fps = handoff_fps.pop()
    for node_id, node in _nodes(graph, ("CreateVideo",)):
        value = resolve(graph, node.get("inputs", {}).get("fps", UNKNOWN))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value - fps) > 1e-6:
            problems.append(Problem(node_id, "CreateVideo", "fps", value,
                                    f"the video is written at {value:g} fps but H3KitDraftToLTX cut the audio for "
                                    f"{fps:g} fps, so picture and sound drift apart",
                                    f"use {fps:g} in both", severity="warning"))
    return problems


# ------------------------------------------------------------------------------------------ sigmas
def lint_refine_sigmas(graph: dict, schemas: dict) -> list[Problem]:
    """H3KitRefineSetup: manual sigmas must parse; a first sigma above 0.8 needs allow_repaint (F23)."""
    problems: list[Problem] = []
    for node_id, node in _nodes(graph, (REFINE_SETUP,)):
        inputs = node.get("inputs", {})
        schedule = resolve(graph, inputs.get("schedule", "identity_0.78"))
        allow = resolve(graph, inputs.get("allow_repaint", False))
        if schedule == pm.MANUAL_SCHEDULE:
            text = resolve(graph, inputs.get("manual_sigmas", ""))
            if not isinstance(text, str):
                continue
            try:
                values = pm.parse_sigmas(text)
            except pm.SigmaError as exc:
                problems.append(Problem(node_id, REFINE_SETUP, "manual_sigmas", text, str(exc),
                                        "write e.g. 0.78, 0.643, 0.546, 0"))
                continue
            where, shown = "manual_sigmas", text
        elif schedule in pm.SIGMA_SCHEDULES:
            values, where, shown = list(pm.SIGMA_SCHEDULES[schedule]), "schedule", schedule
        else:
            continue
        if values[0] > pm.REPAINT_SIGMA_LIMIT and allow is False:
            problems.append(Problem(node_id, REFINE_SETUP, where, shown,
                                    f"first sigma {values[0]:g} > 0.8 repaints faces (F23); the node refuses it "
                                    "unless allow_repaint is true",
                                    "use schedule identity_0.78, or set allow_repaint true"))
        elif values[0] > pm.REPAINT_SIGMA_LIMIT and allow is True:
            problems.append(Problem(node_id, REFINE_SETUP, where, shown,
                                    f"first sigma {values[0]:g} > 0.8 will repaint faces (F23)",
                                    "use identity_0.78 to keep the draft's identity", severity="warning"))
    return problems


PIPELINE_RULES = [lint_sizes_and_lengths, lint_two_stage_grid, lint_mux_fps, lint_refine_sigmas]
