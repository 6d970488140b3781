"""JSON from files, users and servers with documented bounds: a clear error, never a RecursionError.

Python's json module turns deep nesting into RecursionError, a number over 4,300 digits into a bare
ValueError and invalid UTF-8 into UnicodeDecodeError; and code that walks the parsed value recursively can
overflow the stack even when parsing succeeded. `loads` checks all of it up front and raises one error type.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.scanner import py_make_scanner
from typing import Any

MAX_DEPTH = 100  # nesting of workflows (4-6 levels) and cache structures (about 6) stays far below
MAX_INT_DIGITS = 4300  # Python's own int-from-text limit (sys.get_int_max_str_digits default)


class JSONLimitError(ValueError):
    """Text that is not JSON, or JSON beyond a documented bound; the message says which and where."""


def loads(data: str | bytes | bytearray | memoryview, what: str, *, max_depth: int = MAX_DEPTH,
          max_bytes: int | None = None, unique_keys: bool = False, visit: Callable[[int], None] | None = None) -> Any:
    """Parse `data` (UTF-8 when bytes); `what` names the source in messages ("the workflow file x.json").
    `unique_keys`: a key repeated in one object is an error (json keeps the last one silently).
    `visit`: called with the depth of each array and object before it is built, so a caller can count them or stop
    the parse by raising; the parse then runs json's own pure-Python scanner (the C one never calls back, and holds
    the interpreter lock from the first byte to the last, so no other thread runs), about 5x slower."""
    size = None if max_bytes is None else len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size is not None and size > max_bytes:
        raise JSONLimitError(f"{what} is {size} bytes; at most {max_bytes} are accepted")
    text = data if isinstance(data, str) else _utf8(bytes(data), what)
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
    if visit is None and nesting_depth(value, max_depth) > max_depth:  # a visited parse stopped at max_depth itself
        raise JSONLimitError(f"{what} nests deeper than {max_depth} levels")
    return value


def nesting_depth(value: Any, limit: int) -> int:
    """Depth of lists/dicts in `value` (a scalar is 0), counted without recursion; stops once past `limit`."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
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


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8-sig")  # a byte-order mark from Windows editors is harmless
    except UnicodeDecodeError as exc:
        raise JSONLimitError(f"{what} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save "
                             "it as UTF-8") from exc
