"""Lazy access to the ComfyUI host: modules, folders and version, imported only when a node runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from pathlib import Path
from types import ModuleType

from .log import LOG


class HostUnavailable(RuntimeError):
    """Raised when code that needs a running ComfyUI is used outside one."""


def host_module(name: str) -> ModuleType:
    """Import a ComfyUI module (e.g. 'comfy.samplers', 'folder_paths') or explain that ComfyUI is absent."""
    try:
        return import_module(name)
    except ImportError as exc:
        raise HostUnavailable(
            f"H3Kit needs ComfyUI's '{name}' module here, which could not be imported ({exc}). "
            "Run this inside ComfyUI (the pack cloned into ComfyUI/custom_nodes), or use the H3Kit CLI equivalent."
        ) from exc


def host_loaded(name: str = "folder_paths") -> bool:
    """True when running inside a ComfyUI process (the module is already imported; never imports it)."""
    return name in sys.modules


def running_host_node_ids() -> set[str] | None:
    """Inside ComfyUI: the node ids its registry holds (never imports ComfyUI); None outside it. The installable
    fork's registry is a Mapping shim, not a dict (complete while a prompt runs, which is when the H3KitPreflight
    node asks)."""
    module = sys.modules.get("nodes") if host_loaded("nodes") else None
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    return set(mappings) if isinstance(mappings, Mapping) else None


def comfyui_version() -> str | None:
    """The running ComfyUI's version string, or None outside ComfyUI."""
    if not host_loaded("comfyui_version"):
        return None
    return getattr(sys.modules["comfyui_version"], "__version__", None)


def render_devices() -> list[dict] | None:
    """Inside ComfyUI: the device it renders on, as its /system_stats lists it ([{"type": "cuda"|"cpu"|...}]), so
    the preflight judges the CUDA build by the same fact doctor --server reads; None outside ComfyUI."""
    if not host_loaded("comfy.model_management"):
        return None
    device = host_module("comfy.model_management").get_torch_device()
    return [{"type": str(getattr(device, "type", device))}]


def model_folder(kind: str, env_var: str | None = None) -> Path:
    """The first folder for model kind `kind`: ComfyUI's folder_paths inside ComfyUI, else `env_var`.

    Inside ComfyUI an unknown kind is registered as models/<kind> through the public API only
    (`get_folder_paths`, `add_model_folder_path`): hosts store folders differently (a dict of tuples in
    Comfy-Org's, a live FolderNames object in the installable fork), so writing the registry directly can
    empty it (issue 17).
    """
    if host_loaded("folder_paths"):
        folder_paths = host_module("folder_paths")
        paths = _registered_paths(folder_paths, kind)
        if not paths:
            folder_paths.add_model_folder_path(kind, os.path.join(folder_paths.models_dir, kind))
            paths = _registered_paths(folder_paths, kind)
        if not paths:
            raise HostUnavailable(
                f"ComfyUI registered no folder for '{kind}' (add_model_folder_path left it empty). "
                f"Add a '{kind}: models/{kind}' line under your entry in extra_model_paths.yaml.")
        return Path(paths[0])
    if env_var and os.environ.get(env_var):
        return Path(os.environ[env_var])
    hint = f"set {env_var} to a folder" if env_var else "run inside ComfyUI"
    raise HostUnavailable(f"No '{kind}' folder outside ComfyUI: {hint}.")


def _registered_paths(folder_paths: ModuleType, kind: str) -> list[str]:
    try:
        return list(folder_paths.get_folder_paths(kind))
    except KeyError:  # Comfy-Org's folder_paths raises for an unknown kind; the fork returns []
        return []


# ============================================================================== host-filled combos
CHOICE_FAILURES: dict[tuple[str, str], str] = {}
_offline_choices = False


def host_choices(node_id: str, input_name: str, list_choices: Callable[[], list[str]]) -> list[str]:
    """The options of a combo filled from the host (files, samplers). Any failure gives an empty combo, a log
    line (once per input) and an entry in CHOICE_FAILURES for the node's report, never a broken /object_info."""
    if _offline_choices:
        return []
    try:
        return list(list_choices())
    except Exception as exc:  # noqa: BLE001 - one host quirk must not take the node list down
        _record_choice_failure(node_id, input_name, exc)
        return []


def choice_failure(node_id: str, input_name: str) -> str | None:
    """Why `node_id`.`input_name` was offered no options (None when its list was read fine)."""
    return CHOICE_FAILURES.get((node_id, input_name))


def _record_choice_failure(node_id: str, input_name: str, exc: BaseException) -> None:
    message = (f"{node_id}: the options of input '{input_name}' could not be read from this ComfyUI "
               f"({type(exc).__name__}: {exc}); the list is empty. Fix: check the folder in extra_model_paths.yaml "
               "and the server log, then press R in the graph editor to reload the lists.")
    if CHOICE_FAILURES.get((node_id, input_name)) != message:
        LOG.warning("H3Kit: %s", message)
    CHOICE_FAILURES[(node_id, input_name)] = message


def guard_input_types(node_cls: type) -> type:
    """Make `node_cls.INPUT_TYPES` survive a host failure: if it raises, it is read again with every host-filled
    combo empty (the failure is logged and recorded under input '*'). Returns the class, changed in place."""
    original = getattr(node_cls, "INPUT_TYPES", None)
    if original is None:  # not a node class ComfyUI could serve; registration reports it elsewhere
        return node_cls

    def input_types(cls: type) -> dict:
        global _offline_choices
        try:
            return original()
        except Exception as exc:  # noqa: BLE001 - see docstring; the retry below re-raises if it fails too
            _record_choice_failure(node_cls.__name__, "*", exc)
            _offline_choices = True
            try:
                return original()
            finally:
                _offline_choices = False

    node_cls.INPUT_TYPES = classmethod(input_types)
    return node_cls
