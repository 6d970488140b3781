"""Cached conditioning: save a CONDITIONING once, load it later without the text encoder.

The refine stage's prompt is constant; encoding it loads a 14-15 GiB Gemma encoder on every run
(field-notes §A5). These nodes store the encoded prompt as safetensors with JSON metadata in the
`conditioning_cache` model folder (format and checks in cond_cache_format.py). Nothing is ever
unpickled, names cannot leave the folder, and writes are atomic and never replace a file unless asked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..adapters.host import (
    HostUnavailable,
    choice_failure,
    host_choices,
    host_loaded,
    host_module,
    model_folder,
)
from ..adapters.log import LOG, log_once
from ..checks.facts import pack_version
from ..checks.invocation import command
from .common import H3KitInputError, Report, category
from .cond_cache_format import (
    CacheError,
    cache_file_name,
    check_cache_header,
    describe_result,
    file_signature,
    find_cache_file,
    list_cache_names,
    provenance,
    read_cache,
    save_conditioning,
    summarize_value,
)

FOLDER_KEY = "conditioning_cache"
ENV_VAR = "H3KIT_COND_CACHE_DIR"
DEFAULT_NAME = "ltx_generic_refine"
LOAD_ID = "H3KitLoadConditioning"
SAVE_ID = "H3KitSaveConditioning"


def cache_folders() -> list[Path]:
    """Every conditioning_cache folder: ComfyUI's (registered under models/ on first use), else $H3KIT_COND_CACHE_DIR."""
    first = model_folder(FOLDER_KEY, ENV_VAR)
    if host_loaded("folder_paths"):  # extra_model_paths.yaml may add more folders for the same key
        return [Path(p) for p in host_module("folder_paths").get_folder_paths(FOLDER_KEY)]
    return [first]


def available_names() -> list[str]:
    """The cache files a Load node can offer; [] when no folder is known (offline validation, CLI)."""
    try:
        return list_cache_names(cache_folders())
    except HostUnavailable:
        return []
    except CacheError as exc:
        log_once(f"cache-list:{exc.problem}", f"{LOAD_ID}: {exc}")
        return []


def _input_error(node: str, exc: CacheError, inputs: dict[str, Any]) -> H3KitInputError:
    input_name = exc.input_name or "conditioning"
    value = inputs.get(input_name)
    if input_name == "conditioning":
        value = summarize_value(value)
    return H3KitInputError(node, input_name, value, exc.problem, exc.fix)


def _missing_file_problem(name: str) -> tuple[str, str]:
    names = available_names()
    where = ", ".join(str(folder) for folder in cache_folders())
    if not names:
        return (f"there is no cache named '{name}' in {where}; the folder holds no caches yet",
                f"create one with H3KitSaveConditioning or `{command('cond build')}`")
    shown = ", ".join(names[:20]) + (f" ... ({len(names)} in all)" if len(names) > 20 else "")
    return f"there is no cache named '{name}' in {where}; available: {shown}", "pick one of the available names"


class H3KitLoadConditioning:
    DISPLAY_NAME = "Load Conditioning (H3Kit cache)"
    CATEGORY = category("Conditioning")
    DESCRIPTION = (
        "Loads a CONDITIONING saved by H3KitSaveConditioning from models/conditioning_cache, so a constant "
        "prompt (e.g. the refine prompt) needs no text encoder. Safetensors only: never unpickles. "
        "Outputs the conditioning (on CPU; ComfyUI moves it), the stored prompt text, and the provenance as JSON."
    )
    FUNCTION = "load"
    RETURN_TYPES = ("CONDITIONING", "STRING", "STRING")
    RETURN_NAMES = ("conditioning", "prompt_text", "provenance")
    OUTPUT_TOOLTIPS = (
        "The cached conditioning, bitwise as it was saved.",
        "The prompt text stored with the cache (connect it to a Save node's prompt_text to keep the provenance).",
        "JSON: file, encoder, prompt text and sha256, creation time, H3Kit version, tensor shapes.",
    )

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "name": (host_choices(LOAD_ID, "name", available_names), {
                    "tooltip": "A cache file in models/conditioning_cache (made by H3KitSaveConditioning or "
                               f"`{command('cond build')}`). Press R in ComfyUI to refresh the list.",
                    "model_folder": FOLDER_KEY,
                }),
            },
        }

    @classmethod
    def IS_CHANGED(cls, name: str = "", **_: Any) -> str:
        """A new value whenever the file is replaced or edited, so ComfyUI reloads it instead of its cached copy."""
        try:
            path = find_cache_file(cache_folders(), name)
        except (CacheError, HostUnavailable) as exc:
            return f"unusable: {exc}"
        return file_signature(path) if path else f"absent: {name}"

    @classmethod
    def VALIDATE_INPUTS(cls, name: str) -> bool | str:
        """Checked when the prompt is queued: a clear message (with the available names) instead of a failed run."""
        try:
            check_cache_header(_resolve(name))
        except H3KitInputError as exc:
            return str(exc)
        except CacheError as exc:
            return str(_input_error(LOAD_ID, exc, {"name": name}))
        except HostUnavailable as exc:  # the host's folder registry failed: say so, with why the list was empty
            return " ".join(filter(None, [str(exc), choice_failure(LOAD_ID, "name")]))
        return True

    def load(self, name: str) -> tuple[list, str, str]:
        path = _resolve(name)
        try:
            loaded = read_cache(path)
        except CacheError as exc:
            raise H3KitInputError(LOAD_ID, "name", name, exc.problem, exc.fix) from exc
        for warning in loaded.warnings:
            LOG.warning("%s: %s: %s", LOAD_ID, path, warning)
        LOG.info("%s: loaded %s (%d entries)", LOAD_ID, path, len(loaded.conditioning))
        info = provenance(loaded)
        return loaded.conditioning, info["prompt_text"], json.dumps(info, indent=2, allow_nan=True)


def _resolve(name: str) -> Path:
    try:
        path = find_cache_file(cache_folders(), name)
    except CacheError as exc:
        raise H3KitInputError(LOAD_ID, "name", name, exc.problem, exc.fix) from exc
    if path is None:
        problem, fix = _missing_file_problem(name)
        raise H3KitInputError(LOAD_ID, "name", name, problem, fix)
    return path


def traced_provenance(prompt: Any, unique_id: Any) -> tuple[str, str, str]:
    """(prompt text, encoder, source) read from the graph when the conditioning comes straight from a
    CLIPTextEncode with a typed text; empty strings otherwise."""
    if not isinstance(prompt, dict):
        return "", "", ""
    link = prompt.get(str(unique_id), {}).get("inputs", {}).get("conditioning")
    source = prompt.get(str(link[0])) if isinstance(link, list) and link else None
    if not source or source.get("class_type") != "CLIPTextEncode":
        return "", "", ""
    text = source.get("inputs", {}).get("text")
    if not isinstance(text, str):
        return "", "", ""
    clip_link = source["inputs"].get("clip")
    loader = prompt.get(str(clip_link[0])) if isinstance(clip_link, list) and clip_link else None
    encoder = ""
    if loader:
        inputs = loader.get("inputs", {})
        files = [str(v) for k, v in sorted(inputs.items()) if k.startswith(("clip_name", "text_encoder")) and isinstance(v, str)]
        kind = inputs.get("type")
        encoder = " + ".join(files) + (f" (type {kind})" if isinstance(kind, str) else "")
    return text, encoder, f"node {link[0]} (CLIPTextEncode)"


def _provenance_source(prompt_text: str, traced_text: str, source: str) -> str:
    if not prompt_text:
        return "none"
    return source if prompt_text == traced_text else "prompt_text input"


class H3KitSaveConditioning:
    DISPLAY_NAME = "Save Conditioning (H3Kit cache)"
    CATEGORY = category("Conditioning")
    DESCRIPTION = (
        "Saves a CONDITIONING to models/conditioning_cache/<name>.safetensors (every tensor, bitwise, with the "
        "options as JSON metadata and the prompt text as provenance), for H3KitLoadConditioning. Never replaces a "
        "different file unless 'overwrite' is on; saving identical content again is a no-op. Connect 'report' to "
        "a Preview Any node to see the written path in the graph."
    )
    FUNCTION = "save"
    OUTPUT_NODE = True
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("report",)
    OUTPUT_TOOLTIPS = ("JSON report: the written path, status (written/replaced/unchanged), sizes, prompt sha256.",)

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "conditioning": ("CONDITIONING", {"tooltip": "The conditioning to cache, e.g. from CLIPTextEncode."}),
                "name": ("STRING", {
                    "default": DEFAULT_NAME,
                    "tooltip": "File name in models/conditioning_cache, with or without .safetensors. A plain name: "
                               "no folders, no leading '.'.",
                }),
                "overwrite": ("BOOLEAN", {
                    "default": False,
                    "tooltip": "Replace an existing file with different content. Off: such a save stops with an "
                               "error, so a cache is never lost by accident.",
                }),
            },
            "optional": {
                "prompt_text": ("STRING", {
                    "default": "", "multiline": True,
                    "tooltip": "The prompt this conditioning encodes, stored as provenance (with its sha256). Empty: "
                               "taken from the CLIPTextEncode feeding this node when there is one.",
                }),
                "encoder_name": ("STRING", {
                    "default": "",
                    "tooltip": "Which text encoder made it, stored as provenance. Empty: taken from the loader "
                               "feeding that CLIPTextEncode when there is one.",
                }),
            },
            "hidden": {"prompt": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def IS_CHANGED(cls, name: str = "", **_: Any) -> str:
        """Re-run when the target file appears, changes or disappears, so a deleted cache is written again."""
        try:
            return file_signature(cache_folders()[0] / cache_file_name(name))
        except (CacheError, HostUnavailable) as exc:
            return f"unusable: {exc}"

    def save(
        self, conditioning: list, name: str, overwrite: bool = False, prompt_text: str = "", encoder_name: str = "",
        prompt: dict | None = None, unique_id: str | None = None,
    ) -> dict:
        report = Report(SAVE_ID)
        traced_text, traced_encoder, source = traced_provenance(prompt, unique_id)
        prompt_text = prompt_text or traced_text
        encoder_name = encoder_name or traced_encoder
        inputs = {"conditioning": conditioning, "name": name, "prompt_text": prompt_text, "encoder_name": encoder_name}
        try:
            result = save_conditioning(
                cache_folders()[0], name, conditioning, prompt_text=prompt_text, encoder=encoder_name,
                h3kit_version=pack_version(), overwrite=overwrite,
            )
        except CacheError as exc:
            raise _input_error(SAVE_ID, exc, inputs) from exc
        report.set(
            status=result.status, path=str(result.path), entries=result.entries, tensors=result.tensors,
            bytes=result.bytes, encoder=encoder_name, prompt_sha256=result.prompt_sha256,
            provenance_source=_provenance_source(prompt_text, traced_text, source),
        )
        if not prompt_text:
            report.warn("no prompt_text: the cache will not record which prompt it holds (enter it in prompt_text)")
        line = describe_result(result)
        LOG.info("%s: %s", SAVE_ID, line)
        return {"ui": {"text": [line]}, "result": (report.json(),)}


NODES = [H3KitSaveConditioning, H3KitLoadConditioning]
