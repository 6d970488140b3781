"""The pack's HTTP routes inside ComfyUI: the graph editor's preflight and the pack's template files.

- ``POST /h3kit/preflight`` with ``{"prompt": <API graph as the frontend queues it>, "absent": {id: type}}``
  (``absent``: nodes the frontend leaves out of the prompt because this host lacks their type) answers the
  verdict (OK / ADAPTED / FAIL) and the PASS/INFO/WARN/FAIL checks of ``checks.workflow.preflight_checks``
  (``checks.verdict.judge``, the one function ``validate``, ``doctor`` and ``run`` reach their verdict through)
  against this server's own node schemas, registered nodes and model folders, plus this server's environment
  (ComfyUI version, torch, comfy-kitchen, GPU, attention backends). The verdict is on the graph moved to this
  host's input layout (SaveVideo's three layouts); when that changed anything each move is an INFO line and the
  answer carries ``"adapted": {"prompt", "changes"}``: the editor queues that prompt and shows the changes.
  web/h3kit_preflight.js calls it before it queues a graph that holds an H3 or LTX node.
- An on-prompt handler (``adapt_queued_prompt``) moves every queued prompt, from any client, to this host's input
  layout before ComfyUI validates it (``checks.host_layout.adapt_graph``, the first step of ``judge``: the same
  moves), and logs each change; ComfyUI's own validation then gives that prompt its verdict (a handler cannot
  refuse a prompt, and the pack's rules stay off the event loop).
- ``GET /h3kit/preflight`` tells the extension which node types it watches.
- ``GET /workflow_templates/<this pack's folder>/<file>``: the template browser lists the pack's workflows
  from every host, but some hosts (the installable ComfyUI 0.12 fork) never register the static route that
  serves them, so opening one answered 404. Where the host does serve them, its route was registered first
  and answers; this one only fills the gap.

``register_routes()`` adds them to ``PromptServer.instance.routes`` (and the handler with
``add_on_prompt_handler``) when ComfyUI's server module is loaded; the registration (__init__.py) hands in what
the checks need of the pack's own nodes (``PackNodes``), as adapters never import nodes/;
importing this module imports neither ComfyUI nor aiohttp, so the pack and its tests import it anywhere.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..checks.environment import kitchen_version, local_checks
from ..checks.host_layout import MAX_NODE_KEYS, adapt_graph
from ..checks.invocation import command
from ..checks.problem import FAIL, INFO, PASS, WARN, Check, printable
from ..checks.rules_files import ModelFiles
from ..checks.schemas import class_info, providing_pack
from ..checks.server import comfyui_version_check
from ..checks.verdict import Verdict, verdict_of
from ..checks.workflow import preflight_checks as graph_checks  # the one verdict; no rule lives here
from . import preflight_request
from .collector import cyclic_gc_paused
from .files import MAX_NAME_BYTES
from .host import comfyui_version, host_loaded, host_module, render_devices
from .log import LOG, MAX_LOG_LINE_CHARS, log_once
from .model_folders import host_files
from .preflight_request import MAX_NODES, RequestRefused, parse_body, read_body
from .preflight_workers import Abandoned, Busy, StopFlag, Workers

PREFLIGHT_ROUTE = "/h3kit/preflight"
# The graphs the editor checks before queueing: any H3Kit node, core MiniMax-H3 node or LTX(-AV) node.
WATCHED_NODE_PATTERN = r"^(H3Kit|MiniMaxH3|EmptyMiniMaxH3|LTXV|LTXAV)"
WORKFLOWS_DIR = Path(__file__).resolve().parent.parent / "workflows"
TEMPLATE_SUFFIXES = {".json", ".jpg", ".jpeg", ".png", ".webp"}
STATUS_ORDER = (PASS, INFO, WARN, FAIL)
# What the on-prompt handler examines on ComfyUI's event loop; past either, the prompt is queued as sent, for
# ComfyUI's own validation. Input keys, all nodes together (a 10,000-node graph of 20 inputs each; each key is one
# set lookup), and input keys of the nodes examined key by key (those with an undeclared key or without a required
# one: a SaveVideo in another version's layout has 4-6).
MAX_HOOK_KEYS = 200_000
MAX_HOOK_EXAMINED_KEYS = 10_000


@dataclass
class HostView:
    """What the preflight needs from the ComfyUI it runs in (tests pass their own)."""

    schemas: dict[str, dict]  # /object_info entries of the graph's node types
    node_ids: set[str]  # every registered node type
    files: ModelFiles | None = None  # the host's model files; None: files not checked
    disabled: Mapping[str, list[str]] = field(default_factory=dict)  # {package: H3Kit nodes it would enable}
    pack_of: Callable[[str], str | None] = providing_pack  # who provides a node the host lacks
    environment: Callable[[dict], list[Check]] = lambda graph: []  # the server's own checks for this graph
    notes: list[Check] = field(default_factory=list)  # checks about the view itself (a schema that failed)


def check_item(check: Check) -> dict[str, Any]:
    """One check as the route (and the H3KitPreflight node's report) lists it: node_id and input where the check is
    about one node's input, so the editor can tell which of them ComfyUI's own lists already name."""
    item = {"status": check.status, "check": check.name, "detail": printable(check.detail), "fix": printable(check.fix)}
    if check.node_id is not None:
        item["node_id"] = str(check.node_id)
    if check.input is not None:
        item["input"] = str(check.input)
    return item


def preflight_checks(graph: dict, host: HostView) -> tuple[Verdict, list[Check]]:
    """The graph on `host` (checks.workflow.preflight_checks: the verdict of checks.verdict.judge, nodes it lacks
    (F35), model files and their headers), then the server's environment. Returns (the verdict, the lines)."""
    verdict, found = graph_checks(graph, host.schemas, host.files, host.node_ids, host.disabled,
                                  pack_of=host.pack_of, from_editor=True)
    return verdict, [*host.notes, *found, *host.environment(verdict.graph)]


def with_absent_nodes(graph: dict, absent: Any) -> dict:
    """The graph plus the nodes the frontend left out of it because this host lacks their type ({id: type}):
    they are then reported as missing nodes with the pack that provides them, not as dangling links."""
    if not isinstance(absent, dict) or not isinstance(graph, dict):
        return graph
    added = {str(node_id): {"class_type": class_type, "inputs": {}}
             for node_id, class_type in list(absent.items())[:MAX_NODES]
             if isinstance(class_type, str) and 0 < len(class_type) <= 200 and str(node_id) not in graph}
    return {**graph, **added}


def preflight_report(graph: Any, host_for: Callable[[dict], HostView], absent: Any = None) -> dict[str, Any]:
    """The route's JSON answer: the verdict (OK, ADAPTED or FAIL: checks.verdict, the word doctor, validate and run
    print), the worst status, counts, and every check (node_id where one applies). When the graph was moved to this
    host's input layout (checks.host_layout), each move is an INFO line and "adapted" holds the prompt to queue
    instead with each change ({node_id, class_type, from, to, value, text}); `absent`: {id: type} of the nodes the
    frontend left out (checked as missing, never part of the prompt)."""
    if not isinstance(graph, dict) or not graph or not all(isinstance(n, dict) for n in graph.values()):
        checks = [Check(FAIL, "workflow", "not an API-format graph (a JSON object of nodes)",
                        "send the graph the frontend queues: {\"prompt\": app.graphToPrompt().output}")]
        verdict = None
    else:
        full = with_absent_nodes(graph, absent)
        verdict, checks = preflight_checks(full, host_for(full))
    counts = {status: sum(c.status == status for c in checks) for status in STATUS_ORDER}
    worst = max((c.status for c in checks), key=STATUS_ORDER.index, default=PASS)
    report = {"verdict": verdict_of(checks), "status": worst, "fail": counts[FAIL],
              "warn": counts[WARN], "pass": counts[PASS], "info": counts[INFO],
              "checks": [check_item(c) for c in checks]}
    if verdict is not None and verdict.changes:
        prompt = {node_id: node for node_id, node in verdict.graph.items() if node_id in graph}  # absent ones: not queued
        report["adapted"] = {"prompt": prompt, "changes": [c.as_dict() for c in verdict.changes]}
    return report


# --- the ComfyUI this process runs in --------------------------------------------------------------

def node_schemas(node_classes: Mapping[str, type], class_types: Iterable[str]) -> tuple[dict[str, dict], list[Check]]:
    """/object_info entries of `class_types`, read from the registered classes; a class whose schema raises is
    left out with a WARN naming it (its inputs go unchecked), as /object_info must not fail for one node."""
    schemas: dict[str, dict] = {}
    notes = []
    for class_type in sorted(set(class_types)):
        cls = node_classes.get(class_type)
        if cls is None:
            continue  # reported as a missing node
        try:
            schemas[class_type] = (cls.GET_NODE_INFO_V1() if hasattr(cls, "GET_NODE_INFO_V1")
                                   else class_info(class_type, cls))
        except Exception as exc:  # noqa: BLE001 - a third-party node's INPUT_TYPES may raise anything
            notes.append(Check(WARN, "nodes", f"'{printable(class_type, 200)}': its inputs could not be read "
                               f"({type(exc).__name__}: {printable(exc, 500)}), so they were not checked",
                               "see the ComfyUI log for that node pack's error"))
    return schemas, notes


@lru_cache(maxsize=1)
def machine_checks() -> tuple[Check, ...]:
    # Packages, GPU and attention backends do not change under a running server (installing one needs a
    # restart to take effect), so they are read once per process.
    return tuple(local_checks(comfyui_version(), render_devices()))


def served_node_classes() -> Mapping[str, type]:
    """The node classes this server serves at /object_info. Comfy-Org ComfyUI keeps them in
    ``nodes.NODE_CLASS_MAPPINGS``; the installable fork on its ``PromptServer.instance.nodes``, and its ``nodes``
    module is a shim that lists only the base nodes outside a running prompt (no custom node, no V3 node such as
    PreviewAny), so reading the shim in a route would report H3Kit's own nodes as not installed."""
    prompt_server = getattr(getattr(host_module("server"), "PromptServer", None), "instance", None)
    served = getattr(getattr(prompt_server, "nodes", None), "NODE_CLASS_MAPPINGS", None)
    if isinstance(served, Mapping) and served:
        return served
    return host_module("nodes").NODE_CLASS_MAPPINGS


def server_environment(graph: dict) -> list[Check]:
    return [comfyui_version_check(comfyui_version(), graph, set(served_node_classes()), kitchen_version()),
            *machine_checks()]


@dataclass(frozen=True)
class PackNodes:
    """What the routes know of the pack's own nodes, handed in at registration (__init__.py): adapters/ never
    import nodes/."""

    disabled: Mapping[str, list[str]]  # {package: H3Kit nodes it would enable}
    pack_of: Callable[[str], str | None]  # who provides a node the host lacks


def comfyui_host(graph: dict, pack: PackNodes) -> HostView:
    registered = served_node_classes()
    types = [n.get("class_type") for n in graph.values() if isinstance(n.get("class_type"), str)]
    schemas, notes = node_schemas(registered, types)
    return HostView(schemas, set(registered), host_files(), pack.disabled, pack.pack_of, server_environment, notes)


# --- aiohttp handlers -----------------------------------------------------------------------------

def _error(web: Any, status: int, message: str, fix: str) -> Any:
    return web.json_response({"error": message, "fix": fix}, status=status)


async def describe_preflight(request: Any) -> Any:
    from aiohttp import web

    return web.json_response({"route": PREFLIGHT_ROUTE, "watch": WATCHED_NODE_PATTERN})


@lru_cache(maxsize=1)
def _workers() -> Workers:
    """The route's workers (adapters/preflight_workers.py): graphs are parsed and checked beside ComfyUI's event
    loop, a few at once; more are answered 503 at once instead of waiting in a line no one can see."""
    return Workers()


def check_body(stop: StopFlag, chunks: list[bytes], pack: PackNodes) -> tuple[int, bytes]:
    """A worker's part of the route: the body parsed and walked (preflight_request.parse_body: 400/413 with the
    reason), the checks of `preflight_report` on this ComfyUI (`comfyui_host`), and the answer encoded, each step
    ending the work (Abandoned) once `stop` is set. Returns (HTTP status, JSON body).

    All of it runs with the cyclic collector paused (adapters/collector.py), and leaves it only once what it built
    is freed: a full pass over the server's objects (0.3 s on yzkee 783545f6) then never runs in this thread."""
    failure = None
    with cyclic_gc_paused():
        try:
            return _checked_body(stop, chunks, pack)
        except Abandoned as abandoned:  # re-raised without the frames that hold the graph and its report
            failure = abandoned.with_traceback(None)
    raise failure


def _checked_body(stop: StopFlag, chunks: list[bytes], pack: PackNodes) -> tuple[int, bytes]:
    started = time.perf_counter()
    try:
        graph, absent = parse_body(chunks, stop)
    except RequestRefused as refused:
        return refused.status, encode({"error": refused.message, "fix": refused.fix}, stop)
    report = preflight_report(graph, lambda full: (stop(), comfyui_host(full, pack))[1], absent)
    stop()
    report["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return 200, encode(report, stop)


def encode(answer: dict, stop: StopFlag) -> bytes:
    """The answer as JSON by json's pure-Python encoder (the C one holds the interpreter lock until the last byte;
    an adapted prompt can be megabytes), `stop` called between pieces."""
    pieces = []
    for piece in json.JSONEncoder().iterencode(answer):
        pieces.append(piece)
        if len(pieces) % 4096 == 0:
            stop()
    return "".join(pieces).encode()


async def handle_preflight(request: Any, pack: PackNodes) -> Any:
    """The editor's check: the body read here (preflight_request.read_body: it only awaits chunks), everything else
    in a worker (`check_body`); 503 at once when every worker is busy and the line is full; 413 when the answer
    takes longer than CHECK_S. Whatever ends the request, its worker is told to stop."""
    from aiohttp import web

    workers = _workers()
    try:
        job = workers.admit()
    except Busy as busy:
        response = _error(web, 503, f"H3Kit's preflight is already working on {busy.admitted} graphs (at most "
                          f"{workers.workers} at once, {workers.capacity - workers.workers} waiting)",
                          "try again in a moment, or use Run anyway to queue the graph unchecked")
        response.headers["Retry-After"] = "5"
        return response
    try:
        chunks = await read_body(request)
        status, body = await workers.run(job, check_body, chunks, pack, timeout=preflight_request.CHECK_S,
                                         gone=lambda: request.transport is None or request.transport.is_closing())
    except RequestRefused as refused:
        return _error(web, refused.status, refused.message, refused.fix)
    except asyncio.TimeoutError:
        return _error(web, 413, f"the graph could not be checked within {preflight_request.CHECK_S:.0f} s",
                      f"check a smaller graph, or run `{command('validate FILE')}` on the exported API graph")
    except Abandoned:
        return _error(web, 499, "the client left before the graph was checked", "nothing to do")
    except Exception as exc:  # noqa: BLE001 - the editor must hear that the check broke, and why
        LOG.error("H3Kit: the editor preflight failed", exc_info=True)
        return _error(web, 500, f"the preflight itself failed ({type(exc).__name__}: {printable(exc, 500)})",
                      f"see the ComfyUI log; `{command('doctor --workflow FILE')}` runs the same checks")
    finally:
        workers.done(job)
    return web.Response(body=body, status=status, content_type="application/json")


def template_file(name: str) -> Path | None:
    """A file directly in the pack's workflows/ folder with a template suffix; None for anything else (a name no
    file system can hold included: the OS would refuse to even look it up)."""
    if not name or Path(name).name != name or name.startswith(".") or "\\" in name:
        return None
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES or Path(name).suffix.lower() not in TEMPLATE_SUFFIXES:
        return None
    path = WORKFLOWS_DIR / name
    try:
        return path if path.is_file() else None
    except (OSError, ValueError):  # a NUL, or a name the OS refuses for its own reasons: no such template
        return None


async def serve_template(request: Any) -> Any:
    from aiohttp import web

    name = request.match_info.get("name", "")
    path = template_file(name)
    if path is None:
        raise no_template(name)
    return web.FileResponse(path)


def no_template(name: str) -> Exception:
    """The 404 for a template name the pack does not ship, saying why (a name no file system holds, or which)."""
    from aiohttp import web

    size = len(name.encode("utf-8", "surrogatepass"))
    why = (f"a name of {size:,} bytes (file names are at most {MAX_NAME_BYTES})" if size > MAX_NAME_BYTES
           else f"'{printable(name, 80)}'")
    return web.HTTPNotFound(text=f"H3Kit has no template {why}: its templates are the .json files (and their "
                            "thumbnails) directly in its workflows/ folder, listed by GET /workflow_templates")


def adapt_queued_prompt(json_data: Any) -> Any:
    """ComfyUI's on-prompt handler: a prompt queued by any client (the editor, a script, another tool) is moved to
    this host's input layout before ComfyUI validates it (checks.host_layout), so SaveVideo's keys from another
    ComfyUI version no longer pass /prompt and die after rendering. Only keys move, never values; each change is
    logged. A prompt that is not an API graph is passed on untouched for ComfyUI to refuse.

    It runs on ComfyUI's event loop, so its work is bounded and linear: a prompt of more than MAX_NODES nodes,
    MAX_HOOK_KEYS input keys in all or MAX_HOOK_EXAMINED_KEYS on nodes to examine key by key, and any node of more
    than host_layout.MAX_NODE_KEYS keys, is queued as sent (ComfyUI's own validation gives the verdict), with one
    log line saying so. No pass of the cyclic collector runs inside it (adapters/collector.py)."""
    with cyclic_gc_paused():
        return _adapted_prompt(json_data)


def _adapted_prompt(json_data: Any) -> Any:
    graph = json_data.get("prompt") if isinstance(json_data, dict) else None
    if not isinstance(graph, dict) or not graph:
        return json_data
    keys = 0 if len(graph) > MAX_NODES else sum(len(n["inputs"]) for n in graph.values()
                                                if isinstance(n, dict) and isinstance(n.get("inputs"), dict))
    if len(graph) > MAX_NODES or keys > MAX_HOOK_KEYS:
        LOG.warning("H3Kit: a queued prompt of %s nodes and %s input keys was not adapted to this ComfyUI's input "
                    "layout (at most %s nodes and %s keys are examined on the server's event loop); it is queued as "
                    "sent", f"{len(graph):,}", f"{keys:,}", f"{MAX_NODES:,}", f"{MAX_HOOK_KEYS:,}")
        return json_data
    try:
        types = [n.get("class_type") for n in graph.values() if isinstance(n, dict) and isinstance(n.get("class_type"), str)]
        schemas, _ = node_schemas(served_node_classes(), types)
        adaptation = adapt_graph(graph, schemas, deep=False, budget=MAX_HOOK_EXAMINED_KEYS)
    except Exception:  # noqa: BLE001 - never block a prompt on our side; ComfyUI validates it as sent
        LOG.error("H3Kit: could not adapt a queued prompt to this ComfyUI's input layout; it is queued as sent",
                  exc_info=True)
        return json_data
    if adaptation.over_budget:
        LOG.warning("H3Kit: a queued prompt has more than %s input keys on nodes with an input this ComfyUI does not "
                    "declare or without a required one, so it was not adapted to this ComfyUI's input layout (they "
                    "are examined on the server's event loop); it is queued as sent", f"{MAX_HOOK_EXAMINED_KEYS:,}")
        return json_data
    if adaptation.skipped:
        shown = ", ".join(adaptation.skipped[:5]) + (", ..." if len(adaptation.skipped) > 5 else "")
        LOG.warning("H3Kit: %s node(s) of a queued prompt have more than %s input keys and were not adapted to this "
                    "ComfyUI's input layout (node %s); they are queued as sent", len(adaptation.skipped),
                    f"{MAX_NODE_KEYS:,}", printable(shown, 200))
    if adaptation.changes:
        LOG.warning("H3Kit adapted a queued prompt to this ComfyUI's input layout: %s",
                    printable(adaptation.summary(), MAX_LOG_LINE_CHARS))  # the client's keys: one escaped line
        json_data = {**json_data, "prompt": adaptation.graph}
    return json_data


def register_routes(pack_folder: str, pack: PackNodes) -> bool:
    """Add the routes to the running ComfyUI's PromptServer; False (logged once) when there is none."""
    if not host_loaded("server"):
        return False
    prompt_server = getattr(getattr(host_module("server"), "PromptServer", None), "instance", None)
    routes = getattr(prompt_server, "routes", None)
    if routes is None:
        log_once("server_routes", "H3Kit: this ComfyUI exposes no PromptServer routes, so the graph editor's "
                 f"preflight is off; the H3KitPreflight node and `{command('doctor')}` still check graphs")
        return False
    try:
        routes.get(PREFLIGHT_ROUTE)(describe_preflight)
        routes.post(PREFLIGHT_ROUTE)(preflight_handler(pack))
        routes.get(f"/workflow_templates/{pack_folder}/{{name}}")(serve_template)
    except Exception:  # noqa: BLE001 - a host whose router refuses a route must still load the nodes
        LOG.error("H3Kit: could not register the pack's HTTP routes; the editor preflight is off", exc_info=True)
        return False
    register_template_name_guard(prompt_server, pack_folder)
    register_prompt_adapter(prompt_server)
    return True


def register_template_name_guard(prompt_server: Any, pack_folder: str) -> None:
    """ComfyUI serves every custom node's workflows/ folder itself, under /api/workflow_templates/<pack>/ (a static
    route registered before ours, the one the frontend asks): aiohttp answers a name no file system holds there with
    a 500 ("File name too long"). A middleware answers that one case for this pack's folder with the 404 our own
    route gives; every other request costs one prefix comparison. Logged once when the app is already frozen."""
    middlewares = getattr(getattr(prompt_server, "app", None), "middlewares", None)
    try:
        middlewares.append(template_name_guard(f"/api/workflow_templates/{pack_folder}/"))
    except (AttributeError, RuntimeError):  # no app, or a started one: its middlewares are frozen
        log_once("template_name_guard", "H3Kit: could not guard ComfyUI's template route for this pack; a template "
                 "name longer than a file name can be answers HTTP 500 there (nothing else changes)")


def template_name_guard(prefix: str) -> Callable[..., Any]:
    """An aiohttp middleware: a path under `prefix` whose name has more bytes than a file name can hold is a 404."""
    from aiohttp import web

    @web.middleware
    async def guard(request: Any, handler: Callable[[Any], Any]) -> Any:
        path = request.path
        if path.startswith(prefix) and len(path) - len(prefix) > MAX_NAME_BYTES // 4:  # cheap before the count
            name = path[len(prefix):]
            if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
                raise no_template(name)
        return await handler(request)

    return guard


def preflight_handler(pack: PackNodes) -> Callable[[Any], Any]:
    """The POST route's handler: an aiohttp handler takes only the request."""

    async def check_graph(request: Any) -> Any:
        return await handle_preflight(request, pack)

    return check_graph


def register_prompt_adapter(prompt_server: Any) -> bool:
    """Install adapt_queued_prompt as an on-prompt handler; False (logged once) where the host has no such hook."""
    add = getattr(prompt_server, "add_on_prompt_handler", None)
    if not callable(add):
        log_once("prompt_adapter", "H3Kit: this ComfyUI has no on-prompt handlers, so prompts queued by other clients "
                 f"are not adapted to its input layout; `{command('run')}` and the editor's preflight still adapt")
        return False
    add(adapt_queued_prompt)
    return True
