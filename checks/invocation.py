"""How the user starts H3Kit's command line, so every message names a command they actually have.

Three ways, one function (`cli_command`):
  h3kit ...                         the console script of a pip install (`pip install -e .`, the Registry)
  python -m h3kit ...               an installed package
  python custom_nodes/H3Kit ...     a plain clone, run with ComfyUI's own Python (the folder as typed)

Inside ComfyUI (a node's or the server's message) nobody typed a command: the pack's folder decides, e.g.
`python custom_nodes/ComfyUI-H3Kit-main` when it sits in custom_nodes/. Pure Python, reads only sys.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACK_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "h3kit"
CONSOLE_SCRIPT = "h3kit"


def _console_script(argv0: str) -> bool:
    name = re.split(r"[\\/]", argv0)[-1].lower()  # either separator: a Windows path read anywhere
    for suffix in (".exe", "-script.py", ".py"):
        name = name.removesuffix(suffix)
    return name == CONSOLE_SCRIPT


def _ran_as_clone(main_module, root: Path) -> bool:
    """`python <folder>`: Python ran this clone's __main__.py as a script (no package context)."""
    origin = getattr(getattr(main_module, "__spec__", None), "origin", None) or getattr(main_module, "__file__", None)
    if not origin or getattr(main_module, "__package__", None):
        return False
    try:
        return Path(origin).resolve() == root / "__main__.py"
    except OSError:
        return False


def _typed_path(argv0: str) -> str:
    """The clone's folder as the user typed it, without a trailing separator or __main__.py, quoted if needed."""
    text = argv0.rstrip("/\\") or "."
    if Path(text).name == "__main__.py":
        text = str(Path(text).parent)
    return f'"{text}"' if any(c.isspace() for c in text) else text  # double quotes: bash, cmd and PowerShell


def cli_command(argv: list[str] | None = None, main_module=None, pack_root: Path | None = None) -> str:
    """The command prefix the user runs, e.g. 'python -m h3kit' (arguments default to this process)."""
    argv = sys.argv if argv is None else argv
    main_module = sys.modules.get("__main__") if main_module is None else main_module
    root = PACK_ROOT if pack_root is None else pack_root
    argv0 = argv[0] if argv else ""
    spec_name = getattr(getattr(main_module, "__spec__", None), "name", "") or ""
    if spec_name == f"{PACKAGE}.__main__":
        return f"python -m {PACKAGE}"
    if argv0 and main_module is not None and _ran_as_clone(main_module, root):  # before the name: a clone may be
        return f"python {_typed_path(argv0)}"                                   # in a folder called h3kit
    if argv0 and _console_script(argv0):
        return CONSOLE_SCRIPT
    if root.parent.name == "custom_nodes":  # inside ComfyUI, or imported from a clone there
        return f"python custom_nodes/{_typed_path(root.name)}"
    return f"python -m {PACKAGE}"


def command(text: str) -> str:
    """'doctor --workflow F' -> 'python custom_nodes/H3Kit doctor --workflow F' (as this user runs it)."""
    return f"{cli_command()} {text}"


def clone_command(text: str) -> str:
    """The plain-clone form for advice that needs ComfyUI's own Python: `python custom_nodes/<folder> <text>`."""
    folder = PACK_ROOT.name if PACK_ROOT.parent.name == "custom_nodes" else "H3Kit"
    return f"python custom_nodes/{_typed_path(folder)} {text}"
