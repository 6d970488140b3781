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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .graph import is_link
from .node_inputs import DYNAMIC_COMBO, DYNAMIC_SLOT, Declared, declared_inputs, is_hidden
from .problem import printable

MAX_PASSES = 8  # a move can declare nested keys (codec -> codec.encoding -> codec.encoding.crf): bounded
# Input keys of one node the adaptation examines: a node with more is left as it is (`Adaptation.skipped`) for the
# validator, or ComfyUI, to judge. The largest pinned node declares 92 (ByteDance2ReferenceNode); an Autogrow group
# at most 100 slots.
MAX_NODE_KEYS = 1_000
SUMMARY_CHANGES = 20  # changes a summary names; the rest are counted


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
    skipped: list[str] = field(default_factory=list)  # ids of nodes with more than MAX_NODE_KEYS inputs, left as sent
    over_budget: bool = False  # adapt_graph's `budget` passed: nothing adapted

    def summary(self) -> str:
        """The changes on one printable line (keys and ids come from the prompt), at most SUMMARY_CHANGES named."""
        shown = "; ".join(c.text() for c in self.changes[:SUMMARY_CHANGES])
        more = len(self.changes) - SUMMARY_CHANGES
        return printable(shown + (f"; and {more} more" if more > 0 else ""))


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


def _by_leaf(keys: Iterable[Any]) -> dict[str, list[str]]:
    """{last name: keys ending in it}, in the keys' order: two keys can only be related when their last names match,
    so each key is compared with the few that share its name, never with every other key."""
    index: dict[str, list[str]] = {}
    for key in keys:
        if isinstance(key, str):
            index.setdefault(_leaf(key), []).append(key)
    return index


def _moves(inputs: dict, declared: Declared) -> list[tuple[str, str]]:
    """(old key, new key) for one pass over one node whose host declares `declared`. Linear in the node's keys:
    each key is looked up by its last name among the declared keys (the schema's size), never compared with all."""
    moves: list[tuple[str, str]] = []
    taken = set(inputs)
    undeclared = [k for k in inputs if k not in declared]
    if undeclared:
        declared_by_leaf = _by_leaf(declared)
        for key in undeclared:
            if not isinstance(key, str):
                continue
            targets = [d for d in declared_by_leaf.get(_leaf(key), ()) if d not in taken and _related(key, d)]
            if len(targets) == 1:
                moves.append((key, targets[0]))
                taken.add(targets[0])
    if moves:
        return moves
    # A required key the graph lacks, whose value sits under a hidden key with its name (an older layout the host
    # still accepts but no longer reads first), e.g. a flat 'codec' on a >= 0.34 SaveVideo that needs format.codec.
    missing = [key for key, (_, required) in declared.items() if required and key not in inputs]
    if not missing:
        return moves
    inputs_by_leaf = _by_leaf(inputs)
    for key in missing:
        sources = [k for k in inputs_by_leaf.get(_leaf(key), ())
                   if k != key and _related(k, key) and (k not in declared or is_hidden(declared[k][0]))]
        if len(sources) == 1:
            moves.append((sources[0], key))
    return moves


class _Layouts:
    """The declared inputs of each node of one graph, read once per class, or once per choice of a class's
    DynamicCombo options (and DynamicSlot inputs given): nodes of one class with the same choices share one walk of
    the schema, so a graph of 10,000 nodes costs 10,000 lookups, not 10,000 walks."""

    def __init__(self) -> None:
        self._selectors: dict[str, list[tuple[str, bool]]] = {}  # class: [(key, is a DynamicCombo)], in walk order
        self._known: dict[tuple, tuple[Declared, frozenset]] = {}

    def settled(self, class_type: str, info: Mapping, inputs: dict) -> bool:
        """Every key of `inputs` declared and every required key there: nothing to move (checked on sets)."""
        if class_type not in self._selectors:
            universe = declared_inputs(info)
            self._selectors[class_type] = [(key, spec[0] == DYNAMIC_COMBO) for key, (spec, _) in universe.items()
                                           if spec[0] in (DYNAMIC_COMBO, DYNAMIC_SLOT)]
        choice = (class_type, *(inputs.get(key) if combo else key in inputs
                                for key, combo in self._selectors[class_type]))
        try:
            known = self._known.get(choice)
        except TypeError:  # a link or a list chose an option: this node's own walk
            known = None
            choice = None
        if known is None:
            declared = declared_inputs(info, inputs)
            known = (declared, frozenset(key for key, (_, required) in declared.items() if required))
            if choice is not None:
                self._known[choice] = known
        return inputs.keys() <= known[0].keys() and known[1] <= inputs.keys()


def adapt_node(node_id: str, node: dict, info: Mapping) -> tuple[dict, list[Change]]:
    """One node's inputs in the host's layout: (new inputs, changes). `info`: the host's /object_info entry. A node
    with more than MAX_NODE_KEYS inputs is left as it is."""
    inputs = node.get("inputs")
    if not isinstance(inputs, dict) or not isinstance(info, Mapping) or len(inputs) > MAX_NODE_KEYS:
        return inputs, []
    ct = str(node.get("class_type"))
    changes: list[Change] = []
    current = dict(inputs)
    for _ in range(MAX_PASSES):
        moves = _moves(current, declared_inputs(info, current))
        if not moves:
            break
        for old, new in moves:
            value = current.pop(old)
            current[new] = value
            changes.append(Change(str(node_id), ct, old, new, value if not is_link(value) else list(value)))
    return current, changes


def adapt_graph(graph: Any, schemas: Mapping[str, Mapping], *, deep: bool = True,
                budget: int | None = None) -> Adaptation:
    """`graph` (an API-format prompt) in the input layout of the host whose /object_info entries are `schemas`.

    Returns Adaptation(graph, changes, skipped): a deep copy with the moved keys when anything changed (each move a
    `Change`, to show the user), else the input graph itself and no changes. Nodes the host lacks, malformed
    nodes and non-graphs are left as they are (the validator reports them), and so are nodes with more than
    MAX_NODE_KEYS inputs (their ids in `skipped`). Validate the adapted graph afterwards: what the adaptation
    cannot fix (a value the host does not offer) is refused there, with the host's options as the fix.
    `deep` False: the copy shares every node and value it does not change (the input graph is still never
    modified), for a caller that hands the graph on and never edits it (ComfyUI's on-prompt handler).
    `budget`: at most this many input keys, all nodes together, of the nodes that hold an undeclared key or lack a
    required one (the only ones examined key by key); past it nothing is adapted (`over_budget`).
    Linear in the graph's input keys."""
    if not isinstance(graph, dict) or not isinstance(schemas, Mapping):
        return Adaptation(graph)
    skipped: list[str] = []
    layouts = _Layouts()
    unsettled: list[tuple[Any, dict, Mapping]] = []
    examined = 0
    for node_id, node in graph.items():
        if not isinstance(node, dict) or not isinstance(node.get("class_type"), str):
            continue
        info = schemas.get(node["class_type"])
        inputs = node.get("inputs")
        if not isinstance(info, Mapping) or not isinstance(inputs, dict):
            continue
        if len(inputs) > MAX_NODE_KEYS:
            skipped.append(str(node_id))
        elif not layouts.settled(node["class_type"], info, inputs):
            examined += len(inputs)
            if budget is not None and examined > budget:
                return Adaptation(graph, skipped=skipped, over_budget=True)
            unsettled.append((node_id, node, info))
    changes: list[Change] = []
    adapted_inputs: dict[str, dict] = {}
    for node_id, node, info in unsettled:
        inputs, node_changes = adapt_node(str(node_id), node, info)
        if node_changes:
            adapted_inputs[node_id] = inputs
            changes += node_changes
    if not changes:
        return Adaptation(graph, skipped=skipped)
    if not deep:
        return Adaptation({nid: ({**node, "inputs": adapted_inputs[nid]} if nid in adapted_inputs else node)
                           for nid, node in graph.items()}, changes, skipped)
    adapted = {nid: ({**copy.deepcopy(node), "inputs": copy.deepcopy(adapted_inputs[nid])} if nid in adapted_inputs
                     else copy.deepcopy(node)) for nid, node in graph.items()}
    return Adaptation(adapted, changes, skipped)
