"""The model files a graph names, on this machine: where each is and what it holds, for the file rules
(checks/rules_files.py ModelFiles). Two places to look: a ComfyUI's model folders found from outside it (`doctor`:
adapters/model_layout.py) and the running ComfyUI's folder_paths (H3KitPreflight, the editor's preflight). Names
never escape their folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..checks.model_files import FOLDER_ALIASES
from ..checks.rules_files import ModelFiles
from .files import regular_file_problem, sniff_file
from .host import host_loaded, host_module
from .model_layout import ModelLayout
from .safetensors_file import read_header


def safetensors_json(path: Path) -> dict[str, Any]:
    """The header of a safetensors file as JSON (adapters/safetensors_file.py: the library's own rules)."""
    return read_header(path).json


def folder_files(models_dir: Path) -> ModelFiles:
    """The model files under a ComfyUI models/ folder."""
    return layout_files(ModelLayout(str(models_dir), Path(models_dir)), describe=False)


def layout_files(layout: ModelLayout, describe: bool = True) -> ModelFiles:
    """The model files in a ComfyUI's model folders (adapters/model_layout.py). `describe`: messages name the
    folders searched and where a new file goes (else models/<folder>)."""

    def locate(folder: str, name: str) -> Path | None:
        if not name.isprintable():  # NUL or control characters: no file has that name (the validator says so)
            return None
        for base in layout.folders(folder):
            try:
                base = base.resolve()
                candidate = (base / name).resolve()
                if base in candidate.parents and regular_file_problem(candidate) is None:
                    return candidate
            except (OSError, RuntimeError, ValueError):  # a link loop (RuntimeError before Python 3.13, OSError
                continue  # after), a name too long for the file system: no file either
        return None

    return ModelFiles(locate, safetensors_json, sniff_file, layout.folders if describe else None)


def host_files() -> ModelFiles | None:
    """The model files of the running ComfyUI, over its folder_paths; None outside ComfyUI."""
    if not host_loaded("folder_paths"):
        return None
    folder_paths = host_module("folder_paths")

    def locate(folder: str, name: str) -> Path | None:
        for key in (folder, *FOLDER_ALIASES.get(folder, ())):
            if key not in folder_paths.folder_names_and_paths:
                continue
            path = folder_paths.get_full_path(key, name)  # resolves inside the folder only
            if path:
                return Path(path)
        return None

    return ModelFiles(locate, safetensors_json, sniff_file)
