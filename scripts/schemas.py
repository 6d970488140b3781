"""Schemas for the CLI: the pinned core file + this pack's own node classes (checks/schemas.py does the
work; this module only supplies the pack's registry, which checks/ never imports).

It also regenerates the pinned files (a developer's tool, run by hand). H3Kit's own schemas, after a node's inputs
change (tests/test_first_hour.py says when):

    python -m h3kit.scripts.schemas own

The core schemas, from real hosts:

    python -m h3kit.scripts.schemas pin --host URL BASE_DIR LABEL VERSION [--host ...] [--out FILE]

Each `--host` is a running ComfyUI started with `--base-directory BASE_DIR` on a throwaway folder, newest host
first; LABEL names it ("yzkee/ComfyUI @783545f6") and VERSION is the ComfyUI release its layout stands for (the
version an older host is told to update to). The tool puts one empty marker file in each of the host's model
folders and its input folder (only inside BASE_DIR), reads `/object_info`, removes the markers, and writes every
node the newest host serves: a combo that lists a folder's marker becomes that folder (`model_folder` /
`input_files`), tooltips and descriptions are dropped, repeated input specs are stored once
(checks.schemas.pack_specs). Third-party entries and the older test hosts' `seen_in` of the previous file are kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from ..adapters.comfy_client import ComfyClient
from ..adapters.files import write_new, write_text
from ..checks import schemas as core
from ..checks.environment import missing_packages
from ..checks.facts import parse_version
from ..checks.node_inputs import map_nested_sections
from ..checks.schemas import API_WORKFLOWS_DIR, H3KIT_PACK, WORKFLOWS_DIR  # noqa: F401 - the CLI's paths

# The command line reads H3Kit's own schemas from the pinned file (checks/schemas.py OWN_SCHEMA_FILE), never from
# the node classes: importing those imports torch, which --help, validate and doctor do not need.

def offline_schemas() -> dict[str, dict[str, Any]]:
    """The pinned core schemas and those of the H3Kit nodes usable here."""
    off = {node_id for ids in disabled_nodes().values() for node_id in ids}
    return core.offline_schemas_of({node_id: entry for node_id, entry in core.own_document()["nodes"].items()
                                    if node_id not in off})


def own_node_ids() -> set[str]:
    """Every H3Kit node id, including the optional ones left out on this machine."""
    return set(core.own_document()["nodes"])


def providing_pack(class_type: str) -> str | None:
    return core.providing_pack(class_type, disabled_nodes(), own_node_ids())


def disabled_nodes() -> dict[str, list[str]]:
    """{package: the H3Kit node ids that are off because it is not installed here}, as nodes/ computes it."""
    disabled: dict[str, list[str]] = {}
    for node_id, packages in core.own_document()["requires"].items():
        for package in missing_packages(packages):
            disabled.setdefault(package, []).append(node_id)
    return disabled


def own_schema_text() -> str:
    """The pinned own-schema file as the node classes give it today."""
    from ..nodes import every_node_class

    return json.dumps(core.own_schema_document(every_node_class()), indent=1, ensure_ascii=False) + "\n"


# --- pinning the core schemas from real hosts -------------------------------------------------------------------

MARKER = "h3kit-pin-"  # marker files: h3kit-pin-<folder key>.<ext>; the input folder's key is "input"
MODEL_MARKER_EXTENSIONS = (".safetensors", ".yaml", ".gguf", ".onnx")  # one each folder's filter accepts
INPUT_MARKER_EXTENSIONS = (".png", ".wav", ".mp4", ".latent", ".glb", ".json", ".txt", ".safetensors")
DROPPED_FIELDS = frozenset({"description", "search_aliases", "price_badge", "output_tooltips", "essentials_category",
                            "name", "input_order"})  # input_order: the sections' own key order says it


# Core nodes whose own validate function takes these inputs, so /prompt skips their min/max and option checks ("*":
# every input, the function takes **kwargs; "input_types": it also takes the link types, so their check is skipped
# too). /object_info does not say it; read from the hosts' source (validate_inputs / VALIDATE_INPUTS overrides and
# the classes that inherit them), the same on 0.33.0 @0f1fa67a and yzkee @783545f6.
SELF_VALIDATED = {
    "LoadImage": ["image"], "LoadImageMask": ["image"], "LoadImageOutput": ["image"], "LoadLatent": ["latent"],
    "LoadVideo": ["file"], "LoadAudio": ["audio"], "Load3D": ["*"], "Load3DAdvanced": ["*"], "CustomCombo": ["*"],
    "ComfySoftSwitchNode": ["switch", "on_false", "on_true"], "SelectModelDevice": ["device"],
    "SelectCLIPDevice": ["device"], "SelectVAEDevice": ["device"], "ModelAttentionBackend": ["attention"],
    "FluxProUltraImageNode": ["aspect_ratio"], "TripoConversionNode": ["input_types"],
}
SKIPPED_FOLDERS = frozenset({"custom_nodes"})  # the host imports what is there: never write into it
FOLDER_MARKER_FILES = ("model_index.json", "metadata.json")  # a marker folder: what diffusers / datasets list


@contextmanager
def markers(client: ComfyClient, base: Path) -> Iterator[None]:
    """Marker files (and a marker folder, for the loaders that list folders) in each model folder's first path and
    in the input folder, removed afterwards. Writes only inside `base` (the host's --base-directory)."""
    base = base.resolve()
    targets = [(Path(paths[0]), key, MODEL_MARKER_EXTENSIONS)
               for key, paths in client.get_json("/internal/folder_paths").items()
               if paths and key not in SKIPPED_FOLDERS]
    targets.append((base / "input", "input", INPUT_MARKER_EXTENSIONS))
    written: list[Path] = []
    try:
        for folder, key, extensions in targets:
            if not folder.resolve().is_relative_to(base):
                raise SystemExit(f"{folder} is outside {base}: start the host with --base-directory {base}")
            marker_dir = folder / f"{MARKER}{key}"
            marker_dir.mkdir(parents=True)
            written += [write_new(marker_dir, name, [b"{}"]) for name in FOLDER_MARKER_FILES] + [marker_dir]
            written += [write_new(folder, f"{MARKER}{key}{ext}", [b""]) for ext in extensions]
        yield
    finally:
        for path in written:
            path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)


def marker_folder(options: Any) -> str | None:
    """The folder key whose marker a combo's options list ("h3kit-pin-vae.safetensors", "h3kit-pin-diffusers"), or
    None when they list none."""
    keys = {str(o)[len(MARKER):].split("/")[0].split("\\")[0].rsplit(".", 1)[0]
            for o in options if isinstance(o, str) and o.startswith(MARKER)} if isinstance(options, list) else set()
    if len(keys) > 1:
        raise SystemExit(f"a combo lists the markers of several folders ({sorted(keys)}): pin it by hand")
    return next(iter(keys), None)


def pinned_spec(spec: Any) -> Any:
    """A served input spec as pinned: tooltips dropped, a file list replaced by its folder, nested inputs alike."""
    if not isinstance(spec, list) or not spec:
        return spec
    head, opts = spec[0], dict(spec[1]) if len(spec) > 1 and isinstance(spec[1], dict) else {}
    opts.pop("tooltip", None)
    folder = marker_folder(head if isinstance(head, list) else opts.get("options"))
    if folder is not None:
        head = "COMBO"
        opts.pop("options", None)
        if isinstance(opts.get("default"), str) and opts["default"].startswith(MARKER):
            del opts["default"]
        opts.update({"input_files": True} if folder == "input" else {"model_folder": folder})
    return map_nested_sections([head, opts], pinned_sections) if len(spec) > 1 or opts else [head]


def pinned_sections(sections: Any) -> Any:
    return core.map_sections(sections, pinned_spec)


def pinned_entry(name: str, entry: dict) -> dict:
    pinned = {key: (pinned_sections(value) if key == "input" else value) for key, value in entry.items()
              if key not in DROPPED_FIELDS}
    return {**pinned, "validate_inputs": SELF_VALIDATED[name]} if name in SELF_VALIDATED else pinned


def read_host(url: str, base: Path) -> tuple[str, dict]:
    """(the ComfyUI version the host reports, its /object_info with the markers in place)."""
    with ComfyClient(url) as client:
        version = str(client.get_json("/system_stats")["system"]["comfyui_version"])
        with markers(client, base):
            return version, client.object_info()


SCHEMA_FIELDS = ("input", "output", "output_is_list", "output_name", "output_node")  # what validation reads


def _same_schema(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in SCHEMA_FIELDS)


def pin_document(hosts: list[tuple[str, str, str, dict]], previous: dict) -> dict:
    """The pinned document from `hosts` = [(label, reported version, release version, pinned entries)], newest
    first. `previous`: the file it replaces (its third-party entries and older `seen_in` are kept)."""
    (newest_label, newest_reported, newest_release, newest), older = hosts[0], hosts[1:]
    nodes: dict[str, dict] = {}
    differs: dict[str, list[str]] = {}
    for name, entry in newest.items():
        serving = [(label, release) for label, _, release, info in older if name in info]
        same = [release for label, _, release, info in older if name in info and _same_schema(info[name], entry)]
        version = min(same, key=parse_version) if same else newest_release
        before = previous.get("nodes", {}).get(name, {})
        seen = [v for v in (*(r for _, r in serving), newest_release, before.get("seen_in")) if v]
        variants = {label: {"version": release, **{k: info[name][k] for k in SCHEMA_FIELDS if k in info[name]}}
                    for label, _, release, info in older if name in info and not _same_schema(info[name], entry)}
        for label in variants:
            differs.setdefault(label, []).append(name)
        nodes[name] = {**entry, "pack": "core", "version": version, "seen_in": min(seen, key=parse_version),
                       **({"older": variants} if variants else {})}
    for name, entry in previous.get("nodes", {}).items():
        if entry.get("pack", "core") != "core" and name not in nodes:
            nodes[name] = pinned_entry(name, entry)
    specs, packed = core.pack_specs(nodes)
    labels = ", ".join(f"{label} (ComfyUI {reported}, {len(info)} nodes)" for label, reported, _, info in hosts)
    return {
        "describes": (f"ComfyUI core node schemas as GET /object_info serves them: every node {newest_label} serves "
                      f"({len(newest)}), file lists replaced by the folder they come from, tooltips and descriptions "
                      "dropped, repeated input specs stored once under 'specs' (an integer in an input section "
                      "is an index there); third-party entries from their sources. Read from: " + labels + "."),
        "comfyui_version": newest_reported,
        "hosts": {label: {"comfyui_version": reported, "layout_version": release, "nodes": len(info),
                          "read": date.today().isoformat(),
                          **({"differs": sorted(differs[label])} if label in differs else {})}
                  for label, reported, release, info in hosts},
        "sources": {**{k: v for k, v in previous.get("sources", {}).items() if "/" in k and k != "Comfy-Org/ComfyUI"},
                    **{label: f"GET /object_info, read {date.today().isoformat()} (scripts/schemas.py pin)"
                       for label, *_ in hosts}},
        "conventions": {**previous.get("conventions", {}), **core.PINNED_CONVENTIONS},
        "specs": specs,
        "nodes": packed,
    }


def document_text(document: dict) -> str:
    """The document as JSON with one line per node and per shared spec (small diffs when a host changes)."""
    head = {k: v for k, v in document.items() if k not in ("specs", "nodes")}
    lines = json.dumps(head, indent=1, ensure_ascii=False)[:-2] + ',\n "specs": [\n'
    lines += ",\n".join("  " + json.dumps(s, ensure_ascii=False, separators=(",", ":")) for s in document["specs"])
    lines += '\n ],\n "nodes": {\n'
    lines += ",\n".join(f"  {json.dumps(n)}: " + json.dumps(e, ensure_ascii=False, separators=(",", ":"))
                        for n, e in document["nodes"].items())
    return lines + "\n }\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    pin = sub.add_parser("pin", help="regenerate the pinned core schemas from running hosts")
    pin.add_argument("--host", nargs=4, action="append", required=True, metavar=("URL", "BASE_DIR", "LABEL", "VERSION"))
    pin.add_argument("--out", type=Path, default=core.CORE_SCHEMA_FILE)
    sub.add_parser("own", help=f"regenerate {core.OWN_SCHEMA_FILE.name} from H3Kit's node classes")
    args = parser.parse_args(argv)
    if args.command == "own":
        text = own_schema_text()
        write_text(core.OWN_SCHEMA_FILE, text, overwrite=True)
        print(f"wrote {core.OWN_SCHEMA_FILE}: {len(core.own_document.__wrapped__()['nodes'])} H3Kit nodes")
        return 0
    hosts = []
    for url, base, label, release in args.host:
        reported, info = read_host(url, Path(base))
        hosts.append((label, reported, release, {name: pinned_entry(name, entry) for name, entry in info.items()}))
    previous = core.unpack_specs(json.loads(core.CORE_SCHEMA_FILE.read_text(encoding="utf-8")))
    text = document_text(pin_document(hosts, previous))
    write_text(args.out, text, overwrite=True)
    print(f"wrote {args.out}: {len(hosts[0][3])} core nodes, {len(text.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
