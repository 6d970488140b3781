"""The H3Kit conditioning-cache file format: a CONDITIONING value as safetensors plus JSON metadata.

Pure (de)serialisation with no ComfyUI import, shared by the nodes in conditioning_cache.py and the
`cond` command line. Nothing here ever unpickles.

The value encoding, the bounded reader and the atomic writer are generic over a `StoredKind` (its format name and
version, its byte cap, what the user is told): the conditioning cache is CONDITIONING, the two-stage draft
(nodes/draft.py) another kind, so both share one reader and every header, JSON and tensor limit below.

File layout (format version 1): a standard safetensors file. Every tensor found anywhere in the
conditioning (main tensors, pooled_output, attention masks, tensors nested in lists/dicts such as
H3's minimax_keyframes / minimax_refs) is stored once under a key "t<N>". The string metadata holds:
  h3kit_format ("h3kit.conditioning"), h3kit_format_version ("1"),
  structure   JSON of the whole value; tensors appear as {"$tensor": "t0"}, and the JSON-less values
              as tagged objects: {"$float": "inf"|"-inf"|"nan", "bits": ...}, {"$tuple": [...]},
              {"$size": [...]} (torch.Size), {"$dict": [[key, value], ...]} (non-string or "$" keys),
  tensors     JSON {"t0": {"path": "[0][0]", "dtype": "bfloat16", "shape": [...], "crc32": "..."}},
  encoder, prompt_text, prompt_sha256, h3kit_version, created_utc.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from re import compile as regex
from typing import Any

import torch

from ..adapters import bounded_json
from ..adapters.files import TargetExists, atomic_write, name_problem, open_regular, os_reason
from ..adapters.safetensors_file import (
    SafetensorsHeader,
    SafetensorsHeaderError,
    TensorEntry,
    header_length,
    other_kind,
    parse_header,
)
from ..adapters.safetensors_file import read_header as read_safetensors_header
from ..checks.filetypes import HEAD_BYTES, FileKind
from ..checks.invocation import command
from ..checks.problem import printable

FORMAT_NAME = "h3kit.conditioning"
FORMAT_VERSION = 1
FILE_SUFFIX = ".safetensors"
MAX_CACHE_BYTES = 16 * 2**30  # documented limit (docs/security.md): checked before anything is allocated
MAX_STRUCTURE_DEPTH = 64  # a CONDITIONING nests about 6 levels; the bound keeps decoding off the stack limit
# Checked before anything is read or parsed: an encoded prompt's cache has a header of kilobytes (plus the prompt
# text), a few tensors of rank <= 4 whose sides are token counts and widths.
MAX_CACHE_HEADER_BYTES = 16 * 2**20
MAX_CACHE_JSON_BYTES = 2**20  # each of the 'structure' and 'tensors' metadata entries
MAX_TENSOR_RANK = 8
MAX_TENSOR_DIM = 2**31 - 1  # one side; [0, 2**64-1] holds no data but no torch tensor can have that shape
# Bytes a cache may hold beyond the storage its tensors really have. A view can repeat its data (stride 0, overlapping
# strides): a 1.8 KB .pt holding torch.zeros(1).expand(2**29) became a 2 GiB cache. Materialised sizes are summed and
# checked against the distinct storages' bytes plus this, before anything is copied; a text encoder's output holds
# no repeating views, small expanded masks fit.
MAX_EXPANSION_BYTES = 64 * 2**20
VERSION_TEXT = regex(r"[0-9]{1,9}")


def rebuild_fix() -> str:
    """How to replace a damaged cache: save it again over the file (never "delete it": it may be the user's)."""
    return (f"save the conditioning again over it (H3KitSaveConditioning with overwrite on, or "
            f"`{command('cond build ... --overwrite')}`)")


def not_a_cache(path: Path, kind: FileKind) -> CacheError:
    """A file that is something else entirely (an image, a model, a torch.save pickle), named as what it is."""
    if kind.key in ("torch_zip", "pickle"):
        return CacheError(f"{path} is {kind.text}, not safetensors; H3Kit never unpickles files, because loading a "
                          "pickle can run arbitrary code",
                          f"convert it once with `{command('cond import FILE NAME')}` (torch.load weights_only=True), "
                          "or encode the prompt again")
    return CacheError(f"{path} is {kind.text}, not an H3Kit conditioning cache (a .safetensors file written by "
                      "H3KitSaveConditioning)",
                      f"choose a cache file (`{command('cond list')}` shows the cache folder's files); make one with "
                      f"H3KitSaveConditioning or `{command('cond build')}`")


# safetensors dtype code <-> torch dtype, limited to what this torch build has.
_DTYPE_CODES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
CODE_TO_DTYPE: dict[str, torch.dtype] = {
    code: getattr(torch, name) for code, name in _DTYPE_CODES.items() if hasattr(torch, name)
}
STORABLE_DTYPES = set(CODE_TO_DTYPE.values())


class CacheError(ValueError):
    """A problem with a cache name, file or value; `problem` and `fix` are shown to the user."""

    def __init__(self, problem: str, fix: str, input_name: str = ""):
        # a path or a name quoted from outside: one escaped line in the CLI, the node's error and the log
        self.problem, self.fix, self.input_name = printable(problem), printable(fix), input_name
        super().__init__(f"{self.problem}. Fix: {self.fix}")


@dataclass(frozen=True)
class StoredKind:
    """One kind of H3Kit safetensors file written by this module: what its metadata says it is, its cap, and what the
    user is told when a file of it is damaged, foreign, or a value cannot be stored in it."""

    format_name: str  # the 'h3kit_format' metadata value
    format_version: int
    max_bytes: int  # tensor data; checked from the header before anything is allocated
    noun: str  # "an H3Kit conditioning cache"
    typical: str  # how big one usually is, for the message when a file is over max_bytes
    rebuild_fix: Callable[[], str]  # how to replace a damaged file (never "delete it": it may be the user's)
    value_fix: str  # what to do when the value holds something a file cannot hold
    not_kind: Callable[[Path, FileKind], CacheError]  # a file that is something else entirely (a PNG, a pickle)
    foreign: Callable[[Path, list[str]], CacheError]  # a safetensors file without this kind's format metadata


def _foreign_cache(path: Path, names: list[str]) -> CacheError:
    hint = ""
    if any(n.startswith("conditioning_data_") for n in names):
        hint = " It looks like a Lightricks LTXVSaveConditioning file: load it with LTXVLoadConditioning."
    shown = ", ".join(repr(n)[1:-1][:60] for n in names[:5])
    return CacheError(
        f"{path} is a safetensors file but not an H3Kit conditioning cache (no h3kit_format metadata; "
        f"tensors: {shown}{' ...' if len(names) > 5 else ''}).{hint}",
        "move model files out of the conditioning_cache folder; create caches with H3KitSaveConditioning",
    )


CONDITIONING = StoredKind(
    FORMAT_NAME, FORMAT_VERSION, MAX_CACHE_BYTES, "an H3Kit conditioning cache", "an encoded prompt is a few MiB",
    rebuild_fix,
    "cache the conditioning straight from the text encoder, before nodes that attach objects "
    "(hooks, control nets, areas with masks), and apply those nodes after H3KitLoadConditioning",
    not_a_cache, _foreign_cache)


# ---------------------------------------------------------------------------------------------- names


class _NameError(CacheError):
    def __init__(self, problem: str, fix: str):
        super().__init__(problem, fix, input_name="name")


def cache_file_name(name: str) -> str:
    """'ltx_generic_refine' or 'ltx_generic_refine.safetensors' -> 'ltx_generic_refine.safetensors'.

    Names are plain file names: they can never leave the cache folder or hide from the file list.
    """
    if not isinstance(name, str):
        raise _NameError(f"the name must be text, got {type(name).__name__}", "type a file name such as ltx_generic_refine")
    has_suffix = name.lower().endswith(FILE_SUFFIX)
    stem, suffix = (name[: -len(FILE_SUFFIX)], name[-len(FILE_SUFFIX) :]) if has_suffix else (name, FILE_SUFFIX)
    example = "use a plain file name such as ltx_generic_refine"
    if not stem:
        raise _NameError("the name is empty", example)
    if "/" in stem or "\\" in stem:
        raise _NameError("the name contains a path separator; caches live directly in the conditioning_cache folder", example)
    if stem.startswith("."):
        raise _NameError("the name starts with '.', which makes a hidden file or a relative path ('..')", example)
    file_name = stem + suffix  # a listed 'X.SAFETENSORS' must resolve to itself on case-sensitive disks
    problem = name_problem(stem) or name_problem(file_name)
    if problem is not None:
        raise _NameError(f"the name {problem}", "choose another name: letters, digits, '-', '_' and '.'")
    return file_name


def list_cache_names(folders: list[Path]) -> list[str]:
    """Every visible *.safetensors file name directly in `folders` (first folder wins), sorted."""
    names: set[str] = set()
    for folder in folders:
        if not folder.is_dir():
            continue
        try:
            with os.scandir(folder) as entries:
                names.update(entry.name for entry in entries if _visible_cache_file(entry))
        except OSError as exc:
            raise CacheError(f"the cache folder {folder} cannot be listed ({exc.strerror or exc})",
                             "check the folder's permissions") from exc
    return sorted(names)


def _visible_cache_file(entry: os.DirEntry) -> bool:
    if not entry.name.lower().endswith(FILE_SUFFIX) or entry.name.startswith("."):
        return False
    try:
        return entry.is_file()
    except OSError:  # a link into an unreadable place: listed by nothing, like a missing file
        return False


def find_cache_file(folders: list[Path], name: str) -> Path | None:
    file_name = cache_file_name(name)
    for folder in folders:
        candidate = folder / file_name
        if candidate.is_file():
            return candidate
    return None


def file_signature(path: Path) -> str:
    """Changes whenever the file is replaced or edited (mtime and size); 'absent' when it is not there."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "absent"
    return hashlib.sha256(f"{path}|{stat.st_mtime_ns}|{stat.st_size}".encode()).hexdigest()


# ---------------------------------------------------------------------------------------- encoding


def key_path(path: tuple) -> str:
    return "".join(f"[{step!r}]" for step in path) or "(top level)"


class StructureEncoder:
    """Turns a nested value into JSON-safe data, collecting tensors (each distinct tensor object once); `kind` says
    what the file is for in messages about a value it cannot hold."""

    def __init__(self, kind: StoredKind = CONDITIONING) -> None:
        self.kind = kind
        self.tensors: dict[str, torch.Tensor] = {}
        self.records: dict[str, dict[str, Any]] = {}
        self._key_by_id: dict[int, str] = {}

    def encode(self, value: Any, path: tuple = ()) -> Any:
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return _encode_float(value)
        if isinstance(value, torch.Tensor):
            return {"$tensor": self._add_tensor(value, path)}
        if kind is list:
            return [self.encode(item, (*path, i)) for i, item in enumerate(value)]
        if kind is tuple:
            return {"$tuple": [self.encode(item, (*path, i)) for i, item in enumerate(value)]}
        if kind is torch.Size:
            return {"$size": list(value)}
        if kind is dict:
            return self._encode_dict(value, path)
        raise CacheError(
            f"the value at {key_path(path)} is a {kind.__module__}.{kind.__qualname__}, which a cache file cannot "
            "hold (only tensors, numbers, strings, booleans, None, lists, tuples and dicts)",
            self.kind.value_fix,
        )

    def _encode_dict(self, value: dict, path: tuple) -> Any:
        plain = all(type(k) is str and not k.startswith("$") for k in value)
        if plain:
            return {k: self.encode(v, (*path, k)) for k, v in value.items()}
        pairs = []
        for k, v in value.items():
            if not (k is None or type(k) in (bool, int, float, str, tuple)):
                raise CacheError(f"the dict at {key_path(path)} has a key of type {type(k).__name__}",
                                 "use string or number keys")
            pairs.append([self.encode(k, (*path, f"<key {k!r}>")), self.encode(v, (*path, k))])
        return {"$dict": pairs}

    def _add_tensor(self, tensor: torch.Tensor, path: tuple) -> str:
        if id(tensor) in self._key_by_id:  # the same object twice stays one object after loading
            return self._key_by_id[id(tensor)]
        where = key_path(path)
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
            raise CacheError(f"the tensor at {where} is a {type(tensor).__name__} (a tensor subclass), whose "
                             "extra state a cache file cannot hold", self.kind.value_fix)
        if tensor.layout != torch.strided or tensor.is_meta:
            raise CacheError(f"the tensor at {where} is {'a meta' if tensor.is_meta else 'a sparse'} tensor",
                             "cache a dense tensor with real data")
        if not storable_shape(tensor.shape):
            raise CacheError(f"the tensor at {where} has shape {list(tensor.shape)}; a cache tensor has at most "
                             f"{MAX_TENSOR_RANK} sides of at most {MAX_TENSOR_DIM:,} each", self.kind.value_fix)
        if tensor.dtype not in STORABLE_DTYPES:
            raise CacheError(f"the tensor at {where} has dtype {tensor.dtype}, which safetensors cannot hold",
                             "convert it to a float or integer dtype before saving")
        # An owned, contiguous CPU copy: safetensors refuses views that share memory with another tensor.
        owned = tensor.detach().to("cpu").clone(memory_format=torch.contiguous_format)
        key = f"t{len(self.tensors)}"
        self._key_by_id[id(tensor)] = key
        self.tensors[key] = owned
        self.records[key] = {
            "path": where,
            "dtype": dtype_name(owned.dtype),
            "shape": list(owned.shape),
            "crc32": f"{zlib.crc32(tensor_bytes(owned)):08x}",
        }
        return key


def _encode_float(value: float) -> Any:
    if math.isfinite(value):
        return value
    if math.isnan(value):  # keep the exact NaN bit pattern
        return {"$float": "nan", "bits": struct.pack(">d", value).hex()}
    return {"$float": "inf" if value > 0 else "-inf"}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """The raw bytes of a contiguous CPU tensor, without a copy."""
    flat = tensor.reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def check_conditioning_shape(conditioning: Any) -> None:
    """A CONDITIONING is a non-empty list of [tensor, dict] entries."""
    if not isinstance(conditioning, list) or not conditioning:
        raise CacheError(f"expected a CONDITIONING (a non-empty list of [tensor, dict] entries), got "
                         f"{type(conditioning).__name__}" + (" (empty)" if conditioning == [] else ""),
                         "connect the output of a text encode node (e.g. CLIPTextEncode)")
    for i, entry in enumerate(conditioning):
        ok = isinstance(entry, (list, tuple)) and len(entry) == 2
        if not (ok and isinstance(entry[0], torch.Tensor) and isinstance(entry[1], dict)):
            raise CacheError(f"entry [{i}] is not a [tensor, dict] pair", "connect a CONDITIONING output")


def check_real_size(conditioning: Any) -> None:
    """Refuse, before any tensor is copied, a value whose tensors would materialise more than the bytes their storages
    really hold (plus MAX_EXPANSION_BYTES), or more than a cache may hold (MAX_CACHE_BYTES). Each distinct tensor
    object counts once, as the encoder stores it once; each distinct storage counts once."""
    materialised, real = 0, 0
    storages: set[tuple[str, int, int]] = set()
    worst: tuple[float, str, torch.Tensor] | None = None
    seen: set[int] = set()
    stack: list[tuple[Any, tuple]] = [(conditioning, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, torch.Tensor):
            if id(value) in seen or value.is_meta or value.layout != torch.strided:
                continue  # the encoder refuses meta and sparse tensors with its own message
            seen.add(id(value))
            size = value.numel() * value.element_size()
            storage = value.untyped_storage()
            key = (str(value.device), storage.data_ptr(), storage.nbytes())
            if key not in storages:
                storages.add(key)
                real += storage.nbytes()
            materialised += size
            ratio = size / max(storage.nbytes(), 1)
            if worst is None or ratio > worst[0]:
                worst = (ratio, key_path(path), value)
        elif isinstance(value, dict):
            stack.extend((item, (*path, key)) for key, item in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((item, (*path, i)) for i, item in enumerate(value))
    if materialised > MAX_CACHE_BYTES:
        raise CacheError(f"this conditioning's tensors hold {materialised / 2**30:.1f} GiB; a cache holds at most "
                         f"{MAX_CACHE_BYTES // 2**30} GiB (an encoded prompt is a few MiB)",
                         "cache the plain text-encoder output")
    if materialised > real + MAX_EXPANSION_BYTES and worst is not None:
        _, where, tensor = worst
        raise CacheError(
            f"this conditioning's tensors would take {materialised:,} bytes as stored, but their data is {real:,} "
            f"bytes: the tensor at {where} (shape {list(tensor.shape)}, strides {list(tensor.stride())}) is a view "
            f"that repeats {tensor.untyped_storage().nbytes():,} bytes of data to {tensor.numel() * tensor.element_size():,}; "
            f"a cache stores every element, so at most {MAX_EXPANSION_BYTES // 2**20} MiB of repeats are written",
            "cache the conditioning straight from the text encoder (it holds no repeating views), or copy the "
            "tensor with .contiguous() yourself if its full size is really wanted")


# ---------------------------------------------------------------------------------------- writing


@dataclass
class SaveResult:
    path: Path
    status: str  # "written", "replaced" or "unchanged"
    entries: int
    tensors: int
    bytes: int
    prompt_sha256: str


def describe_result(result: SaveResult) -> str:
    """One line for the UI, the log and the CLI: what happened, where, how big."""
    verb = {"written": "saved", "replaced": "replaced", "unchanged": "unchanged (identical content), kept"}[result.status]
    entries = f"{result.entries} entr{'y' if result.entries == 1 else 'ies'}"
    tensors = f"{result.tensors} tensor{'' if result.tensors == 1 else 's'}"
    return f"{verb} {printable(result.path)} ({entries}, {tensors}, {result.bytes / 2**20:.2f} MiB)"


def json_tables(structure: Any, records: dict, what: str = "this conditioning", per_file: str = "a cache",
                fix: str = "cache the plain text-encoder output") -> dict[str, str]:
    """The 'structure' and 'tensors' metadata entries of an encoded value, refused when the reader would refuse them
    (MAX_CACHE_JSON_BYTES each): what the loader would refuse is never written."""
    tables = {"structure": json.dumps(structure, allow_nan=False, separators=(",", ":")),
              "tensors": json.dumps(records, separators=(",", ":"))}
    for key, text in tables.items():
        if len(text.encode("utf-8")) > MAX_CACHE_JSON_BYTES:
            raise CacheError(f"{what}'s {key} table is {len(text.encode('utf-8')):,} bytes of JSON; {per_file} "
                             f"holds at most {MAX_CACHE_JSON_BYTES:,}", fix)
    return tables


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def build_metadata(structure: Any, records: dict, prompt_text: str, encoder: str, h3kit_version: str) -> dict[str, str]:
    for label, text in (("prompt_text", prompt_text), ("encoder_name", encoder)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CacheError(f"{label} is not valid Unicode text", f"retype {label}", input_name=label) from exc
    tables = json_tables(structure, records)
    header = len(json.dumps([prompt_text, encoder], ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if header + sum(len(t) for t in tables.values()) + 256 * len(records) > MAX_CACHE_HEADER_BYTES:
        raise CacheError(f"the prompt text is too long to keep with the cache (a cache header is at most "
                         f"{MAX_CACHE_HEADER_BYTES // 2**20} MiB)", "shorten the prompt", input_name="prompt_text")
    return {
        "h3kit_format": FORMAT_NAME,
        "h3kit_format_version": str(FORMAT_VERSION),
        **tables,
        "encoder": encoder,
        "prompt_text": prompt_text,
        "prompt_sha256": hashlib.sha256(prompt_text.encode("utf-8")).hexdigest() if prompt_text else "",
        "h3kit_version": h3kit_version,
        "created_utc": utc_now(),
    }


def save_conditioning(
    folder: Path, name: str, conditioning: Any, *, prompt_text: str = "", encoder: str = "",
    h3kit_version: str = "", overwrite: bool = False,
) -> SaveResult:
    """Write `conditioning` to folder/<name>.safetensors atomically; never replaces a file unless asked."""
    file_name = cache_file_name(name)
    check_conditioning_shape(conditioning)
    check_real_size(conditioning)
    encoder_state = StructureEncoder()
    structure = encoder_state.encode(conditioning)
    metadata = build_metadata(structure, encoder_state.records, prompt_text, encoder, h3kit_version)
    target = folder / file_name
    result = SaveResult(target, "written", len(conditioning), len(encoder_state.tensors), 0, metadata["prompt_sha256"])
    existed = target.exists()
    if existed and not overwrite:
        return _unchanged_or_refused(result, target, encoder_state.tensors, metadata, "")
    try:
        write_stored(target, encoder_state.tensors, metadata, overwrite=overwrite)
    except TargetExists:  # another save published this name after the check above: its file stays, as it is
        return _unchanged_or_refused(result, target, encoder_state.tensors, metadata,
                                     " (another save wrote it while this one was writing)")
    result.status = "replaced" if existed else "written"
    result.bytes = target.stat().st_size
    return result


FIX_TAKEN = "turn on overwrite (node input 'overwrite', CLI --overwrite) to replace it, or choose another name"


def _unchanged_or_refused(result: SaveResult, target: Path, tensors: dict, metadata: dict[str, str],
                          when: str) -> SaveResult:
    """`target` exists and overwriting was not asked: "unchanged" when it holds this very value, else CacheError."""
    if _same_content(target, tensors, metadata):
        result.status, result.bytes = "unchanged", target.stat().st_size
        return result
    raise CacheError(f"{target} already exists{when} and holds different conditioning; it was left as it is",
                     FIX_TAKEN, input_name="name")


def write_stored(target: Path, tensors: dict, metadata: dict[str, str], *, overwrite: bool = False,
                 unique: bool = False, input_name: str = "name") -> Path:
    """`tensors` + `metadata` as a safetensors file, through the one atomic writer (adapters/files.py): readers see
    the old file or the new one, never half. `overwrite` replaces `target`; `unique` publishes under the next free
    name when it is taken (never overwriting); neither: TargetExists when `target` exists, even when another writer
    published it a moment ago (the caller says what that means). Returns where it landed.
    A full disk (found before writing, or by the write itself) is one CacheError; an existing file stays intact."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    keep = "; the existing file is unchanged" if target.exists() and not unique else ""
    fix = "free disk space or save to another folder, then save again"
    needed = sum(t.numel() * t.element_size() for t in tensors.values()) + len(json.dumps(metadata)) + 2**16
    try:
        free = shutil.disk_usage(target.parent).free if target.parent.is_dir() else None
        if free is not None and free < needed:
            raise CacheError(f"cannot write {target}: it needs {needed / 2**20:.1f} MiB but the disk has "
                             f"{free / 2**20:.1f} MiB free{keep}", fix, input_name=input_name)
        with atomic_write(target, overwrite=overwrite, unique=unique) as pending:
            save_file(tensors, str(pending.tmp), metadata=metadata)
        return pending.path
    except TargetExists as exc:
        if not unique:
            raise
        raise CacheError(f"{exc.path} already exists", "choose another name: files are never replaced",
                         input_name=input_name) from exc
    except OSError as exc:
        raise CacheError(f"cannot write {target}: it {os_reason(exc)}{keep}", fix, input_name=input_name) from exc
    except SafetensorError as exc:  # the library's own I/O error (a full disk: 'No space left on device')
        full = "No space left" in str(exc) or "StorageFull" in str(exc)
        reason = "the disk is full" if full else f"the write failed ({printable(exc, 200)})"
        raise CacheError(f"cannot write {target}: {reason}{keep}", fix, input_name=input_name) from exc


def _same_content(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> bool:
    """True when `path` is a readable cache holding exactly this value and provenance."""
    try:
        existing = read_cache(path)
    except CacheError:
        return False
    old = existing.metadata
    same_meta = all(old.get(k) == metadata[k] for k in ("structure", "tensors", "encoder", "prompt_text"))
    return same_meta and all(
        tensor_bytes(existing.tensors[k]) == tensor_bytes(tensors[k]) for k in tensors
    )


# ---------------------------------------------------------------------------------------- reading


@dataclass
class StoredFile:
    """A file of some StoredKind, read and checked: the decoded value, its metadata and its tensors (views of one
    buffer)."""

    path: Path
    value: Any
    metadata: dict[str, str]
    tensors: dict[str, torch.Tensor]


@dataclass
class LoadedCache:
    path: Path
    conditioning: list
    metadata: dict[str, str]
    tensors: dict[str, torch.Tensor]
    warnings: list[str] = field(default_factory=list)


def read_header(path: Path, kind: StoredKind = CONDITIONING) -> tuple[SafetensorsHeader, dict[str, str]]:
    """The safetensors header (checked by the safetensors library) and metadata of `path`, reading only the header."""
    path = Path(path)
    try:
        header = read_safetensors_header(path, MAX_CACHE_HEADER_BYTES)
    except SafetensorsHeaderError as exc:
        if exc.kind is not None:
            raise kind.not_kind(path, exc.kind) from exc
        raise CacheError(f"{path} is not a usable safetensors file: {exc}", kind.rebuild_fix()) from exc
    except OSError as exc:
        raise CacheError(f"{path} cannot be read ({exc.strerror or exc})", "check that the file exists and is readable") from exc
    return header, header.metadata or {}


def check_cache_header(path: Path, kind: StoredKind = CONDITIONING) -> dict[str, str]:
    """Every check that needs no tensor data (layout, size, format, version, metadata JSON): the metadata, or
    CacheError. Cheap enough for VALIDATE_INPUTS and `cond list`."""
    header, metadata = read_header(path, kind)
    _check_size(path, header, kind)
    check_metadata(path, header, metadata, kind)
    _json_field(path, metadata, "tensors", kind)
    _json_field(path, metadata, "structure", kind)
    return metadata


def read_stored(path: Path, kind: StoredKind) -> StoredFile:
    """Read and check a file of `kind`: the header first, then one read of the data into a writable CPU buffer
    (tensors are views of it) whose size the checked header fixed, then every tensor against its crc32.

    No mmap: the file can be replaced or deleted while the value is in use. The header is parsed by hand
    (adapters/safetensors_file.parse_header, the library's rules) because it must be the header of the bytes read
    here, not of whatever file is at `path` a moment later.
    """
    path = Path(path)
    try:
        with open_regular(path, "rb", buffering=0) as fh:
            header, metadata, structure, records = _checked_header(path, fh, kind)
            buffer = _read_data(path, fh, header.data_bytes)
    except OSError as exc:
        raise CacheError(f"{path} cannot be read ({exc.strerror or exc})", "check that the file exists and is readable") from exc
    fix = kind.rebuild_fix()
    tensors = {name: _tensor_view(path, buffer, entry, fix) for name, entry in header.tensors.items()}
    _check_tensor_table(path, records, tensors, memoryview(buffer.numpy()), header, fix)
    return StoredFile(path, _decode(structure, tensors, path, fix), metadata, tensors)


def read_cache(path: Path) -> LoadedCache:
    """Read and check a conditioning cache (read_stored), then that it holds a CONDITIONING."""
    stored = read_stored(path, CONDITIONING)
    try:
        check_conditioning_shape(stored.value)
    except CacheError as exc:
        raise CacheError(f"{stored.path} does not hold a CONDITIONING: {exc.problem}", rebuild_fix()) from exc
    loaded = LoadedCache(stored.path, stored.value, stored.metadata, stored.tensors)
    prompt = stored.metadata.get("prompt_text", "")
    stored_sha = stored.metadata.get("prompt_sha256", "")
    if prompt and stored_sha != hashlib.sha256(prompt.encode("utf-8")).hexdigest():
        loaded.warnings.append("prompt_sha256 does not match prompt_text: the provenance was edited after saving")
    return loaded


def _checked_header(path: Path, fh: Any, kind: StoredKind) -> tuple[SafetensorsHeader, dict[str, str], Any, Any]:
    """Everything that can be checked before the data is allocated: layout, size, metadata, structure."""
    size = os.fstat(fh.fileno()).st_size
    head = _read_exact(fh, min(size, 8))
    try:
        length = header_length(head, size, MAX_CACHE_HEADER_BYTES)
        header = parse_header(_read_exact(fh, length), length, size)
    except SafetensorsHeaderError as exc:
        fh.seek(0)
        named = other_kind(fh.read(HEAD_BYTES))
        if named is not None:
            raise kind.not_kind(path, named.kind) from exc
        raise CacheError(f"{path} is not a usable safetensors file: {exc}", kind.rebuild_fix()) from exc
    _check_size(path, header, kind)
    metadata = header.metadata or {}
    check_metadata(path, header, metadata, kind)
    records = _json_field(path, metadata, "tensors", kind)
    structure = _json_field(path, metadata, "structure", kind)
    return header, metadata, structure, records


def _check_size(path: Path, header: SafetensorsHeader, kind: StoredKind) -> None:
    if header.data_bytes > kind.max_bytes:
        cap = f"{kind.max_bytes // 2**30} GiB" if kind.max_bytes % 2**30 == 0 else f"{kind.max_bytes // 2**20} MiB"
        raise CacheError(f"{path} holds {header.data_bytes / 2**30:.1f} GiB of tensors; {kind.noun} is at most "
                         f"{cap} ({kind.typical})", f"check that this is {kind.noun}; " + kind.rebuild_fix())
    for entry in header.tensors.values():
        if not storable_shape(entry.shape):
            raise CacheError(f"{path} holds tensor {entry.name[:60]!r} of shape {str(list(entry.shape))[:80]}; a cache "
                             f"tensor has at most {MAX_TENSOR_RANK} sides of at most {MAX_TENSOR_DIM:,} each",
                             kind.rebuild_fix())


def storable_shape(shape: tuple[int, ...] | list[int]) -> bool:
    return len(shape) <= MAX_TENSOR_RANK and all(side <= MAX_TENSOR_DIM for side in shape)


def _read_exact(fh: Any, count: int) -> bytes:
    data = fh.read(count)
    while len(data) < count:  # raw reads may return less than asked
        more = fh.read(count - len(data))
        if not more:
            break
        data += more
    return data


def _read_data(path: Path, fh: Any, nbytes: int) -> torch.Tensor:
    """The data section into one new buffer, in as many reads as the OS needs (Linux returns <= 2 GiB per read)."""
    try:
        buffer = torch.empty(nbytes, dtype=torch.uint8)  # uninitialised: the reads fill every byte
    except (RuntimeError, MemoryError) as exc:
        raise CacheError(f"not enough memory to load {path} ({nbytes / 2**20:.0f} MiB of tensors)",
                         "close other programs or free memory, then queue the prompt again") from exc
    target = memoryview(buffer.numpy()) if nbytes else memoryview(bytearray())
    filled = 0
    while filled < nbytes:
        got = fh.readinto(target[filled:])
        if not got:
            raise CacheError(f"{path} changed while it was being read (it ended after {filled} of {nbytes} data bytes)",
                             "wait until the file is completely written, then try again")
        filled += got
    if fh.read(1):
        raise CacheError(f"{path} changed while it was being read (it grew)", "try again")
    return buffer


def check_metadata(path: Path, header: SafetensorsHeader, metadata: dict[str, str],
                   kind: StoredKind = CONDITIONING) -> None:
    if metadata.get("h3kit_format") != kind.format_name:
        raise kind.foreign(path, sorted(header.tensors))
    raw_version = metadata.get("h3kit_format_version", "")
    if not VERSION_TEXT.fullmatch(raw_version):  # ASCII digits only: "²".isdigit() is True but int("²") fails
        raise CacheError(f"{path} has a corrupt format version {raw_version[:40]!r}", kind.rebuild_fix())
    if int(raw_version) > kind.format_version:
        word = "cache" if kind is CONDITIONING else kind.format_name.removeprefix("h3kit.")
        raise CacheError(
            f"{path} was written by a newer H3Kit ({word} format version {raw_version}; this H3Kit reads up to "
            f"{kind.format_version}, written by H3Kit {metadata.get('h3kit_version', '')[:40] or 'unknown'})",
            "update H3Kit (git pull in custom_nodes/H3Kit, then restart ComfyUI)",
        )
    if int(raw_version) < 1:
        raise CacheError(f"{path} has an invalid format version {raw_version}", kind.rebuild_fix())


def _json_field(path: Path, metadata: dict[str, str], key: str, kind: StoredKind) -> Any:
    if key not in metadata:
        raise CacheError(f"{path} has no '{key}' metadata entry", kind.rebuild_fix())
    return bounded_metadata_json(path, metadata[key], key, kind)


def bounded_metadata_json(path: Path, text: str, key: str, kind: StoredKind) -> Any:
    """One JSON metadata entry of a stored file, within MAX_CACHE_JSON_BYTES and MAX_STRUCTURE_DEPTH."""
    try:
        return bounded_json.loads(text, f"its '{key}' metadata entry", max_depth=MAX_STRUCTURE_DEPTH,
                                  max_bytes=MAX_CACHE_JSON_BYTES)
    except bounded_json.JSONLimitError as exc:
        raise CacheError(f"{path} is corrupt: {exc}", kind.rebuild_fix()) from exc


def _tensor_view(path: Path, buffer: torch.Tensor, entry: TensorEntry, fix: str) -> torch.Tensor:
    dtype = CODE_TO_DTYPE.get(entry.dtype)
    if dtype is None:
        raise CacheError(f"{path} holds tensor {entry.name!r} as {entry.dtype}, which H3Kit files never use", fix)
    if entry.nbytes == 0:
        return torch.empty(entry.shape, dtype=dtype)
    raw = buffer[entry.begin : entry.end]
    if entry.begin % dtype.itemsize:
        raw = raw.clone()  # keep typed tensors aligned for every kernel
    return raw.view(dtype).reshape(entry.shape)


def _check_tensor_table(path: Path, records: Any, tensors: dict, view: memoryview, header: SafetensorsHeader,
                        fix: str) -> None:
    if not isinstance(records, dict) or set(records) != set(tensors) or not all(isinstance(r, dict) for r in records.values()):
        raise CacheError(f"{path} is corrupt: the tensor table in the metadata does not match the stored tensors", fix)
    for name, record in records.items():
        tensor = tensors[name]
        if record.get("dtype") != dtype_name(tensor.dtype) or record.get("shape") != list(tensor.shape):
            raise CacheError(f"{path} is corrupt: tensor {name} ({str(record.get('path'))[:80]}) is "
                             f"{dtype_name(tensor.dtype)}{list(tensor.shape)} but the metadata says "
                             f"{str(record.get('dtype'))[:20]}{str(record.get('shape'))[:80]}", fix)
        entry = header.tensors[name]
        crc = f"{zlib.crc32(view[entry.begin : entry.end]):08x}"
        if crc != record.get("crc32"):
            raise CacheError(f"{path} is corrupt: the data of tensor {name} ({str(record.get('path'))[:80]}) fails its "
                             f"checksum (crc32 {crc}, stored {str(record.get('crc32'))[:20]})", fix)


def _decode(node: Any, tensors: dict[str, torch.Tensor], path: Path, fix: str) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(item, tensors, path, fix) for item in node]
    if not isinstance(node, dict):
        raise CacheError(f"{path} has a corrupt structure entry {node!r}", fix)
    tag = next((k for k in node if k.startswith("$")), None)
    if tag is None:
        return {k: _decode(v, tensors, path, fix) for k, v in node.items()}
    try:
        return _decode_tagged(tag, node, tensors, path, fix)
    except CacheError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError, struct.error) as exc:
        raise CacheError(f"{path} has a corrupt structure entry {json.dumps(node)[:80]} ({exc!r})", fix) from exc


def _decode_tagged(tag: str, node: dict, tensors: dict[str, torch.Tensor], path: Path, fix: str) -> Any:
    value = node[tag]
    if tag == "$tensor":
        return tensors[value]
    if tag == "$float":
        if value == "nan":
            return struct.unpack(">d", int(node["bits"], 16).to_bytes(8, "big"))[0]
        return {"inf": math.inf, "-inf": -math.inf}[value]
    if tag == "$tuple":
        return tuple(_decode(item, tensors, path, fix) for item in value)
    if tag == "$size":
        return torch.Size(int(d) for d in value)
    if tag == "$dict":
        return {_decode(k, tensors, path, fix): _decode(v, tensors, path, fix) for k, v in value}
    raise CacheError(f"{path} uses the unknown structure tag {tag!r}", "update H3Kit, or " + fix)


# ------------------------------------------------------------------------------------- describing


def summarize_value(value: Any) -> Any:
    """A short JSON-friendly description of a conditioning value (tensors as dtype[shape])."""
    if isinstance(value, torch.Tensor):
        return f"{dtype_name(value.dtype)}{list(value.shape)}"
    if isinstance(value, dict):
        return {str(k): summarize_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [summarize_value(v) for v in value[:8]]
        return items + ([f"... {len(value) - 8} more"] if len(value) > 8 else [])
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def provenance(loaded: LoadedCache) -> dict[str, Any]:
    """What a loaded cache says about itself: file, encoder, prompt, versions, entries."""
    md = loaded.metadata
    return {
        "file": str(loaded.path),
        "encoder": md.get("encoder", ""),
        "prompt_text": md.get("prompt_text", ""),
        "prompt_sha256": md.get("prompt_sha256", ""),
        "created_utc": md.get("created_utc", ""),
        "h3kit_version": md.get("h3kit_version", ""),
        "format_version": int(md["h3kit_format_version"]),
        "entries": [
            {"tensor": summarize_value(tensor), "options": summarize_value(options)}
            for tensor, options in loaded.conditioning
        ],
        "warnings": list(loaded.warnings),
    }
