"""Workflow checks as doctor/preflight lines: schema validation, every graph rule and, with a models
folder, the safetensors header rules (F13/F14)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..adapters.files import is_folder
from .graph import well_formed
from .problem import FAIL, PASS, Check, problem_check
from .rules import RULES
from .rules_files import model_input_keys, model_inputs, safetensors_lint
from .schemas import providing_pack
from .server import Disabled, missing_node_checks
from .validator import PackLookup, load_graph_file, looks_like_ui_format, supersede, validate_graph

Locate = Callable[[str, str], "Path | None"]


def default_models_dir(env: dict[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    if env.get("COMFYUI_DIR"):
        candidate = Path(env["COMFYUI_DIR"]) / "models"
        if is_folder(candidate):
            return candidate
    return None


def workflow_checks(graph: Any, schemas: dict, locate: Locate | None,
                    skip_inputs: Iterable[tuple[str, str]] = frozenset(), on_server: bool = False,
                    schema_check: bool = True, pack_of: PackLookup = providing_pack,
                    known_ids: Iterable[str] = ()) -> list[Check]:
    """Schema validation, every rule of checks.rules.RULES and, with `locate`, safetensors headers.

    schema_check=False when the host already validated the graph (the preflight node's own graph).
    """
    problems = validate_graph(graph, schemas, pack_of, set(known_ids)) if schema_check else []
    if looks_like_ui_format(graph) or not isinstance(graph, dict):
        return [problem_check(p) for p in problems]
    # With a server, missing nodes (F35) and model files are checked on their own with clearer messages.
    skip = set(skip_inputs)
    problems = [p for p in problems if (p.node_id, p.input) not in skip
                and not (on_server and "unknown node type" in p.message)]
    rules = list(RULES) + ([safetensors_lint(locate)] if locate is not None else [])
    shaped = well_formed(graph)  # malformed nodes were reported by validate_graph; rules see the rest
    problems = supersede(problems, [p for rule in rules for p in rule(shaped, schemas)])
    checks = [problem_check(p) for p in problems]
    if not checks:
        checks.append(Check(PASS, "workflow", f"{len(graph)} nodes: schema checks and lints found nothing"))
    if locate is None:
        checks.append(Check(PASS, "model headers", "not checked: no models folder (doctor --models-dir DIR, or "
                            "inside ComfyUI) for the F13 header checks"))
    return checks


def load_graph(path: Path) -> tuple[Any, Check | None]:
    graph, problem = load_graph_file(path)
    if problem is not None:
        return None, Check(FAIL, "workflow", problem.message, problem.fix)
    return graph, None


def missing_file_checks(graph: dict, schemas: dict, locate: Locate) -> list[Check]:
    """Model files the graph names that are not in this host's model folders."""
    return [Check(FAIL, "model files", f"node {nid} ({ct}) {name} = '{filename}' is not in models/{folder}",
                  f"put {filename} in models/{folder} (expected on this ComfyUI), then press R or restart",
                  node_id=nid, input=name)
            for nid, ct, name, folder, filename in model_inputs(graph, schemas) if locate(folder, filename) is None]


def preflight_checks(graph: dict, schemas: dict, locate: Locate | None, available_nodes: Iterable[str] | None,
                     disabled: Disabled | None = None, schema_check: bool = True,
                     pack_of: PackLookup = providing_pack, ignore: str | None = None) -> list[Check]:
    """Everything H3KitPreflight (and the editor's preflight route) checks for one graph on this host:
    nodes the host lacks (F35, when its node list is known), schema checks and every rule, safetensors
    headers (with `locate`) and model files missing from the host's folders. `ignore`: a class_type left
    out (the preflight node itself)."""
    graph = {nid: n for nid, n in graph.items() if not (isinstance(n, dict) and n.get("class_type") == ignore)}
    available = None if available_nodes is None else set(available_nodes)
    shaped = well_formed(graph)  # malformed nodes are reported by workflow_checks' schema check
    checks = (missing_node_checks(shaped, available, disabled, pack_of)
              if schema_check and available is not None else [])
    files_checked = schema_check and locate is not None
    # A model file the host lacks is one problem: missing_file_checks names it with the folder; the schema's
    # "not in the list" for the same input would say it twice.
    skip = model_input_keys(shaped, schemas) if files_checked else frozenset()
    checks += workflow_checks(graph, schemas, locate, skip_inputs=skip, on_server=available is not None,
                              schema_check=schema_check, pack_of=pack_of)
    if files_checked:
        checks += missing_file_checks(shaped, schemas, locate)
    return checks
