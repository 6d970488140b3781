"""Validate rules for the two-stage pipeline's grids: sizes, frame lengths, draft vs output, refine sigmas.

The schema checks already catch widget values off a node's step (H3 length step 17, sizes step 32/64). These
rules add what a schema cannot see: values that arrive through Primitive nodes, the relation between the H3
draft and the LTX output (draft exactly half the output, 17k+5 -> 8n+1), and the refine's first sigma (F23).
Each rule: (graph, schemas) -> [Problem]. Numbers and grids come from checks/facts.py, shared with the nodes.
"""

from __future__ import annotations

from . import facts as pm
from .graph import UNKNOWN, inputs_of, int_input, nodes_of, resolve, upstream_nodes
from .problem import Problem

H3_LATENT_NODES = ("EmptyMiniMaxH3LatentAV", "MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo")
LTX_LATENT_NODES = ("EmptyLTXVLatentVideo",)
HANDOFF = "H3KitDraftToLTX"
REFINE_SETUP = "H3KitRefineSetup"


# ------------------------------------------------------------------------------------ sizes and lengths
def _side_problems(graph, node_id, node, names, multiple, why) -> list[Problem]:
    problems = []
    for name in names:
        value = int_input(graph, node, name)
        if value is not None and value % multiple:
            problems.append(Problem(node_id, node["class_type"], name, value, f"{name} {value} is not a multiple of "
                                    f"{multiple} ({why})", f"use {pm.describe_nearest(value, multiple)}"))
    return problems


SIDES = (("width", "target_width"), ("height", "target_height"))  # (H3 draft input, handoff input)


def handoff_drafts(graph: dict) -> list[tuple[str, dict, str, dict]]:
    """(handoff id, handoff node, draft id, draft node) for each H3 latent node feeding an H3KitDraftToLTX."""
    pairs = []
    for node_id, node in nodes_of(graph, HANDOFF):
        for src_id in upstream_nodes(graph, inputs_of(node).get("frames")):
            if graph[src_id].get("class_type") in H3_LATENT_NODES:
                pairs.append((node_id, node, src_id, graph[src_id]))
    return pairs


def _draft_side_problems(graph: dict, node_id: str, node: dict, pairs: list) -> list[Problem]:
    """H3 draft sides on the 32 grid (F19). The fix also fits the handoff this draft feeds: the draft must be
    exactly half its target, so a valid target decides the draft side; otherwise each choice names its target."""
    problems = []
    targets = [(hid, h) for hid, h, sid, _ in pairs if sid == node_id]
    for draft_name, target_name in SIDES:
        value = int_input(graph, node, draft_name)
        if value is None or value % pm.H3_SIDE_MULTIPLE == 0:
            continue
        below, above = pm.nearest_multiples(value, pm.H3_SIDE_MULTIPLE)
        fix = f"use {pm.describe_nearest(value, pm.H3_SIDE_MULTIPLE)}"
        for handoff_id, handoff in targets[:1]:
            target = int_input(graph, handoff, target_name)
            if target is not None and target % pm.OUTPUT_SIDE_MULTIPLE == 0:
                fix = f"use {target // 2} (half of H3KitDraftToLTX node {handoff_id}'s {target_name} {target})"
            else:
                choices = [f"{v} (then {target_name} {2 * v} on H3KitDraftToLTX node {handoff_id})"
                           for v in dict.fromkeys((below, above))]
                fix = "use " + " or ".join(choices)
        problems.append(Problem(node_id, node["class_type"], draft_name, value,
                                f"{draft_name} {value} is not a multiple of {pm.H3_SIDE_MULTIPLE} (H3's latent floors "
                                "other sizes silently, F19)", fix))
    return problems


def _target_side_problems(graph: dict, node_id: str, node: dict, pairs: list) -> list[Problem]:
    """The handoff target: a multiple of 64 and, when an H3 draft feeds it, exactly twice the draft side (the
    draft is then not resampled and both latent grids line up). One problem per input, with the one fix that
    satisfies every rule; an off-grid draft is reported on the draft instead (its fix names this target)."""
    problems = []
    drafts = [(sid, s) for hid, _, sid, s in pairs if hid == node_id]
    for draft_name, target_name in SIDES:
        target = int_input(graph, node, target_name)
        if target is None:
            continue
        draft = int_input(graph, drafts[0][1], draft_name) if drafts else None
        if draft is not None and draft % pm.H3_SIDE_MULTIPLE:
            if target % pm.OUTPUT_SIDE_MULTIPLE:  # the draft's fix (reported on the draft) decides this one
                below, above = pm.nearest_multiples(draft, pm.H3_SIDE_MULTIPLE)
                problems.append(Problem(node_id, HANDOFF, target_name, target,
                                        f"{target_name} {target} must be twice the H3 draft's {draft_name}, which "
                                        f"is off its grid too (node {drafts[0][0]})",
                                        " or ".join(f"use {2 * v} with draft {draft_name} {v}"
                                                    for v in dict.fromkeys((below, above)))))
            continue
        if draft is not None and target != 2 * draft:
            problems.append(Problem(node_id, HANDOFF, target_name, target,
                                    f"{target_name} {target} must be exactly twice the H3 draft's {draft_name} {draft} "
                                    f"(node {drafts[0][0]}): otherwise the handoff resamples and the latent grids do "
                                    "not line up", f"use {2 * draft}"))
        elif draft is None and target % pm.OUTPUT_SIDE_MULTIPLE:
            problems.append(Problem(node_id, HANDOFF, target_name, target,
                                    f"{target_name} {target} is not a multiple of {pm.OUTPUT_SIDE_MULTIPLE} (LTX "
                                    f"VAE-encodes half of it, which must be a multiple of {pm.LTX_SIDE_MULTIPLE})",
                                    f"use {pm.describe_nearest(target, pm.OUTPUT_SIDE_MULTIPLE)}"))
    return problems


def lint_sizes_and_lengths(graph: dict, schemas: dict) -> list[Problem]:
    """H3 sides on 32 and length on 17k+5 (F19, F20); LTX sides on 32 and length on 8n+1; the handoff target
    on 64 and exactly twice the draft it is fed."""
    problems: list[Problem] = []
    pairs = handoff_drafts(graph)  # once: per node it made a 10,000-node graph quadratic (53 s)
    for node_id, node in nodes_of(graph, *H3_LATENT_NODES):
        problems += _draft_side_problems(graph, node_id, node, pairs)
        length = int_input(graph, node, "length")
        if length is not None and not pm.is_h3_length(length):
            below, above = pm.nearest_h3_lengths(length)
            problems.append(Problem(node_id, node["class_type"], "length", length,
                                    f"{length} frames is not on H3's 17k+5 grid; the node snaps it up silently (F20)",
                                    f"use {below} or {above} (124 = 5.17 s at 24 fps)"))
        elif length is not None and length > pm.H3_LENGTH_MAX:
            problems.append(Problem(node_id, node["class_type"], "length", length,
                                    f"{length} frames is beyond H3's trained range (up to {pm.H3_LENGTH_MAX} = 15.08 s)",
                                    f"use at most {pm.H3_LENGTH_MAX}", severity="warning"))
    for node_id, node in nodes_of(graph, *LTX_LATENT_NODES):
        problems += _side_problems(graph, node_id, node, ("width", "height"), pm.LTX_SIDE_MULTIPLE, "LTX latents are /32")
        length = int_input(graph, node, "length")
        if length is not None and not pm.is_ltx_length(length):
            problems.append(Problem(node_id, node["class_type"], "length", length,
                                    f"{length} frames is not on LTX's 8n+1 grid",
                                    f"use {pm.ltx_trim_length(length)} or {pm.ltx_pad_length(length)}"))
    for node_id, node in nodes_of(graph, HANDOFF):
        problems += _target_side_problems(graph, node_id, node, pairs)
    return problems


# --------------------------------------------------------------------------------- draft vs output grid
def lint_two_stage_grid(graph: dict, schemas: dict) -> list[Problem]:
    """For each H3KitDraftToLTX fed by an H3 draft, strict needs 8n+1 frames (sizes: lint_sizes_and_lengths)."""
    problems: list[Problem] = []
    for node_id, node, src_id, src in handoff_drafts(graph):
        policy = resolve(graph, inputs_of(node).get("frame_policy", UNKNOWN))
        length = int_input(graph, src, "length")
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
    handoff_fps = [resolve(graph, inputs_of(n).get("fps", UNKNOWN)) for _, n in nodes_of(graph, HANDOFF)]
    handoff_fps = {f for f in handoff_fps if isinstance(f, (int, float)) and not isinstance(f, bool)}  # [] is no fps
    if len(handoff_fps) != 1:
        return problems
    fps = handoff_fps.pop()
    for node_id, node in nodes_of(graph, "CreateVideo"):
        value = resolve(graph, inputs_of(node).get("fps", UNKNOWN))
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value - fps) > 1e-6:
            problems.append(Problem(node_id, "CreateVideo", "fps", value,
                                    f"the video is written at {value:g} fps but H3KitDraftToLTX cut the audio for "
                                    f"{fps:g} fps, so picture and sound drift apart",
                                    f"use {fps:g} in both", severity="warning"))
    return problems


# ------------------------------------------------------------------------------------------ sigmas
def lint_refine_sigmas(graph: dict, schemas: dict) -> list[Problem]:
    """H3KitRefineSetup, as the node judges itself: manual sigmas must parse, a first sigma above 0.8 needs
    allow_repaint (F23: the node refines H3 drafts), a legacy schedule name is said once with its real name."""
    problems: list[Problem] = []
    for node_id, node in nodes_of(graph, REFINE_SETUP):
        inputs = inputs_of(node)
        schedule = resolve(graph, inputs.get("schedule", pm.DEFAULT_SCHEDULE))
        allow = resolve(graph, inputs.get("allow_repaint", False))
        if schedule == pm.MANUAL_SCHEDULE:
            text = resolve(graph, inputs.get("manual_sigmas", ""))
            if not isinstance(text, str):
                continue
            try:
                values = pm.parse_sigmas(text)
            except pm.SigmaError as exc:
                problems.append(Problem(node_id, REFINE_SETUP, "manual_sigmas", text, str(exc),
                                        f"write e.g. {pm.SIGMA_EXAMPLE}"))
                continue
            where, shown = "manual_sigmas", text
        elif (table := pm.schedule_sigmas(schedule)) is not None:
            values, where, shown = list(table), "schedule", schedule
            if schedule in pm.LEGACY_SCHEDULES:
                problems.append(_legacy_schedule(node_id, schedule))
        else:
            continue
        if values[0] > pm.REPAINT_SIGMA_LIMIT and allow is False:
            problems.append(Problem(node_id, REFINE_SETUP, where, shown,
                                    f"first sigma {values[0]:g} > {pm.REPAINT_SIGMA_LIMIT:g} repaints an H3 draft's faces "
                                    "(F23); the node refuses it unless allow_repaint is true",
                                    f"use schedule {pm.DEFAULT_SCHEDULE}, or set allow_repaint true"))
        elif values[0] > pm.REPAINT_SIGMA_LIMIT and allow is True:
            problems.append(Problem(node_id, REFINE_SETUP, where, shown,
                                    f"first sigma {values[0]:g} > {pm.REPAINT_SIGMA_LIMIT:g} will repaint an H3 draft's "
                                    "faces (F23)",
                                    f"use {pm.DEFAULT_SCHEDULE} to keep the draft's identity", severity="warning"))
    return problems


def _legacy_schedule(node_id: str, name: str) -> Problem:
    """A saved graph's old schedule name: it still runs (same sigmas); say once what it is and its name now."""
    now = pm.LEGACY_SCHEDULES[name]
    return Problem(node_id, REFINE_SETUP, "schedule", name,
                   f"'{name}' is the old name of '{now}' ({pm.sigma_text(pm.SIGMA_SCHEDULES[now])}): "
                   f"{pm.SCHEDULE_NOTES[now]}. It still runs with the same sigmas",
                   f"pick '{now}' (same sigmas), or '{pm.DEFAULT_SCHEDULE}' to keep an H3 draft's identity",
                   severity="warning")


PIPELINE_RULES = [lint_sizes_and_lengths, lint_two_stage_grid, lint_mux_fps, lint_refine_sigmas]
