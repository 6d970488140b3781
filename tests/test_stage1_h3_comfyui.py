"""Issue 23, tier (b): every shipped H3 graph executed through POST /prompt to its mp4 on a host with native
MiniMax-H3 (the `NATIVE_H3` capability), with tiny random-weight models written by the host's own classes
(tests/tiny_h3_models.py, tests/tiny_ltx_models.py) and loaded by its own loaders; and `python -m h3kit run` on the
same graphs against the live server.

Each graph is the shipped file with the changes tests/tiny_graphs.py lists (model files, sizes, the stand-in loaders,
the cached LTX refine prompt, SaveVideo's layout); every prompt, sampler, step count, seed, guard and link is the
shipped one (tests/test_tiny_graphs.py checks that, in tier a).
"""

from __future__ import annotations

import json

import av
import pytest
import tiny_h3_models
import tiny_ltx_models
import torch
from comfyui_host import LTXAV, NATIVE_H3, execution_error
from h3kit.checks.host_layout import adapt_graph
from safetensors.torch import save_file
from tiny_graphs import (
    DRAFT_H,
    DRAFT_W,
    FPS,
    KEPT_FRAMES,
    TARGET_H,
    TARGET_W,
    h3_length,
    nodes_of,
    tiny_graph,
    write_cached_prompts,
    write_reference_images,
)
from tiny_graphs import (
    shipped as shipped_graph,
)

pytestmark = pytest.mark.comfyui

TWO_STAGE = ("h3_ltx_two_stage", "h3_ltx_two_stage_cached_cond", "h3_ltx_two_stage_544", "h3_ltx_two_stage_turing",
             "h3_ref2va_two_stage")
ALL_H3_GRAPHS = (*TWO_STAGE, "h3_ref2va_two_characters", "h3_native_362_lowvram", "h3_effects_t2va")
H3_AUDIO_LATENTS_PER_S = 40  # the host's AUDIO_LATENT_FPS: the draft's audio lasts round(frames / 24 * 40) / 40 s
EFFECT_ROWS = 94  # minimaxh3_bullet_time's published row count (field-notes §D)
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


def report_shown(entry: dict, graph: dict, source: list) -> dict | None:
    """The JSON report of the node output `source`, as the PreviewAny wired to it shows it (None: not shown)."""
    previews = [nid for nid in nodes_of(graph, "PreviewAny") if graph[nid]["inputs"]["source"] == source]
    return json.loads(entry["outputs"][previews[0]]["text"][0]) if previews else None


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
    length = h3_length(graph)
    kept = KEPT_FRAMES[length]
    assert media["size"] == (TARGET_W, TARGET_H) and media["frames"] == kept, (media, changes)
    assert media["audio_streams"] == 1, "the draft's audio must be muxed into the refined video (F21)"
    assert abs(media["audio_s"] - kept / FPS) < MAX_AV_DRIFT_S, media  # trimmed with the frames
    (handoff,) = nodes_of(graph, "H3KitDraftToLTX")
    report = report_shown(entry, graph, [handoff, 4])
    if report is not None:  # the Ref2VA two-stage graph shows neither report
        assert report["source"] == {"width": DRAFT_W, "height": DRAFT_H, "frames": length, "on_h3_grid": True}
        assert report["encoder"] == {"width": DRAFT_W, "height": DRAFT_H, "frames": kept}
        assert report["resample"] is False and report["dropped_frames"] == length - kept
    (guard,) = nodes_of(graph, "H3KitLatentGuard")
    verdict = report_shown(entry, graph, [guard, 1])
    if verdict is not None:
        assert verdict["status"] == "ok" and verdict["correlation"]["samples"] >= 0.5, verdict


def test_native_lowvram_graph_runs_to_its_mp4_with_both_patches_reported(h3_host):
    graph, changes = tiny_graph("h3_native_362_lowvram", h3_host, prefix="s1_native")
    entry = run_ok(h3_host, graph)
    assert_single_stage_mp4(h3_host, entry, graph, changes)
    (attention,) = nodes_of(graph, "H3KitLowVRAMAttention")
    (feed_forward,) = nodes_of(graph, "H3KitChunkFeedForward")
    for nid in (attention, feed_forward):
        report = report_shown(entry, graph, [nid, 1])
        assert report["status"] == "patched" and report["family"] == "h3" and report["layers_patched"] == 1, report


def assert_single_stage_mp4(server, entry: dict, graph: dict, changes: list[str]) -> None:
    """The H3 draft itself: 128x64, all its frames, its own audio (round(frames / 24 * 40) latents at 40/s: 22 frames
    -> 37 latents = 0.925 s) in sync with them."""
    media = probe(saved_video(server, entry, graph))
    length = h3_length(graph)
    assert media["size"] == (DRAFT_W, DRAFT_H) and media["frames"] == length, (media, changes)
    assert media["audio_streams"] == 1, "VAEDecodeAudio -> CreateVideo: the H3 audio must be in the mp4 (F21)"
    h3_audio_s = round(length / FPS * H3_AUDIO_LATENTS_PER_S) / H3_AUDIO_LATENTS_PER_S
    assert abs(media["audio_s"] - h3_audio_s) < MAX_AV_DRIFT_S and abs(media["audio_s"] - length / FPS) < MAX_AV_DRIFT_S


def test_ref2va_two_characters_graph_runs_to_its_mp4_with_both_pictures_referenced(h3_host):
    """Both reference pictures go through the host's MiniMaxH3ReferenceToVideo: VAE-encoded into reference blocks and
    shown to the (tiny) Qwen3-VL vision tower as <Picture 1> / <Picture 2>."""
    graph, changes = tiny_graph("h3_ref2va_two_characters", h3_host, prefix="s1_ref2va")
    entry = run_ok(h3_host, graph)
    assert_single_stage_mp4(h3_host, entry, graph, changes)
    (prompt,) = nodes_of(graph, "H3KitRef2VAPrompt")
    report = report_shown(entry, graph, [prompt, 1])
    assert report["problems"] == 0 and report["warnings"] == [] and report["references"]["ref_images"] == 2, report
    # Issue 30 row 6: the encoder takes the prompt node's clip, which reads <d> </d> as upstream (#15808) does
    assert report["dialogue_tokens"].startswith(("fixed by this node's clip output", "the text encoder's tokenizer "
                                                 "reads <d>, </d> as one token each")), report


@pytest.fixture(scope="module")
def effects_host(h3_host):
    """The shipped effect's file (synthetic rows, the published 94 x 5120) in embeddings/, and the 5120-wide DiT and
    encoder (tiny_h3_models.install_effects) whose vocabulary covers the shipped prompt."""
    (prompt_node,) = [n for n in shipped_graph("h3_effects_t2va").values() if n["class_type"] == "H3KitEffectPrompt"]
    inputs = prompt_node["inputs"]
    folder = h3_host.models_dir / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    rows = torch.randn(EFFECT_ROWS, tiny_h3_models.EFFECTS_TEXT_DIM, generator=torch.Generator().manual_seed(5))
    save_file({"qwen3vl_32b": rows.to(torch.bfloat16)}, str(folder / inputs["effect"]))
    tiny_h3_models.install_effects(h3_host, [inputs["prompt"], f"embedding:{inputs['effect'].rsplit('.', 1)[0]}"])
    return h3_host


def test_effects_graph_runs_to_its_mp4_with_the_effect_rows_in_the_prompt_f15(effects_host):
    """The shipped effects graph with its effect file: H3KitEffectPrompt places the marker after the first shot tag,
    its clip output resolves it into the 94 rows (0.33.0's tokenizer would read it as text), and the host's
    MiniMaxH3ImageToVideo encodes that prompt for the DiT."""
    graph, changes = tiny_graph("h3_effects_t2va", effects_host, prefix="s1_effects")
    entry = run_ok(effects_host, graph)
    assert_single_stage_mp4(effects_host, entry, graph, changes)
    (prompt,) = nodes_of(graph, "H3KitEffectPrompt")
    report = report_shown(entry, graph, [prompt, 1])
    (effect,) = report["effects"]
    assert effect["rows"] == EFFECT_ROWS and effect["width"] == tiny_h3_models.EFFECTS_TEXT_DIM, report
    assert effect["token_index"] > 0, report  # the rows are in the encoded tokens, not at the prompt's start (F15)
    assert report["warnings"] == [] and report["markers_resolved_by"] != "nothing to resolve", report


@pytest.mark.parametrize("dit", ["nan", "garbage"])
def test_a_broken_h3_draft_stops_at_the_handoff_not_at_the_refiners_guard(h3_host, dit):
    """NaN weights, or finite ones whose output overflows: the draft decodes to NaN pixels. The handoff stops it and
    names stage 1; before, it passed the NaN on and H3KitLatentGuard blamed the LTX refiner (F10's fix)."""
    h3_host.require(LTXAV)
    graph, _ = tiny_graph("h3_ltx_two_stage_cached_cond", h3_host, h3=dit, prefix=f"s1_broken_{dit}")
    entry = h3_host.run_graph(graph, timeout=900)
    assert entry["status"]["status_str"] == "error"
    error = execution_error(entry)
    assert error["node_type"] == "H3KitDraftToLTX", error
    assert "the H3 draft is broken" in error["exception_message"] and "stage 1" in error["exception_message"]
    assert not list((h3_host.base_dir / "output" / "h3kit").glob(f"s1_broken_{dit}*"))


def run_cli(graph: dict, server, tmp_path, capsys) -> tuple[int, str]:
    """`python -m h3kit run` on `graph`: (exit code, stdout + stderr: results go to stdout, problems to stderr)."""
    from h3kit.scripts.cli import main

    path = tmp_path / "graph.json"
    path.write_text(json.dumps(graph))
    code = main(["run", str(path), "--server", server.url, "--out", str(tmp_path / "out"), "--quiet", "--timeout", "900"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("name", ALL_H3_GRAPHS)
def test_run_renders_each_graph_and_verifies_its_mp4(h3_host, request, tmp_path, capsys, name):
    """`python -m h3kit run` on each tiny graph as the test prepared it, SaveVideo still in the shipped layout: run
    adapts it to this host (and prints that), queues it, downloads the mp4 and verifies frames, size and audio
    against what the graph asks. Nodes identical to an earlier test's come from ComfyUI's cache (the new prefix
    makes SaveVideo run)."""
    two_stage = name in TWO_STAGE
    if two_stage:
        h3_host.require(LTXAV)
    server = request.getfixturevalue("effects_host") if name == "h3_effects_t2va" else h3_host
    graph, _ = tiny_graph(name, server, prefix=f"s1_run_{name}", adapt=False)
    code, out = run_cli(graph, server, tmp_path, capsys)
    assert code == 0, out
    length = h3_length(graph)
    frames, size = (KEPT_FRAMES[length], (TARGET_W, TARGET_H)) if two_stage else (length, (DRAFT_W, DRAFT_H))
    rows = out.splitlines()
    if adapt_graph(graph, server.object_info()).changes:  # 0.33.0's SaveVideo layout; yzkee takes the graph as is
        assert any("INFO  adapted: node" in row and "input 'format.codec' -> 'codec'" in row for row in rows), out
    for line in (f"{frames} frames decode, not black, not constant", f"{size[0]}x{size[1]} as the graph asks",
                 f"{frames} frames as the graph asks", "audio present"):
        assert any(row.startswith("PASS") and line in row for row in rows), (line, out)
    assert len(list((tmp_path / "out").rglob("*.mp4"))) == 1


def test_run_stops_a_broken_draft_with_the_handoffs_error(h3_host, tmp_path, capsys):
    h3_host.require(LTXAV)
    graph, _ = tiny_graph("h3_ltx_two_stage", h3_host, h3="nan", prefix="s1_run_nan", adapt=False)
    code, out = run_cli(graph, h3_host, tmp_path, capsys)
    assert code == 1, out  # README: 1 = execution error
    assert "FAIL  execution error: node 16 (H3KitDraftToLTX)" in out and "the H3 draft is broken" in out
    assert not list((tmp_path / "out").rglob("*.mp4"))
