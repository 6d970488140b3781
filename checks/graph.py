"""Reading an API-format graph: links, input specs, upstream walks and the one Primitive resolver.

Every walk is iterative and visits each node once, so a hostile graph (long chains, cycles) costs
O(nodes) and never recurses.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

from .facts import PRIMITIVE_MAX_HOPS
from .node_inputs import AUTOGROW_HEADS, DYNAMIC_COMBO, autogrow_group, option_keys
from .problem import Problem, printable
from .schemas import UNREADABLE

PRIMITIVE_VALUE_NODES = frozenset({"PrimitiveInt", "PrimitiveFloat", "PrimitiveString", "PrimitiveStringMultiline",
                                   "PrimitiveBoolean", "PrimitiveNode"})


class _Unknown:
    """A value only the run knows (computed by a node, or an unresolvable link)."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def is_link(value: Any) -> bool:
    """[source node id, output index]: how API-format graphs write a connection."""
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], (str, int))
        and not isinstance(value[0], bool)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    )


def inputs_of(node: Any) -> dict:
    """A node's inputs, {} when the node or its inputs are not objects."""
    inputs = node.get("inputs") if isinstance(node, dict) else None
    return inputs if isinstance(inputs, dict) else {}


def class_of(graph: dict, node_id: str) -> str:
    node = graph.get(node_id)
    return str(node.get("class_type", "?")) if isinstance(node, dict) else "?"


def input_kind(spec: Any) -> tuple[str, dict]:
    """('INT'|'COMBO'|'IMAGE'|..., options dict) for an /object_info input spec."""
    if not isinstance(spec, (list, tuple)) or not spec:
        return "*", {}
    head = spec[0]
    opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
    if isinstance(head, list):
        return "COMBO", {**opts, "options": head}
    if head == DYNAMIC_COMBO:  # options are {"key": ..., "inputs": ...} objects; the prompt sends the key
        return "COMBO", {**opts, "options": option_keys(opts.get("options"))}
    if head in AUTOGROW_HEADS:  # the group spelled out: slot names, prefix, min, max, slot types
        return "AUTOGROW", autogrow_options(opts)
    return str(head), opts


def autogrow_options(opts: dict) -> dict:
    """An Autogrow spec's options with its group spelled out (node_inputs.autogrow_group): slot `names`, `prefix`
    (None for a named template), `min`, `max` (the number of slots) and the slot `types`."""
    group = autogrow_group(opts)
    if group is None:
        return opts
    head = group.spec[0]
    types = [t.strip() for t in head.split(",")] if isinstance(head, str) else ["COMBO"]
    return {**opts, "names": list(group.names), "prefix": group.prefix, "min": group.minimum,
            "max": len(group.names), "types": types}


def nodes_of(graph: dict, *class_types: str) -> Iterable[tuple[str, dict]]:
    for node_id, node in graph.items():
        if isinstance(node, dict) and node.get("class_type") in class_types:
            yield str(node_id), node


def source_node(graph: dict, node: dict, input_name: str) -> tuple[str, dict] | None:
    """The node a link input comes from, or None when the input is a literal or missing."""
    value = inputs_of(node).get(input_name)
    if not is_link(value):
        return None
    src = graph.get(str(value[0]))
    return (str(value[0]), src) if isinstance(src, dict) else None


def resolve(graph: dict, value: Any) -> Any:
    """The one Primitive resolver: a literal as is; a link to a Primitive* node's output 0 followed through
    at most PRIMITIVE_MAX_HOPS Primitive nodes to its literal; UNKNOWN for anything computed."""
    for _ in range(PRIMITIVE_MAX_HOPS + 1):
        if not is_link(value):
            return value
        src = graph.get(str(value[0]))
        if not isinstance(src, dict) or src.get("class_type") not in PRIMITIVE_VALUE_NODES or value[1] != 0:
            return UNKNOWN
        value = inputs_of(src).get("value", UNKNOWN)
    return UNKNOWN


def resolved(graph: dict, node: dict, input_name: str, default: Any = UNKNOWN) -> Any:
    """A node input's literal value through Primitive nodes; `default` when the input is absent."""
    inputs = inputs_of(node)
    return resolve(graph, inputs[input_name]) if input_name in inputs else default


def int_input(graph: dict, node: dict, name: str) -> int | None:
    """A whole-number input (672 or 672.0), None when absent, computed or not a whole number."""
    value = resolved(graph, node, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value)


def ancestors(graph: dict, start_ids: Iterable[str]) -> set[str]:
    """Every node id reachable upstream from start_ids (inclusive)."""
    found: set[str] = set()
    stack = [str(i) for i in start_ids]
    while stack:
        nid = stack.pop()
        if nid in found or not isinstance(graph.get(nid), dict):
            continue
        found.add(nid)
        stack.extend(str(v[0]) for v in inputs_of(graph[nid]).values() if is_link(v))
    return found


def executed_nodes(graph: dict, schemas: dict) -> set[str]:
    """The nodes ComfyUI runs and its /prompt validates: output nodes and everything upstream of them (execution.py
    validate_prompt starts from the output nodes; a node no output depends on is neither checked nor run). A node
    whose type the schemas lack or could not read counts as an output: it may be one."""
    roots = []
    for nid, node in graph.items():
        if not isinstance(node, dict):
            continue
        info = schemas.get(node.get("class_type")) if isinstance(node.get("class_type"), str) else None
        if not isinstance(info, dict) or info.get("output_node") is True or UNREADABLE in info:
            roots.append(nid)
    return ancestors(graph, roots)


def upstream_of_inputs(graph: dict, node: dict, input_names: Iterable[str]) -> set[str]:
    names = set(input_names)
    return ancestors(graph, [str(v[0]) for name, v in inputs_of(node).items() if name in names and is_link(v)])


def upstream_nodes(graph: dict, start: Any) -> list[str]:
    """Node ids upstream from a link value, nearest first (breadth first, each once)."""
    seen: dict[str, None] = {}
    queue = deque([str(start[0])] if is_link(start) else [])
    while queue:
        node_id = queue.popleft()
        if node_id in seen or not isinstance(graph.get(node_id), dict):
            continue
        seen[node_id] = None
        queue.extend(str(v[0]) for v in inputs_of(graph[node_id]).values() if is_link(v))
    return list(seen)


def model_upstream(graph: dict, sampler: dict) -> set[str]:
    """Nodes that shape the model a sampler runs (its model or guider input), not its latent."""
    return upstream_of_inputs(graph, sampler, ("model", "guider"))


def node_shape_problem(node_id: str, node: Any) -> Problem | None:
    """Why a node is not {"class_type": "<name>", "inputs": {...}}, or None. Nodes with a problem here are
    reported once and kept away from the rules, which may rely on that shape."""
    fix = 'write each node as {"class_type": "NodeName", "inputs": {"name": value, ...}} (Export (API) does)'
    if not node_id.isprintable():
        return Problem(printable(node_id), "?", None, None, "the node id contains control characters", fix)
    if not isinstance(node, dict):
        return Problem(node_id, "?", None, node, f"the node is a JSON {json_kind(node)}, not an object", fix)
    ct = node.get("class_type")
    if "class_type" in node and ct is None:
        # ComfyUI's editor exports a node whose type it does not know (its pack is not installed) with a null
        # class_type; ComfyUI refuses the prompt ("has no class_type ... a custom node is missing")
        title = node.get("_meta", {}).get("title") if isinstance(node.get("_meta"), dict) else None
        named = f" '{printable(title, 80)}'" if isinstance(title, str) and title else ""
        return Problem(node_id, "?", "class_type", None,
                       f"node{named} has no type: the editor exported a node whose type it did not know, so a custom "
                       "node pack this workflow needs is not installed and ComfyUI refuses the prompt",
                       "open the workflow in ComfyUI, install the missing nodes it names (ComfyUI-Manager: 'Install "
                       "Missing Custom Nodes'), restart, and export it again")
    if not isinstance(ct, str) or not ct or not ct.isprintable():
        what = "missing" if ct is None else ("not printable text" if isinstance(ct, str) else f"a JSON {json_kind(ct)}")
        return Problem(node_id, "?", "class_type", ct, f"class_type is {what}; it must be the node's type name", fix)
    inputs = node.get("inputs", {})
    if not isinstance(inputs, dict):
        return Problem(node_id, ct, "inputs", inputs, f"'inputs' is a JSON {json_kind(inputs)}, not an object", fix)
    return None


def well_formed(graph: Any) -> dict:
    """The nodes of an API-format graph that have the shape every rule relies on (see node_shape_problem)."""
    if not isinstance(graph, dict):
        return {}
    return {nid: node for nid, node in graph.items() if node_shape_problem(nid, node) is None}


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)
