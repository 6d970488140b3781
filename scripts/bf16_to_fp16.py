"""Standalone entry: `python scripts/bf16_to_fp16.py IN OUT [--clamp] [--overwrite]`.

The same converter as `python -m h3kit convert bf16-to-fp16`, usable from a plain clone of the pack
(e.g. ComfyUI/custom_nodes/<pack>/scripts/) without installing it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _converter() -> ModuleType:
    """convert.py next to this file, loaded by path: works with or without the package installed."""
    spec = importlib.util.spec_from_file_location("h3kit_convert_standalone", Path(__file__).with_name("convert.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    converter = _converter()
    parser = argparse.ArgumentParser(prog="bf16_to_fp16.py", description=converter.__doc__)
    converter.add_bf16_to_fp16_arguments(parser)
    return converter.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
