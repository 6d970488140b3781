"""Schemas for the CLI: the pinned core file + this pack's own node classes (checks/schemas.py does the
work; this module only supplies the pack's registry, which checks/ never imports)."""

from __future__ import annotations

from typing import Any

from ..checks import schemas as core
from ..checks.schemas import API_WORKFLOWS_DIR, H3KIT_PACK, WORKFLOWS_DIR  # noqa: F401 - the CLI's paths


def offline_schemas() -> dict[str, dict[str, Any]]:
    from ..nodes import NODE_CLASS_MAPPINGS

    return core.offline_schemas(NODE_CLASS_MAPPINGS)


def own_node_ids() -> set[str]:
    """Every H3Kit node id, including the optional ones left out on this machine."""
    from ..nodes import DISABLED_NODES, NODE_CLASS_MAPPINGS

    return set(NODE_CLASS_MAPPINGS) | {node_id for ids in DISABLED_NODES.values() for node_id in ids}


def providing_pack(class_type: str) -> str | None:
    from ..nodes import DISABLED_NODES

    return core.providing_pack(class_type, DISABLED_NODES, own_node_ids())


def disabled_nodes() -> dict[str, list[str]]:
    from ..nodes import DISABLED_NODES

    return DISABLED_NODES
