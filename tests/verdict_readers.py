"""Issue 30 item 8: each entry point's verdict on one graph, read from what it prints or answers, as one comparable
outcome (verdict word, moved inputs, failing nodes, exit code). Used by tests/test_one_verdict.py (tier a, fake
servers) and tests/test_host_verdicts_comfyui.py (tier b, the real host)."""

from __future__ import annotations

import json
from pathlib import Path
from re import compile as regex

from h3kit.adapters import comfy_jobs
from h3kit.checks.problem import FAIL, INFO
from h3kit.scripts import run as run_command
from h3kit.scripts.cli import main

MOVED = r"node (\S+) \(\w+\): input '([^']+)' -> '([^']+)'"  # checks.host_layout.Change.text()
CHANGE = regex(r"INFO  adapted: " + MOVED)  # the INFO line every command prints for one moved input
ERROR_NODE = regex(r"ERROR: node (\S+) \(")
TIMEOUT = ["--timeout", "180"]  # a 600-node /object_info on a loaded 2-core machine takes seconds


def outcome(word: str, changes, failing, code: int | None = None) -> dict:
    return {"verdict": word, "changes": sorted(set(changes)), "failing": sorted(set(failing)), "exit": code}


def word(failing, changes) -> str:
    return "FAIL" if failing else "ADAPTED" if changes else "OK"


def from_checks(rows: list[dict]) -> tuple[list, list]:
    changes = [regex(MOVED).match(r["detail"]).groups() for r in rows if r["status"] == INFO]
    failing = [str(r.get("node_id") or "-") for r in rows if r["status"] == FAIL]
    return changes, failing


def doctor(path: Path, capsys, url: str | None = None) -> dict:
    code = main(["doctor", "--workflow", str(path), "--no-local", "--json", *(["--server", url, *TIMEOUT] if url else [])])
    report = json.loads(capsys.readouterr().out)
    changes, failing = from_checks(report["checks"])
    assert report["verdict"] == word(failing, changes)
    return outcome(report["verdict"], changes, failing, code)


def validate(path: Path, capsys, url: str | None = None) -> dict:
    code = main(["validate", str(path), *(["--server", url, *TIMEOUT] if url else [])])
    out, err = capsys.readouterr()
    first = (out + err).strip().splitlines()
    verdict = next(line.split(" ", 1)[0] for line in first if str(path) in line)
    failing = [m.group(1) for line in err.splitlines() if line.lstrip().startswith("ERROR:")
               for m in [ERROR_NODE.search(line)]]
    return outcome(verdict, [m.groups() for m in CHANGE.finditer(out)], failing, code)


def run_pre_queue(graph: dict, capsys, url: str) -> dict:
    """run's check before it queues (scripts/run.server_graphs); run exits 2 on a refusal, else queues."""
    try:
        run_command.server_graphs(graph, [url], [], 180)
        code = 0
    except comfy_jobs.Rejected:
        code = 2
    out, err = capsys.readouterr()
    failing = [m.group(1) for line in err.splitlines() if "ERROR:" in line for m in [ERROR_NODE.search(line)]]
    changes = [m.groups() for m in CHANGE.finditer(out)]
    return outcome("FAIL" if code else word([], changes), changes, failing, code)


def from_route_report(report: dict) -> dict:
    """The editor route's answer (POST /h3kit/preflight) as an outcome; its "adapted" changes are its INFO lines."""
    changes, failing = from_checks(report["checks"])
    listed = [(c["node_id"], c["from"], c["to"]) for c in report.get("adapted", {}).get("changes", [])]
    assert listed == changes, (listed, changes)
    return outcome(report["verdict"], changes, failing)
