"""Lazy access to the ComfyUI host: modules, folders and version, imported only when a node runs."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType


class HostUnavailable(RuntimeError):
    """Raised when code that needs a running ComfyUI is used outside one."""


def host_module(name: str) -> ModuleType:
    """Import a ComfyUI module (e.g. 'comfy.samplers', 'folder_paths') or explain that ComfyUI is absent."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise HostUnavailable(
            f"H3Kit needs ComfyUI's '{name}' module here, which could not be imported ({exc}). "
            "Run this inside ComfyUI (the pack cloned into ComfyUI/custom_nodes), or use the H3Kit CLI equivalent."
        ) from exc


def host_loaded(name: str = "folder_paths") -> bool:
    """True when running inside a ComfyUI process (the module is already imported; never imports it)."""
    return name in sys.modules


def comfyui_version() -> str | None:
    """The running ComfyUI's version string, or None outside ComfyUI."""
    if not host_loaded("comfyui_version"):
        return None
    return getattr(sys.modules["comfyui_version"], "__version__", None)


def parse_version(text: str) -> tuple[int, ...]:
    """'0.34.0' -> (0, 34, 0); non-numeric tails are ignored ('0.3.64rc1' -> (0, 3, 64))."""
    parts: list[int] = []
    for piece in text.strip().lstrip("v").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def model_folder(kind: str, env_var: str | None = None, extension: str = ".safetensors") -> Path:
    """The first folder for model kind `kind`: ComfyUI's folder_paths inside ComfyUI, else `env_var`.

    Inside ComfyUI the kind is registered under models/<kind> when the host does not know it yet, so
    user files land where ComfyUI users expect them.
    """
    if host_loaded("folder_paths"):
        folder_paths = host_module("folder_paths")
        if kind not in folder_paths.folder_names_and_paths:
            default = os.path.join(folder_paths.models_dir, kind)
            folder_paths.add_model_folder_path(kind, default)
            folder_paths.folder_names_and_paths[kind] = (folder_paths.folder_names_and_paths[kind][0], {extension})
        return Path(folder_paths.get_folder_paths(kind)[0])
    if env_var and os.environ.get(env_var):
        return Path(os.environ[env_var])
    hint = f"set {env_var} to a folder" if env_var else "run inside ComfyUI"
    raise HostUnavailable(f"No '{kind}' folder outside ComfyUI: {hint}.")
