"""The command line, two ways, same code:

  h3kit COMMAND ...                       the console script, after `pip install -e .`
  python -m h3kit COMMAND ...             the same, installed
  python custom_nodes/H3Kit COMMAND ...   a plain clone, with ComfyUI's own Python; no install needed

Messages name the form the user typed (checks/invocation.py).

In the second form Python runs this file as a top-level script, so the clone is imported here as the package
`h3kit` by path (its folder may have any name, e.g. `ComfyUI-H3Kit-main`).
"""

import importlib
import importlib.util
import sys
from importlib import import_module
from pathlib import Path


def _load_clone_as_package():
    root = Path(__file__).resolve().parent
    # Python put the clone's own folder first on sys.path; its nodes/ or scripts/ must not shadow other modules.
    if sys.path and Path(sys.path[0] or ".").resolve() == root:
        sys.path.pop(0)
    spec = importlib.util.spec_from_file_location("h3kit", root / "__init__.py", submodule_search_locations=[str(root)])
    package = importlib.util.module_from_spec(spec)
    sys.modules["h3kit"] = package  # this clone wins over any other installed h3kit
    spec.loader.exec_module(package)
    return import_module("h3kit.scripts.cli")


cli = import_module(".scripts.cli", __package__) if __package__ else _load_clone_as_package()
raise SystemExit(cli.main())
