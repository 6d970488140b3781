"""Workflow checks as doctor/preflight lines: schema validation, every graph rule and, with a models
folder, the safetensors header rules (F13/F14)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .environment import find_comfyui
from .graph import executed_nodes, well_formed
from .model_files import folder_name, how_to_get
from .problem import FAIL, PASS, WARN, Check, problem_check
from .rules import RULES
from .rules_files import ModelFiles, model_input_keys, model_inputs, safetensors_lint
from .schemas import providing_pack
from .server import Disabled, missing_node_checks
from .validator import PackLookup, looks_like_ui_format, run_scope, scope_to_run, supersede, validate_graph


def default_models_dir(env: dict[str, str] | None = None, cwd: Path | None = None) -> Path | None:
    """models/ of the ComfyUI found the way doctor finds the install (checks/environment.find_comfyui)."""
    folder = find_comfyui(env, cwd)
    return folder / "models" if folder is not None else None


def workflow_checks(graph: Any, schemas: dict, files: ModelFiles | None,
                    skip_inputs: Iterable[tuple[str, str]] = frozenset(), on_server: bool = False,
                    schema_check: bool = True, pack_of: PackLookup = providing_pack,
                    known_ids: Iterable[str] = ()) -> list[Check]:
    """Schema validation, every rule of checks.rules.RULES and, with `files`, safetensors headers.

    schema_check=False when the host already validated the graph (the preflight node's own graph).
    """
    problems = validate_graph(graph, schemas, pack_of, set(known_ids)) if schema_check else []
    if looks_like_ui_format(graph) or not isinstance(graph, dict):
        return [problem_check(p) for p in problems]
    # With a server, missing nodes (F35) and model files are checked on their own with clearer messages.
    skip = set(skip_inputs)
    problems = [p for p in problems if (p.node_id, p.input) not in skip
                and not (on_server and "unknown node type" in p.message)]
    rules = list(RULES) + ([safetensors_lint(files)] if files is not None else [])
    shaped = well_formed(graph)  # malformed nodes were reported by validate_graph; rules see the rest
    rule_problems = scope_to_run(run_scope(shaped, schemas), [p for rule in rules for p in rule(shaped, schemas)])
    problems = supersede(problems, rule_problems)
    checks = [problem_check(p) for p in problems]
    if not checks:
        checks.append(Check(PASS, "workflow", f"{len(graph)} nodes: schema checks and lints found nothing"))
    return checks


def missing_file_checks(graph: dict, schemas: dict, files: ModelFiles, where: str = "models") -> list[Check]:
    """Model files the graph names that are not in this host's model folders: FAIL, or WARN where the graph runs
    without the file (its loader leads to no output, so ComfyUI never runs it). `where`: the models folder as
    the user knows it. The fix names the file's size and source (checks/model_files.py)."""
    runs = executed_nodes(graph, schemas)
    checks = []
    for nid, ct, name, folder, filename in model_inputs(graph, schemas):
        if files.locate(folder, filename) is not None:
            continue
        detail = f"node {nid} ({ct}) {name} = '{filename}' is not in {where}/{folder_name(folder)}"
        if nid in runs:
            checks.append(Check(FAIL, "model files", detail, how_to_get(filename, folder), node_id=nid, input=name))
        else:
            checks.append(Check(WARN, "model files", f"{detail}; the graph runs without it (node {nid} leads to no "
                                "output, so ComfyUI never runs it)",
                                f"remove node {nid}, or connect it and {how_to_get(filename, folder)}",
                                node_id=nid, input=name))
    return checks


def preflight_checks(graph: dict, schemas: dict, files: ModelFiles | None, available_nodes: Iterable[str] | None,
                     disabled: Disabled | None = None, schema_check: bool = True,
                     pack_of: PackLookup = providing_pack, ignore: str | None = None) -> list[Check]:
    """Everything H3KitPreflight (and the editor's preflight route) checks for one graph on this host:
    nodes the host lacks (F35, when its node list is known), schema checks and every rule, safetensors
    headers (with `files`) and model files missing from the host's folders. `ignore`: a class_type left
    out (the preflight node itself)."""
    graph = {nid: n for nid, n in graph.items()  # (a node without class_type is not the ignored one: reported)
             if not (ignore is not None and isinstance(n, dict) and n.get("class_type") == ignore)}
    available = None if available_nodes is None else set(available_nodes)
    shaped = well_formed(graph)  # malformed nodes are reported by workflow_checks' schema check
    checks = (missing_node_checks(shaped, available, disabled, pack_of)
              if schema_check and available is not None else [])
    files_checked = schema_check and files is not None
    # A model file the host lacks is one problem: missing_file_checks names it with the folder; the schema's
    # "not in the list" for the same input would say it twice.
    skip = model_input_keys(shaped, schemas) if files_checked else frozenset()
    checks += workflow_checks(graph, schemas, files, skip_inputs=skip, on_server=available is not None,
                              schema_check=schema_check, pack_of=pack_of)
    if files_checked:
        checks += missing_file_checks(shaped, schemas, files)
    return checks
