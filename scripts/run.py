"""Run an API-format workflow on ComfyUI over HTTP: validate, submit, follow, download, verify, time.

Validates the graph against the server's /object_info before submitting, follows execution over the
websocket (falls back to /history polling), never gives up while the server still holds the job (F26),
downloads every output through /view and checks each video: frames decode, not black, not one solid
colour; the audio stream is there and not silent (F21); frame count and size are what the graph asks
for (F19, F20). Prints execution time = execution_success - execution_start from /history, the number
of cached nodes, and warns when the run was a cache hit (F17). Several --server: round-robin fan-out of
the same workflow with different seeds, one progress bar per job; the worst job's exit status wins.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..adapters import comfy_jobs as jobs
from ..adapters.comfy_client import (
    MAX_DOWNLOAD_BYTES,
    MAX_TRANSFER_S,
    BadServerURL,
    ComfyClient,
    ComfyError,
    Deadline,
    TimedOut,
    TooLarge,
    normalise_server,
)
from ..adapters.crash_log import unexpected_error
from ..adapters.files import sniff_file
from ..adapters.server_probe import read_schemas, server_version_check
from ..adapters.workflow_file import load_graph_file
from ..checks.expect import expected_video
from ..checks.facts import (
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    pack_version,
    worst_exit,
)
from ..checks.graph_edit import (
    GraphEditError,
    apply_seed,
    apply_sets,
    check_upload_kind,
    job_seeds,
    no_seed_advice,
    parse_upload,
    seed_inputs,
    upload_input_name,
)
from ..checks.problem import FAIL, PASS, WARN, Check, printable
from ..checks.reports import report_checks
from ..checks.verdict import REFUSED, judge
from . import console, run_pipeline
from . import schemas as schema_src
from .options import BYTES, COUNT, SECONDS

VIDEO_SUFFIXES = {".mp4", ".webm", ".mkv", ".mov", ".avi"}
DOWNLOAD_TIMEOUT = "download timeout"
# Core nodes that write a file on every successful run: one that lists none is a lost output.
FILE_SAVERS = {"SaveVideo", "SaveImage", "SaveAudio", "SaveAnimatedWEBP", "SaveAnimatedPNG", "SaveWEBM"}
EXIT_STATUSES = {
    EXIT_OK: "ok: the job finished and its outputs passed verification",
    EXIT_FAILED: "execution error, lost or crashed job, or an output failed verification",
    EXIT_INVALID: "refused, nothing submitted: bad arguments, an unreadable workflow, or a graph the server's "
                  "validation (or H3Kit's) rejects",
    EXIT_TIMEOUT: "--timeout ran out (the job may still be running: the message says so)",
    EXIT_UNREACHABLE: "server unreachable",
}


def say(label: str, text: str) -> None:
    """A result line (stdout)."""
    console.result(f"{label}{text}")


def warn(label: str, text: str) -> None:
    """An error or warning line (stderr)."""
    console.problem(f"{label}{text}")


# --- one job ------------------------------------------------------------------------------------

@dataclass
class Job:
    server: str
    graph: dict
    seed: int | None
    label: str = ""
    position: int = 0
    expect_from: dict | None = None  # the graph whose image chain says what the video must be (a split stage's whole)


def cache_checks(graph: dict, timing: jobs.Timing) -> list[Check]:
    """The time and cached-node count; a WARN when everything came from the cache (F17), with the advice that
    works for this graph: a new seed where it has one, else another input value."""
    total = sum(1 for n in graph.values() if isinstance(n, dict))
    shown = f"{timing.seconds:.3f} s" if timing.seconds is not None else "unknown (no start/success timestamps)"
    checks = [Check(PASS, "timing", f"execution time {shown} (execution_success - execution_start, from /history); "
                    f"cached nodes: {len(timing.cached)} of {total}")]
    if total and len(set(timing.cached)) >= total:
        checks.append(Check(WARN, "cache hit", f"all {total} nodes came from ComfyUI's cache: nothing was rendered and "
                            "the time above is not a render time (F17)",
                            ("change the seed (--seed random) or an input" if seed_inputs(graph)
                             else no_seed_advice(graph)) + "; compare runs only when cached counts match"))
    return checks


def run_job(job: Job, args: argparse.Namespace) -> int:
    """Submit, follow, fetch and verify one job; the whole job (downloads included) is under --timeout."""
    deadline = Deadline(args.timeout)
    with ComfyClient(job.server, deadline=deadline) as client:
        if args.cold:
            status, _ = client.post_json("/free", {"unload_models": True, "free_memory": True})
            say(job.label, f"POST /free -> HTTP {status} (models unload before the next prompt)")
        changed = apply_seed(job.graph, job.seed)
        if changed:
            say(job.label, f"seed {job.seed} -> {printable(', '.join(changed), 500)}")
        client_id = uuid.uuid4().hex
        ws, note = jobs.open_events(client, client_id)
        if note:
            warn(job.label, f"WARN  {note}")
        progress = jobs.ProgressBar(job.graph, job.label, job.position, args.quiet, say, warn)
        try:
            prompt_id = jobs.submit(client, job.graph, client_id, lambda text: warn(job.label, f"WARN  {text}"))
            progress.note(f"queued prompt {prompt_id} on {job.server}")
            outcome = jobs.wait_for_prompt(client, prompt_id, progress, deadline, ws)
            progress.finished(outcome.state == "success")
        finally:
            progress.close()
            if ws is not None:
                ws.close()
        return report_outcome(client, job, outcome, prompt_id, args)


def report_outcome(client: ComfyClient, job: Job, outcome: jobs.Outcome, prompt_id: str,
                   args: argparse.Namespace) -> int:
    label = job.label
    if outcome.state == "timeout":
        warn(label, f"TIMEOUT after {args.timeout} s: {outcome.note}")
        return EXIT_TIMEOUT
    if outcome.state == "unreachable":
        warn(label, f"UNREACHABLE: {outcome.note}; prompt {prompt_id} may still finish: see /history/{prompt_id}")
        return EXIT_UNREACHABLE
    if outcome.state in ("lost", "refused"):
        warn(label, f"FAIL  prompt {prompt_id}: {outcome.note}")
        return EXIT_FAILED
    timing = jobs.timing_of(outcome.entry, outcome.events)
    if outcome.state != "success":
        err = timing.error or {}
        warn(label, f"FAIL  execution {outcome.state}: " + printable(
            f"node {err.get('node_id')} ({err.get('node_type')}): {err.get('exception_type', '')}: "
            f"{str(err.get('exception_message', '')).strip()}", 2000))
        return EXIT_FAILED
    outputs = outcome.entry.get("outputs") if isinstance(outcome.entry, dict) else None
    checks = (cache_checks(job.graph, timing) + report_checks(outputs if isinstance(outputs, dict) else {})
              + fetch_and_verify(client, job, outcome.entry, prompt_id, args))
    for check in checks:
        console.check(check, label)
    if any(c.name == DOWNLOAD_TIMEOUT for c in checks):
        return EXIT_TIMEOUT  # --timeout covers the downloads too: the same exit as a job that ran out of time
    return EXIT_FAILED if any(c.status == FAIL for c in checks) else EXIT_OK


def fetch_and_verify(client: ComfyClient, job: Job, entry: dict, prompt_id: str, args: argparse.Namespace) -> list[Check]:
    """Download every listed output into --out/<prompt id>/ and verify the videos: at most MAX_JOB_FILES files and
    --max-job-download bytes in all, within --timeout (else MAX_TRANSFER_S for the downloads)."""
    files, refused = jobs.output_files(entry)
    checks = [Check(FAIL, "download", f"the server listed an output we cannot fetch safely: {item}",
                    "check the server's output folder by hand") for item in refused]
    listed = {item.node_id for item in files}
    for nid, node in job.graph.items():
        if isinstance(node, dict) and node.get("class_type") in FILE_SAVERS and str(nid) not in listed:
            checks.append(Check(FAIL, "download", f"node {nid} ({node['class_type']}) finished but the server lists "
                                "no file from it", "check the server log and its output folder", node_id=str(nid)))
    if not files and not refused and not any(c.status == FAIL for c in checks):
        checks.append(Check(WARN, "download", "the job finished but listed no output files",
                            "add a SaveVideo/SaveImage node to get a file back"))
    if len(files) > jobs.MAX_JOB_FILES:
        checks.append(Check(FAIL, "download", f"the server listed {len(files):,} output files; {jobs.MAX_JOB_FILES:,} "
                            "are fetched per job", "fetch the rest from the server's output folder"))
    folder = Path(args.out) / prompt_id  # prompt_id passed safe_id: a plain name, never a path
    transfer, budget = Deadline(MAX_TRANSFER_S), args.max_job_download
    for done, item in enumerate(files[:jobs.MAX_JOB_FILES]):
        if budget <= 0 or transfer.expired():
            why = (f"the job's files reached the total download limit of {args.max_job_download:,} bytes "
                   "(--max-job-download)" if budget <= 0 else f"the downloads took the {MAX_TRANSFER_S:.0f} s allowed")
            checks.append(Check(FAIL, DOWNLOAD_TIMEOUT if budget > 0 else "download",
                                f"{len(files[:jobs.MAX_JOB_FILES]) - done} file(s) not fetched: {why}",
                                "fetch them from the server's output folder, or raise the limit"))
            break
        cap = min(args.max_download, budget)
        try:
            path = jobs.fetch_output(client, item, folder, cap, transfer.remaining())
        except TimedOut as exc:
            checks.append(Check(FAIL, DOWNLOAD_TIMEOUT, f"{printable(item.filename, 100)}: {exc}",
                                "raise --timeout, or fetch the file from the server's output folder"))
            break  # the time is spent: the other files would time out too
        except TooLarge as exc:
            whose = "" if cap == args.max_download else (
                f" (what is left of the job's total download limit of {args.max_job_download:,} bytes)")
            checks.append(Check(FAIL, "download", f"{printable(item.filename, 100)}: {exc}{whose}",
                                "fetch it from the server's output folder, or raise --max-download / --max-job-download"))
            budget = 0 if whose else budget
            continue
        except ComfyError as exc:
            checks.append(Check(FAIL, "download", f"{printable(item.filename, 100)}: {exc}",
                                "fetch it from the server's output folder"))
            continue
        except OSError as exc:
            checks.append(Check(FAIL, "download", f"{printable(item.filename, 100)}: cannot write: {exc}",
                                "check --out: free space and permissions"))
            continue
        budget -= path.stat().st_size
        checks.append(Check(PASS, "download", f"node {item.node_id} -> {path}"))
        if path.suffix.lower() in VIDEO_SUFFIXES:
            from ..kernels.mux import verify_video  # torch and PyAV load only when there is a video to verify

            left = client.deadline.remaining()
            expect = expected_video(job.expect_from or job.graph, item.node_id)
            checks += verify_video(path, expect, None if left is None else max(left, 1))
    return checks


# --- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("workflow", type=Path, help="API-format workflow JSON")
    parser.add_argument("--server", action="append", default=[],
                        help="ComfyUI URL, e.g. http://127.0.0.1:8188; repeat for round-robin fan-out")
    parser.add_argument("--set", action="append", default=[], metavar="NODE.INPUT=VALUE",
                        help="override an input (NODE = node id or _meta title; VALUE parsed as JSON when it can be)")
    parser.add_argument("--seed", help="N or 'random': set every seed/noise_seed input (job i gets N+i)")
    parser.add_argument("--upload", action="append", default=[], metavar="NODE=PATH",
                        help="upload a file to the server's input folder and point the loader node at it")
    parser.add_argument("--out", default="h3kit-out", help="download folder (a subfolder per prompt id)")
    parser.add_argument("--cold", action="store_true", help="POST /free (unload models, free memory) before each run")
    parser.add_argument("--timeout", type=SECONDS, default=None,
                        help="seconds for each job, downloads included (default: as long as the server holds it)")
    parser.add_argument("--runs", type=COUNT, default=None,
                        help="number of jobs (default: one per --server); jobs go round-robin over the servers")
    parser.add_argument("--max-download", type=BYTES, default=MAX_DOWNLOAD_BYTES, metavar="BYTES",
                        help="refuse an output file larger than this (default %(default)s)")
    parser.add_argument("--max-job-download", type=BYTES, default=jobs.MAX_JOB_DOWNLOAD_BYTES, metavar="BYTES",
                        help="fetch at most this many bytes of output files per job (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars (they are off anyway when not a TTY)")
    run_pipeline.add_arguments(parser)  # --stage1-server/--stage2-server: the split graph pipelined (issue 32)


def read_workflow(path: Path) -> dict:
    graph, problem = load_graph_file(path)
    if problem is not None:
        raise jobs.Rejected(problem.message)
    if not isinstance(graph, dict):
        raise jobs.Rejected(f"{path} is not an API-format graph (a JSON object of nodes)")
    return graph


def server_graphs(graph: dict, servers: list[str], uploads: list[str], timeout: float | None) -> dict[str, dict]:
    """One copy of the graph per server, with that server's names for the uploaded files, adapted to that server's
    input layout and validated against its /object_info (checks.verdict.judge; read again after uploading, so its
    file lists include the new files)."""
    graphs = {}
    for server in servers:
        copy = json.loads(json.dumps(graph))
        deadline = Deadline(timeout)  # the server's answers and every check of them (TimedOut: exit 3)
        with ComfyClient(server, deadline=deadline) as client:
            info = read_schemas(client)
            if uploads:
                apply_uploads(client, copy, uploads, info)
                info = read_schemas(client)
            console.check(server_version_check(client, copy, info), f"{server}: ")
        # the verdict doctor, validate and the editor give (checks/verdict.py): the graph in this host's input
        # layout (SaveVideo's three; each move an INFO line), validated and ruled on as it will be queued
        with deadline.applied():
            verdict = judge(copy, info, schema_src.providing_pack, schema_src.own_node_ids())
        for line in verdict.change_checks():
            console.check(line, f"{server}: ")
        for p in verdict.problems:
            warn("", f"{server}: {p}")
        if verdict.status == REFUSED:
            raise jobs.Rejected(f"the workflow does not validate against {server}; nothing was submitted")
        graphs[server] = verdict.graph
    return graphs


def apply_uploads(client: ComfyClient, graph: dict, uploads: list[str], object_info: dict) -> None:
    for item in uploads:
        nid, path = parse_upload(item, graph)
        if not Path(path).is_file():
            raise GraphEditError(f"--upload '{item}': {path} is not a file")
        class_type = str(graph[nid].get("class_type", ""))
        check_upload_kind(item, class_type, path, sniff_file(path))
        name = upload_input_name(object_info, class_type)
        if name is None:
            raise GraphEditError(f"--upload '{item}': node {nid} ({graph[nid].get('class_type')}) has no file input")
        saved = client.upload(Path(path))
        value = saved.get("name")
        if not isinstance(value, str) or not value:
            raise jobs.BadResponse(f"the server's upload answer has no file name: {printable(saved, 200)}")
        sub = saved.get("subfolder")
        value = f"{sub}/{value}" if isinstance(sub, str) and sub else value
        graph[nid].setdefault("inputs", {})[name] = value
        say("", printable(f"uploaded {path} -> input/{printable(value, 200)} (node {nid}.{name})"))


def run(args: argparse.Namespace) -> int:
    if run_pipeline.wanted(args):
        return run_pipeline.run(args, sys.modules[__name__])
    try:
        if not args.server:
            raise GraphEditError("give --server URL (or --stage1-server and --stage2-server)")
        servers = list(dict.fromkeys(normalise_server(s) for s in args.server))
        runs = args.runs or len(args.server)
        if runs < 1:
            raise GraphEditError(f"--runs {runs}: give at least 1")
        graph = read_workflow(args.workflow)
        apply_sets(graph, args.set)
        seeds = job_seeds(graph, args.seed, runs, random.Random())
        if runs > 1 and not seed_inputs(graph):
            warn("", f"WARN  {runs} jobs of the same graph: every job after the first will come from ComfyUI's "
                 f"cache; {no_seed_advice(graph)}")
        graphs = server_graphs(graph, servers, args.upload, args.timeout)
    except (GraphEditError, BadServerURL, jobs.Rejected) as exc:
        warn("", f"REJECTED: {printable(exc)}")
        return EXIT_INVALID
    except ComfyError as exc:
        warn("", f"{'UNREACHABLE' if exc.exit_code == EXIT_UNREACHABLE else 'FAIL'}: {printable(exc)}")
        return exc.exit_code
    order = [normalise_server(s) for s in args.server]
    plan = [Job(order[i % len(order)], json.loads(json.dumps(graphs[order[i % len(order)]])), seeds[i],
                f"[job {i + 1}/{runs}] " if runs > 1 else "", i) for i in range(runs)]
    return run_jobs(plan, args)


def run_one_guarded(job: Job, args: argparse.Namespace) -> int:
    """One job's exit code; whatever goes wrong inside it becomes a code, never a silent 0."""
    try:
        return run_job(job, args)
    except jobs.Rejected as exc:
        warn(job.label, f"REJECTED: {exc}")
        return EXIT_INVALID
    except ComfyError as exc:
        warn(job.label, f"{'UNREACHABLE' if exc.exit_code == EXIT_UNREACHABLE else 'FAIL'}: {printable(exc)}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - a bug or an answer we did not foresee: the job failed, loudly
        line, _ = unexpected_error("the job", exc, pack_version())
        warn(job.label, f"FAIL  the job crashed: {line}")
        return EXIT_FAILED


def run_jobs(plan: list[Job], args: argparse.Namespace) -> int:
    """Each server runs its jobs in order; servers run in parallel. Exit with the worst job's status; a job
    that left no status (its thread died) counts as a failure."""
    by_server: dict[str, list[Job]] = {}
    for job in plan:
        by_server.setdefault(job.server, []).append(job)
    codes: dict[int, int] = {}
    lock = threading.Lock()

    def worker(server_jobs: list[Job]) -> None:
        for job in server_jobs:
            code = run_one_guarded(job, args)
            with lock:
                codes[job.position] = code

    threads = [threading.Thread(target=worker, args=(js,), daemon=True) for js in by_server.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    missing = [job.label or "the job" for job in plan if job.position not in codes]
    for label in missing:
        warn(label, "FAIL  the job ended without a result")
    return worst_exit([*codes.values(), *([EXIT_FAILED] * len(missing))])

