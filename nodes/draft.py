"""The two-stage draft as a file: H3KitSaveDraft ends stage 1, H3KitLoadDraft starts stage 2, so H3 and LTX can run
on two GPUs, two ComfyUI processes or two machines (issue 32; where the graph is cut: checks/graph_split.py).

What stage 2 needs from stage 1 is the latent LTX's VAEEncode made of the handoff's frames (LTX decodes it with the
same VAE) and the handoff's trimmed H3 audio (muxed at the end). Both are stored bitwise, in their own dtype
(float32 as ComfyUI hands them on), so the split run renders what the single graph renders. The decoded frames were the
other choice: 375 MB of float32 per 1344x768 clip instead of 3.4 MB, past ComfyUI's 100 MB upload limit.

File layout: the conditioning cache's (nodes/cond_cache_format.py: one encoder, one bounded reader, its header, JSON,
rank and side limits), format "h3kit.draft" version 1, at most checks.facts.MAX_DRAFT_BYTES of tensors, with
provenance as string metadata: graph (the stage-1 prompt as queued, when it fits), graph_sha256, seeds, sizes, host
(ComfyUI, torch, device, machine), latent_vae (the VAE file that encoded the latent and must decode it), h3kit_version,
created_utc. Written once through the one atomic never-overwrite writer (adapters/files.py) into ComfyUI's output
folder; read from its input folder (where /upload/image puts any file), by names that never leave it. Never unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from ..adapters.files import name_problem, regular_file_problem
from ..adapters.host import (
    HostUnavailable,
    comfyui_version,
    host_choices,
    host_loaded,
    host_module,
    render_devices,
)
from ..adapters.log import LOG
from ..checks.facts import MAX_DRAFT_BYTES
from ..checks.graph import inputs_of, is_link
from ..checks.graph_edit import seed_inputs
from ..checks.graph_split import (
    DRAFT_FOLDER,
    DRAFT_INPUT,
    DRAFT_PREFIX,
    DRAFT_SUFFIX,
    DRAFT_UI_KEY,
    LOAD_DRAFT,
    SAVE_DRAFT,
)
from ..checks.invocation import command
from .common import H3KitInputError, Report, category
from .cond_cache_format import (
    MAX_CACHE_JSON_BYTES,
    CacheError,
    StoredKind,
    StructureEncoder,
    check_cache_header,
    file_signature,
    json_tables,
    read_stored,
    summarize_value,
    utc_now,
    write_stored,
)
from .conditioning_cache import pack_version

CATEGORY = category("Pipeline")
FORMAT_NAME = "h3kit.draft"
FORMAT_VERSION = 1
MAX_PREFIX_PARTS = 4  # filename_prefix: at most 3 subfolders and a stem
ENCODERS = ("VAEEncode", "VAEEncodeTiled")


SPLIT_RUN = "run WORKFLOW --stage1-server URL --stage2-server URL"


def _rebuild_fix() -> str:
    return f"run stage 1 again to write a new draft (the _stage1 graph, or `{command(SPLIT_RUN)}`)"


def _not_a_draft(path: Path, kind: Any) -> CacheError:
    if kind.key in ("torch_zip", "pickle"):
        return CacheError(f"{path} is {kind.text}, not safetensors; H3Kit never unpickles files, because loading a "
                          "pickle can run arbitrary code", _rebuild_fix())
    return CacheError(f"{path} is {kind.text}, not an H3Kit two-stage draft (a .safetensors file written by "
                      f"{SAVE_DRAFT})", f"choose a draft written by {SAVE_DRAFT} (in input/{DRAFT_FOLDER})")


def _foreign(path: Path, names: list[str]) -> CacheError:
    shown = ", ".join(repr(n)[1:-1][:60] for n in names[:5])
    return CacheError(f"{path} is a safetensors file but not an H3Kit two-stage draft (no '{FORMAT_NAME}' format "
                      f"metadata; tensors: {shown}{' ...' if len(names) > 5 else ''})",
                      f"choose a draft written by {SAVE_DRAFT}; model files belong in models/, not input/")


DRAFT = StoredKind(
    FORMAT_NAME, FORMAT_VERSION, MAX_DRAFT_BYTES, "an H3Kit two-stage draft",
    "a 1344x768, 121-frame clip's is 3.4 MB", _rebuild_fix,
    f"connect {SAVE_DRAFT}'s latent to the LATENT of the LTX VAEEncode (plain tensors, not an audio+video latent) and "
    "its audio to the handoff's AUDIO",
    _not_a_draft, _foreign)


# ---------------------------------------------------------------------------------------------- folders and names
def comfy_folder(kind: str) -> Path:
    """ComfyUI's output or input folder (folder_paths); outside ComfyUI there is none."""
    if not host_loaded("folder_paths"):
        raise HostUnavailable(f"{SAVE_DRAFT} / {LOAD_DRAFT} read and write ComfyUI's {kind} folder: run them inside "
                              "ComfyUI")
    folder_paths = host_module("folder_paths")
    return Path(folder_paths.get_output_directory() if kind == "output" else folder_paths.get_input_directory())


def _name_parts(node: str, input_name: str, value: Any, what: str, max_parts: int) -> list[str]:
    """`value` ("sub/name") as its parts, each a plain portable file name: the path cannot leave its folder."""
    shown = DRAFT_PREFIX if input_name == "filename_prefix" else f"{DRAFT_FOLDER}/x{DRAFT_SUFFIX}"
    example = f"use a relative name such as {shown}"
    if not isinstance(value, str) or not value.strip():
        raise H3KitInputError(node, input_name, value, f"the {what} is empty or not text", example)
    if "\\" in value or value.startswith("/") or ":" in value.split("/")[0]:
        raise H3KitInputError(node, input_name, value, f"the {what} is an absolute path or uses '\\'; it must stay "
                              f"inside ComfyUI's {'output' if input_name == 'filename_prefix' else 'input'} folder",
                              example)
    parts = value.split("/")
    if len(parts) > max_parts:
        raise H3KitInputError(node, input_name, value, f"the {what} has {len(parts) - 1} folders; at most "
                              f"{max_parts - 1} are allowed", example)
    for part in parts:
        problem = "starts with '.' (a hidden file or a way out of the folder: '..')" if part.startswith(".") else (
            name_problem(part))
        if problem is not None:
            raise H3KitInputError(node, input_name, value, f"'{part}' {problem}", example)
    return parts


def _inside(folder: Path, parts: list[str], node: str, input_name: str, value: str) -> Path:
    """folder/parts, refused when a link anywhere on the way leads out of `folder`."""
    path = folder.joinpath(*parts)
    root = os.path.realpath(folder)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise H3KitInputError(node, input_name, value, f"it leads out of {folder} (a symbolic link)",
                              f"put the draft itself into {folder / DRAFT_FOLDER}")
    return path


def available_drafts() -> list[str]:
    """The .safetensors files directly in ComfyUI's input folder and in its h3kit_drafts/ subfolder (where `run`
    uploads), as H3KitLoadDraft names them; [] outside ComfyUI."""
    try:
        root = comfy_folder("input")
    except HostUnavailable:
        return []
    found = []
    for prefix, folder in (("", root), (f"{DRAFT_FOLDER}/", root / DRAFT_FOLDER)):
        if not folder.is_dir():
            continue
        with os.scandir(folder) as entries:
            found += [prefix + e.name for e in entries if e.name.lower().endswith(DRAFT_SUFFIX)
                      and not e.name.startswith(".") and e.is_file()]
    return sorted(found)


def draft_path(name: Any) -> Path:
    """The file an H3KitLoadDraft name means: inside ComfyUI's input folder, a regular .safetensors file."""
    parts = _name_parts(LOAD_DRAFT, DRAFT_INPUT, name, "draft name", 2)
    if not parts[-1].lower().endswith(DRAFT_SUFFIX):
        raise H3KitInputError(LOAD_DRAFT, DRAFT_INPUT, name, "a draft is a .safetensors file",
                              f"choose a file written by {SAVE_DRAFT}")
    folder = comfy_folder("input")
    path = _inside(folder, parts, LOAD_DRAFT, DRAFT_INPUT, name)
    problem = regular_file_problem(path)
    if problem is not None:
        names = available_drafts()
        shown = ", ".join(names[:10]) + (f" ... ({len(names)} in all)" if len(names) > 10 else "") if names else "none"
        raise H3KitInputError(LOAD_DRAFT, DRAFT_INPUT, name, f"{path} {problem}; drafts in the input folder: {shown}",
                              f"upload the draft stage 1 wrote (`{command(SPLIT_RUN)}` does it), or copy it into "
                              f"{folder / DRAFT_FOLDER}")
    return path


# ---------------------------------------------------------------------------------------------- provenance
def _graph_facts(prompt: Any, unique_id: Any) -> dict[str, Any]:
    """What the queued stage-1 graph says about the draft: its seeds, the H3 draft's and the handoff's sizes, and the
    VAE file that encoded the latent (the one that must decode it)."""
    if not isinstance(prompt, dict):
        return {"seeds": {}, "sizes": {}, "latent_vae": ""}
    seeds = {f"{nid}.{name}": prompt[nid]["inputs"][name] for nid, name in seed_inputs(prompt)}
    sizes: dict[str, Any] = {}
    for nid, node in prompt.items():
        inputs = inputs_of(node)
        keys = [k for k in ("width", "height", "length", "target_width", "target_height", "fps", "frame_policy")
                if k in inputs and not is_link(inputs[k])]
        if keys and isinstance(node, dict) and ("MiniMaxH3" in str(node.get("class_type")) or
                                                node.get("class_type") == "H3KitDraftToLTX"):
            sizes[f"{nid} {node['class_type']}"] = {k: inputs[k] for k in keys}
    return {"seeds": seeds, "sizes": sizes, "latent_vae": _latent_vae(prompt, unique_id)}


def _latent_vae(prompt: dict, unique_id: Any) -> str:
    """The vae_name of the VAELoader whose VAE encoded this node's latent (VAEEncode -> VAELoader), or ''."""
    link = inputs_of(prompt.get(str(unique_id))).get("latent")
    encode = prompt.get(str(link[0])) if is_link(link) else None
    if not isinstance(encode, dict) or encode.get("class_type") not in ENCODERS:
        return ""
    vae = inputs_of(encode).get("vae")
    loader = prompt.get(str(vae[0])) if is_link(vae) else None
    name = inputs_of(loader).get("vae_name")
    return name if isinstance(name, str) else ""


def host_facts() -> dict[str, Any]:
    devices = render_devices()
    return {"comfyui": comfyui_version() or "not ComfyUI", "torch": torch.__version__,
            "device": devices[0]["type"] if devices else "unknown", "machine": platform.node()}


def _check_value(latent: Any, audio: Any) -> None:
    samples = latent.get("samples") if isinstance(latent, dict) else None
    if type(samples) is not torch.Tensor:
        kind = type(samples).__name__ if samples is not None else type(latent).__name__
        raise H3KitInputError(SAVE_DRAFT, "latent", kind, "expected a LATENT {'samples': tensor} of plain tensors",
                              DRAFT.value_fix)
    if audio is not None and (not isinstance(audio, dict) or type(audio.get("waveform")) is not torch.Tensor):
        raise H3KitInputError(SAVE_DRAFT, "audio", type(audio).__name__, "expected AUDIO {'waveform', 'sample_rate'}",
                              "connect the handoff's audio output (H3KitDraftToLTX), or leave it unconnected")


def _shape_summary(value: dict) -> dict[str, Any]:
    audio = value.get("audio")
    out: dict[str, Any] = {"latent": summarize_value(value["latent"])}
    if isinstance(audio, dict):
        wave = audio["waveform"]
        rate = audio.get("sample_rate")
        out["audio"] = {"waveform": summarize_value(wave), "sample_rate": rate,
                        "seconds": round(wave.shape[-1] / rate, 6) if isinstance(rate, (int, float)) and rate else None}
    else:
        out["audio"] = None
    return out


class H3KitSaveDraft:
    DISPLAY_NAME = "H3Kit Save Draft (stage 1 -> 2)"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Ends stage 1 of the split two-stage graph: saves what stage 2 needs - the latent LTX's VAEEncode made of the "
        "handoff's frames and the handoff's trimmed H3 audio - as one safetensors file in ComfyUI's output folder "
        f"(output/{DRAFT_FOLDER}), for H3KitLoadDraft on another GPU, process or machine. Why the latent and not the "
        "decoded frames: both are exact (stored bitwise, float32), but a 1344x768 clip's frames are 375 MB and its "
        "latent and audio 3.4 MB, under ComfyUI's 100 MB upload limit; the LTX VAE that encoded it decodes it in stage "
        "2 (its file name is recorded). Provenance (graph, seeds, sizes, host, pack version) is in the file's "
        "metadata. Never overwrites a file; never pickles."
    )
    FUNCTION = "save"
    OUTPUT_NODE = True
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("report",)
    OUTPUT_TOOLTIPS = ("JSON report: the written file, its size, shapes, seeds and the VAE that must decode it.",)

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "latent": ("LATENT", {"tooltip": "The LTX latent of the handoff's frames: VAEEncode(H3KitDraftToLTX "
                                      "frames, LTX video VAE). Stored bitwise."}),
                "filename_prefix": ("STRING", {"default": DRAFT_PREFIX, "tooltip":
                                    f"Where in ComfyUI's output folder: '{DRAFT_PREFIX}' writes "
                                    f"output/{DRAFT_FOLDER}/draft_<UTC time>.safetensors (a free name: never "
                                    "overwrites). Relative, no '..'."}),
            },
            "optional": {
                "audio": ("AUDIO", {"tooltip": "The handoff's trimmed H3 audio (H3KitDraftToLTX audio). It bypasses "
                                    "stage 2 and is muxed into the refined video."}),
            },
            "hidden": {"prompt": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    def save(self, latent: Any, filename_prefix: str = DRAFT_PREFIX, audio: Any = None, prompt: Any = None,
             unique_id: Any = None) -> dict:
        report = Report(SAVE_DRAFT)
        parts = _name_parts(SAVE_DRAFT, "filename_prefix", filename_prefix, "filename prefix", MAX_PREFIX_PARTS)
        folder = comfy_folder("output")
        _inside(folder, parts, SAVE_DRAFT, "filename_prefix", filename_prefix)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        try:
            path, facts = write_draft(folder.joinpath(*parts[:-1]), f"{parts[-1]}_{stamp}{DRAFT_SUFFIX}", latent, audio,
                                      report, prompt, unique_id)
        except CacheError as exc:
            raise H3KitInputError(SAVE_DRAFT, "filename_prefix", filename_prefix, exc.problem, exc.fix) from exc
        sub = "/".join(parts[:-1])
        report.set(status="written", file=f"{sub}/{path.name}" if sub else path.name, path=str(path),
                   bytes=path.stat().st_size, **facts)
        LOG.info("%s: wrote %s (%.2f MiB)", SAVE_DRAFT, path, path.stat().st_size / 2**20)
        text = report.json()
        return {"ui": {DRAFT_UI_KEY: [{"filename": path.name, "subfolder": sub, "type": "output"}], "text": [text]},
                "result": (text,)}


def write_draft(folder: Path, name: str, latent: Any, audio: Any, report: Report, prompt: Any = None,
                unique_id: Any = None) -> tuple[Path, dict[str, Any]]:
    """A draft file folder/name (or the next free name: never overwrites) holding `latent` and `audio` bitwise, with
    the provenance the stage-1 `prompt` gives; (where it landed, the facts for the report). H3KitInputError for a
    value a draft cannot hold, CacheError when the file cannot be written."""
    _check_value(latent, audio)
    value = {"latent": latent, "audio": audio}
    encoder = StructureEncoder(DRAFT)
    try:
        structure = encoder.encode(value)
        tables = json_tables(structure, encoder.records, "this draft", "a draft", DRAFT.value_fix)
    except CacheError as exc:
        raise H3KitInputError(SAVE_DRAFT, "latent", summarize_value(value), exc.problem, exc.fix) from exc
    facts = _graph_facts(prompt, unique_id)
    graph_text = json.dumps(prompt, sort_keys=True, separators=(",", ":")) if isinstance(prompt, dict) else ""
    sizes = {**_shape_summary(value), "graph": facts["sizes"]}
    metadata = {
        "h3kit_format": FORMAT_NAME, "h3kit_format_version": str(FORMAT_VERSION), **tables,
        "graph_sha256": hashlib.sha256(graph_text.encode()).hexdigest() if graph_text else "",
        "seeds": json.dumps(facts["seeds"], sort_keys=True), "sizes": json.dumps(sizes, sort_keys=True),
        "host": json.dumps(host_facts(), sort_keys=True), "latent_vae": facts["latent_vae"],
        "h3kit_version": pack_version(), "created_utc": utc_now(),
    }
    if len(graph_text.encode()) <= MAX_CACHE_JSON_BYTES:
        metadata["graph"] = graph_text
    else:
        report.warn(f"the stage-1 graph is {len(graph_text.encode()):,} bytes of JSON, over the "
                    f"{MAX_CACHE_JSON_BYTES:,} a draft keeps; only its sha256 is recorded")
    if audio is None:
        report.warn("no audio: the refined video will be silent (F21); connect the handoff's audio output")
    path = write_stored(folder / name, encoder.tensors, metadata, unique=True, input_name="filename_prefix")
    return path, {"seeds": facts["seeds"], "latent_vae": facts["latent_vae"], **sizes}


class H3KitLoadDraft:
    DISPLAY_NAME = "H3Kit Load Draft (stage 1 -> 2)"
    CATEGORY = CATEGORY
    DESCRIPTION = (
        "Starts stage 2 of the split two-stage graph: loads a draft written by H3KitSaveDraft (the LTX latent of the "
        "handoff's frames and the H3 audio, bitwise as saved) from ComfyUI's input folder, where /upload/image puts "
        f"it (`run --stage1-server A --stage2-server B` uploads to input/{DRAFT_FOLDER}). Names never leave the input "
        "folder; the file's header is checked against its caps before anything is read; never unpickles. Warns when "
        "this graph decodes the latent with another VAE file than the one that encoded it."
    )
    FUNCTION = "load"
    RETURN_TYPES = ("LATENT", "AUDIO", "STRING")
    RETURN_NAMES = ("latent", "audio", "provenance")
    OUTPUT_TOOLTIPS = (
        "The LTX latent stage 1 encoded, bitwise: connect it where VAEEncode's latent went (LTXVLatentUpsampler).",
        "The H3 audio trimmed to the kept frames (None when stage 1 had none): connect it to CreateVideo.",
        "JSON: file, seeds, sizes, host, pack version, the encoding VAE, and what this load found.",
    )

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                DRAFT_INPUT: (host_choices(LOAD_DRAFT, DRAFT_INPUT, available_drafts), {"tooltip":
                              f"A draft in ComfyUI's input folder or its {DRAFT_FOLDER}/ subfolder (written by "
                              "H3KitSaveDraft, uploaded by `run` or /upload/image). Press R to refresh the list."}),
            },
            "hidden": {"prompt": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def IS_CHANGED(cls, draft: str = "", **_: Any) -> str:
        """A new value whenever the file is replaced, so ComfyUI never reuses another draft's outputs."""
        try:
            return file_signature(draft_path(draft))
        except (H3KitInputError, HostUnavailable) as exc:
            return f"unusable: {exc}"

    @classmethod
    def VALIDATE_INPUTS(cls, draft: str) -> bool | str:
        """Checked when the prompt is queued (names, folder, header and caps): a message instead of a failed run.
        ComfyUI then leaves the file list to this check, so an upload's new name is accepted at once."""
        try:
            check_cache_header(draft_path(draft), DRAFT)
        except H3KitInputError as exc:
            return str(exc)
        except CacheError as exc:
            return str(H3KitInputError(LOAD_DRAFT, DRAFT_INPUT, draft, exc.problem, exc.fix))
        except HostUnavailable as exc:
            return str(exc)
        return True

    def load(self, draft: str, prompt: Any = None, unique_id: Any = None) -> tuple[dict, Any, str]:
        report = Report(LOAD_DRAFT)
        path = draft_path(draft)
        try:
            stored = read_stored(path, DRAFT)
        except CacheError as exc:
            raise H3KitInputError(LOAD_DRAFT, DRAFT_INPUT, draft, exc.problem, exc.fix) from exc
        value = stored.value
        latent = value.get("latent") if isinstance(value, dict) else None
        audio = value.get("audio") if isinstance(value, dict) else None
        if not isinstance(latent, dict) or type(latent.get("samples")) is not torch.Tensor or not (
                audio is None or isinstance(audio, dict) and isinstance(audio.get("waveform"), torch.Tensor)):
            raise H3KitInputError(LOAD_DRAFT, DRAFT_INPUT, draft, f"{path} does not hold a latent and an audio "
                                  f"({summarize_value(value)})", DRAFT.rebuild_fix())
        metadata = stored.metadata
        encoded_by = metadata.get("latent_vae", "")
        decoders = _decoder_vaes(prompt, unique_id)
        if encoded_by and decoders and encoded_by not in decoders:
            report.warn(f"the latent was encoded by VAE '{encoded_by}' but this graph decodes it with "
                        f"{', '.join(sorted(decoders))}: a latent decoded by another VAE is noise unless the files hold "
                        "the same weights (an fp16 copy of the same VAE is fine)")
        if audio is None:
            report.warn("the draft has no audio: the refined video will be silent (F21)")
        info = {key: _json_or_text(metadata.get(key, "")) for key in
                ("seeds", "sizes", "host", "latent_vae", "graph_sha256", "h3kit_version", "created_utc")}
        report.set(status="loaded", file=str(path), bytes=path.stat().st_size, decoders=sorted(decoders),
                   format_version=int(metadata["h3kit_format_version"]), **info)
        LOG.info("%s: loaded %s", LOAD_DRAFT, path)
        return latent, audio, report.json()


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text) if text[:1] in ("{", "[") else text
    except ValueError:
        return text


def _decoder_vaes(prompt: Any, unique_id: Any) -> set[str]:
    """The vae_name of each VAELoader feeding a node that takes this node's latent (upsampler, decoder)."""
    if not isinstance(prompt, dict):
        return set()
    names = set()
    for node in prompt.values():
        inputs = inputs_of(node)
        takes = any(is_link(v) and str(v[0]) == str(unique_id) and v[1] == 0 for v in inputs.values())
        vae = inputs.get("vae")
        loader = prompt.get(str(vae[0])) if takes and is_link(vae) else None
        name = inputs_of(loader).get("vae_name")
        if isinstance(name, str):
            names.add(name)
    return names


NODES = [H3KitSaveDraft, H3KitLoadDraft]
