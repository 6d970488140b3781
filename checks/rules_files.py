"""Rules on the local model files a graph names: safetensors headers (F13, F14) and H3 embedding widths.

`safetensors_lint(files)` builds the rule over a `ModelFiles`: where a file is and what it holds, read by
adapters/model_folders.py (a ComfyUI models/ folder, or the running ComfyUI's folder_paths) through
adapters/safetensors_file.py, the one header reader. The rules here open no file themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from re import compile as regex
from typing import Any

from .facts import H3_EMBEDDING_WIDTH
from .filetypes import FileKind
from .graph import input_kind, nodes_of, resolved
from .problem import Problem

# Model inputs of nodes whose schema does not say which folder they read (live servers never do).
MODEL_INPUT_FOLDERS: dict[tuple[str, str], str] = {
    ("UNETLoader", "unet_name"): "diffusion_models",
    ("CheckpointLoaderSimple", "ckpt_name"): "checkpoints",
    ("VAELoader", "vae_name"): "vae",
    ("CLIPLoader", "clip_name"): "text_encoders",
    ("DualCLIPLoader", "clip_name1"): "text_encoders",
    ("DualCLIPLoader", "clip_name2"): "text_encoders",
    ("LoraLoaderModelOnly", "lora_name"): "loras",
    ("LoraLoader", "lora_name"): "loras",
    ("LatentUpscaleModelLoader", "model_name"): "latent_upscale_models",
    ("LTXVAudioVAELoader", "ckpt_name"): "checkpoints",
    ("LTXAVTextEncoderLoader", "text_encoder"): "text_encoders",
    ("LTXAVTextEncoderLoader", "ckpt_name"): "checkpoints",
    ("UnetLoaderGGUF", "unet_name"): "unet_gguf",
}
CONFIG_FOLDERS = {"vae", "latent_upscale_models"}
NO_FILE_VALUES = {"none"}  # the "no file" choice of optional file inputs (H3KitEffectPrompt's effect_2, LoRA stacks)  # their loaders read the architecture from metadata 'config'


def model_inputs(graph: dict, schemas: dict) -> Iterable[tuple[str, str, str, str, str]]:
    """(node_id, class_type, input, folder, file name) for every model file the graph names."""
    for nid, node in graph.items():
        if not isinstance(node, dict):
            continue
        ct = node.get("class_type", "?")
        declared = {}
        info = schemas.get(ct) or {}
        for section in ("required", "optional"):
            declared.update(info.get("input", {}).get(section, {}) or {})
        for name, value in node.get("inputs", {}).items():
            if not isinstance(value, str) or not value or not value.isprintable():
                continue  # not a file name: check_widget reports it
            if value.lower() in NO_FILE_VALUES:
                continue
            folder = MODEL_INPUT_FOLDERS.get((ct, name))
            if folder is None and name in declared:
                folder = input_kind(declared[name])[1].get("model_folder")
            if folder:
                yield str(nid), ct, name, folder, value




def is_quantized(header: dict[str, Any]) -> bool:
    """Comfy-quant layout: per-layer `comfy_quant` markers or FP8 block scales beside packed U8 weights."""
    tensors = {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    if any(k.endswith("comfy_quant") for k in tensors):
        return True
    return any(k.endswith("weight_scale") and str(v.get("dtype", "")).startswith("F8")
               and str(tensors.get(k[: -len("_scale")], {}).get("dtype")) == "U8" for k, v in tensors.items())


@dataclass(frozen=True)
class ModelFiles:
    """The model files of one machine as the file rules see them (adapters/model_folders.py builds one).

    locate(folder, name): the file's path, None when it is not on this machine; header(path): its safetensors
    header as JSON, raising OSError or ValueError (the reader's SafetensorsHeaderError) when it cannot be read;
    kind(path): what the file's first bytes say it is, None when it cannot be read; folders(folder): the folders
    searched for that folder key, in the host's order, the first where a new file goes (None: not known here, the
    messages then say models/<folder>)."""

    locate: Callable[[str, str], Path | None]
    header: Callable[[Path], dict[str, Any]]
    kind: Callable[[Path], FileKind | None]
    folders: Callable[[str], tuple[Path, ...]] | None = None


def header_problems(nid: str, ct: str, name: str, folder: str, path: Path, files: ModelFiles) -> list[Problem]:
    if path.suffix.lower() == ".gguf":
        kind = files.kind(path)
        if kind is not None and kind.key != "gguf":
            return [Problem(nid, ct, name, path.name, f"{path} is {kind.text}, not a GGUF model file",
                            "download the file again (compare its size with the source)")]
        return []
    if path.suffix.lower() != ".safetensors":
        return []
    try:
        header = files.header(path)
    except (OSError, ValueError) as exc:
        return [Problem(nid, ct, name, path.name, f"F13: cannot read the safetensors header of {path}: {exc}",
                        "re-download the file (compare its size with the source)")]
    metadata = header.get("__metadata__")
    if is_quantized(header) and not (isinstance(metadata, dict) and "_quantization_metadata" in metadata):
        return [Problem(nid, ct, name, path.name,
                        "F13: quantized checkpoint without `_quantization_metadata` in its header: ComfyUI drops the "
                        "scales and feeds packed weights to the layers (garbage or a shape error)",
                        "download the original file again; never re-save it with a converter that drops metadata")]
    if not isinstance(metadata, dict) or not metadata:
        severity = "error" if folder in CONFIG_FOLDERS else "warning"
        return [Problem(nid, ct, name, path.name,
                        "F14: the safetensors header has no metadata" + (
                            "; this loader reads the architecture 'config' from it and misreads the file"
                            if folder in CONFIG_FOLDERS else ""),
                        "use the original file; converters must pass metadata= to save_file", severity=severity)]
    if folder in CONFIG_FOLDERS and "config" not in metadata:
        return [Problem(nid, ct, name, path.name, "F14: metadata has no 'config' entry, which this loader reads",
                        "use the original file, or copy the source file's metadata into the converted one",
                        severity="warning")]
    return []


EMBEDDING_NAME = regex(r"(?<![^\s])embedding:([^\s<\[,]+)")
H3_PROMPT_NODES = {"MiniMaxH3ImageToVideo": "prompt", "MiniMaxH3ReferenceToVideo": "prompt"}


def embedding_width(header: dict[str, Any]) -> int | None:
    for key, value in header.items():
        if key != "__metadata__" and isinstance(value, dict) and value.get("shape"):
            return int(value["shape"][-1])
    return None


def embedding_problems(graph: dict, files: ModelFiles) -> list[Problem]:
    problems = []
    for nid, node in nodes_of(graph, *H3_PROMPT_NODES):
        field = H3_PROMPT_NODES[node["class_type"]]
        text = resolved(graph, node, field)
        if not isinstance(text, str):
            continue
        for name in EMBEDDING_NAME.findall(text):
            path = files.locate("embeddings", name) or files.locate("embeddings", name + ".safetensors")
            if path is None:
                problems.append(Problem(nid, node["class_type"], field, name,
                                        f"embedding '{name}' is not in models/embeddings; ComfyUI ignores it with only "
                                        "a log line", "install the effect file into models/embeddings and restart"))
                continue
            if path.suffix.lower() != ".safetensors":
                continue
            try:
                width = embedding_width(files.header(path))
            except (OSError, ValueError) as exc:
                problems.append(Problem(nid, node["class_type"], field, name, f"cannot read embedding {path}: {exc}",
                                        "re-download the embedding"))
                continue
            if width is not None and width != H3_EMBEDDING_WIDTH:
                problems.append(Problem(
                    nid, node["class_type"], field, name,
                    f"embedding '{name}' is {width} wide but H3 tokens are {H3_EMBEDDING_WIDTH}: ComfyUI drops it "
                    "with a 'shape mismatch' log warning", f"use an H3 effect embedding ([N, {H3_EMBEDDING_WIDTH}])"))
    return problems


def safetensors_lint(files: ModelFiles) -> Callable[[dict, dict], list[Problem]]:
    """F13/F14 header checks of the model files the graph names that are on this machine, plus H3 embedding
    widths."""

    def lint_model_headers(graph: dict, schemas: dict) -> list[Problem]:
        problems = []
        for nid, ct, name, folder, filename in model_inputs(graph, schemas):
            path = files.locate(folder, filename)
            if path is not None:
                problems += header_problems(nid, ct, name, folder, path, files)
        return problems + embedding_problems(graph, files)

    return lint_model_headers


def model_input_keys(graph: dict, schemas: dict) -> set[tuple[str, str]]:
    return {(nid, name) for nid, _, name, _, _ in model_inputs(graph, schemas)}
