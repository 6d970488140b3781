"""Workflow checks as doctor/preflight lines: the verdict of checks.verdict.judge (the graph in the host's layout,
schema validation, every graph rule and, with a models folder, the safetensors header rules F13/F14), the nodes
and model files the host lacks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .graph import executed_nodes, is_link, well_formed
from .model_files import folder_name, how_to_get
from .problem import FAIL, INFO, PASS, WARN, Check, problem_check
from .rules_files import ModelFiles, model_input_keys, model_inputs
from .schemas import providing_pack
from .server import Disabled, missing_node_checks
from .validator import PackLookup, declared_inputs, looks_like_ui_format, supersede
from .verdict import Verdict, judge


def workflow_checks(graph: Any, schemas: dict, files: ModelFiles | None,
                    skip_inputs: Iterable[tuple[str, str]] = frozenset(), on_server: bool = False,
                    schema_check: bool = True, pack_of: PackLookup = providing_pack,
                    known_ids: Iterable[str] = ()) -> list[Check]:
    """The verdict of checks.verdict.judge as doctor/preflight lines (`verdict_checks`)."""
    verdict = judge(graph, schemas, pack_of, set(known_ids), files, schema_check)
    return verdict_checks(verdict, skip_inputs, on_server)


def verdict_checks(verdict: Verdict, skip_inputs: Iterable[tuple[str, str]] = frozenset(),
                   on_server: bool = False) -> list[Check]:
    """One INFO line per input moved to the host's layout, then each problem as a FAIL or WARN line (a PASS line
    when there is none). `skip_inputs`: schema problems at these (node, input) that another check reports with a
    clearer message (a model file the host lacks); `on_server`: unknown node types are reported by the host's node
    list check (F35), so the schema's line for them is left out."""
    graph = verdict.graph
    if looks_like_ui_format(graph) or not isinstance(graph, dict):
        return [problem_check(p) for p in verdict.schema_problems]
    skip = set(skip_inputs)
    schema_problems = [p for p in verdict.schema_problems if (p.node_id, p.input) not in skip
                       and not (on_server and "unknown node type" in p.message)]
    checks = [*verdict.change_checks(),
              *(problem_check(p) for p in supersede(schema_problems, verdict.rule_problems))]
    if not any(c.status != INFO for c in checks):
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
        searched = files.folders(folder) if files.folders is not None else ()
        place = " or ".join(map(str, searched)) if searched else f"{where}/{folder_name(folder)}"
        fix = how_to_get(filename, folder, str(searched[0]) if searched else None)
        detail = f"node {nid} ({ct}) {name} = '{filename}' is not in {place}"
        if nid in runs:
            checks.append(Check(FAIL, "model files", detail, fix, node_id=nid, input=name))
        else:
            checks.append(Check(WARN, "model files", f"{detail}; the graph runs without it (node {nid} leads to no "
                                "output, so ComfyUI never runs it)", f"remove node {nid}, or connect it and {fix}",
                                node_id=nid, input=name))
    return checks


def frontend_widget_inputs(graph: dict, schemas: dict) -> set[tuple[str, str]]:
    """(node id, input) of the literal inputs the node's schema does not declare. The editor sends the values of
    its own display widgets with the node's inputs (frontend 1.40 adds `preview` and `previewMode` to PreviewAny)
    and ComfyUI ignores them; a user cannot type an undeclared input in the editor, so in a prompt from the editor
    they are no typo to report (`validate` on a file still reports them)."""
    found = set()
    for node_id, node in graph.items():
        info = schemas.get(node.get("class_type")) if isinstance(node, dict) else None
        inputs = node.get("inputs") if info else None
        if isinstance(inputs, dict):
            declared = declared_inputs(info, inputs)
            found |= {(str(node_id), k) for k, v in inputs.items() if k not in declared and not is_link(v)}
    return found


def preflight_checks(graph: dict, schemas: dict, files: ModelFiles | None, available_nodes: Iterable[str] | None,
                     disabled: Disabled | None = None, schema_check: bool = True,
                     pack_of: PackLookup = providing_pack, ignore: str | None = None,
                     from_editor: bool = False) -> tuple[Verdict, list[Check]]:
    """Everything H3KitPreflight (and the editor's preflight route) checks for one graph on this host: the verdict
    (checks.verdict.judge: the graph in this host's layout, schema checks and every rule, safetensors headers with
    `files`), nodes the host lacks (F35, when its node list is known) and model files missing from the host's
    folders. `ignore`: a class_type left out (the preflight node itself); `from_editor`: the prompt the editor
    queues, whose display-widget values are not reported (`frontend_widget_inputs`). Returns (the verdict, its
    lines)."""
    graph = {nid: n for nid, n in graph.items()  # (a node without class_type is not the ignored one: reported)
             if not (ignore is not None and isinstance(n, dict) and n.get("class_type") == ignore)}
    verdict = judge(graph, schemas, pack_of, (), files, schema_check)
    available = None if available_nodes is None else set(available_nodes)
    shaped = well_formed(verdict.graph)  # malformed nodes are reported by the verdict's schema check
    files_checked = schema_check and files is not None
    # A model file the host lacks is one problem: missing_file_checks names it with the folder; the schema's
    # "not in the list" for the same input would say it twice.
    skip = model_input_keys(shaped, schemas) if files_checked else set()
    if from_editor:
        skip |= frontend_widget_inputs(shaped, schemas)
    checks = (missing_node_checks(shaped, available, disabled, pack_of)
              if schema_check and available is not None else [])
    checks += verdict_checks(verdict, skip_inputs=skip, on_server=available is not None)
    if files_checked:
        checks += missing_file_checks(shaped, schemas, files)
    return verdict, checks
