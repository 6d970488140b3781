"""Validate API-format ComfyUI workflows offline, or against a live server's /object_info.

Checks what ComfyUI's /prompt validation checks (node types, required inputs, links and their types,
widget ranges and options, an output node, no cycles), then the pipeline rules (checks/rules.py). Each
problem names the node id, class_type, input, value and the fix.

exit status: 0 valid; 2 a workflow has errors (or cannot be read); with --server also 3 timeout and
4 server unreachable.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..adapters.comfy_client import ComfyClient, ComfyError, Deadline
from ..checks.facts import EXIT_INVALID, EXIT_OK
from ..checks.problem import ERROR, printable
from ..checks.server import read_schemas
from ..checks.validator import validate_file
from . import schemas as schema_src


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="+", type=Path, help="API-format workflow JSON files")
    parser.add_argument("--server", help="validate against this live ComfyUI's /object_info (e.g. http://127.0.0.1:8188)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole exchange with the server (default %(default)s)")
    parser.epilog = "exit status: 0 valid; 2 errors found; 3 server timeout; 4 server unreachable"


def run(args: argparse.Namespace) -> int:
    if args.server:
        try:
            with ComfyClient(args.server, deadline=Deadline(args.timeout)) as client:
                schemas = read_schemas(client)
        except ComfyError as exc:
            print(f"ERROR: {printable(exc)}")
            return exc.exit_code
    else:
        schemas = schema_src.offline_schemas()
    failed = False
    for path in args.files:
        problems = validate_file(path, schemas, schema_src.providing_pack, schema_src.own_node_ids())
        errors = [p for p in problems if p.severity == ERROR]
        failed = failed or bool(errors)
        print(printable(f"{'FAIL' if errors else 'OK'} {path}: {len(errors)} error(s), "
                        f"{len(problems) - len(errors)} warning(s)"))
        for p in problems:
            print(f"  {p}")
    return EXIT_INVALID if failed else EXIT_OK
