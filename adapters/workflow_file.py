"""Workflow JSON read from a file or a paste: within the documented bounds (checks/facts.py), a file that is
something else named as what it is, then judged by checks/validator.py. The one reader of workflow files."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..checks.facts import MAX_WORKFLOW_BYTES, MAX_WORKFLOW_DEPTH
from ..checks.problem import FAIL, Check, Problem
from ..checks.schemas import providing_pack
from ..checks.validator import PackLookup
from ..checks.verdict import judge
from . import bounded_json
from .files import is_folder, open_regular, os_reason, sniff_file

WORKFLOW_KINDS = {"json", "text", "unknown"}  # parsed; the JSON reader names what is wrong with them
_EMBEDDED = ("ComfyUI stores the workflow inside the images and videos it saves: drag this file onto ComfyUI's "
             "canvas, then save it with Workflow > Export (API) and pass that .json")
NOT_A_WORKFLOW_FIX = {**dict.fromkeys(("png", "webp", "mp4", "webm", "mkv"), _EMBEDDED),
                      **dict.fromkeys(("safetensors", "gguf", "torch_zip", "pickle"),
                                      "that is a model or data file; pass the workflow .json (Workflow > Export (API) "
                                      "in ComfyUI)"),
                      "empty": "the file is empty: export the workflow again with Workflow > Export (API)"}


def parse_graph_json(data: str | bytes, what: str) -> Any:
    """Workflow JSON from a file or a paste, within the documented bounds (size, nesting, numbers, UTF-8,
    no repeated node id or key). Raises JSONLimitError with a message naming `what` and the problem."""
    return bounded_json.loads(data, what, max_depth=MAX_WORKFLOW_DEPTH, max_bytes=MAX_WORKFLOW_BYTES, unique_keys=True)


def _read_capped(path: Path, limit: int) -> bytes:
    """At most `limit` bytes, read in pieces (read(limit) would allocate `limit` bytes up front)."""
    pieces, total = [], 0
    with open_regular(path) as handle:
        while total < limit:
            piece = handle.read(min(2**20, limit - total))
            if not piece:
                break
            pieces.append(piece)
            total += len(piece)
    return b"".join(pieces)


def load_graph_file(path: Path) -> tuple[Any, Problem | None]:
    """(the parsed JSON, None) or (None, a Problem saying why the file cannot be read)."""
    fix = "pass a readable API-format JSON file (UTF-8, as ComfyUI's Export (API) writes it)"
    if is_folder(path):
        return None, Problem("-", "-", None, None, f"{path} is a folder, not a workflow file",
                             "pass one API-format JSON file from it (`validate` also takes a folder)")
    try:
        kind = sniff_file(path)
        data = _read_capped(Path(path), MAX_WORKFLOW_BYTES + 1) if kind is None or kind.key in WORKFLOW_KINDS else b""
    except OSError as exc:
        return None, Problem("-", "-", None, None, f"{path} {os_reason(exc)}", fix)
    if kind is not None and kind.key not in WORKFLOW_KINDS:
        return None, Problem("-", "-", None, None, f"{path} is {kind.text}, not a JSON workflow",
                             NOT_A_WORKFLOW_FIX.get(kind.key, fix))
    try:
        return parse_graph_json(data, f"the workflow file {path}"), None
    except bounded_json.JSONLimitError as exc:
        return None, Problem("-", "-", None, None, str(exc), fix)


def validate_file(path: Path, schemas: dict, pack_of: PackLookup = providing_pack,
                  known_ids: Collection[str] = ()) -> list[Problem]:
    doc, error = load_graph_file(path)
    """What `validate FILE` says of a workflow file: its verdict's problems (checks.verdict.judge)."""
    return [error] if error else judge(doc, schemas, pack_of, known_ids).problems


def load_graph(path: Path) -> tuple[Any, Check | None]:
    """load_graph_file as a doctor line: (the graph, None) or (None, the FAIL saying why it cannot be read)."""
    graph, problem = load_graph_file(path)
    if problem is not None:
        return None, Check(FAIL, "workflow", problem.message, problem.fix)
    return graph, None
