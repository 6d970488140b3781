"""Issue 32 item 4, tier (b): the split two-stage graph on two ComfyUI processes renders the single graph's frames,
and a server killed mid-batch loses no finished clip.

Two processes of the configured host (the session's `comfyui_server` as A, a second one started here as B), each with
the tiny random-weight models written by the host's own classes (tests/tiny_h3_models.py, tests/tiny_ltx_models.py)
and the shipped h3_ltx_two_stage_cached_cond graph made runnable on them by tests/tiny_graphs.py. The single-server
reference is the whole graph queued on A; the split run is `run --stage1-server A --stage2-server B`, whose stage 2
runs in the other process from the draft file that crossed over ComfyUI's own /view and /upload/image.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
import tiny_h3_models
import tiny_ltx_models
from comfyui_host import LTXAV, NATIVE_H3, ComfyUIServer
from h3kit.adapters import comfy_jobs as jobs
from h3kit.checks.graph_edit import apply_seed
from h3kit.checks.host_layout import adapt_graph
from h3kit.scripts.cli import main
from tiny_graphs import nodes_of, tiny_graph, write_cached_prompts

pytestmark = pytest.mark.comfyui

GRAPH = "h3_ltx_two_stage_cached_cond"
SEEDS = (5, 6)
KILL_SEEDS = (11, 12, 13, 14)
KILL_GRACE_S = 5.0  # a killed server refuses connections at once; the follower's 120 s of silence, shortened


@pytest.fixture(scope="module")
def two_hosts(comfyui_server):
    """A (the session's server) and B (a second process of the same host), both with the tiny models."""
    comfyui_server.require(NATIVE_H3, LTXAV)
    a = comfyui_server
    tiny_h3_models.install(a, ("healthy",))
    tiny_ltx_models.install(a, ("healthy",))
    write_cached_prompts(a)
    b = ComfyUIServer(a.host)
    b.start()
    try:
        shutil.copytree(a.models_dir, b.models_dir, dirs_exist_ok=True)  # the same bytes: one writer, one seed
        yield a, b
    finally:
        b.stop()
        b.cleanup()


def frames_and_audio(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Every decoded frame (rgb24) and every audio sample of an mp4."""
    with av.open(str(path)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        container.seek(0)
        audio = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    return frames, audio


def single_run(server, graph: dict, seed: int) -> tuple[Path, float]:
    """The whole graph queued on one server: its mp4 and its execution time."""
    queued = json.loads(json.dumps(graph))
    apply_seed(queued, seed)
    adapted = adapt_graph(queued, server.object_info()).graph
    started = time.monotonic()
    entry = server.run_graph(adapted, timeout=1800)
    seconds = time.monotonic() - started
    assert entry["status"]["status_str"] == "success", entry["status"]
    (save,) = nodes_of(adapted, "SaveVideo")
    (info,) = [i for key in ("images", "videos") for i in entry["outputs"][save].get(key, [])]
    return server.output_path(info), seconds


def split_run(graph: dict, tmp_path: Path, argv: list[str], capsys) -> tuple[int, dict, str]:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph))
    out = tmp_path / "out"
    code = main(["run", str(path), *argv, "--out", str(out), "--quiet", "--timeout", "1800"])
    captured = capsys.readouterr()
    (summary,) = out.glob("pipeline-*.json")
    return code, json.loads(summary.read_text()), captured.out + captured.err


def clip_video(tmp_path: Path, clip: dict) -> Path:
    (video,) = (tmp_path / "out" / clip["prompt_ids"]["2"]).glob("*.mp4")
    return video


def test_the_split_run_renders_the_single_servers_frames_for_the_same_seeds(two_hosts, tmp_path, capsys):
    a, b = two_hosts
    graph, changes = tiny_graph(GRAPH, a, prefix="split_same", adapt=False)
    code, summary, out = split_run(graph, tmp_path, ["--stage1-server", a.url, "--stage2-server", b.url,
                                                     "--seed", f"{SEEDS[0]}-{SEEDS[-1]}"], capsys)
    assert code == 0, out
    assert summary["done"] == len(SEEDS) and summary["servers_gone"] == [], summary
    single_s = []
    for clip in summary["per_clip"]:
        assert clip["servers"] == {"1": a.url, "2": b.url}
        reference, seconds = single_run(a, tiny_graph(GRAPH, a, prefix=f"single_{clip['seed']}", adapt=False)[0],
                                        clip["seed"])
        single_s.append(seconds)
        split_frames, split_audio = frames_and_audio(clip_video(tmp_path, clip))
        single_frames, single_audio = frames_and_audio(reference)
        assert split_frames.shape == single_frames.shape, changes
        assert np.array_equal(split_frames, single_frames), f"seed {clip['seed']}: the frames differ"
        assert np.array_equal(split_audio, single_audio), f"seed {clip['seed']}: the audio differs"
    print(f"\nsplit run, {len(SEEDS)} clips on two CPU processes: {summary['wall_s']:.1f} s "
          f"({summary['clips_per_hour']:.1f} clips/hour; stage 1 mean {summary['stage1']['mean_wall_s']} s, stage 2 "
          f"mean {summary['stage2']['mean_wall_s']} s); single server, one clip at a time: "
          f"{', '.join(f'{s:.1f} s' for s in single_s)}")


def test_a_stage_2_server_killed_mid_batch_loses_no_finished_clip_and_its_clip_is_rendered_elsewhere(
        two_hosts, tmp_path, capsys, monkeypatch):
    """B serves stage 2 with A as the stage's second server; B is killed (SIGKILL) while it renders a clip after it
    finished one: every finished clip is kept, B's clip is rendered again on A, the batch ends with every clip. Last
    in this module: B is gone afterwards."""
    a, b = two_hosts
    monkeypatch.setattr(jobs, "UNREACHABLE_GRACE_S", KILL_GRACE_S)
    graph, _ = tiny_graph(GRAPH, a, prefix="split_kill", adapt=False)
    killed: dict[str, float] = {}

    def successes() -> int:
        history = b.get("/history", timeout=30)
        return sum(1 for e in history.values() if e.get("status", {}).get("status_str") == "success")

    before = successes()  # B's jobs of the test before this one

    def kill_b_mid_job() -> None:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            try:
                finished, queue = successes() - before, b.get("/queue", timeout=5)
            except Exception:  # noqa: BLE001 - B busy: ask again
                time.sleep(0.5)
                continue
            if finished >= 1 and queue.get("queue_running"):
                os.killpg(b.process.pid, signal.SIGKILL)
                killed["at"] = time.monotonic()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_b_mid_job, daemon=True)
    watcher.start()
    code, summary, out = split_run(graph, tmp_path, ["--stage1-server", a.url, "--stage2-server", b.url,
                                                     "--stage2-server", a.url, "--seed",
                                                     f"{KILL_SEEDS[0]}-{KILL_SEEDS[-1]}"], capsys)
    watcher.join(timeout=5)
    assert "at" in killed, "B never ran a second stage-2 job: nothing was killed"
    assert code == 0 and summary["done"] == len(KILL_SEEDS), out
    assert summary["servers_gone"] == [b.url] and "trying again on" in out
    on_b = [c for c in summary["per_clip"] if c["servers"]["2"] == b.url]
    assert on_b, "a clip B finished before it was killed"  # kept: its video is in --out and verified
    for clip in summary["per_clip"]:
        assert clip_video(tmp_path, clip).stat().st_size > 0 and clip["code"] == 0
    print(f"\nkill: B killed {time.monotonic() - killed['at']:.1f} s before the end; {len(on_b)} clip(s) finished on "
          f"B kept, every clip done in {summary['wall_s']:.1f} s")
