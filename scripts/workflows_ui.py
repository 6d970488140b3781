"""UI-format (litegraph) copies of the API graphs, for ComfyUI's template browser (`python -m h3kit workflows ui`).

The template browser lists every `*.json` directly in a pack's `workflows/` and opens it as UI format; an
API-format file there fails with "Workflow does not contain a valid version" and clears the open graph. So
each `workflows/api/<name>.json` gets a generated `workflows/<name>.json` (laid out left to right by stage
and dependency depth, grouped "H3 draft" / "handoff" / "LTX refine" / "output") and a `workflows/<name>.jpg`
thumbnail drawn from the graph. `--check` regenerates in memory and exits 1 when a committed file is stale.

Widget values follow the frontend's serialisation (comfyui-frontend-package 1.27): one value per widget in
the order the node's schema declares its widget inputs; an INT seed with control_after_generate is followed
by its control value; an upload combo is followed by its upload button's value; a V3 DynamicCombo
(SaveVideo's "format") is followed by its child widgets, named "<combo>.<child>" ("format.codec").
Input slots list the link-only sockets first (required, then optional), then one socket per widget; V3
Autogrow slots ("ref_images.ref_image_0") are sockets named by their dotted API key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from ..adapters.files import write_bytes
from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from ..checks.graph import input_kind, is_link
from ..checks.graph_split import stage_names
from ..checks.invocation import command
from ..checks.problem import printable
from . import console
from . import schemas as schema_src

EXIT_STATUSES = {
    EXIT_OK: "the UI copies (ui) or stage graphs (split) are up to date (written, or --check found nothing stale)",
    EXIT_FAILED: "--check: a copy or stage graph is stale, missing or left over",
    EXIT_INVALID: "an API graph cannot be converted or split (named with the reason), or bad arguments",
}

GENERATOR = "h3kit workflows ui 1"
WIDGET_KINDS = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", "COMFY_DYNAMICCOMBO_V3"}
SEED_NAMES = ("seed", "noise_seed")
SEED_CONTROL = "fixed"  # templates keep their seed: the user gets the documented result first time

STAGES = ("H3 draft", "handoff", "LTX refine", "output")
STAGE_COLORS = {"H3 draft": "#3f789e", "handoff": "#a1309b", "LTX refine": "#88a", "output": "#8A8"}
OUTPUT_CLASSES = {
    "SaveVideo", "SaveImage", "SaveAudio", "SaveLatent", "PreviewImage", "PreviewAny", "CreateVideo",
    "VHS_VideoCombine",
}
HANDOFF_CLASSES = {"H3KitDraftToLTX", "H3KitSaveDraft", "H3KitLoadDraft"}
LTX_CLASSES = {"H3KitRefineSetup", "ModelSamplingLTXV", "LTXAVTextEncoderLoader"}

SLOT_H, WIDGET_H, MULTILINE_H = 20, 24, 110
# The editor draws a loaded picture or video below an upload node's widgets and grows the node to fit it; reserving
# that room keeps the node from covering the one stacked under it once the user picks a file.
UPLOAD_PREVIEW_H = 240
PICTURE_UPLOAD = "IMAGEUPLOAD"  # the upload button of an image or video combo
TITLE_H, COL_GAP, ROW_GAP, GROUP_PAD, GROUP_TITLE_H, BLOCK_GAP = 30, 60, 15, 15, 40, 20
# The graph is laid out to fit, whole and readable, the editor's canvas in a 1600 x 1000 window (a laptop screen; the
# tier-d harness's window): 1600 x 960 below the tab bar, less the side bar and toolbars that float over it
# (VIEW_LEFT/TOP) and a margin. Frontends 1.49 and 1.58 draw node text only at a zoom of at least
# LiteGraph.Canvas.MinFontSizeForLOD (8 px by default) / the node text size (14 px); below that a node is a grey box.
VIEW_W, VIEW_H, VIEW_LEFT, VIEW_TOP, VIEW_MARGIN = 1600, 960, 60, 60, 20
TEXT_ZOOM = 8 / 14


@dataclass(frozen=True)
class Template:
    """How a shipped graph shows in the template browser. Frontends 1.27 to 1.58 give a custom node's template only its
    file name (`/workflow_templates` lists names; the card's title and text are that name), so the title is the UI
    copy's file name, and the description is drawn on the thumbnail, the card's picture (and kept in extra.h3kit)."""

    title: str
    description: str
    start_here: bool = False  # the first graph to open: marked on its thumbnail


TEMPLATES = {
    "h3kit_handoff_demo": Template(
        "Start here - no model needed",
        "The H3Kit demo: a synthetic H3 draft through the handoff and a guard. Any ComfyUI, even on CPU.", True),
    "h3_ltx_two_stage": Template(
        "H3 draft, LTX-2.5 refine",
        "Two stages, text to video with audio: a MiniMax-H3 draft at 672x384, refined x2 by LTX-2.5 to 1344x768."),
    "h3_ltx_two_stage_cached_cond": Template(
        "H3 draft, LTX-2.5, cached prompt",
        "The two-stage graph without the Gemma encoder: the refine prompt's conditioning loads from a cache file."),
    "h3_ltx_two_stage_turing": Template(
        "H3 and LTX-2.5 on RTX 20xx",
        "The two-stage graph for RTX 20xx (Turing, sm_75) cards: int8 H3, a GGUF refiner, fp16. Needs ComfyUI-GGUF."),
    "h3_ltx_two_stage_544": Template(
        "H3, LTX-2.5 on RTX 20xx, 544x320",
        "The RTX 20xx graph at 544x320, refined to 1088x640: faster. Needs ComfyUI-GGUF."),
    "h3_native_362_lowvram": Template(
        "H3 only, 15 s clip, low VRAM",
        "One 362-frame MiniMax-H3 clip; attention and feed-forward in chunks so it fits 32 GB."),
    "h3_effects_t2va": Template(
        "H3 text to video, bullet time",
        "Text to video with audio and an effect embedding (bullet time) applied inside the prompt."),
    "h3_ref2va_two_characters": Template(
        "H3 Ref2VA, two characters",
        "Reference to video: upload two pictures; the checked Ref2VA prompt gives each character its shots."),
    "h3_ref2va_two_stage": Template(
        "H3 Ref2VA, LTX-2.5 refine",
        "Two stages: two characters from your pictures, then the LTX-2.5 x2 refine."),
}
# The stage graphs `workflows split` cuts from the two-stage graphs: (stage 1 title, stage 2 title) per graph, short
# enough for a card (32 characters).
SPLIT_TITLES = {
    "h3_ltx_two_stage": ("Split 1 - H3 draft", "Split 2 - LTX-2.5 refine"),
    "h3_ltx_two_stage_cached_cond": ("Split 1 - H3, cached prompt", "Split 2 - LTX-2.5, cached prompt"),
    "h3_ltx_two_stage_turing": ("Split 1 - H3 on RTX 20xx", "Split 2 - LTX-2.5 on RTX 20xx"),
    "h3_ltx_two_stage_544": ("Split 1 - H3 on 20xx, 544x320", "Split 2 - LTX on 20xx, 544x320"),
    "h3_ref2va_two_stage": ("Split 1 - H3 Ref2VA", "Split 2 - Ref2VA, LTX-2.5 refine"),
}
SPLIT_WHAT = ("the H3 draft, the handoff and LTX's encode, saved as a draft file (H3KitSaveDraft)",
              "the draft file (H3KitLoadDraft) refined by LTX-2.5 and muxed with its H3 audio")
for _parent, _titles in SPLIT_TITLES.items():
    for _stage, (_name, _title) in enumerate(zip(stage_names(_parent), _titles, strict=True)):
        TEMPLATES[_name] = Template(_title, f"Stage {_stage + 1} of '{TEMPLATES[_parent].title}' for two GPUs or "
                                    f"machines: {SPLIT_WHAT[_stage]}. `run --stage1-server A --stage2-server B` "
                                    "pipelines a batch.")
UNSAFE_IN_NAMES = set('/\\:*?"<>|#%+\'') | {chr(c) for c in range(32)}  # Windows, URLs, or the editor's selectors


def template_of(name: str) -> Template:
    """The template entry of API graph `name` (a graph without one shows as its file name)."""
    return TEMPLATES.get(name, Template(name, ""))


def ui_name(name: str) -> str:
    """The UI copy's file name (without .json / .jpg) for API graph `name`: its template title."""
    title = template_of(name).title
    if not title or title != title.strip(" .") or UNSAFE_IN_NAMES & set(title) or len(title) > 100:
        raise WorkflowUIError(f"workflows/api/{name}.json: the title {title!r} cannot be a file name on every system "
                              "and URL; use letters, digits, spaces, commas, parentheses and '-' (at most 100)")
    return title


class WorkflowUIError(ValueError):
    """A graph that cannot be turned into a UI-format workflow; the message names the file, node and fix."""


# ---------------------------------------------------------------- schema -> widgets and sockets
@dataclass
class Widget:
    name: str  # widget name on the node (dotted for DynamicCombo children)
    kind: str  # INT/FLOAT/...; "control" / "upload" for frontend-only widgets
    spec: list = field(default_factory=list)

    @property
    def is_value(self) -> bool:
        """True when the widget carries an input value (the frontend's extra widgets do not)."""
        return self.kind not in ("control", "upload")


def _ordered_inputs(info: dict) -> list[tuple[str, list, bool]]:
    """(name, spec, optional) in the schema's declared order, required first."""
    found = []
    for section in ("required", "optional"):
        specs = info.get("input", {}).get(section, {})
        order = info.get("input_order", {}).get(section) or list(specs)
        found.extend((name, specs[name], section == "optional") for name in order if name in specs)
    return found


def _upload_widgets(opts: dict) -> list[Widget]:
    if opts.get("image_upload") or opts.get("video_upload"):
        return [Widget("upload", "upload", [PICTURE_UPLOAD])]
    if opts.get("audio_upload"):
        return [Widget("audioUI", "upload", ["AUDIO_UI"]), Widget("upload", "upload", ["AUDIOUPLOAD"])]
    return []


def widget_layout(info: dict, api_inputs: dict) -> list[Widget]:
    """The node's widgets in the frontend's order, for the values this API node sets."""
    widgets: list[Widget] = []
    for name, spec, _optional in _ordered_inputs(info):
        kind, opts = input_kind(spec)
        if kind not in WIDGET_KINDS or opts.get("hidden") or opts.get("forceInput"):
            continue
        widgets.append(Widget(name, kind, spec))
        if kind == "INT" and (opts.get("control_after_generate") or name in SEED_NAMES):
            widgets.append(Widget("control_after_generate", "control", ["COMBO"]))
        widgets.extend(_upload_widgets(opts))
        if spec[0] == "COMFY_DYNAMICCOMBO_V3":
            widgets.extend(_dynamic_children(info, name, opts, api_inputs))
    return widgets


def _dynamic_children(info: dict, name: str, opts: dict, api_inputs: dict) -> list[Widget]:
    """Children the frontend inserts after a DynamicCombo: the API graph's '<name>.<child>' keys, else the
    schema's declared child with its default."""
    keys = [key for key in api_inputs if key.startswith(name + ".")]
    if not keys and opts.get("child"):
        keys = [f"{name}.{opts['child']}"]
    optional = info.get("input", {}).get("optional", {})
    return [Widget(key, "COMBO", optional.get(key.split(".", 1)[1], [[]])) for key in keys]


def widget_default(widget: Widget) -> Any:
    kind, opts = input_kind(widget.spec)
    if "default" in opts:
        return opts["default"]
    if kind in ("COMBO", "COMFY_DYNAMICCOMBO_V3"):
        options = opts.get("options") or []
        return options[0] if options else ""
    return {"INT": 0, "FLOAT": 0.0, "STRING": "", "BOOLEAN": False}.get(kind)


def _frontend_extra_value(widget: Widget) -> Any:
    if widget.name == "control_after_generate":
        return SEED_CONTROL
    return {PICTURE_UPLOAD: "image", "AUDIO_UI": None, "AUDIOUPLOAD": ""}[widget.spec[0]]


def _autogrow_slots(name: str, opts: dict, api_inputs: dict) -> list[tuple[str, str]]:
    slot_type = ",".join(opts.get("types", ["*"]))
    return [(key, slot_type) for key in api_inputs if key.startswith(name + ".")]


def socket_layout(info: dict, api_inputs: dict) -> list[dict]:
    """Input slots as the frontend builds them: link-only sockets first, then one socket per widget."""
    sockets, widget_sockets = [], []
    for name, spec, optional in _ordered_inputs(info):
        kind, opts = input_kind(spec)
        if kind == "AUTOGROW":
            for key, slot_type in _autogrow_slots(name, opts, api_inputs):
                sockets.append({"name": key, "type": slot_type, "shape": 7})
        elif kind not in WIDGET_KINDS or opts.get("forceInput"):
            sockets.append({"name": name, "type": kind, **({"shape": 7} if optional else {})})
    for widget in widget_layout(info, api_inputs):
        kind = widget.kind if widget.is_value else widget.spec[0]
        kind = "COMBO" if kind == "COMFY_DYNAMICCOMBO_V3" else kind
        widget_sockets.append({"name": widget.name, "type": kind, "widget": {"name": widget.name}})
    return [{"localized_name": s["name"], **s, "link": None} for s in sockets + widget_sockets]


# ---------------------------------------------------------------- stages and layout
def _links_of(graph: dict) -> list[tuple[str, int, str, str]]:
    """(source id, source slot, target id, target input) for every link, in node then input order."""
    found = []
    for node_id, node in graph.items():
        for name, value in node.get("inputs", {}).items():
            if is_link(value):
                found.append((str(value[0]), int(value[1]), node_id, name))
    return found


def dependency_depth(graph: dict) -> dict[str, int]:
    """Longest path from a source node; the graph is acyclic (validate guarantees it)."""
    depth: dict[str, int] = {}

    def visit(node_id: str, seen: tuple[str, ...] = ()) -> int:
        if node_id in depth:
            return depth[node_id]
        if node_id in seen:
            raise WorkflowUIError(f"links form a cycle through node {node_id}; run `{command('validate')}`")
        sources = [str(v[0]) for v in graph[node_id].get("inputs", {}).values() if is_link(v)]
        depth[node_id] = 1 + max((visit(s, (*seen, node_id)) for s in sources if s in graph), default=-1)
        return depth[node_id]

    for node_id in graph:
        visit(node_id)
    return depth


def explicit_stage(class_type: str) -> str | None:
    """The stage a node type belongs to wherever it is used; None for general-purpose nodes."""
    if class_type in OUTPUT_CLASSES:
        return "output"
    if class_type in HANDOFF_CLASSES:
        return "handoff"
    if class_type in LTX_CLASSES or class_type.startswith("LTXV"):
        return "LTX refine"
    if "MiniMaxH3" in class_type:
        return "H3 draft"
    return None


def assign_stages(graph: dict) -> dict[str, str | None]:
    """Stage per node: its type's own stage; else (a node with inputs) the latest stage among its
    ancestors; else (a loader or constant) the earliest stage among the nodes it feeds."""
    order = sorted(graph, key=dependency_depth(graph).get)
    consumers: dict[str, list[str]] = {n: [] for n in graph}
    producers: dict[str, list[str]] = {n: [] for n in graph}
    for src, _slot, dst, _name in _links_of(graph):
        if src in graph:
            consumers[src].append(dst)
            producers[dst].append(src)
    stage = {n: explicit_stage(graph[n]["class_type"]) for n in graph}
    reach: dict[str, int] = {}  # latest explicit stage index upstream (inclusive)
    for n in order:
        own = STAGES.index(stage[n]) if stage[n] else -1
        reach[n] = max([own] + [reach[p] for p in producers[n]])
        if stage[n] is None and producers[n] and reach[n] >= 0:
            stage[n] = STAGES[reach[n]]
    for n in reversed(order):
        if stage[n] is None:
            fed = [STAGES.index(stage[c]) for c in consumers[n] if stage[c]]
            stage[n] = STAGES[min(fed)] if fed else None
    return stage


def node_size(info: dict, api_inputs: dict, title: str) -> list[int]:
    sockets = socket_layout(info, api_inputs)
    link_only = sum(1 for s in sockets if "widget" not in s)
    all_widgets = widget_layout(info, api_inputs)
    widgets = [w for w in all_widgets if w.kind != "upload"]
    multiline = any(input_kind(w.spec)[1].get("multiline") for w in widgets)
    height = max(link_only, len(info.get("output", []))) * SLOT_H + len(widgets) * WIDGET_H + 10
    height += MULTILINE_H if multiline else 0
    height += UPLOAD_PREVIEW_H if any(w.spec == [PICTURE_UPLOAD] for w in all_widgets) else 0
    width = max(400 if multiline else 270, 7 * len(title) + 50)  # a title in the editor's 14 px font
    return [width, max(height, 2 * SLOT_H + 6)]


@dataclass
class Block:
    """One stage's nodes laid out inside its group: columns by dependency depth, wrapped into rows at a width."""

    stage: str | None
    positions: dict[str, list[int]]  # inside the block, (0, 0) = the group's top-left corner
    width: int
    height: int
    rows: int


def layout_depth(graph: dict) -> dict[str, int]:
    """Dependency depth, with each source node (a loader, a constant) moved next to its first consumer: six
    loaders stacked at depth 0 made one tall column far from the nodes they feed."""
    depth = dependency_depth(graph)
    consumers: dict[str, list[str]] = {n: [] for n in graph}
    for src, _slot, dst, _name in _links_of(graph):
        if src in graph:
            consumers[src].append(dst)
    return {n: (min(depth[c] for c in consumers[n]) - 1 if depth[n] == 0 and consumers[n] else depth[n])
            for n in graph}


def stage_columns(graph: dict, stages: dict[str, str | None]) -> list[tuple[str | None, list[list[str]]]]:
    """[(stage, columns)] in pipeline order; a column holds the stage's nodes of one layout depth."""
    depth = layout_depth(graph)
    bands = [s for s in STAGES if s in stages.values()] + ([None] if None in stages.values() else [])
    found = []
    for band in bands:
        members = [n for n in graph if stages[n] == band]
        found.append((band, [sorted((n for n in members if depth[n] == d), key=_id_key)
                             for d in sorted({depth[n] for n in members})]))
    return found


def _column_size(column: list[str], sizes: dict[str, list[int]]) -> tuple[int, int]:
    return max(sizes[n][0] for n in column), sum(sizes[n][1] + TITLE_H + ROW_GAP for n in column) - ROW_GAP


def split_columns(columns: list[list[str]], sizes: dict[str, list[int]], max_height: int) -> list[list[str]]:
    """A column taller than `max_height` (six loaders stacked) becomes several side by side, each at most that tall
    (or one node)."""
    found = []
    for column in columns:
        part: list[str] = []
        for n in column:
            if part and _column_size([*part, n], sizes)[1] > max_height:
                found.append(part)
                part = []
            part.append(n)
        found.append(part)
    return found


def block_layout(stage: str | None, columns: list[list[str]], sizes: dict[str, list[int]], wrap: int,
                 graph: dict) -> Block:
    """The stage's columns left to right, a new row below once the next column would pass `wrap` px; each column's
    nodes stacked, ordered by where their inputs come from (fewer crossing links)."""
    positions: dict[str, list[int]] = {}
    x = y = row_h = width = 0
    rows, top = 1, GROUP_TITLE_H + TITLE_H
    for column in columns:
        col_w, col_h = _column_size(column, sizes)
        if x and x + col_w > wrap:
            x, y = 0, y + row_h + ROW_GAP + TITLE_H
            row_h, rows = 0, rows + 1
        column = sorted(column, key=lambda n: (_mean_source_y(graph, n, positions), _id_key(n)))
        cy = y
        for n in column:
            positions[n] = [GROUP_PAD + x, top + cy]
            cy += sizes[n][1] + TITLE_H + ROW_GAP
        width, row_h = max(width, x + col_w), max(row_h, col_h)
        x += col_w + COL_GAP
    return Block(stage, positions, width + 2 * GROUP_PAD, top + y + row_h + GROUP_PAD, rows)


RIGHT, BELOW, NEW_ROW = "right", "below", "row"  # where the next stage's group goes


def arrange(blocks: list[Block], moves: tuple[str, ...]) -> tuple[list[tuple[int, int]], int, int]:
    """Each block's top-left corner, in pipeline order: the first at the origin, each next one right of the column
    before it, below the one before it (a small stage under the previous one), or at the start of a new row
    (`moves`, one per block after the first); (corners, total width, total height)."""
    corners = [(0, 0)]
    row_y, row_h = 0, blocks[0].height
    col_x, col_w, col_y = 0, blocks[0].width, blocks[0].height
    for block, move in zip(blocks[1:], moves, strict=True):
        if move == BELOW:
            corners.append((col_x, row_y + col_y + BLOCK_GAP))
            col_y += BLOCK_GAP + block.height
            col_w = max(col_w, block.width)
        else:
            if move == NEW_ROW:
                row_y, row_h, col_x = row_y + row_h + BLOCK_GAP, 0, 0
            else:
                col_x += col_w + BLOCK_GAP
            corners.append((col_x, row_y))
            col_w, col_y = block.width, block.height
        row_h = max(row_h, col_y)
    width = max(x + b.width for b, (x, _) in zip(blocks, corners, strict=True))
    return corners, width, row_y + row_h


def fitted_zoom(width: int, height: int) -> float:
    """The largest zoom (at most 1) at which a width x height graph shows whole in the view, from its top-left
    corner at (VIEW_LEFT, VIEW_TOP) on screen."""
    return min(1.0, (VIEW_W - VIEW_LEFT - VIEW_MARGIN) / width, (VIEW_H - VIEW_TOP - VIEW_MARGIN) / height)


def layout(graph: dict, sizes: dict[str, list[int]],
           stages: dict[str, str | None]) -> tuple[dict[str, list[int]], list[tuple[str | None, list[int]]]]:
    """Top-left body position per node and each stage's group [x, y, width, height]: the pipeline reads left to right, stage by
    stage, and wraps into rows, at the wrap widths that let the editor show the whole graph at the largest zoom
    (a long strip opened at 13-16 % in 1.49 and 1.58, where no node text is drawn). Ties: the fewest rows."""
    shapes = [stage_shapes(stage, cols, sizes, graph) for stage, cols in stage_columns(graph, stages)]
    best: tuple[tuple[float, int], list[Block], list[tuple[int, int]]] | None = None  # (zoom, -rows), ...
    for blocks in product(*shapes):
        for moves in product((RIGHT, BELOW, NEW_ROW), repeat=len(blocks) - 1):
            corners, width, height = arrange(list(blocks), moves)
            bends = sum(m != RIGHT for m in moves) + sum(b.rows for b in blocks)  # fewer: the plainer reading order
            score = (round(fitted_zoom(width, height), 3), -bends)
            if best is None or score > best[0]:
                best = (score, list(blocks), corners)
    assert best is not None  # a graph has a node
    _, blocks, corners = best
    positions = {n: [cx + x, cy + y] for block, (cx, cy) in zip(blocks, corners, strict=True)
                 for n, (x, y) in block.positions.items()}
    groups = [(b.stage, [cx, cy, b.width, b.height]) for b, (cx, cy) in zip(blocks, corners, strict=True)]
    return positions, groups


def stage_shapes(stage: str | None, columns: list[list[str]], sizes: dict[str, list[int]], graph: dict) -> list[Block]:
    """The stage's block at every column height and row width worth trying, keeping only shapes no other shape beats
    in both width and height (the few the whole graph's arrangement chooses from)."""
    tallest = max(_column_size(c, sizes)[1] for c in columns)
    lowest = max(sizes[n][1] + TITLE_H for c in columns for n in c)
    found: dict[tuple[int, int], Block] = {}
    for max_height in sorted({tallest, *range(lowest, tallest, 100)}):
        split = split_columns(columns, sizes, max_height)
        for wrap in _prefix_widths(split, sizes):
            block = block_layout(stage, split, sizes, wrap, graph)
            key = (block.width, block.height)
            if key not in found or block.rows < found[key].rows:
                found[key] = block
    return [b for b in found.values()
            if not any(o.width <= b.width and o.height <= b.height and o is not b
                       and (o.width, o.height) != (b.width, b.height) for o in found.values())]


def _prefix_widths(columns: list[list[str]], sizes: dict[str, list[int]]) -> list[int]:
    """The widths at which a stage's row of columns could wrap: after each column."""
    found, x = [], 0
    for column in columns:
        x += _column_size(column, sizes)[0]
        found.append(x)
        x += COL_GAP
    return found


def _mean_source_y(graph: dict, node_id: str, positions: dict[str, list[int]]) -> float:
    ys = [positions[str(v[0])][1] for v in graph[node_id].get("inputs", {}).values()
          if is_link(v) and str(v[0]) in positions]
    return sum(ys) / len(ys) if ys else 0.0


def _id_key(node_id: str) -> tuple[int, str]:
    return (int(node_id), "") if node_id.isdigit() else (1 << 30, node_id)


# ---------------------------------------------------------------- API -> UI
def graph_fingerprint(graph: dict) -> str:
    text = json.dumps(graph, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{GENERATOR}\n{text}".encode()).hexdigest()[:16]


def _ui_ids(graph: dict) -> dict[str, int]:
    """litegraph wants integer ids: numeric API ids are kept, others numbered after the largest."""
    ids = {n: int(n) for n in graph if n.isdigit()}
    next_id = max(ids.values(), default=0) + 1
    for n in sorted(n for n in graph if not n.isdigit()):
        ids[n] = next_id
        next_id += 1
    return ids


def _schema_for(name: str, node_id: str, class_type: str, schemas: dict) -> dict:
    info = schemas.get(class_type)
    if info is None:
        pack = schema_src.providing_pack(class_type)
        raise WorkflowUIError(
            f"{name}: node {node_id} has class_type '{class_type}', which no known schema describes; "
            f"{'it comes from ' + pack if pack else 'fix the name'}, or add its schema to workflows/schemas/comfyui-core.json"
        )
    return info


def _widget_values(info: dict, api_inputs: dict) -> list[Any]:
    values = []
    for widget in widget_layout(info, api_inputs):
        if not widget.is_value:
            values.append(_frontend_extra_value(widget))
        elif widget.name in api_inputs and not is_link(api_inputs[widget.name]):
            values.append(api_inputs[widget.name])
        else:
            values.append(widget_default(widget))  # linked or unset: the widget keeps its default
    return values


def api_to_ui(name: str, graph: dict, schemas: dict) -> dict:
    """The UI-format (litegraph 0.4) workflow for one API graph."""
    ids = _ui_ids(graph)
    infos = {n: _schema_for(name, n, node["class_type"], schemas) for n, node in graph.items()}
    titles = {n: node.get("_meta", {}).get("title") or infos[n].get("display_name") or node["class_type"]
              for n, node in graph.items()}
    sizes = {n: node_size(infos[n], graph[n].get("inputs", {}), titles[n]) for n in graph}
    stages = assign_stages(graph)
    positions, groups = layout(graph, sizes, stages)
    depth = dependency_depth(graph)
    ui_nodes: dict[str, dict] = {}
    for order, n in enumerate(sorted(graph, key=lambda k: (depth[k], _id_key(k)))):
        node, info = graph[n], infos[n]
        api_inputs = node.get("inputs", {})
        ui_node = {
            "id": ids[n], "type": node["class_type"], "pos": positions[n], "size": sizes[n], "flags": {},
            "order": order, "mode": 0, "inputs": socket_layout(info, api_inputs),
            "outputs": [
                {"localized_name": out_name, "name": out_name, "type": out_type, "links": None}
                for out_name, out_type in zip(info.get("output_name", info["output"]), info["output"], strict=False)
            ],
            "title": titles[n],
            "properties": {"Node name for S&R": node["class_type"]},
            "widgets_values": _widget_values(info, api_inputs),
        }
        if not n.isdigit():
            ui_node["properties"]["h3kit_api_id"] = n
        ui_nodes[n] = ui_node
    links = _wire(name, graph, ids, ui_nodes)
    return {
        "id": str(_uuid_from(graph_fingerprint(graph))),
        "revision": 0,
        "last_node_id": max(ids.values()),
        "last_link_id": len(links),
        "nodes": [ui_nodes[n] for n in sorted(graph, key=_id_key)],
        "links": links,
        "groups": _groups(groups),
        "config": {},
        "extra": {
            "ds": _view(positions, sizes, groups),
            "h3kit": {"generated_from": f"workflows/api/{name}.json", "generator": GENERATOR,
                      "source_fingerprint": graph_fingerprint(graph), "title": template_of(name).title,
                      "description": template_of(name).description},
        },
        "version": 0.4,
    }


def _uuid_from(fingerprint: str) -> str:
    h = (fingerprint * 2)[:32]
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def _wire(name: str, graph: dict, ids: dict[str, int], ui_nodes: dict[str, dict]) -> list[list]:
    links: list[list] = []
    for src, slot, dst, input_name in _links_of(graph):
        source, target = ui_nodes.get(src), ui_nodes[dst]
        if source is None or slot >= len(source["outputs"]):
            raise WorkflowUIError(f"{name}: node {dst} input '{input_name}' links to {src}:{slot}, which does not "
                                  f"exist; run `{command('validate')}` on it")
        target_slot = next(i for i, s in enumerate(target["inputs"]) if s["name"] == input_name)
        link_type = source["outputs"][slot]["type"]
        link_id = len(links) + 1
        links.append([link_id, ids[src], slot, ids[dst], target_slot, link_type])
        target["inputs"][target_slot]["link"] = link_id
        source["outputs"][slot]["links"] = (source["outputs"][slot]["links"] or []) + [link_id]
    return links


def _groups(groups: list[tuple[str | None, list[int]]]) -> list[dict]:
    return [{"id": i + 1, "title": stage, "bounding": rect, "color": STAGE_COLORS[stage], "font_size": 24, "flags": {}}
            for i, (stage, rect) in enumerate(g for g in groups if g[0] is not None)]


def _view(positions: dict, sizes: dict, groups: list[tuple[str | None, list[int]]]) -> dict:
    """The view the file opens at (1.27 and 1.40 use it; for 1.49 and 1.58 the pack's extension applies it to its
    templates): the whole graph, nodes and groups, at the largest zoom that fits, from its top-left corner."""
    width = max([p[0] + sizes[n][0] for n, p in positions.items()] + [x + w for _, (x, _, w, _) in groups])
    height = max([p[1] + sizes[n][1] for n, p in positions.items()] + [y + h for _, (_, y, _, h) in groups])
    scale = math.floor(fitted_zoom(width, height) * 1000) / 1000
    return {"scale": scale, "offset": [round(VIEW_LEFT / scale), round(VIEW_TOP / scale)]}


# ---------------------------------------------------------------- thumbnails
def stage_summary(graph: dict) -> list[tuple[str, list[str]]]:
    """[(stage title, [node titles in dependency order])] in pipeline order, for the thumbnail."""
    stages, depth = assign_stages(graph), dependency_depth(graph)
    found = []
    for stage in (*STAGES, None):
        # processing nodes first, loaders and constants last: the diagram should show what the stage does
        members = sorted((n for n in graph if stages[n] == stage),
                         key=lambda n: (depth[n] == 0, depth[n], _id_key(n)))
        if members:
            titles = [graph[n].get("_meta", {}).get("title") or graph[n]["class_type"] for n in members]
            found.append((stage or "other", titles))
    return found


def render_thumbnail(name: str, graph: dict) -> bytes:
    """A small JPEG: the template's title and description (the card shows nothing else of them), the start-here
    mark, and a diagram with one box per stage holding its nodes, arrows between stages."""
    from .workflow_thumbnail import draw_stage_diagram

    template = template_of(name)
    fingerprint = graph_fingerprint({"graph": graph, "template": [template.title, template.description,
                                                                   template.start_here]})
    return draw_stage_diagram(template.title, stage_summary(graph), comment=fingerprint,
                              description=template.description, start_here=template.start_here)


# ---------------------------------------------------------------- files
def api_graph_files(api_dir: Path) -> list[Path]:
    return sorted(api_dir.glob("*.json"))


def expected_files(api_dir: Path, out_dir: Path, schemas: dict) -> dict[Path, bytes]:
    """Every generated file and its content, from the API graphs in api_dir."""
    files: dict[Path, bytes] = {}
    for path in api_graph_files(api_dir):
        try:
            graph = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise WorkflowUIError(f"{path}: not valid JSON ({exc}); fix the file") from exc
        if not isinstance(graph, dict) or not all(isinstance(v, dict) and "class_type" in v for v in graph.values()):
            raise WorkflowUIError(f"{path}: not an API-format graph (every value needs a class_type)")
        workflow = api_to_ui(path.stem, graph, schemas)
        files[out_dir / f"{ui_name(path.stem)}.json"] = (json.dumps(workflow, indent=1) + "\n").encode()
        files[out_dir / f"{ui_name(path.stem)}.jpg"] = render_thumbnail(path.stem, graph)
    return files


def thumbnail_identity(data: bytes) -> tuple[str | None, tuple[int, int]]:
    """The source fingerprint stored in a thumbnail's JPEG comment (None when absent) and its size."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        comment = image.info.get("comment")
        size = image.size
    return (comment.decode() if isinstance(comment, bytes) else comment), size


def is_current(path: Path, content: bytes) -> bool:
    """JSON must match byte for byte; a JPEG must carry the same source fingerprint and size (its pixels
    depend on the Pillow build, its fingerprint only on the graph and the generator)."""
    if not path.is_file():
        return False
    if path.suffix == ".jpg":
        return thumbnail_identity(path.read_bytes()) == thumbnail_identity(content)
    return path.read_bytes() == content


def stale_files(api_dir: Path, out_dir: Path, schemas: dict) -> list[str]:
    """Why each generated file is out of date (missing, stale, or left over from a removed graph)."""
    expected = expected_files(api_dir, out_dir, schemas)
    problems = [f"{p.name}: {'stale' if p.exists() else 'missing'}" for p, c in expected.items() if not is_current(p, c)]
    for path in sorted(list(out_dir.glob("*.json")) + list(out_dir.glob("*.jpg"))):
        if path not in expected:
            problems.append(f"{path.name}: left over (no graph in {api_dir} is generated under this name)")
    return problems


def write_atomic(path: Path, content: bytes) -> None:
    write_bytes(path, content, overwrite=True)  # the one atomic writer: adapters/files.py


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="workflows_command", metavar="SUBCOMMAND", required=True)
    ui = sub.add_parser("ui", help="generate UI-format copies + thumbnails of workflows/api/*.json in workflows/")
    ui.add_argument("--check", action="store_true", help="write nothing; exit 1 when a generated file is stale")
    ui.add_argument("--api-dir", type=Path, default=schema_src.API_WORKFLOWS_DIR, help=argparse.SUPPRESS)
    ui.add_argument("--out-dir", type=Path, default=schema_src.WORKFLOWS_DIR, help=argparse.SUPPRESS)
    split = sub.add_parser("split", help="cut each two-stage graph in workflows/api/ at the handoff into "
                           "<name>_stage1.json and <name>_stage2.json (then run `workflows ui`)")
    split.add_argument("--check", action="store_true", help="write nothing; exit 1 when a stage graph is stale")
    split.add_argument("--api-dir", type=Path, default=schema_src.API_WORKFLOWS_DIR, help=argparse.SUPPRESS)


def run_split(args: argparse.Namespace) -> int:
    from .workflows_split import SplitFilesError, stale_split_files, write_split_files

    try:
        if args.check:
            problems = stale_split_files(args.api_dir)
            for problem in problems:
                console.problem(f"STALE {problem}")
            if problems:
                console.problem(f"Fix: run `{command('workflows split')}` and `{command('workflows ui')}`, and commit "
                                "workflows/api/*_stage*.json and their UI copies")
                return EXIT_FAILED
            console.result("OK the stage graphs are up to date")
            return EXIT_OK
        written = write_split_files(args.api_dir)
    except SplitFilesError as exc:
        console.problem(f"ERROR: {exc}")
        return EXIT_INVALID
    for path in written:
        console.result(f"wrote {path}")
    console.result(f"{len(written)} stage graph(s) written; now run `{command('workflows ui')}`")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    if args.workflows_command == "split":
        return run_split(args)
    schemas = schema_src.offline_schemas()
    try:
        if args.check:
            problems = stale_files(args.api_dir, args.out_dir, schemas)
            for problem in problems:
                console.problem(f"STALE {printable(problem)}")
            if problems:
                console.problem(f"Fix: run `{command('workflows ui')}` and commit workflows/*.json and "
                                "workflows/*.jpg")
                return EXIT_FAILED
            console.result(f"OK {len(api_graph_files(args.api_dir))} workflow(s) up to date")
            return EXIT_OK
        expected = expected_files(args.api_dir, args.out_dir, schemas)
    except WorkflowUIError as exc:
        console.problem(f"ERROR: {printable(exc)}")
        return EXIT_INVALID
    for path, content in expected.items():
        if is_current(path, content):
            continue
        write_atomic(path, content)
        console.result(f"wrote {printable(path)}")
    for path in sorted(list(args.out_dir.glob("*.json")) + list(args.out_dir.glob("*.jpg"))):
        if path not in expected:
            console.problem(f"WARN  {printable(path.name)} has no source in {printable(args.api_dir)}; it is left untouched")
    console.result(f"{len(expected) // 2} workflow(s) in {printable(args.out_dir)}")
    return EXIT_OK
