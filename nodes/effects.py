"""Effect embeddings for MiniMax-H3: put `embedding:<name>` where it takes effect, and prove the rows went in.

H3KitEffectPrompt   prompt text (+ CLIP) -> prompt with `embedding:<name>` markers at the start of the first shot's
                    description (checks/h3_prompt.py: every prompt form of the pack and the official templates; never
                    the first token, F15), after checking every effect file: it exists in an embeddings folder, holds
                    one 2-D [N, 5120] tensor (the Qwen3-VL-32B token width) and is not truncated; and a copy of the
                    CLIP whose tokenizer resolves the markers (effect_tokens.py), cross-checked against the rows the
                    encoder's own embedding loader reads (and that reads H3's dialogue tokens as upstream where the
                    host splits them). Without a CLIP it checks that this ComfyUI's MiniMax-H3 tokenizer parses
                    markers at all, and stops where it would read them as text. An encoder that bypasses the CLIP
                    output is judged by what this host's tokenizer does (asked, never read from a version).
H3KitEffectSplice   CLIP + prompt + effect -> CONDITIONING with the N rows spliced into the token list at the chosen
                    position, verified against what others produced: the encoder's output positions and width,
                    and the encoder's own embedding loader reading the same rows for `embedding:<name>`.

Why: ComfyUI drops a missing or wrong-width embedding with a log line only, a marker at the very start of an H3
prompt has no visible effect (field-notes §D, host-api.md §4), and ComfyUI 0.33.0's MiniMax-H3 tokenizer reads every
marker as plain text (host-api.md §10). The output still changes (literal text tokens), so users believe the effect
worked.

Effect files are listed by name only; tensors are read at execution, safetensors through their header alone
(8-byte length + JSON) unless the rows themselves are needed, legacy .pt/.bin only with weights_only=True.
Every effect, chosen in a node or typed as a marker into a prompt, passes the same checks (effect_files.py: layout,
row cap, float dtype, finite rows; per prompt at most 16 markers and 4,096 rows), and the embeddings folders are
walked once per prompt (effect_files.EmbeddingIndex) to resolve all its markers.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from dataclasses import dataclass
from pathlib import Path
from re import compile as regex
from typing import Any

import torch

from ..adapters.host import comfyui_version, host_choices, host_loaded, host_module, running_host_node_ids
from ..checks import h3_prompt, server
from ..checks.rules_lints import effect_prompt_wiring, prompt_encoders
from . import effect_files, effect_tokens
from .common import H3KitInputError, Report, category
from .effect_files import (
    EXTENSIONS,
    H3_EMBED_KEY,
    H3_WIDTH,
    EffectInfo,
    EmbeddingIndex,
    inside,
    logged_walks,
    width_hint,
)

CATEGORY = category("Effects")
ENV_DIR = "H3KIT_EMBEDDINGS_DIR"
MARKER = effect_tokens.MARKER
NONE = "none"

POSITIONS = ("after_first_shot_tag", "after_first_sentence", "end")
SHOT_HEADINGS = "[Shot k], Shot k:, CUT k: or a timed line like [0s-2s]"
SENTENCE_END = regex(r"[.!?\u3002\uff01\uff1f](?=\s|$)")
WORD = regex(r"\w")
LEADING_MARKERS = regex(r"\A(?:\s*embedding:\S+)+\s*")
ANY_MARKER = regex(r"embedding:(\S*)")
LISTED_PROBLEMS = 8  # marker problems listed one by one in a report or an error

FIX_F15 = (
    "put the marker at the start of the first shot's description, after its heading ([Shot 1], SHOT 1:, CUT 1: or "
    "[0s-2s]; H3 prompts start 'integrated_multimodal_description: [Shot 1] ...'), never as the first token (F15)"
)


# ------------------------------------------------------------------------------------------- folders and files
def embedding_dirs() -> list[Path]:
    """ComfyUI's embeddings folders inside ComfyUI, else the folders in $H3KIT_EMBEDDINGS_DIR (os.pathsep list)."""
    if host_loaded("folder_paths"):
        return [Path(p) for p in host_module("folder_paths").get_folder_paths("embeddings")]
    raw = os.environ.get(ENV_DIR, "")
    return [Path(p) for p in raw.split(os.pathsep) if p]


def list_effect_files() -> list[str]:
    """Names for the effect combo, each once, in walk order. Reads directory entries only: no file is opened at
    startup. Linear in the files (it runs in /object_info, on ComfyUI's event loop: the list-membership dedupe it
    replaced took 2.8 s for 20,000 files)."""
    names: dict[str, None] = {}
    for walk in logged_walks(embedding_dirs()):
        names.update(dict.fromkeys(walk.files))
    return list(names)


def resolve_effect_file(node: str, input_name: str, name: str) -> Path:
    """The file behind a combo value; names that leave the embeddings folders are refused."""
    dirs = embedding_dirs()
    if not dirs:
        raise H3KitInputError(node, input_name, name, "no embeddings folder is configured",
                              f"run inside ComfyUI (models/embeddings) or set {ENV_DIR} to the folder")
    if not isinstance(name, str) or not name or "\x00" in name or os.path.isabs(name):
        raise H3KitInputError(node, input_name, name, "not a file name inside the embeddings folder",
                              "choose an effect from the list")
    if not name.lower().endswith(EXTENSIONS):
        raise H3KitInputError(node, input_name, name, "not an embedding file",
                              f"choose a {', '.join(EXTENSIONS)} file from the list")
    for root in dirs:
        candidate = os.path.join(root, name)
        if not inside(root, candidate):
            raise H3KitInputError(node, input_name, name, "the name points outside the embeddings folder",
                                  "choose an effect from the list; names cannot contain '..'")
        if os.path.isfile(candidate):
            return Path(candidate)
    raise H3KitInputError(
        node, input_name, name,
        f"unknown effect file: not found in {', '.join(str(d) for d in dirs)}",
        f"copy the file into models/embeddings/ and refresh (R), or choose one of: {', '.join(list_effect_files()[:8]) or 'none installed'}",
    )


# ------------------------------------------------------------------------------------------- reading effect files
def inspect_effect(node: str, input_name: str, name: str) -> EffectInfo:
    """Check an effect file without loading its rows (safetensors: header only)."""
    return effect_files.inspect_file(node, input_name, name, resolve_effect_file(node, input_name, name))


def load_effect_rows(node: str, input_name: str, info: EffectInfo) -> torch.Tensor:
    """The [N, 5120] rows as float32 (the dtype ComfyUI splices embeddings in), checked (effect_files.checked_rows:
    the same check a typed marker's rows pass)."""
    return effect_files.load_rows(node, input_name, info)


# ------------------------------------------------------------------------------------------- markers in text
def _marker_safe(name: str) -> bool:
    # ComfyUI takes the first whitespace-separated word, cuts it at '<' or '[' and strips trailing commas
    return bool(name) and not re.search(r"[\s<\[]", name) and not name.endswith(",")


def marker_for(node: str, input_name: str, info: EffectInfo, index: EmbeddingIndex) -> str:
    """`embedding:<name>` that ComfyUI resolves to exactly this file: the bare stem when unambiguous (`index`: the
    embeddings folders, walked once for the whole prompt)."""
    stem = info.name[: -len(info.path.suffix)]
    target = os.path.realpath(info.path)
    for name in (stem, info.name):
        if _marker_safe(name) and index.candidates(name) == [target]:
            return MARKER + name
    if not _marker_safe(info.name):
        raise H3KitInputError(node, input_name, info.name,
                              "the file name contains a space, '<', '[' or a trailing comma, which ends an embedding: marker",
                              "rename the file (letters, digits, '_', '-', '.')")
    others = sorted(set(index.candidates(stem)) - {target})
    raise H3KitInputError(node, input_name, info.name,
                          f"'{MARKER}{stem}' is ambiguous: ComfyUI may load {', '.join(others[:3])} instead",
                          "rename or remove the other file with the same name")


def insertion_cut(text: str, position: str, report: Report) -> int:
    """Character index where markers go: always after at least one word, so never the first token (F15), and inside
    the part that describes the video (detailed_description in a six-section Ref2VA prompt, checks/h3_prompt.py)."""
    if position not in POSITIONS:
        raise H3KitInputError(report.node, "position", position, "unknown position", f"use one of: {', '.join(POSITIONS)}")
    start, end, section = h3_prompt.description_bounds(text)
    used = position
    if used == "after_first_shot_tag":
        shot = h3_prompt.first_shot_description(text)
        if shot is not None:
            report.set(position_used=used, shot_heading=shot.heading, section=shot.section)
            return shot.start
        report.fallback("no_shot_tag", f"no shot heading ({SHOT_HEADINGS}) in the prompt; effects placed after the "
                        "first sentence of " + (f"{section} instead" if section else "the prompt instead"))
        used = "after_first_sentence"
    if used == "after_first_sentence":
        for match in SENTENCE_END.finditer(text, start, end):
            if WORD.search(text, start, match.start()):  # an empty first sentence ('. a cat') does not count
                report.set(position_used=used, section=section)
                return match.end()
        if position == "after_first_sentence":
            report.fallback("no_sentence_end", "the prompt has no sentence end after a word; effects placed at the end"
                            + (f" of {section}" if section else ""))
        used = "end"
    cut = len(text[:end].rstrip())
    if cut <= start or not WORD.search(text, start, cut):
        raise H3KitInputError(report.node, "prompt", text,
                              "the prompt has no word for the effect to follow; a marker as the first token has no effect (F15)",
                              "write the scene first, e.g. 'integrated_multimodal_description: [Shot 1] A man on a rooftop.'")
    report.set(position_used=used, section=section)
    return cut


def insert_markers(text: str, cut: int, markers: list[str]) -> str:
    """Markers at `cut` with whitespace on both sides (ComfyUI only parses a marker that follows a space or
    newline; the name ends at the next whitespace)."""
    head, tail = text[:cut], text[cut:]
    before = "" if head.endswith((" ", "\n")) else " "
    after = "" if not tail or tail[0].isspace() else " "
    return head + before + " ".join(markers) + after + tail


def split_leading_markers(text: str) -> tuple[list[str], str]:
    """(markers at the very start, even after whitespace; the rest of the prompt)."""
    match = LEADING_MARKERS.match(text)
    if not match:
        return [], text
    return match.group(0).split(), text[match.end():]


def count_markers(text: str) -> int:
    """The embedding: markers the host's tokenizer would resolve in `text` (glued ones are text to it)."""
    return sum(piece.startswith(MARKER) for piece in effect_tokens.marker_pieces(text))


def marker_problems(node: str, text: str, index: EmbeddingIndex, chosen: dict[str, EffectInfo] | None = None) -> list[str]:
    """Every marker of `text` checked once against `index` (the folders walked once per prompt). Markers ComfyUI will
    treat as literal text, or that resolve to no file or to several, are sentences (at most LISTED_PROBLEMS, then a
    count). A marker that resolves to one file passes the checks of a chosen effect file, rows included
    (effect_files: layout from the header, then the rows read and all finite), else the node stops; so does a
    prompt over its budget of markers and rows. `chosen`: markers of files this node already checked (by their
    marker), counted but not read again."""
    chosen = chosen or {}
    pieces = effect_tokens.marker_pieces(text)
    markers = [piece for piece in pieces if piece.startswith(MARKER)]
    effect_files.check_prompt_budget(node, "prompt", len(markers))
    problems = []
    for match in ANY_MARKER.finditer(text):
        start = match.start()
        if start > 0 and text[start - 1] not in " \n":
            problems.append(f"'{match.group(0)}' follows '{text[start - 1]}', not a space or newline, so ComfyUI reads it as plain text")
    typed: dict[str, EffectInfo] = {}
    rows = 0
    for piece in markers:
        word = effect_tokens.marker_word(piece)
        if word in chosen:
            rows += chosen[word].rows
            continue
        marker = effect_tokens.resolve_marker(index, piece)
        if len(marker.files) != 1:
            problems.append(f"'{marker.word}' matches no file in the embeddings folders, so ComfyUI ignores it"
                            if not marker.files else f"'{marker.word}' matches {len(marker.files)} files "
                            f"({', '.join(marker.files[:3])}), and ComfyUI may load any one of them")
            continue
        if marker.files[0] not in typed:
            typed[marker.files[0]] = effect_tokens.checked_marker(node, "prompt", index, marker)
        rows += typed[marker.files[0]].rows
    effect_files.check_prompt_budget(node, "prompt", len(markers), rows)
    for info in typed.values():  # within the budget: read and check each typed marker's rows once
        effect_files.load_rows(node, "prompt", info)
    if len(problems) > LISTED_PROBLEMS:
        problems = problems[:LISTED_PROBLEMS] + [f"and {len(problems) - LISTED_PROBLEMS} more markers like these"]
    return problems


def _selected_effects(effects: list[str]) -> list[str]:
    return [e for e in effects if e and e != NONE]


def _version_note(report: Report) -> None:
    """Effect rows go into the host's MiniMax-H3 conditioning: said when this ComfyUI serves no native H3 (read from
    its node registry, not its version number: 0.33.0 has it, the 0.12.1 fork has not)."""
    ids = running_host_node_ids()
    if ids is not None and not ids & server.native_h3_nodes():
        report.warn(f"ComfyUI {comfyui_version() or '(version unknown)'} serves no native MiniMax-H3 nodes (read from "
                    "its node list): the effect rows need its H3 text encoder and conditioning")


def _file_signature(effects: list[str]) -> str:
    """Changes when an effect file is replaced, so ComfyUI re-runs the node instead of reusing a cached result."""
    parts = []
    for name in _selected_effects(effects):
        for root in embedding_dirs():
            path = os.path.join(root, name)
            if inside(root, path) and os.path.isfile(path):
                stat = os.stat(path)
                parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
                break
    return "|".join(parts)


# ============================================================================== H3KitEffectPrompt
POSITION_TOOLTIP = (
    "Where the effect goes. after_first_shot_tag: at the start of the first shot's description, after its heading "
    "([Shot 1], SHOT 1:, CUT 1: or a timed line [0s-2s], and a time like 0-3s); a [Shot k] inside a reference "
    "sentence or retention_analysis is not a heading. Falls back to after the first sentence when there is none. "
    "after_first_sentence: after the first sentence end. end: at the end. In a six-section Ref2VA prompt all three "
    "stay inside detailed_description. Never the first token: a marker there has no effect on H3 (F15)."
)


class H3KitEffectPrompt:
    DISPLAY_NAME = "H3Kit Effect Prompt"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Adds MiniMax-H3 effect embeddings (models/embeddings, [N, 5120]) to a prompt as embedding:<name> markers, "
        "at the start of the first shot's description where they take effect ([Shot 1], SHOT 1:, CUT 1:, [0s-2s]; in a "
        "Ref2VA prompt inside detailed_description; never as the first token, F15), after checking each file: "
        "present, 2-D, 5120 wide, complete. Connect the text encoder to 'clip' and feed both outputs, prompt and clip, "
        "to MiniMaxH3ImageToVideo: the clip output resolves every marker to its rows (x strength) through the "
        "encoder's own embedding loader on every host, also where the host's MiniMax-H3 tokenizer reads markers as "
        "plain text (ComfyUI 0.33.0), and reads dialogue <d> </d> as one token each; a marker it cannot load stops "
        "the run instead of becoming text."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("STRING", "STRING", "CLIP")
    RETURN_NAMES = ("prompt", "report", "clip")

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        options = [NONE, *host_choices(cls.__name__, "effect", list_effect_files)]
        effect_opts = {"default": NONE, "model_folder": "embeddings"}
        return {
            "required": {
                "prompt": ("STRING", {
                    "multiline": True, "default": "integrated_multimodal_description: [Shot 1] ",
                    "tooltip": "The H3 prompt. Markers already at its very start are moved mid-sentence (or refused when strict).",
                }),
                "effect": (options, {**effect_opts, "tooltip": "Effect embedding file from models/embeddings ([N, 5120] for H3); 'none' adds nothing."}),
            },
            "optional": {
                "effect_2": (options, {**effect_opts, "tooltip": "A second effect, inserted right after the first."}),
                "effect_3": (options, {**effect_opts, "tooltip": "A third effect, inserted after the second."}),
                "position": (list(POSITIONS), {"default": POSITIONS[0], "tooltip": POSITION_TOOLTIP}),
                "strict": ("BOOLEAN", {
                    "default": False,
                    "tooltip": "On: stop with an error (showing the fixed prompt) when the prompt starts with a marker or "
                               "holds a marker ComfyUI would ignore. Off: move leading markers and list the rest in the report.",
                }),
                "clip": ("CLIP", {"tooltip": "The MiniMax-H3 text encoder (CLIPLoader type 'minimax'). Its copy on the "
                                             "'clip' output resolves the markers; give MiniMaxH3ImageToVideo that copy "
                                             "together with the prompt."}),
                "strength": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 4.0, "step": 0.05,
                                       "tooltip": "Scales every effect row once (1.0 = as trained). Applied by the "
                                                  "'clip' output, so it needs 'clip' connected."}),
            },
            "hidden": {"graph": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def IS_CHANGED(cls, effect: str = NONE, effect_2: str = NONE, effect_3: str = NONE, **_: Any) -> str:
        return _file_signature([effect, effect_2, effect_3])

    def execute(self, prompt: str, effect: str, effect_2: str = NONE, effect_3: str = NONE,
                position: str = POSITIONS[0], strict: bool = False, clip: Any = None, strength: float = 1.0,
                graph: dict | None = None, unique_id: Any = None) -> tuple[str, str, Any]:
        node = type(self).__name__
        report = Report(node).set(position_requested=position, strength=strength)
        _version_note(report)
        if not isinstance(strength, (int, float)) or not math.isfinite(strength) or strength < 0:
            raise H3KitInputError(node, "strength", strength, "must be a finite number >= 0", "use 1.0")
        chosen = [(name, value) for name, value in (("effect", effect), ("effect_2", effect_2), ("effect_3", effect_3))
                  if value and value != NONE]
        seen: dict[str, str] = {}
        for input_name, value in chosen:
            if value in seen:
                raise H3KitInputError(node, input_name, value, f"the same effect is already chosen in '{seen[value]}'",
                                      f"set '{input_name}' to none or to another effect")
            seen[value] = input_name
        effect_files.check_prompt_budget(node, "prompt", count_markers(prompt) + len(chosen))
        infos = [(input_name, inspect_effect(node, input_name, value)) for input_name, value in chosen]
        index = EmbeddingIndex.of(embedding_dirs())  # once for the whole prompt: every marker is resolved in it
        markers = [marker_for(node, input_name, info, index) for input_name, info in infos]

        moved, body = split_leading_markers(prompt)
        result = self._place(body, moved + markers, position, report) if moved or markers else prompt
        if moved:
            problem = f"the prompt starts with {' '.join(moved)}; a marker as the first token has no effect (F15)"
            if strict:
                raise H3KitInputError(node, "prompt", prompt, problem, f"use this prompt instead: {result!r}")
            report.warn(problem + "; moved mid-sentence")
        for problem in marker_problems(node, result, index, {marker: info for marker, (_, info) in zip(markers, infos,
                                                                                                strict=True)}):
            if strict:
                raise H3KitInputError(node, "prompt", prompt, problem, "put a space before the marker and install the file")
            report.warn(problem)
        effects = [{**info.summary(), "marker": marker} for (_, info), marker in zip(infos, markers, strict=True)]
        report.set(effects=effects, rows_total=sum(info.rows for _, info in infos), moved_markers=moved,
                   prompt=result)
        if not chosen and not moved:
            report.set(position_used=None, note="no effect chosen; prompt unchanged")
        in_text = [effect_tokens.marker_word(p) for p in effect_tokens.marker_pieces(result) if p.startswith(MARKER)]
        in_text = markers + [m for m in in_text if m not in markers]  # the host is asked about a checked file first
        if clip is None:
            parses = self._without_encoder(node, strength, in_text, report)
            effect_tokens.report_served_dialogue(node, result, [str(d) for d in embedding_dirs()], report,
                                                 FIX_EFFECT_CLIP)
            _check_wiring(node, graph, unique_id, parses, report)
            return result, report.json(), None
        encoder, parses = self._with_encoder(node, clip, strength, infos, markers, in_text, result, report)
        _check_wiring(node, graph, unique_id, parses, report)
        return result, report.json(), encoder

    @staticmethod
    def _place(body: str, markers: list[str], position: str, report: Report) -> str:
        cut = insertion_cut(body, position, report)
        report.set(insert_at_char=cut)
        return insert_markers(body, cut, markers)

    @staticmethod
    def _with_encoder(node: str, clip: Any, strength: float, infos: list, markers: list[str], in_text: list[str],
                      text: str, report: Report) -> Any:
        """The encoder copy that resolves markers, cross-checked: the host's loader gives each chosen effect exactly the
        rows read from its file, and the copy puts them where the marker stands, each scaled once."""
        if not callable(getattr(clip, "clone", None)) or getattr(clip, "tokenizer", None) is None:
            raise H3KitInputError(node, "clip", type(clip).__name__, "not a ComfyUI CLIP (no tokenizer/clone)",
                                  effect_tokens.FIX_ENCODER)
        if isinstance(clip.tokenizer, effect_tokens.EffectTokenizer):
            report.warn("the connected clip already came from an H3KitEffectPrompt; this node's strength replaces "
                        "that one (rows are scaled once)")
        for (input_name, info), marker in zip(infos, markers, strict=True):
            host_rows = effect_tokens.host_marker_rows(node, clip.tokenizer, marker)
            ours = load_effect_rows(node, input_name, info)
            if not host_rows:
                raise H3KitInputError(node, input_name, info.name,
                                      f"the text encoder's embedding loader finds no {marker} in its folders "
                                      f"({_folders_of(clip)}), while H3Kit found it in {info.path.parent}",
                                      "load the text encoder with CLIPLoader (it reads models/embeddings), or move "
                                      "the file into models/embeddings/")
            stacked = torch.stack([row.detach().to(torch.float32).reshape(-1) for row in host_rows])
            if stacked.shape != ours.shape or not torch.equal(stacked, ours):
                raise H3KitInputError(node, input_name, info.name,
                                      f"the text encoder loads {marker} as {list(stacked.shape)} rows that differ from "
                                      f"the {[info.rows, info.width]} rows in {info.name} (another file or tensor of "
                                      "that name)", "keep one embedding of that name, holding the rows alone or under "
                                      f"'{H3_EMBED_KEY}'")
        prepared = effect_tokens.prepare_dialogue(node, clip.tokenizer, text, report)
        encoder = effect_tokens.with_effects(node, clip, strength, prepared)
        entries, spans = encoder.tokenizer.prompt_tokens(text)  # stops on a marker the encoder cannot load
        by_marker = {marker: (start, count) for marker, start, count in spans}
        for effect, info_marker in zip(report.facts["effects"], markers, strict=True):
            start, count = by_marker.get(info_marker, (None, 0))
            if count != effect["rows"]:
                raise H3KitInputError(node, "clip", info_marker, f"the prepared encoder put {count} rows for "
                                      f"{info_marker}, not the file's {effect['rows']}", effect_tokens.FIX_ENCODER)
            effect["token_index"] = start
        parses = effect_tokens.outer_parses_markers(node, clip.tokenizer, in_text[0]) if in_text else None
        report.set(prompt_tokens=len(entries), markers_resolved_by=(
            "the host's MiniMax-H3 tokenizer (it parses markers); H3Kit's clip output resolves them the same way"
            if parses else "H3Kit's clip output (this host's MiniMax-H3 tokenizer reads markers as plain text)"
            if in_text else "nothing to resolve"))
        return encoder, parses

    @staticmethod
    def _without_encoder(node: str, strength: float, in_text: list[str], report: Report) -> bool | None:
        """Whether this ComfyUI's own tokenizer parses the markers (True), or None when it cannot be asked; stops
        where it reads them as text (the effect would silently do nothing)."""
        if strength != 1.0:
            raise H3KitInputError(node, "strength", strength, "strength is applied by the 'clip' output, and 'clip' "
                                  "is not connected", "connect the text encoder to 'clip' and use the 'clip' output")
        if not in_text:
            report.set(markers_resolved_by="nothing to resolve")
            return None
        verdict = host_reads_markers_as_text(node, in_text[0], report)
        if verdict is True:
            raise H3KitInputError(node, "clip", None, "this ComfyUI's MiniMax-H3 tokenizer reads embedding: markers as "
                                  "plain text (asked just now; hosts without Comfy-Org/ComfyUI#15697, such as ComfyUI "
                                  "0.33.0, do), so the effect would silently do nothing", FIX_EFFECT_CLIP)
        report.set(markers_resolved_by="the host's MiniMax-H3 tokenizer (checked: it parses markers)" if verdict is False
                   else "not checked")
        return None if verdict is None else not verdict


FIX_EFFECT_CLIP = ("connect the text encoder (CLIPLoader) to this node's 'clip' input and its 'clip' output to "
                   "MiniMaxH3ImageToVideo's 'clip' (works on every host)")


def _folders_of(clip: Any) -> str:
    inner = effect_tokens.inner_tokenizer("H3KitEffectPrompt", effect_tokens.host_tokenizer(clip.tokenizer))
    folders = getattr(inner, "embedding_directory", None)
    return ", ".join(map(str, folders)) if isinstance(folders, (list, tuple)) else str(folders)


def _check_wiring(node: str, graph: Any, unique_id: Any, parses: bool | None, report: Report) -> None:
    """The graph this node runs in (checks/rules_lints.effect_prompt_wiring), judged with what this host's tokenizer
    does with markers (`parses`; None when it could not be asked): errors stop the node, warnings go to the report,
    and the report names the clip each encoder of the prompt uses."""
    if not isinstance(graph, dict) or unique_id is None:
        return
    for problem in effect_prompt_wiring(graph, str(unique_id), host_parses_markers=parses):
        message = f"node {problem.node_id} ({problem.class_type}) " + problem.message
        if problem.severity == "error":
            raise H3KitInputError(node, "clip", problem.value, message, problem.fix)
        report.warn(f"{message}. Fix: {problem.fix}")
    own = "this node's clip output"
    other = {True: "parses the markers itself", False: "reads markers as text", None: "not asked"}[parses]
    report.set(encoders={cid: f"{consumer.get('class_type', '?')}: " + (own if ours else
                         f"clip of node {consumer['inputs']['clip'][0]} (this host's MiniMax-H3 tokenizer {other})")
                         for cid, consumer, ours in prompt_encoders(graph, str(unique_id))})


def host_reads_markers_as_text(node: str, marker: str, report: Report) -> bool | None:
    """Without a clip: does this ComfyUI's own MiniMax-H3 tokenizer turn a loadable marker into text (True) or into
    rows (False)? None, with the reason as a fallback, when there is no such tokenizer or it cannot be asked."""
    try:
        tokenizer = effect_tokens.served_h3_tokenizer([str(d) for d in embedding_dirs()])
        if tokenizer is None:
            report.fallback("no_encoder", "no clip connected and no MiniMax-H3 tokenizer in this process: cannot check "
                            "that the markers are parsed; connect 'clip' and use the 'clip' output to be sure")
            return None
        if not effect_tokens.host_marker_rows(node, tokenizer, marker):
            report.fallback("no_host_rows", f"this ComfyUI's MiniMax-H3 tokenizer finds no {marker}, so whether it "
                            "parses markers was not checked; connect 'clip' and use the 'clip' output to be sure")
            return None
        return not effect_tokens.outer_parses_markers(node, tokenizer, marker)
    except H3KitInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the host's tokenizer files or library may be missing or broken
        report.fallback("host_tokenizer", f"could not ask this ComfyUI's MiniMax-H3 tokenizer ({type(exc).__name__}: "
                        f"{str(exc)[:160]}); connect 'clip' and use the 'clip' output to be sure")
        return None


def _with_dialogue(node: str, clip: Any, prompt: str, report: Report) -> Any:
    """The clip whose tokenizer reads the prompt's dialogue tokens as upstream (#15808) does: a clone where this host
    splits them (effect_tokens.prepare_dialogue; the report says which), else the clip itself."""
    if not h3_prompt.dialogue_tokens_in(prompt):
        report.set(dialogue_tokens="none in the prompt")
        return clip
    if not callable(getattr(clip, "clone", None)) or getattr(clip, "tokenizer", None) is None:
        raise _contract_error(node, f"{type(clip).__name__} without tokenizer/clone")
    tokenizer = effect_tokens.prepare_dialogue(node, clip.tokenizer, prompt, report, "this node's encoding")
    if tokenizer is clip.tokenizer:
        return clip
    clone = clip.clone()
    clone.tokenizer = tokenizer
    return clone


# ============================================================================== H3KitEffectSplice
@dataclass
class TokenStream:
    """One encoder's entries in ComfyUI's token-list form (host-api.md §4): [(token, weight[, word_id]), ...]
    where token is an int id, a 1-D embedding tensor, or a dict (vision block)."""
    key: str
    entries: list[tuple]


def _contract_error(node: str, found: str) -> H3KitInputError:
    return H3KitInputError(
        node, "clip", found,
        "the connected encoder's tokenizer does not return ComfyUI's token-list form "
        "{encoder: [[(token, weight), ...]]} (host-api.md §4), so rows cannot be spliced safely",
        "connect the MiniMax-H3 text encoder (CLIPLoader type 'minimax'), or use H3KitEffectPrompt's "
        "embedding: markers with this encoder",
    )


def _declared_width(clip: Any, key: str) -> int | None:
    """embedding_size of the inner SDTokenizer for `key`, when the tokenizer exposes it."""
    outer = getattr(clip, "tokenizer", None)
    for attr in (getattr(outer, "clip", None), key, f"clip_{key}"):
        inner = getattr(outer, attr, None) if isinstance(attr, str) else None
        if inner is not None and isinstance(getattr(inner, "embedding_size", None), int):
            return inner.embedding_size
    return None


def _valid_entry(entry: Any) -> bool:
    if not isinstance(entry, tuple) or len(entry) < 2 or not isinstance(entry[1], numbers.Real):
        return False
    token = entry[0]
    is_id = isinstance(token, numbers.Integral) and not isinstance(token, bool)
    return is_id or torch.is_tensor(token) or isinstance(token, dict)


def token_stream(node: str, clip: Any, text: str) -> TokenStream:
    """clip.tokenize(text) checked against the token-list contract; exactly one encoder stream, one batch."""
    tokenize = getattr(clip, "tokenize", None)
    if not callable(tokenize) or not callable(getattr(clip, "encode_from_tokens_scheduled", None)):
        raise _contract_error(node, f"{type(clip).__name__} without tokenize/encode_from_tokens_scheduled")
    tokens = tokenize(text)
    if not isinstance(tokens, dict) or not tokens:
        raise _contract_error(node, f"tokenize() returned {type(tokens).__name__}")
    keys = list(tokens)
    if len(keys) > 1:
        keys = [k for k in keys if _declared_width(clip, k) == H3_WIDTH] or keys
    if len(keys) != 1:
        raise _contract_error(node, f"{len(tokens)} encoder streams ({', '.join(map(str, tokens))}), none declared {H3_WIDTH} wide")
    batches = tokens[keys[0]]
    if not isinstance(batches, list) or not all(isinstance(b, list) for b in batches):
        raise _contract_error(node, f"tokenize()['{keys[0]}'] is {type(batches).__name__}, not a list of batches")
    if len(batches) != 1:
        raise H3KitInputError(node, "prompt", text, f"the encoder split the prompt into {len(batches)} token batches",
                              "use the MiniMax-H3 encoder (one batch per prompt) or a shorter prompt")
    if not all(_valid_entry(e) for e in batches[0]):
        bad = next(e for e in batches[0] if not _valid_entry(e))
        raise _contract_error(node, f"entry {bad!r:.80}")
    return TokenStream(keys[0], list(batches[0]))


def _same_token(a: tuple, b: tuple) -> bool:
    x, y = a[0], b[0]
    if torch.is_tensor(x) and torch.is_tensor(y):
        return x.shape == y.shape and bool(torch.equal(x, y))
    if isinstance(x, dict) or isinstance(y, dict):
        return x is y
    return type(x) is type(y) and x == y


def common_prefix(a: list[tuple], b: list[tuple]) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if not _same_token(x, y):
            break
        count += 1
    return count


def conditioning_shape(node: str, cond: Any) -> tuple[int, ...]:
    if not (isinstance(cond, list) and cond and isinstance(cond[0], (list, tuple)) and torch.is_tensor(cond[0][0])):
        raise _contract_error(node, f"encode_from_tokens_scheduled returned {type(cond).__name__}")
    return tuple(cond[0][0].shape)


class H3KitEffectSplice:
    DISPLAY_NAME = "H3Kit Effect Splice (verified)"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Encodes the prompt with the connected MiniMax-H3 text encoder and splices an effect's N rows into the token "
        "list at the chosen position (never position 0), then proves it without trusting its own list: the encoder "
        "must return one 5120-wide position per prompt token plus the N rows of the file's header, and the "
        "encoder's own embedding loader, given embedding:<name>, must load the same N rows. Use the CONDITIONING as "
        "t2va positive (with EmptyMiniMaxH3LatentAV). For MiniMaxH3ImageToVideo (which encodes its prompt itself) "
        "use H3KitEffectPrompt with its clip output instead."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("CONDITIONING", "STRING")
    RETURN_NAMES = ("conditioning", "report")

    @classmethod
    def INPUT_TYPES(cls) -> dict[str, Any]:
        return {
            "required": {
                "clip": ("CLIP", {"tooltip": "The MiniMax-H3 text encoder (CLIPLoader type 'minimax')."}),
                "prompt": ("STRING", {"multiline": True, "default": "integrated_multimodal_description: [Shot 1] ",
                                      "tooltip": "The H3 prompt, without the effect marker."}),
                "effect": (host_choices(cls.__name__, "effect", list_effect_files), {"model_folder": "embeddings",
                                                 "tooltip": "Effect embedding file ([N, 5120]) from models/embeddings."}),
                "position": (list(POSITIONS), {"default": POSITIONS[0], "tooltip": POSITION_TOOLTIP}),
            },
            "optional": {
                "strength": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 4.0, "step": 0.05,
                                       "tooltip": "Scales the effect rows (1.0 = as trained)."}),
            },
        }

    @classmethod
    def IS_CHANGED(cls, effect: str = "", **_: Any) -> str:
        return _file_signature([effect])

    def execute(self, clip: Any, prompt: str, effect: str, position: str = POSITIONS[0],
                strength: float = 1.0) -> tuple[list, str]:
        node = type(self).__name__
        report = Report(node).set(position_requested=position, strength=strength)
        _version_note(report)
        if not math.isfinite(strength) or strength < 0:
            raise H3KitInputError(node, "strength", strength, "must be a finite number >= 0", "use 1.0")
        moved, _ = split_leading_markers(prompt)
        if moved:
            raise H3KitInputError(node, "prompt", prompt, f"the prompt starts with {' '.join(moved)}, which has no effect (F15)",
                                  "remove it and choose the effect in 'effect'")
        effect_files.check_prompt_budget(node, "prompt", count_markers(prompt) + 1)
        info = inspect_effect(node, "effect", effect)
        embeddings = EmbeddingIndex.of(embedding_dirs())  # once for the whole prompt
        for problem in marker_problems(node, prompt, embeddings):  # typed markers pass the same checks (rows too)
            report.warn(problem)
        rows = load_effect_rows(node, "effect", info) * strength
        if strength == 0:
            report.warn("strength 0 splices zero rows: the effect is neutralised")

        cut = insertion_cut(prompt, position, report)
        clip = _with_dialogue(node, clip, prompt, report)
        base = token_stream(node, clip, prompt)
        declared = _declared_width(clip, base.key)
        if declared is not None and declared != H3_WIDTH:
            raise H3KitInputError(node, "clip", base.key,
                                  f"the connected encoder takes {declared}-wide embeddings ({width_hint(declared)}), not {H3_WIDTH}",
                                  "connect the MiniMax-H3 text encoder (CLIPLoader type 'minimax')")
        index = common_prefix(token_stream(node, clip, prompt[:cut]).entries, base.entries)
        if index < 1:
            raise H3KitInputError(node, "prompt", prompt, "no token precedes the chosen position", FIX_F15)
        spliced = base.entries[:index] + [(row, 1.0) for row in rows] + base.entries[index:]
        report.set(host_rows=self._host_rows_agree(node, clip, base.key, info, rows, strength, embeddings,
                                                    report))

        cond = clip.encode_from_tokens_scheduled({base.key: [spliced]})
        shape = conditioning_shape(node, cond)
        if shape[-1] != H3_WIDTH:
            raise H3KitInputError(node, "clip", base.key,
                                  f"the encoder returned {shape[-1]}-wide conditioning ({width_hint(shape[-1])}); "
                                  f"the {info.rows} effect rows were not applied", "connect the MiniMax-H3 text encoder")
        # The proof counts what others produced: the encoder's positions against the tokenizer's count of the plain
        # prompt plus the row count in the file's header - never the length of the list spliced above.
        expected = len(base.entries) + info.rows
        if len(shape) != 3 or shape[1] != expected:
            raise H3KitInputError(node, "clip", base.key,
                                  f"the encoder returned conditioning {list(shape)} for {len(base.entries)} prompt tokens + "
                                  f"{info.rows} effect rows = {expected} positions, so the splice cannot be verified",
                                  "connect the MiniMax-H3 text encoder (one conditioning position per token)")
        report.set(effect=info.summary(), rows_spliced=info.rows, encoder=base.key, declared_width=declared,
                   insert_at_char=cut, insert_at_token=index, tokens_before=len(base.entries),
                   tokens_after=shape[1], conditioning_shape=list(shape))
        return cond, report.json()

    @staticmethod
    def _host_rows_agree(node: str, clip: Any, key: str, info: EffectInfo, rows: torch.Tensor, strength: float,
                         index: EmbeddingIndex, report: Report) -> str:
        """Cross-check with rows we did not read: the encoder's own embedding loader (the inner SDTokenizer of its
        tokenizer, ComfyUI's load_embed) resolving `embedding:<name>` must yield the same N rows. Where it cannot
        (the file is only in H3KIT_EMBEDDINGS_DIR, or the name cannot be a marker) the skip is a visible fallback."""
        try:
            marker = marker_for(node, "effect", info, index)
        except H3KitInputError as exc:
            report.fallback("host_rows", f"rows not cross-checked with the encoder's embedding loader: {exc.problem}")
            return "not checked"
        host = effect_tokens.host_marker_rows(node, clip.tokenizer, marker)
        if not host:
            report.fallback("host_rows", f"rows not cross-checked: the encoder's embedding loader finds no {marker} in "
                                         f"its embeddings folders ({_folders_of(clip)}), which differ from the ones "
                                         "listed here")
            return "not checked"
        host_rows = torch.stack([row.detach().to(torch.float32).reshape(-1) for row in host]) * strength
        if host_rows.shape != rows.shape or not torch.equal(host_rows, rows):
            raise H3KitInputError(node, "effect", info.name,
                                  f"the encoder's embedding loader loads {marker} as {list(host_rows.shape)} rows that "
                                  f"differ from the {[info.rows, info.width]} rows read from the file (another file or "
                                  "tensor of that name)",
                                  "keep one embedding of that name, holding the rows alone or under 'qwen3vl_32b'")
        return f"{len(host)} rows equal to the encoder's embedding loader's {marker}"


NODES = [H3KitEffectPrompt, H3KitEffectSplice]
