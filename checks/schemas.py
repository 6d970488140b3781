"""Node schemas in the shape of ComfyUI's GET /object_info, and who provides a node a host lacks.

Sources: the pinned core file workflows/schemas/comfyui-core.json, H3Kit's own classes (passed in by the
caller, who has imported the nodes: checks/ never imports nodes/), or a live server (adapters/comfy_client).
"""

from __future__ import annotations

import copy
import difflib
import inspect
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from . import node_inputs
from .deadline import CHECK_EVERY, check_time
from .invocation import command

PACK_ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS_DIR = PACK_ROOT / "workflows"
API_WORKFLOWS_DIR = WORKFLOWS_DIR / "api"
CORE_SCHEMA_FILE = WORKFLOWS_DIR / "schemas" / "comfyui-core.json"
# H3Kit's own schemas, generated from its node classes (scripts/schemas.py `own`; tests/test_first_hour.py keeps it
# equal to the code): the command line validates against it without importing the nodes, so without torch.
OWN_SCHEMA_FILE = WORKFLOWS_DIR / "schemas" / "h3kit-nodes.json"
H3KIT_PACK = "H3Kit (this pack)"
SPELLING_CUTOFF = 0.85  # difflib ratio for "did you mean": one or two letters off in a node id
UNREADABLE = "h3kit_unreadable"  # marks a server's schema entry that is not in /object_info's shape: why

# Nodes that published H3/LTX graphs use but neither core nor H3Kit provides: who provides them.
KNOWN_THIRD_PARTY = {
    "LoadConditioningT": "ComfyUI-CondCache (use H3KitLoadConditioning instead)",
    "SaveConditioningT": "ComfyUI-CondCache (use H3KitSaveConditioning instead)",
    "SpectrumApplyMiniMaxH3": "xmarre/ComfyUI-Spectrum-MiniMax-H3",
    "UnetLoaderGGUF": "city96/ComfyUI-GGUF",
    "CLIPLoaderGGUF": "city96/ComfyUI-GGUF",
    "VHS_VideoCombine": "Kosinkadink/ComfyUI-VideoHelperSuite",
    "VHS_LoadVideo": "Kosinkadink/ComfyUI-VideoHelperSuite",
    "MiniMaxLowVRAMAttention": "kijai/ComfyUI-KJNodes",
    "MiniMaxH3SolEngineDraftToLTXT8Advanced": "T8mars/comfyui-minimax-h3-audio-T8 (use H3KitDraftToLTX instead)",
    "MiniMaxH3SolEngineLTXIdentityRefinerSetupT8Advanced": "T8mars/comfyui-minimax-h3-audio-T8 (use H3KitRefineSetup instead)",
}


def class_info(node_id: str, cls: type) -> dict[str, Any]:
    """The /object_info entry ComfyUI derives from a classic (V1) node class."""
    spec = cls.INPUT_TYPES()
    sections = {key: dict(spec.get(key, {})) for key in ("required", "optional", "hidden") if spec.get(key)}
    outputs = list(cls.RETURN_TYPES)
    own_check = self_validated_inputs(cls)
    return {
        **({"validate_inputs": own_check} if own_check is not None else {}),
        "input": sections,
        "input_order": {key: list(value) for key, value in sections.items()},
        "output": outputs,
        "output_name": list(getattr(cls, "RETURN_NAMES", outputs)),
        "output_is_list": list(getattr(cls, "OUTPUT_IS_LIST", [False] * len(outputs))),
        "output_node": bool(getattr(cls, "OUTPUT_NODE", False)),
        "name": node_id,
        "display_name": getattr(cls, "DISPLAY_NAME", node_id),
        "description": getattr(cls, "DESCRIPTION", ""),
        "category": cls.CATEGORY,
        "python_module": "custom_nodes.h3kit",
        "pack": H3KIT_PACK,
    }


def self_validated_inputs(cls: type) -> list[str] | None:
    """The inputs a classic node's own VALIDATE_INPUTS takes ('*' for **kwargs), whose min/max and option checks
    ComfyUI's /prompt leaves to it (the pinned convention 'validate_inputs'); None for a node without one. H3KitLoadDraft
    takes its file name: an upload's new name is valid before any file list shows it."""
    validate = getattr(cls, "VALIDATE_INPUTS", None)
    if validate is None:
        return None
    params = inspect.signature(validate).parameters.values()
    return ["*" if p.kind is p.VAR_KEYWORD else p.name for p in params if p.name not in ("self", "cls")]


MIN_SHARED_SPEC_CHARS = 24  # a spec shorter than this in JSON costs less written out than as an index
PINNED_CONVENTIONS = {
    "specs": "an integer where an input section holds a spec is an index into the document's 'specs' (a spec "
             "repeated across nodes is stored once; a stored spec refers only to earlier ones)",
    "AUTOGROW": "V3 io.Autogrow as served: ['COMFY_AUTOGROW_V3', {'template': {'input': {...}, 'prefix', 'min', "
                "'max'}}] (TemplatePrefix: API keys '<group>.<prefix><i>') or {'template': {'input', 'names', 'min'}} "
                "(TemplateNames: API keys '<group>.<name>', e.g. ComfyMathExpression 'values.a')",
    "version": "the ComfyUI release whose layout the entry is: the oldest host read whose entry is the same "
               "(what a difference on an older host is measured against)",
    "older": "for a node an older host read serves differently: {host: {'version', and that host's input and "
             "outputs}} (SaveVideo on 0.33.0: format combo + codec DynamicCombo)",
    "validate_inputs": "not served by /object_info: the inputs the node's own validate function takes, whose "
                       "min/max and option checks /prompt skips ('*': all; 'input_types': the link types too); read "
                       "from the hosts' source",
    "seen_in": "the oldest ComfyUI release known to serve the node: the hosts read, and for the nodes pinned "
               "before, the older test hosts v0.3.64 and 0.12.1",
}


@lru_cache(maxsize=1)
def core_document() -> dict[str, Any]:
    return unpack_specs(json.loads(CORE_SCHEMA_FILE.read_text(encoding="utf-8")))


def map_sections(sections: Any, change_spec) -> Any:
    """An input-section dict ({"required": {name: spec}, ...}) with `change_spec` applied to every spec in it."""
    if not isinstance(sections, dict):
        return sections
    return {section: ({name: change_spec(spec) for name, spec in entries.items()}
                      if section in node_inputs.SECTIONS and isinstance(entries, dict) else entries)
            for section, entries in sections.items()}


def _spec_key(spec: Any) -> str:
    return json.dumps(spec, separators=(",", ":"), ensure_ascii=False)


def pack_specs(nodes: Mapping[str, dict]) -> tuple[list, dict[str, dict]]:
    """(shared specs, nodes whose repeated input specs are indices into them): the pinned file's compact form.
    A spec that occurs more than once (at any nesting level) and is at least MIN_SHARED_SPEC_CHARS long is stored
    once; nested specs are shared before the specs that hold them, so an entry refers only to earlier ones."""
    counts: dict[str, int] = {}

    def count(spec: Any) -> Any:
        counts[_spec_key(spec)] = counts.get(_spec_key(spec), 0) + 1
        if isinstance(spec, list):
            node_inputs.map_nested_sections(spec, lambda sections: map_sections(sections, count))
        return spec

    for entry in nodes.values():
        map_sections(entry.get("input"), count)
    shared: list = []
    index: dict[str, int] = {}

    def pack(spec: Any) -> Any:
        key = _spec_key(spec)
        inner = node_inputs.map_nested_sections(spec, lambda sections: map_sections(sections, pack)) \
            if isinstance(spec, list) else spec
        if counts.get(key, 0) < 2 or len(key) < MIN_SHARED_SPEC_CHARS:
            return inner
        if key not in index:
            index[key] = len(shared)
            shared.append(inner)
        return index[key]

    packed = {name: {**entry, "input": map_sections(entry.get("input"), pack)} if "input" in entry else entry
              for name, entry in nodes.items()}
    return shared, packed


def unpack_specs(document: dict[str, Any]) -> dict[str, Any]:
    """The pinned document with every spec index replaced by its spec (pack_specs' inverse). A stored spec may
    refer only to earlier ones, so a broken file fails here, at once, instead of looping."""
    stored = document.get("specs", [])
    resolved: list = []

    def unpack(spec: Any) -> Any:
        if isinstance(spec, int) and not isinstance(spec, bool):
            if not 0 <= spec < len(resolved):
                raise ValueError(f"{CORE_SCHEMA_FILE.name}: spec index {spec} names no earlier shared spec")
            return resolved[spec]
        return node_inputs.map_nested_sections(spec, lambda sections: map_sections(sections, unpack)) \
            if isinstance(spec, list) else spec

    for spec in stored:
        resolved.append(unpack(spec))
    nodes = {name: {**entry, "input": map_sections(entry.get("input"), unpack)} if "input" in entry else entry
             for name, entry in document.get("nodes", {}).items()}
    return {**{k: v for k, v in document.items() if k != "specs"}, "nodes": nodes}


class PinnedSchemas(dict):
    """What offline_schemas returns: the pinned core schemas with H3Kit's own, marked so the validator judges
    offline (`is_pinned`). Any copy ({**schemas}, copy.deepcopy) is an ordinary dict: schemas someone changed
    stand for a host's."""

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return copy.deepcopy(dict(self), memo)


def is_pinned(schemas: Mapping[str, Any]) -> bool:
    """True when `schemas` are offline_schemas()' own (offline validation), not a server's."""
    return isinstance(schemas, PinnedSchemas)


def pinned_core_nodes() -> int:
    return sum(1 for info in core_document()["nodes"].values() if info.get("pack", "core") == "core")


def pinned_host() -> str:
    """The newest host the pinned file was read from, as its header names it ("yzkee/ComfyUI @783545f6")."""
    return next(iter(core_document().get("hosts", {})), "")


def offline_schemas(pack_classes: Mapping[str, type]) -> dict[str, dict[str, Any]]:
    """Pinned core schemas overlaid with H3Kit's own (ours win: they are read from the code)."""
    return offline_schemas_of({node_id: class_info(node_id, cls) for node_id, cls in pack_classes.items()})


def offline_schemas_of(own: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pinned core schemas overlaid with H3Kit entries already in /object_info's shape (ours win)."""
    return PinnedSchemas({**core_document()["nodes"], **own})


def own_schema_document(classes: Iterable[type]) -> dict[str, Any]:
    """OWN_SCHEMA_FILE's content for these node classes (every one, the optional ones off here included): each
    node's /object_info entry, and the packages an optional node needs (its REQUIRES)."""
    ordered = sorted(classes, key=lambda cls: cls.__name__)
    return {"nodes": {cls.__name__: class_info(cls.__name__, cls) for cls in ordered},
            "requires": {cls.__name__: list(cls.REQUIRES) for cls in ordered if getattr(cls, "REQUIRES", ())}}


@lru_cache(maxsize=1)
def own_document() -> dict[str, Any]:
    return json.loads(OWN_SCHEMA_FILE.read_text(encoding="utf-8"))


def providing_pack(class_type: str, disabled: Mapping[str, Sequence[str]] | None = None,
                   own_ids: Collection[str] | None = None) -> str | None:
    """Which pack provides a node this host lacks, when we know it. `disabled`: {package: [H3Kit node ids]}
    for H3Kit nodes left out because an optional package is missing; `own_ids`: every H3Kit node id (when
    given, an H3Kit-looking id that is not one of them is a typo, not "install H3Kit")."""
    if class_type.startswith("H3Kit"):
        missing = [pkg for pkg, node_ids in (disabled or {}).items() if class_type in node_ids]
        if missing:
            return (f"the optional package(s) {', '.join(missing)} that H3Kit's {class_type} needs "
                    f"(pip install {' '.join(missing)})")
        if own_ids is not None and class_type not in own_ids:
            return None
        return H3KIT_PACK
    core = core_document()["nodes"].get(class_type)
    if core is not None:
        pack = core.get("pack", "core")
        return f"ComfyUI core (ComfyUI {core['seen_in']} serves it)" if pack == "core" and core.get("seen_in") else pack
    return KNOWN_THIRD_PARTY.get(class_type)


def core_since(class_type: str) -> str | None:
    """The oldest test host's ComfyUI version that serves this core node (pinned schemas, 'seen_in'), or None when
    it is not a core node."""
    info = core_document()["nodes"].get(class_type)
    return info.get("seen_in") if info and info.get("pack", "core") == "core" else None


def schema_version(class_type: str) -> str:
    """The ComfyUI version whose schema the pinned entry is (SaveVideo: the >= 0.34 layout; the rest: 0.33.0)."""
    info = core_document()["nodes"].get(class_type) or {}
    return str(info.get("version") or core_document().get("comfyui_version"))


def server_schemas(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A server's /object_info with every entry in the shape the validator and the rules read (input sections
    of [type, options] specs, options whose numbers are numbers, dynamic inputs nested at most
    node_inputs.MAX_NESTING deep, Autogrow groups of at most node_inputs.MAX_SLOTS slots, a list of outputs).
    An entry that is not becomes {UNREADABLE: why}: the validator reports that node type's inputs as unchecked
    instead of building what a hostile or broken schema asks for."""
    readable = {}
    for index, (name, entry) in enumerate(info.items()):
        if index % CHECK_EVERY == 0:
            check_time("checking the server's node schemas")
        readable[name] = _readable_entry(entry)
    return readable


def _readable_entry(entry: Any) -> dict[str, Any]:
    why = _schema_problem(entry)
    if why is None:
        return entry
    return {"input": {}, "output": [], UNREADABLE: why}


def _schema_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return "the entry is not a JSON object"
    outputs = entry.get("output", [])
    if not isinstance(outputs, list) or not all(isinstance(o, (str, list)) for o in outputs):
        return "'output' is not a list of types"
    return _inputs_problem(entry.get("input", {}), "input", 0)


def _inputs_problem(sections: Any, where: str, depth: int) -> str | None:
    if depth > node_inputs.MAX_NESTING:
        return f"{where}: dynamic inputs nested more than {node_inputs.MAX_NESTING} deep"
    if not isinstance(sections, dict):
        return f"{where} is not a JSON object"
    for section in node_inputs.SECTIONS:
        specs = sections.get(section, {})
        if not isinstance(specs, dict):
            return f"{where}.{section} is not a JSON object"
        for name, spec in specs.items():
            why = _spec_problem(spec, f"{where}.{section}.{name}", depth)
            if why is not None:
                return why
    return None


def _spec_problem(spec: Any, where: str, depth: int) -> str | None:
    if not isinstance(spec, list) or not spec or not isinstance(spec[0], (str, list)):
        return f"{where}: not a [type, options] list"
    options = spec[1] if len(spec) > 1 else {}
    if not isinstance(options, dict):
        return None  # options that are not an object are ignored, as ComfyUI's frontend ignores them
    for key in ("min", "max", "step"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{where}: '{key}' is not a number"
    if options.get("step") is not None and not options["step"] > 0:
        return f"{where}: 'step' is not positive"
    if not isinstance(options.get("options", []), list):
        return f"{where}: 'options' is not a list"
    if spec[0] in node_inputs.AUTOGROW_HEADS:
        return _autogrow_problem(options, where, depth)
    nested = [option.get("inputs") for option in options.get("options", []) if isinstance(option, dict)
              and "inputs" in option] if spec[0] == node_inputs.DYNAMIC_COMBO else (
        [options["inputs"]] if spec[0] == node_inputs.DYNAMIC_SLOT and "inputs" in options else [])
    return next((why for inputs in nested if (why := _inputs_problem(inputs, where, depth + 1))), None)


def _autogrow_problem(options: dict[str, Any], where: str, depth: int) -> str | None:
    template = options.get("template")
    group = template if isinstance(template, dict) else options
    slots = len(group["names"]) if isinstance(group.get("names"), list) else group.get("max", 0)
    if isinstance(slots, bool) or not isinstance(slots, (int, float)) or not 0 <= slots <= node_inputs.MAX_SLOTS:
        return (f"{where}: an Autogrow group of {str(slots)[:40]} slots; ComfyUI allows at most "
                f"{node_inputs.MAX_SLOTS}")
    return _inputs_problem(group["input"], where, depth + 1) if isinstance(group.get("input"), dict) else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    """The one close spelling among `candidates` (difflib ratio >= SPELLING_CUTOFF; the best, ties to the greatest
    name, as difflib.get_close_matches(n=1) picks), or None. The time limit applied is checked as it goes: a server
    may list a million names."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(name)
    best: tuple[float, str] | None = None
    for index, candidate in enumerate({c for c in candidates if c != name}):
        if index % CHECK_EVERY == 0:
            check_time("looking for a close node name")
        matcher.set_seq1(candidate)
        if (matcher.real_quick_ratio() >= SPELLING_CUTOFF and matcher.quick_ratio() >= SPELLING_CUTOFF
                and (score := matcher.ratio()) >= SPELLING_CUTOFF and (best is None or (score, candidate) > best)):
            best = (score, candidate)
    return best[1] if best else None


def unknown_node_advice(class_type: str, pack: str | None, candidates: Iterable[str]) -> tuple[str, str]:
    """(what is wrong, the fix) for a class_type this host does not have, as one message: a core node this
    ComfyUI is too old for, a pack to install, or a misspelling of a node that exists."""
    since = core_since(class_type)
    if since:
        return (f"'{class_type}' is a ComfyUI core node this ComfyUI does not have: this ComfyUI is older than "
                f"the workflow (ComfyUI {since} serves it)", f"update ComfyUI to {since} or later")
    if pack:
        return f"'{class_type}' is not registered on this host", f"install {pack}, then restart ComfyUI"
    known = {*candidates, *core_document()["nodes"], *KNOWN_THIRD_PARTY}
    suggestion = did_you_mean(class_type, known)
    if suggestion:
        return (f"no node is called '{class_type}' (did you mean '{suggestion}')",
                f"set class_type to '{suggestion}'")
    return (f"'{class_type}' is not a node type this host knows",
            "install the custom node pack that provides it, or fix the name")


def offline_unknown_advice(class_type: str, candidates: Iterable[str]) -> tuple[str, str]:
    """(what is wrong, the fix) offline, for a class_type neither the pinned core file nor H3Kit knows: it may be a
    node of a newer ComfyUI or of a pack the user's server has, so the server decides (never "install a pack")."""
    doc = core_document()
    where = (f"a core node of ComfyUI {doc.get('comfyui_version')} ({pinned_host()}; pinned list of "
             f"{pinned_core_nodes()} nodes)")
    check = f"check it against your server (`{command('validate --server URL')}`) or install the pack that provides it"
    suggestion = did_you_mean(class_type, {*candidates, *doc["nodes"], *KNOWN_THIRD_PARTY})
    if suggestion:
        return (f"'{class_type}' is not {where} (did you mean '{suggestion}'? if your server has '{class_type}', "
                f"`{command('validate --server URL')}` checks it there)", f"set class_type to '{suggestion}'")
    return f"'{class_type}' is not {where}", check
