"""Issue 17, tier (b): the stage-2 half of the shipped h3_ltx_two_stage_cached_cond graph, executed through
POST /prompt on a host that has the real LTX-2 audio-video model (LTXAV), with tiny random-weight checkpoints
written by the host's own classes (tests/tiny_ltx_models.py) and loaded by its own loaders.

The graph is the shipped file cut at the handoff: a synthetic H3 draft (LoadImage + RepeatImageBatch frames,
LoadAudio audio) replaces stage 1; every other node, input and link is the shipped one, with tiny model files
and a small target size. Skipped on hosts without LTXAV (a capability read from /object_info).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import av
import pytest
import tiny_ltx_models
import torch
from comfyui_host import LTXAV, execution_error
from h3kit.checks.host_layout import adapt_graph
from PIL import Image
from safetensors.torch import load_file
from tiny_graphs import write_cached_prompts, write_tone

pytestmark = pytest.mark.comfyui

WORKFLOW = Path(__file__).resolve().parent.parent / "workflows" / "api" / "h3_ltx_two_stage_cached_cond.json"
HANDOFF = "16"  # H3KitDraftToLTX: the cut
STAGE1 = {"1", "2", "3", "4", "5", "6", "8", "9", "10", "11", "12", "13", "14", "15"}
DRAFT_W, DRAFT_H, DRAFT_FRAMES = 128, 64, 22  # an H3-grid count (17k+5); half the target: no resample
TARGET_W, TARGET_H = 256, 128
KEPT_FRAMES = 17  # 22 trimmed to the LTX grid 8n+1
FPS = 24.0


def _write_draft_image(path: Path) -> None:
    """A gradient with a checkerboard: texture for the VAE, never a solid frame."""
    image = Image.new("RGB", (DRAFT_W, DRAFT_H))
    image.putdata([
        (int(255 * x / DRAFT_W), int(255 * y / DRAFT_H), 255 if (x // 8 + y // 8) % 2 else 40)
        for y in range(DRAFT_H) for x in range(DRAFT_W)
    ])
    image.save(path)


@pytest.fixture(scope="module")
def ltx_host(comfyui_server):
    """The server, with tiny LTX-2 checkpoints in its models/, a cached refine prompt and a draft in input/."""
    comfyui_server.require(LTXAV)
    install_tiny_ltx(comfyui_server)
    return comfyui_server


def install_tiny_ltx(comfyui_server) -> None:
    tiny_ltx_models.install(comfyui_server)
    write_cached_prompts(comfyui_server)
    _write_draft_image(comfyui_server.base_dir / "input" / "h3kit_draft.png")
    write_tone(comfyui_server.base_dir / "input" / "h3kit_draft.wav", seconds=DRAFT_FRAMES / FPS)


def stage2_graph(server, dit: str = "healthy", lowvram: bool = False, prefix: str = "stage2", av: bool = False) -> dict:
    """The shipped graph minus stage 1, fed by a synthetic draft, with tiny models and this host's SaveVideo layout."""
    shipped = json.loads(WORKFLOW.read_text())
    graph = {nid: copy.deepcopy(node) for nid, node in shipped.items() if nid not in STAGE1}
    graph["d1"] = {"class_type": "LoadImage", "inputs": {"image": "h3kit_draft.png"}}
    graph["d2"] = {"class_type": "RepeatImageBatch", "inputs": {"image": ["d1", 0], "amount": DRAFT_FRAMES}}
    graph["d3"] = {"class_type": "LoadAudio", "inputs": {"audio": "h3kit_draft.wav"}}
    graph[HANDOFF]["inputs"].update(frames=["d2", 0], audio=["d3", 0], target_width=TARGET_W, target_height=TARGET_H)
    graph["21"]["inputs"]["vae_name"] = "tiny_ltx_video_vae.safetensors"
    graph["23"]["inputs"]["model_name"] = "tiny_ltx_upscaler_x2.safetensors"
    graph["25"]["inputs"]["unet_name"] = f"tiny_ltxav_{dit}.safetensors"
    graph["27"]["inputs"]["name"] = "tiny_refine.safetensors"
    if lowvram:  # the shipped refiner link 25 -> 30 gets the two memory patches in between
        graph["m1"] = {"class_type": "H3KitLowVRAMAttention", "inputs": {"model": ["25", 0], "head_chunks": 2}}
        # video FFN (96 tokens) in 4 chunks; the 12-token audio stream stays whole: CPU float32 matmuls of 3-token
        # chunks are not bitwise the whole one (measured, docs/lowvram.md), and that is the FFN's rule, not this test's
        graph["m2"] = {"class_type": "H3KitChunkFeedForward",
                       "inputs": {"model": ["m1", 0], "chunks": 4, "seq_threshold": 64}}
        graph["m3"] = {"class_type": "PreviewAny", "inputs": {"source": ["m1", 1]}}
        graph["m4"] = {"class_type": "PreviewAny", "inputs": {"source": ["m2", 1]}}
        graph["30"]["inputs"]["model"] = ["m2", 0]
    if av:  # refine video + the draft's audio latent together (nested AV latent), decode the video part
        graph["a1"] = {"class_type": "LTXVAudioVAELoader", "inputs": {"ckpt_name": "tiny_ltx_audio_vae.safetensors"}}
        graph["a2"] = {"class_type": "LTXVAudioVAEEncode", "inputs": {"audio": [HANDOFF, 1], "audio_vae": ["a1", 0]}}
        graph["a3"] = {"class_type": "LTXVConcatAVLatent", "inputs": {"video_latent": ["24", 0], "audio_latent": ["a2", 0]}}
        graph["a4"] = {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": ["33", 0]}}
        graph["32"]["inputs"]["latent_image"] = ["a3", 0]
        graph["33"]["inputs"]["reference"] = ["a3", 0]
        graph["34"]["inputs"]["samples"] = ["a4", 0]
    graph["41"]["inputs"]["filename_prefix"] = f"h3kit/{prefix}"
    graph["s1"] = {"class_type": "SaveLatent", "inputs": {"samples": ["a4" if av else "33", 0],
                                                          "filename_prefix": f"h3kit/{prefix}"}}
    return adapt_graph(graph, server.served()).graph  # SaveVideo in this host's layout, as `run` adapts it


def report_of(entry: dict, node_id: str) -> dict:
    return json.loads(entry["outputs"][node_id]["text"][0])


def saved_files(server, entry: dict, node_id: str) -> list[Path]:
    outputs = entry["outputs"][node_id]
    infos = [info for key in ("images", "videos", "latents", "gifs") for info in outputs.get(key, [])]
    return [server.output_path(info) for info in infos]


def refined_latent(server, entry: dict) -> torch.Tensor:
    (path,) = [p for p in (server.base_dir / "output" / "h3kit").glob("*.latent")
               if p.name.startswith(entry["_prefix"])]
    return load_file(str(path))["latent_tensor"]


def run(server, **kwargs) -> dict:
    entry = server.run_graph(stage2_graph(server, **kwargs), timeout=600)
    entry["_prefix"] = kwargs.get("prefix", "stage2")
    return entry


def test_stage2_runs_on_ltxav_and_writes_a_verified_mp4_with_the_drafts_audio(ltx_host):
    entry = run(ltx_host, prefix="healthy")
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:4000]
    (video_path,) = saved_files(ltx_host, entry, "41")
    assert video_path.suffix == ".mp4" and video_path.stat().st_size > 0
    with av.open(str(video_path)) as container:
        (video,) = container.streams.video
        audio_streams = list(container.streams.audio)
        frames = [frame for frame in container.decode(video=0)]
        assert (video.codec_context.width, video.codec_context.height) == (TARGET_W, TARGET_H)
        assert len(frames) == KEPT_FRAMES
        assert len(audio_streams) == 1, "the draft's audio must be muxed into the refined video"
        container.seek(0)
        samples = sum(f.samples for f in container.decode(audio=0))
        seconds = samples / audio_streams[0].codec_context.sample_rate
    assert abs(seconds - KEPT_FRAMES / FPS) < 0.05, seconds  # trimmed with the frames, not the 22-frame draft
    handoff = report_of(entry, "42")
    assert handoff["encoder"] == {"width": TARGET_W // 2, "height": TARGET_H // 2, "frames": KEPT_FRAMES}
    guard = report_of(entry, "44")
    assert guard["status"] == "ok", guard
    assert guard["correlation"]["samples"] >= 0.5  # the shipped min_correlation held on a refiner that changes little
    latent = refined_latent(ltx_host, entry)
    assert list(latent.shape) == [1, 128, 3, TARGET_H // 32, TARGET_W // 32]  # upsampled x2 from the 128x64 encode


def test_nested_audio_video_latent_refines_and_both_streams_are_guarded(ltx_host):
    """The draft's audio encoded by the tiny LTX-2 audio VAE, refined together with the video (a nested latent):
    the guard reads both streams, applies min_correlation to the video one and reports the audio one."""
    entry = run(ltx_host, prefix="av", av=True)
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:4000]
    guard = report_of(entry, "44")
    assert set(guard["streams"]) == {"video", "audio"}, guard
    assert guard["streams"]["audio"]["shape"][:2] == [1, 8] and guard["correlation"]["video"] >= 0.5
    assert guard["correlation"]["audio"] is not None
    assert list(refined_latent(ltx_host, entry).shape) == [1, 128, 3, TARGET_H // 32, TARGET_W // 32]


def test_latent_guard_stops_a_refiner_with_nan_weights(ltx_host):
    entry = run(ltx_host, dit="nan", prefix="nan")
    assert entry["status"]["status_str"] == "error"
    error = execution_error(entry)
    assert error["node_type"] == "H3KitLatentGuard", error
    assert "NaN" in error["exception_message"] and "Fix:" in error["exception_message"]
    assert not saved_files_exist(ltx_host, "nan")


def test_latent_guard_stops_a_refiner_whose_output_is_garbage(ltx_host):
    entry = run(ltx_host, dit="garbage", prefix="garbage")
    assert entry["status"]["status_str"] == "error"
    error = execution_error(entry)
    assert error["node_type"] == "H3KitLatentGuard", error
    assert "correlates" in error["exception_message"] and "min_correlation 0.5" in error["exception_message"]
    assert not saved_files_exist(ltx_host, "garbage")


def saved_files_exist(server, prefix: str) -> bool:
    return any((server.base_dir / "output" / "h3kit").glob(f"{prefix}*.mp4"))


def test_lowvram_patches_on_real_ltxav_blocks_give_the_unpatched_output(ltx_host):
    """Video + audio refined together, so all six attention kinds run. head_chunks=2: the video layers (2 heads x 16)
    take 16-row to_v slices per group; the audio-width ones (2 heads x 8) would take 8-row slices, which CPU float32
    matmuls do not compute bitwise like the whole projection, so their v runs whole and the report says so."""
    plain = run(ltx_host, prefix="plain", av=True)
    patched = run(ltx_host, lowvram=True, prefix="patched", av=True)
    for entry in (plain, patched):
        assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:4000]
    attention, feed_forward = report_of(patched, "m3"), report_of(patched, "m4")
    assert attention["status"] == "patched" and attention["layers_patched"] == 6, attention  # attn1/2, audio, a2v, v2a
    assert feed_forward["status"] == "patched", feed_forward
    (narrow,) = attention["fallbacks"]
    layers, why = narrow.split(": ", 1)
    assert layers.split(", ") == [f"transformer_blocks.0.{name}" for name in
                                  ("audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")]
    assert why.startswith("to_v row slices of 8 rows are not a multiple of 16") and "v projected whole" in why
    log = ltx_host.log()
    assert "H3Kit low-VRAM LTX attention: per_group" in log  # the video layers really ran per group
    assert "H3Kit low-VRAM LTX attention: whole: to_v row slices of 8 rows" in log
    assert torch.equal(refined_latent(ltx_host, patched), refined_latent(ltx_host, plain))
