"""Validate API-format ComfyUI workflows offline, or against a live server's /object_info.

Each file gets the verdict doctor, run and the editor's preflight give it (checks/verdict.py): OK, ADAPTED (inputs
moved to the host's input layout, each named on an INFO line; exit 0) or FAIL. Checks what ComfyUI's /prompt
validation checks (node types, required inputs, links and their types, widget ranges and options, an output node,
no cycles), then the pipeline rules (checks/rules.py). Each problem names the node id, class_type, input, value and
the fix. A file that is not a JSON workflow (an image, a model file) is named as what it is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..adapters.comfy_client import SERVER_CHECK_TIMEOUT_S, ComfyClient, ComfyError, Deadline
from ..adapters.files import is_folder
from ..adapters.server_probe import read_schemas, server_version_check
from ..adapters.workflow_file import load_graph_file
from ..checks.facts import EXIT_INVALID, EXIT_OK, EXIT_TIMEOUT, EXIT_UNREACHABLE, worst_exit
from ..checks.problem import ERROR, Check, printable
from ..checks.validator import looks_like_ui_format
from ..checks.verdict import REFUSED, judge
from . import console
from . import schemas as schema_src
from .options import SECONDS

EXIT_STATUSES = {
    EXIT_OK: "every workflow is valid (warnings may be printed)",
    EXIT_INVALID: "a workflow has errors, is not a readable JSON workflow, or a folder holds none; bad arguments",
    EXIT_TIMEOUT: "--server did not answer in time",
    EXIT_UNREACHABLE: "--server is unreachable",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path,
                        help="API-format workflow JSON files, or folders (every *.json directly in them)")
    parser.add_argument("--server", help="validate against this live ComfyUI's /object_info (e.g. http://127.0.0.1:8188)")
    parser.add_argument("--timeout", type=SECONDS, default=SERVER_CHECK_TIMEOUT_S,
                        help="seconds for the whole exchange with the server (default %(default)s)")


def workflow_paths(arguments: list[Path]) -> tuple[list[Path], bool]:
    """The files to validate: each file as given, each folder's *.json files (sorted, not recursive).
    (paths, True when a folder held none: said on its own line, and the run fails)."""
    paths, empty = [], False
    for argument in arguments:
        if not is_folder(argument):
            paths.append(argument)
            continue
        found = sorted(p for p in argument.glob("*.json") if p.is_file())
        if not found:
            console.problem(f"FAIL {printable(argument)}: a folder with no .json file in it; pass workflow files or a folder "
                            "that holds them (e.g. workflows/api)")
            empty = True
        paths += found
    return paths, empty


def run(args: argparse.Namespace) -> int:
    paths, failed = workflow_paths(args.files)
    if not args.server:
        return worst_exit([EXIT_INVALID if failed else EXIT_OK,
                           *(report(path, schema_src.offline_schemas(), None) for path in paths)])
    said: set[str] = set()  # the F01 line is the same for most files: printed once, under the first

    def host_check(graph: dict | None) -> Check | None:
        check = server_version_check(client, graph, schemas)
        if check.line() in said:
            return None
        said.add(check.line())
        return check

    try:
        with ComfyClient(args.server, deadline=Deadline(args.timeout)) as client, client.deadline.applied():
            schemas = read_schemas(client)  # and every check of every file below: all within --timeout
            return worst_exit([EXIT_INVALID if failed else EXIT_OK,
                               *(report(path, schemas, host_check) for path in paths)])
    except ComfyError as exc:
        console.problem(f"ERROR: {printable(exc)}")
        return exc.exit_code


def report(path: Path, schemas: dict, host_check: Callable[[dict | None], Check | None] | None) -> int:
    """Print one file's verdict (checks.verdict.judge: OK, ADAPTED or FAIL, as doctor, run and the editor give it),
    an INFO line per input moved to this host's layout, each problem, and, against a server, the F01 line of
    checks.server's one rule (None: the same line was printed for an earlier file)."""
    graph, unreadable = load_graph_file(path)
    verdict = None if unreadable else judge(graph, schemas, schema_src.providing_pack, schema_src.own_node_ids())
    problems = [unreadable] if verdict is None else verdict.problems
    errors = [p for p in problems if p.severity == ERROR]
    word = REFUSED if verdict is None else verdict.status
    moved = f", {len(verdict.changes)} input(s) adapted to this host's layout" if verdict and verdict.changes else ""
    summary = f"{word} {printable(path)}: {len(errors)} error(s), {len(problems) - len(errors)} warning(s){moved}"
    if errors:
        console.problem(summary)
    else:
        console.result(summary)
    for line in verdict.change_checks() if verdict is not None else []:
        console.check(line, "  ")
    for p in problems:
        console.problem(f"  {p}")
    if host_check is not None and verdict is not None and isinstance(graph, dict) and not looks_like_ui_format(graph):
        line = host_check(verdict.graph)
        if line is not None:
            console.check(line, "  ")
    return EXIT_INVALID if errors else EXIT_OK
