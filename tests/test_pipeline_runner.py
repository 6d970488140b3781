"""Issue 32, tier (a): the pipelined runner (adapters/comfy_pipeline.py, `run --stage1-server --stage2-server`)
against working fake ComfyUI servers (tests/fake_pipeline.py): stages overlap, the draft reaches stage 2 byte for byte,
a vanished server costs only its clip, graph failures are reported and not retried, nothing is lost."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from fake_pipeline import WorkingComfy, default_render, draft_bytes
from h3kit.adapters import comfy_jobs as jobs
from h3kit.adapters import comfy_pipeline as cp
from h3kit.checks.facts import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE
from h3kit.checks.graph_edit import apply_seed
from h3kit.checks.graph_split import split_graph
from h3kit.scripts import schemas as schema_src
from h3kit.scripts.cli import main
from test_run import make_video, moving_frames, tone

API = Path(__file__).resolve().parent.parent / "workflows" / "api"
WHOLE = json.loads((API / "h3_ltx_two_stage_cached_cond.json").read_text())
SPLIT = split_graph(WHOLE)


@pytest.fixture(autouse=True)
def quick_follow(monkeypatch):
    """The follower's waits, shortened: polling, the queue question and the silence that means a server is gone."""
    monkeypatch.setattr(jobs, "POLL_INTERVAL_S", 0.05)
    monkeypatch.setattr(jobs, "QUEUE_CHECK_S", 0.3)
    monkeypatch.setattr(jobs, "UNREACHABLE_GRACE_S", 1.0)
    monkeypatch.setattr(cp, "WAIT_STEP_S", 0.05)


@pytest.fixture
def servers():
    made: list[WorkingComfy] = []

    def make(delay: float = 0.3, name: str = "s") -> WorkingComfy:
        server = WorkingComfy({}, delay, f"{name}{len(made)}")
        server.refuse = lambda graph, s=server: missing_draft(s, graph)
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def missing_draft(server: WorkingComfy, graph: dict) -> str | None:
    """/prompt refuses a stage-2 graph whose draft is not in the server's input folder (H3KitLoadDraft's check)."""
    for node in graph.values():
        if node["class_type"] == "H3KitLoadDraft":
            sub, _, name = node["inputs"]["draft"].rpartition("/")
            if ("input", sub, name) not in server.files:
                return f"H3KitLoadDraft: {node['inputs']['draft']} is not in the input folder"
    return None


def pipeline(tmp_path: Path, stage1: list[WorkingComfy], stage2: list[WorkingComfy], seeds: list[int],
             prompts: list[str | None] | None = None, shared: Path | None = None) -> tuple[cp.Pipeline, dict, list]:
    fetched: dict[int, bytes] = {}
    lines: list[str] = []

    def finish(client, clip, graph, outcome, prompt_id):
        files, _ = jobs.output_files(outcome.entry)
        path = jobs.fetch_output(client, files[0], tmp_path / "out" / prompt_id, 10**6, 30)
        fetched[clip.index] = path.read_bytes()
        return EXIT_OK

    prompts = prompts or [None] * len(seeds)
    clips = [cp.Clip(i, f"[clip {i + 1}] ", seed, prompt) for i, (seed, prompt) in enumerate(zip(seeds, prompts, strict=True))]
    stages = {1: cp.Stage(1, [s.url for s in stage1], {s.url: SPLIT.stage1 for s in stage1}),
              2: cp.Stage(2, [s.url for s in stage2], {s.url: SPLIT.stage2 for s in stage2})}
    options = cp.Options(SPLIT.draft_id, tmp_path / "out", 60, shared, ("8", "prompt"))
    return cp.Pipeline(clips, stages, options, finish, lines.append, lines.append), fetched, lines


def expected_draft(seed: int, prompt: str | None = None) -> bytes:
    graph = json.loads(json.dumps(SPLIT.stage1))
    apply_seed(graph, seed)
    if prompt is not None:
        graph["8"]["inputs"]["prompt"] = prompt
    return draft_bytes(graph)


def overlaps(a: tuple[str, float, float], b: tuple[str, float, float]) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_stage_1_of_the_next_clip_runs_while_stage_2_of_this_one_does_and_each_draft_arrives_bitwise(
        servers, tmp_path):
    a, b = servers(0.4, "a"), servers(0.4, "b")
    run, fetched, _ = pipeline(tmp_path, [a], [b], [10, 11, 12, 13], ["p0", "p1", "p2", "p3"])
    started = time.monotonic()
    assert run.run() == EXIT_OK
    wall = time.monotonic() - started
    for clip in run.clips:  # the video stage 2 made is of this clip's own draft, byte for byte
        assert fetched[clip.index] == b"video of " + expected_draft(clip.seed, clip.prompt)
        assert clip.draft.read_bytes() == expected_draft(clip.seed, clip.prompt)  # kept locally (nothing lost)
    assert [data for _, _, data in b.uploads] == [expected_draft(s, f"p{i}") for i, s in enumerate(range(10, 14))]
    assert all(overlaps(a.runs[k + 1], b.runs[k]) for k in range(3)), (a.runs, b.runs)
    serial = sum(end - start for _, start, end in a.runs + b.runs)
    assert wall < serial, (wall, serial)  # 8 jobs of 0.4 s: 3.2 s one after another; pipelined 5 x 0.4 s + polling
    summary = run.summary()
    assert summary["done"] == 4 and summary["failed"] == 0 and summary["clips_per_hour"] > 0
    assert summary["stage1"]["jobs"] == summary["stage2"]["jobs"] == 4


def test_the_seed_reaches_both_stages_and_the_prompt_only_stage_1(servers, tmp_path):
    a, b = servers(0.05, "a"), servers(0.05, "b")
    run, _, _ = pipeline(tmp_path, [a], [b], [7], ["a prompt"])
    assert run.run() == EXIT_OK
    (stage1,) = a.prompts.values()
    (stage2,) = b.prompts.values()
    assert stage1["12"]["inputs"]["noise_seed"] == stage2["31"]["inputs"]["noise_seed"] == 7
    assert stage1["8"]["inputs"]["prompt"] == "a prompt" and "8" not in stage2
    assert stage2[SPLIT.draft_id]["inputs"]["draft"] == f"h3kit_drafts/draft_{a.name}-p1.safetensors"


def test_a_stage_2_server_killed_mid_batch_costs_nothing_when_another_serves_stage_2(servers, tmp_path):
    a, b1, b2 = servers(0.1, "a"), servers(0.5, "b"), servers(0.5, "c")
    run, fetched, lines = pipeline(tmp_path, [a], [b1, b2], [1, 2, 3, 4, 5])

    def kill_when_busy():
        while not b1.running:
            time.sleep(0.01)
        b1.kill()

    import threading

    threading.Thread(target=kill_when_busy, daemon=True).start()
    assert run.run() == EXIT_OK, "\n".join(line for line in lines if "websocket" not in line)
    assert sorted(fetched) == [0, 1, 2, 3, 4]
    assert all(fetched[c.index] == b"video of " + expected_draft(c.seed) for c in run.clips)
    assert b1.url in run.summary()["servers_gone"] and any("trying again on" in line for line in lines)


def test_the_only_stage_2_server_killed_loses_no_finished_clip_and_reports_the_rest_with_their_drafts(
        servers, tmp_path):
    a, b = servers(0.1, "a"), servers(0.4, "b")
    run, fetched, lines = pipeline(tmp_path, [a], [b], [1, 2, 3, 4])

    def kill_after_first():
        while len(b.runs) < 1 or not b.running:
            time.sleep(0.01)
        b.kill()

    import threading

    threading.Thread(target=kill_after_first, daemon=True).start()
    assert run.run() == EXIT_UNREACHABLE
    done = [c for c in run.clips if c.code == EXIT_OK]
    assert [c.index for c in done] == [0] and fetched[0] == b"video of " + expected_draft(1)
    for clip in run.clips[1:]:  # the in-flight clip and the ones after it: reported, their drafts kept
        assert clip.code == EXIT_UNREACHABLE and clip.draft.read_bytes() == expected_draft(clip.seed)
    assert sum("no stage-2 server left" in line for line in lines) >= 2
    assert any(f"its draft is kept at {run.clips[1].draft}" in line for line in lines)


def test_a_failing_graph_is_reported_not_retried_and_the_other_clips_finish(servers, tmp_path):
    a1, a2, b = servers(0.05, "a"), servers(0.05, "a"), servers(0.05, "b")
    for server in (a1, a2):
        server.fail_execution = lambda graph: "guard: NaN" if graph["12"]["inputs"]["noise_seed"] == 2 else None
    run, fetched, lines = pipeline(tmp_path, [a1, a2], [b], [1, 2, 3])
    assert run.run() == EXIT_FAILED
    assert [c.code for c in run.clips] == [EXIT_OK, EXIT_FAILED, EXIT_OK] and sorted(fetched) == [0, 2]
    assert len(a1.runs) + len(a2.runs) == 3  # not tried again: it would fail again
    assert any("execution error" in line and "guard: NaN" in line for line in lines)


def test_a_lost_job_is_tried_again_on_the_other_server(servers, tmp_path):
    a1, a2, b = servers(0.05, "a"), servers(0.05, "a"), servers(0.05, "b")
    a1.forget = lambda graph: True  # a1 restarts under every job
    run, fetched, _ = pipeline(tmp_path, [a1, a2], [b], [1, 2])
    assert run.run() == EXIT_OK and sorted(fetched) == [0, 1]
    assert all(c.servers[1] == a2.url for c in run.clips)


def test_an_upload_the_stage_2_server_refuses_says_how_to_raise_its_limit(servers, tmp_path):
    a, b = servers(0.05, "a"), servers(0.05, "b")
    b.upload_status = 413
    run, _, lines = pipeline(tmp_path, [a], [b], [1])
    assert run.run() == EXIT_FAILED
    assert any("--max-upload-size" in line and "--shared-drafts" in line for line in lines)
    assert run.clips[0].draft.is_file()


def test_a_shared_folder_moves_no_draft_over_http(servers, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    a, b = servers(0.05, "a"), servers(0.05, "b")

    def render_into_the_mount(server, prompt_id, graph):
        outputs = default_render(server, prompt_id, graph)
        for key, data in list(server.files.items()):
            if key[:2] == ("output", "h3kit_drafts"):
                (shared / key[2]).write_bytes(data)
                b.files[("input", "h3kit_drafts", key[2])] = data  # the same folder, mounted on b as its input
        return outputs

    a.render = render_into_the_mount
    run, fetched, _ = pipeline(tmp_path, [a], [b], [4, 5], shared=shared)
    assert run.run() == EXIT_OK
    assert b.uploads == [] and not (tmp_path / "out" / "drafts").exists()
    assert all(fetched[c.index] == b"video of " + expected_draft(c.seed) for c in run.clips)


def test_a_shared_folder_that_lacks_the_draft_falls_back_to_http_and_says_so(servers, tmp_path):
    a, b = servers(0.05, "a"), servers(0.05, "b")
    run, fetched, lines = pipeline(tmp_path, [a], [b], [4], shared=tmp_path)
    assert run.run() == EXIT_OK and len(b.uploads) == 1
    assert any("moving the draft over HTTP instead" in line for line in lines)


# --- the command line

SIZES = ["--set", "8.width=64", "--set", "8.height=64", "--set", "8.length=22", "--set", "16.target_width=128",
         "--set", "16.target_height=128"]  # the video: 128 x 128 (the upsampler doubles the 64 x 64 draft), 17 frames


def schemas_of(*graphs: dict) -> dict:
    offline = schema_src.offline_schemas()
    used = {node["class_type"] for graph in graphs for node in graph.values()}
    return json.loads(json.dumps({name: offline[name] for name in used}))


@pytest.fixture
def cli_servers(servers, tmp_path):
    video = make_video(tmp_path / "v.mp4", np.stack([np.roll(moving_frames(1, (128, 128))[0], 4 * i, axis=1)
                                                     for i in range(17)]), tone(17 / 24)).read_bytes()
    info = schemas_of(SPLIT.stage1, SPLIT.stage2)

    def render(server, prompt_id, graph):
        outputs = default_render(server, prompt_id, graph)
        for (kind, sub, name) in list(server.files):
            if name.endswith(".mp4"):
                server.files[(kind, sub, name)] = video
        return outputs

    made = []
    for name in ("a", "b"):
        server = servers(0.05, name)
        server.object_info, server.render = info, render
        made.append(server)
    return made


def test_run_pipelines_prompts_times_seeds_and_verifies_every_video(cli_servers, tmp_path, capsys):
    a, b = cli_servers
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("# two prompts\nfirst prompt\n\nsecond prompt\n")
    out = tmp_path / "out"
    code = main(["run", str(API / "h3_ltx_two_stage_cached_cond.json"), "--stage1-server", a.url, "--stage2-server",
                 b.url, "--seed", "5-6", "--prompts", str(prompts), "--out", str(out), "--quiet", *SIZES])
    text = capsys.readouterr()
    assert code == 0, text.out + text.err
    sent = [(g["12"]["inputs"]["noise_seed"], g["8"]["inputs"]["prompt"], g["8"]["inputs"]["width"])
            for g in a.prompts.values()]
    assert sent == [(5, "first prompt", 64), (6, "first prompt", 64), (5, "second prompt", 64), (6, "second prompt", 64)]
    assert "pipeline: 4 of 4 clip(s) done, 0 failed" in text.out and "clips/hour" in text.out, text.out
    rows = text.out.splitlines()
    for line in ("17 frames as the graph asks", "128x128 as the graph asks", "audio present"):  # the whole graph's sizes
        assert sum(row.startswith("[clip") and "PASS" in row and line in row for row in rows) == 4, line
    (summary,) = out.glob("pipeline-*.json")
    assert json.loads(summary.read_text())["done"] == 4
    assert len(list((out / "drafts").glob("*.safetensors"))) == 4


@pytest.mark.parametrize("argv, message", [
    (["--stage1-server", "http://127.0.0.1:9"], "one --stage2-server"),
    (["--stage1-server", "http://127.0.0.1:9", "--stage2-server", "http://127.0.0.1:9", "--server", "x"], "not both"),
    (["--stage1-server", "http://127.0.0.1:9", "--stage2-server", "http://127.0.0.1:9", "--cold"], "swap it avoids"),
    (["--stage1-server", "a:1", "--stage2-server", "b:1", "--seed", "9-3"], "A <= B"),
    (["--stage1-server", "a:1", "--stage2-server", "b:1", "--seed", "0-20000"], "at most 10,000"),
    (["--stage1-server", "a:1", "--stage2-server", "b:1", "--seed", "1-3", "--runs", "2"], "give one of them"),
    (["--stage1-server", "a:1", "--stage2-server", "b:1", "--prompt", " "], "an empty prompt"),
])
def test_run_refuses_bad_pipeline_arguments_before_any_work(argv, message, capsys):
    code = main(["run", str(API / "h3_ltx_two_stage.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err


def test_run_refuses_a_graph_without_a_handoff_to_split(capsys):
    code = main(["run", str(API / "h3_effects_t2va.json"), "--stage1-server", "a:1", "--stage2-server", "b:1"])
    err = capsys.readouterr().err
    assert code == 2 and "cut at exactly one handoff" in err, err


def test_run_without_any_server_is_refused(capsys):
    assert main(["run", str(API / "h3_ltx_two_stage.json")]) == 2
    assert "give --server URL" in capsys.readouterr().err
