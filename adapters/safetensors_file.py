"""The one safetensors header reader, by the `safetensors` library's own rules.

A file is: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data section. The library
(safetensors 0.8, `Metadata::validate` + `read_metadata`) accepts a file only when:
  - N <= 100,000,000 and 8 + N <= file size;
  - the header is strict JSON (no NaN/Infinity, no lone surrogate escapes, numbers within f64 range,
    nesting below serde_json's limit) holding an object: "__metadata__" (null or a str -> str map, not
    repeated) plus one entry per tensor {"dtype", "shape", "data_offsets"} (or the same three as an array);
  - dtype is one of its names; shape and offsets are unsigned 64-bit integers;
  - sorted by offsets, the tensors tile the data section exactly: each begins where the previous ended
    (contiguous, non-overlapping, none negative), end >= begin, end - begin == prod(shape) x dtype bits / 8
    (no overflow, whole bytes), and the last ends exactly at the end of the file.

`read_header(path)` asks the library itself (`safe_open`: memory-maps the file and reads the header only)
and then takes the offsets from `parse_header`, because the library's Python API does not expose them.
`parse_header` is the hand parser, kept for the one place the library cannot serve: the conditioning cache
checks a buffer it already read into memory (the file may be replaced meanwhile, so re-opening it proves
nothing, and `safetensors.deserialize` would copy every tensor). Its rules are the library's, checked
against the library on fuzzed headers in tests/test_fuzz_safetensors.py.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks.filetypes import HEAD_BYTES, FileKind, sniff
from ..checks.filetypes import MAX_SAFETENSORS_HEADER as MAX_HEADER_BYTES  # one source: the library's value
from .files import open_regular

# H3Kit's own bound, below the library's: '{' + '[' bytes in a header, counted before it is parsed. A model has a
# few thousand tensors (3 containers each; 16k for a quantized LTX-2); 100 MB of empty tensor entries would
# otherwise cost 3.2 GiB and 4 minutes to parse in Python.
MAX_HEADER_CONTAINERS = 200_000
MAX_JSON_DEPTH = 127  # deepest nesting serde_json (recursion limit 128) lets through
U64_MAX = 2**64 - 1
METADATA_KEY = "__metadata__"
TENSOR_FIELDS = ("dtype", "shape", "data_offsets")
# The library's dtype names and their sizes in bits (safetensors/src/tensor.rs `Dtype::bitsize`).
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}


class SafetensorsHeaderError(ValueError):
    """The file is not a safetensors file the library would open; the message says why. `kind`: what the file
    is instead, when its first bytes say so (a PNG image, a torch.save zip, a GGUF file, an HTML page)."""

    def __init__(self, message: str, kind: FileKind | None = None):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets relative to the start of the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    header_length: int  # N: the JSON's byte length
    tensors: dict[str, TensorEntry]  # in data order
    metadata: dict[str, str] | None

    @property
    def data_start(self) -> int:
        return 8 + self.header_length

    @property
    def data_bytes(self) -> int:
        return max((entry.end for entry in self.tensors.values()), default=0)

    @property
    def json(self) -> dict[str, Any]:
        """The header in its canonical JSON form (what `safetensors.serialize` would write)."""
        out: dict[str, Any] = {} if self.metadata is None else {METADATA_KEY: dict(self.metadata)}
        for entry in self.tensors.values():
            out[entry.name] = {"dtype": entry.dtype, "shape": list(entry.shape), "data_offsets": [entry.begin, entry.end]}
        return out


def header_length(prefix: bytes, file_size: int, limit: int = MAX_HEADER_BYTES) -> int:
    """N from the first 8 bytes, checked against the library's cap (or a caller's lower `limit`) and the file size."""
    if file_size < 8 or len(prefix) < 8:
        raise SafetensorsHeaderError(f"the file is {file_size} bytes, too short for a safetensors header (8 bytes)")
    length = int.from_bytes(bytes(prefix[:8]), "little")
    if length > limit:
        whose = "safetensors allows" if limit == MAX_HEADER_BYTES else "this kind of file has"
        raise SafetensorsHeaderError(f"the header length field says {length} bytes; {whose} at most "
                                     f"{limit} (not a safetensors file, or a corrupt one)")
    if 8 + length > file_size:
        raise SafetensorsHeaderError(f"the header length field says {length} bytes, which does not fit the "
                                     f"{file_size - 8} bytes after it (truncated, or not a safetensors file)")
    return length


def parse_header(raw: bytes | memoryview, length: int, file_size: int) -> SafetensorsHeader:
    """The hand parser: the N header bytes (after the 8-byte prefix) of a `file_size`-byte file."""
    if len(raw) != length:
        raise SafetensorsHeaderError(f"read {len(raw)} header bytes, expected {length} (the file changed?)")
    raw = bytes(raw)
    containers = raw.count(b"{") + raw.count(b"[")
    if containers > MAX_HEADER_CONTAINERS:
        raise SafetensorsHeaderError(f"the header holds {containers:,} JSON objects and arrays; H3Kit reads at most "
                                     f"{MAX_HEADER_CONTAINERS:,} (a model has a few thousand tensors)")
    document = _strict_json(raw)
    if not isinstance(document, _Object):
        raise SafetensorsHeaderError(f"the header is a JSON {_json_kind(document)}, not an object")
    metadata, tensors = _split_top_level(document)
    ordered = _tile(tensors)
    header = SafetensorsHeader(length, ordered, metadata)
    present = file_size - header.data_start
    if present < header.data_bytes:
        raise SafetensorsHeaderError(f"the file is truncated: its tensors need {header.data_bytes} data bytes but "
                                     f"only {present} follow the header")
    if present > header.data_bytes:
        raise SafetensorsHeaderError(f"{present - header.data_bytes} bytes follow the last tensor (safetensors files "
                                     "end with their last tensor; the file was appended to or corrupted)")
    return header


def read_header(path: Path | str, max_header_bytes: int = MAX_HEADER_BYTES) -> SafetensorsHeader:
    """Validate `path` with the safetensors library (header only, nothing allocated) and return its header;
    a header longer than `max_header_bytes` is refused before it is read. A file that is something else is
    named as what it is (SafetensorsHeaderError.kind)."""
    path = Path(path)
    with open_regular(path) as handle:
        size = _file_size(handle)
        try:
            length = header_length(handle.read(8), size, max_header_bytes)
            header = parse_header(handle.read(length), length, size)
        except SafetensorsHeaderError as exc:
            handle.seek(0)
            named = other_kind(handle.read(HEAD_BYTES))
            if named is None:
                raise
            raise named from exc
    _library_accepts(path)
    return header


def other_kind(head: bytes) -> SafetensorsHeaderError | None:
    """The error for a file whose first bytes show it is something else (an image, a zip, a GGUF file, text),
    else None (then the parser's own reason, e.g. "too short", is the better message)."""
    kind = sniff(head)
    if kind.key in ("safetensors", "unknown"):
        return None
    return SafetensorsHeaderError(f"it is {kind.text}, not a safetensors file", kind)


def _file_size(handle: Any) -> int:
    return os.fstat(handle.fileno()).st_size


def _library_accepts(path: Path) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            pass
    except SafetensorError as exc:  # our rules missed a case: the library's word is final
        raise SafetensorsHeaderError(f"the safetensors library refuses it ({exc})") from exc


# --------------------------------------------------------------------------------------------- strict JSON


class _Object(list):
    """A JSON object as its (key, value) pairs in file order: duplicates matter to the library's rules."""


def _reject_constant(name: str) -> Any:
    raise SafetensorsHeaderError(f"the header contains {name}, which strict JSON does not allow")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise SafetensorsHeaderError(f"the header holds the number {text[:40]}, beyond the range of a double")
    return value


def _parse_int(text: str) -> int | float:
    if text == "-0":  # serde_json reads -0 as a float
        return -0.0
    if len(text.lstrip("-")) > 20:  # beyond 64 bits serde_json falls back to a double
        return _parse_float(text)
    return int(text)


def _strict_json(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SafetensorsHeaderError(f"the header is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        document = json.loads(text, object_pairs_hook=_Object, parse_constant=_reject_constant,
                              parse_float=_parse_float, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise SafetensorsHeaderError(f"the header is not valid JSON ({exc})") from exc
    except RecursionError as exc:
        raise SafetensorsHeaderError(f"the header nests deeper than {MAX_JSON_DEPTH} levels") from exc
    _check_tree(document)
    return document


def _check_tree(document: Any) -> None:
    """Depth and string checks over the whole tree (ignored fields included, as serde_json parses them too)."""
    stack = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node)
            continue
        if not isinstance(node, list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise SafetensorsHeaderError(f"the header nests deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(node, _Object):
            for key, value in node:
                _check_text(key)
                stack.append((value, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SafetensorsHeaderError("the header holds a lone UTF-16 surrogate escape (\\ud800-\\udfff)") from exc


def _json_kind(value: Any) -> str:
    if isinstance(value, _Object):
        return "object"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return {bool: "boolean", str: "string", int: "integer", float: "number"}.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------------------ header layout


def _split_top_level(document: _Object) -> tuple[dict[str, str] | None, dict[str, TensorEntry]]:
    metadata: dict[str, str] | None = None
    seen_metadata = False
    tensors: dict[str, TensorEntry] = {}
    for key, value in document:
        if key == METADATA_KEY:
            if seen_metadata:
                raise SafetensorsHeaderError(f"the header has two {METADATA_KEY} entries")
            seen_metadata = True
            metadata = _metadata(value)
        else:
            tensors.pop(key, None)  # a repeated tensor name: the last one counts, as in the library
            tensors[key] = _tensor_entry(key, value)
    return metadata, tensors


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, _Object):
        raise SafetensorsHeaderError(f"{METADATA_KEY} is a JSON {_json_kind(value)}, not a map of strings")
    metadata: dict[str, str] = {}
    for key, text in value:
        if not isinstance(text, str):
            raise SafetensorsHeaderError(f"{METADATA_KEY}[{key!r}] is a JSON {_json_kind(text)}; metadata values "
                                         "must be strings")
        metadata[key] = text
    return metadata


def _tensor_entry(name: str, value: Any) -> TensorEntry:
    fields = _tensor_fields(name, value)
    dtype = _dtype(name, fields["dtype"])
    shape = _unsigned_list(name, "shape", fields["shape"], None)
    offsets = _unsigned_list(name, "data_offsets", fields["data_offsets"], 2)
    return TensorEntry(name, dtype, tuple(shape), offsets[0], offsets[1])


def _tensor_fields(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, _Object):
        fields: dict[str, Any] = {}
        for key, item in value:
            if key in TENSOR_FIELDS:  # other keys are ignored by the library, as here
                if key in fields:
                    raise SafetensorsHeaderError(f"tensor {name!r} repeats the field {key!r}")
                fields[key] = item
        missing = [key for key in TENSOR_FIELDS if key not in fields]
        if missing:
            raise SafetensorsHeaderError(f"tensor {name!r} has no {', '.join(missing)}")
        return fields
    if isinstance(value, list) and len(value) == len(TENSOR_FIELDS):  # the library also takes [dtype, shape, offsets]
        return dict(zip(TENSOR_FIELDS, value, strict=True))
    raise SafetensorsHeaderError(f"tensor {name!r} is a JSON {_json_kind(value)}, not an entry with "
                                 "dtype, shape and data_offsets")


def _dtype(name: str, value: Any) -> str:
    if isinstance(value, _Object) and len(value) == 1 and value[0][1] is None:
        value = value[0][0]  # serde's map form of an enum: {"F16": null}
    if not isinstance(value, str) or value not in DTYPE_BITS:
        raise SafetensorsHeaderError(f"tensor {name!r} has dtype {_short(value)}; safetensors knows "
                                     f"{', '.join(DTYPE_BITS)}")
    return value


def _unsigned_list(name: str, field: str, value: Any, length: int | None) -> list[int]:
    if not isinstance(value, list) or isinstance(value, _Object) or (length is not None and len(value) != length):
        wanted = f"a list of {length} integers" if length else "a list of integers"
        raise SafetensorsHeaderError(f"tensor {name!r} has {field} {_short(value)}, not {wanted}")
    for item in value:
        if type(item) is not int or not 0 <= item <= U64_MAX:
            raise SafetensorsHeaderError(f"tensor {name!r} has {field} {_short(value)}: each must be an integer "
                                         f"from 0 to {U64_MAX}")
    return value


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, _Object) else json.dumps(dict(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _tile(tensors: dict[str, TensorEntry]) -> dict[str, TensorEntry]:
    """Tensors in data order after the library's checks: contiguous from 0, sizes match dtype x shape."""
    ordered = sorted(tensors.values(), key=lambda entry: (entry.begin, entry.end))
    covered = 0
    for entry in ordered:
        if entry.begin != covered or entry.end < entry.begin:
            where = "ends before it begins" if entry.end < entry.begin else (
                "overlaps the previous tensor" if entry.begin < covered else "leaves a gap after the previous tensor")
            raise SafetensorsHeaderError(f"tensor {entry.name!r} has data_offsets [{entry.begin}, {entry.end}]: it "
                                         f"{where} (tensors must tile the data section from byte 0)")
        covered = entry.end
        bits = _element_count(entry) * DTYPE_BITS[entry.dtype]
        if bits > U64_MAX:
            raise SafetensorsHeaderError(f"tensor {entry.name!r}: shape {list(entry.shape)} overflows 64 bits")
        if bits % 8:
            raise SafetensorsHeaderError(f"tensor {entry.name!r}: {entry.dtype} x {list(entry.shape)} is not a whole "
                                         "number of bytes")
        if entry.nbytes != bits // 8:
            raise SafetensorsHeaderError(f"tensor {entry.name!r}: {entry.dtype} x {list(entry.shape)} needs "
                                         f"{bits // 8} bytes but its data_offsets hold {entry.nbytes}")
    return {entry.name: entry for entry in ordered}


def _element_count(entry: TensorEntry) -> int:
    count = 1
    for dim in entry.shape:  # left to right with a 64-bit check at every step, like the library's checked_mul
        count *= dim
        if count > U64_MAX:
            raise SafetensorsHeaderError(f"tensor {entry.name!r}: shape {list(entry.shape)} overflows 64 bits")
    return count
