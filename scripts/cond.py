"""Cached conditioning (H3KitSaveConditioning / H3KitLoadConditioning files).

  cond build   encode a prompt once through a running ComfyUI and save it as a cache
  cond info    print a cache file's metadata and check its data
  cond list    list the caches in the conditioning_cache folder
  cond import  convert a legacy torch.save cache (.pt) safely: torch.load(weights_only=True) only

The folder is --dir, else $H3KIT_COND_CACHE_DIR, else models/conditioning_cache of the ComfyUI this is run in
(found the way doctor finds it: the ComfyUI this clone sits in, $COMFYUI_DIR, or the current folder).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from ..adapters import comfy_jobs as jobs
from ..adapters.comfy_client import ComfyClient, ComfyError, Deadline
from ..adapters.files import regular_file_problem, sniff_file
from ..adapters.server_probe import read_schemas
from ..checks.environment import find_comfyui
from ..checks.facts import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_TIMEOUT, EXIT_UNREACHABLE
from ..checks.invocation import command
from ..checks.problem import printable
from . import console
from .options import SECONDS

ENV_VAR = "H3KIT_COND_CACHE_DIR"
SAVE_NODE = "H3KitSaveConditioning"
BUILD_TIMEOUT_S = 1800.0  # cond build: the whole encode job (--timeout); a first load of a 27B encoder is slow
CACHE_SUBFOLDER = ("models", "conditioning_cache")
EXIT_STATUSES = {
    EXIT_OK: "ok",
    EXIT_FAILED: "build: the encode failed in ComfyUI; list: a file in the folder is not a usable cache",
    EXIT_INVALID: "refused, nothing written: bad arguments, a file that is not a cache (info) or not a torch.save "
                  "file (import), a name that exists with other content (add --overwrite), no cache folder found, "
                  "or (build) a server without the encoder, type or H3KitSaveConditioning",
    EXIT_TIMEOUT: "build: --timeout ran out",
    EXIT_UNREACHABLE: "build: the server is unreachable",
}


class CommandError(Exception):
    """A user-facing refusal: printed as 'error: ...' on stderr with exit code 2."""


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
    build.add_argument("--timeout", type=SECONDS, default=BUILD_TIMEOUT_S, help="seconds to wait for the encode (default %(default)s)")
    build.add_argument("--quiet", action="store_true", help="no progress bar (it is off anyway when not a TTY)")

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
        console.problem(f"error: {printable(exc)}")
        return EXIT_INVALID
    except ComfyError as exc:  # cond build: the same exit codes as run (2 refused, 3 timeout, 4 unreachable)
        console.problem(f"error: {printable(exc)}")
        return exc.exit_code


def find_cache_dir(explicit: Path | None) -> tuple[Path, str]:
    """(the cache folder, how it was found): --dir, $H3KIT_COND_CACHE_DIR, or the ComfyUI found here."""
    if explicit is not None:
        return explicit, "--dir"
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    comfyui = find_comfyui()
    if comfyui is not None:
        return comfyui.joinpath(*CACHE_SUBFOLDER), f"the ComfyUI folder {comfyui}"
    raise CommandError(f"no cache folder: no ComfyUI folder found here (run this from the ComfyUI folder), or pass "
                       f"--dir DIR, or set {ENV_VAR} (ComfyUI keeps the caches in ComfyUI/models/conditioning_cache)")


def cache_dir(explicit: Path | None) -> Path:
    return find_cache_dir(explicit)[0]


# ------------------------------------------------------------------------------------------ info / list


def run_info(args: argparse.Namespace) -> int:
    from ..nodes.cond_cache_format import provenance, read_cache

    path = Path(args.file)
    problem = regular_file_problem(path)
    if problem is not None and os.path.lexists(path):  # a FIFO, a device, a folder, a link loop: said as such
        raise CommandError(f"{path} {problem}; pass a cache file or a cache name")
    if problem is not None:
        path = _named_file(cache_dir(args.dir), args.file)
    info = provenance(read_cache(path))
    if args.json:
        console.result(json.dumps(info, indent=2))
        return EXIT_OK
    out = console.result
    out(f"file:      {printable(info['file'])}")
    out(f"format:    h3kit.conditioning v{info['format_version']}, written by H3Kit {printable(info['h3kit_version'], 40)} "
        f"at {printable(info['created_utc'], 40)}")
    out(f"encoder:   {printable(info['encoder'], 300) or '(not recorded)'}")
    out(f"prompt:    {json.dumps(info['prompt_text'])}" if info["prompt_text"] else "prompt:    (not recorded)")
    if info["prompt_sha256"]:
        out(f"sha256:    {printable(info['prompt_sha256'], 80)}")
    for i, entry in enumerate(info["entries"]):
        out(f"entry {i}:   tensor {printable(entry['tensor'], 100)}")
        for key, value in entry["options"].items():
            out(f"  {printable(key, 100)}: {json.dumps(value)[:300]}")
    out("data:      every tensor matches its checksum")
    for warning in info["warnings"]:
        console.problem(f"warning:   {printable(warning, 300)}")
    return EXIT_OK


def _named_file(folder: Path, name: str) -> Path:
    from ..nodes.cond_cache_format import find_cache_file, list_cache_names

    path = find_cache_file([folder], name)
    if path is None:
        names = list_cache_names([folder])
        available = ", ".join(names) or f"(none: make one with `{command('cond build')}`)"
        raise CommandError(f"no file {name} and no cache named '{name}' in {folder}; available: {available}")
    return path


def run_list(args: argparse.Namespace) -> int:
    from ..nodes.cond_cache_format import CacheError, check_cache_header, list_cache_names

    folder, found_by = find_cache_dir(args.dir)
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
    unusable = sum("problem" in row for row in rows)
    code = EXIT_FAILED if unusable else EXIT_OK
    if args.json:
        console.result(json.dumps({"folder": str(folder), "found_by": found_by, "caches": rows}, indent=2))
        return code
    console.result(printable(f"{folder} (from {found_by}): {len(rows)} cache file(s)" if folder.is_dir()
                             else f"{folder} (from {found_by}): folder does not exist yet"))
    for row in rows:
        size = f"{row['bytes'] / 2**20:7.1f} MiB"
        name = printable(row["name"])
        if "problem" in row:
            console.problem(f"  {name}  {size}  NOT USABLE: {printable(row['problem'], limit=1000)}")
            continue
        prompt = row["prompt_text"].replace("\n", " ")
        prompt = (prompt[:60] + "...") if len(prompt) > 60 else prompt
        console.result(f"  {name}  {size}  {printable(row['created_utc'], 40)}  {printable(row['encoder'], 80) or '-'}  "
                       f"{json.dumps(prompt)}")
    return code


# ---------------------------------------------------------------------------------------------- import


def run_import(args: argparse.Namespace) -> int:
    import pickle

    import torch

    from ..nodes.cond_cache_format import describe_result, save_conditioning
    from ..nodes.conditioning_cache import pack_version

    folder = cache_dir(args.dir)
    _check_torch_file(args.source)
    console.result(f"reading {printable(args.source)} with torch.load(weights_only=True): tensors and plain containers only; "
                   "no code from the file is run")
    try:
        value = torch.load(args.source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CommandError(
            f"refused: {args.source} needs full unpickling ({_unpickler_reason(exc)}), which can run arbitrary code; "
            f"H3Kit never does that. Fix: encode the prompt again with `{command('cond build')}`, or save it in "
            "ComfyUI with H3KitSaveConditioning"
        ) from exc
    except (RuntimeError, OSError, EOFError, ValueError) as exc:
        raise CommandError(f"{args.source} is not a readable torch.save file ({exc})") from exc
    result = save_conditioning(
        folder, args.name, value, prompt_text=args.prompt_text, encoder=args.encoder,
        h3kit_version=pack_version(), overwrite=args.overwrite,
    )
    console.result(describe_result(result))
    return EXIT_OK


def _check_torch_file(source: Path) -> None:
    """cond import reads torch.save files only: anything else is named as what it is."""
    from ..nodes.cond_cache_format import MAX_CACHE_BYTES

    problem = regular_file_problem(source)  # missing, a folder, a FIFO or a device (which would block)
    if problem is not None:
        raise CommandError(f"{source} {problem}")
    if source.stat().st_size > MAX_CACHE_BYTES:  # torch.load would hold all of it; a cache holds at most this
        raise CommandError(f"{source} is {source.stat().st_size / 2**30:.1f} GiB; a conditioning cache holds at most "
                           f"{MAX_CACHE_BYTES // 2**30} GiB of tensors: this is not a cached prompt")
    kind = sniff_file(source)
    if kind is None:
        raise CommandError(f"{source} cannot be read")
    if kind.key == "safetensors":
        raise CommandError(f"{source} is already a safetensors file, not a legacy torch.save cache: an H3Kit cache needs "
                           f"no import (`{command('cond info FILE')}` checks it); a Lightricks LTXVSaveConditioning file "
                           "loads with LTXVLoadConditioning")
    if kind.key not in ("torch_zip", "pickle"):
        raise CommandError(f"{source} is {kind.text}, not a legacy torch.save cache (ComfyUI-CondCache .pt/.cond); "
                           "pass the old cache file")
    if kind.key == "torch_zip":
        _check_zip_records(source)


def _check_zip_records(source: Path) -> None:
    """The records of a torch.save zip must be stored, not compressed (torch.save never compresses): a compressed
    record unpacks to more than the file holds (a 256 KB file inflated to a 256 MiB tensor in torch.load). With
    stored records every tensor's storage is bytes of the file, so the file size bounds what torch.load builds."""
    import zipfile

    try:
        with zipfile.ZipFile(source) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CommandError(f"{source} is not a readable torch.save file ({printable(exc, 200)})") from exc
    for record in records:
        if record.compress_type != zipfile.ZIP_STORED or record.file_size != record.compress_size:
            raise CommandError(
                f"{source}: its record {printable(record.filename, 100)} is compressed ({record.compress_size:,} bytes "
                f"that unpack to {record.file_size:,}); torch.save never compresses, so this file was made to unpack "
                f"to more than it holds. Refused: re-encode the prompt with `{command('cond build')}`")


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
    """Encode through the server; exit 0 ok, 1 the encode failed, 2 refused (no such encoder/node, rejected
    graph), 3 timeout, 4 unreachable (the same codes as `run`)."""
    text = args.text if args.text is not None else _prompt_file(args.text_file)
    if not text.strip():
        raise jobs.Rejected("the prompt is empty; pass --text or --text-file")
    graph = build_graph(text, args.clip, args.type, args.device, args.name, args.overwrite)
    deadline = Deadline(args.timeout)
    with ComfyClient(args.server, deadline=deadline) as client:
        _preflight(client, args.clip, args.type)
        client_id = uuid.uuid4().hex
        ws, _ = jobs.open_events(client, client_id)
        bar = jobs.ProgressBar(graph, "cond build", 0, args.quiet, _say, _warn)
        try:
            prompt_id = jobs.submit(client, graph, client_id, lambda t: _warn("", f"WARN  {t}"), strict=True)
            bar.note(f"queued prompt {prompt_id} on {client.server}: CLIPLoader({args.clip}) -> CLIPTextEncode -> "
                     f"{SAVE_NODE}")
            outcome = jobs.wait_for_prompt(client, prompt_id, bar, deadline, ws)
            bar.finished(outcome.state == "success")
        finally:
            bar.close()
    return _build_result(outcome, prompt_id, args.timeout)


def _prompt_file(path: Path) -> str:
    """--text-file: UTF-8 text, read exactly; anything else is refused naming what it is."""
    from ..nodes.cond_cache_format import MAX_CACHE_HEADER_BYTES

    problem = regular_file_problem(path)  # a FIFO or a device would block or never end
    if problem is not None:
        raise CommandError(f"--text-file {path} {problem}")
    if path.stat().st_size > MAX_CACHE_HEADER_BYTES:  # the prompt is kept in the cache's header
        raise CommandError(f"--text-file {path} is {path.stat().st_size:,} bytes; a prompt kept with a cache is at most "
                           f"{MAX_CACHE_HEADER_BYTES:,}")
    kind = sniff_file(path, text_expected=True)  # prompt text is text, even when it starts "ID3" or "OggS"
    if kind is None:
        raise CommandError(f"--text-file {path} cannot be read (missing, a folder, or no permission)")
    if kind.key not in ("text", "json", "empty"):
        raise CommandError(f"--text-file {path} is {kind.text}, not a UTF-8 text file with the prompt")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise CommandError(f"--text-file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                           f"{exc.start}); save it as UTF-8") from exc
    except OSError as exc:
        raise CommandError(f"--text-file {path} cannot be read ({exc.strerror or exc})") from exc


def _say(label: str, text: str) -> None:
    console.result(f"{label}{text}")


def _warn(label: str, text: str) -> None:
    console.problem(f"{label}{text}")


def _error(text: str) -> None:
    console.problem(f"error: {text}")


def _build_result(outcome: jobs.Outcome, prompt_id: str, timeout: float) -> int:
    if outcome.state == "timeout":
        _error(f"TIMEOUT: prompt {prompt_id} did not finish within {timeout:.0f} s: {outcome.note}; raise --timeout")
        return EXIT_TIMEOUT
    if outcome.state == "unreachable":
        _error(f"UNREACHABLE: {outcome.note}")
        return EXIT_UNREACHABLE
    if outcome.state != "success":
        detail = outcome.note or _execution_error(jobs.message_pairs(outcome.entry or {}, outcome.events))
        _error(f"the encode failed in ComfyUI: {detail}")
        return EXIT_FAILED
    entry = outcome.entry
    outputs = entry.get("outputs") if isinstance(entry.get("outputs"), dict) else {}
    save = outputs.get("3") if isinstance(outputs.get("3"), dict) else {}
    lines = [line for line in save.get("text", []) if isinstance(line, str)] if isinstance(save.get("text"), list) else []
    cached = "3" in jobs.timing_of(entry, outcome.events).cached
    if cached:
        _say("", "ComfyUI reused its cached result: the cache file is already up to date")
    for line in lines:
        _say("", printable(line, 2000))
    if not lines and not cached:
        _error(f"the prompt finished but {SAVE_NODE} reported nothing; check the ComfyUI console")
        return EXIT_FAILED
    return EXIT_OK


def _preflight(client: ComfyClient, clip: str, clip_type: str) -> None:
    if SAVE_NODE not in read_schemas(client, f"/object_info/{SAVE_NODE}"):
        raise jobs.Rejected(f"the ComfyUI at {client.server} has no {SAVE_NODE}: install H3Kit into its custom_nodes "
                            "and restart it")
    loader = read_schemas(client, "/object_info/CLIPLoader").get("CLIPLoader", {}).get("input", {}).get("required", {})
    files = (loader.get("clip_name") or [[]])[0]
    types = (loader.get("type") or [[]])[0]
    if isinstance(files, list) and clip not in files:
        shown = ", ".join(map(str, files[:30])) or "(none: put the encoder file in ComfyUI/models/text_encoders)"
        raise jobs.Rejected(f"the server has no text encoder '{clip}'; it has: {printable(shown, 2000)}")
    if isinstance(types, list) and clip_type not in types:
        raise jobs.Rejected(f"this ComfyUI's CLIPLoader has no type '{clip_type}' (needs a newer ComfyUI?); "
                            f"it has: {printable(', '.join(map(str, types)), 2000)}")


def _execution_error(messages: list) -> str:
    for event, data in messages:
        if event == "execution_error":
            return printable(f"{data.get('node_type')} (node {data.get('node_id')}): "
                             f"{str(data.get('exception_message', '')).strip()}", 1000)
        if event == "execution_interrupted":
            return "the prompt was interrupted"
    return "no error message in /history; check the ComfyUI console"
