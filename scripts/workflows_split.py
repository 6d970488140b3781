"""The split two-stage graphs (`workflows split`): each shipped two-stage API graph cut at the handoff by the one
function checks.graph_split.split_graph into workflows/api/<name>_stage1.json (ends in H3KitSaveDraft) and
<name>_stage2.json (starts at H3KitLoadDraft), never edited by hand. `--check` regenerates them in memory and exits 1
when a committed file is stale, missing or left over. Run `workflows ui` afterwards for their UI copies.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..adapters.files import write_bytes
from ..checks.graph_split import SplitError, is_split_name, is_two_stage, split_graph, stage_names


class SplitFilesError(ValueError):
    """A shipped graph that should split and does not; the message names the file and why."""


def split_text(graph: dict) -> bytes:
    """A graph as the shipped API files are written: two-space indent, UTF-8, a final newline."""
    return (json.dumps(graph, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def expected_split_files(api_dir: Path) -> dict[Path, bytes]:
    """Every generated stage graph and its content, from the two-stage graphs in api_dir."""
    files: dict[Path, bytes] = {}
    for path in sorted(api_dir.glob("*.json")):
        if is_split_name(path.stem):
            continue
        try:
            graph = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise SplitFilesError(f"{path}: not valid JSON ({exc}); fix the file") from exc
        if not is_two_stage(graph):
            continue
        try:
            split = split_graph(graph)
        except SplitError as exc:
            raise SplitFilesError(f"{path}: {exc}") from exc
        first, second = stage_names(path.stem)
        files[api_dir / f"{first}.json"] = split_text(split.stage1)
        files[api_dir / f"{second}.json"] = split_text(split.stage2)
    return files


def stale_split_files(api_dir: Path) -> list[str]:
    """Why each stage graph is out of date (missing, stale, or left over from a graph that no longer splits)."""
    expected = expected_split_files(api_dir)
    problems = [f"{p.name}: {'stale' if p.exists() else 'missing'}" for p, content in expected.items()
                if not p.is_file() or p.read_bytes() != content]
    problems += [f"{p.name}: left over (no two-stage graph in {api_dir} splits into it)"
                 for p in sorted(api_dir.glob("*.json")) if is_split_name(p.stem) and p not in expected]
    return problems


def write_split_files(api_dir: Path) -> list[Path]:
    """Write the stage graphs that changed (the one atomic writer); the paths written."""
    written = []
    for path, content in expected_split_files(api_dir).items():
        if path.is_file() and path.read_bytes() == content:
            continue
        write_bytes(path, content, overwrite=True)
        written.append(path)
    return written
