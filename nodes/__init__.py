"""Collects every H3Kit node class from the capability modules listed in NODE_MODULES.

A module that fails to import loses its own nodes only (logged with the traceback). A node whose optional
package is missing is left out quietly: one INFO line in ComfyUI's startup log (OPTIONAL_NOTES, also shown by
`doctor`) says which versions make it work. The command line imports this before it sets up logging, so
`--help` prints nothing about it.
"""

from __future__ import annotations

import logging
from importlib import import_module

from ..adapters.host import guard_input_types
from ..adapters.log import LOG, log_once
from ..checks.environment import missing_packages
from ..checks.schemas import providing_pack

# One entry per capability module in this folder; add yours here.
NODE_MODULES: tuple[str, ...] = (
    "pipeline", "draft", "lowvram", "attention", "effects", "ref2va", "conditioning_cache", "turing", "preflight", "demo",
)

IMPORT_FAILURES: dict[str, str] = {}
DISABLED_NODES: dict[str, list[str]] = {}  # package -> node ids left out because it is not installed
OPTIONAL_NOTES: list[str] = []  # one line per optional node that is off, with what makes it work


def optional_note(node_cls: type, missing: list[str]) -> str:
    """`node_cls.OPTIONAL_INSTALL` says when the node matters and the versions that work."""
    hint = getattr(node_cls, "OPTIONAL_INSTALL", f"pip install {' '.join(missing)}")
    return (f"H3Kit: optional node {node_cls.__name__} is off ({', '.join(missing)} not installed); "
            f"every other node works without it. {hint}")


def collect_nodes() -> dict[str, type]:
    """Import the capability modules and return {node_id: class} for every usable node."""
    nodes: dict[str, type] = {}
    for name in NODE_MODULES:
        try:
            module = import_module(f".{name}", __name__)
        except Exception as exc:  # noqa: BLE001 - one broken family must not take down the pack
            IMPORT_FAILURES[name] = f"{type(exc).__name__}: {exc}"
            LOG.error("H3Kit: module nodes/%s.py failed to import; its nodes are unavailable", name, exc_info=True)
            continue
        for node_cls in module.NODES:
            missing = missing_packages(getattr(node_cls, "REQUIRES", ()))
            if not missing:
                nodes[node_cls.__name__] = guard_input_types(node_cls)  # a host quirk never hides the node
                continue
            for pkg in missing:
                DISABLED_NODES.setdefault(pkg, []).append(node_cls.__name__)
            OPTIONAL_NOTES.append(optional_note(node_cls, missing))
    return nodes


def log_optional_notes() -> None:
    """One INFO line per optional node that is off, for ComfyUI's startup log: the pack's registration calls it,
    the command line (which imports the nodes too) never does, so a command's output carries no such line."""
    for note in OPTIONAL_NOTES:
        log_once(f"optional-node:{note}", note, logging.INFO)


NODE_CLASS_MAPPINGS: dict[str, type] = collect_nodes()
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {
    node_id: getattr(cls, "DISPLAY_NAME", node_id) for node_id, cls in NODE_CLASS_MAPPINGS.items()
}


def every_node_class() -> list[type]:
    """Every node class of the capability modules, the optional ones off here included (the pinned own schemas:
    scripts/schemas.py)."""
    return [cls for name in NODE_MODULES for cls in import_module(f".{name}", __name__).NODES]


def pack_of(class_type: str) -> str | None:
    """Who provides `class_type` (checks/schemas.providing_pack), knowing this pack's nodes, the disabled ones too."""
    own = set(NODE_CLASS_MAPPINGS) | {node_id for ids in DISABLED_NODES.values() for node_id in ids}
    return providing_pack(class_type, DISABLED_NODES, own)
