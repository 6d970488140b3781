"""Adapt a graph to the input layout the host serves, before it is queued: one module for every path that
queues a graph (`run`, the editor's preflight route, the server-side prompt handler, `validate --server`'s fix).

Core nodes nest the same input differently across ComfyUI versions. SaveVideo has three layouts:

    v0.3.64, 0.12.1   format (combo) + codec (combo)                           keys: format, codec
    0.33.0            format (combo) + codec (DynamicCombo, nested encoding)   keys: format, codec, codec.encoding.crf
    >= 0.34           format (DynamicCombo) with codec inside each option      keys: format, format.codec, ...

A prompt in another layout is accepted by `/prompt` on 0.33.0 (a missing DynamicCombo is not validated there) and
dies at SaveVideo after every sampler ran. The rule here is generic and read from the served schema only: an input
key the host does not declare for this node moves to the one key the host declares (for these values) with the
same name under a different parent ("format.codec" <-> "codec", "codec.encoding.crf" <-> "format.codec.encoding.crf");
a required key the graph lacks takes the value of the one hidden or undeclared key with its name. Values are never
changed: a value the host does not offer (codec "av1" where only auto/h264 exist) stays, and the validator refuses
it with the options the host has. Nothing else is touched; the caller shows `Adaptation.changes` to the user.

Pure: the graph and the host's /object_info entries in, a new graph and the list of changes out (the input graph is
never modified).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .graph import is_link
from .node_inputs import declared_inputs, is_hidden
from .problem import printable

MAX_PASSES = 8  # a move can declare nested keys (codec -> codec.encoding -> codec.encoding.crf): bounded


@dataclass(frozen=True)
class Change:
    """One input key the adaptation moved: node `node_id`'s `old_key` is now `new_key`, with the same value."""

    node_id: str
    class_type: str
    old_key: str
    new_key: str
    value: Any

    def text(self) -> str:
        shown = printable(repr(self.value), 60)
        node, old, new = printable(self.node_id, 40), printable(self.old_key, 100), printable(self.new_key, 100)
        return (f"node {node} ({printable(self.class_type, 80)}): input '{old}' -> '{new}' (value {shown} "
                f"unchanged): this ComfyUI's {printable(self.class_type, 80)} takes it there")

    def as_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "class_type": self.class_type, "from": self.old_key, "to": self.new_key,
                "value": self.value, "text": self.text()}


@dataclass
class Adaptation:
    graph: dict  # the adapted copy (the same object as the input when nothing changed)
    changes: list[Change] = field(default_factory=list)

    def summary(self) -> str:
        return "; ".join(c.text() for c in self.changes)


def _leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _related(a: str, b: str) -> bool:
    """The same input under different parents: one dotted path is a proper suffix of the other
    ("codec" / "format.codec"), or both end in the same name below different parents."""
    if a == b or _leaf(a) != _leaf(b):
        return False
    pa, pb = a.split("."), b.split(".")
    shorter, longer = (pa, pb) if len(pa) <= len(pb) else (pb, pa)
    return longer[-len(shorter):] == shorter


def _moves(inputs: dict, info: Mapping) -> list[tuple[str, str]]:
    """(old key, new key) for one pass over one node."""
    declared = declared_inputs(info, inputs)
    moves: list[tuple[str, str]] = []
    taken = set(inputs)
    undeclared = [k for k in inputs if k not in declared]
    for key in undeclared:
        targets = [d for d in declared if d not in taken and _related(key, d)]
        if len(targets) == 1:
            moves.append((key, targets[0]))
            taken.add(targets[0])
    if moves:
        return moves
    # A required key the graph lacks, whose value sits under a hidden key with its name (an older layout the host
    # still accepts but no longer reads first), e.g. a flat 'codec' on a >= 0.34 SaveVideo that needs format.codec.
    for key, (_, required) in declared.items():
        if not required or key in inputs:
            continue
        sources = [k for k in inputs if k != key and _related(k, key) and (k not in declared or is_hidden(declared[k][0]))]
        if len(sources) == 1:
            moves.append((sources[0], key))
    return moves


def adapt_node(node_id: str, node: dict, info: Mapping) -> tuple[dict, list[Change]]:
    """One node's inputs in the host's layout: (new inputs, changes). `info`: the host's /object_info entry."""
    inputs = node.get("inputs")
    if not isinstance(inputs, dict) or not isinstance(info, Mapping):
        return inputs, []
    ct = str(node.get("class_type"))
    changes: list[Change] = []
    current = dict(inputs)
    for _ in range(MAX_PASSES):
        moves = _moves(current, info)
        if not moves:
            break
        for old, new in moves:
            value = current.pop(old)
            current[new] = value
            changes.append(Change(str(node_id), ct, old, new, value if not is_link(value) else list(value)))
    return current, changes


def adapt_graph(graph: Any, schemas: Mapping[str, Mapping]) -> Adaptation:
    """`graph` (an API-format prompt) in the input layout of the host whose /object_info entries are `schemas`.

    Returns Adaptation(graph, changes): a deep copy with the moved keys when anything changed (each move a
    `Change`, to show the user), else the input graph itself and no changes. Nodes the host lacks, malformed
    nodes and non-graphs are left as they are (the validator reports them). Validate the adapted graph
    afterwards: what the adaptation cannot fix (a value the host does not offer) is refused there, with the
    host's options as the fix."""
    if not isinstance(graph, dict) or not isinstance(schemas, Mapping):
        return Adaptation(graph)
    changes: list[Change] = []
    adapted_inputs: dict[str, dict] = {}
    for node_id, node in graph.items():
        if not isinstance(node, dict) or not isinstance(node.get("class_type"), str):
            continue
        info = schemas.get(node["class_type"])
        if not isinstance(info, Mapping):
            continue
        inputs, node_changes = adapt_node(str(node_id), node, info)
        if node_changes:
            adapted_inputs[node_id] = inputs
            changes += node_changes
    if not changes:
        return Adaptation(graph)
    adapted = {nid: ({**copy.deepcopy(node), "inputs": copy.deepcopy(adapted_inputs[nid])} if nid in adapted_inputs
                     else copy.deepcopy(node)) for nid, node in graph.items()}
    return Adaptation(adapted, changes)
