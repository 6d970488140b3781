"""docs/security.md lists every limit and deadline with its value, and each has one source in the code: every row of
its "Documented limits" table names a constant, which must hold the value the row shows; and every limit-named
module constant of the pack (MAX_*, *_S, *_BYTES, *_DEPTH ...) must have a row."""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path
from re import compile as regex

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "s": 1}
VALUE = regex(r"^([\d,]+(?:\.\d+)?)\s*(\S*)")
LIMIT_NAME = regex(r"^(MAX_\w+|\w+_TIMEOUT_S|\w+_(?:S|MS|BYTES|DEPTH|HOPS|SLOTS|NESTING|MISSES|TRIES|CHUNK\w*|PASSES))$|^CHUNK\w*$")
# Limit-shaped names that are not limits of hostile input (with the reason).
NOT_LIMITS = {
    "nodes/ref2va.py:MAX_LENGTH": "the H3 frame grid's maximum (checks.facts), a domain fact",
    "nodes/ref2va.py:MAX_REFS": "reference counts of the Ref2VA node, a domain fact",
    "checks/graph_edit.py:MAX_SEED": "the largest seed run writes, a domain fact",
    "checks/facts.py:H3_REF_SLOTS": "the host's Ref2VA slot counts, a domain fact",
    "kernels/testpattern.py:GAP_S": "a gap in the synthetic test tone",
    "kernels/testpattern.py:TONE_STEP_S": "the synthetic test tone's step",
    "kernels/chunked.py:BUDGET_MAX": "low-VRAM planning, not input",
    "scripts/workflow_thumbnail.py:MAX_ROWS": "thumbnail layout",
}
RUNTIME = ("adapters", "checks", "kernels", "nodes", "scripts")


def rows() -> list[tuple[str, str, str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("## Documented limits"):text.index("## Tests")]
    found = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[2].startswith("`"):
            found.append((cells[0], cells[1], cells[2]))
    return found


def parsed(value: str) -> float:
    number, unit = VALUE.match(value).groups()
    return float(number.replace(",", "")) * UNITS.get(unit, 1)


def code_value(where: str) -> float | None:
    """The constant a row names: `package.module.NAME` or `web/file.js NAME` (JS milliseconds as seconds)."""
    name = where.strip("`").split("`")[0]
    if " " in name:
        path, constant = name.split()
        match = regex(rf"const {constant} = (\d+);").search((ROOT / path).read_text(encoding="utf-8"))
        return int(match.group(1)) / (1000 if constant.endswith("_MS") else 1)
    module, _, constant = name.rpartition(".")
    value = getattr(import_module(f"h3kit.{module}"), constant)
    return None if not isinstance(value, (int, float)) else float(value)


@pytest.mark.parametrize("what, value, where", rows(), ids=[r[0] for r in rows()])
def test_each_documented_limit_is_the_codes_constant(what, value, where):
    actual = code_value(where)
    if actual is None:
        assert "a pattern" in where, f"{where} is not a number; say how it is tested"
        return
    assert actual == parsed(value), f"{what}: the doc says {value}, {where} is {actual:g}"


def test_every_limit_constant_of_the_pack_is_documented():
    documented = {r[2].strip("`").split("`")[0].split()[-1].rpartition(".")[2] for r in rows()}
    missing = []
    for folder in RUNTIME:
        for path in sorted((ROOT / folder).glob("*.py")):
            if path.name.startswith("bench_"):
                continue
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                    node, ast.AnnAssign) else []
                for target in targets:
                    name = getattr(target, "id", "")
                    key = f"{path.relative_to(ROOT)}:{name}"
                    if LIMIT_NAME.match(name) and name not in documented and key not in NOT_LIMITS:
                        missing.append(key)
    assert missing == [], "add these to docs/security.md's table (or to NOT_LIMITS with the reason):\n" + \
        "\n".join(missing)


def test_the_table_is_not_empty():
    assert len(rows()) >= 60
