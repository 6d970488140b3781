"""`run WORKFLOW --stage1-server A --stage2-server B`: the two-stage graph split at the handoff (checks/graph_split.py)
and pipelined over a batch of clips: stage 1 of clip k+1 on A while stage 2 of clip k on B (adapters/comfy_pipeline.py
schedules; this module reads the options, plans the clips, validates each stage against its servers and verifies each
finished clip exactly as `run` does). A batch is every prompt (--prompt, --prompts FILE) times every seed (--seed N
with --runs K, --seed A-B, --seed random).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

from ..adapters import comfy_jobs as jobs
from ..adapters.comfy_client import BadServerURL, ComfyClient, ComfyError, Deadline, normalise_server
from ..adapters.comfy_pipeline import Clip, Options, Pipeline, Stage
from ..adapters.files import is_folder, open_regular, os_reason, write_new
from ..adapters.server_probe import read_schemas, server_version_check
from ..checks.facts import EXIT_INVALID, EXIT_UNREACHABLE
from ..checks.graph_edit import MAX_BATCH, GraphEditError, apply_sets, job_seeds, prompt_target, seed_range
from ..checks.graph_split import DRAFT_FOLDER, DRAFT_INPUT, SplitError, split_graph
from ..checks.problem import ERROR, printable
from ..checks.verdict import judge
from . import console
from . import schemas as schema_src

MAX_PROMPTS_FILE_BYTES = 4 * 2**20  # --prompts FILE: thousands of prompts of a few KiB each


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "two stages on two servers (pipelined over a batch; instead of --server)",
        "the workflow is split at the handoff: stage 1 (H3 draft, handoff, LTX encode) ends in H3KitSaveDraft, stage 2 "
        "starts at H3KitLoadDraft; the draft moves by /view and /upload/image unless --shared-drafts is given")
    group.add_argument("--stage1-server", action="append", default=[], metavar="URL",
                       help="a server for stage 1 (H3); repeat for several")
    group.add_argument("--stage2-server", action="append", default=[], metavar="URL",
                       help="a server for stage 2 (LTX refine); repeat for several (a server may serve both stages)")
    group.add_argument("--shared-drafts", type=Path, metavar="DIR",
                       help=f"a folder that is output/{DRAFT_FOLDER} on every stage-1 server and input/{DRAFT_FOLDER} "
                            "on every stage-2 server (a mount or a link): drafts are not sent over HTTP")
    group.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                       help="a prompt for the H3 draft; repeat for several (each runs with every seed)")
    group.add_argument("--prompts", type=Path, metavar="FILE",
                       help="prompts, one per line ('#' lines and blank lines skipped), or a JSON list of strings")
    group.add_argument("--prompt-input", metavar="NODE.INPUT",
                       help="the input the prompts replace (default: the graph's one text input named 'prompt')")


def wanted(args: argparse.Namespace) -> bool:
    return bool(args.stage1_server or args.stage2_server)


def say(text: str) -> None:
    console.result(text)


def warn(text: str) -> None:
    console.problem(text)


def read_prompts(args: argparse.Namespace) -> list[str]:
    prompts = list(args.prompt)
    if args.prompts is not None:
        try:
            with open_regular(args.prompts) as handle:
                raw = handle.read(MAX_PROMPTS_FILE_BYTES + 1)
        except OSError as exc:
            raise GraphEditError(f"--prompts {printable(args.prompts)}: it {os_reason(exc)}") from None
        if len(raw) > MAX_PROMPTS_FILE_BYTES:
            raise GraphEditError(f"--prompts {printable(args.prompts)}: over {MAX_PROMPTS_FILE_BYTES:,} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GraphEditError(f"--prompts {printable(args.prompts)}: not UTF-8 text") from None
        prompts += _prompt_list(text, args.prompts)
    if any(not p.strip() for p in prompts):
        raise GraphEditError("--prompt: an empty prompt renders nothing useful; give text")
    return prompts


def _prompt_list(text: str, path: Path) -> list[str]:
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise GraphEditError(f"--prompts {printable(path)}: not a JSON list ({exc})") from None
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise GraphEditError(f"--prompts {printable(path)}: a JSON file must be a list of strings")
        return items
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def stage2_graphs(graph: dict, servers: list[str], draft_id: str, timeout: float | None) -> dict[str, dict]:
    """Stage 2 validated and adapted per server as `run` validates a graph (checks.verdict.judge), except
    H3KitLoadDraft's file: each clip's draft is uploaded just before its job, and the node's own check runs then."""
    graphs = {}
    for server in servers:
        with ComfyClient(server, deadline=Deadline(timeout)) as client:
            info = read_schemas(client)
            console.check(server_version_check(client, graph, info), f"{server}: ")
        verdict = judge(copy.deepcopy(graph), info, schema_src.providing_pack, schema_src.own_node_ids())
        for line in verdict.change_checks():
            console.check(line, f"{server}: ")
        problems = [p for p in verdict.problems if not (str(p.node_id) == draft_id and p.input == DRAFT_INPUT)]
        for p in problems:
            warn(f"{server}: {p}")
        if any(p.severity == ERROR for p in problems):
            raise jobs.Rejected(f"stage 2 of the workflow does not validate against {server}; nothing was submitted")
        graphs[server] = verdict.graph
    return graphs


def plan(args: argparse.Namespace, runmod: ModuleType) -> tuple[list[Clip], dict[int, Stage], Options, dict]:
    """The clips, each stage's graphs per server (validated there), the options and the whole graph (--set applied);
    GraphEditError, SplitError, BadServerURL or jobs.Rejected when something is refused before any work."""
    if args.server:
        raise GraphEditError("give --server (one graph per job) or --stage1-server and --stage2-server (the split "
                             "graph pipelined), not both")
    if not args.stage1_server or not args.stage2_server:
        raise GraphEditError("give at least one --stage1-server and one --stage2-server")
    if args.cold:
        raise GraphEditError("--cold unloads the models before every job: in a pipeline that is the swap it avoids")
    if args.shared_drafts is not None and not is_folder(args.shared_drafts):
        raise GraphEditError(f"--shared-drafts {printable(args.shared_drafts)} is not a folder")
    servers = {n: list(dict.fromkeys(normalise_server(s) for s in urls))
               for n, urls in ((1, args.stage1_server), (2, args.stage2_server))}
    graph = runmod.read_workflow(args.workflow)
    apply_sets(graph, args.set)
    split = split_graph(graph)
    prompts = read_prompts(args)
    target = prompt_target(split.stage1, args.prompt_input) if prompts else None
    runs = args.runs or 1
    if runs < 1:
        raise GraphEditError(f"--runs {runs}: give at least 1")
    seeds = seed_range(args.seed, graph)
    if seeds is not None and args.runs is not None and args.runs != len(seeds):
        raise GraphEditError(f"--runs {args.runs} with --seed {printable(args.seed, 40)} ({len(seeds)} seeds): give one "
                             "of them")
    seeds = seeds or job_seeds(graph, args.seed, runs, random.Random())
    pairs = [(p, s) for p in (prompts or [None]) for s in seeds]
    if len(pairs) > MAX_BATCH:
        raise GraphEditError(f"{len(prompts or [None])} prompt(s) x {len(seeds)} seed(s) = {len(pairs):,} clips; a batch "
                             f"has at most {MAX_BATCH:,}")
    stages = {1: Stage(1, servers[1], runmod.server_graphs(split.stage1, servers[1], args.upload, args.timeout)),
              2: Stage(2, servers[2], stage2_graphs(split.stage2, servers[2], split.draft_id, args.timeout))}
    total = len(pairs)
    clips = [Clip(i, _label(i, total, seed, prompt_no, len(prompts)), seed, prompt)
             for i, ((prompt, seed), prompt_no) in enumerate(zip(pairs, (k // len(seeds) for k in range(total)),
                                                                 strict=True))]
    return clips, stages, Options(split.draft_id, Path(args.out), args.timeout, args.shared_drafts, target), graph


def _label(index: int, total: int, seed: int | None, prompt_no: int, prompts: int) -> str:
    parts = [f"clip {index + 1}/{total}"] + ([f"prompt {prompt_no + 1}"] if prompts > 1 else []) + (
        [f"seed {seed}"] if seed is not None else [])
    return f"[{' '.join(parts)}] "


def run(args: argparse.Namespace, runmod: ModuleType) -> int:
    """`runmod`: scripts/run.py, which calls this (its read_workflow, server_graphs, report_outcome and Job are reused
    as they are; this module cannot import the module that imports it)."""
    try:
        clips, stages, options, whole = plan(args, runmod)
    except (GraphEditError, SplitError, BadServerURL, jobs.Rejected) as exc:
        warn(f"REJECTED: {exc}")
        return EXIT_INVALID
    except ComfyError as exc:
        warn(f"{'UNREACHABLE' if exc.exit_code == EXIT_UNREACHABLE else 'FAIL'}: {exc}")
        return exc.exit_code
    say(f"pipeline: {len(clips)} clip(s); stage 1 on {', '.join(stages[1].servers)}; stage 2 on "
        f"{', '.join(stages[2].servers)}; drafts {'in ' + str(options.shared) if options.shared else 'over HTTP'}")

    def finish(client: ComfyClient, clip: Clip, graph: dict, outcome: jobs.Outcome, prompt_id: str) -> int:
        job = runmod.Job(client.server, graph, clip.seed, clip.label, expect_from=whole)  # sizes: the whole graph's
        return runmod.report_outcome(client, job, outcome, prompt_id, args)

    pipeline = Pipeline(clips, stages, options, finish, say, warn)
    code = pipeline.run()
    report(pipeline.summary(), Path(args.out))
    return code


def report(summary: dict, out: Path) -> None:
    """The summary lines, and the whole summary as JSON in --out (a new file: never overwrites)."""
    steady = summary["steady_s_per_clip"]
    line = (f"pipeline: {summary['done']} of {summary['clips']} clip(s) done, {summary['failed']} failed, in "
            f"{summary['wall_s']:.1f} s: {summary['clips_per_hour']:.1f} clips/hour"
            + (f" (steady state {steady:.1f} s per clip)" if steady is not None else ""))
    (say if not summary["failed"] else warn)(line)
    for stage in ("stage1", "stage2"):
        info = summary[stage]
        say(f"  {stage}: {info['jobs']} job(s) on {', '.join(info['servers'])}; mean {info['mean_wall_s']} s per job "
            f"(server time {info['mean_server_s']} s)")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    try:
        path = write_new(out, f"pipeline-{stamp}.json", [json.dumps(summary, indent=1).encode()])
    except OSError as exc:
        warn(f"WARN  the summary could not be written to {out}: {exc}")
        return
    say(f"  summary: {path}")
