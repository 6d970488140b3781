"""Fuzz tier: the hand safetensors parser against the safetensors library, on generated and mutated headers.

Property: parse_header accepts exactly the files the library (`safetensors.deserialize`) accepts, reads the same
tensors from them, and raises nothing but SafetensorsHeaderError. The converter and the cache loader, which sit
on top of it, raise nothing but their own clear errors.
"""

from __future__ import annotations

import json
import struct

import safetensors
from h3kit.adapters.safetensors_file import DTYPE_BITS, SafetensorsHeaderError, header_length, parse_header
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DTYPES = sorted(DTYPE_BITS)
U64 = 2**64 - 1


def library_view(buf: bytes) -> list[tuple[str, str, list[int], int]] | None:
    try:
        tensors = safetensors.deserialize(buf)
    except safetensors.SafetensorError:
        return None
    return sorted((name, info["dtype"], list(info["shape"]), len(info["data"])) for name, info in tensors)


def our_view(buf: bytes) -> list[tuple[str, str, list[int], int]] | None:
    try:
        length = header_length(buf[:8], len(buf))
        header = parse_header(buf[8 : 8 + length], length, len(buf))
    except SafetensorsHeaderError:
        return None
    return sorted((e.name, e.dtype, list(e.shape), e.nbytes) for e in header.tensors.values())


def assert_same_verdict(buf: bytes) -> None:
    theirs, ours = library_view(buf), our_view(buf)
    assert ours == theirs, f"library {'accepts' if theirs is not None else 'refuses'}, we {ours!r}: {buf[:300]!r}"


def frame(text: bytes, data_bytes: int) -> bytes:
    return struct.pack("<Q", len(text)) + text + b"\x00" * data_bytes


# ---------------------------------------------------------------------------------- structured headers
dims = st.one_of(st.integers(0, 6), st.sampled_from([U64, U64 + 1, 2**32, -1]), st.sampled_from([1.0, True, "2", None]))
dtype = st.one_of(st.sampled_from(DTYPES), st.sampled_from(["f32", "F8_E4M3FN", "", 5, None]),
                  st.sampled_from([{"F16": None}, {"F16": []}, {"F16": None, "F32": None}]))
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False,
                        allow_infinity=False), st.text(max_size=5))
metadata = st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=3),
                     st.dictionaries(st.text(max_size=3), json_scalar, min_size=1, max_size=2),
                     st.lists(st.text(max_size=3), max_size=2))


@st.composite
def headers(draw) -> bytes:
    """A header built tensor by tensor: mostly consistent, then perturbed the ways a hostile file would be."""
    count = draw(st.integers(0, 4))
    entries, offset = [], 0
    for index in range(count):
        kind = draw(st.sampled_from(DTYPES))
        shape = draw(st.lists(st.integers(0, 5), max_size=3))
        elements = 1
        for dim in shape:
            elements *= dim
        size = elements * DTYPE_BITS[kind] // 8
        entry = {"dtype": kind, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
        if draw(st.integers(0, 3)) == 0:  # perturb this entry
            field = draw(st.sampled_from(["dtype", "shape", "data_offsets", "begin", "end", "extra", "drop"]))
            if field == "dtype":
                entry["dtype"] = draw(dtype)
            elif field == "shape":
                entry["shape"] = draw(st.one_of(st.lists(dims, max_size=3), st.just("3"), st.just({})))
            elif field == "data_offsets":
                entry["data_offsets"] = draw(st.lists(dims, max_size=3))
            elif field in ("begin", "end"):
                i = 0 if field == "begin" else 1
                entry["data_offsets"][i] += draw(st.sampled_from([-size - 1, -1, 1, size, -(2**63), U64]))
            elif field == "extra":
                entry[draw(st.sampled_from(["x", "dtype_", "__metadata__"]))] = draw(json_scalar)
            else:
                del entry[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))]
        form = draw(st.sampled_from(["object", "object", "object", "array"]))
        if form == "array" and set(entry) == {"dtype", "shape", "data_offsets"}:
            entry = [entry["dtype"], entry["shape"], entry["data_offsets"]]
        name = draw(st.one_of(st.just(f"t{index}"), st.text(max_size=4)))
        entries.append((name, entry))
    pairs = []
    if draw(st.booleans()):
        pairs.append(("__metadata__", draw(metadata)))
    pairs += entries
    if pairs and draw(st.integers(0, 5)) == 0:  # a repeated key: tensor (last wins) or __metadata__ (refused)
        pairs.append(draw(st.sampled_from(pairs)))
    pairs = draw(st.permutations(pairs))
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"
    text += draw(st.sampled_from(["", "", " ", "   \n", "\x00", "x"]))
    data = offset + draw(st.sampled_from([0, 0, 0, 1, -1]))
    return frame(text.encode("utf-8", "surrogatepass"), max(data, 0))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(headers())
def test_structured_headers_match_the_library(buf):
    assert_same_verdict(buf)


# ------------------------------------------------------------------------------------------ raw JSON values
json_values = st.recursive(
    json_scalar | st.sampled_from([float("nan"), float("inf"), 10**400, -0.0]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=12,
)


@given(json_values, st.integers(0, 8))
def test_arbitrary_json_headers_match_the_library(value, data_bytes):
    text = json.dumps(value, allow_nan=True)
    assert_same_verdict(frame(text.encode(), data_bytes))


@given(st.integers(0, 200), st.booleans())
def test_nesting_depth_matches_the_library(depth, in_ignored_field):
    inner = "[" * depth + "]" * depth
    if in_ignored_field:
        text = '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' + inner + "}}"
        assert_same_verdict(frame(text.encode(), 1))
    else:
        assert_same_verdict(frame(('{"__metadata__":' + (inner or "null") + "}").encode(), 0))


# ----------------------------------------------------------------------------------------- byte mutations
SEED = frame(json.dumps({
    "__metadata__": {"format": "pt", "config": '{"dims": 3}'},
    "a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
    "b": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]},
    "c": {"dtype": "F4", "shape": [4], "data_offsets": [16, 18]},
}).encode(), 18)


@given(st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]), st.integers(0, len(SEED) - 1),
                          st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_bytes_match_the_library(mutations):
    buf = bytearray(SEED)
    for action, position, value in mutations:
        position %= max(len(buf), 1)
        if action == "flip":
            buf[position] ^= 1 << (value % 8)
        elif action == "set":
            buf[position] = value
        elif action == "insert":
            buf.insert(position, value)
        elif buf:
            del buf[position]
    assert_same_verdict(bytes(buf))


@given(st.binary(max_size=64))
def test_random_bytes_match_the_library(buf):
    assert_same_verdict(buf)
