"""The attack re-run (tests/attack_rerun.py, a script the lead runs before and after a change) keeps a case for every
finding of the reviews (issues 26 and 33) listed in docs/security.md, "The attack re-run": a case cannot vanish, and
a finding cannot be listed without one. Runs nothing of the attacks."""

from __future__ import annotations

from pathlib import Path

import attack_rerun as rerun
import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "security.md"
SECTION = "### The attack re-run"


def documented() -> dict[str, set[str]]:
    """{finding id: the case ids its row names} from the findings table of the section."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[:section.find("\n## ", 1) if "\n## " in section else len(section)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| 26.") or line.startswith("| 33."):
            rows[cells[0]] = {c.strip("` ") for c in cells[2].split(",")}
    return rows


def test_every_documented_finding_has_its_cases_and_no_case_is_undocumented():
    table = rerun.cases()
    rows = documented()
    by_finding: dict[str, set[str]] = {}
    for case in table:
        by_finding.setdefault(case.finding, set()).add(case.id)
    assert len(rows) == 48  # issue 26: 21 findings (20 reported + the template route left of 205); issue 33: 27
    assert sorted(rows) == sorted(by_finding)
    for finding, ids in rows.items():
        assert ids == by_finding[finding], finding


def test_case_ids_are_unique_and_every_surface_is_known():
    table = rerun.cases()
    assert len(table) == 83
    assert len({c.id for c in table}) == len(table)
    assert {c.surface for c in table} == {"cli", "python", "host", "comfyui"}
    assert all(c.title and callable(c.attack) for c in table)


def test_only_selects_by_id_pattern_and_finding_and_refuses_what_matches_nothing():
    table = rerun.cases()
    assert [c.id for c in rerun.select(table, "loop-*")] == [
        "loop-undeclared-keys", "loop-route-lists", "loop-route-lists-x4", "loop-route-after-given-up"]
    assert {c.id for c in rerun.select(table, "33.05")} == {
        "object-info-lists-run", "object-info-lists-validate", "object-info-lists-doctor"}
    with pytest.raises(SystemExit, match="no case matches nope"):
        rerun.select(table, "nope")


def test_the_judges_read_forged_lines_and_planted_characters():
    assert rerun.forged(f"WARN  input 'seed {rerun.PLANTED}'") is None
    assert rerun.forged(f"WARN  input 'seed\n{rerun.PLANTED}'") is not None
    assert rerun.forged(f"WARN  input 'seed\r{rerun.PLANTED}'") is not None
    assert rerun.forged("name 'a\u2028b'") is not None  # a line separator printed raw
    assert rerun.forged("name 'a\\u2028b'") is None  # shown escaped
    info, error = "\x1b[32m[INFO]\x1b[0m ", "\x1b[1m\x1b[31m[ERROR]\x1b[0m "
    assert rerun.log_forged(f"{info}H3Kit adapted: 'x\n[INFO] H3Kit planted this line'\n") is not None
    assert rerun.log_forged(f"{info}H3Kit adapted: 'x\x1b[2J'\n{info}got prompt\n") is not None
    assert rerun.log_forged(f"{info}H3Kit adapted: 'x\\n[INFO] H3Kit planted'\n") is None  # escaped
    assert rerun.log_forged(f"{info}Starting server\n") is None  # ComfyUI's own colours
    # ComfyUI's own validation error echoes a node id as sent: not a line the pack wrote
    assert rerun.log_forged(f"{error}Failed to validate prompt for output 9\x1b[2J\n[INFO] H3Kit planted:\n") is None
