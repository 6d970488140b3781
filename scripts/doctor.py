"""Check this machine, a ComfyUI server and a workflow for the traps that make runs slow or silently wrong.

Every check prints PASS, WARN or FAIL with the fix (PASS on stdout; WARN and FAIL on stderr).

  local            Python, torch and its CUDA build (F12), comfy-kitchen and its registry, GPU capability
                   and bf16, SageAttention vs the GPU (F28), Triton cache
  --server URL     ComfyUI version (F01), every node of --workflow registered (F35), model files present
  --workflow FILE  lints: refine sigma (F23), effect markers (F15), sampler/LoRA family (F27), sizes (F19),
                   frame counts (F20), Spectrum warmup (F16); every model file the workflow names (present, with
                   its size and source when missing, and the total missing) and its safetensors header (F13, F14).

The model folders: the server's own (--server), else --models-dir, else those of the ComfyUI this clone sits in
(<base>/custom_nodes/H3Kit: a checkout or a --base-directory, even before its models/ exists), $COMFYUI_DIR, the
current folder, or ComfyUI Desktop's base path; with the extra_model_paths.yaml files ComfyUI reads there (the
checkout's, Desktop's extra_models_config.yaml) and any --extra-model-paths-config.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from ..adapters.comfy_client import SERVER_CHECK_TIMEOUT_S, BadServerURL, ComfyClient, Deadline, TimedOut
from ..adapters.files import is_folder
from ..adapters.model_folders import layout_files
from ..adapters.model_layout import ModelLayout, find_layout, models_dir_layout, served_layout
from ..adapters.server_probe import answer_or_none, server_checks
from ..adapters.workflow_file import load_graph
from ..checks.environment import local_checks
from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_TIMEOUT, EXIT_UNREACHABLE, worst_exit
from ..checks.graph import well_formed
from ..checks.model_files import missing_total
from ..checks.problem import FAIL, INFO, PASS, WARN, Check, printable
from ..checks.rules_files import model_input_keys
from ..checks.validator import looks_like_ui_format
from ..checks.verdict import verdict_of
from ..checks.workflow import missing_file_checks, workflow_checks
from . import console
from . import schemas as schema_src
from .options import SECONDS

EXIT_STATUSES = {
    EXIT_OK: "no FAIL (WARN lines may be printed)",
    EXIT_FAILED: "a FAIL of this machine or the server (packages, GPU, versions, a missing node or model file)",
    EXIT_INVALID: "the workflow has errors (a model file it names that is broken or not what its name says "
                  "included, F13/F14) or is not a readable JSON workflow, a --models-dir that is not a folder, or "
                  "bad arguments",
    EXIT_TIMEOUT: "--server did not answer in time",
    EXIT_UNREACHABLE: "--server is unreachable",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", help="a running ComfyUI, e.g. http://127.0.0.1:8188")
    parser.add_argument("--workflow", type=Path, help="an API-format workflow JSON to lint (offline or with --server)")
    parser.add_argument("--models-dir", type=Path,
                        help="ComfyUI's models/ folder: every model file the workflow names must be there "
                             "(default: the server's folders with --server, else those of the ComfyUI this clone "
                             "sits in, $COMFYUI_DIR, the current folder or ComfyUI Desktop's base path)")
    parser.add_argument("--extra-model-paths-config", type=Path, action="append", default=[], metavar="FILE",
                        help="an extra_model_paths.yaml your ComfyUI is started with (repeatable): its folders "
                             "are searched too, as ComfyUI searches them")
    parser.add_argument("--json", action="store_true", help="print the checks as one JSON document on stdout")
    parser.add_argument("--no-local", action="store_true", help="skip the checks of this machine's packages and GPU")
    parser.add_argument("--timeout", type=SECONDS, default=SERVER_CHECK_TIMEOUT_S,
                        help="seconds for the whole exchange with the server (default %(default)s)")


def optional_node_checks() -> list[Check]:
    """The optional nodes that are off here, with the versions that make them work (the same line ComfyUI's
    startup log shows once)."""
    from ..nodes import OPTIONAL_NOTES

    return [Check(PASS, "optional node", note.removeprefix("H3Kit: optional node ")) for note in OPTIONAL_NOTES]


def model_checks(graph: dict, schemas: dict, layout: ModelLayout | None) -> tuple[list[Check], int]:
    """Offline: every model file the workflow names must be in the model folders (FAIL, exit 1; WARN where the
    graph runs without it). Without folders nothing can be checked: a WARN that says how to give them."""
    if not model_input_keys(graph, schemas):
        return [Check(PASS, "model files", "the workflow names no model file")], EXIT_OK
    if layout is None:
        return [Check(WARN, "model files", "not checked: no models folder given and no ComfyUI found (this clone "
                      "is not in a ComfyUI's custom_nodes; not in $COMFYUI_DIR, the current folder or ComfyUI "
                      "Desktop's config)", "pass --models-dir ComfyUI/models or --server URL of your ComfyUI")], EXIT_OK
    found = missing_file_checks(graph, schemas, layout_files(layout))
    if not found:
        found = [Check(PASS, "model files", f"every model file the workflow names is in {layout.source}")]
    return found, EXIT_FAILED if any(c.status == FAIL for c in found) else EXIT_OK


def model_layout(args: argparse.Namespace) -> tuple[ModelLayout | None, list[Check]]:
    """The model folders without a server: --models-dir, else found on this machine (adapters/model_layout.py)."""
    if args.models_dir is not None:
        return models_dir_layout(args.models_dir, args.extra_model_paths_config)
    return find_layout(configs=args.extra_model_paths_config)


def missing_files(checks: list[Check], graph: object) -> list[str]:
    """The model files the FAIL lines name (node and input point at the file name in the graph)."""
    names = set()
    for check in checks:
        if check.name != "model files" or check.status != FAIL or not isinstance(graph, dict):
            continue
        node = graph.get(check.node_id)
        inputs = node.get("inputs") if isinstance(node, dict) else None
        value = inputs.get(check.input) if isinstance(inputs, dict) else None
        if isinstance(value, str):
            names.add(value)
    return sorted(names)


def collect(args: argparse.Namespace) -> tuple[list[Check], int, list[str]]:
    """(checks, exit code, the model files found missing)."""
    checks: list[Check] = [] if args.no_local else local_checks() + optional_node_checks()
    codes = [EXIT_FAILED if any(c.status == FAIL for c in checks) else EXIT_OK]
    if args.models_dir is not None and not is_folder(args.models_dir):
        checks.append(Check(FAIL, "models dir", f"--models-dir {args.models_dir} is not a folder, so no model file "
                            "could be checked", "pass ComfyUI's models folder, e.g. --models-dir ComfyUI/models"))
        return checks, worst_exit([*codes, EXIT_INVALID]), []
    graph = None
    if args.workflow:
        graph, error = load_graph(args.workflow)
        if error:
            return checks + [error], worst_exit([*codes, EXIT_INVALID]), []
    object_info, served = None, None
    deadline = Deadline(args.timeout if args.server else None)  # --timeout: the server's answers and their checks
    if args.server:
        try:
            with ComfyClient(args.server, deadline=deadline) as client:
                server_part, object_info, code = server_checks(client, graph, schema_src.disabled_nodes(),
                                                               schema_src.providing_pack)
                if object_info is not None and graph is not None:  # its folders, for the headers of its files
                    served = served_layout(answer_or_none(client), client.server)
        except BadServerURL as exc:
            return checks + [Check(FAIL, "server", str(exc), "give the server's address as http://HOST:PORT")], \
                worst_exit([*codes, exc.exit_code]), []
        checks += server_part
        codes += [code, EXIT_FAILED if any(c.status == FAIL for c in server_part) else EXIT_OK]
    if graph is not None:
        layout, notes = (served, []) if args.models_dir is None and served is not None else model_layout(args)
        checks += notes
        try:
            with deadline.applied():
                found, files, code = graph_checks(graph, object_info, layout)
        except TimedOut as exc:
            checks.append(Check(FAIL, "workflow", f"the workflow was not checked to the end: {exc}",
                                "raise --timeout, or check what the server's /object_info holds"))
            return checks, worst_exit([*codes, exc.exit_code]), missing_files(checks, graph)
        checks += found + files
        codes += [EXIT_INVALID if any(c.status == FAIL for c in found) else EXIT_OK, code]
    return checks, worst_exit(codes), missing_files(checks, graph)


def graph_checks(graph: dict, object_info: dict | None, layout: ModelLayout | None) -> tuple[list[Check], list[Check], int]:
    """(the workflow's checks, its model-file checks, their exit code) against the server's schemas or offline."""
    schemas = object_info if object_info is not None else schema_src.offline_schemas()
    local_files = layout_files(layout) if layout is not None else None
    skip = model_input_keys(graph, schemas) if object_info is not None and isinstance(graph, dict) else set()
    found = workflow_checks(graph, schemas, local_files, skip, on_server=object_info is not None,
                            pack_of=schema_src.providing_pack, known_ids=schema_src.own_node_ids())
    if object_info is None and isinstance(graph, dict) and not looks_like_ui_format(graph):
        files, code = model_checks(well_formed(graph), schemas, layout)
        return found, files, code
    return found, [], EXIT_OK


def run(args: argparse.Namespace) -> int:
    checks, code, missing = collect(args)
    counts = {status: sum(c.status == status for c in checks) for status in (FAIL, WARN, PASS, INFO)}
    verdict = verdict_of(checks)  # the word validate, run and the editor's preflight give (checks/verdict.py)
    if args.json:
        rows = [{k: printable(v) if isinstance(v, str) else v for k, v in asdict(c).items()} for c in checks]
        console.result(json.dumps({"checks": rows, "verdict": verdict, "fail": counts[FAIL], "warn": counts[WARN],
                                   "info": counts[INFO], "exit": code, "missing_model_files": missing,
                                   "missing_total": missing_total(missing) if missing else None}, indent=2))
    else:
        for check in checks:
            console.check(check)
        adapted = f", {counts[INFO]} INFO (inputs adapted to the server's layout)" if counts[INFO] else ""
        total = f"; model files: {missing_total(missing)}" if missing else ""
        console.result(f"\n{counts[FAIL]} FAIL, {counts[WARN]} WARN, {counts[PASS]} PASS{adapted}; verdict {verdict}"
                       f"{total}")
    return code
