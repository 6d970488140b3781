"""One ComfyUI job over the client: submit a prompt, follow it to the end, read its history, fetch its files.

Used by `run` and `cond build`. Following: websocket events when /ws opens (progress), /history polling
always as the safety net, and F26: the server's queue is asked every QUEUE_CHECK_S while the history has no
entry (a job the queue holds is waited for, however long; one that neither has is lost), and again when our
time runs out. Everything the server sends is treated as data: ids through `safe_id`, file names through
`safe_basename`, malformed events and entries skipped or reported, never a crash.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks.facts import EXIT_INVALID
from ..checks.problem import printable, printable_lines
from .comfy_client import (
    BadResponse,
    ComfyClient,
    ComfyError,
    Deadline,
    EventSocket,
    HTTPStatusError,
    TimedOut,
    Unreachable,
    safe_id,
)

UNREACHABLE_GRACE_S = 120.0  # no answer to any question about the job for this long: the server is gone
POLL_INTERVAL_S = 0.5  # /history polling without a websocket
POLL_WITH_WS_S = 5.0  # /history polling as the safety net beside the websocket
QUEUE_CHECK_S = 10.0  # while /history has no entry, /queue is asked this often (F26: held jobs are waited for)
LOST_AFTER_MISSES = 2  # consecutive /queue + /history answers without the job: it is lost
MAX_JOB_FILES = 1000  # output files fetched per job (run); the pipeline's graphs write one to three
MAX_JOB_DOWNLOAD_BYTES = 32 * 1024**3  # all output files of one job (run --max-job-download)
LOST_NOTE = "the server neither holds the job nor has a history entry for it (restarted or cleared?)"
FINAL_QUESTION_S = 15.0  # time allowed to ask about the job after --timeout ran out (F26)
# /history can list a prompt as finished before the websocket has delivered its events (the server writes the entry,
# then its event loop sends the queued messages): wait this long for the finish event, so execution_cached and the
# timestamps, which hosts keeping only text in /history send nowhere else, are not lost (F17 on 0.12.1)
WS_SETTLE_S = 10.0
FINISH_EVENTS = ("execution_success", "execution_error", "execution_interrupted")
RECORDED_EVENTS = ("execution_start", "execution_cached", *FINISH_EVENTS)
# execution_* events of the followed prompt kept for its timing and cache counts: ComfyUI sends one of each kind per
# prompt, kilobytes each. A server repeating them while it holds the job grew the list without end (2.8 GiB after
# 300 s); past either cap the rest are dropped, counted and named once.
MAX_KEPT_EVENTS = 64
MAX_KEPT_EVENT_BYTES = 16 * 1024 * 1024


class Rejected(ComfyError):
    """The server (or our validation) refused the workflow: exit 2."""

    exit_code = EXIT_INVALID


@dataclass
class Outcome:
    state: str  # success | error | interrupted | timeout | lost | unreachable | refused
    entry: dict | None = None
    note: str = ""
    events: list[tuple[str, dict]] = field(default_factory=list)  # this prompt's execution_* websocket events


@dataclass
class OutputFile:
    node_id: str
    filename: str
    subfolder: str
    kind: str  # ComfyUI's folder type: output | temp | input


@dataclass
class Timing:
    seconds: float | None
    cached: list[str] = field(default_factory=list)
    error: dict | None = None


class Listener:
    """What a follower reports while a job runs (run draws progress bars from these)."""

    def node(self, node_id: str) -> None: ...

    def step(self, value: int, maximum: int, node_id: str | None) -> None: ...

    def cached(self, node_ids: list[str]) -> None: ...

    def note(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...


class ProgressBar(Listener):
    """One tqdm bar per job: nodes done of the graph's nodes, the running node and its sampler step.
    Silent with --quiet or when stderr is not a terminal. `say(label, text)` prints a result line (stdout),
    `warn(label, text)` a warning (stderr): the CLI's stream rule."""

    def __init__(self, graph: dict, label: str, position: int, quiet: bool, say: Callable[[str, str], None],
                 warn: Callable[[str, str], None]):
        from tqdm import tqdm

        self.graph, self.label, self.say, self.warn_line = graph, label, say, warn
        total = sum(1 for n in graph.values() if isinstance(n, dict))
        self.done: set[str] = set()
        self.bar = tqdm(total=total, unit="node", desc=label.strip() or "run", position=position, leave=True,
                        disable=quiet or not sys.stderr.isatty(), dynamic_ncols=True)

    def _name(self, node_id: str) -> str:
        node = self.graph.get(node_id)
        if not isinstance(node, dict):
            return node_id
        meta = node.get("_meta")
        title = meta.get("title") if isinstance(meta, dict) else None
        return printable(f"{node_id} {title or node.get('class_type', '?')}", 60)

    def _count(self, node_ids: list[str]) -> None:
        new = [n for n in node_ids if n in self.graph and n not in self.done]
        self.done.update(new)
        self.bar.update(len(new))

    def node(self, node_id: str) -> None:
        self._count([node_id])
        self.bar.set_postfix_str(self._name(node_id), refresh=True)

    def step(self, value: int, maximum: int, node_id: str | None) -> None:
        where = self._name(node_id) if node_id else ""
        self.bar.set_postfix_str(f"{where} step {value}/{maximum}".strip(), refresh=True)

    def cached(self, node_ids: list[str]) -> None:
        self._count(node_ids)

    def note(self, text: str) -> None:
        if self.bar.disable:
            self.say(self.label, text)
        else:
            self.bar.write(printable_lines(f"{self.label}{text}"), file=sys.stdout)

    def warn(self, text: str) -> None:
        if self.bar.disable:
            self.warn_line(self.label, f"WARN  {text}")
        else:
            self.bar.write(printable_lines(f"{self.label}WARN  {text}"), file=sys.stderr)

    def finished(self, success: bool) -> None:
        """Fill the bar when the job succeeded (nodes we never heard about ran or came from the cache)."""
        if success:
            self.bar.update(self.bar.total - self.bar.n)
        self.bar.set_postfix_str("done" if success else "stopped", refresh=True)

    def close(self) -> None:
        self.bar.close()


# ------------------------------------------------------------------------------------------ submitting
def submit(client: ComfyClient, graph: dict, client_id: str, warn: Callable[[str], None], strict: bool = False) -> str:
    """POST /prompt -> the prompt id (a safe identifier). Rejected with the server's node errors on refusal
    (and, when `strict`, also when the server accepts the prompt but drops outputs with node errors)."""
    status, body = client.post_json("/prompt", {"prompt": graph, "client_id": client_id})
    if status != 200 or (strict and isinstance(body, dict) and body.get("node_errors")):
        raise Rejected(rejection_text(status, body))
    if not isinstance(body, dict):
        raise BadResponse(f"POST /prompt answered {printable(repr(body), 200)}, not a JSON object")
    if body.get("node_errors"):
        warn(f"the server accepted the prompt but drops outputs that failed validation: "
             f"{printable(body['node_errors'], 500)}")
    return safe_id(body.get("prompt_id"))


def rejection_text(status: int, body: Any) -> str:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    message = error.get("message", body) if isinstance(error, dict) else error
    lines = [f"the server rejected the workflow (HTTP {status}): {printable(message, 500)}"]
    node_errors = body.get("node_errors") if isinstance(body, dict) else None
    for nid, info in (node_errors.items() if isinstance(node_errors, dict) else []):
        errors = info.get("errors", []) if isinstance(info, dict) else []
        for err in errors if isinstance(errors, list) else []:
            if isinstance(err, dict):
                lines.append(printable(f"  node {nid} ({info.get('class_type')}): {err.get('message')}: "
                                       f"{err.get('details')}", 500))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- reading state
def message_pairs(entry: dict, events: list[tuple[str, dict]] | tuple = ()) -> list[tuple[str, dict]]:
    """The (event, body) pairs of a history entry's status messages, completed by the websocket `events`
    of the same prompt where the entry has no body for that event. ComfyUI 0.3.x stores [event, {body}]
    pairs; newer hosts store plain "event: message" strings, whose bodies only the websocket carried."""
    status = entry.get("status")
    messages = status.get("messages") if isinstance(status, dict) else None
    pairs: list[tuple[str, dict]] = []
    for item in messages if isinstance(messages, list) else []:
        if isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], dict):
            pairs.append((str(item[0]), item[1]))
        elif isinstance(item, str):
            event, _, text = item.partition(":")
            pairs.append((event.strip(), {"exception_message": text.strip()} if text.strip() else {}))
    with_bodies = {event for event, body in pairs if body}
    extra = [(event, body) for event, body in events if event not in with_bodies]
    known = {event for event, _ in extra}
    return [(event, body) for event, body in pairs if event not in known] + extra


def history_entry(client: ComfyClient, prompt_id: str) -> dict | None:
    """The finished history entry of a prompt, or None while it is not finished."""
    body = client.get_json(f"/history/{prompt_id}")
    entry = body.get(prompt_id) if isinstance(body, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("status"), dict):
        status = entry["status"]
        if status.get("completed") is not None or status.get("status_str") in ("success", "error"):
            return entry
    return None


def entry_state(entry: dict, seen: list[tuple[str, dict]] | tuple = ()) -> str:
    events = {event for event, _ in message_pairs(entry, seen)}
    if "execution_interrupted" in events:
        return "interrupted"
    if entry["status"].get("status_str") == "success" or "execution_success" in events:
        return "success"
    return "error"


def queue_holds(client: ComfyClient, prompt_id: str) -> str | None:
    """'running' or 'pending' when the server's queue still holds the job, else None."""
    queue = client.get_json("/queue")
    for state, key in (("running", "queue_running"), ("pending", "queue_pending")):
        items = queue.get(key) if isinstance(queue, dict) else None
        for item in items if isinstance(items, list) else []:
            if isinstance(item, list) and len(item) > 1 and item[1] == prompt_id:
                return state
    return None


def timing_of(entry: dict, events: list[tuple[str, dict]] | tuple = ()) -> Timing:
    """execution_success - execution_start (ms timestamps of the status messages, or of the websocket
    events when the history keeps only text), cached node ids, the error body."""
    stamps: dict[str, float] = {}
    timing = Timing(None)
    for event, data in message_pairs(entry, events):
        stamp = _finite(data.get("timestamp"))
        if stamp is not None:
            stamps[event] = stamp
        if event == "execution_cached" and isinstance(data.get("nodes"), list):
            timing.cached = [printable(n, 40) for n in data["nodes"]]
        if event in ("execution_error", "execution_interrupted"):
            timing.error = {"event": event, **data}
    if "execution_start" in stamps and "execution_success" in stamps:
        timing.seconds = (stamps["execution_success"] - stamps["execution_start"]) / 1000.0
    return timing


def _finite(value: Any) -> float | None:
    """A server's number as a finite float, or None (text, booleans, NaN, or an int too big for a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def output_files(entry: dict) -> tuple[list[OutputFile], list[str]]:
    """(the files the outputs list, descriptions of listed items we refuse to fetch)."""
    files, refused = [], []
    outputs = entry.get("outputs")
    for node_id, ui in (outputs.items() if isinstance(outputs, dict) else []):
        for items in (ui.values() if isinstance(ui, dict) else []):
            for item in items if isinstance(items, list) else []:
                if not isinstance(item, dict) or "filename" not in item:
                    continue
                name, sub, kind = item.get("filename"), item.get("subfolder", ""), item.get("type", "output")
                if not all(_url_text(v) for v in (name, sub, kind)) or not name:
                    refused.append(printable(f"node {node_id}: {item!r}", 200))
                    continue
                files.append(OutputFile(printable(node_id, 40), name, sub, kind))
    return files, refused


def _url_text(value: Any) -> bool:
    """Text /view can be asked for: no NUL, and UTF-8 (a lone surrogate such as '\\ud800' cannot be put in a URL:
    that one output is refused, the job's other outputs are still fetched)."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def fetch_output(client: ComfyClient, item: OutputFile, folder: Path, cap: int, seconds: float | None) -> Path:
    """/view the file into `folder` under a safe, free name, at most `cap` bytes within `seconds` (and the
    client's deadline); never outside the folder, never overwriting."""
    return client.download({"filename": item.filename, "subfolder": item.subfolder, "type": item.kind},
                           folder, item.filename, cap, seconds)


# -------------------------------------------------------------------------------------------- following
class Follower:
    """Waits for one prompt: websocket events when available, /history polling always as the safety net."""

    def __init__(self, client: ComfyClient, prompt_id: str, listener: Listener, deadline: Deadline):
        self.client, self.prompt_id, self.listener, self.deadline = client, prompt_id, listener, deadline
        self.finished_event: str | None = None
        self.last_note = ""
        self.events: list[tuple[str, dict]] = []
        self.kept_bytes = 0
        self.dropped: dict[str, int] = {}  # kind -> events not kept (over MAX_KEPT_EVENTS / MAX_KEPT_EVENT_BYTES)
        self.dropped_bytes = 0

    def on_event(self, event: dict, size: int | None = None) -> None:
        """One websocket event; `size`: its message's bytes (what keeping it costs; estimated when not given)."""
        kind, data = event.get("type"), event.get("data")
        if not isinstance(data, dict) or data.get("prompt_id") not in (None, self.prompt_id):
            return
        node = data.get("node")
        if kind in RECORDED_EVENTS and data.get("prompt_id") == self.prompt_id:
            self._keep(kind, data, size)
        if kind == "executing" and node is not None:
            self.listener.node(printable(node, 40))
        elif kind == "progress":
            value, maximum = data.get("value"), data.get("max")
            if isinstance(value, int) and isinstance(maximum, int) and 0 <= value <= maximum:
                self.listener.step(value, maximum, None if node is None else printable(node, 40))
        elif kind == "execution_cached" and isinstance(data.get("nodes"), list):
            self.listener.cached([printable(n, 40) for n in data["nodes"]])
        elif kind in FINISH_EVENTS:
            self.finished_event = kind
        elif kind == "executing" and node is None and data.get("prompt_id") == self.prompt_id:
            self.finished_event = self.finished_event or "executing_done"

    def _keep(self, kind: str, data: dict, size: int | None) -> None:
        size = len(json.dumps(data, default=str)) if size is None else size
        if len(self.events) < MAX_KEPT_EVENTS and self.kept_bytes + size <= MAX_KEPT_EVENT_BYTES:
            self.events.append((kind, data))
            self.kept_bytes += size
            return
        if not self.dropped:
            self._note(f"the server sent more execution events for prompt {self.prompt_id} than a job has (ComfyUI "
                       f"sends one of each kind); keeping the first {len(self.events)} ({self.kept_bytes:,} bytes; at "
                       f"most {MAX_KEPT_EVENTS} or {MAX_KEPT_EVENT_BYTES:,} bytes are kept), dropping the rest")
        self.dropped[kind] = self.dropped.get(kind, 0) + 1
        self.dropped_bytes += size

    def dropped_text(self) -> str:
        """'' or what was not kept: 'dropped 5,000 execution_cached events (51,200,000 bytes)'."""
        if not self.dropped:
            return ""
        kinds = ", ".join(f"{count:,} {kind}" for kind, count in sorted(self.dropped.items()))
        return f"dropped {kinds} event(s) ({self.dropped_bytes:,} bytes) past the cap on kept events"

    def wait(self, ws: EventSocket | None) -> Outcome:
        outcome = self._wait(ws)
        outcome.events = self.events
        if self.dropped:
            self.listener.warn(printable(self.dropped_text(), 300))
        return outcome

    def _wait(self, ws: EventSocket | None) -> Outcome:
        silent_since: float | None = None  # when the current run of unanswered status questions began
        last_poll, last_queue, misses = 0.0, time.monotonic(), 0
        while True:
            if ws is not None:
                ws = self._pump(ws)
            now = time.monotonic()
            if ws is None or self.finished_event or now - last_poll > POLL_WITH_WS_S:
                last_poll = now
                try:
                    entry = history_entry(self.client, self.prompt_id)
                    if entry is None and now - last_queue >= QUEUE_CHECK_S:
                        last_queue = now
                        entry, held = self._queue_or_history()
                        misses = 0 if held else misses + 1
                    silent_since = None
                    if entry is not None:
                        if ws is not None and not self.finished_event:
                            ws = self._settle(ws)
                        return Outcome(entry_state(entry, self.events), entry)
                    if misses >= LOST_AFTER_MISSES:
                        return Outcome("lost", note=LOST_NOTE)
                except (HTTPStatusError, TimedOut, Unreachable) as exc:
                    silent_since = silent_since or now
                    if not (isinstance(exc, TimedOut) and self.deadline.expired()):
                        self._note(self._retry_text(exc))
                    if now - silent_since > UNREACHABLE_GRACE_S:
                        return Outcome("unreachable", note=f"the server has answered no question about the job for "
                                       f"{UNREACHABLE_GRACE_S:.0f} s (last: {exc})")
                except BadResponse as exc:
                    return Outcome("refused", note=str(exc))
            if self.deadline.expired():
                return self._on_timeout()
            if ws is None:
                time.sleep(min(POLL_INTERVAL_S, max(self.deadline.cap(POLL_INTERVAL_S), 0.01)))

    @staticmethod
    def _retry_text(exc: ComfyError) -> str:
        if isinstance(exc, HTTPStatusError):  # a proxy in front of ComfyUI may answer 502/504 while it renders (F26)
            return f"/history answered HTTP {exc.status}; the job may still be running, waiting on"
        return f"{exc}; retrying"

    def _queue_or_history(self) -> tuple[dict | None, bool]:
        """(the history entry, whether the queue holds the job): the queue first, then the history again, so
        a job that finishes between the two questions is found, never called lost."""
        if queue_holds(self.client, self.prompt_id):
            return None, True
        return history_entry(self.client, self.prompt_id), False

    def _settle(self, ws: EventSocket) -> EventSocket | None:
        """The history entry is complete: read the websocket on until this prompt's finish event (bounded by
        WS_SETTLE_S and the deadline), so every event the server sent for it is recorded."""
        settle = time.monotonic() + WS_SETTLE_S
        while ws is not None and not self.finished_event and time.monotonic() < settle and not self.deadline.expired():
            ws = self._pump(ws, min(1.0, max(settle - time.monotonic(), 0.01)))
        if not self.finished_event:
            self._note(f"/history lists the prompt as finished but the websocket sent no finish event within "
                       f"{WS_SETTLE_S:.0f} s; cached-node counts and timing come from /history alone")
        return ws

    def _pump(self, ws: EventSocket, wait_s: float = 1.0) -> EventSocket | None:
        try:
            event = ws.recv_event(self.deadline.cap(wait_s))
        except ComfyError as exc:
            self._note(f"websocket stopped ({exc}); following by /history polling")
            ws.close()
            return None
        if event is not None:
            self.on_event(event, getattr(ws, "last_bytes", None))
        return ws

    def _note(self, text: str) -> None:
        if text != self.last_note:
            self.last_note = text
            self.listener.warn(printable(text, 300))

    def _on_timeout(self) -> Outcome:
        """F26: before giving up, ask the queue; a job the server still holds is not a failure."""
        asker = ComfyClient(self.client.server, read_timeout=FINAL_QUESTION_S, deadline=Deadline(FINAL_QUESTION_S))
        try:
            entry = history_entry(asker, self.prompt_id)
            if entry is not None:
                return Outcome(entry_state(entry, self.events), entry)
            held = queue_holds(asker, self.prompt_id)
        except ComfyError as exc:
            return Outcome("timeout", note=f"stopped waiting; could not ask the server about the job ({exc})")
        finally:
            asker.close()
        if held:
            return Outcome("timeout", note=f"stopped waiting, but the server still holds the job ({held}): it is not "
                           f"a failure; its result will appear at {self.client.server}/history/{self.prompt_id}")
        return Outcome("lost", note=LOST_NOTE)


def open_events(client: ComfyClient, client_id: str) -> tuple[EventSocket | None, str]:
    """(/ws connection or None, a note saying why we poll instead)."""
    try:
        return client.websocket(client_id), ""
    except ComfyError as exc:
        return None, f"websocket unavailable: {exc}; following by /history polling"


def wait_for_prompt(client: ComfyClient, prompt_id: str, listener: Listener, deadline: Deadline,
                    ws: EventSocket | None = None) -> Outcome:
    try:
        return Follower(client, prompt_id, listener, deadline).wait(ws)
    finally:
        if ws is not None:
            ws.close()
