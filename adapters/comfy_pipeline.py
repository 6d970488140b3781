"""The two stages on different ComfyUI servers, pipelined over a batch (`run --stage1-server A --stage2-server B`):
stage 1 of clip k+1 renders on A while stage 2 of clip k renders on B, so with H3 resident on one GPU and LTX on
another a clip costs max(stage 1, stage 2) and no model is swapped (issue 32; the graphs: checks/graph_split.py).

Scheduling: one worker thread per (stage, server); stage-1 workers take clips in order, a finished draft queues its
clip for stage 2, stage-2 workers take the oldest drafted clip. The draft moves through ComfyUI's own HTTP API (/view
from the stage-1 server into --out/drafts, /upload/image to the stage-2 server's input/h3kit_drafts) or, with a shared
folder, not at all. Every job goes through the one client and job follower (comfy_client.py, comfy_jobs.py): the same
caps, the same deadlines (--timeout per stage job, transfers included), the same F26 patience.

Failures cost only their clip: a server that stops answering is dropped and its clip goes to another server of the
same stage (at most MAX_STAGE_ATTEMPTS tries per stage, never twice on a server while another is alive); a graph
that fails (an execution error, a guard, --timeout) is reported, not retried, as it would fail again. Nothing is lost:
every downloaded draft stays in --out/drafts (or the shared folder) and each failed clip says where its draft is.
"""

from __future__ import annotations

import copy
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks.facts import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    MAX_DRAFT_BYTES,
    worst_exit,
)
from ..checks.graph_edit import apply_seed
from ..checks.graph_split import DRAFT_FOLDER, DRAFT_INPUT
from ..checks.problem import FAIL, INFO, PASS, printable
from ..checks.reports import report_checks
from . import comfy_jobs as jobs
from .comfy_client import (
    MAX_JSON_BYTES,
    BadResponse,
    ComfyClient,
    ComfyError,
    Deadline,
    HTTPStatusError,
    TimedOut,
    Unreachable,
)
from .files import regular_file_problem

MAX_STAGE_ATTEMPTS = 3  # tries of one stage of one clip, each on another server while one is alive
PROBE_S = 10.0  # after a broken upload: does the server still answer? (then it refused the upload, it is not gone)
WAIT_STEP_S = 1.0  # a worker with nothing to take looks again this often (and whenever a clip moves)
STAGES = (1, 2)

Say = Callable[[str], None]


@dataclass
class Clip:
    """One clip of the batch: its seed and prompt, where each stage ran, how it ended."""

    index: int
    label: str  # "[clip 3/8 seed 44] "
    seed: int | None
    prompt: str | None
    state: str = "waiting"  # waiting | stage 1 | drafted | stage 2 | done | failed
    code: int | None = None
    note: str = ""
    draft: Path | None = None  # the local copy (HTTP transfer)
    shared_name: str | None = None  # the draft's name in the shared folder
    attempts: dict[int, int] = field(default_factory=lambda: {1: 0, 2: 0})
    avoid: set[str] = field(default_factory=set)  # servers that failed this clip's current stage
    servers: dict[int, str] = field(default_factory=dict)
    wall_s: dict[int, float] = field(default_factory=dict)  # submit to result, transfers included
    server_s: dict[int, float | None] = field(default_factory=dict)  # execution_start -> _success, from /history
    prompt_ids: dict[int, str] = field(default_factory=dict)
    finished_at: float | None = None


@dataclass
class Stage:
    number: int
    servers: list[str]
    templates: dict[str, dict]  # server -> the stage's graph as validated and adapted for that server


@dataclass
class Options:
    draft_id: str  # H3KitSaveDraft in stage 1, H3KitLoadDraft in stage 2
    out: Path
    timeout: float | None = None  # one stage job, its transfers included
    shared: Path | None = None  # a folder that is output/h3kit_drafts on every stage-1 server and input/h3kit_drafts on
    prompt_target: tuple[str, str] | None = None  # every stage-2 server (then drafts do not travel over HTTP)


@dataclass
class Result:
    kind: str  # done | retry | failed
    code: int = EXIT_OK
    note: str = ""
    gone: bool = False  # the server stopped answering: no more work for it


# finish(client, clip, graph, outcome, prompt_id) -> exit code: stage 2 succeeded on the server; fetch and verify its
# outputs (scripts/run.py's downloads and video checks, which this layer cannot import).
Finish = Callable[[ComfyClient, Clip, dict, jobs.Outcome, str], int]


class ClipListener(jobs.Listener):
    """A job's notes and warnings as lines under the clip's label (no per-node bars: several jobs run at once)."""

    def __init__(self, label: str, say: Say, warn: Say):
        self.label, self.say_line, self.warn_line = label, say, warn

    def note(self, text: str) -> None:
        self.say_line(f"{self.label}{text}")

    def warn(self, text: str) -> None:
        self.warn_line(f"{self.label}WARN  {text}")


class Pipeline:
    def __init__(self, clips: list[Clip], stages: dict[int, Stage], options: Options, finish: Finish, say: Say,
                 warn: Say):
        self.clips, self.stages, self.options, self.finish = clips, stages, options, finish
        self.say, self.warn = say, warn
        self.queues: dict[int, list[Clip]] = {1: list(clips), 2: []}
        self.in_flight = {1: 0, 2: 0}
        self.dead: set[str] = set()
        self.cond = threading.Condition()
        self.started = time.monotonic()

    # -- scheduling (every method below holds self.cond)
    def live(self, stage: int) -> list[str]:
        return [s for s in self.stages[stage].servers if s not in self.dead]

    def _no_more(self, stage: int) -> bool:
        upstream = stage == 2 and (self.queues[1] or self.in_flight[1])
        return not self.queues[stage] and not self.in_flight[stage] and not upstream

    def take(self, stage: int, server: str) -> Clip | None:
        """The next clip this server should run for `stage`, waiting while one may still come; None when done."""
        with self.cond:
            while True:
                if server in self.dead:
                    return None
                others = [s for s in self.live(stage) if s != server]
                for clip in self.queues[stage]:
                    if server not in clip.avoid or not [s for s in others if s not in clip.avoid]:
                        self.queues[stage].remove(clip)
                        self.in_flight[stage] += 1
                        clip.state = f"stage {stage}"
                        return clip
                if self._no_more(stage):
                    return None
                self.cond.wait(WAIT_STEP_S)

    def settle(self, stage: int, server: str, clip: Clip, result: Result) -> None:
        with self.cond:
            self.in_flight[stage] -= 1
            if result.gone and server not in self.dead:
                self.dead.add(server)
                self.warn(f"WARN  {server} stopped answering; its work goes to the other servers "
                          f"({', '.join(self.live(1) + [s for s in self.live(2) if s not in self.live(1)]) or 'none left'})")
            if result.kind == "done" and stage == 1:
                clip.avoid.clear()
                self._queue(2, clip)
            elif result.kind == "done":
                self._end(clip, result.code, result.note)
            elif result.kind == "retry" and clip.attempts[stage] < MAX_STAGE_ATTEMPTS and self.live(stage):
                clip.avoid.add(server)
                self.warn(f"{clip.label}WARN  stage {stage} on {server}: {result.note}; trying again on "
                          f"{self._next_server(stage, clip)}")
                self._queue(stage, clip)
            else:
                why = result.note if result.kind == "failed" else (
                    f"{result.note}; no stage-{stage} server left" if not self.live(stage) else
                    f"{result.note}; stage {stage} failed {clip.attempts[stage]} times")
                self._end(clip, result.code if result.code != EXIT_OK else EXIT_FAILED, why)
            self._strand()
            self.cond.notify_all()

    def _next_server(self, stage: int, clip: Clip) -> str:
        fresh = [s for s in self.live(stage) if s not in clip.avoid]
        return fresh[0] if fresh else self.live(stage)[0]

    def _queue(self, stage: int, clip: Clip) -> None:
        clip.state = "waiting" if stage == 1 else "drafted"
        self.queues[stage].append(clip)
        self.queues[stage].sort(key=lambda c: c.index)

    def _strand(self) -> None:
        """Clips waiting for a stage whose servers are all gone end now (their drafts kept), not at the end."""
        for stage in STAGES:
            if self.live(stage) or not self.queues[stage]:
                continue
            for clip in self.queues[stage]:
                self._end(clip, EXIT_UNREACHABLE, f"no stage-{stage} server left ({', '.join(self.stages[stage].servers)} "
                          "stopped answering)")
            self.queues[stage] = []

    def _end(self, clip: Clip, code: int, note: str) -> None:
        clip.code, clip.note, clip.finished_at = code, note, time.monotonic()
        clip.state = "done" if code == EXIT_OK else "failed"
        kept = self._draft_text(clip)
        if code == EXIT_OK:
            self.say(f"{clip.label}done: stage 1 on {clip.servers.get(1)} ({_secs(clip.wall_s.get(1))}), stage 2 on "
                     f"{clip.servers.get(2)} ({_secs(clip.wall_s.get(2))})")
        else:
            self.warn(f"{clip.label}FAIL  {printable(note, 2000)}{'; ' + kept if kept else ''}")

    @staticmethod
    def _draft_text(clip: Clip) -> str:
        if clip.draft is not None:
            return f"its draft is kept at {clip.draft}"
        return f"its draft is {clip.shared_name} in the shared folder" if clip.shared_name else ""

    # -- one stage job
    def worker(self, stage: int, server: str) -> None:
        while True:
            clip = self.take(stage, server)
            if clip is None:
                return
            clip.attempts[stage] += 1
            clip.servers[stage] = server
            started = time.monotonic()
            try:
                result = self.run_stage(stage, server, clip)
            except Exception as exc:  # noqa: BLE001 - an answer or a bug we did not foresee: this clip fails, loudly
                result = Result("failed", EXIT_FAILED, f"stage {stage} crashed: {type(exc).__name__}: "
                                f"{printable(exc, 300)}")
            clip.wall_s[stage] = time.monotonic() - started
            self.settle(stage, server, clip, result)

    def graph_for(self, stage: int, server: str, clip: Clip) -> dict:
        graph = copy.deepcopy(self.stages[stage].templates[server])
        apply_seed(graph, clip.seed)
        target = self.options.prompt_target
        if stage == 1 and clip.prompt is not None and target is not None:
            graph[target[0]]["inputs"][target[1]] = clip.prompt
        return graph

    def run_stage(self, stage: int, server: str, clip: Clip) -> Result:
        deadline = Deadline(self.options.timeout)
        graph = self.graph_for(stage, server, clip)
        try:
            with ComfyClient(server, deadline=deadline) as client:
                if stage == 2:
                    placed = self.place_draft(client, clip, graph)
                    if placed is not None:
                        return placed
                listener = ClipListener(clip.label, self.say, self.warn)
                client_id = uuid.uuid4().hex
                ws, note = jobs.open_events(client, client_id)
                if note:
                    listener.warn(note)
                prompt_id = jobs.submit(client, graph, client_id, listener.warn)
                clip.prompt_ids[stage] = prompt_id
                self.say(f"{clip.label}stage {stage} queued on {server} (prompt {prompt_id})")
                outcome = jobs.wait_for_prompt(client, prompt_id, listener, deadline, ws)
                return self.judge(stage, client, clip, graph, outcome, prompt_id)
        except jobs.Rejected as exc:
            return Result("failed", EXIT_INVALID, f"stage {stage} on {server} was refused: {exc}")
        except Unreachable as exc:
            return Result("retry", EXIT_UNREACHABLE, str(exc), gone=True)
        except TimedOut as exc:
            return Result("failed", EXIT_TIMEOUT, f"stage {stage} on {server}: {exc}")
        except ComfyError as exc:
            return Result("failed", exc.exit_code, f"stage {stage} on {server}: {exc}")
        except OSError as exc:
            return Result("failed", EXIT_FAILED, f"stage {stage}: cannot write the draft locally: {exc}")

    def judge(self, stage: int, client: ComfyClient, clip: Clip, graph: dict, outcome: jobs.Outcome,
              prompt_id: str) -> Result:
        where = f"stage {stage} on {client.server} (prompt {prompt_id})"
        if outcome.state == "unreachable":
            return Result("retry", EXIT_UNREACHABLE, f"{where}: {outcome.note}", gone=True)
        if outcome.state == "lost":
            return Result("retry", EXIT_FAILED, f"{where}: {outcome.note}")
        if outcome.state == "timeout":
            return Result("failed", EXIT_TIMEOUT, f"{where}: --timeout ran out: {outcome.note}")
        if outcome.state == "refused":
            return Result("failed", EXIT_FAILED, f"{where}: {outcome.note}")
        timing = jobs.timing_of(outcome.entry, outcome.events)
        clip.server_s[stage] = timing.seconds
        if outcome.state != "success":
            err = timing.error or {}
            return Result("failed", EXIT_FAILED, f"{where}: execution {outcome.state}: " + printable(
                f"node {err.get('node_id')} ({err.get('node_type')}): {err.get('exception_type', '')}: "
                f"{str(err.get('exception_message', '')).strip()}", 2000))
        if stage == 2:
            return Result("done", self.finish(client, clip, graph, outcome, prompt_id))
        outputs = outcome.entry.get("outputs") if isinstance(outcome.entry, dict) else None
        checks = report_checks(outputs if isinstance(outputs, dict) else {})
        for check in checks:
            (self.say if check.status in (PASS, INFO) else self.warn)(f"{clip.label}{check.line()}")
        if any(check.status == FAIL for check in checks):
            return Result("failed", EXIT_FAILED, f"{where}: a report of the stage-1 graph FAILed (above)")
        return self.take_draft(client, clip, outcome.entry, deadline_left=client.deadline.remaining())

    def take_draft(self, client: ComfyClient, clip: Clip, entry: dict, deadline_left: float | None) -> Result:
        """The stage-1 job's draft: in the shared folder, or fetched through /view into --out/drafts."""
        files, refused = jobs.output_files(entry)
        drafts = [f for f in files if f.node_id == self.options.draft_id]
        if len(drafts) != 1:
            why = f"; refused: {'; '.join(refused)}" if refused else ""
            return Result("failed", EXIT_FAILED, f"stage 1 finished but node {self.options.draft_id} (H3KitSaveDraft) "
                          f"listed {len(drafts)} files, not one{why}")
        item = drafts[0]
        shared = self.options.shared
        if shared is not None:
            problem = regular_file_problem(shared / item.filename)
            if problem is None:
                clip.shared_name = item.filename
                self.say(f"{clip.label}stage 1 done on {client.server}: draft {item.filename} in the shared folder")
                return Result("done")
            self.warn(f"{clip.label}WARN  the draft {shared / item.filename} {problem}: the shared folder is not this "
                      "server's output/h3kit_drafts; moving the draft over HTTP instead")
        path = jobs.fetch_output(client, item, self.options.out / "drafts", MAX_DRAFT_BYTES, deadline_left)
        clip.draft = path
        self.say(f"{clip.label}stage 1 done on {client.server}: draft {path} ({path.stat().st_size / 2**20:.2f} MiB)")
        return Result("done")

    def place_draft(self, client: ComfyClient, clip: Clip, graph: dict) -> Result | None:
        """Point the stage-2 graph's H3KitLoadDraft at the clip's draft on this server (uploading it when it is not in
        the shared folder); a Result when that failed."""
        node = graph[self.options.draft_id]["inputs"]
        if clip.shared_name is not None:
            node[DRAFT_INPUT] = f"{DRAFT_FOLDER}/{clip.shared_name}"
            return None
        assert clip.draft is not None  # stage 1 set one of the two
        try:
            saved = client.upload(clip.draft, "input", DRAFT_FOLDER)
        except Unreachable as exc:
            if not _answers(client.server):
                raise
            return Result("failed", EXIT_FAILED, f"{client.server} closed the upload of {clip.draft} "
                          f"({clip.draft.stat().st_size:,} bytes) but still answers: it refused the file ({exc}); "
                          "start it with a larger --max-upload-size, or give --shared-drafts")
        except HTTPStatusError as exc:
            advice = "start it with a larger --max-upload-size, or give --shared-drafts" if exc.status == 413 else (
                "check the server log")
            return Result("failed", EXIT_FAILED, f"{client.server} refused the upload of {clip.draft}: {exc}; {advice}")
        name, sub = saved.get("name"), saved.get("subfolder", "")
        if not isinstance(name, str) or not name or not isinstance(sub, str) or not printable(name) == name:
            raise BadResponse(f"the server's upload answer has no usable file name: {printable(saved, 200)}")
        node[DRAFT_INPUT] = f"{sub}/{name}" if sub else name
        return None

    # -- the whole batch
    def run(self) -> int:
        threads = [threading.Thread(target=self.worker, args=(stage, server), daemon=True,
                                    name=f"stage{stage} {server}")
                   for stage in STAGES for server in self.stages[stage].servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for clip in self.clips:
            if clip.code is None:  # a worker died without settling it: never a silent success
                self._end(clip, EXIT_FAILED, f"the clip ended without a result (state {clip.state})")
        return worst_exit([clip.code for clip in self.clips if clip.code is not None])

    def summary(self) -> dict[str, Any]:
        """Clips done and failed, wall time, clips/hour, the steady-state time per clip and each stage's times."""
        ends = sorted(c.finished_at for c in self.clips if c.code == EXIT_OK and c.finished_at is not None)
        wall = (max((c.finished_at or 0.0) for c in self.clips) - self.started) if self.clips else 0.0
        done = sum(1 for c in self.clips if c.code == EXIT_OK)
        gaps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
        stages = {}
        for stage in STAGES:
            walls = [c.wall_s[stage] for c in self.clips if stage in c.wall_s]
            runs = [c.server_s[stage] for c in self.clips if c.server_s.get(stage) is not None]
            stages[f"stage{stage}"] = {
                "servers": self.stages[stage].servers, "jobs": len(walls),
                "mean_wall_s": round(statistics.fmean(walls), 3) if walls else None,
                "mean_server_s": round(statistics.fmean(runs), 3) if runs else None}
        return {
            "clips": len(self.clips), "done": done, "failed": len(self.clips) - done,
            "wall_s": round(wall, 3), "clips_per_hour": round(done / wall * 3600, 2) if wall > 0 and done else 0.0,
            "steady_s_per_clip": round(statistics.median(gaps), 3) if gaps else None,
            "servers_gone": sorted(self.dead), **stages,
            "per_clip": [{"clip": c.index + 1, "seed": c.seed, "prompt": (c.prompt or "")[:80] or None, "state": c.state,
                          "code": c.code, "note": c.note[:500], "servers": {str(k): v for k, v in c.servers.items()},
                          "wall_s": {str(k): round(v, 3) for k, v in c.wall_s.items()},
                          "server_s": {str(k): v for k, v in c.server_s.items()},
                          "prompt_ids": {str(k): v for k, v in c.prompt_ids.items()},
                          "draft": str(c.draft) if c.draft else c.shared_name} for c in self.clips],
        }


def _secs(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f} s"


def _answers(server: str) -> bool:
    """True when `server` answers /system_stats within PROBE_S."""
    try:
        with ComfyClient(server, connect_timeout=PROBE_S, read_timeout=PROBE_S, deadline=Deadline(PROBE_S)) as client:
            client.get_json("/system_stats", cap=MAX_JSON_BYTES)
        return True
    except ComfyError:
        return False
