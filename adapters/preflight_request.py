"""The transport of the editor's preflight route (POST /h3kit/preflight): the request body read whole within its
byte cap and time (`read_body`, on ComfyUI's event loop: it only awaits chunks), then, in a worker thread
(`parse_body`), JSON only, parsed within the pack's JSON bounds and a budget of arrays and objects, and the graph
in it checked for size and node shape. Every refusal is a `RequestRefused` whose status (400, or 413 for sizes)
and message the route answers and the editor shows; nothing a client sends reaches the checks as an exception.

What the checks then say about the graph is adapters/server_routes.py's; this module only decides whether
there is a graph to check.

- Content-Type must be application/json (UTF-8): a cross-site HTML form can only send text/plain,
  application/x-www-form-urlencoded or multipart/form-data without the browser asking the server first.
- The body is read chunk by chunk until it ends (`StreamReader.read(n)` returns what has arrived so far, not n
  bytes) and refused once it passes MAX_BODY_BYTES, declared or not; it must arrive within BODY_READ_S.
- JSON nesting, integer digits and repeated keys are bounded by adapters/bounded_json.py (the workflow-file
  limits), so 100,000 nested brackets are a 400, never a RecursionError. The parse is bounded by what it builds:
  at most MAX_CONTAINERS arrays and objects (31 MiB of `[]` would be 10 million of them, over 1 GiB), refused as
  the parse reaches them; it runs on json's pure-Python scanner, so ComfyUI's event loop keeps its turns, and it
  calls `stop` (the worker's flag, set once the request is answered or given up) before each one.
"""

from __future__ import annotations

import asyncio
from codecs import getincrementaldecoder
from collections.abc import Callable
from typing import Any

from ..checks.facts import MAX_WORKFLOW_DEPTH
from ..checks.graph import node_shape_problem
from ..checks.invocation import command
from . import bounded_json
from .preflight_workers import Abandoned

MAX_BODY_BYTES = 32 * 1024 * 1024  # a 10,000-node graph with long prompts is about 10 MB
MAX_NODES = 10_000
BODY_READ_S = 60.0  # the whole body, from the request's headers to its last byte
CHECK_S = 60.0  # the checks of one graph (a 10,000-node graph takes about 2 s), run beside ComfyUI's event loop
# JSON arrays and objects in one body; the 10,000-node test graph holds 43,000. The parse runs with the cyclic
# collector paused (adapters/collector.py), but what it builds is memory (about 100 bytes each) and time, so a budget
# of millions would hold the worker, and the interpreter lock it shares with ComfyUI's loop, for seconds.
MAX_CONTAINERS = 200_000
JSON_TYPE = "application/json"
FIX = 'POST {"prompt": <API-format graph>} as JSON (Content-Type: application/json), as the H3Kit extension does'


class RequestRefused(Exception):
    """A request the route refuses: HTTP `status`, `message` and `fix` for the editor."""

    def __init__(self, status: int, message: str, fix: str = FIX):
        super().__init__(message)
        self.status, self.message, self.fix = status, message, fix


async def read_body(request: Any) -> list[bytes]:
    """The request's body as the chunks that arrived (`parse_body` joins them, off the event loop), or
    RequestRefused: a JSON content type in UTF-8, at most MAX_BODY_BYTES, within BODY_READ_S."""
    cap, seconds = MAX_BODY_BYTES, BODY_READ_S
    if request.content_type != JSON_TYPE:
        shown = request.content_type or "no Content-Type"
        raise RequestRefused(400, f"the body is {shown[:80]}; this route reads {JSON_TYPE} only")
    if (request.charset or "utf-8").lower() not in ("utf-8", "utf8"):
        raise RequestRefused(400, f"the body's charset is {request.charset[:40]}; JSON is read as UTF-8")
    if request.content_length is not None and request.content_length > cap:
        raise RequestRefused(413, f"the body is {request.content_length:,} bytes; at most {cap:,} are read")
    try:
        return await asyncio.wait_for(_read_all(request.content, cap), seconds)
    except asyncio.TimeoutError:
        raise RequestRefused(400, f"the body did not arrive within {seconds:.0f} s") from None
    except (ConnectionError, OSError, ValueError) as exc:  # aiohttp's payload errors are ValueErrors
        raise RequestRefused(400, f"the body was cut off ({type(exc).__name__})") from None


def parse_body(chunks: list[bytes], stop: Callable[[], None]) -> tuple[dict, Any]:
    """(the graph, the "absent" map) of a body `read_body` read, or RequestRefused; run in a worker thread.
    `stop()` is called before each JSON array or object is built and before each node is looked at: it raises
    (the worker's flag) once nobody waits for the answer.

    A body with more `[` and `{` bytes than MAX_CONTAINERS is first parsed up to the chunk where they pass it:
    when those are all arrays and objects (31 MiB of `[]`), the budget refuses the body there, and the rest of
    it is never decoded or joined (joining 32 MiB holds the interpreter lock, and so ComfyUI's loop, 25-40 ms)."""
    stop()
    dense = _dense_prefix(chunks)
    if dense is not None:
        prefix = _decoded(chunks[:dense], final=False)
        try:
            _loads(prefix, stop)
        except RequestRefused as refused:
            if refused.status == 413:
                raise
            # the prefix ends inside a value: the whole body decides
    text = _decoded(chunks, final=True)
    chunks.clear()  # the body is held as text only while it is parsed
    return prompt_graph(_loads(text, stop), stop)


def _loads(text: str | bytes, stop: Callable[[], None]) -> Any:
    """bounded_json.loads with the route's budget of arrays and objects, `stop` before each; RequestRefused (400,
    413) or Abandoned. (The route's worker runs it with the cyclic collector paused: adapters/collector.py.)"""
    built = 0

    def visit(depth: int) -> None:
        nonlocal built
        built += 1
        if built > MAX_CONTAINERS:
            raise RequestRefused(413, f"the body holds more than {MAX_CONTAINERS:,} JSON arrays and objects; a "
                                 f"graph of {MAX_NODES:,} nodes holds far fewer",
                                 f"check a smaller graph, or use `{command('validate FILE')}`")
        stop()

    failure: Exception | None = None
    try:
        return bounded_json.loads(text, "the body", max_depth=MAX_WORKFLOW_DEPTH, unique_keys=True, visit=visit,
                                  max_values=bounded_json.MAX_VALUES)
    except bounded_json.JSONLimitError as exc:
        failure = RequestRefused(400, str(exc))
    except (RequestRefused, Abandoned) as exc:  # a budget, or nobody waits: re-raised without the parse's frames,
        failure = exc.with_traceback(None)  # so what the parse had built is freed here, not when it is answered
    raise failure


def _dense_prefix(chunks: list[bytes]) -> int | None:
    """How many chunks hold more `[` and `{` bytes than MAX_CONTAINERS (an upper bound of the arrays and objects
    they open); None when the whole body holds fewer."""
    opened = 0
    for count, chunk in enumerate(chunks, 1):
        opened += chunk.count(b"[") + chunk.count(b"{")
        if opened > MAX_CONTAINERS:
            return count
    return None


def _decoded(chunks: list[bytes], final: bool) -> str | bytes:
    """The chunks as text, decoded one by one: each holds the interpreter lock for microseconds, where decoding
    32 MiB at once held it 20-60 ms on a busy machine. Not UTF-8: the bytes, joined, for bounded_json to name the
    first bad byte. `final` False: a character cut at the end is left out (a prefix of the body)."""
    decoder = getincrementaldecoder("utf-8-sig")()
    try:
        pieces = [decoder.decode(chunk) for chunk in chunks]
        pieces.append(decoder.decode(b"", final=final))
    except UnicodeDecodeError:
        return b"".join(chunks)
    return "".join(pieces)


async def _read_all(stream: Any, cap: int) -> list[bytes]:
    """Every chunk until the end of the body; refused as soon as the total passes `cap`."""
    chunks, total = [], 0
    while True:
        chunk = await stream.readany()
        if not chunk:
            return chunks
        total += len(chunk)
        if total > cap:
            raise RequestRefused(413, f"the body is over {cap:,} bytes")
        chunks.append(chunk)


def prompt_graph(body: Any, stop: Callable[[], None] = lambda: None) -> tuple[dict, Any]:
    """(the API graph under "prompt", the "absent" map) of a parsed body, or RequestRefused: at most MAX_NODES
    nodes, each an object whose class_type, when present, is text and whose inputs, when present, an object (the
    first one that is not is named). A node without class_type passes: the editor sends one for a node type this
    server lacks, and the checks report it on its node. `stop()` is called before each node (parse_body)."""
    graph = body.get("prompt") if isinstance(body, dict) else None
    if not isinstance(graph, dict):
        raise RequestRefused(400, "no 'prompt' object in the body")
    if not graph:
        raise RequestRefused(400, "the 'prompt' graph has no nodes")
    if len(graph) > MAX_NODES:
        raise RequestRefused(413, f"the graph has {len(graph):,} nodes; at most {MAX_NODES:,} are checked",
                             f"check a smaller graph, or use `{command('validate FILE')}`")
    for node_id, node in graph.items():
        stop()
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
