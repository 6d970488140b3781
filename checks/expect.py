"""What a graph should produce: the size, frame count and audio of the video a save node writes,
inferred by walking its image chain (used by `run` to verify the downloaded file, F19/F20/F21)."""

from __future__ import annotations

from dataclasses import dataclass

from .facts import FRAME_POLICIES, kept_frame_count
from .graph import inputs_of, is_link, resolved

MAX_DEPTH = 64  # image chains are short; a deeper (or cyclic) chain is "unknown", not a recursion error


@dataclass
class Expect:
    width: int | None = None
    height: int | None = None
    frames: int | None = None
    audio: bool | None = None  # True: the graph muxes audio; False: it makes none; None: unknown


def _int(graph: dict, node: dict, name: str) -> int | None:
    value = resolved(graph, node, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _src(graph: dict, node: dict, name: str) -> tuple[str, int] | None:
    value = inputs_of(node).get(name)
    return (str(value[0]), int(value[1])) if is_link(value) and isinstance(graph.get(str(value[0])), dict) else None


PASSTHROUGH = {"SamplerCustomAdvanced": "latent_image", "SamplerCustom": "latent_image", "KSampler": "latent_image",
               "VAEEncode": "pixels", "VAEDecode": "samples", "VAEDecodeTiled": "samples",
               "H3KitLatentGuard": "latent", "H3KitFrameGuard": "images", "LTXVSeparateAVLatent": "av_latent",
               "LTXVConcatAVLatent": "video_latent"}


def geometry(graph: dict, link: tuple[str, int] | None, depth: int = 0) -> Expect:
    """Pixel width, height and frame count that flow out of a node output (IMAGE or video LATENT)."""
    if link is None or depth > MAX_DEPTH:
        return Expect()
    node = graph[link[0]]
    ct = node.get("class_type")
    if ct == "EmptyImage":
        return Expect(_int(graph, node, "width"), _int(graph, node, "height"), _int(graph, node, "batch_size"))
    if ct in ("MiniMaxH3ImageToVideo", "MiniMaxH3ReferenceToVideo", "EmptyMiniMaxH3LatentAV",
              "EmptyLTXVLatentVideo", "LTXVImgToVideo"):
        return Expect(_int(graph, node, "width"), _int(graph, node, "height"), _int(graph, node, "length"))
    if ct == "LoadImage":
        return Expect(frames=1)
    if ct == "RepeatImageBatch":
        inner, amount = geometry(graph, _src(graph, node, "image"), depth + 1), _int(graph, node, "amount")
        return Expect(inner.width, inner.height, inner.frames * amount if inner.frames and amount else None)
    if ct == "ImageBatch":
        a, b = (geometry(graph, _src(graph, node, k), depth + 1) for k in ("image1", "image2"))
        return Expect(a.width, a.height, a.frames + b.frames if a.frames and b.frames else None)
    if ct == "ImageScale":
        inner = geometry(graph, _src(graph, node, "image"), depth + 1)
        w, h = _int(graph, node, "width"), _int(graph, node, "height")
        return Expect(w or None, h or None, inner.frames) if w and h else Expect(frames=inner.frames)
    if ct == "LTXVLatentUpsampler":
        inner = geometry(graph, _src(graph, node, "samples"), depth + 1)
        return Expect(inner.width * 2 if inner.width else None, inner.height * 2 if inner.height else None, inner.frames)
    if ct == "H3KitDraftToLTX" and link[1] == 0:
        return _draft_to_ltx(graph, node, depth)
    if ct in PASSTHROUGH:
        return geometry(graph, _src(graph, node, PASSTHROUGH[ct]), depth + 1)
    return Expect()


def _draft_to_ltx(graph: dict, node: dict, depth: int) -> Expect:
    inner = geometry(graph, _src(graph, node, "frames"), depth + 1)
    tw, th = _int(graph, node, "target_width"), _int(graph, node, "target_height")
    policy = resolved(graph, node, "frame_policy", FRAME_POLICIES[0])
    frames = None
    if inner.frames and policy in FRAME_POLICIES:
        frames = kept_frame_count(inner.frames, policy)
    return Expect(tw // 2 if tw else None, th // 2 if th else None, frames)


AUDIO_MAKERS = {"VAEDecodeAudio", "LoadAudio", "LTXVAudioVAEDecode"}


def expected_video(graph: dict, save_node: str) -> Expect:
    """What a SaveVideo node should have written: size and frames from its image chain, audio if muxed."""
    node = graph.get(save_node)
    if not isinstance(node, dict):
        return Expect()
    video = _src(graph, node, "video")
    if video is None or graph[video[0]].get("class_type") != "CreateVideo":
        return Expect()
    create = graph[video[0]]
    expect = geometry(graph, _src(graph, create, "images"))
    makes_audio = any(isinstance(n, dict) and n.get("class_type") in AUDIO_MAKERS for n in graph.values())
    expect.audio = True if _src(graph, create, "audio") else (None if makes_audio else False)
    return expect
