"""Editing an API-format graph before a run: --set overrides, seeds, uploaded file names.

Pure: no server. Errors are `GraphEditError`s (the CLI's exit 2, "rejected") that name the argument.
"""

from __future__ import annotations

import json
import random
from typing import Any

from .filetypes import AUDIO_KINDS, IMAGE_KINDS, VIDEO_KINDS, FileKind
from .graph import inputs_of
from .problem import printable

SEED_INPUTS = ("seed", "noise_seed")
UPLOAD_FLAGS = ("image_upload", "audio_upload", "video_upload", "input_files")
UPLOAD_FALLBACK_INPUT = {"LoadImage": "image", "LoadAudio": "audio", "LoadVideo": "file"}
UPLOAD_KINDS = {"LoadImage": (IMAGE_KINDS, "an image (PNG, JPEG, WebP, GIF)"),
                "LoadVideo": (VIDEO_KINDS, "a video (MP4, WebM, MKV)"),
                "LoadAudio": (AUDIO_KINDS | VIDEO_KINDS, "audio (WAV, FLAC, Ogg, MP3, or a video's sound)")}
MAX_SEED = 2**53 - 1  # JSON-safe and within every core seed widget's max
MAX_BATCH = 10_000  # clips in one `run --stage1-server/--stage2-server` batch (prompts x seeds)
PROMPT_INPUT = "prompt"  # the text input --prompt replaces when --prompt-input does not name one


class GraphEditError(ValueError):
    pass


def find_node(graph: dict, ref: str) -> str:
    """A node id from an id or a unique _meta.title."""
    if ref in graph:
        return ref
    titled = [nid for nid, n in graph.items() if isinstance(n, dict) and isinstance(n.get("_meta"), dict)
              and n["_meta"].get("title") == ref]
    if len(titled) == 1:
        return titled[0]
    if titled:
        raise GraphEditError(f"title '{printable(ref)}' names {len(titled)} nodes ({printable(', '.join(titled), 200)}); use a node id")
    raise GraphEditError(f"no node with id or title '{printable(ref)}' (ids: {printable(', '.join(list(graph)[:20]))})")


def parse_value(text: str) -> Any:
    """JSON when it parses (numbers, true/false, lists), else the raw string."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def apply_sets(graph: dict, sets: list[str]) -> None:
    for item in sets:
        target, sep, value = item.partition("=")
        ref, dot, input_name = target.partition(".")
        if not sep or not dot or not input_name:
            raise GraphEditError(f"--set '{printable(item)}': expected NODE.INPUT=VALUE (e.g. 12.noise_seed=7)")
        node = graph[find_node(graph, ref)]
        if not isinstance(node, dict):
            raise GraphEditError(f"--set '{printable(item)}': node {ref} is not a node object")
        if not isinstance(node.get("inputs"), dict):
            node["inputs"] = {}
        node["inputs"][input_name] = parse_value(value)


def seed_inputs(graph: dict) -> list[tuple[str, str]]:
    return [(nid, name) for nid, node in graph.items() for name in SEED_INPUTS
            if isinstance(inputs_of(node).get(name), int) and not isinstance(inputs_of(node).get(name), bool)]


def example_input(graph: dict) -> str:
    """'NODE.INPUT' of the first literal number in the graph (node id order), for a `--set` example."""
    for nid in sorted(graph, key=lambda n: (len(str(n)), str(n))):
        for name, value in inputs_of(graph[nid]).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return printable(f"{nid}.{name}", 100)  # the workflow's key: shown escaped, never a line break
    return "NODE.INPUT"


def no_seed_advice(graph: dict) -> str:
    """What makes ComfyUI run a graph again that has no seed input: change one of its inputs."""
    return (f"change an input with --set NODE.INPUT=VALUE (e.g. --set {example_input(graph)}=<another value>); "
            f"this workflow has no {' or '.join(SEED_INPUTS)} input, so --seed changes nothing")


def job_seeds(graph: dict, seed: str | None, runs: int, rng: random.Random) -> list[int | None]:
    """The seed of each job: --seed N gives N, N+1, ...; random gives fresh ones; none keeps the graph's for
    job 0 and offsets the others so fanned-out runs differ. --seed on a graph without seed inputs is refused:
    it would change nothing (every node would come from ComfyUI's cache)."""
    if seed is not None and not seed_inputs(graph):
        raise GraphEditError(f"--seed {printable(seed, 40)}: {no_seed_advice(graph)}")
    if seed == "random":
        return [rng.randint(0, MAX_SEED) for _ in range(runs)]
    if seed is not None:
        try:
            base = int(seed)
        except ValueError:
            raise GraphEditError(f"--seed '{printable(seed)}': give a whole number or 'random'") from None
        if not 0 <= base <= MAX_SEED - runs:
            raise GraphEditError(f"--seed {base}: give a number from 0 to {MAX_SEED - runs}")
        return [base + i for i in range(runs)]
    found = seed_inputs(graph)
    if runs == 1 or not found:
        return [None] * runs
    base = graph[found[0][0]]["inputs"][found[0][1]]
    return [None] + [(base + i) % MAX_SEED for i in range(1, runs)]


def seed_range(seed: str | None, graph: dict) -> list[int] | None:
    """--seed A-B: every seed from A to B (at most MAX_BATCH); None when `seed` is not a range (job_seeds reads it)."""
    first, sep, last = (seed or "").partition("-")
    if not sep or not first.isdigit() or not last.isdigit():
        return None
    if not seed_inputs(graph):
        raise GraphEditError(f"--seed {printable(seed, 40)}: {no_seed_advice(graph)}")
    low, high = int(first), int(last)
    if not low <= high <= MAX_SEED:
        raise GraphEditError(f"--seed {printable(seed, 40)}: give A-B with A <= B <= {MAX_SEED}")
    if high - low + 1 > MAX_BATCH:
        raise GraphEditError(f"--seed {printable(seed, 40)}: {high - low + 1:,} seeds; a batch has at most {MAX_BATCH:,} "
                             "clips")
    return list(range(low, high + 1))


def prompt_target(graph: dict, ref: str | None) -> tuple[str, str]:
    """(node id, input) that --prompt / --prompts replace: `ref` NODE.INPUT when given, else the one literal text
    input named 'prompt' in the graph (the H3 node's, or H3KitEffectPrompt's)."""
    if ref:
        node_ref, dot, name = ref.partition(".")
        if not dot or not name:
            raise GraphEditError(f"--prompt-input '{printable(ref)}': expected NODE.INPUT (e.g. 8.prompt)")
        nid = find_node(graph, node_ref)
        if not isinstance(inputs_of(graph[nid]).get(name), str):
            raise GraphEditError(f"--prompt-input '{printable(ref)}': node {nid} has no text input '{printable(name)}'")
        return nid, name
    found = [(nid, PROMPT_INPUT) for nid, node in graph.items() if isinstance(inputs_of(node).get(PROMPT_INPUT), str)]
    if len(found) != 1:
        shown = ", ".join(f"{nid}.{name}" for nid, name in found) or "none"
        raise GraphEditError(f"--prompt: the graph has {len(found)} text inputs named '{PROMPT_INPUT}' ({shown}); say "
                             "which one takes the prompts with --prompt-input NODE.INPUT")
    return found[0]


def apply_seed(graph: dict, seed: int | None) -> list[str]:
    if seed is None:
        return []
    changed = []
    for nid, name in seed_inputs(graph):
        graph[nid]["inputs"][name] = seed
        changed.append(f"{nid}.{name}")
    return changed


def upload_input_name(object_info: dict, class_type: str) -> str | None:
    """The input of a loader node that takes an uploaded file (from its /object_info flags)."""
    info = object_info.get(class_type, {}).get("input", {}) if isinstance(object_info.get(class_type), dict) else {}
    for name, spec in {**info.get("required", {}), **info.get("optional", {})}.items():
        opts = spec[1] if isinstance(spec, list) and len(spec) > 1 and isinstance(spec[1], dict) else {}
        if any(opts.get(flag) for flag in UPLOAD_FLAGS):
            return name
    return UPLOAD_FALLBACK_INPUT.get(class_type)


def parse_upload(item: str, graph: dict) -> tuple[str, str]:
    """'NODE=PATH' -> (node id, path)."""
    ref, sep, path = item.partition("=")
    if not sep or not path:
        raise GraphEditError(f"--upload '{printable(item)}': expected NODE=PATH")
    return find_node(graph, ref), path


def check_upload_kind(item: str, class_type: str, path: str, kind: FileKind | None) -> None:
    """--upload NODE=PATH: the file must be what the loader reads. `kind`: what its first bytes say it is
    (adapters/files.sniff_file), None when it cannot be read."""
    if kind is None:
        raise GraphEditError(f"--upload '{printable(item)}': {printable(path)} cannot be read")
    wanted = UPLOAD_KINDS.get(class_type)
    if wanted is not None and kind.key not in wanted[0]:
        raise GraphEditError(f"--upload '{printable(item)}': {printable(path)} is {kind.text}, but {class_type} loads "
                             f"{wanted[1]}; pass such a file")
