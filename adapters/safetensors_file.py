"""Reading a .safetensors header without touching its tensors: 8-byte little-endian length, then JSON."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own cap on the JSON header


class SafetensorsHeaderError(ValueError):
    """The file is not a readable safetensors file; the message says why."""


def read_safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """(JSON header, absolute offset where the data section starts). Reads 8 + header bytes only."""
    size = Path(path).stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise SafetensorsHeaderError(f"file is {size} bytes, too short for a safetensors header")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES or length > size - 8:
            raise SafetensorsHeaderError(
                f"header length {length} does not fit the {size}-byte file (truncated or not safetensors)"
            )
        try:
            header = json.loads(handle.read(length).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SafetensorsHeaderError(f"header is not valid JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise SafetensorsHeaderError("header is not a JSON object")
    return header, 8 + length
