"""The inputs a node schema declares, as API prompts key them: plain inputs, V3 Autogrow slots and V3
DynamicCombo option inputs, nested under dotted keys.

ComfyUI expands a V3 node's dynamic inputs against the prompt's own keys before it validates
(`comfy_api/latest/_io.py`, `get_finalized_class_inputs`): a DynamicCombo `codec` set to "h264" declares the
inputs of its "h264" option as `codec.<name>` ("codec.encoding", then "codec.encoding.crf"); an Autogrow group
`ref_images` declares `ref_images.<prefix><i>` slots. `/object_info` serves them as

    ["COMFY_DYNAMICCOMBO_V3", {"options": [{"key": "h264", "inputs": {"required": {...}, "optional": {...}}}, ...]}]
    ["COMFY_AUTOGROW_V3", {"template": {"input": {"required": {name: spec}}, "prefix": "ref_image_", "min": 0,
                                        "max": 9}}]          (or "names": [...] instead of prefix/max)
    ["COMFY_DYNAMICSLOT_V3", {"slotType": "IMAGE", "inputs": {...}}]

Pure: schemas in, names out. Every walk is bounded (nesting depth, slots per group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from re import compile as regex
from typing import Any

from .deadline import check_time

DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
AUTOGROW = "COMFY_AUTOGROW_V3"
DYNAMIC_SLOT = "COMFY_DYNAMICSLOT_V3"
AUTOGROW_HEADS = (AUTOGROW, "AUTOGROW")  # as served, and the pinned-normalised shape (prefix/max/types at the top)
MATCH_TYPE = "COMFY_MATCHTYPE_V3"  # io.MatchType: the host leaves its links to the frontend
ANY_TYPE = "*"
COMBO = "COMBO"
KNOWN_V3_TYPES = frozenset({AUTOGROW, DYNAMIC_COMBO, DYNAMIC_SLOT, MATCH_TYPE})
V3_TYPE = regex(r"COMFY_[A-Z0-9_]+_V3")  # how the host names its dynamic io types
MAX_NESTING = 8  # dynamic inputs inside dynamic inputs; the deepest core node (SaveVideo >= 0.34) nests 3
MAX_SLOTS = 100  # Autogrow._MaxNames in the host: no group declares more slots
SECTIONS = ("required", "optional")

Declared = dict[str, tuple[list, bool]]  # {dotted key: (spec, required)}


def option_key(option: Any) -> Any:
    """A combo option as the prompt sends it: DynamicCombo options are {"key": ..., "inputs": ...} objects."""
    return option.get("key") if isinstance(option, dict) else option


def option_keys(options: Any) -> list:
    return [option_key(o) for o in options] if isinstance(options, list) else []


def dynamic_option(spec: Any, value: Any) -> dict | None:
    """The option object of a DynamicCombo spec that `value` selects, or None."""
    if not (isinstance(spec, (list, tuple)) and len(spec) > 1 and spec[0] == DYNAMIC_COMBO and isinstance(spec[1], dict)):
        return None
    for option in spec[1].get("options") or []:
        if isinstance(option, dict) and option.get("key") == value and not isinstance(value, (list, dict)):
            return option
    return None


@dataclass(frozen=True)
class AutogrowGroup:
    """A V3 Autogrow group as the host expands it (comfy_api/latest/_io.py, Autogrow._expand_schema_for_dynamic):
    its slot names in order (TemplatePrefix: `<prefix><i>` for i < max; TemplateNames: the listed names, e.g.
    ComfyMathExpression's "a" .. "z"), each keyed `<group>.<name>` in the prompt; the first `minimum` slots are
    required when the template's input is. `prefix` is None for a TemplateNames group."""

    names: tuple[str, ...]
    minimum: int
    spec: list  # one slot's spec
    required: bool  # the template's input is in its "required" section
    prefix: str | None

    def slots(self) -> list[tuple[str, list, bool]]:
        """(slot name, spec, required) in the host's order."""
        return [(name, self.spec, self.required and i < self.minimum) for i, name in enumerate(self.names)]


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _slot_names(group: Mapping) -> tuple[tuple[str, ...], str | None]:
    """(names, prefix or None) of a template: listed names win, as in the host; at most MAX_SLOTS."""
    if isinstance(group.get("names"), list):
        return tuple(str(n) for n in group["names"][:MAX_SLOTS]), None
    prefix = str(group.get("prefix", ""))
    return tuple(f"{prefix}{i}" for i in range(min(_count(group.get("max", 0)), MAX_SLOTS))), prefix


def autogrow_group(opts: Any) -> AutogrowGroup | None:
    """The Autogrow group of an Autogrow spec's options, live (`template`) or pinned-normalised (`prefix`, `max` or
    `names`, `types` at the top level), or None when the options are neither."""
    if not isinstance(opts, Mapping):
        return None
    template = opts.get("template")
    if not isinstance(template, Mapping):
        if "names" not in opts and "max" not in opts:
            return None
        names, prefix = _slot_names(opts)
        slot_type = ",".join(str(t) for t in opts.get("types", ["*"])) if isinstance(opts.get("types"), list) else "*"
        return AutogrowGroup(names, _count(opts.get("min", 0)), [slot_type, {}], False, prefix)
    inner = template.get("input") if isinstance(template.get("input"), Mapping) else {}
    for section in SECTIONS:  # the host takes the first input of the first non-empty section
        entries = inner.get(section)
        if isinstance(entries, Mapping) and entries:
            spec = next(iter(entries.values()))
            if not isinstance(spec, (list, tuple)) or not spec:
                return None
            names, prefix = _slot_names(template)
            return AutogrowGroup(names, _count(template.get("min", 0)), list(spec), section == "required", prefix)
    return None


def map_nested_sections(spec: list, change: Callable[[Any], Any]) -> list:
    """`spec` with `change` applied to each input section dict nested in it (a DynamicCombo option's inputs, an
    Autogrow template's input, a DynamicSlot's inputs); other specs as they are. Returns a new list when it
    changed anything."""
    if len(spec) < 2 or not isinstance(spec[1], dict):
        return spec
    head, opts = spec[0], spec[1]
    if head == DYNAMIC_COMBO and isinstance(opts.get("options"), list):
        opts = {**opts, "options": [{**o, "inputs": change(o["inputs"])} if isinstance(o, dict) and "inputs" in o
                                    else o for o in opts["options"]]}
    elif head in AUTOGROW_HEADS and isinstance(opts.get("template"), dict) and "input" in opts["template"]:
        opts = {**opts, "template": {**opts["template"], "input": change(opts["template"]["input"])}}
    elif head == DYNAMIC_SLOT and "inputs" in opts:
        opts = {**opts, "inputs": change(opts["inputs"])}
    else:
        return spec
    return [head, opts, *spec[2:]]


def _sections(inputs: Any) -> Iterator[tuple[str, list, bool]]:
    """(name, spec, required) of an `input`-shaped dict ({"required": {...}, "optional": {...}})."""
    if not isinstance(inputs, dict):
        return
    for section in SECTIONS:
        entries = inputs.get(section)
        for name, spec in (entries.items() if isinstance(entries, dict) else []):
            if isinstance(spec, (list, tuple)) and spec:
                yield str(name), list(spec), section == "required"


def _walk(inputs: Any, values: Mapping | None, prefix: str, depth: int, found: Declared) -> None:
    """Declare the inputs of one level. `values` None: every input any option could declare (the universe)."""
    if depth > MAX_NESTING:
        return
    for name, spec, required in _sections(inputs):
        check_time("reading a node's inputs")
        key = f"{prefix}{name}"
        head = spec[0]
        opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
        if head in AUTOGROW_HEADS and autogrow_group(opts) is not None:
            # the host requires the first `min` slots of a required template whatever the group's own section
            for slot, slot_spec, slot_required in autogrow_slots(opts):
                found[f"{key}.{slot}"] = (slot_spec, slot_required)
            continue
        found[key] = (spec, required)  # an Autogrow group H3Kit cannot read stays one key: construct_problem names it
        if head == DYNAMIC_COMBO:
            options = opts.get("options") or []
            chosen = options if values is None else [o for o in options if values.get(key) is not None
                                                     and o is dynamic_option(spec, values.get(key))]
            for option in chosen:
                if isinstance(option, dict):
                    _walk(option.get("inputs"), values, key + ".", depth + 1, found)
        elif head == DYNAMIC_SLOT and (values is None or key in values):
            _walk(opts.get("inputs"), values, key + ".", depth + 1, found)


def autogrow_slots(opts: Any) -> list[tuple[str, list, bool]]:
    """(slot name, slot spec, required) of an Autogrow group, live (`template`) or pinned-normalised shape: the one
    source of slot names (numbered `<prefix><i>` or named); [] when the options are neither."""
    group = autogrow_group(opts)
    return group.slots() if group is not None else []


def declared_inputs(info: Mapping, values: Mapping | None = None) -> Declared:
    """{dotted key: (spec, required)} that a node with these input `values` declares: dynamic combos expand the
    option their value selects (as the host does before validating). `values` None: every key any choice of
    options could declare."""
    found: Declared = {}
    _walk(info.get("input") if isinstance(info, Mapping) else None, values, "", 0, found)
    return found


def is_hidden(spec: Any) -> bool:
    """An input the editor does not show (`"hidden": true`): kept for old prompts, not for new ones."""
    return isinstance(spec, (list, tuple)) and len(spec) > 1 and isinstance(spec[1], dict) and bool(spec[1].get("hidden"))


def link_accepted(received: Any, expected: Any) -> bool:
    """ComfyUI's own verdict on a link whose source output has type `received` into an input whose spec type is
    `expected` (comfy_execution/validation.py `validate_node_input`, non-strict, as /prompt calls it; identical on
    0.33.0 and yzkee @783545f6): the same type; "*" on either side, alone or in a comma set; io.MatchType on either
    side (the host leaves it to the frontend); an output that is a list of options into a COMBO; comma-separated
    (MultiType) sets that share a type. An old-style combo input (a list) takes only that very list."""
    if received == expected:
        return True
    if ANY_TYPE in (received, expected) or MATCH_TYPE in (received, expected):
        return True
    if isinstance(received, list) and expected == COMBO:
        return True
    if not isinstance(received, str) or not isinstance(expected, str):
        return False
    got = {t.strip() for t in received.split(",")}
    wanted = {t.strip() for t in expected.split(",")}
    return ANY_TYPE in got or ANY_TYPE in wanted or bool(got & wanted)


def unknown_construct(*types: Any) -> str | None:
    """The first of `types` that is a ComfyUI V3 io type (COMFY_*_V3) H3Kit does not know, or None."""
    for kind in types:
        for part in (kind.split(",") if isinstance(kind, str) else []):
            if V3_TYPE.fullmatch(part.strip()) and part.strip() not in KNOWN_V3_TYPES:
                return part.strip()
    return None


def construct_problem(spec: Any) -> str | None:
    """Why H3Kit cannot judge an input of this spec, naming the construct (an unknown COMFY_*_V3 io type, an
    Autogrow whose template it cannot read, a DynamicCombo without a list of options), or None."""
    head = spec[0] if isinstance(spec, (list, tuple)) and spec else None
    opts = spec[1] if isinstance(spec, (list, tuple)) and len(spec) > 1 and isinstance(spec[1], dict) else {}
    unknown = unknown_construct(head)
    if unknown is not None:
        return f"its type {unknown} is a ComfyUI type construct H3Kit does not know"
    if head in AUTOGROW_HEADS and autogrow_group(opts) is None:
        return f"it is an Autogrow group ({head}) whose template H3Kit cannot read"
    if head == DYNAMIC_COMBO and not isinstance(opts.get("options"), list):
        return f"it is a DynamicCombo ({head}) without a list of options"
    return None
