"""The vocabulary every check speaks: a graph `Problem` (node, input, value, message, fix) and a
`Check` line (PASS / WARN / FAIL with the fix). Rules return Problems; doctor, preflight and run print Checks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
INFO = "INFO"  # not a finding: what the pack did for the user (an input moved to the host's layout), shown as done
ERROR, WARNING = "error", "warning"


ELLIPSIS = "..."
_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def unsafe_char(ch: str) -> bool:
    """A character that is not ordinary visible text on one line: Unicode's control (Cc: NUL, ESC, C1 such as
    NEL), format (Cf: bidi overrides, zero-width), surrogate (Cs), private-use (Co), unassigned (Cn), line and
    paragraph separators (Zl, Zp) and every space but ' ' (Zs). Exactly the characters `str.isprintable` refuses."""
    return not ch.isprintable()


def _escaped(ch: str) -> str:
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: Any, limit: int | None = None) -> str:
    """The one escape for text that came from outside (a workflow, a file or its name, a server, a node's
    report): one line, every `unsafe_char` shown as its escape (\\n, \\x1b, \\x85, \\u2028, \\ud800, \\u202e),
    so nothing it says can start a line that looks like H3Kit's own, redraw or hide the terminal, or
    crash the print (a lone surrogate). When anything is escaped, backslashes are doubled too, so the
    escaped text reads one way only; text with nothing to escape is returned as it is (a Windows path stays
    readable), which also makes the function idempotent: escaping a line that holds escaped values changes
    nothing. At most `limit` characters (an escape is never cut), ending in '...' when shortened."""
    text = str(text)
    cut = limit is not None and len(text) > limit
    head = text[:limit] if cut else text  # escaping never shortens: limit characters in are enough
    if head.isprintable():
        return head[:max(limit - len(ELLIPSIS), 0)] + ELLIPSIS if cut else text
    pieces = [ch if ch.isprintable() and ch != "\\" else _escaped(ch) for ch in head]
    if limit is None or (not cut and sum(map(len, pieces)) <= limit):
        return "".join(pieces)
    size, kept = len(ELLIPSIS), []
    for piece in pieces:
        size += len(piece)
        if size > limit:
            break
        kept.append(piece)
    return "".join(kept) + ELLIPSIS


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
