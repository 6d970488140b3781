"""Validate API-format ComfyUI workflows offline, or against a live server's /object_info.

Checks what ComfyUI's /prompt validation checks (node types, required inputs, links and their types,
widget ranges and options, an output node, no cycles), then the pipeline rules (checks/rules.py). Each
problem names the node id, class_type, input, value and the fix. A file that is not a JSON workflow (an
image, a model file, a UI-format export) is named as what it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..adapters.comfy_client import ComfyClient, ComfyError
from ..checks.facts import EXIT_INVALID, EXIT_OK, EXIT_TIMEOUT, EXIT_UNREACHABLE
from ..checks.problem import ERROR
from ..checks.validator import validate_file
from . import console
from . import schemas as schema_src

EXIT_STATUSES = {
    EXIT_OK: "every workflow is valid (warnings may be printed)",
    EXIT_INVALID: "a workflow has errors or is not a readable JSON workflow, or bad arguments",
    EXIT_TIMEOUT: "--server did not answer in time",
    EXIT_UNREACHABLE: "--server is unreachable",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, help="API-format workflow JSON files")
    parser.add_argument("--server", help="validate against this live ComfyUI's /object_info (e.g. http://127.0.0.1:8188)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the server (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    if args.server:
        try:
            with ComfyClient(args.server, read_timeout=args.timeout) as client:
                schemas = client.object_info()
        except ComfyError as exc:
            console.problem(f"ERROR: {exc}")
            return exc.exit_code
    else:
        schemas = schema_src.offline_schemas()
    failed = False
    for path in args.files:
        problems = validate_file(path, schemas, schema_src.providing_pack, schema_src.own_node_ids())
        errors = [p for p in problems if p.severity == ERROR]
        failed = failed or bool(errors)
        summary = f"{path}: {len(errors)} error(s), {len(problems) - len(errors)} warning(s)"
        if errors:
            console.problem(f"FAIL {summary}")
        else:
            console.result(f"OK {summary}")
        for p in problems:
            console.problem(f"  {p}")
    return EXIT_INVALID if failed else EXIT_OK
