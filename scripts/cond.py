"""Cached conditioning (H3KitSaveConditioning / H3KitLoadConditioning files).

  cond build   encode a prompt once through a running ComfyUI and save it as a cache
  cond info    print a cache file's metadata and check its data
  cond list    list the caches in the conditioning_cache folder
  cond import  convert a legacy torch.save cache (.pt) safely: torch.load(weights_only=True) only

The folder is --dir, else $H3KIT_COND_CACHE_DIR (inside ComfyUI: ComfyUI/models/conditioning_cache).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from ..nodes.common import printable

ENV_VAR = "H3KIT_COND_CACHE_DIR"
SAVE_NODE = "H3KitSaveConditioning"
POLL_S = 0.5


class CommandError(Exception):
    """A user-facing failure: printed as 'error: ...' with exit code 1."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="cond_command", metavar="SUBCOMMAND", required=True)

    build = sub.add_parser("build", help="encode a prompt through a running ComfyUI and save the cache")
    build.add_argument("--server", default="http://127.0.0.1:8188", help="ComfyUI URL (default %(default)s)")
    text = build.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="the prompt to encode")
    text.add_argument("--text-file", type=Path, help="read the prompt from this UTF-8 file (exact bytes kept)")
    build.add_argument("--clip", required=True, help="text-encoder file name as ComfyUI lists it in models/text_encoders")
    build.add_argument("--type", default="ltxv", help="CLIPLoader type: ltxv for LTX-2.5 (Gemma), minimax for H3")
    build.add_argument("--name", required=True, help="cache name, e.g. ltx_generic_refine")
    build.add_argument("--device", choices=("default", "cpu"), default="default", help="CLIPLoader device")
    build.add_argument("--overwrite", action="store_true", help="replace an existing cache with different content")
    build.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the encode (default %(default)s)")

    info = sub.add_parser("info", help="print a cache's metadata and verify its data")
    info.add_argument("file", help="a cache file path, or a name in the cache folder")
    info.add_argument("--dir", type=Path, help=f"cache folder (default ${ENV_VAR})")
    info.add_argument("--json", action="store_true", help="print JSON")

    listing = sub.add_parser("list", help="list the caches in the folder")
    listing.add_argument("--dir", type=Path, help=f"cache folder (default ${ENV_VAR})")
    listing.add_argument("--json", action="store_true", help="print JSON")

    imp = sub.add_parser("import", help="convert a legacy torch.save cache with torch.load(weights_only=True) only")
    imp.add_argument("source", type=Path, help="the legacy .pt/.cond file")
    imp.add_argument("name", help="the new cache name")
    imp.add_argument("--dir", type=Path, help=f"cache folder (default ${ENV_VAR})")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing cache with different content")
    imp.add_argument("--prompt-text", default="", help="the prompt the legacy cache encodes (provenance)")
    imp.add_argument("--encoder", default="", help="the text encoder that made it (provenance)")


def run(args: argparse.Namespace) -> int:
    handlers = {"build": run_build, "info": run_info, "list": run_list, "import": run_import}
    from ..nodes.cond_cache_format import CacheError

    try:
        return handlers[args.cond_command](args)
    except (CommandError, CacheError) as exc:
        print(f"error: {printable(str(exc), limit=2000)}", file=sys.stderr)
        return 1


def cache_dir(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    raise CommandError(f"no cache folder: pass --dir DIR or set {ENV_VAR} "
                       "(a ComfyUI install keeps them in ComfyUI/models/conditioning_cache)")


# ------------------------------------------------------------------------------------------ info / list


def run_info(args: argparse.Namespace) -> int:
    from ..nodes.cond_cache_format import provenance, read_cache

    path = Path(args.file)
    if not path.is_file():
        path = _named_file(cache_dir(args.dir), args.file)
    info = provenance(read_cache(path))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"file:      {printable(info['file'])}")
    print(f"format:    h3kit.conditioning v{info['format_version']}, written by H3Kit {printable(info['h3kit_version'])} "
          f"at {printable(info['created_utc'])}")
    print(f"encoder:   {printable(info['encoder']) or '(not recorded)'}")
    print(f"prompt:    {json.dumps(info['prompt_text'])}" if info["prompt_text"] else "prompt:    (not recorded)")
    if info["prompt_sha256"]:
        print(f"sha256:    {printable(info['prompt_sha256'])}")
    for i, entry in enumerate(info["entries"]):
        print(f"entry {i}:   tensor {entry['tensor']}")
        for key, value in entry["options"].items():
            print(f"  {printable(key)}: {json.dumps(value)}")
    print("data:      every tensor matches its checksum")
    for warning in info["warnings"]:
        print(f"warning:   {printable(warning)}")
    return 0


def _named_file(folder: Path, name: str) -> Path:
    from ..nodes.cond_cache_format import find_cache_file, list_cache_names

    path = find_cache_file([folder], name)
    if path is None:
        names = list_cache_names([folder])
        raise CommandError(f"no file {name} and no cache named '{name}' in {folder}; available: "
                           f"{', '.join(names) or '(none)'}")
    return path


def run_list(args: argparse.Namespace) -> int:
    from ..nodes.cond_cache_format import CacheError, check_cache_header, list_cache_names

    folder = cache_dir(args.dir)
    rows = []
    for name in list_cache_names([folder]):
        path = folder / name
        row: dict[str, Any] = {"name": name, "bytes": 0}
        try:  # one bad file is one NOT USABLE row, never the end of the listing
            row["bytes"] = path.stat().st_size
            metadata = check_cache_header(path)
            row.update({key: metadata.get(key, "") for key in ("created_utc", "encoder", "prompt_text")})
        except CacheError as exc:
            row["problem"] = exc.problem
        except OSError as exc:
            row["problem"] = f"cannot be read ({exc.strerror or exc})"
        rows.append(row)
    if args.json:
        print(json.dumps({"folder": str(folder), "caches": rows}, indent=2))
        return 0
    print(f"{printable(folder)}: {len(rows)} cache(s)" if folder.is_dir() else f"{printable(folder)}: folder does not exist yet")
    for row in rows:
        size = f"{row['bytes'] / 2**20:7.1f} MiB"
        name = printable(row["name"])
        if "problem" in row:
            print(f"  {name}  {size}  NOT USABLE: {printable(row['problem'], limit=1000)}")
            continue
        prompt = row["prompt_text"].replace("\n", " ")
        prompt = (prompt[:60] + "...") if len(prompt) > 60 else prompt
        print(f"  {name}  {size}  {printable(row['created_utc'], 40)}  {printable(row['encoder'], 80) or '-'}  "
              f"{json.dumps(prompt)}")
    return 0


# ---------------------------------------------------------------------------------------------- import


def run_import(args: argparse.Namespace) -> int:
    import pickle

    import torch

    from ..nodes.cond_cache_format import describe_result, save_conditioning
    from ..nodes.conditioning_cache import pack_version

    folder = cache_dir(args.dir)
    print(f"reading {args.source} with torch.load(weights_only=True): tensors and plain containers only; "
          "no code from the file is run")
    try:
        value = torch.load(args.source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CommandError(
            f"refused: {args.source} needs full unpickling ({_unpickler_reason(exc)}), which can run arbitrary code; "
            "H3Kit never does that. Fix: encode the prompt again with `python -m h3kit cond build`, or save it in "
            "ComfyUI with H3KitSaveConditioning"
        ) from exc
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise CommandError(f"{args.source} is not a readable torch.save file ({exc})") from exc
    result = save_conditioning(
        folder, args.name, value, prompt_text=args.prompt_text, encoder=args.encoder,
        h3kit_version=pack_version(), overwrite=args.overwrite,
    )
    print(describe_result(result))
    return 0


def _unpickler_reason(exc: Exception) -> str:
    """torch's refusal names the offending global in one of several wordings; keep only that name."""
    found = re.search(r"unsupported (?:global: )?GLOBAL (\S+)", str(exc), re.IGNORECASE)
    if found:
        return f"it references {found.group(1)}"
    return "it holds objects other than tensors and plain containers"


# ----------------------------------------------------------------------------------------------- build


def build_graph(text: str, clip: str, clip_type: str, device: str, name: str, overwrite: bool) -> dict:
    """CLIPLoader -> CLIPTextEncode -> H3KitSaveConditioning, in API format."""
    return {
        "1": {"class_type": "CLIPLoader", "_meta": {"title": "Load text encoder"},
              "inputs": {"clip_name": clip, "type": clip_type, "device": device}},
        "2": {"class_type": "CLIPTextEncode", "_meta": {"title": "Encode prompt"},
              "inputs": {"text": text, "clip": ["1", 0]}},
        "3": {"class_type": SAVE_NODE, "_meta": {"title": "Save conditioning cache"},
              "inputs": {"conditioning": ["2", 0], "name": name, "overwrite": overwrite, "prompt_text": text,
                         "encoder_name": f"{clip} (type {clip_type})"}},
    }


def run_build(args: argparse.Namespace) -> int:
    server = args.server if "://" in args.server else f"http://{args.server}"
    text = args.text if args.text is not None else args.text_file.read_text(encoding="utf-8")
    if not text.strip():
        raise CommandError("the prompt is empty; pass --text or --text-file")
    _preflight(server, args.clip, args.type)
    graph = build_graph(text, args.clip, args.type, args.device, args.name, args.overwrite)
    status, body = _http(server, "/prompt", {"prompt": graph, "client_id": uuid.uuid4().hex})
    if status != 200 or (body or {}).get("node_errors"):
        raise CommandError(f"ComfyUI rejected the graph ({status}): {_rejection_text(body)}")
    prompt_id = body["prompt_id"]
    print(f"queued prompt {prompt_id} on {server}: CLIPLoader({args.clip}) -> CLIPTextEncode -> {SAVE_NODE}")
    entry = _wait(server, prompt_id, args.timeout)
    messages = entry.get("status", {}).get("messages", [])
    if entry["status"].get("status_str") != "success":
        raise CommandError(f"the encode failed in ComfyUI: {_execution_error(messages)}")
    lines = entry.get("outputs", {}).get("3", {}).get("text", [])
    cached = any(event == "execution_cached" and "3" in data.get("nodes", []) for event, data in messages)
    if cached:
        print("ComfyUI reused its cached result: the cache file is already up to date")
    for line in lines:
        print(line)
    if not lines and not cached:
        raise CommandError(f"the prompt finished but {SAVE_NODE} reported nothing; check the ComfyUI console")
    return 0


def _preflight(server: str, clip: str, clip_type: str) -> None:
    save_info = _get(server, f"/object_info/{SAVE_NODE}")
    if SAVE_NODE not in save_info:
        raise CommandError(f"the ComfyUI at {server} has no {SAVE_NODE}: install H3Kit into its custom_nodes and restart it")
    loader = _get(server, "/object_info/CLIPLoader").get("CLIPLoader", {}).get("input", {}).get("required", {})
    files = loader.get("clip_name", [[]])[0]
    types = loader.get("type", [[]])[0]
    if isinstance(files, list) and clip not in files:
        shown = ", ".join(files[:30]) or "(none: put the encoder file in ComfyUI/models/text_encoders)"
        raise CommandError(f"the server has no text encoder '{clip}'; it has: {shown}")
    if isinstance(types, list) and clip_type not in types:
        raise CommandError(f"this ComfyUI's CLIPLoader has no type '{clip_type}' (needs a newer ComfyUI?); "
                           f"it has: {', '.join(types)}")


def _get(server: str, route: str) -> Any:
    status, body = _http(server, route)
    if status != 200:
        raise CommandError(f"GET {route} answered {status}")
    return body or {}


def _http(server: str, route: str, payload: dict | None = None, timeout: float = 60.0) -> tuple[int, Any]:
    url = server.rstrip("/") + route
    data = json.dumps(payload).encode("utf-8") if payload is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return err.code, raw.decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        raise CommandError(f"cannot reach ComfyUI at {url}: {exc}. Is the server running?") from exc


def _rejection_text(body: Any) -> str:
    if not isinstance(body, dict):
        return str(body)
    parts = []
    error = body.get("error")
    if isinstance(error, dict):
        parts.append(f"{error.get('message', '')} {error.get('details', '')}".strip())
    for node_id, info in (body.get("node_errors") or {}).items():
        for item in info.get("errors", []):
            parts.append(f"node {node_id} ({info.get('class_type')}): {item.get('message')}: {item.get('details')}")
    return "; ".join(p for p in parts if p) or json.dumps(body)[:500]


def _wait(server: str, prompt_id: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = _get(server, f"/history/{urllib.parse.quote(prompt_id)}").get(prompt_id)
        if entry and entry.get("status", {}).get("status_str") in ("success", "error"):
            return entry
        time.sleep(POLL_S)
    raise CommandError(f"prompt {prompt_id} did not finish within {timeout:.0f} s; it may still be running "
                       "(see the ComfyUI queue), or raise --timeout")


def _execution_error(messages: list) -> str:
    for event, data in messages:
        if event == "execution_error":
            return f"{data.get('node_type')} (node {data.get('node_id')}): {data.get('exception_message', '').strip()}"
        if event == "execution_interrupted":
            return "the prompt was interrupted"
    return "no error message in /history; check the ComfyUI console"
