"""Issue 30 row 6, tier (a): H3's dialogue tokens (<d> ... </d> and five more) through the MiniMax-H3 tokenizer.

Stand-ins (tests/h3_standins.py) follow the real classes: dialogue=False is ComfyUI 0.33.0 / yzkee @783545f6 (the
Qwen text tokenizer splits `<d>` into pieces), dialogue=True is upstream after Comfy-Org/ComfyUI#15808 (one id each).
The same checks on the hosts' real tokenizer and its real ids: tests/test_effects_comfyui.py (tier b).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from h3_standins import KEY, StandInMiniMaxH3Tokenizer, h3_clip, hash_ids
from h3kit.checks.rules_lints import lint_dialogue_tokens_reach_the_encoder
from h3kit.nodes import effect_tokens as et
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.effects import H3KitEffectPrompt
from h3kit.nodes.ref2va import H3KitRef2VAPrompt
from safetensors.torch import save_file

PACK = Path(et.__file__).resolve().parents[1]
SHIPPED = {name: json.loads((PACK / "workflows" / "api" / f"{name}.json").read_text(encoding="utf-8"))
           for name in ("h3_ref2va_two_characters", "h3_ref2va_two_stage")}
LINE = "<Subject 2> (S1) says warmly, <d>[Chinese] 这么巧，你也来买水果？</d> He smiles."
UPSTREAM = {"<d>": 151669, "</d>": 151670, "<|cutoff|>": 151671, "<|lyrics_start|>": 151672,
            "<|lyrics_end|>": 151673, "<|caption_start|>": 151674, "<|caption_end|>": 151675}


def ids(clip, text: str, **kwargs) -> list:
    return [entry[0] for entry in clip.tokenize(text, **kwargs)[KEY][0]]


def ref2va_inputs(name: str = "h3_ref2va_two_characters") -> dict:
    node = next(n for n in SHIPPED[name].values() if n["class_type"] == "H3KitRef2VAPrompt")
    return {k: v for k, v in node["inputs"].items() if k != "clip"}


def compose(clip=None, **kwargs) -> tuple[str, dict, object]:
    prompt, report, out = H3KitRef2VAPrompt().compose(**ref2va_inputs(), clip=clip, **kwargs)
    return prompt, json.loads(report), out


# ------------------------------------------------------------------------------------------- capability
@pytest.mark.parametrize("parse_markers", [False, True])
def test_the_033_tokenizer_splits_dialogue_tokens_into_pieces_and_upstream_does_not(parse_markers):
    split = et.dialogue_capability("n", StandInMiniMaxH3Tokenizer(None, parse_markers=parse_markers))
    assert not split.native and split.split == list(UPSTREAM)
    assert split.ids["<d>"] == hash_ids("<d>") and len(split.ids["<d>"]) == 3
    native = et.dialogue_capability("n", StandInMiniMaxH3Tokenizer(None, parse_markers=parse_markers, dialogue=True))
    assert native.native and native.ids == {token: [token_id] for token, token_id in UPSTREAM.items()}


@pytest.mark.parametrize("parse_markers", [False, True])
def test_the_copy_reads_dialogue_exactly_as_upstream_and_everything_else_as_the_host(parse_markers):
    host = StandInMiniMaxH3Tokenizer(None, parse_markers=parse_markers)
    upstream = StandInMiniMaxH3Tokenizer(None, parse_markers=parse_markers, dialogue=True)
    copy_ = et.with_dialogue_tokens("n", host)
    texts = [LINE, "<|lyrics_start|>la la<|lyrics_end|><|cutoff|>", "no dialogue at all.", "<d></d>", ""]
    for text in texts:
        assert copy_.tokenize_with_weights(text)[KEY][0] == upstream.tokenize_with_weights(text)[KEY][0], text
    assert copy_.tokenize_with_weights("no dialogue.")[KEY] == host.tokenize_with_weights("no dialogue.")[KEY]
    assert isinstance(host.qwen3vl_32b.tokenizer, type(upstream.qwen3vl_32b.tokenizer))  # the host is untouched
    assert et.with_dialogue_tokens("n", copy_) is copy_  # never wrapped twice
    assert copy_.untokenize([(151669, 1.0)]) is not None


def test_the_copy_cuts_the_text_where_a_hugging_face_tokenizer_cuts_at_added_tokens():
    host = StandInMiniMaxH3Tokenizer(None)
    text_tokenizer = host.qwen3vl_32b.tokenizer
    copy_ = et.with_dialogue_tokens("n", host)
    text_tokenizer.calls.clear()
    copy_.tokenize_with_weights("a <d>[English] Hi.</d>b")
    # The segments between the tokens, each on its own, spaces kept (lstrip/rstrip off, as upstream)
    assert text_tokenizer.calls == ["a ", "[English] Hi.", "b"]


# ------------------------------------------------------------------------------------------- the Ref2VA prompt node
def test_ref2va_with_clip_on_a_splitting_host_hands_on_a_clip_that_reads_dialogue_as_upstream():
    clip = h3_clip(None)
    prompt, report, out = compose(clip)
    assert "<d>[Chinese]" in prompt and out is not clip and out.cond_stage_model is clip.cond_stage_model
    assert report["dialogue_tokens"].startswith("fixed by this node's clip output")
    assert "<d> -> " in report["dialogue_tokens"] and "151669, 151670" in report["dialogue_tokens"]
    upstream = h3_clip(None, dialogue=True)
    assert ids(out, prompt) == ids(upstream, prompt) != ids(clip, prompt)
    assert ids(out, prompt).count(151669) == 2 and ids(out, prompt).count(151670) == 2
    refs = [{"type": "image", "data": object()}, {"type": "image", "data": object()}]
    assert ids(out, prompt, minimax_ref_items=refs)[-len(ids(out, prompt)):] == ids(out, prompt)
    assert report["warnings"] == []


def test_ref2va_with_clip_on_an_upstream_host_hands_the_clip_on_unchanged():
    clip = h3_clip(None, dialogue=True)
    _, report, out = compose(clip)
    assert out is clip
    assert report["dialogue_tokens"] == ("the text encoder's tokenizer reads <d>, </d> as one token each (151669, "
                                         "151670, as upstream Comfy-Org/ComfyUI#15808)")


def test_ref2va_without_dialogue_passes_the_clip_through():
    clip = h3_clip(None)
    inputs = ref2va_inputs()
    inputs["shots"] = inputs["shots"].replace("<d>", "").replace("</d>", "")
    _, report, out = H3KitRef2VAPrompt().compose(**{**inputs, "strict": False}, clip=clip)
    assert out is clip and json.loads(report)["dialogue_tokens"] == "none in the prompt"


@pytest.mark.parametrize("dialogue", [False, True])
def test_ref2va_without_clip_asks_this_comfyuis_tokenizer_and_warns_with_the_fix(monkeypatch, dialogue):
    monkeypatch.setattr(et, "served_h3_tokenizer", lambda folders: StandInMiniMaxH3Tokenizer(folders,
                                                                                             dialogue=dialogue))
    _, report, out = compose()
    assert out is None
    if dialogue:
        assert report["warnings"] == [] and "reads <d>, </d> as one token each" in report["dialogue_tokens"]
    else:
        (warning,) = report["warnings"]
        assert "splits <d>, </d> into ordinary BPE pieces" in warning and "#15808" in warning
        assert "connect the text encoder (CLIPLoader) to H3KitRef2VAPrompt's 'clip' input" in warning


def test_ref2va_without_clip_or_host_says_it_did_not_check():
    _, report, out = compose()
    assert out is None and report["warnings"] == []
    (fallback,) = report["fallbacks"]
    assert "how <d>, </d> are tokenized was not checked" in fallback


def test_ref2va_warns_when_the_encoder_bypasses_its_clip_on_a_splitting_host():
    graph = copy.deepcopy(SHIPPED["h3_ref2va_two_characters"])
    ref_id = next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ReferenceToVideo")
    prompt_id = graph[ref_id]["inputs"]["prompt"][0]
    _, report, _ = compose(h3_clip(None), graph=graph, unique_id=prompt_id)
    assert report["warnings"] == []
    graph[ref_id]["inputs"]["clip"] = graph[prompt_id]["inputs"]["clip"]
    _, report, _ = compose(h3_clip(None), graph=graph, unique_id=prompt_id)
    (warning,) = report["warnings"]
    assert f"node {ref_id} (MiniMaxH3ReferenceToVideo) encodes this prompt with another clip" in warning
    _, report, _ = compose(h3_clip(None, dialogue=True), graph=graph, unique_id=prompt_id)
    assert report["warnings"] == []  # nothing to fix on an upstream host


def test_a_tokenizer_that_gives_the_ids_to_other_tokens_is_not_remapped():
    clip = h3_clip(None)
    clip.tokenizer.qwen3vl_32b.inv_vocab = {151669: "<|some_other|>"}
    _, report, out = compose(clip)
    assert out is clip
    (warning,) = report["warnings"]
    assert "cannot map them to H3's ids" in warning and "151669 is '<|some_other|>'" in warning


def test_ref2va_refuses_a_clip_that_is_not_a_comfyui_clip():
    with pytest.raises(H3KitInputError, match="not a ComfyUI CLIP"):
        compose(clip=["5", 0])


# ------------------------------------------------------------------------------------------- the effect prompt node
def test_the_effect_prompts_clip_output_reads_effects_and_dialogue(tmp_path, monkeypatch):
    import torch

    folder = tmp_path / "embeddings"
    folder.mkdir()
    rows = torch.randn(3, 5120, generator=torch.Generator().manual_seed(1))
    save_file({"qwen3vl_32b": rows}, str(folder / "fx_b.safetensors"))
    monkeypatch.setenv("H3KIT_EMBEDDINGS_DIR", str(folder))
    prompt = "integrated_multimodal_description: [Shot 1] A man waves. " + LINE
    text, report, out = H3KitEffectPrompt().execute(prompt, "fx_b.safetensors", clip=h3_clip(folder))
    report = json.loads(report)
    assert report["dialogue_tokens"].startswith("fixed by this node's clip output")
    batch = out.tokenize(text)[KEY][0]
    tokens = [entry[0] for entry in batch]
    start = report["effects"][0]["token_index"]
    assert all(torch.equal(tokens[start + i], rows[i]) for i in range(3))
    ints = [t for t in tokens if isinstance(t, int)]
    assert ints.count(151669) == 1 and ints.count(151670) == 1
    after = tokens[start + 3:]
    upstream = h3_clip(folder, dialogue=True, parse_markers=True)
    assert after == ids(upstream, text.split("embedding:fx_b ", 1)[1])


# ------------------------------------------------------------------------------------------- the offline lint
@pytest.mark.parametrize("name", list(SHIPPED))
def test_the_shipped_ref2va_graphs_pass_the_dialogue_lint(name):
    assert lint_dialogue_tokens_reach_the_encoder(SHIPPED[name], {}) == []


def test_an_encoder_with_the_loaders_clip_gets_a_warning_naming_both_hosts_never_an_error():
    graph = copy.deepcopy(SHIPPED["h3_ref2va_two_characters"])
    ref_id = next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ReferenceToVideo")
    prompt_id = graph[ref_id]["inputs"]["prompt"][0]
    graph[ref_id]["inputs"]["clip"] = graph[prompt_id]["inputs"]["clip"]
    (problem,) = lint_dialogue_tokens_reach_the_encoder(graph, {})
    assert (problem.node_id, problem.input, problem.severity) == (ref_id, "clip", "warning")
    assert "#15808" in problem.message and "0.33.0" in problem.message and "<d>, </d>" in problem.message
    assert f"node {prompt_id}'s 'clip' output" in problem.fix


@pytest.mark.parametrize("through", ["literal", "primitive", "effect_prompt"])
def test_dialogue_typed_or_passed_through_reaches_the_lint(through):
    graph = json.loads((PACK / "workflows" / "api" / "h3_effects_t2va.json").read_text(encoding="utf-8"))
    encoder_id = next(k for k, n in graph.items() if n["class_type"] == "MiniMaxH3ImageToVideo")
    effect_id = next(k for k, n in graph.items() if n["class_type"] == "H3KitEffectPrompt")
    if through == "effect_prompt":
        graph[effect_id]["inputs"]["prompt"] += " " + LINE
        assert lint_dialogue_tokens_reach_the_encoder(graph, {}) == []  # its clip output prepares dialogue
        graph[encoder_id]["inputs"]["clip"] = graph[effect_id]["inputs"]["clip"]
    elif through == "primitive":
        graph["90"] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": LINE}}
        graph[encoder_id]["inputs"].update(prompt=["90", 0], clip=["3", 0])
    else:
        graph[encoder_id]["inputs"].update(prompt=LINE, clip=["3", 0])
    (problem,) = lint_dialogue_tokens_reach_the_encoder(graph, {})
    assert problem.node_id == encoder_id and problem.severity == "warning"


@pytest.mark.parametrize("dialogue", [False, True])
def test_the_splice_node_encodes_dialogue_as_upstream(tmp_path, monkeypatch, dialogue):
    import torch
    from h3kit.nodes.effects import H3KitEffectSplice

    folder = tmp_path / "embeddings"
    folder.mkdir()
    save_file({"qwen3vl_32b": torch.randn(3, 5120)}, str(folder / "fx_b.safetensors"))
    monkeypatch.setenv("H3KIT_EMBEDDINGS_DIR", str(folder))
    clip = h3_clip(folder, dialogue=dialogue)
    prompt = "integrated_multimodal_description: [Shot 1] A man waves. " + LINE
    _, report = H3KitEffectSplice().execute(clip, prompt, "fx_b.safetensors")
    (batch,) = clip.cond_stage_model.encoded
    ints = [entry[0] for entry in batch if isinstance(entry[0], int)]
    assert ints.count(151669) == 1 and ints.count(151670) == 1
    assert json.loads(report)["dialogue_tokens"].startswith(
        "the text encoder's tokenizer reads" if dialogue else "fixed by this node's encoding")
