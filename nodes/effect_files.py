"""Effect files: where they are, what they must be, and their rows - one home for every effect path.

An effect reaches H3 two ways: a file chosen in H3KitEffectPrompt / H3KitEffectSplice (effects.py), and an
`embedding:<name>` marker typed into any prompt that the clip output's tokenizer resolves (effect_tokens.py). Both
pass the same checks, from here, before any row is read:

- `check_layout`: one 2-D tensor [N, 5120] (the Qwen3-VL-32B token width), 1 <= N <= MAX_EFFECT_ROWS, a float dtype,
  from the safetensors header alone (a .pt/.bin: its file size first, then torch.load weights_only=True);
- `checked_rows`: the rows as read, the same layout again (the file may have changed) and every value finite;
- per prompt, at most MAX_MARKERS_PER_PROMPT markers and MAX_PROMPT_EFFECT_ROWS rows in all (`check_prompt_budget`).

`EmbeddingIndex` lists the embeddings folders once per prompt (a bounded walk: MAX_WALK_FOLDERS folders,
MAX_WALK_DEPTH levels, each real folder once) and resolves every marker of that prompt the way ComfyUI's load_embed
does (each folder and subfolder; the name as given, then + .safetensors / .pt / .bin), without walking again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..adapters.log import log_once
from ..adapters.safetensors_file import SafetensorsHeaderError, read_header
from ..checks import facts
from .common import H3KitInputError

H3_WIDTH = facts.H3_EMBEDDING_WIDTH
H3_EMBED_KEY = "qwen3vl_32b"  # the tensor name the H3 tokenizer prefers inside an embedding file
EXTENSIONS = (".safetensors", ".pt", ".bin")  # the ones ComfyUI's load_embed tries for a bare name
MAX_WALK_FOLDERS = 10_000  # documented limits of the embeddings folder scan (docs/security.md)
MAX_WALK_DEPTH = 32
MAX_WALK_FILES = 10_000  # files listed by one walk: the effect lists are read in /object_info, on ComfyUI's loop
MAX_EFFECT_ROWS = 1024  # rows (prompt tokens) of one effect; the ten published ones total 10.7 MB (field-notes §D)
MAX_EFFECT_HEADER_BYTES = 2**20  # an effect file's safetensors header: one tensor and a little metadata
MAX_MARKERS_PER_PROMPT = 16  # embedding: markers in one prompt (the nodes place at most 3)
MAX_PROMPT_EFFECT_ROWS = 4096  # effect rows in one prompt, all markers together (80 MiB as float32)
FLOAT_DTYPES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
TORCH_CODES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32",
               "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3",
               "float8_e5m2": "F8_E5M2", "complex64": "C64"}
FIX_EFFECT_FILE = "use an H3 effect file ([N, 5120] float rows, at most 1,024)"

# Token widths of ComfyUI text encoders (embedding_size in comfy/text_encoders/*.py, v0.3.64 and NEW).
KNOWN_WIDTHS = {
    facts.H3_EMBEDDING_WIDTH: "Qwen3-VL-32B (MiniMax-H3)",
    4096: "T5-XXL / UMT5-XXL / Llama (Flux, SD3, Wan, LTX-Video 0.9, HunyuanVideo)",
    3840: "Gemma-3-12B (LTX-2.x text encoder)",
    3584: "Qwen2.5-VL-7B (Qwen-Image)",
    2560: "Gemma-3-4B",
    2304: "Gemma-2-2B (Lumina 2)",
    2048: "Pile-T5-XL / mT5-XL / Qwen2.5-VL-3B (AuraFlow, HunyuanDiT, OmniGen2)",
    1280: "CLIP-G (SDXL)",
    1024: "CLIP-H (SD 2.x)",
    768: "CLIP-L (SD 1.x / SDXL / Flux)",
}


def width_hint(width: int) -> str:
    known = KNOWN_WIDTHS.get(width)
    return f"{width} is the token width of {known}" if known else f"{width} matches no known text encoder"


# ------------------------------------------------------------------------------------------- the folder walk
@dataclass
class FolderWalk:
    folders: list[str]  # paths of the folders visited (each real folder once)
    files: list[str]  # files kept, relative POSIX names
    stopped: str = ""  # why the walk stopped early, or ""


def _embedding_name(name: str) -> bool:
    return name.lower().endswith(EXTENSIONS)


def walk_embeddings(root: Path, keep: Callable[[str], bool] = _embedding_name) -> FolderWalk:
    """Every folder and kept file (embedding files by default) under `root`, in os.walk's order, following links as
    ComfyUI does but visiting each real folder once (a link loop ends there) and at most MAX_WALK_FOLDERS folders,
    MAX_WALK_DEPTH deep, MAX_WALK_FILES files kept: a huge or looping tree costs bounded time, and the cut is
    reported, never hidden."""
    walk = FolderWalk([], [])
    seen: set[tuple[int, int] | str] = set()
    stack = [(str(root), "", 0)]
    while stack:
        folder, rel, depth = stack.pop()
        real = _identity(folder)
        if real is None or real in seen:
            continue
        if len(walk.folders) >= MAX_WALK_FOLDERS:
            walk.stopped = f"stopped after {MAX_WALK_FOLDERS} folders under {root}"
            break
        seen.add(real)
        walk.folders.append(folder)
        subfolders = []
        for entry in _entries(folder):
            if _is_folder(entry):
                subfolders.append((entry.path, f"{rel}{entry.name}/", depth + 1))
            elif keep(entry.name) and _is_file(entry):
                if len(walk.files) >= MAX_WALK_FILES:
                    walk.stopped = f"stopped after {MAX_WALK_FILES} files under {root}"
                    return walk
                walk.files.append(rel + entry.name)
        if subfolders and depth >= MAX_WALK_DEPTH:
            walk.stopped = f"did not enter folders more than {MAX_WALK_DEPTH} levels below {root}"
            continue
        stack.extend(reversed(subfolders))
    return walk


def _entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as exc:
        _cannot_list(folder, exc)
        return []


def _identity(folder: str) -> tuple[int, int] | str | None:
    """The real folder behind a path, as (device, inode): one stat, where realpath looks at every component of the
    path (10,000 folders: 111 ms by realpath on the 2-core machine, and the walk runs in /object_info). A file
    system that reports no inode (0: some network and FAT drives on Windows) is known by its realpath instead."""
    try:
        status = os.stat(folder)
    except OSError as exc:
        _cannot_list(folder, exc)
        return None
    return (status.st_dev, status.st_ino) if status.st_ino else os.path.realpath(folder)


def _cannot_list(folder: str, exc: OSError) -> None:
    log_once(f"effects-scan:{folder}", f"H3Kit effects: cannot list {folder} ({exc.strerror or exc}); skipped")


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # follows links; a dangling or self-referencing link is no folder
    except OSError:
        return False


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()  # follows links; a FIFO or a device is no file (ComfyUI's isfile says the same)
    except OSError:
        return False


def logged_walks(roots: Iterable[Path | str], keep: Callable[[str], bool] = _embedding_name) -> list[FolderWalk]:
    """walk_embeddings of every existing root; a walk cut short is logged once."""
    walks = [walk_embeddings(Path(root), keep) for root in roots if os.path.isdir(root)]
    for walk in walks:
        if walk.stopped:
            log_once(f"effects-walk:{walk.stopped}", f"H3Kit effects: {walk.stopped}; files further down are not "
                     "listed (move effect files nearer the top of models/embeddings)")
    return walks


def inside(folder: str | Path, candidate: str) -> bool:
    # abspath, not realpath: a link inside the folder is the user's choice (ComfyUI's load_embed does the same)
    folder_abs = os.path.abspath(folder)
    try:
        return os.path.commonpath((folder_abs, os.path.abspath(candidate))) == folder_abs
    except ValueError:  # different drives on Windows
        return False


@dataclass
class EmbeddingIndex:
    """The embeddings folders of one prompt, walked once: every folder (absolute, as walked) and every regular file by
    its name. `candidates(name)` answers what load_embed would look at for `embedding:<name>` without walking again."""
    roots: list[str]
    folders: set[str] = field(default_factory=set)
    files: dict[str, list[str]] = field(default_factory=dict)  # file name -> absolute paths
    stopped: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, roots: Iterable[Path | str] | str | None) -> EmbeddingIndex:
        if roots is None:
            roots = []
        elif isinstance(roots, (str, Path)):
            roots = [roots]
        index = cls([os.path.abspath(root) for root in roots])
        for root in index.roots:
            for walk in logged_walks([root], keep=lambda _name: True):
                index.folders.update(walk.folders)  # absolute: joined onto the absolute root
                for rel in walk.files:
                    path = os.path.join(root, *rel.split("/"))
                    index.files.setdefault(os.path.basename(path), []).append(path)
                if walk.stopped:
                    index.stopped.append(walk.stopped)
        return index

    def candidates(self, name: str) -> list[str]:
        """The real paths of every file load_embed could pick for `name` (it searches the folders in no fixed order;
        in each, the name as given, else + .safetensors, .pt, .bin)."""
        if not name or "\x00" in name:
            return []
        tries = (name, *(name + ext for ext in EXTENSIONS))
        relative = os.path.normpath(name)
        if os.path.isabs(name) or relative.split(os.sep)[0] in ("..", "."):
            per_folder = self._lookup_each_folder(tries)
        else:
            per_folder = self._lookup_by_name(relative, tries)
        return sorted({os.path.realpath(path) for path in per_folder.values()})

    def _lookup_by_name(self, relative: str, tries: tuple[str, ...]) -> dict[str, str]:
        """A plain relative name: a file `<folder>/<name>[ext]` found by its last part, its folder then checked."""
        chosen: dict[str, tuple[int, str]] = {}
        for rank, tried in enumerate(tries):
            suffix = os.sep + os.path.normpath(tried)
            for path in self.files.get(os.path.basename(os.path.normpath(tried)), ()):
                folder = path[:-len(suffix)] if path.endswith(suffix) else None
                if folder in self.folders and (folder not in chosen or rank < chosen[folder][0]):
                    chosen[folder] = (rank, path)
        return {folder: path for folder, (_rank, path) in chosen.items()}

    def _lookup_each_folder(self, tries: tuple[str, ...]) -> dict[str, str]:
        """A name with '..' or an absolute one: load_embed's own rule, folder by folder (the prompt's markers are
        capped, so this stays bounded)."""
        known = {path for paths in self.files.values() for path in paths}
        found = {}
        for folder in self.folders:
            for tried in tries:
                path = os.path.abspath(os.path.join(folder, tried))
                if path in known and inside(folder, path):
                    found[folder] = path
                    break
        return found


# ------------------------------------------------------------------------------------------- the checks
@dataclass(frozen=True)
class EffectInfo:
    name: str  # the combo value (relative to its embeddings folder) or the marker
    path: Path
    rows: int
    width: int
    dtype: str
    tensor: str | None  # tensor name inside a safetensors file

    def summary(self) -> dict[str, Any]:
        return {"file": self.name, "rows": self.rows, "width": self.width, "dtype": self.dtype}


def dtype_code(dtype: Any) -> str:
    """'BF16' for 'BF16', 'bfloat16' or torch.bfloat16: the safetensors code, or the name as given."""
    text = str(dtype).removeprefix("torch.")
    return TORCH_CODES.get(text, text)


def check_layout(node: str, input_name: str, name: str, path: Path, shape: list[int], dtype: Any,
                 tensor: str | None) -> EffectInfo:
    """The one layout check of an effect, before its rows are read: 2-D [N, 5120], 1 <= N <= MAX_EFFECT_ROWS, a
    float dtype."""
    if len(shape) != 2:
        raise H3KitInputError(node, input_name, name,
                              f"the tensor has shape {shape}: an effect is 2-D [N, {H3_WIDTH}] (N rows of conditioning tokens)",
                              f"use an H3 effect file; a single vector needs reshaping to [1, {H3_WIDTH}]")
    rows, width = shape
    if width != H3_WIDTH:
        raise H3KitInputError(node, input_name, name,
                              f"rows are {width} wide; {width_hint(width)}, while the MiniMax-H3 encoder needs {H3_WIDTH} "
                              "(ComfyUI would drop it with only a 'shape mismatch' log line)",
                              f"use an effect made for MiniMax-H3 ([N, {H3_WIDTH}]); this one belongs to another model")
    if rows < 1:
        raise H3KitInputError(node, input_name, name, "the tensor has 0 rows", "use a non-empty effect file")
    if rows > MAX_EFFECT_ROWS:
        raise H3KitInputError(node, input_name, name, f"the tensor has {rows:,} rows; an effect has at most "
                              f"{MAX_EFFECT_ROWS:,} (each row is one prompt token)", "use an H3 effect file")
    code = dtype_code(dtype)
    if code not in FLOAT_DTYPES:
        raise H3KitInputError(node, input_name, name, f"the tensor{f' {tensor!r}' if tensor else ''} has dtype "
                              f"{code}, not a float type (an effect's rows are token embeddings)",
                              "use an effect file with F16, BF16 or F32 rows")
    return EffectInfo(name, path, rows, width, code, tensor)


def checked_rows(node: str, input_name: str, info: EffectInfo, rows: torch.Tensor) -> torch.Tensor:
    """The one check of rows as read, on every path: the layout again (the file may have changed since its header
    was read: the same shape as then) and every value finite. The rows as float32 (the dtype ComfyUI splices in)."""
    check_layout(node, input_name, info.name, info.path, list(rows.shape), rows.dtype, info.tensor)
    if tuple(rows.shape) != (info.rows, info.width):
        raise H3KitInputError(node, input_name, info.name, f"file changed while reading (shape {list(rows.shape)})",
                              "run the node again")
    rows = rows.to(torch.float32)
    finite = torch.isfinite(rows)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise H3KitInputError(node, input_name, info.name, f"{bad:,} of its {rows.numel():,} values are NaN or "
                              "infinite, which would spread to the whole video", "use an intact H3 effect file")
    return rows


def check_prompt_budget(node: str, input_name: str, markers: int, rows: int = 0) -> None:
    """At most MAX_MARKERS_PER_PROMPT markers and MAX_PROMPT_EFFECT_ROWS effect rows in one prompt (before any is
    read: a prompt of 100,000 markers is refused from its text)."""
    if markers > MAX_MARKERS_PER_PROMPT:
        raise H3KitInputError(node, input_name, f"{markers:,} embedding: markers",
                              f"the prompt holds {markers:,} embedding: markers; a prompt takes at most "
                              f"{MAX_MARKERS_PER_PROMPT}", "keep a few effects per prompt")
    if rows > MAX_PROMPT_EFFECT_ROWS:
        raise H3KitInputError(node, input_name, f"{rows:,} effect rows",
                              f"the prompt's effects hold {rows:,} rows together; a prompt takes at most "
                              f"{MAX_PROMPT_EFFECT_ROWS:,}", "use fewer or shorter effects in one prompt")


# ------------------------------------------------------------------------------------------- reading
def _pick_tensor(names: list[str]) -> str | None:
    """Which tensor ComfyUI's load_embed uses for H3: the one keyed qwen3vl_32b, else the only one."""
    if H3_EMBED_KEY in names:
        return H3_EMBED_KEY
    return names[0] if len(names) == 1 else None


def inspect_file(node: str, input_name: str, name: str, path: Path) -> EffectInfo:
    """Check the effect file at `path` without reading its rows (safetensors: header only; .pt/.bin: its size, then
    torch.load weights_only=True)."""
    if path.suffix.lower() == ".safetensors":
        return _inspect_safetensors(node, input_name, name, path)
    tensor = _legacy_tensor(node, input_name, name, path)
    return check_layout(node, input_name, name, path, list(tensor.shape), tensor.dtype, None)


def _inspect_safetensors(node: str, input_name: str, name: str, path: Path) -> EffectInfo:
    try:
        header = read_header(path, MAX_EFFECT_HEADER_BYTES)  # the library's rules: truncated or overlapping is refused
    except (OSError, SafetensorsHeaderError) as exc:
        raise H3KitInputError(node, input_name, name, f"not a readable safetensors file ({exc})",
                              "download the effect file again") from exc
    chosen = _pick_tensor(sorted(header.tensors))
    if chosen is None:
        names = sorted(header.tensors)
        raise H3KitInputError(node, input_name, name,
                              f"holds {len(names)} tensors ({', '.join(names[:6]) or 'none'}) and none is named '{H3_EMBED_KEY}'",
                              f"use an effect file with one tensor, or name the effect tensor '{H3_EMBED_KEY}'")
    entry = header.tensors[chosen]
    return check_layout(node, input_name, name, path, list(entry.shape), entry.dtype, chosen)


def _legacy_tensor(node: str, input_name: str, name: str, path: Path) -> torch.Tensor:
    """The embedding inside a .pt/.bin file, loaded without pickle code (weights_only=True); a file larger than
    MAX_EFFECT_ROWS float64 rows could ever be is refused before it is loaded."""
    most = MAX_EFFECT_ROWS * H3_WIDTH * 8 + 2**20
    if path.stat().st_size > most:
        raise H3KitInputError(node, input_name, name, f"the file is {path.stat().st_size:,} bytes; an effect of "
                              f"{MAX_EFFECT_ROWS:,} rows is at most {most:,}", "use an H3 effect file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad or unsafe file
        raise H3KitInputError(node, input_name, name,
                              f"cannot be read safely ({type(exc).__name__}: {str(exc)[:160]})",
                              "convert it to .safetensors; H3Kit never unpickles code") from exc
    if isinstance(obj, dict) and isinstance(obj.get("string_to_param"), dict):  # A1111 textual inversion
        obj = next(iter(obj["string_to_param"].values()), None)
    elif isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if torch.is_tensor(v)}
        key = _pick_tensor(sorted(tensors))
        obj = tensors.get(key) if key else None
    if not torch.is_tensor(obj):
        raise H3KitInputError(node, input_name, name, "holds no single embedding tensor",
                              f"save the [N, {H3_WIDTH}] rows alone (or under '{H3_EMBED_KEY}') as .safetensors")
    return obj


def load_rows(node: str, input_name: str, info: EffectInfo) -> torch.Tensor:
    """The [N, 5120] rows of a checked file as float32, through `checked_rows`. A safetensors tensor's shape and
    dtype are read again from the opened file before its data (a file replaced since is refused unread)."""
    if info.tensor is not None:
        from safetensors import safe_open

        with safe_open(str(info.path), framework="pt", device="cpu") as handle:
            part = handle.get_slice(info.tensor)
            check_layout(node, input_name, info.name, info.path, list(part.get_shape()), part.get_dtype(), info.tensor)
            rows = handle.get_tensor(info.tensor)
    else:
        rows = _legacy_tensor(node, input_name, info.name, info.path)
    return checked_rows(node, input_name, info, rows)
