"""JSON from files, users and servers with documented bounds: a clear error, never a RecursionError, and memory
bounded by what parsing builds, not only by the bytes read.

Python's json module turns deep nesting into RecursionError, a number over 4,300 digits into a bare
ValueError and invalid UTF-8 into UnicodeDecodeError; and code that walks the parsed value recursively can
overflow the stack even when parsing succeeded. `loads` checks all of it up front and raises one error type.

Dense JSON grows as Python objects: 2 bytes `[]` become a 56-byte list (a 95 MiB `/object_info` of `[]` took
3.5 GiB). So before anything is parsed, `count_values` bounds the values parsing would build, from the bytes
alone, in one pass of C-speed counts (no allocation per token), and `loads` refuses text over the caller's
`max_values` budget before `json.loads` runs. What then stays in memory is bounded by the budget (at most about
60 bytes a value: a float, a short string, an empty list) plus the text itself (a string costs at most 4 bytes per
byte read). Nesting is bounded by the same budget while parsing (and by the interpreter's recursion limit), then
checked against `max_depth` without recursion. Each walk calls checks.deadline.check_time, so a caller's
`--timeout` covers the CPU work too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.scanner import py_make_scanner
from typing import Any

from ..checks.deadline import CHECK_EVERY, check_time

MAX_DEPTH = 100  # nesting of workflows (4-6 levels) and cache structures (about 6) stays far below
MAX_INT_DIGITS = 4300  # Python's own int-from-text limit (sys.get_int_max_str_digits default)
# Values parsing may build when the caller names no budget (count_values: an upper bound). A 10,000-node API graph
# counts about 500,000; workflow files, the editor's route, cache metadata and websocket events use this one.
MAX_VALUES = 1_000_000


class JSONLimitError(ValueError):
    """Text that is not JSON, or JSON beyond a documented bound; the message says which and where."""


def count_values(data: str | bytes | bytearray | memoryview) -> int:
    """An upper bound on the values (objects, arrays, strings, numbers, literals and object keys) that parsing
    `data` builds, from its bytes alone: every value but a container's first follows a ',', every key precedes a
    ':', and a container has at most one first value. Characters inside strings are counted too (a bound, never
    an undercount). Linear, a few C-speed passes, nothing allocated per token."""
    raw = data if isinstance(data, (str, bytes, bytearray)) else bytes(data)
    marks = ("[", "{", ",", ":") if isinstance(raw, str) else (b"[", b"{", b",", b":")
    opening, braces, commas, colons = (raw.count(mark) for mark in marks)
    return 1 + 2 * (opening + braces) + commas + colons


def check_budget(data: str | bytes | bytearray | memoryview, what: str, max_values: int) -> int:
    """count_values(data), or JSONLimitError when it is over `max_values` (nothing is parsed or built)."""
    values = count_values(data)
    if values > max_values:
        raise JSONLimitError(f"{what} holds up to {values:,} JSON values (counted in its bytes before parsing); "
                             f"at most {max_values:,} are read, to keep memory bounded")
    return values


def loads(data: str | bytes | bytearray | memoryview, what: str, *, max_depth: int = MAX_DEPTH,
          max_bytes: int | None = None, unique_keys: bool = False, max_values: int = MAX_VALUES,
          visit: Callable[[int], None] | None = None) -> Any:
    """Parse `data` (UTF-8 when bytes); `what` names the source in messages ("the workflow file x.json").
    `unique_keys`: a key repeated in one object is an error (json keeps the last one silently).
    `max_values`: the budget of values parsing may build (count_values), checked before parsing.
    `visit`: called with the depth of each array and object before it is built, so a caller can count them or stop
    the parse by raising; the parse then runs json's own pure-Python scanner (the C one never calls back, and holds
    the interpreter lock from the first byte to the last, so no other thread runs), about 5x slower."""
    size = None if max_bytes is None else len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size is not None and size > max_bytes:
        raise JSONLimitError(f"{what} is {size} bytes; at most {max_bytes} are accepted")
    check_time(f"reading {what}")
    check_budget(data, what, max_values)
    text = data if isinstance(data, str) else _utf8(data, what)
    try:
        hooks: dict[str, Any] = {"parse_int": _parse_int, "object_pairs_hook": _unique_object if unique_keys else None}
        value = json.loads(text, **hooks) if visit is None else _visiting(hooks, visit, max_depth).decode(text)
    except _RepeatedKey as exc:
        raise JSONLimitError(f"{what} has the key {printable_key(exc.args[0])} twice in one object (the second would "
                             "silently replace the first)") from exc
    except json.JSONDecodeError as exc:
        raise JSONLimitError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except RecursionError as exc:
        raise JSONLimitError(f"{what} nests deeper than {max_depth} levels") from exc
    except _TooManyDigits as exc:
        raise JSONLimitError(f"{what} holds a number with {exc.args[0]} digits; at most {MAX_INT_DIGITS} are "
                             "accepted") from exc
    check_time(f"reading {what}")
    if visit is None and nesting_depth(value, max_depth) > max_depth:  # a visited parse stopped at max_depth itself
        raise JSONLimitError(f"{what} nests deeper than {max_depth} levels")
    return value


def nesting_depth(value: Any, limit: int) -> int:
    """Depth of lists/dicts in `value` (a scalar is 0), counted without recursion; stops once past `limit`."""
    deepest, visited = 0, 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        visited += 1
        if visited % CHECK_EVERY == 0:
            check_time("checking the nesting of JSON")
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _visiting(hooks: dict[str, Any], visit: Callable[[int], None], max_depth: int) -> json.JSONDecoder:
    """json's decoder on its pure-Python scanner, calling `visit(depth)` before each array and object; nesting past
    `max_depth` stops it there (a RecursionError, reported as the nesting) instead of at the interpreter's limit."""
    decoder = json.JSONDecoder(**hooks)
    depth = 0

    def visited(parse: Callable[..., Any]) -> Callable[..., Any]:
        def parse_container(*args: Any) -> Any:
            nonlocal depth
            depth += 1
            try:
                if depth > max_depth:
                    raise RecursionError(depth)
                visit(depth)
                return parse(*args)
            finally:
                depth -= 1
        return parse_container

    decoder.parse_object = visited(decoder.parse_object)
    decoder.parse_array = visited(decoder.parse_array)
    decoder.scan_once = py_make_scanner(decoder)
    return decoder


class _TooManyDigits(Exception):
    pass


class _RepeatedKey(Exception):
    pass


def _unique_object(pairs: list[tuple[str, Any]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        raise _RepeatedKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return found


def printable_key(key: str) -> str:
    return ascii(key[:80]) if not key.isprintable() else repr(key[:80])


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _TooManyDigits(digits)
    return int(text)


def _utf8(raw: bytes | bytearray | memoryview, what: str) -> str:
    try:
        return str(raw, "utf-8-sig")  # a byte-order mark from Windows editors is harmless; no copy of the bytes
    except UnicodeDecodeError as exc:
        raise JSONLimitError(f"{what} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save "
                             "it as UTF-8") from exc
