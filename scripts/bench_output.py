"""What the standalone benchmarks (scripts/bench_*.py, run as files) need of the pack: a module of this checkout
imported as part of package `h3kit`, and their --json output written through the pack's one atomic writer
(adapters/files.py), so a result file never replaces a file the user already had.

No torch import here: the benchmarks decide when torch and the host load.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from importlib import import_module
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUBPACKAGES = ("nodes", "adapters", "kernels", "checks")


def pack_module(dotted: str) -> types.ModuleType:
    """`h3kit.<dotted>` ("nodes.lowvram", "adapters.files"): the installed pack, or this checkout as package
    `h3kit` without running its __init__ (which registers every node)."""
    try:
        return import_module(f"h3kit.{dotted}")
    except ImportError:
        pass
    for package_name, folder in (("h3kit", ROOT), *((f"h3kit.{p}", ROOT / p) for p in SUBPACKAGES)):
        if package_name not in sys.modules:
            package = types.ModuleType(package_name)
            package.__path__ = [str(folder)]
            sys.modules[package_name] = package
    name = f"h3kit.{dotted}"
    spec = importlib.util.spec_from_file_location(name, ROOT / f"{dotted.replace('.', '/')}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class JsonOutput:
    """A benchmark's --json FILE. Refused at the start when FILE exists (a long run would otherwise fail at its
    end); the first write publishes a new file and never replaces one, later writes replace the file this run wrote
    (a partial result after every configuration)."""

    def __init__(self, path: Path | None):
        self.path, self.written = path, False
        if path is not None and path.exists():
            raise SystemExit(f"--json {path} already exists; choose another name (H3Kit never replaces a file it "
                             "did not write)")

    def write(self, document: Any, **dump: Any) -> None:
        if self.path is None:
            return
        files = pack_module("adapters.files")
        files.write_text(self.path, json.dumps(document, indent=1, **dump), overwrite=self.written)
        self.written = True
