"""Issue 23, tier (b): every shipped H3 graph executed through POST /prompt to its mp4 on a host with native
MiniMax-H3 (the `NATIVE_H3` capability), with tiny random-weight models written by the host's own classes
(tests/tiny_h3_models.py, tests/tiny_ltx_models.py) and loaded by its own loaders; and `python -m h3kit run` on the
same graphs against the live server.

Each graph is the shipped file with the changes tests/tiny_graphs.py lists (model files, sizes, cached prompts,
the stand-ins, SaveVideo's layout); every sampler, step count, seed, guard and link is the shipped one. A test fails
when a graph needs a change that list does not name.
"""

from __future__ import annotations

import json

import av
import pytest
import tiny_h3_models
import tiny_ltx_models
from comfyui_host import LTXAV, NATIVE_H3, execution_error
from tiny_graphs import (
    DRAFT_H,
    DRAFT_W,
    FPS,
    KEPT_FRAMES,
    LENGTH,
    TARGET_H,
    TARGET_W,
    tiny_graph,
    write_cached_prompts,
    write_reference_images,
)

pytestmark = pytest.mark.comfyui

TWO_STAGE = ("h3_ltx_two_stage", "h3_ltx_two_stage_cached_cond", "h3_ltx_two_stage_544", "h3_ltx_two_stage_turing")
H3_AUDIO_LATENTS_PER_S = 40  # the host's AUDIO_LATENT_FPS: the draft's audio lasts round(frames / 24 * 40) / 40 s
MAX_AV_DRIFT_S = 0.05  # audio vs video duration in one mp4 (aac frames are 1024 samples: ~21 ms at 48 kHz)


@pytest.fixture(scope="module")
def h3_host(comfyui_server):
    comfyui_server.require(NATIVE_H3)
    tiny_h3_models.install(comfyui_server)
    if comfyui_server.has(LTXAV):
        tiny_ltx_models.install(comfyui_server)
    write_cached_prompts(comfyui_server)
    write_reference_images(comfyui_server)
    return comfyui_server


def nodes_of(graph: dict, class_type: str) -> list[str]:
    return [nid for nid, node in graph.items() if node["class_type"] == class_type]


def report_shown(entry: dict, graph: dict, source: list) -> dict:
    """The JSON report of the node output `source`, as the PreviewAny wired to it shows it."""
    (preview,) = [nid for nid in nodes_of(graph, "PreviewAny") if graph[nid]["inputs"]["source"] == source]
    return json.loads(entry["outputs"][preview]["text"][0])


def saved_video(server, entry: dict, graph: dict):
    (save,) = nodes_of(graph, "SaveVideo")
    (info,) = [i for key in ("images", "videos") for i in entry["outputs"].get(save, {}).get(key, [])]
    path = server.output_path(info)
    assert path.suffix == ".mp4" and path.stat().st_size > 0, path
    return path


def probe(path) -> dict:
    with av.open(str(path)) as container:
        (video,) = container.streams.video
        audio = list(container.streams.audio)
        frames = sum(1 for _ in container.decode(video=0))
        size = (video.codec_context.width, video.codec_context.height)
        seconds = None
        if len(audio) == 1:
            container.seek(0)
            seconds = sum(f.samples for f in container.decode(audio=0)) / audio[0].codec_context.sample_rate
    return {"size": size, "frames": frames, "audio_streams": len(audio), "audio_s": seconds}


def run_ok(server, graph: dict) -> dict:
    entry = server.run_graph(graph, timeout=900)
    assert entry["status"]["status_str"] == "success", json.dumps(execution_error(entry), indent=1)[:4000] \
        if entry["status"]["status_str"] == "error" else entry["status"]
    return entry


@pytest.mark.parametrize("name", TWO_STAGE)
def test_two_stage_graph_runs_to_its_mp4_with_the_drafts_audio(h3_host, name):
    h3_host.require(LTXAV)
    graph, changes = tiny_graph(name, h3_host, prefix=f"s1_{name}")
    entry = run_ok(h3_host, graph)
    media = probe(saved_video(h3_host, entry, graph))
    assert media["size"] == (TARGET_W, TARGET_H) and media["frames"] == KEPT_FRAMES, (media, changes)
    assert media["audio_streams"] == 1, "the draft's audio must be muxed into the refined video (F21)"
    assert abs(media["audio_s"] - KEPT_FRAMES / FPS) < MAX_AV_DRIFT_S, media  # trimmed with the frames
    (handoff,) = nodes_of(graph, "H3KitDraftToLTX")
    report = report_shown(entry, graph, [handoff, 4])
    assert report["source"] == {"width": DRAFT_W, "height": DRAFT_H, "frames": LENGTH, "on_h3_grid": True}
    assert report["encoder"] == {"width": DRAFT_W, "height": DRAFT_H, "frames": KEPT_FRAMES}
    assert report["resample"] is False and report["dropped_frames"] == LENGTH - KEPT_FRAMES
    (guard,) = nodes_of(graph, "H3KitLatentGuard")
    verdict = report_shown(entry, graph, [guard, 1])
    assert verdict["status"] == "ok" and verdict["correlation"]["samples"] >= 0.5, verdict
