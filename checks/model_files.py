"""The weight files the shipped workflows load: folder, size, where to get them, licence; each fact once.

`doctor` names these when a file is missing, the server-side messages add them to "put X in models/<folder>",
and README's "What you need" tables are checked against this module (tests/test_model_files.py).
Sizes are the field reports' (field-notes.md §A7, §D, §F6; article tags as in README) unless marked as an
estimate. The weights are gated: H3Kit never downloads them. Pure Python.

Which graph needs which file is read from the graphs (workflows/api); what a graph costs to set up (the files it
loads, plus what its made files need once, NEEDS_ONCE) and whether it can be set up from public files at all
(NO_PUBLIC_SOURCE) is `setup_of` here, and README's per-graph table is tested against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

REFINE_PROMPT = "4K, refined, high quality, cinematic detail, clean textures, natural motion."  # field notes §A5

# Where a file comes from, as the field reports name the repositories (Hugging Face names; all gated but E).
SOURCES = {
    "N": "Hugging Face `coolthor/MiniMax-H3-pruned-NVFP4` (gated; folders in ComfyUI's models/ layout)",
    "T": "no public source known: the RTX 2080 Ti build (field report TUR18; its notes are in Hugging Face "
         "`coolthor/H3-Super-Acceleration-Turing`, gated; the report does not say which repository holds this file)",
    "L": "Hugging Face `Lightricks/LTX-2.5` (gated) or the NVFP4 build `coolthor/MiniMax-H3-pruned-NVFP4`; the "
         "field report names both for this build",
    "G": "Hugging Face `agosh/LTX-2.5-Comfy-GGUF`",
    "E": "Hugging Face `Comfy-Org/MiniMax-H3` (PR #50, the ten effect embeddings)",
    "R": "no public source known: the field reports name none (the Ref2VA checkpoint of the NVFP4 build; ask where "
         "you got the FL2VA file)",
    "made": "made by you with an H3Kit command",
}
# Sources whose download location nobody published: a graph needing such a file cannot be set up from public files.
NO_PUBLIC_SOURCE = frozenset({"T", "R"})
LICENCES = {
    "H3": "MiniMax-H3 community licence: gated, excludes the EU, UK, South Korea and the USA (as the field reports "
          "give it)",
    "LTX": "LTX-2.5 licence (Lightricks, gated, separate from H3's)",
    "yours": "yours (made from the files above; their licences apply)",
}


@dataclass(frozen=True)
class ModelFile:
    name: str
    folder: str  # the models/ subfolder ComfyUI reads it from
    size: str  # as published, or marked "estimate"
    size_source: str  # field report tag, or "estimate: ..."
    source: str  # key of SOURCES
    licence: str  # key of LICENCES
    make: tuple[str, ...] = ()  # the H3Kit commands that make it (source "made"), without the command prefix
    needs: tuple[str, ...] = ()  # the files its first make-command reads once (they need not stay)

    @property
    def gib(self) -> float | None:
        number, _, unit = self.size.partition(" ")
        try:
            value = float(number.lstrip("~"))
        except ValueError:
            return None
        return {"GiB": value, "MiB": value / 1024, "kB": value / 2**20}.get(unit)



_FILES = [
    # stage 1: MiniMax-H3
    ModelFile("minimax_h3_fl2va_pruned_nvfp4.safetensors", "diffusion_models", "11.67 GiB", "field report R1", "N", "H3"),
    ModelFile("minimax_h3_fl2va_pruned_int8_convrot.safetensors", "diffusion_models", "19.53 GiB",
              "field report TUR18", "T", "H3"),
    ModelFile("minimax_h3_ref2va_pruned_nvfp4.safetensors", "diffusion_models", "~11.7 GiB",
              "estimate: same pruned NVFP4 layout as the FL2VA file; not published", "R", "H3"),
    ModelFile("qwen3vl_32b_heretic_minimax_h3_nvfp4.safetensors", "text_encoders", "14.61 GiB", "field report R1",
              "N", "H3"),
    ModelFile("qwen3vl_32b_heretic_convrot_w4a4.safetensors", "text_encoders", "13.2 GiB", "field report TUR11",
              "T", "H3"),
    ModelFile("minimax_h3_video_vae_fp16.safetensors", "vae", "4.85 GiB", "field report R1", "N", "H3"),
    ModelFile("minimax_h3_audio_vae_fp32.safetensors", "vae", "0.56 GiB", "field report R1", "N", "H3"),
    ModelFile("minimax_h3_fl2v_turbo_4step_v0.1_768p_sla.safetensors", "loras", "1.82 GiB", "field report SPK47",
              "N", "H3"),
    ModelFile("minimaxh3_bullet_time.safetensors", "embeddings", "963 kB", "field report R4", "E", "H3"),
    # stage 2: LTX-2.5
    ModelFile("ltx-2.5-22b-distilled-transformer-nvfp4.safetensors", "diffusion_models", "17.44 GiB",
              "field report SPK47", "L", "LTX"),
    ModelFile("ltx-2.5-22b-distilled-transformer-bf16-Q4_K_M.gguf", "unet", "11.38 GiB", "field report TUR18", "G",
              "LTX"),
    ModelFile("gemma4-12b-with-proj-ltx-2.5-comfy-int8-convrot.safetensors", "text_encoders", "14.32 GiB",
              "field report R8", "L", "LTX"),
    ModelFile("ltx-2.5-video-vae-conv-bf16.safetensors", "vae", "1.35 GiB", "field report R7", "L", "LTX"),
    ModelFile("ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors", "latent_upscale_models", "0.93 GiB",
              "field report R7", "L", "LTX"),
    ModelFile("ltx-2.5-video-vae-conv-fp16.safetensors", "vae", "1.35 GiB",
              "same size as the bf16 file it is made from", "made", "yours",
              ("convert bf16-to-fp16 models/vae/ltx-2.5-video-vae-conv-bf16.safetensors "
               "models/vae/ltx-2.5-video-vae-conv-fp16.safetensors",), ("ltx-2.5-video-vae-conv-bf16.safetensors",)),
    ModelFile("ltx-2.5-latent-spatial-upscaler-x2-fp16-1.0.safetensors", "latent_upscale_models", "0.93 GiB",
              "same size as the bf16 file it is made from", "made", "yours",
              ("convert bf16-to-fp16 models/latent_upscale_models/ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors "
               "models/latent_upscale_models/ltx-2.5-latent-spatial-upscaler-x2-fp16-1.0.safetensors",),
              ("ltx-2.5-latent-spatial-upscaler-x2-bf16-1.0.safetensors",)),
    ModelFile("ltx_generic_refine.safetensors", "conditioning_cache", "~5 MiB",
              "estimate: one encoded prompt", "made", "yours",
              (f"cond build --server URL --clip gemma4-12b-with-proj-ltx-2.5-comfy-int8-convrot.safetensors --type ltxv "
               f"--name ltx_generic_refine --text \"{REFINE_PROMPT}\"",
               "cond import ltx_generic_refine.cond ltx_generic_refine --dir models/conditioning_cache"),
              ("gemma4-12b-with-proj-ltx-2.5-comfy-int8-convrot.safetensors",)),
]
MODEL_FILES: dict[str, ModelFile] = {f.name: f for f in _FILES}


@dataclass(frozen=True)
class Setup:
    """What setting up one graph takes: `loads` the files it names, `once` the files its made files need once
    (not among `loads`), `download` the GiB to download (every file of both that is not made), `unpublished` the
    files with no public source (the graph cannot be set up from public files while this is not empty)."""

    loads: tuple[str, ...]
    once: tuple[str, ...]
    download_gib: float
    unpublished: tuple[str, ...]


def setup_of(names: Iterable[str]) -> Setup:
    """The Setup of a graph that names these model files (each a MODEL_FILES name)."""
    loads = tuple(dict.fromkeys(names))
    once = tuple(dict.fromkeys(n for name in loads for n in MODEL_FILES[name].needs if n not in loads))
    files = [MODEL_FILES[n] for n in (*loads, *once)]
    return Setup(loads, once, sum(f.gib or 0.0 for f in files if f.source != "made"),
                 tuple(f.name for f in files if f.source in NO_PUBLIC_SOURCE))


# ComfyUI folder keys that read more than one models/ subfolder (the first is where a new file goes).
FOLDER_ALIASES = {"diffusion_models": ("diffusion_models", "unet"), "text_encoders": ("text_encoders", "clip"),
                  "unet_gguf": ("unet", "diffusion_models")}
# The ComfyUI folder key whose folder list a loader's key reads: ComfyUI's legacy names (folder_paths.map_legacy,
# also what an extra_model_paths.yaml key means) and ComfyUI-GGUF's keys, which reuse core's lists.
HOST_FOLDER_KEY = {"unet": "diffusion_models", "clip": "text_encoders", "unet_gguf": "diffusion_models",
                   "clip_gguf": "text_encoders"}
MAX_FOLDER_KEYS = 1000  # a host's folder table: 0.33.0 has about 40 keys
MAX_FOLDERS_PER_KEY = 100


def folder_name(folder_key: str) -> str:
    """The models/ subfolder a new file goes into for a loader's folder key ('unet_gguf' -> 'unet')."""
    return FOLDER_ALIASES.get(folder_key, (folder_key,))[0]


def known_file(name: str) -> ModelFile | None:
    return MODEL_FILES.get(name)


def how_to_get(name: str, folder_key: str, into: str | None = None) -> str:
    """The fix for a missing model file: where it goes (`into`: the folder this ComfyUI puts it in, when known;
    else models/<folder>), its size, where it comes from (or the command that makes it) and its licence."""
    from .invocation import command  # the make-commands name the CLI as this user runs it

    folder = into or f"models/{folder_name(folder_key)}"
    entry = known_file(name)
    if entry is None:
        return (f"put {name} in {folder}, then press R in ComfyUI or restart it (it is not one of the "
                "shipped workflows' files, so H3Kit cannot say where it comes from)")
    if entry.make:
        made = " or ".join(f"`{command(c)}`" for c in entry.make)
        return (f"make it ({entry.size}, {entry.size_source}) in the ComfyUI folder with {made}; it lands in "
                f"{folder}; then press R in ComfyUI or restart it")
    return (f"put {name} in {folder} ({entry.size}, {entry.size_source}), then press R in ComfyUI or restart "
            f"it. Download: {SOURCES[entry.source]}. Licence: {LICENCES[entry.licence]}")


def missing_total(names: Iterable[str]) -> str:
    """'9 files, 67.55 GiB missing' for the model files found missing (each file once; sizes as MODEL_FILES gives
    them, field reports and marked estimates; files it does not know are counted apart)."""
    unique = sorted(set(names))
    sizes = [entry.gib for entry in map(known_file, unique) if entry is not None and entry.gib is not None]
    unknown = len(unique) - len(sizes)
    counted = f"{len(unique)} file{'s' if len(unique) != 1 else ''}, {sum(sizes):.2f} GiB missing"
    return counted + (f" ({unknown} of unknown size not counted)" if unknown else "")


FOLDER_TABLE_ROUTES = ("/experiment/models", "/internal/folder_paths")  # newest first


def served_folders(table: dict[str, list[str]], key: str) -> list[str]:
    """A server's folders for a loader's folder key, in its order, except that its folder named as this pack names
    it (models/<folder_name>) comes first: where a new file goes."""
    listed = table.get(HOST_FOLDER_KEY.get(key, key), [])
    named = [f for f in listed if f.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] == folder_name(key)]
    return list(dict.fromkeys(named + listed))


def folder_table(answer: Any) -> dict[str, list[str]] | None:
    """A running ComfyUI's model folders, {folder key: [folder, ...]} in its search order, from its answer to
    GET /experiment/models ([{"name", "folders", ...}], ComfyUI >= 0.3.x) or GET /internal/folder_paths
    ({key: [folders]}); None when the answer is neither (an older host, a proxy's page). Bounded."""
    pairs: list[tuple[Any, Any]]
    if isinstance(answer, list):
        pairs = [(row.get("name"), row.get("folders")) for row in answer if isinstance(row, dict)]
    elif isinstance(answer, dict):
        pairs = list(answer.items())
    else:
        return None
    table = {key: [f for f in folders if isinstance(f, str) and f][:MAX_FOLDERS_PER_KEY]
             for key, folders in pairs[:MAX_FOLDER_KEYS] if isinstance(key, str) and isinstance(folders, list)}
    return table or None
