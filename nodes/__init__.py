"""Collects every H3Kit node class from the capability modules listed in NODE_MODULES.

A module that fails to import loses its own nodes only (logged with the traceback); a node whose
optional package is missing is left out with one log line naming the package and the nodes.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections import defaultdict

from ..adapters.host import guard_input_types
from .common import LOG

# One entry per capability module in this folder; add yours here.
NODE_MODULES: tuple[str, ...] = ("pipeline", "lowvram", "effects", "ref2va", "conditioning_cache", "turing", "preflight")

IMPORT_FAILURES: dict[str, str] = {}
DISABLED_NODES: dict[str, list[str]] = {}


def _missing_packages(node_cls: type) -> list[str]:
    return [pkg for pkg in getattr(node_cls, "REQUIRES", ()) if importlib.util.find_spec(pkg) is None]


def collect_nodes() -> dict[str, type]:
    """Import the capability modules and return {node_id: class} for every usable node."""
    nodes: dict[str, type] = {}
    disabled: dict[str, list[str]] = defaultdict(list)
    for name in NODE_MODULES:
        try:
            module = importlib.import_module(f".{name}", __name__)
        except Exception as exc:  # noqa: BLE001 - one broken family must not take down the pack
            IMPORT_FAILURES[name] = f"{type(exc).__name__}: {exc}"
            LOG.error("H3Kit: module nodes/%s.py failed to import; its nodes are unavailable", name, exc_info=True)
            continue
        for node_cls in module.NODES:
            missing = _missing_packages(node_cls)
            if missing:
                for pkg in missing:
                    disabled[pkg].append(node_cls.__name__)
                continue
            nodes[node_cls.__name__] = guard_input_types(node_cls)  # a host quirk never hides the node
    for pkg, node_ids in disabled.items():
        LOG.log(
            logging.WARNING,
            "H3Kit: optional package '%s' is not installed; disabled nodes: %s (pip install %s)",
            pkg, ", ".join(node_ids), pkg,
        )
    DISABLED_NODES.update(disabled)
    return nodes


NODE_CLASS_MAPPINGS: dict[str, type] = collect_nodes()
NODE_DISPLAY_NAME_MAPPINGS: dict[str, str] = {
    node_id: getattr(cls, "DISPLAY_NAME", node_id) for node_id, cls in NODE_CLASS_MAPPINGS.items()
}
