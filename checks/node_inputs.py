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

from collections.abc import Iterator, Mapping
from typing import Any

DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
AUTOGROW = "COMFY_AUTOGROW_V3"
DYNAMIC_SLOT = "COMFY_DYNAMICSLOT_V3"
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


def autogrow_template(opts: Mapping) -> tuple[list[str], int, list, bool] | None:
    """(slot names, min, the slot's spec, whether the first `min` slots are required) of a live Autogrow spec's
    options, or None when it is not one."""
    template = opts.get("template")
    if not isinstance(template, dict):
        return None
    inner = template.get("input") if isinstance(template.get("input"), dict) else {}
    slot_spec, slot_required = None, False
    for section in SECTIONS:
        entries = inner.get(section)
        if isinstance(entries, dict) and entries:
            slot_spec, slot_required = next(iter(entries.values())), section == "required"
            break
    if not isinstance(slot_spec, (list, tuple)):
        return None
    minimum = template.get("min", 0)
    minimum = minimum if isinstance(minimum, int) and not isinstance(minimum, bool) else 0
    if isinstance(template.get("names"), list):
        names = [str(n) for n in template["names"][:MAX_SLOTS]]
    else:
        top = template.get("max", 0)
        top = min(top, MAX_SLOTS) if isinstance(top, int) and not isinstance(top, bool) else 0
        names = [f"{template.get('prefix', '')}{i}" for i in range(top)]
    return names, minimum, list(slot_spec), slot_required


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
        key = f"{prefix}{name}"
        head = spec[0]
        opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
        if head == AUTOGROW or head == "AUTOGROW":
            for slot, slot_spec, slot_required in autogrow_slots(opts):
                found[f"{key}.{slot}"] = (slot_spec, required and slot_required)
            continue
        found[key] = (spec, required)
        if head == DYNAMIC_COMBO:
            options = opts.get("options") or []
            chosen = options if values is None else [o for o in options if values.get(key) is not None
                                                     and o is dynamic_option(spec, values.get(key))]
            for option in chosen:
                if isinstance(option, dict):
                    _walk(option.get("inputs"), values, key + ".", depth + 1, found)
        elif head == DYNAMIC_SLOT and (values is None or key in values):
            _walk(opts.get("inputs"), values, key + ".", depth + 1, found)


def autogrow_slots(opts: Mapping) -> list[tuple[str, list, bool]]:
    """(slot name, slot spec, required) of an Autogrow group, live (`template`) or pinned-normalised
    (`prefix`, `max`, `types`) shape."""
    live = autogrow_template(opts)
    if live is not None:
        names, minimum, spec, required = live
        return [(slot, spec, required and i < minimum) for i, slot in enumerate(names)]
    top = opts.get("max", 0)
    top = min(top, MAX_SLOTS) if isinstance(top, int) and not isinstance(top, bool) else 0
    slot_type = ",".join(str(t) for t in opts.get("types", ["*"]))
    return [(f"{opts.get('prefix', '')}{i}", [slot_type, {}], False) for i in range(top)]


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
