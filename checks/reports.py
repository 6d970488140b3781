"""What H3Kit nodes said during a finished job: the reports a graph shows (through PreviewAny, or
H3KitPreflight's own text) become Check lines, so a "success" whose guard warned is never silent."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .problem import FAIL, WARN, Check

MAX_REPORT_CHARS = 200_000  # a node report is a few KiB; bigger text is not parsed


def _report_lines(shown_by: str, report: dict[str, Any]) -> list[Check]:
    node = str(report.get("node"))
    where = f"{node} (shown by node {shown_by})"
    found = [Check(WARN, "report", f"{where}: {text}", "see the node's report in the UI")
             for text in report.get("warnings", []) if isinstance(text, str)]
    found += [Check(WARN, "report", f"{where}: fallback: {text}", "see the node's report in the UI")
              for text in report.get("fallbacks", []) if isinstance(text, str)]
    if not found and report.get("status") == "problems":
        found.append(Check(WARN, "report", f"{where}: status 'problems'", "see the node's report in the UI"))
    return found


def _text_lines(shown_by: str, text: str) -> list[Check]:
    """H3KitPreflight's text report: its FAIL / WARN lines, each with the fix line that follows it."""
    found: list[Check] = []
    for line in text.splitlines():
        head = line.strip()
        if head.startswith(("FAIL", "WARN")):
            found.append(Check(FAIL if head.startswith("FAIL") else WARN, "report",
                               f"node {shown_by}: {head[4:].strip()}"))
        elif head.startswith("fix:") and found:
            found[-1].fix = head[4:].strip()
    return found


def report_checks(outputs: Mapping[str, Any]) -> list[Check]:
    """FAIL / WARN lines from the text outputs of a job's history entry (`entry["outputs"]`)."""
    found: list[Check] = []
    for node_id, output in outputs.items():
        texts = output.get("text") if isinstance(output, dict) else None
        for text in texts if isinstance(texts, list) else []:
            if not isinstance(text, str) or len(text) > MAX_REPORT_CHARS:
                continue
            try:
                report = json.loads(text)
            except ValueError:
                if "H3Kit" in text or text.lstrip().startswith(("FAIL", "WARN", "PASS")):
                    found += _text_lines(str(node_id), text)
                continue
            if isinstance(report, dict) and str(report.get("node", "")).startswith("H3Kit"):
                found += _report_lines(str(node_id), report)
    return found
