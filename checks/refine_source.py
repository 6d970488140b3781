"""Where the picture a sampler starts from comes from: an H3 draft, a fresh latent, or something H3Kit cannot see.

F23 was measured refining an H3 draft with LTX-2.5 (field-notes §A4). LTX refining its own stage 1 (the official
LTX-2.x templates: stage 2 at 0.85 or 0.909375 after LTXVLatentUpsampler) and a stage 1 that starts from an empty
latent are other things. So the walk follows only the inputs that carry the picture (latents and frames) back from
the sampler, never models, conditioning, VAEs or guide images: an i2v first frame (LTXVImgToVideoInplace's image)
starts a new video, it is not a video being refined. Bounded: each (node, encoded) pair is visited once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .graph import ancestors, class_of, inputs_of, is_link

# For each node that passes a picture on: the inputs it comes from (ComfyUI 0.33.0: nodes.py, comfy_extras/
# nodes_lt.py, nodes_lt_upsampler.py, nodes_video.py, nodes_images.py, nodes_post_processing.py; H3Kit's guards).
PICTURE_INPUTS: dict[str, tuple[str, ...]] = {
    "SamplerCustomAdvanced": ("latent_image",), "SamplerCustom": ("latent_image",),
    "KSampler": ("latent_image",), "KSamplerAdvanced": ("latent_image",),
    "LTXVConcatAVLatent": ("video_latent",),  # audio_latent is the soundtrack, not the picture
    "LTXVSeparateAVLatent": ("av_latent",), "LTXVCropGuides": ("latent",), "LTXVAddGuide": ("latent",),
    "LTXVImgToVideoInplace": ("latent",),  # its image is a guide frame written into this latent
    "LTXVLatentUpsampler": ("samples",), "LatentUpscale": ("samples",), "LatentUpscaleBy": ("samples",),
    "SetLatentNoiseMask": ("samples",),
    "VAEEncode": ("pixels",), "VAEEncodeTiled": ("pixels",), "VAEDecode": ("samples",), "VAEDecodeTiled": ("samples",),
    "ImageScale": ("image",), "ImageScaleBy": ("image",), "ResizeImageMaskNode": ("input",), "LTXVPreprocess": ("image",),
    "ImageFromBatch": ("image",),
    "GetVideoComponents": ("video",), "CreateVideo": ("images",),
    "H3KitLatentGuard": ("latent",), "H3KitFrameGuard": ("images",),
}
ENCODERS = frozenset({"VAEEncode", "VAEEncodeTiled"})  # frames -> a latent: a decoded video enters another model here
DRAFT_HANDOFFS = frozenset({"H3KitDraftToLTX"})  # its frames are an H3 draft prepared for LTX
EXISTING_VIDEO = ENCODERS | {"LTXVLatentUpsampler"}  # a latent of a video that exists already (not noise)
NEW_PICTURES = frozenset({"LTXVImgToVideo"})  # makes a fresh latent (with a guide frame), like the Empty*Latent* nodes
FILE_WORDS = ("LoadLatent", "LoadImage", "LoadVideo")  # core LoadLatent/LoadImage/LoadVideo and packs' look-alikes


def is_h3_node(class_type: str) -> bool:
    """Core MiniMax-H3 nodes (MiniMaxH3ImageToVideo, EmptyMiniMaxH3LatentAV, ...) and packs' H3 nodes."""
    return "MiniMaxH3" in class_type or class_type in DRAFT_HANDOFFS


def is_file_source(class_type: str) -> bool:
    return any(word in class_type for word in FILE_WORDS)


def is_new_picture(class_type: str) -> bool:
    """A node that makes a picture from nothing earlier: an empty latent or image, LTXVImgToVideo."""
    return class_type in NEW_PICTURES or ("Empty" in class_type and not is_h3_node(class_type))


@dataclass(frozen=True)
class PictureSource:
    """What the walk found. `h3_draft`: (node id, class) proving the picture is an H3 draft; `unknown`: what could
    not be told (a sentence naming the node), when no H3 draft was found; `existing`: the picture is an existing
    video (encoded, upsampled, loaded), not a fresh latent: the sampler refines (F01 counts these)."""

    h3_draft: tuple[str, str] | None
    unknown: str | None
    existing: bool


def picture_source(graph: dict, sampler: dict) -> PictureSource:
    """Walk the picture back from a sampler's latent_image (breadth first, nearest first)."""
    start = inputs_of(sampler).get("latent_image")
    queue = deque([(str(start[0]), False)] if is_link(start) else [])
    seen: set[tuple[str, bool]] = set()
    files: list[str] = []
    opaque: list[str] = []
    existing = False
    while queue:
        node_id, encoded = queue.popleft()
        node = graph.get(node_id)
        if (node_id, encoded) in seen or not isinstance(node, dict):
            continue
        seen.add((node_id, encoded))
        ct = class_of(graph, node_id)
        if ct in DRAFT_HANDOFFS or (encoded and is_h3_node(ct)):
            return PictureSource((node_id, ct), None, True)
        if is_h3_node(ct) or is_new_picture(ct):
            continue  # H3's own latent (an H3 sampler generating) or a fresh picture: nothing is refined
        if is_file_source(ct):
            files.append(node_id)
            continue
        if ct not in PICTURE_INPUTS:
            opaque.append(node_id)
            continue
        existing = existing or ct in EXISTING_VIDEO
        passed = encoded or ct in ENCODERS
        queue.extend((str(value[0]), passed) for name, value in inputs_of(node).items()
                     if name in PICTURE_INPUTS[ct] and is_link(value))
    unknown = _unknown(graph, files, opaque)
    return PictureSource(None, unknown, existing or bool(files))


def _unknown(graph: dict, files: list[str], opaque: list[str]) -> str | None:
    """Why the source cannot be told, or None. A node the walk cannot follow matters only when an H3 node or a
    loaded file is upstream of it: otherwise the picture cannot be an H3 draft."""
    if files:
        node_id = files[0]
        name = next((v for v in inputs_of(graph[node_id]).values() if isinstance(v, str)), "")
        shown = f" '{name[:80]}'" if name else ""
        return f"{class_of(graph, node_id)} (node {node_id}){shown}, a file H3Kit cannot see into"
    if not opaque:
        return None
    behind = sorted(nid for nid in ancestors(graph, opaque) if is_h3_node(class_of(graph, nid))
                    or is_file_source(class_of(graph, nid)))
    if not behind:
        return None
    first = opaque[0]
    return (f"{class_of(graph, first)} (node {first}), a node H3Kit cannot follow, with "
            f"{class_of(graph, behind[0])} (node {behind[0]}) upstream of it")
