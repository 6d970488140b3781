"""The vocabulary every check speaks: a graph `Problem` (node, input, value, message, fix) and a
`Check` line (PASS / WARN / FAIL with the fix). Rules return Problems; doctor, preflight and run print Checks."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from typing import Any

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
INFO = "INFO"  # not a finding: what the pack did for the user (an input moved to the host's layout), shown as done
ERROR, WARNING = "error", "warning"


LINE_BREAKS = "\n\r\t\v\f\x85\u2028\u2029"  # shown as one space: the text stays readable on its line


def printable(text: Any, limit: int | None = None) -> str:
    """One line safe to print: control and format characters (ANSI escapes, NUL, bidi overrides) that a
    workflow, a file or a server sent become '?', and line breaks and tabs a space, so nothing it says can
    redraw or hide the terminal or start a line that looks like H3Kit's own."""
    text = str(text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return "".join(" " if ch in LINE_BREAKS else ch if unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Zl", "Zp")
                   else "?" for ch in text)


def printable_lines(text: Any) -> str:
    """H3Kit's own multi-line text (lines it joined itself, each part from outside already `printable`):
    every line made printable, the line breaks kept."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


@dataclass
class Problem:
    node_id: str
    class_type: str
    input: str | None
    value: Any
    message: str
    fix: str
    severity: str = ERROR

    def where(self) -> str:
        text = f"node {self.node_id} ({self.class_type})"
        return text + (f" input '{self.input}'" if self.input is not None else "")

    def shown_value(self, limit: int = 100) -> str:
        return "" if self.value is None else f" [value: {json.dumps(self.value, default=str)[:limit]}]"

    def __str__(self) -> str:
        return printable(f"{self.severity.upper()}: {self.where()}: {self.message}{self.shown_value()}. Fix: {self.fix}")


@dataclass
class Check:
    status: str
    name: str
    detail: str
    fix: str = ""
    node_id: str | None = None  # the graph node it is about, when there is one (the editor points at it)
    input: str | None = None

    def line(self) -> str:
        text = printable(f"{self.status}  {self.name}: {self.detail}")
        return text + (f"\n      fix: {printable(self.fix)}" if self.fix and self.status in (WARN, FAIL) else "")


def problem_check(problem: Problem) -> Check:
    """A graph Problem as a doctor/preflight line: errors FAIL, warnings WARN."""
    status = FAIL if problem.severity == ERROR else WARN
    node_id = None if problem.node_id in ("-", "") else str(problem.node_id)
    return Check(status, "workflow", f"{problem.where()}: {problem.message}{problem.shown_value(80)}", problem.fix,
                 node_id, problem.input)


def has_errors(problems: list[Problem]) -> bool:
    return any(p.severity == ERROR for p in problems)
