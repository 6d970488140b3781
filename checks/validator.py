"""The graph validator: what ComfyUI's /prompt checks, found offline, plus the pipeline rules.

Judged as the host judges (execution.py validate_prompt / validate_inputs, ComfyUI 0.33.0 and yzkee @783545f6):
every class_type must exist; from each output node upstream, required inputs, links to existing nodes and
outputs whose type the host accepts (checks/node_inputs.link_accepted), widget values after the host's own
conversion (int(), float(), str(), bool()) inside min/max and combo options, no cycles; at least one output
node. A node no output depends on is neither validated nor run by the host: its problems are warnings here.
Each problem names the node id, class_type, input, value and the fix. Pure: the schemas come in as a dict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Any

from . import node_inputs
from .deadline import check_time
from .graph import executed_nodes, input_kind, inputs_of, is_link, node_shape_problem, well_formed
from .host_layout import adapt_node
from .invocation import command
from .model_files import folder_name, how_to_get
from .problem import ERROR, WARNING, Problem, has_errors, printable
from .rules_files import MODEL_INPUT_FOLDERS
from .schemas import (
    UNREADABLE,
    core_document,
    is_pinned,
    offline_unknown_advice,
    pinned_host,
    providing_pack,
    schema_version,
    unknown_node_advice,
)

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
# What a widget spec carries (the host declares a widget with these); a spec with none of them is a socket
WIDGET_MARKS = ("default", "options", "min", "max", "multiline", "socketless", "widgetType", "display")
PackLookup = Callable[[str], "str | None"]


def type_text(kind: Any) -> str:
    """A link or input type as a message shows it (an old-style combo is a list of options)."""
    return f"COMBO (a list of {len(kind)} options)" if isinstance(kind, list) else printable(kind, 80)


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


def host_value(kind: str, value: Any) -> tuple[Any, str | None]:
    """(the value the host validates, or None, and why it cannot) after its conversion (execution.py
    validate_inputs: a `{"__value__": v}` wrapper unwrapped, then int() / float() / str() / bool() by type)."""
    if isinstance(value, dict) and "__value__" in value:
        value = value["__value__"]
    convert = {"INT": int, "FLOAT": float, "STRING": str, "BOOLEAN": bool}.get(kind)
    if convert is None:
        return value, None
    try:
        return convert(value), None
    except (TypeError, ValueError, OverflowError) as exc:
        return None, f"ComfyUI cannot convert it to {kind} ({printable(exc, 80)})"


def conversion_remark(kind: str, value: Any, converted: Any) -> str | None:
    """What the host's conversion does to a value that is not already of the widget's kind, when it matters."""
    if isinstance(value, dict):
        return None  # the "__value__" wrapper: what the frontend sends for a list value
    if kind == "INT" and (isinstance(value, bool) or not isinstance(value, int)):
        if isinstance(value, float) and value.is_integer():
            return None  # 5.0: the editor's own number widgets send these
        return f"ComfyUI reads it as {converted!r} (int())"
    if kind == "FLOAT" and (isinstance(value, (bool, str)) or not isinstance(value, (int, float))):
        return f"ComfyUI reads it as {converted!r} (float())"
    if kind == "FLOAT" and math.isnan(value):
        return "not a number: ComfyUI's min/max checks let NaN through and the node computes with it"
    if kind == "STRING" and not isinstance(value, str):
        return f"ComfyUI reads it as the text {converted!r} (str())"
    if kind == "BOOLEAN" and not isinstance(value, bool):
        return f"ComfyUI reads it as {converted!r} (bool(); any non-empty text is true)"
    return None


def _has_own_fallback(info: dict, key: str) -> bool:
    """A required input inside a DynamicCombo option ('format.codec') that the node also declares, optional, at its
    top level ('codec'): the host's /prompt never checks option inputs, and such a node reads the flat one instead."""
    if "." not in key:
        return False
    optional = (info.get("input") or {}).get("optional") or {}
    return isinstance(optional, dict) and key.rsplit(".", 1)[-1] in optional


def _conversion_fix(kind: str, opts: dict) -> str:
    """A value this input takes, for a literal the host cannot convert (a newer template's option, e.g. CreateVideo
    bit_depth "auto" where this ComfyUI's input is an INT of 8..10)."""
    what = {"INT": "a whole number", "FLOAT": "a number", "BOOLEAN": "true or false"}.get(kind, f"a {kind.lower()}")
    bounds = [f"{sign} {opts[key]}" for sign, key in ((">=", "min"), ("<=", "max")) if key in opts]
    where = f" ({' and '.join(bounds)})" if bounds else ""
    default = f", e.g. its default {opts['default']!r}" if "default" in opts else ""
    return (f"give {what}{where}{default}; a workflow made for a newer ComfyUI may use an option this one lacks: "
            "update ComfyUI, or set the value here")


def check_widget(node_id: str, ct: str, name: str, spec: list, value: Any, folder: str | None = None,
                 delegated: bool = False) -> list[Problem]:
    """A literal input value, judged as the host judges it: converted by type, then min/max, then the combo's
    options. `folder`: the models/ folder this input names a file of (a loader), when known. `delegated`: the
    node's own validate function takes this input, so the host skips min/max and options (`self_validated`)."""
    kind, opts = input_kind(spec)
    bad = []

    def problem(message: str, fix: str, severity: str = ERROR) -> None:
        bad.append(Problem(node_id, ct, name, value, message, fix, severity))

    if isinstance(value, list):  # the host reads every list as a link: [node id, output index]
        problem("a list here is read as a link [node_id, output_index], and this one is not a link to a node",
                'give the value itself, or wrap a list value as {"__value__": [...]}')
        return bad
    converted, why = host_value(kind, value)
    if why is not None:
        problem(f"expected {kind}: {why}", _conversion_fix(kind, opts))
        return bad
    remark = conversion_remark(kind, value, converted)
    if remark is not None:
        problem(remark, f"write it as a JSON {'number' if kind in ('INT', 'FLOAT') else kind.lower()}", WARNING)
    if delegated and not is_input_file_combo(opts):
        return bad
    if kind in ("INT", "FLOAT"):
        lo, hi = opts.get("min"), opts.get("max")
        if lo is not None and converted < lo:
            problem(f"below the minimum {lo}", f"use a value >= {lo}")
        elif hi is not None and converted > hi:
            problem(f"above the maximum {hi}", f"use a value <= {hi}")
        elif kind == "INT" and opts.get("step", 1) > 1:
            base = lo if lo is not None else 0
            step = opts["step"]
            if (converted - base) % step:
                below, above = _nearest_on_step(converted, base, step)
                # ComfyUI's /prompt checks min and max only: a warning, as the host accepts it (the pipeline rules
                # judge the grids that matter, F19/F20, as errors)
                problem(f"not on the widget's grid ({base} + k*{step}); ComfyUI accepts it, the editor would snap it",
                        f"use {int(below)} or {int(above)}", WARNING)
    elif kind == "COMBO":
        bad += _check_combo(node_id, ct, name, opts, converted, folder)
    return bad


def _check_combo(node_id: str, ct: str, name: str, opts: dict, value: Any, folder: str | None) -> list[Problem]:
    listed = opts.get("options")  # None: the pinned file names the folder, not the files a host has
    where = opts.get("model_folder") or ("input" if is_input_file_combo(opts) else None)

    def problem(message: str, fix: str) -> list[Problem]:
        return [Problem(node_id, ct, name, value, message, fix)]

    if where and (not isinstance(value, str) or not value):
        return problem("expected a file name", f"name a file in the '{where}' folder")
    if where and not value.isprintable():
        return problem("the file name contains NUL or control characters, which no file name has",
                       f"choose the file from the '{where}' folder's list")
    if where and (listed is None or opts.get("model_folder")):
        return []  # offline, or a pack's own loader: which files the host has is the server's to say (server.py)
    if opts.get("multiselect") and isinstance(value, list):
        missing = [v for v in value if v not in (listed or [])]
    else:
        missing = [] if value in (listed or []) else [value]
    if not missing:
        return []
    options = [str(o) for o in listed or []]
    if folder:
        shown = f"it has {len(options)} there: {', '.join(options)}" if options else "that folder is empty"
        return problem(f"'{value}' is not in this server's models/{folder_name(folder)} ({shown})",
                       how_to_get(str(value), folder))
    if where == "input":
        shown = f"it has {len(options)} there" if options else "that folder is empty"
        return problem(f"'{value}' is not in this server's input folder ({shown})",
                       f"upload {value} ({command(f'run --upload {node_id}=PATH')}, or drop the file on the node "
                       "in ComfyUI), or copy it into ComfyUI's input folder")
    return problem("not one of the allowed options", f"choose one of: {', '.join(options)}")


def _check_link(graph: dict, schemas: dict, node_id: str, ct: str, name: str, spec: list, link: list,
                type_checked: bool = True) -> list[Problem]:
    """A link input: to an existing node and output, of a type the host accepts (node_inputs.link_accepted).
    `type_checked` False: the node's own validate function takes the link types (the host skips the check)."""
    src_id, index = str(link[0]), link[1]
    src = graph.get(src_id)
    if not isinstance(link[0], str):  # the host looks the id up as given: prompt[1] is not prompt["1"]
        return [Problem(node_id, ct, name, link, f"names node {src_id} by a number; ComfyUI looks node ids up as "
                        "text and refuses the prompt", f'write the id as text: ["{src_id}", {index}]')]
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
    received, expected = outputs[index], spec[0] if spec else node_inputs.ANY_TYPE
    if not type_checked or node_inputs.link_accepted(received, expected):
        return []
    source = f"node {src_id} ({src['class_type']}) output {index}"
    if expected == node_inputs.DYNAMIC_SLOT:
        return _dynamic_slot_link(node_id, ct, name, link, received, spec, source)
    unknown = node_inputs.unknown_construct(received, expected)
    if unknown is not None:
        return [Problem(node_id, ct, name, link,
                        f"links {type_text(received)} from {source} into {type_text(expected)}: H3Kit does not know "
                        f"ComfyUI's type construct {unknown}, so it did not judge this link",
                        f"check it against your server (`{command('validate --server URL')}`) or in the editor",
                        WARNING)]
    return [Problem(node_id, ct, name, link,
                    f"receives {type_text(received)} from {source} but needs {type_text(expected)}",
                    f"connect an output of type {type_text(expected)}")]


def _dynamic_slot_link(node_id: str, ct: str, name: str, link: list, received: Any, spec: list,
                       source: str) -> list[Problem]:
    """A link into a V3 DynamicSlot: the editor offers it for the slot's `slotType`, while the host's check compares
    the link with the DynamicSlot type itself; no core node has one, so H3Kit warns instead of guessing."""
    slot_type = spec[1].get("slotType") if len(spec) > 1 and isinstance(spec[1], dict) else None
    if slot_type is not None and not node_inputs.link_accepted(received, slot_type):
        return [Problem(node_id, ct, name, link, f"receives {type_text(received)} from {source} but the slot takes "
                        f"{type_text(slot_type)}", f"connect an output of type {type_text(slot_type)}")]
    return [Problem(node_id, ct, name, link, f"links {type_text(received)} from {source} into a DynamicSlot "
                    f"({node_inputs.DYNAMIC_SLOT}, slot type {type_text(slot_type)}): ComfyUI's /prompt compares the "
                    "link with the DynamicSlot type itself, which H3Kit cannot settle offline",
                    f"check it against your server (`{command('validate --server URL')}`)", WARNING)]


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
    core-version difference (`core_version_differences`); offline (the pinned schemas), a core node written in
    another ComfyUI's input layout that `run` adapts is one warning (`adapted_layout`). Problems of nodes no
    output depends on are warnings (`scope_to_run`): the host never validates or runs them."""
    if looks_like_ui_format(graph):
        return [Problem("-", "-", None, None, "this is a UI-format (litegraph) workflow, not API format",
                        "export it with 'Save (API)' / 'Export (API)' in ComfyUI, or use the file from workflows/api/")]
    if not isinstance(graph, dict) or not graph:
        return [Problem("-", "-", None, None, "not an API-format graph (expected a non-empty JSON object of nodes)",
                        "pass an API-format workflow JSON")]
    offline = is_pinned(schemas)
    problems: list[Problem] = []
    judged: list[Problem] = []
    has_output = False
    for node_id, node in graph.items():
        check_time("validating the workflow")
        shape = node_shape_problem(node_id, node)
        if shape is not None:
            problems.append(shape)
            continue
        ct = node["class_type"]
        info = schemas.get(ct)
        if info is None:
            unknown = unknown_node_problem(str(node_id), ct, schemas, pack_of, known_ids, offline)
            has_output = has_output or unknown.severity == WARNING  # it may be the output: the server decides
            problems.append(unknown)
            continue
        if info.get(UNREADABLE):
            problems.append(Problem(str(node_id), ct, None, None, f"this host's schema of {ct} is not in ComfyUI's "
                                    f"/object_info shape ({info[UNREADABLE]}), so its inputs were not checked",
                                    "update or reinstall the node pack that provides it", severity="warning"))
            has_output = True  # unknown: ComfyUI itself will say if the graph has no output
            continue
        has_output = has_output or bool(info.get("output_node"))
        inputs = node.get("inputs", {})
        found = _node_problems(graph, schemas, str(node_id), ct, info, inputs)
        judged += (adapted_layout(graph, schemas, str(node_id), node, found) if offline
                   else core_version_differences(graph, schemas, str(node_id), ct, inputs, found))
    runs = run_scope(graph, schemas)
    problems += scope_to_run(runs, judged)
    if not has_output:
        problems.append(Problem("-", "-", None, None, "graph has no output node, so ComfyUI runs nothing",
                                "add an output node such as SaveVideo, SaveImage or PreviewImage"))
    return problems + cycle_problems(graph, runs)


def unknown_node_problem(node_id: str, ct: str, schemas: dict, pack_of: PackLookup, known_ids: Collection[str],
                         offline: bool) -> Problem:
    """A class_type the schemas lack. A server refuses the whole prompt (its missing_node_type): an error.
    Offline the pinned list is one ComfyUI's core: a node that is neither there, nor H3Kit's, nor a known
    third-party one may be a newer core node or one of the user's packs, so it is a warning that sends the user to
    their server, never "install a pack"."""
    pack = pack_of(ct)
    if offline and pack is None and not ct.startswith("H3Kit"):
        message, fix = offline_unknown_advice(ct, [*schemas, *known_ids])
        return Problem(node_id, ct, None, None, f"unknown node type offline: {message}", fix, WARNING)
    message, fix = unknown_node_advice(ct, pack, [*schemas, *known_ids])
    return Problem(node_id, ct, None, None, f"unknown node type on this host: {message}", fix)


def run_scope(graph: dict, schemas: dict) -> set[str] | None:
    """The nodes the host validates and runs (checks.graph.executed_nodes), or None when the graph has no output
    node at all: the host then refuses it whole ("no output node"), and every node is judged."""
    shaped = well_formed(graph)
    runs = executed_nodes(shaped, schemas)
    return runs if runs else None


def scope_to_run(runs: Collection[str] | None, problems: list[Problem]) -> list[Problem]:
    """`problems` with the errors of nodes outside `runs` (run_scope) as warnings: the host validates and runs
    only the nodes some output depends on, so it never reports them."""
    if runs is None:
        return problems
    return [replace(p, severity=WARNING, message=f"{p.message}; ComfyUI does not run node {p.node_id} (no output "
                    "depends on it), so it does not check this")
            if p.severity == ERROR and p.node_id not in runs and p.node_id not in ("-", "") else p
            for p in problems]


def cycle_problems(graph: dict, runs: Collection[str] | None) -> list[Problem]:
    """A cycle among the nodes the host runs is an error (its dependency_cycle); one elsewhere only a warning."""
    nodes = {k: v for k, v in graph.items() if isinstance(v, dict)}
    cycle, severity = find_cycle({k: v for k, v in nodes.items() if runs is None or k in runs}), ERROR
    if cycle is None:
        cycle, severity = find_cycle(nodes), WARNING
    if cycle is None:
        return []
    where = "" if severity == ERROR else "; no output depends on these nodes, so ComfyUI neither checks nor runs them"
    return [Problem(cycle[0], str(graph[cycle[0]].get("class_type", "?")), None, None,
                    "links form a cycle: " + " -> ".join(cycle) + where, "break the loop", severity)]


def _node_problems(graph: dict, schemas: dict, node_id: str, ct: str, info: dict, inputs: dict) -> list[Problem]:
    problems = []
    declared = declared_inputs(info, inputs)
    delegated = self_validated(ct, info)
    odd = {name: why for name, (spec, _) in declared.items() if (why := node_inputs.construct_problem(spec))}
    for name, why in odd.items():
        used = {key: value for key, value in inputs.items() if key == name or key.startswith(name + ".")}
        problems.append(Problem(node_id, ct, name, used or None, f"input '{name}' was not checked: {why}",
                                f"check it against your server (`{command('validate --server URL')}`)", WARNING))
    for name, (spec, required) in declared.items():
        if name in odd:
            continue
        if required and name not in inputs:
            kind, opts = input_kind(spec)
            hint = f" (default {opts['default']!r})" if "default" in opts else ""
            if _has_own_fallback(info, name) and name.rsplit(".", 1)[-1] not in inputs:
                # ComfyUI's /prompt does not check a DynamicCombo's option inputs, and this node declares the input
                # at its top level as well (yzkee's SaveVideo: a hidden optional 'codec' for older prompts): it runs
                problems.append(Problem(node_id, ct, name, None, f"the {kind} input '{name}' is not set; this "
                                        f"ComfyUI's {ct} falls back to its own '{name.rsplit('.', 1)[-1]}' input",
                                        f"set '{name}'{hint} to choose it", WARNING))
                continue
            problems.append(Problem(node_id, ct, name, None, f"required {kind} input is missing",
                                    f"connect or set '{name}'{hint}"))
    for name, value in inputs.items():
        if any(name == key or name.startswith(key + ".") for key in odd):
            continue
        if name not in declared:
            problems.append(Problem(node_id, ct, name, value, "input not declared by this node; ComfyUI ignores it",
                                    "check the spelling against the node's inputs", severity="warning"))
            continue
        spec = declared[name][0]
        kind, opts = input_kind(spec)
        if is_link(value):
            problems += _check_link(graph, schemas, node_id, ct, name, spec, value, "input_types" not in delegated)
        elif kind in WIDGET_TYPES or isinstance(value, list):
            folder = MODEL_INPUT_FOLDERS.get((ct, name)) or opts.get("model_folder")
            problems += check_widget(node_id, ct, name, spec, value, folder, name in delegated or "*" in delegated)
        elif not any(mark in opts for mark in WIDGET_MARKS):
            problems.append(Problem(node_id, ct, name, value, f"{type_text(kind)} comes from a link; ComfyUI's /prompt "
                                    "does not check a value here, and the node gets this value instead",
                                    "connect it to a node output ([node_id, output_index])", WARNING))
    return problems


def self_validated(ct: str, info: dict) -> frozenset[str]:
    """The inputs whose min/max and option checks the host leaves to the node's own validate function (the pinned
    entry's `validate_inputs`: "*" for all, "input_types" when it also takes the link types)."""
    names = info.get("validate_inputs")
    if names is None:
        names = (core_document()["nodes"].get(ct) or {}).get("validate_inputs")
    return frozenset(str(n) for n in names) if isinstance(names, list) else frozenset()


def adapted_layout(graph: dict, schemas: dict, node_id: str, node: dict, problems: list[Problem]) -> list[Problem]:
    """Offline, a core node whose errors all go once its inputs move to the pinned layout (checks.host_layout, as
    `run` and the editor's preflight do against the server's) is written in another ComfyUI's layout (SaveVideo:
    flat v0.3.64/0.12.1, 0.33.0's DynamicCombo codec, >= 0.34's format.codec): one warning, not an error. One that
    an older host read for the pinned file accepts (the entry's `older`) is a warning naming what the newest pinned
    host refuses: offline, the host is not known."""
    ct, node = node["class_type"], {**node, "inputs": inputs_of(node)}
    info = schemas[ct]
    if not has_errors(problems) or info.get("pack", "core") != "core":
        return problems
    newest = f"the newest pinned host ({pinned_host()}, the ComfyUI {schema_version(ct)} layout)"
    inputs, changes = adapt_node(node_id, node, info)
    left = _node_problems(graph, schemas, node_id, ct, info, inputs)
    if changes and not has_errors(left):
        moves = ", ".join(f"'{c.old_key}' -> '{c.new_key}'" for c in changes)
        return [Problem(node_id, ct, changes[0].old_key, changes[0].value,
                        f"written in another ComfyUI version's input layout ({moves} on {newest}); "
                        f"`{command('run')}` and the editor's preflight adapt it to your server's before queueing",
                        f"nothing to do for `{command('run')}` and the editor; elsewhere validate against your server "
                        f"(`{command('validate --server URL')}`)", WARNING), *left]
    refused = next(p for p in (left if changes else problems) if p.severity == ERROR)
    for label, variant in (info.get("older") or {}).items():
        older = {**info, **variant}
        if not has_errors(_node_problems(graph, schemas, node_id, ct, older, adapt_node(node_id, node, older)[0])):
            return [Problem(node_id, ct, refused.input, refused.value,
                            f"ComfyUI {variant.get('version')} ({label}) accepts this {ct}; {newest} does not: "
                            f"'{refused.input}': {refused.message}",
                            f"validate against your server (`{command('validate --server URL')}`): it decides",
                            WARNING)]
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

