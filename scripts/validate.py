"""Offline validation of API-format ComfyUI workflows (`python -m h3kit validate`).

Checks what ComfyUI's /prompt validation checks, before a server is involved: known class_types,
required inputs, links to existing nodes and outputs of the right type, widget values inside
min/max/step and combo options, at least one output node, no cycles. Each problem names the node id,
class_type, input, value and the fix.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import schemas as schema_src

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"


@dataclass
class Problem:
    node_id: str
    class_type: str
    input: str | None
    value: Any
    message: str
    fix: str
    severity: str = "error"

    def __str__(self) -> str:
        where = f"node {self.node_id} ({self.class_type})"
        if self.input is not None:
            where += f" input '{self.input}'"
        shown = "" if self.value is None else f" [value: {json.dumps(self.value, default=str)[:100]}]"
        return f"{self.severity.upper()}: {where}: {self.message}{shown}. Fix: {self.fix}"


def input_kind(spec: list) -> tuple[str, dict]:
    """('INT'|'COMBO'|'IMAGE'|..., options dict) for an /object_info input spec."""
    head = spec[0]
    opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
    if isinstance(head, list):
        return "COMBO", {**opts, "options": head}
    if head == DYNAMIC_COMBO:
        return "COMBO", opts
    return str(head), opts


def is_link(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], (str, int))
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    )


def types_compatible(output_type: str, input_type: str) -> bool:
    if "*" in (output_type, input_type) or output_type == input_type:
        return True
    if input_type == "COMBO" and output_type in ("STRING", "COMBO"):
        return True
    outs, ins = set(output_type.split(",")), set(input_type.split(","))
    return bool(outs & ins)


def declared_inputs(info: dict) -> dict[str, tuple[list, bool]]:
    """{input name: (spec, required)} with Autogrow groups expanded to their dotted slot names."""
    found: dict[str, tuple[list, bool]] = {}
    sections = info.get("input", {})
    children = {
        spec[1]["child"]: spec[1]["child_api_key_form"]
        for section in ("required", "optional")
        for spec in sections.get(section, {}).values()
        if len(spec) > 1 and isinstance(spec[1], dict) and spec[1].get("child_api_key_form")
    }
    for section in ("required", "optional"):
        for name, spec in sections.get(section, {}).items():
            kind, opts = input_kind(spec)
            if name in children:  # a V3 dynamic combo's child, sent under its dotted key
                found[children[name]] = (spec, True)
            elif kind == "AUTOGROW":
                for i in range(int(opts.get("max", 0))):
                    slot_type = ",".join(opts.get("types", ["*"]))
                    found[f"{name}.{opts['prefix']}{i}"] = ([slot_type, {}], False)
            else:
                found[name] = (spec, section == "required")
    return found


def _nearest_on_step(value: float, lo: float, step: float) -> tuple[float, float]:
    below = lo + math.floor((value - lo) / step) * step
    return below, below + step


def check_widget(node_id: str, ct: str, name: str, spec: list, value: Any) -> list[Problem]:
    kind, opts = input_kind(spec)
    bad = []

    def problem(message: str, fix: str) -> None:
        bad.append(Problem(node_id, ct, name, value, message, fix))

    if kind in ("INT", "FLOAT"):
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not numeric or (kind == "INT" and isinstance(value, float) and not value.is_integer()):
            problem(f"expected {kind}", f"give a number ({kind.lower()})")
            return bad
        if isinstance(value, float) and not math.isfinite(value):
            problem("not a finite number", "give a finite number")
            return bad
        lo, hi = opts.get("min"), opts.get("max")
        if lo is not None and value < lo:
            problem(f"below the minimum {lo}", f"use a value >= {lo}")
        elif hi is not None and value > hi:
            problem(f"above the maximum {hi}", f"use a value <= {hi}")
        elif kind == "INT" and opts.get("step", 1) > 1:
            base = lo if lo is not None else 0
            step = opts["step"]
            if (value - base) % step:
                below, above = _nearest_on_step(value, base, step)
                problem(f"not on the widget's grid ({base} + k*{step})", f"use {int(below)} or {int(above)}")
    elif kind == "BOOLEAN":
        if not isinstance(value, bool):
            problem("expected true or false", "use a JSON boolean")
    elif kind == "STRING":
        if not isinstance(value, str):
            problem("expected a string", "quote the value")
    elif kind == "COMBO":
        if opts.get("model_folder") or opts.get("input_files"):
            if not isinstance(value, str) or not value:
                where = opts.get("model_folder") or "input"
                problem("expected a file name", f"name a file in the '{where}' folder")
        elif value not in opts.get("options", []):
            choices = ", ".join(map(str, opts.get("options", [])[:12]))
            problem("not one of the allowed options", f"choose one of: {choices}")
    return bad


def _check_link(graph: dict, schemas: dict, node_id: str, ct: str, name: str, spec: list, link: list) -> list[Problem]:
    src_id, index = str(link[0]), link[1]
    src = graph.get(src_id)
    if not isinstance(src, dict):
        return [Problem(node_id, ct, name, link, f"links to node {src_id}, which is not in the graph",
                        "connect it to an existing node or remove the link")]
    src_info = schemas.get(src.get("class_type"))
    if src_info is None:
        return []  # the unknown source node is reported on its own
    outputs = src_info.get("output", [])
    if not 0 <= index < len(outputs):
        return [Problem(node_id, ct, name, link,
                        f"links to output {index} of node {src_id} ({src['class_type']}), which has {len(outputs)} outputs",
                        f"use an output index 0..{len(outputs) - 1}")]
    kind, _ = input_kind(spec)
    out_type = outputs[index] if isinstance(outputs[index], str) else "COMBO"
    if not types_compatible(out_type, kind):
        return [Problem(node_id, ct, name, link,
                        f"receives {out_type} from node {src_id} ({src['class_type']}) output {index} but needs {kind}",
                        f"connect an output of type {kind}")]
    return []


def _find_cycle(graph: dict) -> list[str] | None:
    state: dict[str, int] = {}
    order: list[str] = []

    def visit(nid: str) -> list[str] | None:
        state[nid] = 1
        order.append(nid)
        for value in graph[nid].get("inputs", {}).values():
            if is_link(value) and str(value[0]) in graph:
                dep = str(value[0])
                if state.get(dep) == 1:
                    return order[order.index(dep):] + [dep]
                if dep not in state:
                    found = visit(dep)
                    if found:
                        return found
        state[nid] = 2
        order.pop()
        return None

    for nid in graph:
        if nid not in state:
            found = visit(nid)
            if found:
                return found
    return None


def looks_like_ui_format(doc: Any) -> bool:
    return isinstance(doc, dict) and "nodes" in doc and "links" in doc


def validate_graph(graph: Any, schemas: dict[str, dict]) -> list[Problem]:
    """Every problem ComfyUI's /prompt would reject, found offline."""
    if looks_like_ui_format(graph):
        return [Problem("-", "-", None, None, "this is a UI-format (litegraph) workflow, not API format",
                        "export it with 'Save (API)' / 'Export (API)' in ComfyUI, or use the file from workflows/api/")]
    if not isinstance(graph, dict) or not graph:
        return [Problem("-", "-", None, None, "not an API-format graph (expected a non-empty JSON object of nodes)",
                        "pass an API-format workflow JSON")]
    problems: list[Problem] = []
    has_output = False
    for node_id, node in graph.items():
        if not isinstance(node, dict) or "class_type" not in node:
            problems.append(Problem(str(node_id), "?", None, None, "node has no class_type",
                                    "every node needs 'class_type' and 'inputs'"))
            continue
        ct = node["class_type"]
        info = schemas.get(ct)
        if info is None:
            pack = schema_src.providing_pack(ct)
            fix = f"install {pack}" if pack else "install the custom node pack that provides it, or fix the name"
            problems.append(Problem(str(node_id), ct, None, None, "unknown node type on this host", fix))
            continue
        has_output = has_output or bool(info.get("output_node"))
        inputs = node.get("inputs", {})
        if not isinstance(inputs, dict):
            problems.append(Problem(str(node_id), ct, None, inputs, "'inputs' is not an object", "use {name: value}"))
            continue
        declared = declared_inputs(info)
        for name, (spec, required) in declared.items():
            if required and name not in inputs:
                kind, opts = input_kind(spec)
                hint = f" (default {opts['default']!r})" if "default" in opts else ""
                problems.append(Problem(str(node_id), ct, name, None, f"required {kind} input is missing",
                                        f"connect or set '{name}'{hint}"))
        for name, value in inputs.items():
            if name not in declared:
                problems.append(Problem(str(node_id), ct, name, value, "input not declared by this node; ComfyUI ignores it",
                                        "check the spelling against the node's inputs", severity="warning"))
                continue
            spec = declared[name][0]
            if is_link(value):
                problems.extend(_check_link(graph, schemas, str(node_id), ct, name, spec, value))
            elif input_kind(spec)[0] in WIDGET_TYPES:
                problems.extend(check_widget(str(node_id), ct, name, spec, value))
            else:
                problems.append(Problem(str(node_id), ct, name, value, f"{input_kind(spec)[0]} must come from a link",
                                        "connect it to a node output ([node_id, output_index])"))
    if not has_output:
        problems.append(Problem("-", "-", None, None, "graph has no output node, so ComfyUI runs nothing",
                                "add an output node such as SaveVideo, SaveImage or PreviewImage"))
    cycle = _find_cycle({k: v for k, v in graph.items() if isinstance(v, dict)})
    if cycle:
        problems.append(Problem(cycle[0], graph[cycle[0]].get("class_type", "?"), None, None,
                                "links form a cycle: " + " -> ".join(cycle), "break the loop"))
    return problems


def graph_rules() -> list:
    """Pipeline-level rules (frame grids, sizes, sigmas) that apply on top of the schema checks."""
    from . import rules

    return list(rules.RULES)


def validate_file(path: Path, schemas: dict[str, dict]) -> list[Problem]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return [Problem("-", "-", None, None, f"cannot read {path}: {exc}", "pass a readable JSON file")]
    problems = validate_graph(doc, schemas)
    if not any(p.severity == "error" for p in problems):
        for rule in graph_rules():
            problems.extend(rule(doc, schemas))
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help="API-format workflow JSON files")
    parser.add_argument("--server", help="validate against this live ComfyUI's /object_info (e.g. http://127.0.0.1:8188)")


def run(args: argparse.Namespace) -> int:
    if args.server:
        try:
            schemas = schema_src.server_schemas(args.server)
        except schema_src.ServerUnreachable as exc:
            print(f"ERROR: {exc}")
            return 4
    else:
        schemas = schema_src.offline_schemas()
    failed = False
    for path in args.files:
        problems = validate_file(path, schemas)
        errors = [p for p in problems if p.severity == "error"]
        failed = failed or bool(errors)
        status = "FAIL" if errors else "OK"
        print(f"{status} {path}: {len(errors)} error(s), {len(problems) - len(errors)} warning(s)")
        for p in problems:
            print(f"  {p}")
    return 1 if failed else 0
