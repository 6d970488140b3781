"""Standalone entry: `python scripts/bf16_to_fp16.py IN OUT [--clamp] [--overwrite]`.

The same converter as `python -m h3kit convert bf16-to-fp16`, usable from a plain clone of the pack
(e.g. ComfyUI/custom_nodes/<pack>/scripts/) without installing it.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from pathlib import Path
from types import ModuleType

_PACKAGE = "h3kit_standalone"


def _converter() -> ModuleType:
    """scripts/convert.py of this clone, imported under a stand-in package name for the clone's root: works
    with or without the pack installed, whatever the clone's folder is called, without running the pack's
    node registration."""
    if _PACKAGE not in sys.modules:
        package = ModuleType(_PACKAGE)
        package.__path__ = [str(Path(__file__).resolve().parent.parent)]
        sys.modules[_PACKAGE] = package
    return import_module(f"{_PACKAGE}.scripts.convert")


def main(argv: list[str] | None = None) -> int:
    converter = _converter()
    parser = argparse.ArgumentParser(prog="bf16_to_fp16.py", description=converter.__doc__)
    converter.add_bf16_to_fp16_arguments(parser)
    return converter.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
