"""ComfyUI's official MiniMax-H3 and LTX-2.x templates as a test corpus (issue 30).

The graphs most users start from are ComfyUI's own templates (the `comfyui-workflow-templates-json` package, MIT).
A rule of the pack that FAILs a graph the host's `/prompt` accepts is a bug in the rule, so these graphs are the
oracle of every checker. The corpus under tests/data/official_templates/ holds each template converted to API
format **by the real frontend** (the editor's own `app.graphToPrompt()` in headless Chromium) and, per host, the
verdict that host's `/prompt` gave it with placeholder files named as its models and inputs (a user who has the
files). `python tests/official_templates.py build ...` (re)makes it; tier (a) reads it (tests/test_official_templates.py),
tier (d) converts the templates again on every configured host x frontend and compares (test_official_templates_browser.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import wave
from dataclasses import dataclass
from pathlib import Path
from re import compile as regex

from comfyui_host import combo_options
from h3kit.checks.node_inputs import option_keys

TESTS_DIR = Path(__file__).resolve().parent
CORPUS_DIR = TESTS_DIR / "data" / "official_templates"
MANIFEST = CORPUS_DIR / "manifest.json"
# Local (not partner-API) MiniMax-H3 and LTX-2 / 2.3 / 2.5 graphs of the templates package; `api_*` templates call
# paid cloud nodes and run nothing of either model locally.
TEMPLATE_NAME = regex(r"^(?!api_)[a-z0-9_]*(minimax_h3|fasth3|ltx2)[a-z0-9_]*$")
MEDIA_KINDS = ("image", "audio", "video")
SOURCE = "comfyui-workflow-templates-json (Comfy-Org/workflow_templates, MIT licence)"


def template_files(templates_dir: Path) -> list[Path]:
    """The official H3 / LTX-2.x templates in an unpacked `comfyui_workflow_templates_json/templates` folder."""
    return sorted(p for p in templates_dir.glob("*.json") if TEMPLATE_NAME.match(p.stem))


@dataclass(frozen=True)
class CorpusGraph:
    package_version: str  # of comfyui-workflow-templates-json
    name: str
    graph: dict  # API format, as the frontend converted it
    verdicts: dict  # {host label: {"accepted": bool, "errors": [...], "node_errors": {...}}}
    missing_nodes: list  # node types the converting host did not serve

    @property
    def label(self) -> str:
        return f"{self.package_version}/{self.name}"


def manifest() -> dict:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


def corpus() -> list[CorpusGraph]:
    """Every converted template of the committed corpus with its host verdicts."""
    doc = manifest()
    found = []
    for entry in doc["templates"]:
        graph = json.loads((CORPUS_DIR / entry["file"]).read_text(encoding="utf-8"))
        found.append(CorpusGraph(entry["package_version"], entry["name"], graph, entry["verdicts"],
                                 entry.get("missing_nodes", [])))
    return found


# ----------------------------------------------------------------------------- placeholders (a user's files)
def _media_kind(opts: dict) -> str | None:
    return next((kind for kind in MEDIA_KINDS if opts.get(f"{kind}_upload")), None)


def absent_named_files(graph: dict, server_info: dict) -> dict[str, set[str]]:
    """{"model" | "image" | "audio" | "video": names} that the graph's combos name and the server does not list."""
    absent: dict[str, set[str]] = {"model": set(), **{kind: set() for kind in MEDIA_KINDS}}
    for node in graph.values():
        info = server_info.get(node.get("class_type")) if isinstance(node, dict) else None
        if info is None:
            continue
        specs = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
        for key, value in node.get("inputs", {}).items():
            spec = specs.get(key)
            if not (isinstance(value, str) and spec and (isinstance(spec[0], list) or spec[0] == "COMBO")):
                continue
            if value in option_keys(combo_options(spec)):
                continue
            opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
            absent[_media_kind(opts) or "model"].add(value)
    return absent


def write_placeholders(base_dir: Path, model_folders: list[str], absent: dict[str, set[str]]) -> list[Path]:
    """Files named as the absent ones: in every model folder (the server only lists names) a file whose header reads
    as a user's (`placeholder_weights`), and a small valid picture / sound / video in input/ (what a user's
    LoadImage / LoadAudio / LoadVideo reads)."""
    written = []
    for name in sorted(absent["model"]):
        for folder in model_folders:
            path = base_dir / "models" / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                path.write_bytes(placeholder_weights(name))
                written.append(path)
    for kind in MEDIA_KINDS:
        for name in sorted(absent[kind]):
            path = base_dir / "input" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                _write_media(kind, path)
                written.append(path)
    return written


def placeholder_weights(name: str) -> bytes:
    """A weights file with no tensors whose header is what the pack's file rules read of a real one: a safetensors
    header with metadata and an architecture 'config' (F13/F14 pass, as on an original download), GGUF's magic."""
    if name.lower().endswith(".safetensors"):
        header = json.dumps({"__metadata__": {"config": "{}", "h3kit_placeholder": "official templates corpus"}})
        return len(header).to_bytes(8, "little") + header.encode()
    if name.lower().endswith(".gguf"):
        return b"GGUF" + (3).to_bytes(4, "little") + bytes(16)
    return b""


def _write_media(kind: str, path: Path) -> None:
    if kind == "image":
        from PIL import Image

        Image.new("RGB", (256, 256), (128, 128, 128)).save(path, format="PNG")
    elif kind == "audio":
        with wave.open(str(path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(16000)
            out.writeframes(b"\0\0" * 16000)
    else:
        import av
        import numpy as np

        with av.open(str(path), "w", format="mp4") as container:
            stream = container.add_stream("mpeg4", rate=8)
            stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
            for _ in range(8):
                frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), 128, np.uint8), format="rgb24")
                container.mux(stream.encode(frame))
            container.mux(stream.encode())


# ----------------------------------------------------------------------------- the host's verdict
def host_verdict(status: int, body: object) -> dict:
    """What the host's POST /prompt said: accepted or not, its error type, and the errors of each node (type and
    input). ComfyUI accepts a prompt (200) when at least one output validates and drops the outputs whose nodes
    fail, naming those nodes in the same answer's node_errors: such an output never runs."""
    body = body if isinstance(body, dict) else {}
    node_errors = {}
    for node_id, entry in (body.get("node_errors") or {}).items():
        node_errors[str(node_id)] = sorted(
            f"{e.get('type')}: {(e.get('extra_info') or {}).get('input_name', '')}".rstrip(": ")
            for e in entry.get("errors", []))
    if status == 200:
        return {"accepted": True, **({"node_errors": node_errors} if node_errors else {})}
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    return {"accepted": False, "error": error.get("type"), "node_errors": node_errors}


def runs_whole(verdict: dict) -> bool:
    """ComfyUI accepted the prompt and drops none of its outputs."""
    return verdict["accepted"] and not verdict.get("node_errors")


def cancel_everything(server) -> None:
    """Accepted graphs are queued: drop them before they load placeholder weights (the verdict is all we need)."""
    server.post("/queue", {"clear": True})
    server.post("/interrupt", {})


CONVERT = """async wf => {
  await app.loadGraphData(wf, true, true, null);
  const p = await app.graphToPrompt();
  return p.output;
}"""


def convert(editor, workflow: dict) -> dict:
    """The API prompt the editor itself sends for `workflow` (its own graph-to-prompt, subgraphs flattened)."""
    editor.start_clean()
    prompt = editor.js(CONVERT, workflow)
    editor.js("__h3.closeAll(); true")
    return prompt


def workflow_types(workflow: dict) -> set[str]:
    """Every node type a UI workflow uses, inside its subgraph definitions too (not the subgraphs' own ids)."""
    subgraphs = (workflow.get("definitions") or {}).get("subgraphs") or []
    types = {n.get("type") for n in workflow.get("nodes", [])}
    types |= {n.get("type") for sg in subgraphs for n in sg.get("nodes", [])}
    return {t for t in types if isinstance(t, str)} - {sg.get("id") for sg in subgraphs}


def missing_node_types(editor, workflow: dict) -> list[str]:
    """The workflow's node types this editor has not registered: what the host does not serve (virtual nodes such
    as notes and reroutes are registered by the frontend itself)."""
    registered = set(editor.js("Object.keys(LiteGraph.registered_node_types)"))
    return sorted(workflow_types(workflow) - registered)


def record_verdict(server, graph: dict) -> dict:
    """The host's /prompt verdict on `graph`, with placeholder files named as what it reads."""
    info = server.object_info()
    folders = [f for f in server.get("/models") if f != "custom_nodes"]
    write_placeholders(server.base_dir, folders, absent_named_files(graph, info))
    status, body = server.submit(graph)
    cancel_everything(server)
    return host_verdict(status, body)


# ----------------------------------------------------------------------------- building the corpus
def _started(args: argparse.Namespace, with_pack: bool):
    sys.path.insert(0, str(TESTS_DIR))
    from comfyui_host import ComfyUIServer, FrontendHost

    host = FrontendHost(0, Path(args.host).resolve(), args.python, args.launch, front_end_root=args.front_end_root)
    server = ComfyUIServer(host, with_pack=with_pack)
    server.start()
    server.post("/api/settings/Comfy.TutorialCompleted", True)
    return server


def _load_manifest(fresh: bool) -> dict:
    return manifest() if MANIFEST.exists() and not fresh else {"templates": []}


def _save_manifest(doc: dict) -> None:
    doc["describes"] = (
        "ComfyUI's official MiniMax-H3 and LTX-2.x templates converted to API format by the real frontend "
        "(app.graphToPrompt in headless Chromium), and each host's POST /prompt verdict on these very graphs with "
        "placeholder files named as their models and inputs (a user who has the files). Made by "
        "`python tests/official_templates.py convert|verdicts` (docs/testing.md).")
    doc["source"] = SOURCE
    doc["templates"] = sorted(doc["templates"], key=lambda e: (e["package_version"], e["name"]))
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def convert_all(args: argparse.Namespace) -> int:
    """Convert every template with the host's frontend (or --front-end-root) and store the API graphs."""
    sys.path.insert(0, str(TESTS_DIR))
    from browser_ui import Editor, launch_chromium, new_context
    from playwright.sync_api import sync_playwright

    doc = _load_manifest(args.fresh)
    entries = {(e["package_version"], e["name"]): e for e in doc["templates"]}
    server = _started(args, with_pack=False)  # the editor as a user without the pack has it
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            editor = Editor(new_context(browser).new_page(), server.url)
            frontend = ".".join(map(str, editor.version))
            for version, templates_dir in (s.split("=", 1) for s in args.templates):
                for path in template_files(Path(templates_dir)):
                    workflow = json.loads(path.read_text(encoding="utf-8"))
                    graph = convert(editor, workflow)
                    entry = entries.setdefault((version, path.stem), {
                        "package_version": version, "name": path.stem, "file": f"{version}/{path.stem}.json",
                        "verdicts": {}})
                    target = CORPUS_DIR / entry["file"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(json.dumps(graph, indent=1, sort_keys=True) + "\n", encoding="utf-8")
                    entry.update(converted_by=f"frontend {frontend} on ComfyUI {args.label}",
                                 missing_nodes=missing_node_types(editor, workflow))
                    print(f"{version}/{path.stem}: {len(graph)} nodes, missing {entry['missing_nodes']}", flush=True)
            browser.close()
    finally:
        server.stop()
        server.cleanup()
    doc["templates"] = list(entries.values())
    _save_manifest(doc)
    return 0


def verdicts(args: argparse.Namespace) -> int:
    """Post every stored graph to one host's /prompt and record its verdict under --label."""
    doc = _load_manifest(False)
    server = _started(args, with_pack=False)  # ComfyUI's own verdict: nothing of the pack in between
    try:
        for entry in doc["templates"]:
            graph = json.loads((CORPUS_DIR / entry["file"]).read_text(encoding="utf-8"))
            entry["verdicts"][args.label] = verdict = record_verdict(server, graph)
            print(f"{entry['file']}: {'accepted' if verdict['accepted'] else verdict}", flush=True)
    finally:
        server.stop()
        server.cleanup()
    _save_manifest(doc)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, what in (("convert", "convert the templates with a host's frontend and store the API graphs"),
                       ("verdicts", "post every stored graph to a host's /prompt and record its verdict")):
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("--host", required=True, help="the ComfyUI checkout")
        cmd.add_argument("--python", required=True, help="the Python that runs that host")
        cmd.add_argument("--label", required=True, help="the host's name in the manifest, e.g. '0.33.0 (kat3ri@0f1fa67a)'")
        cmd.add_argument("--front-end-root", help="a frontend's static/ folder (default: the host's own)")
        cmd.add_argument("--launch", choices=("main", "console"), default="main",
                         help="console: the installable layout (python -m comfy.cmd.main), as H3KIT_HOST_LAUNCH_<n>")
    sub.choices["convert"].add_argument("--templates", action="append", required=True, metavar="VERSION=DIR",
                                        help="a templates folder of comfyui-workflow-templates-json VERSION (repeatable)")
    sub.choices["convert"].add_argument("--fresh", action="store_true", help="start a new manifest")
    args = parser.parse_args(argv)
    return convert_all(args) if args.command == "convert" else verdicts(args)


if __name__ == "__main__":
    raise SystemExit(main())
