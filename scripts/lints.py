"""Workflow lints for traps that pass ComfyUI's own validation and then fail silently.

Each lint is `(graph, schemas) -> list[Problem]` and names its failure-catalogue entry (F15, F16, F19,
F20, F23, F27). `GRAPH_LINTS` are pure graph checks (registered in rules.RULES so `validate` runs them
too); `safetensors_lint(locate)` builds the F13 check, which needs to read local model files.
Nothing here imports torch or ComfyUI.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..adapters.safetensors_file import SafetensorsHeaderError as HeaderError
from ..adapters.safetensors_file import read_header as read_safetensors_header
from .validate import Problem, input_kind, is_link

# --- graph helpers ------------------------------------------------------------------------------

PRIMITIVE_VALUE_NODES = {"PrimitiveInt", "PrimitiveFloat", "PrimitiveString", "PrimitiveStringMultiline",
                         "PrimitiveBoolean", "PrimitiveNode"}
SAMPLER_NODES = {"SamplerCustomAdvanced", "SamplerCustom", "KSampler", "KSamplerAdvanced"}
# Nodes whose LATENT output carries an existing video into a sampler: a sampler fed from them refines.
REFINE_SOURCES = {"LTXVLatentUpsampler", "VAEEncode", "H3KitDraftToLTX", "LoadLatent", "LTXVImgToVideoInplace"}
UNKNOWN = object()


def nodes_of(graph: dict, *class_types: str) -> Iterable[tuple[str, dict]]:
    for node_id, node in graph.items():
        if isinstance(node, dict) and node.get("class_type") in class_types:
            yield str(node_id), node


def source_node(graph: dict, node: dict, input_name: str) -> tuple[str, dict] | None:
    """The node a link input comes from, or None when the input is a literal or missing."""
    value = node.get("inputs", {}).get(input_name)
    if not is_link(value):
        return None
    src = graph.get(str(value[0]))
    return (str(value[0]), src) if isinstance(src, dict) else None


def resolved(graph: dict, node: dict, input_name: str, default: Any = UNKNOWN) -> Any:
    """A widget's literal value, following links to Primitive* nodes; UNKNOWN when it is computed."""
    inputs = node.get("inputs", {})
    if input_name not in inputs:
        return default
    value = inputs[input_name]
    seen = 0
    while is_link(value) and seen < 16:
        src = graph.get(str(value[0]))
        if not isinstance(src, dict) or src.get("class_type") not in PRIMITIVE_VALUE_NODES:
            return UNKNOWN
        value = src.get("inputs", {}).get("value", UNKNOWN)
        seen += 1
    return value


def ancestors(graph: dict, start_ids: Iterable[str]) -> set[str]:
    """Every node id reachable upstream from start_ids (inclusive)."""
    found: set[str] = set()
    stack = [str(i) for i in start_ids]
    while stack:
        nid = stack.pop()
        if nid in found or not isinstance(graph.get(nid), dict):
            continue
        found.add(nid)
        for value in graph[nid].get("inputs", {}).values():
            if is_link(value):
                stack.append(str(value[0]))
    return found


def upstream_of_inputs(graph: dict, node: dict, input_names: Iterable[str]) -> set[str]:
    starts = [str(v[0]) for name, v in node.get("inputs", {}).items() if name in input_names and is_link(v)]
    return ancestors(graph, starts)


def model_upstream(graph: dict, sampler: dict) -> set[str]:
    """Nodes that shape the model a sampler runs (its model or guider input), not its latent."""
    return upstream_of_inputs(graph, sampler, ("model", "guider"))


def _class(graph: dict, node_id: str) -> str:
    node = graph.get(node_id)
    return node.get("class_type", "?") if isinstance(node, dict) else "?"


# --- sigmas (F23, F16) --------------------------------------------------------------------------

REPAINT_CLIFF = 0.8  # measured: identity held at 0.78, details change at 0.85, another face at 0.909


def _pipeline_math():
    """The RefineSetup owner's schedule table and sigma parser (pure module; imported late: no torch here)."""
    from ..nodes import pipeline_math

    return pipeline_math


def parse_sigmas(text: Any) -> list[float] | None:
    """'0.78, 0.643 0.546,0' -> floats; None when it is not a list of numbers."""
    if not isinstance(text, str):
        return None
    pieces = [p for p in re.split(r"[,\s]+", text.strip().strip("[]")) if p]
    try:
        return [float(p) for p in pieces] or None
    except ValueError:
        return None


def sigmas_of(graph: dict, sampler: dict) -> tuple[list[float] | None, str | None, dict | None]:
    """(sigma list, source node id, source node) for a custom sampler's sigmas input, when knowable."""
    src = source_node(graph, sampler, "sigmas")
    if src is None:
        return None, None, None
    src_id, node = src
    ct = node.get("class_type")
    if ct == "ManualSigmas":
        return parse_sigmas(resolved(graph, node, "sigmas")), src_id, node
    if ct == "H3KitRefineSetup":
        pm = _pipeline_math()
        schedule = resolved(graph, node, "schedule", "identity_0.78")
        if schedule == pm.MANUAL_SCHEDULE:
            try:
                return pm.parse_sigmas(str(resolved(graph, node, "manual_sigmas", ""))), src_id, node
            except pm.SigmaError:
                return None, src_id, node
        preset = pm.SIGMA_SCHEDULES.get(str(schedule))
        return (list(preset) if preset else None), src_id, node
    return None, src_id, node


def _sigma_error(text: Any) -> str:
    pm = _pipeline_math()
    try:
        pm.parse_sigmas(str(text))
    except pm.SigmaError as exc:
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
    if sigma_src is not None and sigma_src.get("class_type") == "H3KitRefineSetup":
        return True
    latent_side = upstream_of_inputs(graph, sampler, ("latent_image",))
    return any(_class(graph, nid) in REFINE_SOURCES for nid in latent_side)


def lint_refine_first_sigma(graph: dict, schemas: dict) -> list[Problem]:
    """F23: a refine (sampler fed an existing video latent) that starts above sigma 0.8 repaints identity.

    Covers ManualSigmas and any other sigma source; H3KitRefineSetup's own schedule and manual sigmas are
    checked by rules_pipeline.lint_refine_sigmas (issue 3).
    """
    problems = []
    for sid, sampler in nodes_of(graph, "SamplerCustomAdvanced", "SamplerCustom"):
        sigmas, src_id, src = sigmas_of(graph, sampler)
        if src is None or src.get("class_type") == "H3KitRefineSetup" or not is_refine(graph, sampler, src):
            continue
        ct = src["class_type"]
        if sigmas is None:
            if ct == "ManualSigmas":
                problems.append(Problem(src_id, ct, "sigmas", resolved(graph, src, "sigmas"),
                                        f"sigmas do not parse: {_sigma_error(resolved(graph, src, 'sigmas'))}",
                                        "write descending numbers in [0, 1] ending at 0, e.g. '0.78, 0.643, 0.546, 0'"))
            continue
        if sigmas[0] > REPAINT_CLIFF:
            problems.append(Problem(
                src_id, ct, "sigmas", sigmas[0],
                f"F23: the refine sampler {sid} starts at sigma {sigmas[0]:g} > {REPAINT_CLIFF}: LTX repaints identity "
                "(measured: 0.85 changes details, 0.909 gives a different person)",
                "use 0.78, 0.643, 0.546, 0, or H3KitRefineSetup with schedule 'identity_0.78'"))
    return problems


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
                    f"F16: warmup_steps {warmup} >= the {steps} steps of sampler {sid} ({_class(graph, sid)}): "
                    "Spectrum never forecasts, it only adds overhead",
                    f"set warmup_steps below {steps} (e.g. {max(steps - 3, 0)}) or remove the Spectrum node "
                    "(a 4-step draft gains nothing from it)", severity="warning"))
    return problems


# --- prompts (F15) ------------------------------------------------------------------------------

EMBEDDING_MARKER = "embedding:"


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
                    "move it mid-sentence, after 'integrated_multimodal_description: [Shot 1]'", severity="warning"))
            for match in re.finditer(re.escape(EMBEDDING_MARKER), value):
                before = value[match.start() - 1] if match.start() else ""
                if before and not before.isspace():
                    problems.append(Problem(
                        str(nid), ct, name, value[max(match.start() - 10, 0):match.start() + 30],
                        f"F15: the marker follows '{before}' instead of a space, so the text encoder reads it as "
                        "literal text (weights like (embedding:x:1.2) are not parsed for H3)",
                        "put a space before 'embedding:' and drop any (...:weight) wrapper", severity="warning"))
    return problems


# --- sampler / LoRA family (F27) ----------------------------------------------------------------

LORA_FAMILIES = (
    # (family, lora-name pattern, expected sampler prefix)
    ("lightx2v", re.compile(r"lightx2v|turbo_4step|fl2v_turbo", re.I), "res_multistep"),
    ("PDD", re.compile(r"(^|[^a-z])pdd([^a-z]|$)", re.I), "euler"),
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

H3_NODES = ("EmptyMiniMaxH3LatentAV", "MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo")
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
            if isinstance(value, int) and not isinstance(value, bool) and value % 32:
                below = value // 32 * 32
                problems.append(Problem(nid, node["class_type"], side, value,
                                        f"F19: LTX needs {side} to be a multiple of 32; {value} is floored, so the "
                                        "video comes out a different size than asked",
                                        f"use {below} or {below + 32}" if below else "use 32"))
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
    problems = [_empty_length(graph, nid, node, "length") for nid, node in nodes_of(graph, *H3_NODES)]
    for nid, node in nodes_of(graph, *LTX_LENGTH_INPUTS):
        field = LTX_LENGTH_INPUTS[node["class_type"]]
        problems.append(_empty_length(graph, nid, node, field))
        value = resolved(graph, node, field)
        if (node["class_type"] in LTX_NODES_NOT_IN_PIPELINE_RULES and isinstance(value, int)
                and not isinstance(value, bool) and (value < 1 or (value - 1) % 8)):
            problems.append(Problem(nid, node["class_type"], field, value,
                                    f"F20: LTX frame counts sit on the 8n+1 grid; {value} is rejected or trimmed, so "
                                    "the duration is not what you asked for", _grid_fix(value, 8, 1)))
    return [p for p in problems if p is not None]


GRAPH_LINTS: list[Callable[[dict, dict], list[Problem]]] = [
    lint_refine_first_sigma,
    lint_spectrum_warmup,
    lint_effect_marker_position,
    lint_sampler_lora_family,
    lint_ltx_image_to_video_size,
    lint_lengths,
]


# --- safetensors headers and embedding widths (F13, F14, F15) ------------------------------------

# Model inputs of nodes whose schema does not say which folder they read (live servers never do).
MODEL_INPUT_FOLDERS: dict[tuple[str, str], str] = {
    ("UNETLoader", "unet_name"): "diffusion_models",
    ("CheckpointLoaderSimple", "ckpt_name"): "checkpoints",
    ("VAELoader", "vae_name"): "vae",
    ("CLIPLoader", "clip_name"): "text_encoders",
    ("DualCLIPLoader", "clip_name1"): "text_encoders",
    ("DualCLIPLoader", "clip_name2"): "text_encoders",
    ("LoraLoaderModelOnly", "lora_name"): "loras",
    ("LoraLoader", "lora_name"): "loras",
    ("LatentUpscaleModelLoader", "model_name"): "latent_upscale_models",
    ("LTXVAudioVAELoader", "ckpt_name"): "checkpoints",
    ("LTXAVTextEncoderLoader", "text_encoder"): "text_encoders",
    ("LTXAVTextEncoderLoader", "ckpt_name"): "checkpoints",
    ("UnetLoaderGGUF", "unet_name"): "unet_gguf",
}
H3_EMBEDDING_WIDTH = 5120
CONFIG_FOLDERS = {"vae", "latent_upscale_models"}  # their loaders read the architecture from metadata 'config'


def model_inputs(graph: dict, schemas: dict) -> Iterable[tuple[str, str, str, str, str]]:
    """(node_id, class_type, input, folder, file name) for every model file the graph names."""
    for nid, node in graph.items():
        if not isinstance(node, dict):
            continue
        ct = node.get("class_type", "?")
        declared = {}
        info = schemas.get(ct) or {}
        for section in ("required", "optional"):
            declared.update(info.get("input", {}).get(section, {}) or {})
        for name, value in node.get("inputs", {}).items():
            if not isinstance(value, str) or not value:
                continue
            folder = MODEL_INPUT_FOLDERS.get((ct, name))
            if folder is None and name in declared:
                folder = input_kind(declared[name])[1].get("model_folder")
            if folder:
                yield str(nid), ct, name, folder, value




def is_quantized(header: dict[str, Any]) -> bool:
    """Comfy-quant layout: per-layer `comfy_quant` markers or FP8 block scales beside packed U8 weights."""
    tensors = {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    if any(k.endswith("comfy_quant") for k in tensors):
        return True
    return any(k.endswith("weight_scale") and str(v.get("dtype", "")).startswith("F8")
               and str(tensors.get(k[: -len("_scale")], {}).get("dtype")) == "U8" for k, v in tensors.items())


def header_problems(nid: str, ct: str, name: str, folder: str, path: Path) -> list[Problem]:
    if path.suffix.lower() != ".safetensors":
        return []
    try:
        header = read_safetensors_header(path).json
    except (OSError, HeaderError) as exc:
        return [Problem(nid, ct, name, path.name, f"F13: cannot read the safetensors header of {path}: {exc}",
                        "re-download the file (compare its size with the source)")]
    metadata = header.get("__metadata__")
    if is_quantized(header) and not (isinstance(metadata, dict) and "_quantization_metadata" in metadata):
        return [Problem(nid, ct, name, path.name,
                        "F13: quantized checkpoint without `_quantization_metadata` in its header: ComfyUI drops the "
                        "scales and feeds packed weights to the layers (garbage or a shape error)",
                        "download the original file again; never re-save it with a converter that drops metadata")]
    if not isinstance(metadata, dict) or not metadata:
        severity = "error" if folder in CONFIG_FOLDERS else "warning"
        return [Problem(nid, ct, name, path.name,
                        "F14: the safetensors header has no metadata" + (
                            "; this loader reads the architecture 'config' from it and misreads the file"
                            if folder in CONFIG_FOLDERS else ""),
                        "use the original file; converters must pass metadata= to save_file", severity=severity)]
    if folder in CONFIG_FOLDERS and "config" not in metadata:
        return [Problem(nid, ct, name, path.name, "F14: metadata has no 'config' entry, which this loader reads",
                        "use the original file, or copy the source file's metadata into the converted one",
                        severity="warning")]
    return []


EMBEDDING_NAME = re.compile(r"(?<![^\s])embedding:([^\s<\[,]+)")
H3_PROMPT_NODES = {"MiniMaxH3ImageToVideo": "prompt", "MiniMaxH3ReferenceToVideo": "prompt"}


def embedding_width(header: dict[str, Any]) -> int | None:
    for key, value in header.items():
        if key != "__metadata__" and isinstance(value, dict) and value.get("shape"):
            return int(value["shape"][-1])
    return None


def embedding_problems(graph: dict, locate: Callable[[str, str], Path | None]) -> list[Problem]:
    problems = []
    for nid, node in nodes_of(graph, *H3_PROMPT_NODES):
        field = H3_PROMPT_NODES[node["class_type"]]
        text = resolved(graph, node, field)
        if not isinstance(text, str):
            continue
        for name in EMBEDDING_NAME.findall(text):
            path = locate("embeddings", name) or locate("embeddings", name + ".safetensors")
            if path is None:
                problems.append(Problem(nid, node["class_type"], field, name,
                                        f"embedding '{name}' is not in models/embeddings; ComfyUI ignores it with only "
                                        "a log line", "install the effect file into models/embeddings and restart"))
                continue
            if path.suffix.lower() != ".safetensors":
                continue
            try:
                width = embedding_width(read_safetensors_header(path).json)
            except (OSError, HeaderError) as exc:
                problems.append(Problem(nid, node["class_type"], field, name, f"cannot read embedding {path}: {exc}",
                                        "re-download the embedding"))
                continue
            if width is not None and width != H3_EMBEDDING_WIDTH:
                problems.append(Problem(
                    nid, node["class_type"], field, name,
                    f"embedding '{name}' is {width} wide but H3 tokens are {H3_EMBEDDING_WIDTH}: ComfyUI drops it "
                    "with a 'shape mismatch' log warning", "use an H3 effect embedding ([N, 5120])"))
    return problems


def safetensors_lint(locate: Callable[[str, str], Path | None]) -> Callable[[dict, dict], list[Problem]]:
    """F13/F14 header checks of the local model files the graph names, plus H3 embedding widths.

    `locate(folder, name)` returns the file's path or None when it is not on this machine.
    """

    def lint_model_headers(graph: dict, schemas: dict) -> list[Problem]:
        problems = []
        for nid, ct, name, folder, filename in model_inputs(graph, schemas):
            path = locate(folder, filename)
            if path is not None:
                problems += header_problems(nid, ct, name, folder, path)
        return problems + embedding_problems(graph, locate)

    return lint_model_headers


FOLDER_ALIASES = {"diffusion_models": ("diffusion_models", "unet"), "text_encoders": ("text_encoders", "clip"),
                  "unet_gguf": ("unet", "diffusion_models")}


def folder_locator(models_dir: Path) -> Callable[[str, str], Path | None]:
    """locate() over a ComfyUI models/ folder; names never escape their folder."""
    root = Path(models_dir).resolve()

    def locate(folder: str, name: str) -> Path | None:
        for sub in FOLDER_ALIASES.get(folder, (folder,)):
            base = (root / sub).resolve()
            candidate = (base / name).resolve()
            if base in candidate.parents and candidate.is_file():
                return candidate
        return None

    return locate


def run_lints(graph: dict, schemas: dict, lints: Iterable[Callable[[dict, dict], list[Problem]]]) -> list[Problem]:
    problems: list[Problem] = []
    for lint in lints:
        problems.extend(lint(graph, schemas))
    return problems
