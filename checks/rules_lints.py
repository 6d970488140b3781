"""Workflow lints for traps that pass ComfyUI's own validation and then fail silently.

Each lint is `(graph, schemas) -> list[Problem]` and names its failure-catalogue entry (F15, F16, F19,
F20, F23, F27). What depends on the host's capabilities (does its MiniMax-H3 tokenizer parse embedding: markers,
does it know H3's dialogue tokens) is a warning that names both cases: offline nothing says which host will run the
graph; the nodes ask the host's tokenizer when they run and act on the answer. `GRAPH_LINTS` are pure graph checks, registered in checks.rules.RULES so `validate`,
`doctor` and H3KitPreflight all run them. The file checks (F13/F14 headers) are in rules_files.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from re import compile as regex
from typing import Any

from . import facts
from .graph import (
    UNKNOWN,
    class_of,
    inputs_of,
    is_link,
    model_upstream,
    nodes_of,
    resolve,
    resolved,
    source_node,
)
from .h3_prompt import dialogue_tokens_in, first_shot_description
from .problem import WARNING, Problem
from .refine_source import picture_source
from .rules_pipeline import H3_LATENT_NODES

SAMPLER_NODES = ("SamplerCustomAdvanced", "SamplerCustom", "KSampler", "KSamplerAdvanced")


# --- sigmas (F23, F16) --------------------------------------------------------------------------


def sigmas_of(graph: dict, sampler: dict) -> tuple[list[float] | None, str | None, dict | None]:
    """(sigma list, source node id, source node) for a custom sampler's sigmas input, when knowable."""
    src = source_node(graph, sampler, "sigmas")
    if src is None:
        return None, None, None
    src_id, node = src
    ct = node.get("class_type")
    if ct == "ManualSigmas":
        return _parsed(resolved(graph, node, "sigmas")), src_id, node
    if ct == "H3KitRefineSetup":
        schedule = resolved(graph, node, "schedule", facts.DEFAULT_SCHEDULE)
        if schedule == facts.MANUAL_SCHEDULE:
            return _parsed(resolved(graph, node, "manual_sigmas", "")), src_id, node
        preset = facts.schedule_sigmas(schedule)
        return (list(preset) if preset else None), src_id, node
    return None, src_id, node


def _parsed(text: Any) -> list[float] | None:
    try:
        return facts.parse_sigmas(text)
    except facts.SigmaError:
        return None


def _sigma_error(text: Any) -> str:
    try:
        facts.parse_sigmas(text)
    except facts.SigmaError as exc:
        return str(exc)
    return "not a list of numbers"


def steps_of(graph: dict, sampler: dict) -> int | None:
    if "steps" in sampler.get("inputs", {}):
        steps = resolved(graph, sampler, "steps")
        return steps if isinstance(steps, int) else None
    sigmas, _, node = sigmas_of(graph, sampler)
    if sigmas is not None:
        return max(len(sigmas) - 1, 0)
    if node is not None and node.get("class_type") in ("BasicScheduler", "LTXVScheduler"):
        steps = resolved(graph, node, "steps")
        return steps if isinstance(steps, int) else None
    return None


def is_refine(graph: dict, sampler: dict, sigma_src: dict | None) -> bool:
    """The sampler starts from an existing video (encoded, upsampled, loaded), not from a fresh latent (F01)."""
    if sigma_src is not None and sigma_src.get("class_type") == "H3KitRefineSetup":
        return True
    return picture_source(graph, sampler).existing


def lint_refine_first_sigma(graph: dict, schemas: dict) -> list[Problem]:
    """F23: LTX refining an H3 draft from a first sigma above 0.8 repaints the draft's identity.

    Scoped to its evidence (field-notes §A4: the sweep refined an H3 draft): the sampler's picture must be an H3
    draft (refine_source.picture_source). LTX refining its own stage 1 (the official LTX-2.x templates' stage 2 at
    0.85 / 0.909375 after LTXVLatentUpsampler) and any stage 1 are not judged; where the source cannot be told (a
    loaded latent or video, a node the walk cannot follow with an H3 node or a file behind it) a warning says what
    is unknown. Covers ManualSigmas and any parsed sigma source; H3KitRefineSetup's own schedule and manual sigmas
    are checked by rules_pipeline.lint_refine_sigmas (the node refuses them itself).
    """
    problems = []
    for sid, sampler in nodes_of(graph, "SamplerCustomAdvanced", "SamplerCustom"):
        sigmas, src_id, src = sigmas_of(graph, sampler)
        if src is None or src.get("class_type") == "H3KitRefineSetup":
            continue
        ct = src["class_type"]
        unparsed = sigmas is None and ct == "ManualSigmas"
        if not unparsed and (sigmas is None or sigmas[0] <= facts.REPAINT_SIGMA_LIMIT):
            continue
        source = picture_source(graph, sampler)
        if source.h3_draft is not None:
            problems.append(_h3_draft_refine_problem(graph, sid, src_id, src, sigmas, source.h3_draft))
        elif source.unknown is not None and sigmas is not None:
            problems.append(Problem(
                src_id, ct, "sigmas", sigmas[0],
                f"F23 cannot be judged: sampler {sid} starts at sigma {sigmas[0]:g} > {facts.REPAINT_SIGMA_LIMIT:g} on "
                f"a picture from {source.unknown}, so H3Kit cannot tell whether it refines an H3 draft (an H3 draft "
                f"refined above {facts.REPAINT_SIGMA_LIMIT:g} gets another face; LTX refining its own stage 1 is fine)",
                f"if it is an H3 draft, use {facts.SIGMA_EXAMPLE}; if it is LTX's own stage 1, nothing to do",
                severity=WARNING))
    return problems


def _h3_draft_refine_problem(graph: dict, sid: str, src_id: str, src: dict, sigmas: list[float] | None,
                             draft: tuple[str, str]) -> Problem:
    ct, (draft_id, draft_class) = src["class_type"], draft
    if sigmas is None:
        text = resolved(graph, src, "sigmas")
        return Problem(src_id, ct, "sigmas", text, f"sigmas do not parse: {_sigma_error(text)}",
                       f"write descending numbers in [0, 1] ending at 0, e.g. '{facts.SIGMA_EXAMPLE}'")
    return Problem(
        src_id, ct, "sigmas", sigmas[0],
        f"F23: the refine sampler {sid} starts at sigma {sigmas[0]:g} > {facts.REPAINT_SIGMA_LIMIT:g} on the H3 draft "
        f"from {draft_class} (node {draft_id}): LTX repaints the draft's identity (measured: 0.85 changes details, "
        "0.909 gives a different person)",
        f"use {facts.SIGMA_EXAMPLE}, or H3KitRefineSetup with schedule '{facts.DEFAULT_SCHEDULE}'")


def lint_spectrum_warmup(graph: dict, schemas: dict) -> list[Problem]:
    """F16: Spectrum with warmup_steps >= the sampler's steps never forecasts (pure overhead)."""
    problems = []
    for spec_id, spec in nodes_of(graph, "SpectrumApplyMiniMaxH3"):
        if resolved(graph, spec, "enabled", True) is False:
            continue
        warmup = resolved(graph, spec, "warmup_steps", 1)
        if not isinstance(warmup, int):
            continue
        for sid, sampler in nodes_of(graph, *SAMPLER_NODES):
            if spec_id not in model_upstream(graph, sampler):
                continue
            steps = steps_of(graph, sampler)
            if steps is not None and warmup >= steps:
                problems.append(Problem(
                    spec_id, "SpectrumApplyMiniMaxH3", "warmup_steps", warmup,
                    f"F16: warmup_steps {warmup} >= the {steps} steps of sampler {sid} ({class_of(graph, sid)}): "
                    "Spectrum never forecasts, it only adds overhead",
                    f"set warmup_steps below {steps} (e.g. {max(steps - 3, 0)}) or remove the Spectrum node "
                    "(a 4-step draft gains nothing from it)", severity="warning"))
    return problems


# --- prompts (F15, effect markers and dialogue tokens) ---------------------------------------------

EMBEDDING_MARKER = "embedding:"


def _fix_position(value: str) -> str:
    """Where the marker belongs in this prompt: the start of the first shot's description (checks/h3_prompt.py)."""
    shot = first_shot_description(value)
    if shot is None:
        return "move it mid-sentence, after the first shot heading ('integrated_multimodal_description: [Shot 1]')"
    return f"move it to the start of the first shot's description, after '{value[max(shot.start - 40, 0):shot.start]}'"


def lint_effect_marker_position(graph: dict, schemas: dict) -> list[Problem]:
    """F15: an effect embedding at the very start of a prompt has no effect; a glued marker is literal text."""
    problems = []
    for nid, node in graph.items():
        if not isinstance(node, dict):
            continue
        for name, value in node.get("inputs", {}).items():
            if not isinstance(value, str) or EMBEDDING_MARKER not in value:
                continue
            ct = node.get("class_type", "?")
            if value.lstrip().startswith(EMBEDDING_MARKER):
                problems.append(Problem(
                    str(nid), ct, name, value[:60],
                    "F15: the effect embedding marker is at the start of the prompt, where it measurably has no effect",
                    _fix_position(value.lstrip().split(None, 1)[-1]), severity="warning"))
            for match in re.finditer(re.escape(EMBEDDING_MARKER), value):
                before = value[match.start() - 1] if match.start() else ""
                if before and not before.isspace():
                    problems.append(Problem(
                        str(nid), ct, name, value[max(match.start() - 10, 0):match.start() + 30],
                        f"F15: the marker follows '{before}' instead of a space, so the text encoder reads it as "
                        "literal text (weights like (embedding:x:1.2) are not parsed for H3)",
                        "put a space before 'embedding:' and drop any (...:weight) wrapper", severity="warning"))
    return problems


EFFECT_PROMPT = "H3KitEffectPrompt"
REF2VA_PROMPT = "H3KitRef2VAPrompt"
H3_PROMPT_NODES = ("MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo")
PREPARED_CLIP_OUTPUT = 2  # the CLIP output of H3KitEffectPrompt and H3KitRef2VAPrompt (prompt, report, clip)
MAX_PROMPT_HOPS = 8  # prompt nodes followed back from an encoder (a prompt node feeding another)
FIX_EFFECT_CLIP = (f"connect the text encoder (CLIPLoader) to {EFFECT_PROMPT}'s 'clip' input and its 'clip' output "
                   "to this node's 'clip'")
# Capability, never a version: which hosts parse embedding: markers in the MiniMax-H3 tokenizer.
MARKER_HOSTS = ("a host whose MiniMax-H3 tokenizer parses embedding: markers (Comfy-Org/ComfyUI#15697, merged "
                "2026-08-18) loads the rows; on one without it (ComfyUI 0.33.0 as released) the marker is plain text "
                "and the effect silently does nothing")
MARKERS_AS_TEXT = ("this ComfyUI's MiniMax-H3 tokenizer reads embedding: markers as plain text (asked when the node "
                   "ran), so the effect would silently do nothing")
DIALOGUE_HOSTS = ("a host whose MiniMax-H3 tokenizer knows H3's dialogue tokens (Comfy-Org/ComfyUI#15808, merged "
                  "2026-08-22) reads <d> and </d> as one token each; one without it (ComfyUI 0.33.0, yzkee "
                  "@783545f6) splits them into ordinary BPE pieces merged with '[' and '.', so dialogue / lip-sync "
                  "conditioning is weaker")
OFFLINE = "this check cannot see which host will run the graph"


def _links_to(graph: dict, node_id: str, output: int) -> list[tuple[str, dict]]:
    """Nodes with an input wired to output `output` of `node_id`."""
    return [(str(cid), consumer) for cid, consumer in graph.items() if isinstance(consumer, dict)
            and any(is_link(v) and str(v[0]) == node_id and v[1] == output for v in inputs_of(consumer).values())]


def prompt_encoders(graph: dict, node_id: str) -> list[tuple[str, dict, bool]]:
    """(id, node, takes our clip output) for every node that takes prompt node `node_id`'s prompt and a clip:
    the encoders (PreviewAny, string nodes and malformed links are left to their own checks)."""
    found = []
    for cid, consumer in _links_to(graph, node_id, 0):
        clip = inputs_of(consumer).get("clip")
        if is_link(clip):
            found.append((cid, consumer, str(clip[0]) == node_id and clip[1] == PREPARED_CLIP_OUTPUT))
    return found


def _strength(graph: dict, node: dict) -> Any:
    return resolved(graph, node, "strength", 1.0)


def effect_prompt_wiring(graph: dict, node_id: str, host_parses_markers: bool | None = None) -> list[Problem]:
    """F15 family: the prompt of H3KitEffectPrompt `node_id` must reach an encoder that reads its markers.

    Its clip output always does (markers resolved, strength applied). An encoder with another clip depends on the
    host: `host_parses_markers` None (offline: `validate`, `doctor`, the preflight) gives a warning that names both
    cases; False (the node asked this ComfyUI's tokenizer: markers are text) an error; True (they are parsed) nothing,
    unless a strength other than 1.0 would be lost. The clip output used without a clip input is an error anywhere."""
    node = graph.get(node_id)
    if not isinstance(node, dict):
        return []
    has_clip = is_link(inputs_of(node).get("clip"))
    users = _links_to(graph, node_id, PREPARED_CLIP_OUTPUT)
    problems = [Problem(cid, consumer.get("class_type", "?"), "clip", [node_id, PREPARED_CLIP_OUTPUT],
                        f"takes {EFFECT_PROMPT}'s clip output (node {node_id}), but that node has no text encoder on "
                        "its 'clip' input, so the output is empty", f"connect the text encoder (CLIPLoader) to node "
                        f"{node_id}'s 'clip' input") for cid, consumer in users if not has_clip]
    if not _adds_markers(node) or host_parses_markers is True and _strength(graph, node) in (1, 1.0, UNKNOWN):
        return problems
    for cid, consumer, ours in prompt_encoders(graph, node_id):
        if ours:
            continue
        problems.append(_bypass_problem(graph, node_id, node, cid, consumer, has_clip, host_parses_markers))
    return problems


def _bypass_problem(graph: dict, node_id: str, node: dict, cid: str, consumer: dict, has_clip: bool,
                    host_parses_markers: bool | None) -> Problem:
    ct, clip = consumer.get("class_type", "?"), inputs_of(consumer).get("clip")
    if host_parses_markers is True:  # parsed here, but the strength is applied only by the clip output
        return Problem(cid, ct, "clip", clip, f"takes its prompt from {EFFECT_PROMPT} (node {node_id}) but its clip "
                       f"from node {clip[0]}: this host parses the markers itself, at strength 1.0, so node "
                       f"{node_id}'s strength {_strength(graph, node)} would be lost",
                       f"connect node {node_id}'s 'clip' output to this node's 'clip', or set strength to 1.0")
    if has_clip:
        why = (MARKERS_AS_TEXT if host_parses_markers is False
               else f"{MARKER_HOSTS}; {OFFLINE}, {EFFECT_PROMPT} asks the host's tokenizer when it runs")
        return Problem(cid, ct, "clip", clip,
                       f"takes its prompt from {EFFECT_PROMPT} (node {node_id}) but its clip from node {clip[0]}, not "
                       f"from {EFFECT_PROMPT}'s clip output: {why}; the effect strength is applied only by that output",
                       f"connect node {node_id}'s 'clip' output to this node's 'clip' (works on every host)",
                       severity="error" if host_parses_markers is False else "warning")
    why = (MARKERS_AS_TEXT if host_parses_markers is False
           else f"{MARKER_HOSTS}; {OFFLINE}, {EFFECT_PROMPT} asks the host's tokenizer when it runs")
    return Problem(node_id, EFFECT_PROMPT, "clip", None,
                   f"no text encoder connected, so node {cid} ({ct}) encodes the markers with its own tokenizer: {why}",
                   FIX_EFFECT_CLIP + " (works on every host)",
                   severity="error" if host_parses_markers is False else "warning")


def _adds_markers(node: dict) -> bool:
    """An effect chosen (or not a literal 'none'), or a marker in a literal prompt."""
    inputs = inputs_of(node)
    chosen = any(inputs.get(name, "none") != "none" for name in ("effect", "effect_2", "effect_3"))
    prompt = inputs.get("prompt")
    return chosen or not isinstance(prompt, str) or EMBEDDING_MARKER in prompt


def prompt_text(graph: dict, node: dict, through: tuple[str, ...]) -> str:
    """The literal text that reaches `node`'s 'prompt' input: typed, through Primitive nodes, or composed by a prompt
    node of `through` from its own text inputs (followed at most MAX_PROMPT_HOPS deep); '' when computed."""
    for _ in range(MAX_PROMPT_HOPS):
        value = inputs_of(node).get("prompt")
        literal = resolve(graph, value)
        if isinstance(literal, str):
            return literal
        source = graph.get(str(value[0])) if is_link(value) and value[1] == 0 else None
        kind = source.get("class_type") if isinstance(source, dict) else None
        if kind not in through:
            return ""
        if kind == REF2VA_PROMPT:
            texts = (resolve(graph, v) for v in inputs_of(source).values())
            return "\n".join(text for text in texts if isinstance(text, str))
        node = source
    return ""


def _prepared_by(graph: dict, clip: Any, kinds: tuple[str, ...]) -> bool:
    return is_link(clip) and clip[1] == PREPARED_CLIP_OUTPUT and class_of(graph, str(clip[0])) in kinds


def _typed_markers(graph: dict) -> list[Problem]:
    """Markers typed into an H3 encoding node's prompt (or a Primitive feeding it) whose clip H3Kit did not prepare:
    whether they work depends on the host (a warning naming both cases)."""
    problems = []
    for nid, node in nodes_of(graph, *H3_PROMPT_NODES):
        prompt = prompt_text(graph, node, through=())
        if re.search(r"(?:^|\s)embedding:\S", prompt) and not _prepared_by(graph, inputs_of(node).get("clip"),
                                                                          (EFFECT_PROMPT,)):
            problems.append(Problem(
                nid, node["class_type"], "prompt", prompt[:60],
                f"F15: an embedding: marker typed into the prompt: {MARKER_HOSTS}; {OFFLINE}",
                f"on a host with #15697 nothing is needed; to work on every host write the prompt in {EFFECT_PROMPT} "
                "(choose the effect there) and feed this node its prompt and clip outputs", severity="warning"))
    return problems


def lint_effect_markers_reach_the_encoder(graph: dict, schemas: dict) -> list[Problem]:
    """F15 family: every H3KitEffectPrompt's markers are encoded through its CLIP output; typed markers are flagged."""
    return [p for nid, _ in nodes_of(graph, EFFECT_PROMPT) for p in effect_prompt_wiring(graph, nid)] + \
        _typed_markers(graph)


def lint_dialogue_tokens_reach_the_encoder(graph: dict, schemas: dict) -> list[Problem]:
    """Issue 30 row 6: H3's dialogue tokens (<d> ... </d>) in a prompt an H3 node encodes with a clip H3Kit did not
    prepare: one token each on hosts with #15808, BPE pieces on the others (a warning naming both cases)."""
    problems = []
    for nid, node in nodes_of(graph, *H3_PROMPT_NODES):
        clip = inputs_of(node).get("clip")
        tokens = dialogue_tokens_in(prompt_text(graph, node, through=(EFFECT_PROMPT, REF2VA_PROMPT)))
        if tokens and not _prepared_by(graph, clip, (EFFECT_PROMPT, REF2VA_PROMPT)):
            source = inputs_of(node).get("prompt")
            composer = (f"node {source[0]}'s" if is_link(source) and class_of(graph, str(source[0])) in
                        (EFFECT_PROMPT, REF2VA_PROMPT) else f"an {REF2VA_PROMPT}'s or {EFFECT_PROMPT}'s")
            problems.append(Problem(
                nid, node["class_type"], "clip", clip,
                f"the prompt holds {', '.join(tokens)}: {DIALOGUE_HOSTS}; {OFFLINE}",
                f"feed this node's 'clip' from {composer} 'clip' output, with the text encoder on that node's 'clip' "
                "input (it maps the tokens to H3's ids where the host splits them, and changes nothing where it "
                "does not)", severity="warning"))
    return problems


# --- sampler / LoRA family (F27) ----------------------------------------------------------------

LORA_FAMILIES = (
    # (family, lora-name pattern, expected sampler prefix)
    ("lightx2v", regex(r"lightx2v|turbo_4step|fl2v_turbo", re.I), "res_multistep"),
    ("PDD", regex(r"(^|[^a-z])pdd([^a-z]|$)", re.I), "euler"),
)


def sampler_name_of(graph: dict, sampler: dict) -> Any:
    if "sampler_name" in sampler.get("inputs", {}):
        return resolved(graph, sampler, "sampler_name")
    src = source_node(graph, sampler, "sampler")
    if src is None:
        return UNKNOWN
    node = src[1]
    if node.get("class_type") == "KSamplerSelect":
        return resolved(graph, node, "sampler_name")
    if node.get("class_type") == "H3KitRefineSetup":
        return resolved(graph, node, "sampler", "euler")
    return UNKNOWN


def lint_sampler_lora_family(graph: dict, schemas: dict) -> list[Problem]:
    """F27: res_multistep pairs with lightx2v LoRAs, euler with PDD; a mismatch is quietly worse."""
    problems = []
    for sid, sampler in nodes_of(graph, *SAMPLER_NODES):
        name = sampler_name_of(graph, sampler)
        if not isinstance(name, str):
            continue
        for lid in model_upstream(graph, sampler):
            lora = graph[lid]
            lora_name = resolved(graph, lora, "lora_name")
            if not isinstance(lora_name, str):
                continue
            for family, pattern, expected in LORA_FAMILIES:
                if pattern.search(lora_name) and not name.startswith(expected):
                    problems.append(Problem(
                        sid, sampler.get("class_type", "?"), "sampler_name", name,
                        f"F27: sampler '{name}' with the {family} LoRA '{lora_name}' (node {lid}); this LoRA family "
                        f"is distilled for '{expected}', other samplers give quietly worse frames",
                        f"use sampler '{expected}' (KSamplerSelect) or a LoRA made for '{name}'", severity="warning"))
    return problems


# --- geometry and frame grids (F19, F20) ---------------------------------------------------------
# rules_pipeline (issue 3) checks the H3 latent nodes, EmptyLTXVLatentVideo and the handoff target; these
# lints cover what it leaves out: the other LTX nodes, and lengths that are empty rather than off-grid.

LTX_LENGTH_INPUTS = {"EmptyLTXVLatentVideo": "length", "LTXVImgToVideo": "length", "LTXVEmptyLatentAudio": "frames_number"}
LTX_NODES_NOT_IN_PIPELINE_RULES = ("LTXVImgToVideo", "LTXVEmptyLatentAudio")


def _grid_fix(value: int, step: int, offset: int) -> str:
    """'use 113 or 121' for the grid offset + k*step around value (only the lowest when value is below it)."""
    below = offset + (value - offset) // step * step
    return f"use {offset}" if below < offset else f"use {below} or {below + step}"


def lint_ltx_image_to_video_size(graph: dict, schemas: dict) -> list[Problem]:
    """F19: LTXVImgToVideo sizes must be multiples of 32 (LTX latents are /32), else they are floored."""
    problems = []
    for nid, node in nodes_of(graph, "LTXVImgToVideo"):
        for side in ("width", "height"):
            value = resolved(graph, node, side)
            if isinstance(value, int) and not isinstance(value, bool) and value % facts.LTX_SIDE_MULTIPLE:
                problems.append(Problem(nid, node["class_type"], side, value,
                                        f"F19: LTX needs {side} to be a multiple of {facts.LTX_SIDE_MULTIPLE}; {value} "
                                        "is floored, so the video comes out a different size than asked",
                                        f"use {facts.describe_nearest(value, facts.LTX_SIDE_MULTIPLE)}"))
    return problems


def _empty_length(graph: dict, nid: str, node: dict, field: str) -> Problem | None:
    if field not in node.get("inputs", {}):
        return None  # a missing required input is reported by the schema check
    value = resolved(graph, node, field)
    if value is UNKNOWN or (isinstance(value, int) and not isinstance(value, bool)):
        return None
    return Problem(nid, node["class_type"], field, value,
                   f"F20: the {field} is empty or not a whole number, so the clip silently gets a default length",
                   "give an explicit frame count (H3: 17k+5, e.g. 124; LTX: 8n+1, e.g. 121)")


def lint_lengths(graph: dict, schemas: dict) -> list[Problem]:
    """F20: empty lengths on H3/LTX nodes; 8n+1 on the LTX nodes rules_pipeline does not check."""
    problems = [_empty_length(graph, nid, node, "length") for nid, node in nodes_of(graph, *H3_LATENT_NODES)]
    for nid, node in nodes_of(graph, *LTX_LENGTH_INPUTS):
        field = LTX_LENGTH_INPUTS[node["class_type"]]
        problems.append(_empty_length(graph, nid, node, field))
        value = resolved(graph, node, field)
        if (node["class_type"] in LTX_NODES_NOT_IN_PIPELINE_RULES and isinstance(value, int)
                and not isinstance(value, bool) and not facts.is_ltx_length(value)):
            problems.append(Problem(nid, node["class_type"], field, value,
                                    f"F20: LTX frame counts sit on the 8n+1 grid; {value} is rejected or trimmed, so "
                                    "the duration is not what you asked for",
                                    _grid_fix(value, facts.LTX_FRAME_STEP, 1)))
    return [p for p in problems if p is not None]


GRAPH_LINTS: list[Callable[[dict, dict], list[Problem]]] = [
    lint_refine_first_sigma,
    lint_spectrum_warmup,
    lint_effect_marker_position,
    lint_effect_markers_reach_the_encoder,
    lint_dialogue_tokens_reach_the_encoder,
    lint_sampler_lora_family,
    lint_ltx_image_to_video_size,
    lint_lengths,
]

