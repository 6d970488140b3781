"""List every H3Kit node with its category and one-line description."""

from __future__ import annotations

import argparse
import json

from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from ..checks.problem import printable
from . import console

EXIT_STATUSES = {EXIT_OK: "every node module imported", EXIT_FAILED: "a node module failed to import (named on stderr)",
                 EXIT_INVALID: "bad arguments"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from ..nodes import DISABLED_NODES, IMPORT_FAILURES, NODE_CLASS_MAPPINGS

    rows = [
        {"id": node_id, "category": cls.CATEGORY, "description": cls.DESCRIPTION.strip().splitlines()[0]}
        for node_id, cls in sorted(NODE_CLASS_MAPPINGS.items())
    ]
    if args.json:
        console.result(json.dumps({"nodes": rows, "disabled": DISABLED_NODES, "import_failures": IMPORT_FAILURES},
                                  indent=2))
    else:
        width = max((len(r["id"]) for r in rows), default=10)
        cat_width = max((len(r["category"]) for r in rows), default=10)
        for r in rows:
            console.result(f"{r['id']:<{width}}  {r['category']:<{cat_width}}  {r['description']}")
        for pkg, ids in DISABLED_NODES.items():
            console.result(f"(optional, off here: needs '{pkg}': {', '.join(ids)})")
    for module, error in IMPORT_FAILURES.items():
        console.problem(f"ERROR: module nodes/{module}.py failed to import: {printable(error)}")
    return EXIT_FAILED if IMPORT_FAILURES else EXIT_OK
