"""List every H3Kit node with its category and one-line description."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from ..nodes import DISABLED_NODES, IMPORT_FAILURES, NODE_CLASS_MAPPINGS

    rows = [
        {"id": node_id, "category": cls.CATEGORY, "description": cls.DESCRIPTION.strip().splitlines()[0]}
        for node_id, cls in sorted(NODE_CLASS_MAPPINGS.items())
    ]
    if args.json:
        print(json.dumps({"nodes": rows, "disabled": DISABLED_NODES, "import_failures": IMPORT_FAILURES}, indent=2))
    else:
        width = max((len(r["id"]) for r in rows), default=10)
        cat_width = max((len(r["category"]) for r in rows), default=10)
        for r in rows:
            print(f"{r['id']:<{width}}  {r['category']:<{cat_width}}  {r['description']}")
        for pkg, ids in DISABLED_NODES.items():
            print(f"(disabled, needs '{pkg}': {', '.join(ids)})")
        for module, error in IMPORT_FAILURES.items():
            print(f"(module nodes/{module}.py failed to import: {error})")
    return 1 if IMPORT_FAILURES else 0
