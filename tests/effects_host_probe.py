"""Run inside a real ComfyUI host's python (cwd = the host checkout): the shipped effects graph's conditioning on the
host's own MiniMax-H3 text path, and the tier-(a) stand-ins against the real classes.

    <host python> tests/effects_host_probe.py <pack root> <work dir>    -> one JSON object on the last stdout line

1. tests/tiny_h3_text_encoder.py writes a tiny "passthrough" H3 text encoder (each layer adds exactly 0, so the
   conditioning is the sequence the encoder received) whose vocabulary covers the texts below, and loads it through
   comfy.sd.load_text_encoder_state_dicts (clip_type MINIMAX: the host's detection, minimax.te(), MiniMaxH3Tokenizer,
   CLIP) with models/embeddings = <work dir>/embeddings holding minimaxh3_bullet_time.safetensors ([94, 5120] bf16,
   the published row count of that effect, field-notes §D).
2. workflows/api/h3_effects_t2va.json runs from its CLIPLoader (replaced by that CLIP) through H3KitEffectPrompt into
   the host's MiniMaxH3ImageToVideo, once as shipped (strength 1.0) and once with strength 0.5; the conditioning is
   compared position by position with the host's own pieces: the token rows of the text before the marker (as the
   host's inner SDTokenizer cuts it), the file's rows x strength, the token rows of the text after it.
3. H3KitEffectSplice on the same CLIP: its cross-check with the encoder's embedding loader and its conditioning.
4. tests/h3_standins.py against the real classes: call signatures, and outputs once the stand-ins get the real ids
   and the real embedding table.
5. Capabilities (issue 30 rows 6, 8), asked of the host's real tokenizer, never of its version: does it parse
   embedding: markers; how H3KitEffectPrompt then judges a graph whose encoder bypasses its clip, with and without a
   clip; how it splits H3's dialogue tokens. The upstream oracle for dialogue (what Comfy-Org/ComfyUI#15808 does):
   the host's own tokenizer whose inner Qwen tokenizer (a deep copy) is given the seven tokens as additional special
   tokens. H3Kit's copy (effect_tokens.with_dialogue_tokens), H3KitRef2VAPrompt's and H3KitEffectPrompt's clip outputs
   must give that oracle's ids for the shipped Ref2VA prompts and more, and the host's own ids where there is no
   dialogue.
6. Typed markers (issue 33 item 4), last, in the same embeddings folder: the clip output of H3KitEffectPrompt given
   to the host's MiniMaxH3ImageToVideo with a prompt whose typed `embedding:` marker names a file of 1,025 rows, of
   200,000 rows (a sparse file), of int64 rows of 2**40 or of NaN rows, and prompts of 17 and of 100,000 markers:
   each must stop with H3Kit's error, never reach the host's load_embed, within seconds and without the memory the
   rows would take (peak RSS before and after); then a 10,000-folder tree: 16 markers cost one walk. Typed markers
   with a comma or a '<Picture 1>' after the name give the ids of the host's own whole-prompt parse.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import resource
import struct
import sys
import time
from pathlib import Path

PACK, WORK = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
sys.path.insert(0, os.getcwd())
sys.path.insert(0, str(PACK / "tests"))
import tiny_h3_text_encoder as tiny  # noqa: E402

tiny.force_cpu()
if importlib.util.find_spec("comfy.text_encoders.minimax") is None:
    print(json.dumps({"skip": "this host has no MiniMax-H3 text encoder (comfy/text_encoders/minimax.py)"}))
    raise SystemExit(0)
import comfy.sd  # noqa: E402
import comfy.sd1_clip  # noqa: E402
import comfy.utils  # noqa: E402
import folder_paths  # noqa: E402
import h3_standins as standins  # noqa: E402
import torch  # noqa: E402
from comfy.text_encoders import minimax  # noqa: E402
from comfy_extras.nodes_minimax_h3 import MiniMaxH3ImageToVideo  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

EFFECT, ROWS = "minimaxh3_bullet_time.safetensors", 94
GRAPH = json.loads((PACK / "workflows" / "api" / "h3_effects_t2va.json").read_text(encoding="utf-8"))
STANDIN_TEXTS = [
    "integrated_multimodal_description: [Shot 1] A kite. embedding:minimaxh3_bullet_time It rises.",
    "A cat sleeps embedding:minimaxh3_bullet_time, then wakes.",
    "A cat embedding:minimaxh3_bullet_time<Picture 1> sits.",
    "A cat,embedding:minimaxh3_bullet_time sits.",
    "A cat embedding:nope sits.\nNext line  with  spaces.",
    "embedding:minimaxh3_bullet_time at the start, then text.",
    "Two: embedding:minimaxh3_bullet_time embedding:minimaxh3_bullet_time done.",
]


def import_pack():
    link_dir = WORK / "pylink"
    link_dir.mkdir(exist_ok=True)
    if not (link_dir / "h3kit").exists():
        (link_dir / "h3kit").symlink_to(PACK, target_is_directory=True)
    sys.path.insert(0, str(link_dir))
    from h3kit.nodes import effects

    return effects


def setup() -> tuple:
    embeddings = WORK / "embeddings"
    embeddings.mkdir(parents=True, exist_ok=True)
    rows = torch.randn(ROWS, 5120, generator=torch.Generator().manual_seed(94)).to(torch.bfloat16)
    save_file({"qwen3vl_32b": rows}, str(embeddings / EFFECT))
    folder_paths.folder_names_and_paths["embeddings"] = ([str(embeddings)], set(folder_paths.supported_pt_extensions))
    texts = [GRAPH["6"]["inputs"]["prompt"], *STANDIN_TEXTS]
    path = WORK / "text_encoders" / "tiny_h3_te_passthrough.safetensors"
    written = tiny.write_text_encoder(path, texts=texts)
    clip = tiny.load_text_encoder(path, folder_paths.get_folder_paths("embeddings"))
    return clip, rows.to(torch.float32), written


def run_shipped_graph(effects, clip, strength: float) -> tuple:
    """Nodes 3 (CLIPLoader -> the tiny CLIP), 6 (H3KitEffectPrompt) and 7 (MiniMaxH3ImageToVideo) of the shipped graph."""
    graph = copy.deepcopy(GRAPH)
    graph["6"]["inputs"]["strength"] = strength
    inputs = {k: v for k, v in graph["6"]["inputs"].items() if k != "clip"}
    text, report, prepared = effects.H3KitEffectPrompt().execute(**inputs, clip=clip, graph=graph, unique_id="6")
    node7 = graph["7"]["inputs"]
    assert node7["prompt"] == ["6", 0] and node7["clip"] == ["6", 2]
    out = MiniMaxH3ImageToVideo.execute(clip=prepared, vae=None, prompt=text, width=node7["width"],
                                        height=node7["height"], length=node7["length"])
    return text, json.loads(report), out.result[0]


def host_ids(clip, text: str) -> list:
    """The host tokenizer's ids for `text`; an embedding row (a host that parses the marker) shows as "row"."""
    return [e[0] if isinstance(e[0], int) else "row" for e in clip.tokenizer.tokenize_with_weights(text)["qwen3vl_32b"][0]]


def embed_rows(clip, ids: list[int]) -> torch.Tensor:
    table = clip.cond_stage_model.qwen3vl_32b.transformer.model.embed_tokens.weight
    return table[torch.tensor(ids, dtype=torch.long)].to(torch.float32)


def check_conditioning(clip, rows, text: str, report: dict, cond: list, strength: float) -> dict:
    tensor, extras = cond[0][0], cond[0][1]
    start = report["effects"][0]["token_index"]
    head, _, tail = text.partition("embedding:minimaxh3_bullet_time")
    inner = clip.tokenizer.qwen3vl_32b  # the host's SDTokenizer: how it cuts the text around a marker
    before = [e[0] for e in inner.tokenize_with_weights(head, disable_weights=True)[0]]
    after = [e[0] for e in inner.tokenize_with_weights(" ".join(tail.split()), disable_weights=True)[0]]
    native = inner.tokenize_with_weights(text, disable_weights=True)[0]  # the newer hosts' whole-prompt parse
    return {
        "shape": list(tensor.shape), "token_index": start, "before_tokens": len(before), "after_tokens": len(after),
        "prompt_tokens": report["prompt_tokens"], "markers_resolved_by": report["markers_resolved_by"],
        "before_equal": bool(torch.equal(tensor[0, :start], embed_rows(clip, before))),
        "rows_equal_strength_once": bool(torch.equal(tensor[0, start:start + ROWS], rows * strength)),
        "after_equal": bool(torch.equal(tensor[0, start + ROWS:], embed_rows(clip, after))),
        "native_parse_length": len(native),
        "native_rows_at_same_index": all(torch.is_tensor(e[0]) for e in native[start:start + ROWS]),
        "tags_all_text": bool(torch.equal(extras["minimax_token_tags"], torch.ones(tensor.shape[1], dtype=torch.long))),
        "outer_reads_marker_as_text": not any(torch.is_tensor(e[0]) for e in
                                              clip.tokenizer.tokenize_with_weights(text)["qwen3vl_32b"][0]),
        "literal_marker_ids": host_ids(clip, " embedding:minimaxh3_bullet_time"),
    }


def check_splice(effects, clip, rows) -> dict:
    prompt = GRAPH["6"]["inputs"]["prompt"]
    cond, report = effects.H3KitEffectSplice().execute(clip, prompt, EFFECT, "after_first_shot_tag", 1.0)
    report = json.loads(report)
    at = report["insert_at_token"]
    tensor = cond[0][0]
    return {"host_rows": report["host_rows"], "fallbacks": report["fallbacks"], "insert_at_token": at,
            "shape": list(tensor.shape), "tokens_before": report["tokens_before"],
            "rows_equal": bool(torch.equal(tensor[0, at:at + ROWS], rows)),
            "prefix_ids": len(host_ids(clip, "integrated_multimodal_description: [Shot 1]"))}


def same_entries(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if len(x) != len(y) or x[1:] != y[1:]:
            return False
        if torch.is_tensor(x[0]) or torch.is_tensor(y[0]):
            if not (torch.is_tensor(x[0]) and torch.is_tensor(y[0]) and torch.equal(x[0], y[0])):
                return False
        elif isinstance(x[0], dict) or isinstance(y[0], dict):
            if not (isinstance(x[0], dict) and isinstance(y[0], dict) and x[0].keys() == y[0].keys()
                    and torch.equal(x[0]["data"], y[0]["data"])):
                return False
        elif x[0] != y[0]:
            return False
    return True


def parameters(function) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def check_standins(clip) -> dict:
    real_outer = clip.tokenizer
    real_inner = real_outer.qwen3vl_32b
    ids = lambda text: real_inner.tokenizer(text)["input_ids"]  # noqa: E731 - the real Qwen ids
    folders = folder_paths.get_folder_paths("embeddings")
    # The stand-in of this host: 0.33.0 reads markers as text, a host with #15697 parses them (its capability, asked)
    parses = any(torch.is_tensor(e[0]) for e in real_outer.tokenize_with_weights(
        "x embedding:minimaxh3_bullet_time")["qwen3vl_32b"][0])
    stand_outer = standins.StandInMiniMaxH3Tokenizer(folders, ids=ids, parse_markers=parses)
    stand_native = standins.StandInMiniMaxH3Tokenizer(folders, ids=ids, parse_markers=True)
    images = [torch.rand(1, 32, 32, 3), torch.rand(1, 48, 32, 3)]
    refs = [{"type": "image", "data": images[0]}, {"type": "audio"},
            {"type": "video", "data": torch.rand(3, 32, 32, 3), "timestamps": [0.0, 0.5, 1.0]}]
    outer, inner, native, word_ids = [], [], [], []
    for text in STANDIN_TEXTS:
        for kwargs in ({}, {"images": images}, {"minimax_ref_items": refs}):
            outer.append(same_entries(stand_outer.tokenize_with_weights(text, **kwargs)["qwen3vl_32b"][0],
                                      real_outer.tokenize_with_weights(text, **kwargs)["qwen3vl_32b"][0]))
        inner.append(same_entries(stand_outer.qwen3vl_32b.tokenize_with_weights(text, disable_weights=True)[0],
                                  real_inner.tokenize_with_weights(text, disable_weights=True)[0]))
        word_ids.append(same_entries(
            stand_outer.qwen3vl_32b.tokenize_with_weights(text, return_word_ids=True, disable_weights=True)[0],
            real_inner.tokenize_with_weights(text, return_word_ids=True, disable_weights=True)[0]))
        native.append(same_entries(stand_native.tokenize_with_weights(text)["qwen3vl_32b"][0],
                                   real_inner.tokenize_with_weights(text, disable_weights=True)[0]))
    oracle, _ = upstream_oracle(real_outer)
    stand_upstream = standins.StandInMiniMaxH3Tokenizer(folders, ids=ids, parse_markers=parses, dialogue=True)
    dialogue = [same_entries(stand_upstream.tokenize_with_weights(text)["qwen3vl_32b"][0],
                             oracle.tokenize_with_weights(text)["qwen3vl_32b"][0]) for text in DIALOGUE_TEXTS]
    table = clip.cond_stage_model.qwen3vl_32b.transformer.model.embed_tokens.weight.detach()
    stand_clip = standins.StandInCLIP(stand_native, standins.StandInH3Encoder(table, "passthrough"))
    encodings = []
    for text in STANDIN_TEXTS[:2]:  # each encode casts the whole token table to fp32 (manual_cast): a few only
        tokens = stand_native.tokenize_with_weights(text)
        real = clip.encode_from_tokens_scheduled(tokens)[0]
        ours = stand_clip.encode_from_tokens_scheduled(tokens)[0]
        encodings.append(bool(torch.equal(real[0], ours[0]))
                         and bool(torch.equal(real[1]["minimax_token_tags"], ours[1]["minimax_token_tags"])))
    pairs = {
        "SDTokenizer.tokenize_with_weights": (standins.StandInSDTokenizer.tokenize_with_weights,
                                              comfy.sd1_clip.SDTokenizer.tokenize_with_weights),
        "MiniMaxH3Tokenizer.tokenize_with_weights": (standins.StandInMiniMaxH3Tokenizer.tokenize_with_weights,
                                                     minimax.MiniMaxH3Tokenizer.tokenize_with_weights),
        "CLIP.tokenize": (standins.StandInCLIP.tokenize, comfy.sd.CLIP.tokenize),
        "CLIP.encode_from_tokens_scheduled": (standins.StandInCLIP.encode_from_tokens_scheduled,
                                              comfy.sd.CLIP.encode_from_tokens_scheduled),
        "CLIP.clone": (standins.StandInCLIP.clone, comfy.sd.CLIP.clone),
    }
    signatures = {name: parameters(ours) == parameters(real) for name, (ours, real) in pairs.items()}
    init_prefix = parameters(minimax.MiniMaxH3Tokenizer.__init__)
    signatures["MiniMaxH3Tokenizer.__init__"] = parameters(standins.StandInMiniMaxH3Tokenizer.__init__)[
        :len(init_prefix)] == init_prefix
    return {"outer": outer, "inner": inner, "word_ids": word_ids, "native": native, "encodings": encodings,
            "dialogue": dialogue, "host_parses_markers": parses,
            "signatures": signatures, "inner_class": type(real_inner).__name__,
            "tokenizer_files": sorted(os.listdir(Path(inspect.getfile(type(real_inner))).parent / "qwen25_tokenizer"))}


DIALOGUE_TEXTS = [
    "<Subject 2> (S1) says warmly, <d>[Chinese] 这么巧，你也来买水果？</d>\n[Shot 3] laughs, <d>[English] Hi.</d> Ok.",
    "a <d> b </d>c<d></d>  <|cutoff|>\n<|lyrics_start|>la la<|lyrics_end|><|caption_start|>x<|caption_end|>",
    "A kite. embedding:minimaxh3_bullet_time says <d>[English] Look up!</d> It rises.",
    "no dialogue here, only [Shot 1] and <Picture 1>.",
]


def host_ids_of(tokenizer, text: str, **kwargs) -> list:
    return [e[0] if isinstance(e[0], int) else "row" for e in tokenizer.tokenize_with_weights(text, **kwargs)[
        "qwen3vl_32b"][0]]


def upstream_oracle(outer):
    """The host's tokenizer as Comfy-Org/ComfyUI#15808 makes it: its inner Qwen tokenizer knows the seven tokens."""
    tokens = list(json.loads((PACK / "tests" / "data" / "h3_dialogue_tokens.json").read_text())["tokens"])
    inner = copy.copy(outer.qwen3vl_32b)
    inner.tokenizer = copy.deepcopy(inner.tokenizer)
    inner.tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    oracle = copy.copy(outer)
    oracle.qwen3vl_32b = inner
    return oracle, {token: inner.tokenizer.convert_tokens_to_ids(token) for token in tokens}


def shipped_ref2va_prompts() -> list[str]:
    from h3kit.nodes.ref2va import H3KitRef2VAPrompt

    prompts = []
    for name in ("h3_ref2va_two_characters", "h3_ref2va_two_stage"):
        graph = json.loads((PACK / "workflows" / "api" / f"{name}.json").read_text(encoding="utf-8"))
        inputs = next(n["inputs"] for n in graph.values() if n["class_type"] == "H3KitRef2VAPrompt")
        prompts.append(H3KitRef2VAPrompt().compose(**{k: v for k, v in inputs.items() if k != "clip"})[0])
    return prompts


def check_dialogue(effects, clip) -> dict:
    from h3kit.nodes import effect_tokens as et
    from h3kit.nodes.ref2va import H3KitRef2VAPrompt

    oracle, oracle_table = upstream_oracle(clip.tokenizer)
    prepared = et.with_dialogue_tokens("probe", clip.tokenizer)
    ref2va = shipped_ref2va_prompts()
    texts = ref2va + DIALOGUE_TEXTS
    found = et.dialogue_capability("probe", clip.tokenizer)
    graph = json.loads((PACK / "workflows" / "api" / "h3_ref2va_two_characters.json").read_text(encoding="utf-8"))
    node_id, node = next((k, n) for k, n in graph.items() if n["class_type"] == "H3KitRef2VAPrompt")
    prompt, report, out = H3KitRef2VAPrompt().compose(**{k: v for k, v in node["inputs"].items() if k != "clip"},
                                                      clip=clip, graph=graph, unique_id=node_id)
    upstream_prompt, upstream_report, upstream_out = H3KitRef2VAPrompt().compose(
        **{k: v for k, v in node["inputs"].items() if k != "clip"}, clip=_with_tokenizer(clip, oracle))
    audio_ref = [{"type": "audio"}]
    text = "integrated_multimodal_description: [Shot 1] A kite rises. " + DIALOGUE_TEXTS[0]
    fx_text, fx_report, fx_clip = effects.H3KitEffectPrompt().execute(text, EFFECT, clip=clip)
    fx_ids = host_ids_of(fx_clip.tokenizer, fx_text)
    return {
        "oracle_table": oracle_table,
        "host_ids": found.ids, "host_native": found.native,
        "oracle_native": et.dialogue_capability("probe", oracle).native,
        "prepared_native": et.dialogue_capability("probe", prepared).native,
        "prepared_equals_oracle": [host_ids_of(prepared, t) == host_ids_of(oracle, t) for t in texts],
        "host_differs_from_oracle": [host_ids_of(clip.tokenizer, t) != host_ids_of(oracle, t) for t in texts],
        "no_dialogue_unchanged": host_ids_of(prepared, DIALOGUE_TEXTS[-1]) == host_ids_of(clip.tokenizer,
                                                                                          DIALOGUE_TEXTS[-1]),
        "shipped_prompt_ids": host_ids_of(prepared, ref2va[0]).count(oracle_table["<d>"]),
        "ref2va_report": json.loads(report)["dialogue_tokens"], "ref2va_warnings": json.loads(report)["warnings"],
        "ref2va_clip_equals_oracle": host_ids_of(out.tokenizer, prompt, minimax_ref_items=audio_ref)
        == host_ids_of(oracle, prompt, minimax_ref_items=audio_ref),
        "ref2va_clip_is_input_on_upstream": upstream_out.tokenizer is oracle and upstream_prompt == prompt,
        "ref2va_upstream_report": json.loads(upstream_report)["dialogue_tokens"],
        "effect_report": json.loads(fx_report)["dialogue_tokens"],
        # upstream's whole-prompt parse (the inner SDTokenizer: markers to rows, dialogue to its ids)
        "effect_equals_upstream": fx_ids == [e[0] if isinstance(e[0], int) else "row" for e in
                                             oracle.qwen3vl_32b.tokenize_with_weights(fx_text, disable_weights=True)[0]],
        "effect_rows": fx_ids.count("row"),
    }


def _with_tokenizer(clip, tokenizer):
    clone = clip.clone()
    clone.tokenizer = tokenizer
    return clone


def check_marker_capability(effects, clip) -> dict:
    """What the host's tokenizer does with a marker, and what H3KitEffectPrompt makes of a graph whose encoder takes
    the loader's clip (with and without the node's own clip input)."""
    from h3kit.nodes import effect_tokens as et

    graph = copy.deepcopy(GRAPH)
    graph["7"]["inputs"]["clip"] = graph["6"]["inputs"]["clip"]  # the encoder bypasses the effect prompt's clip
    inputs = {k: v for k, v in graph["6"]["inputs"].items() if k != "clip"}
    outcomes = {}
    for with_clip in (True, False):
        if not with_clip:
            del graph["6"]["inputs"]["clip"]
        try:
            _, report, _ = effects.H3KitEffectPrompt().execute(**inputs, clip=clip if with_clip else None,
                                                               graph=graph, unique_id="6")
            report = json.loads(report)
            outcomes[f"clip_{with_clip}"] = {"ok": True, "encoders": report.get("encoders"),
                                             "markers_resolved_by": report["markers_resolved_by"],
                                             "warnings": report["warnings"]}
        except Exception as exc:  # noqa: BLE001 - the node's error is the result
            outcomes[f"clip_{with_clip}"] = {"ok": False, "error": str(exc)}
    return {"parses_markers": et.outer_parses_markers("probe", clip.tokenizer, "embedding:minimaxh3_bullet_time"),
            **outcomes}


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _sparse_rows(path: Path, rows: int) -> None:
    header = json.dumps({"qwen3vl_32b": {"dtype": "BF16", "shape": [rows, 5120],
                                         "data_offsets": [0, rows * 5120 * 2]}}).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + rows * 5120 * 2)


def check_typed_markers(effects, clip) -> dict:
    """Typed markers through the clip output on the host's own MiniMaxH3ImageToVideo (see the module, step 6)."""
    folder = WORK / "embeddings"
    save_file({"qwen3vl_32b": torch.zeros(1025, 5120)}, str(folder / "typed_1025.safetensors"))
    save_file({"qwen3vl_32b": torch.full((4, 5120), 2**40, dtype=torch.int64)}, str(folder / "typed_int64.safetensors"))
    save_file({"qwen3vl_32b": torch.full((2, 5120), float("nan"))}, str(folder / "typed_nan.safetensors"))
    _sparse_rows(folder / "typed_200000.safetensors", 200_000)
    node7 = GRAPH["7"]["inputs"]
    prompt = GRAPH["6"]["inputs"]["prompt"]
    _, _, prepared = effects.H3KitEffectPrompt().execute(prompt, EFFECT, clip=clip)
    host_loads = []
    real_load_embed = comfy.sd1_clip.load_embed

    def counted(name, *args, **kwargs):
        host_loads.append(name)
        return real_load_embed(name, *args, **kwargs)

    comfy.sd1_clip.load_embed = counted

    def encode(text: str) -> dict:
        before, started = _peak_rss_mib(), time.monotonic()
        try:
            MiniMaxH3ImageToVideo.execute(clip=prepared, vae=None, prompt=text, width=node7["width"],
                                          height=node7["height"], length=node7["length"])
            outcome = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - the node's error is the result
            outcome = {"ok": False, "error": str(exc), "type": type(exc).__name__}
        return {**outcome, "seconds": round(time.monotonic() - started, 2),
                "peak_rss_growth_mib": round(_peak_rss_mib() - before, 1)}

    result = {}
    try:
        for name in ("typed_1025", "typed_200000", "typed_int64", "typed_nan"):
            result[name] = encode(f"{prompt} Then embedding:{name} here.")
        result["markers_17"] = encode(prompt + " x embedding:minimaxh3_bullet_time" * 17)
        result["markers_100000"] = encode(prompt + " embedding:minimaxh3_bullet_time" * 100_000)
        result["host_loads_during_attacks"] = list(host_loads)
        inner = clip.tokenizer.qwen3vl_32b
        same = []
        for tail in (" Then embedding:minimaxh3_bullet_time, it rises.", " A embedding:minimaxh3_bullet_time<Picture 1> b"):
            ours = host_ids_of(prepared.tokenizer, prompt + tail)
            theirs = [e[0] if isinstance(e[0], int) else "row" for e in
                      inner.tokenize_with_weights(prompt + tail, disable_weights=True)[0]]
            same.append(ours == theirs)
        result["typed_equals_host_parse"] = same
        tree = folder / "tree"
        for i in range(10_000):
            (tree / f"{i // 100:02d}" / f"{i % 100:02d}").mkdir(parents=True, exist_ok=True)
        scanned = []
        real_scandir = os.scandir
        os.scandir = lambda path: scanned.append(path) or real_scandir(path)
        try:
            started = time.monotonic()
            tokens = prepared.tokenize(prompt + " x embedding:minimaxh3_bullet_time" * 16)["qwen3vl_32b"][0]
            result["tree_16_markers"] = {"seconds": round(time.monotonic() - started, 2), "folders_read": len(scanned),
                                         "rows": sum(torch.is_tensor(e[0]) for e in tokens)}
        finally:
            os.scandir = real_scandir
        result["host_loads_total"] = len(host_loads)
    finally:
        comfy.sd1_clip.load_embed = real_load_embed
    return result


def main() -> None:
    started = time.monotonic()
    seconds = {}

    def lap(name: str) -> None:
        seconds[name] = round(time.monotonic() - started - sum(seconds.values()), 1)

    effects = import_pack()
    lap("import")
    clip, rows, written = setup()
    lap("write_and_load_encoder")
    result = {"written": written, "encoder_classes": [c.__name__ for c in type(clip.cond_stage_model).__mro__[:2]],
              "tokenizer_class": type(clip.tokenizer).__name__}
    for strength in (1.0, 0.5):
        text, report, cond = run_shipped_graph(effects, clip, strength)
        result[f"strength_{strength}"] = {"prompt": text, **check_conditioning(clip, rows, text, report, cond, strength)}
    lap("shipped_graph")
    result["splice"] = check_splice(effects, clip, rows)
    result["standins"] = check_standins(clip)
    lap("splice_and_standins")
    result["markers"] = check_marker_capability(effects, clip)
    result["dialogue"] = check_dialogue(effects, clip)
    lap("capabilities")
    result["typed_markers"] = check_typed_markers(effects, clip)
    lap("typed_markers")
    print(json.dumps({**result, "seconds": seconds}))


if __name__ == "__main__":
    main()
