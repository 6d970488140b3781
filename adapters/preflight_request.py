"""The transport of the editor's preflight route (POST /h3kit/preflight): the request body read whole within its
byte cap and time, JSON only, parsed within the pack's JSON bounds, and the graph in it checked for size and
node shape. Every refusal is a `RequestRefused` whose status (400, or 413 for sizes) and message the route
answers and the editor shows; nothing a client sends reaches the checks as an exception.

What the checks then say about the graph is adapters/server_routes.py's; this module only decides whether
there is a graph to check.

- Content-Type must be application/json (UTF-8): a cross-site HTML form can only send text/plain,
  application/x-www-form-urlencoded or multipart/form-data without the browser asking the server first.
- The body is read chunk by chunk until it ends (`StreamReader.read(n)` returns what has arrived so far, not n
  bytes) and refused once it passes MAX_BODY_BYTES, declared or not; it must arrive within BODY_READ_S.
- JSON nesting, integer digits and repeated keys are bounded by adapters/bounded_json.py (the workflow-file
  limits), so 100,000 nested brackets are a 400, never a RecursionError.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..checks.facts import MAX_WORKFLOW_DEPTH
from ..checks.graph import node_shape_problem
from ..checks.invocation import command
from . import bounded_json

MAX_BODY_BYTES = 32 * 1024 * 1024  # a 10,000-node graph with long prompts is about 10 MB
MAX_NODES = 10_000
BODY_READ_S = 60.0  # the whole body, from the request's headers to its last byte
CHECK_S = 60.0  # the checks of one graph (a 10,000-node graph takes about 2 s), run beside ComfyUI's event loop
JSON_TYPE = "application/json"
FIX = 'POST {"prompt": <API-format graph>} as JSON (Content-Type: application/json), as the H3Kit extension does'


class RequestRefused(Exception):
    """A request the route refuses: HTTP `status`, `message` and `fix` for the editor."""

    def __init__(self, status: int, message: str, fix: str = FIX):
        super().__init__(message)
        self.status, self.message, self.fix = status, message, fix


async def read_json(request: Any) -> Any:
    """The request's JSON body, or RequestRefused."""
    cap, seconds = MAX_BODY_BYTES, BODY_READ_S
    if request.content_type != JSON_TYPE:
        shown = request.content_type or "no Content-Type"
        raise RequestRefused(400, f"the body is {shown[:80]}; this route reads {JSON_TYPE} only")
    if (request.charset or "utf-8").lower() not in ("utf-8", "utf8"):
        raise RequestRefused(400, f"the body's charset is {request.charset[:40]}; JSON is read as UTF-8")
    if request.content_length is not None and request.content_length > cap:
        raise RequestRefused(413, f"the body is {request.content_length:,} bytes; at most {cap:,} are read")
    try:
        raw = await asyncio.wait_for(_read_all(request.content, cap), seconds)
    except asyncio.TimeoutError:
        raise RequestRefused(400, f"the body did not arrive within {seconds:.0f} s") from None
    except (ConnectionError, OSError, ValueError) as exc:  # aiohttp's payload errors are ValueErrors
        raise RequestRefused(400, f"the body was cut off ({type(exc).__name__})") from None
    try:
        return bounded_json.loads(raw, "the body", max_depth=MAX_WORKFLOW_DEPTH, unique_keys=True)
    except bounded_json.JSONLimitError as exc:
        raise RequestRefused(400, str(exc)) from None


async def _read_all(stream: Any, cap: int) -> bytes:
    """Every chunk until the end of the body; refused as soon as the total passes `cap`."""
    chunks, total = [], 0
    while True:
        chunk = await stream.readany()
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            raise RequestRefused(413, f"the body is over {cap:,} bytes")
        chunks.append(chunk)


def prompt_graph(body: Any) -> tuple[dict, Any]:
    """(the API graph under "prompt", the "absent" map) of a parsed body, or RequestRefused: at most MAX_NODES
    nodes, each an object whose class_type, when present, is text and whose inputs, when present, an object (the
    first one that is not is named). A node without class_type passes: the editor sends one for a node type this
    server lacks, and the checks report it on its node."""
    graph = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(graph, dict):
        raise RequestRefused(400, "no 'prompt' object in the body")
    if not graph:
        raise RequestRefused(400, "the 'prompt' graph has no nodes")
    if len(graph) > MAX_NODES:
        raise RequestRefused(413, f"the graph has {len(graph):,} nodes; at most {MAX_NODES:,} are checked",
                             f"check a smaller graph, or use `{command('validate FILE')}`")
    for node_id, node in graph.items():
        problem = node_shape_problem(node_id, node)
        if problem is not None and _never_sent_by_an_editor(node):
            raise RequestRefused(400, f"{problem.where()}: {problem.message}", problem.fix)
    return graph, body.get("absent")


def _never_sent_by_an_editor(node: Any) -> bool:
    """A node shape no ComfyUI frontend sends: not an object, a class_type that is not text, inputs that are not
    an object. (A missing class_type, or one with odd characters, is the checks' to report on the node.)"""
    if not isinstance(node, dict):
        return True
    class_type, inputs = node.get("class_type"), node.get("inputs", {})
    return (class_type is not None and not isinstance(class_type, str)) or not isinstance(inputs, dict)
