"""The graph validator: what ComfyUI's /prompt checks, found offline, plus the pipeline rules.

Known class_types, required inputs, links to existing nodes and outputs of the right type, widget values
inside min/max/step and combo options, at least one output node, no cycles. Each problem names the node
id, class_type, input, value and the fix. Pure: the schemas come in as a dict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import Any

from . import node_inputs
from .graph import input_kind, inputs_of, is_link, node_shape_problem, well_formed
from .host_layout import adapt_node
from .invocation import command
from .model_files import folder_name, how_to_get
from .problem import ERROR, WARNING, Problem, has_errors
from .rules import RULES
from .rules_files import MODEL_INPUT_FOLDERS
from .schemas import UNREADABLE, core_document, providing_pack, schema_version, unknown_node_advice

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
PackLookup = Callable[[str], "str | None"]


def types_compatible(output_type: str, input_type: str) -> bool:
    if "*" in (output_type, input_type) or output_type == input_type:
        return True
    if input_type == "COMBO" and output_type in ("STRING", "COMBO"):
        return True
    return bool(set(output_type.split(",")) & set(input_type.split(",")))


def declared_inputs(info: dict, values: dict | None = None) -> dict[str, tuple[list, bool]]:
    """{input key: (spec, required)} as the host declares them for a node with these input `values`: Autogrow
    slots and the inputs of the DynamicCombo options the values select, under their dotted keys
    (checks/node_inputs.py). `values` None: every key any choice of options could declare."""
    return node_inputs.declared_inputs(info, values)


def is_input_file_combo(opts: dict) -> bool:
    """A combo whose options are the files in ComfyUI's input folder (LoadImage, LoadAudio, LoadVideo...): the
    pinned file marks it `input_files`, a host marks it with its upload widget."""
    return bool(opts.get("input_files") or opts.get("image_upload") or opts.get("audio_upload")
                or opts.get("video_upload") or opts.get("upload"))


def _nearest_on_step(value: float, lo: float, step: float) -> tuple[float, float]:
    below = lo + math.floor((value - lo) / step) * step
    return below, below + step


def check_widget(node_id: str, ct: str, name: str, spec: list, value: Any, folder: str | None = None) -> list[Problem]:
    """`folder`: the models/ folder this input names a file of (a loader), when known."""
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
                # ComfyUI's /prompt checks min and max only: a warning, as the host accepts it (the pipeline rules
                # judge the grids that matter, F19/F20, as errors)
                bad.append(Problem(node_id, ct, name, value, f"not on the widget's grid ({base} + k*{step}); "
                                   "ComfyUI accepts it, the editor would snap it", f"use {int(below)} or {int(above)}",
                                   WARNING))
    elif kind == "BOOLEAN":
        if not isinstance(value, bool):
            problem("expected true or false", "use a JSON boolean")
    elif kind == "STRING":
        if not isinstance(value, str):
            problem("expected a string", "quote the value")
    elif kind == "COMBO":
        listed = opts.get("options")  # None: the pinned file names the folder, not the files a host has
        where = opts.get("model_folder") or ("input" if is_input_file_combo(opts) else None)
        if where and (not isinstance(value, str) or not value):
            problem("expected a file name", f"name a file in the '{where}' folder")
        elif where and not value.isprintable():
            problem("the file name contains NUL or control characters, which no file name has",
                    f"choose the file from the '{where}' folder's list")
        elif where and (listed is None or opts.get("model_folder")):
            pass  # offline, or a pack's own loader: which files the host has is the server's to say (server.py)
        elif value not in (listed or []):
            options = [str(o) for o in listed or []]
            if folder:
                shown = f"it has {len(options)} there: {', '.join(options)}" if options else "that folder is empty"
                problem(f"'{value}' is not in this server's models/{folder_name(folder)} ({shown})",
                        how_to_get(str(value), folder))
            elif where == "input":
                shown = f"it has {len(options)} there" if options else "that folder is empty"
                problem(f"'{value}' is not in this server's input folder ({shown})",
                        f"upload {value} ({command(f'run --upload {node_id}=PATH')}, or drop the file on the node "
                        "in ComfyUI), or copy it into ComfyUI's input folder")
            else:
                problem("not one of the allowed options", f"choose one of: {', '.join(options)}")
    return bad


def _check_link(graph: dict, schemas: dict, node_id: str, ct: str, name: str, spec: list, link: list) -> list[Problem]:
    src_id, index = str(link[0]), link[1]
    src = graph.get(src_id)
    if not isinstance(src, dict):
        return [Problem(node_id, ct, name, link, f"links to node {src_id}, which is not in the graph",
                        "connect it to an existing node or remove the link")]
    src_info = schemas.get(src.get("class_type")) if isinstance(src.get("class_type"), str) else None
    if src_info is None or src_info.get(UNREADABLE):
        return []  # the unknown or unreadable source node is reported on its own
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


def find_cycle(graph: dict) -> list[str] | None:
    """One cycle of links as [a, b, ..., a], or None. Iterative depth-first search: any graph size."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    for root in graph:
        if root in state:
            continue
        path: list[str] = [root]
        pending = [iter(_deps(graph, root))]
        state[root] = 1
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                state[path.pop()] = 2
                pending.pop()
            elif state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            elif dep not in state:
                state[dep] = 1
                path.append(dep)
                pending.append(iter(_deps(graph, dep)))
    return None


def _deps(graph: dict, node_id: str) -> list[str]:
    return [str(v[0]) for v in inputs_of(graph[node_id]).values() if is_link(v) and str(v[0]) in graph]


def looks_like_ui_format(doc: Any) -> bool:
    return isinstance(doc, dict) and "nodes" in doc and "links" in doc


def validate_graph(graph: Any, schemas: dict[str, dict], pack_of: PackLookup = providing_pack,
                   known_ids: Collection[str] = ()) -> list[Problem]:
    """Every problem ComfyUI's /prompt would reject, found offline. `pack_of(class_type)` names who
    provides a node the schemas lack (the CLI passes one that knows H3Kit's disabled optional nodes);
    `known_ids`: more node ids a misspelt class_type may have meant (H3Kit's own, when the schemas are a
    server's). Problems that only this host's older core schemas cause are reported once per node as a
    core-version difference (`core_version_differences`)."""
    if looks_like_ui_format(graph):
        return [Problem("-", "-", None, None, "this is a UI-format (litegraph) workflow, not API format",
                        "export it with 'Save (API)' / 'Export (API)' in ComfyUI, or use the file from workflows/api/")]
    if not isinstance(graph, dict) or not graph:
        return [Problem("-", "-", None, None, "not an API-format graph (expected a non-empty JSON object of nodes)",
                        "pass an API-format workflow JSON")]
    problems: list[Problem] = []
    has_output = False
    for node_id, node in graph.items():
        shape = node_shape_problem(node_id, node)
        if shape is not None:
            problems.append(shape)
            continue
        ct = node["class_type"]
        info = schemas.get(ct)
        if info is None:
            message, fix = unknown_node_advice(ct, pack_of(ct), [*schemas, *known_ids])
            problems.append(Problem(str(node_id), ct, None, None, f"unknown node type on this host: {message}", fix))
            continue
        if info.get(UNREADABLE):
            problems.append(Problem(str(node_id), ct, None, None, f"this host's schema of {ct} is not in ComfyUI's "
                                    f"/object_info shape ({info[UNREADABLE]}), so its inputs were not checked",
                                    "update or reinstall the node pack that provides it", severity="warning"))
            has_output = True  # unknown: ComfyUI itself will say if the graph has no output
            continue
        has_output = has_output or bool(info.get("output_node"))
        problems += core_version_differences(graph, schemas, str(node_id), ct, node.get("inputs", {}),
                                             _node_problems(graph, schemas, str(node_id), ct, info,
                                                            node.get("inputs", {})))
    if not has_output:
        problems.append(Problem("-", "-", None, None, "graph has no output node, so ComfyUI runs nothing",
                                "add an output node such as SaveVideo, SaveImage or PreviewImage"))
    cycle = find_cycle({k: v for k, v in graph.items() if isinstance(v, dict)})
    if cycle:
        problems.append(Problem(cycle[0], str(graph[cycle[0]].get("class_type", "?")), None, None,
                                "links form a cycle: " + " -> ".join(cycle), "break the loop"))
    return problems


def _node_problems(graph: dict, schemas: dict, node_id: str, ct: str, info: dict, inputs: dict) -> list[Problem]:
    problems = []
    declared = declared_inputs(info, inputs)
    for name, (spec, required) in declared.items():
        if required and name not in inputs:
            kind, opts = input_kind(spec)
            hint = f" (default {opts['default']!r})" if "default" in opts else ""
            problems.append(Problem(node_id, ct, name, None, f"required {kind} input is missing",
                                    f"connect or set '{name}'{hint}"))
    for name, value in inputs.items():
        if name not in declared:
            problems.append(Problem(node_id, ct, name, value, "input not declared by this node; ComfyUI ignores it",
                                    "check the spelling against the node's inputs", severity="warning"))
            continue
        spec = declared[name][0]
        if is_link(value):
            problems.extend(_check_link(graph, schemas, node_id, ct, name, spec, value))
        elif input_kind(spec)[0] in WIDGET_TYPES:
            folder = MODEL_INPUT_FOLDERS.get((ct, name)) or input_kind(spec)[1].get("model_folder")
            problems.extend(check_widget(node_id, ct, name, spec, value, folder))
        else:
            problems.append(Problem(node_id, ct, name, value, f"{input_kind(spec)[0]} must come from a link",
                                    "connect it to a node output ([node_id, output_index])"))
    return problems


def core_version_differences(graph: dict, schemas: dict, node_id: str, ct: str, inputs: dict,
                             problems: list[Problem]) -> list[Problem]:
    """Problems of a core node that the pinned ComfyUI schemas (checks.schemas.schema_version) would not raise come from this host's
    older core, not from the workflow: they become ONE problem naming the difference and the update."""
    pinned_doc = core_document()
    pinned = pinned_doc["nodes"].get(ct)
    if not problems or pinned is None or pinned.get("pack", "core") != "core" or schemas.get(ct) is pinned:
        return problems
    pinned_keys = {p.input for p in _node_problems(graph, {**schemas, ct: pinned}, node_id, ct, pinned, inputs)}
    # a model or input file the server lacks is the user's to add, whatever the version: never a core difference
    pinned_specs = declared_inputs(pinned, inputs)
    user_files = {name for name, (spec, _) in pinned_specs.items()
                  if input_kind(spec)[1].get("model_folder") or is_input_file_combo(input_kind(spec)[1])}
    differences = [p for p in problems if p.input not in pinned_keys and (ct, p.input) not in MODEL_INPUT_FOLDERS
                   and p.input not in user_files]
    if not differences:
        return problems
    newer = schema_version(ct)
    kept = [p for p in problems if p not in differences]
    _, changes = adapt_node(node_id, {"class_type": ct, "inputs": inputs}, schemas[ct])
    moved = {c.old_key for c in changes} | {c.new_key for c in changes}
    layout = [p for p in differences if p.input in moved]
    rest = [p for p in differences if p.input not in moved]
    if layout:
        renames = ", ".join(f"'{c.old_key}' to '{c.new_key}'" for c in changes)
        message = (f"this ComfyUI's {ct} takes {', '.join(repr(c.new_key) for c in changes)} where the workflow "
                   f"uses the ComfyUI >= {newer} layout ({', '.join(repr(c.old_key) for c in changes)}), a core-version "
                   f"difference; `{command('run')}` and the editor's preflight adapt it before queueing")
        fix = f"for this ComfyUI rename input {renames}, or update ComfyUI to >= {newer}"
        where = changes[0].old_key
        kept.append(Problem(node_id, ct, where, inputs.get(where), message, fix,
                            ERROR if has_errors(layout) else layout[0].severity))
    if rest:
        parts = [_difference_text(p, inputs) for p in rest]
        message = (f"this ComfyUI's {ct} {'; '.join(parts)}, which ComfyUI {newer} accepts: this ComfyUI is older "
                   "than the workflow")
        # On an output node another option changes only how the result is written (SaveVideo's codec), so the
        # host's own choice is a fix that works now; elsewhere (CLIPLoader's type) it would load the wrong model.
        here = [f"{p.input}: {p.fix}" for p in rest if p.severity == ERROR and p.input is not None
                and schemas[ct].get("output_node")]
        fix = f"update ComfyUI to >= {newer}" + (f", or for this ComfyUI {'; '.join(here)}" if here else "")
        kept.append(Problem(node_id, ct, rest[0].input, inputs.get(rest[0].input), message, fix,
                            ERROR if has_errors(rest) else rest[0].severity))
    return kept


def _difference_text(problem: Problem, inputs: dict) -> str:
    if problem.input not in inputs:
        return f"needs an input '{problem.input}' the workflow does not set"
    if "not declared" in problem.message:
        return f"has no input '{problem.input}'"
    return f"does not take {problem.input} = {inputs[problem.input]!r}"


def supersede(schema_problems: list[Problem], rule_problems: list[Problem]) -> list[Problem]:
    """One message per problem: a rule that judged the same node input with the whole graph in view
    (e.g. the handoff width against the draft) replaces the schema's narrower verdict on it."""
    judged = {(p.node_id, p.input) for p in rule_problems if p.input is not None}
    return [p for p in schema_problems if (p.node_id, p.input) not in judged] + rule_problems


def validate_with_rules(graph: Any, schemas: dict, pack_of: PackLookup = providing_pack,
                        known_ids: Collection[str] = ()) -> list[Problem]:
    """Schema validation and the pipeline rules of checks.rules.RULES, judged together (`supersede`);
    the rules run unless the file is not an API graph at all."""
    problems = validate_graph(graph, schemas, pack_of, known_ids)
    if looks_like_ui_format(graph) or not isinstance(graph, dict) or not graph:
        return problems
    return supersede(problems, [p for rule in RULES for p in rule(well_formed(graph), schemas)])
