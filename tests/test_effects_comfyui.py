"""Tier (b): effects on real ComfyUI hosts (issues 6, 24 and 33: typed markers pass the effect checks).

On a server: H3KitEffectPrompt with synthetic effect files in its embeddings folder. In the host's python
(tests/effects_host_probe.py, every checkout in COMFYUI_DIRS that has the MiniMax-H3 text encoder): the shipped
effects graph's conditioning on a tiny host-built H3 text encoder, H3KitEffectSplice's cross-check, and the tier-(a)
stand-ins (tests/h3_standins.py) against the real classes. The Qwen tokenizer files the H3 tokenizer reads
(comfy/text_encoders/qwen25_tokenizer) are in the host checkout; no test needs the missing qwen35 vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from subprocess import run as run_process

import pytest
import torch
from comfyui_host import NATIVE_H3, execution_errors, host_checkout, host_id, host_params
from safetensors.torch import save_file

pytestmark = pytest.mark.comfyui
PACK_ROOT = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("effects_host_probe.py")
ROWS = 94  # the probe's minimaxh3_bullet_time: the published row count of that effect (field-notes §D)

PROMPT = "integrated_multimodal_description: [Shot 1] A kite rises over a beach. The wind drops."
FILES = {"h3kit_fx_good.safetensors": (9, 5120), "h3kit_fx_t5.safetensors": (50, 4096)}


@pytest.fixture
def server_effects(comfyui_server):
    """Synthetic effect files in the server's models/embeddings, removed afterwards so other tests see the
    folder as it was (the combo lists whatever is there)."""
    folder = comfyui_server.base_dir / "models" / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, shape in FILES.items():
        save_file({"qwen3vl_32b": torch.randn(*shape, generator=torch.Generator().manual_seed(0))}, str(folder / name))
        paths.append(folder / name)
    yield comfyui_server
    for path in paths:
        path.unlink(missing_ok=True)


def effect_graph(effect: str, position: str = "after_first_shot_tag") -> dict:
    return {
        "1": {"class_type": "H3KitEffectPrompt",
              "inputs": {"prompt": PROMPT, "effect": effect, "effect_2": "none", "effect_3": "none",
                         "position": position, "strict": False}},
        "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
        "3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}},
    }


def test_effect_combo_lists_the_server_embeddings_folder(server_effects):
    options = server_effects.object_info()["H3KitEffectPrompt"]["input"]["required"]["effect"][0]
    assert options[0] == "none" and set(FILES) <= set(options)


@pytest.mark.parametrize(("position", "expected"), [
    ("after_first_shot_tag",
     "integrated_multimodal_description: [Shot 1] embedding:h3kit_fx_good A kite rises over a beach. The wind drops."),
    ("end", PROMPT + " embedding:h3kit_fx_good"),
])
def test_effect_prompt_runs_on_the_server(server_effects, position, expected):
    if server_effects.has(NATIVE_H3):
        pytest.skip(f"{server_effects.host.name} has a MiniMax-H3 tokenizer: see the no-clip test below")
    entry = server_effects.run_graph(effect_graph("h3kit_fx_good.safetensors", position))
    assert entry["status"]["status_str"] == "success", entry["status"]
    (text,) = entry["outputs"]["2"]["text"]
    assert text == expected
    report = json.loads(entry["outputs"]["3"]["text"][0])
    assert report["effects"][0]["rows"] == 9 and report["effects"][0]["width"] == 5120
    assert report["position_used"] == position and report["markers_resolved_by"] == "not checked"


def test_f15_without_clip_a_native_h3_host_is_asked_whether_it_parses_markers(server_effects):
    # No clip wired: the node asks this server's own MiniMax-H3 tokenizer. One that reads the marker as text
    # (ComfyUI 0.33.0) stops the run naming the fix; one that parses it passes, saying it checked.
    server_effects.require(NATIVE_H3)
    entry = server_effects.run_graph(effect_graph("h3kit_fx_good.safetensors"))
    if entry["status"]["status_str"] == "error":
        (error,) = execution_errors(entry)
        assert error["node_type"] == "H3KitEffectPrompt"
        assert "reads embedding: markers as plain text" in error["exception_message"]
        assert "'clip' output" in error["exception_message"]
    else:
        report = json.loads(entry["outputs"]["3"]["text"][0])
        assert report["markers_resolved_by"] == "the host's MiniMax-H3 tokenizer (checked: it parses markers)"


def test_wrong_width_effect_fails_loudly_on_the_server(server_effects):
    entry = server_effects.run_graph(effect_graph("h3kit_fx_t5.safetensors"))
    assert entry["status"]["status_str"] == "error"
    errors = execution_errors(entry)
    assert errors and "4096" in errors[0]["exception_message"] and "T5-XXL" in errors[0]["exception_message"]
    assert errors[0]["node_type"] == "H3KitEffectPrompt"


# ------------------------------------------------------------------------------------------- in the host's python
@pytest.fixture(scope="module", params=host_params(), ids=host_id)
def probe(request, tmp_path_factory):
    folder, python = host_checkout(request.param)
    work = tmp_path_factory.mktemp("effects_probe")
    done = run_process([python, str(PROBE), str(PACK_ROOT), str(work)], cwd=folder, capture_output=True, text=True,
                       timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(f"{Path(folder).name}: {result['skip']}")
    return result


def test_the_tiny_encoder_loads_through_the_hosts_minimax_path(probe):
    assert probe["encoder_classes"][1] == "MiniMaxH3TEModel" and probe["tokenizer_class"] == "MiniMaxH3Tokenizer"
    assert probe["written"]["config"]["hidden_size"] == 5120 and probe["written"]["kind"] == "passthrough"


@pytest.mark.parametrize("strength", ["1.0", "0.5"])
def test_f15_shipped_effects_graph_carries_the_rows_after_shot_1_scaled_once(probe, strength):
    run = probe[f"strength_{strength}"]
    assert run["prompt"].startswith("integrated_multimodal_description: [Shot 1] embedding:minimaxh3_bullet_time A ")
    # documented position: right after the tokens of "integrated_multimodal_description: [Shot 1] "
    assert run["token_index"] == run["before_tokens"] == 13
    assert run["shape"] == [1, 13 + ROWS + run["after_tokens"], 5120] and run["prompt_tokens"] == run["shape"][1]
    assert run["before_equal"] and run["after_equal"]
    assert run["rows_equal_strength_once"], "conditioning rows != file rows x strength"
    assert run["tags_all_text"]
    # the newer hosts' own parse of the same prompt puts the rows at the same place, same length
    assert run["native_parse_length"] == run["shape"][1] and run["native_rows_at_same_index"]


def test_f15_h3kit_reports_what_the_hosts_own_tokenizer_does_with_the_marker(probe):
    # Capability, not version: 0.33.0 reads the marker as text; a host with Comfy-Org/ComfyUI#15697 (yzkee @783545f6)
    # parses it. Either way the clip output carries the rows (test above); the report names the host's behaviour.
    run = probe["strength_1.0"]
    if run["outer_reads_marker_as_text"]:
        assert len(run["literal_marker_ids"]) > 1
        assert run["markers_resolved_by"] == \
            "H3Kit's clip output (this host's MiniMax-H3 tokenizer reads markers as plain text)"
    else:
        assert run["markers_resolved_by"].startswith("the host's MiniMax-H3 tokenizer (it parses markers)")
    assert probe["markers"]["parses_markers"] is not run["outer_reads_marker_as_text"]


def test_f15_an_encoder_bypassing_the_effect_prompts_clip_is_judged_by_the_hosts_tokenizer(probe):
    # Issue 30 row 8 on the real classes: where the host reads markers as text, the node stops naming the fix; where
    # it parses them, the graph works as wired and the report says which clip each encoder uses.
    markers = probe["markers"]
    for with_clip in ("clip_True", "clip_False"):
        outcome = markers[with_clip]
        if markers["parses_markers"]:
            assert outcome["ok"] and not [w for w in outcome["warnings"] if "clip" in w], outcome
            assert outcome["encoders"] == {"7": "MiniMaxH3ImageToVideo: clip of node 3 (this host's MiniMax-H3 "
                                                "tokenizer parses the markers itself)"}, outcome
        else:
            assert not outcome["ok"] and "reads embedding: markers as plain text" in outcome["error"], outcome
            assert "'clip' output" in outcome["error"]


def test_splice_cross_check_works_against_the_real_tokenizer(probe):
    splice = probe["splice"]
    assert splice["host_rows"] == f"{ROWS} rows equal to the encoder's embedding loader's embedding:minimaxh3_bullet_time"
    assert splice["fallbacks"] == [] and splice["rows_equal"]
    assert splice["insert_at_token"] == splice["prefix_ids"]
    assert splice["shape"] == [1, splice["tokens_before"] + ROWS, 5120]


def test_standins_match_the_real_classes(probe):
    standins = probe["standins"]
    assert standins["signatures"] == dict.fromkeys(standins["signatures"], True)
    for kind in ("outer", "inner", "word_ids", "native", "encodings"):
        assert standins[kind] and all(standins[kind]), (kind, standins[kind])
    assert standins["inner_class"] == "Qwen3VLSDTokenizer"
    assert {"vocab.json", "merges.txt"} <= set(standins["tokenizer_files"])


# ------------------------------------------------------------------------------------------- dialogue tokens (row 6)
UPSTREAM_IDS = {"<d>": 151669, "</d>": 151670, "<|cutoff|>": 151671, "<|lyrics_start|>": 151672,
                "<|lyrics_end|>": 151673, "<|caption_start|>": 151674, "<|caption_end|>": 151675}


def test_the_dialogue_token_ids_are_what_the_hosts_own_qwen_tokenizer_assigns_upstreams_seven(probe):
    assert probe["dialogue"]["oracle_table"] == UPSTREAM_IDS
    assert probe["dialogue"]["oracle_native"]  # the capability check recognises an upstream (#15808) tokenizer


def test_h3kits_copy_reads_dialogue_with_upstreams_ids_on_the_real_tokenizer(probe):
    dialogue = probe["dialogue"]
    assert dialogue["prepared_native"] and all(dialogue["prepared_equals_oracle"]), dialogue
    assert dialogue["no_dialogue_unchanged"]
    assert dialogue["shipped_prompt_ids"] == 2  # the shipped Ref2VA prompt's two <d> lines: two 151669 ids


def test_the_ref2va_prompt_nodes_clip_output_on_the_real_tokenizer(probe):
    dialogue = probe["dialogue"]
    assert dialogue["ref2va_clip_equals_oracle"] and dialogue["ref2va_warnings"] == []
    assert dialogue["ref2va_clip_is_input_on_upstream"]
    assert dialogue["ref2va_upstream_report"] == ("the text encoder's tokenizer reads <d>, </d> as one token each "
                                                  "(151669, 151670, as upstream Comfy-Org/ComfyUI#15808)")
    if dialogue["host_native"]:
        assert dialogue["ref2va_report"] == dialogue["ref2va_upstream_report"]
    else:
        # 0.33.0 and yzkee @783545f6: "<d>" is two BPE pieces ('<d', '>'), "</d>" three ('</', 'd', '>')
        assert dialogue["host_ids"]["<d>"] == [90707, 29] and len(dialogue["host_ids"]["</d>"]) > 1
        assert all(dialogue["host_differs_from_oracle"][:-1]) and not dialogue["host_differs_from_oracle"][-1]
        assert dialogue["ref2va_report"].startswith("fixed by this node's clip output: this host's tokenizer splits "
                                                    "them into BPE pieces (<d> -> [90707, 29], </d> -> ")


def test_the_effect_prompts_clip_output_reads_markers_and_dialogue_as_upstream_on_the_real_tokenizer(probe):
    dialogue = probe["dialogue"]
    assert dialogue["effect_equals_upstream"] and dialogue["effect_rows"] == ROWS
    assert ("fixed by this node's clip output" in dialogue["effect_report"]) is not dialogue["host_native"]


def test_the_upstream_standin_matches_the_real_tokenizer_given_upstreams_tokens(probe):
    assert probe["standins"]["dialogue"] and all(probe["standins"]["dialogue"])


# ------------------------------------------------------------------------------------------- typed markers (issue 33)
@pytest.mark.parametrize(("case", "message"), [
    ("typed_1025", "the tensor has 1,025 rows; an effect has at most 1,024"),
    ("typed_200000", "the tensor has 200,000 rows; an effect has at most 1,024"),
    ("typed_int64", "has dtype I64, not a float type"),
    ("typed_nan", "10,240 of its 10,240 values are NaN or infinite"),
    ("markers_17", "the prompt holds 17 embedding: markers; a prompt takes at most 16"),
    ("markers_100000", "the prompt holds 100,000 embedding: markers; a prompt takes at most 16"),
])
def test_typed_markers_on_the_real_tokenizer_pass_the_effect_checks(probe, case, message):
    # The clip output given to the host's MiniMaxH3ImageToVideo with a typed marker in its prompt: H3Kit's error, in
    # seconds, without the rows' memory (the old code spliced the 200,000 rows: +4.3 GiB, 70 s), never the host's loader.
    outcome = probe["typed_markers"][case]
    assert not outcome["ok"] and outcome["type"] == "H3KitInputError" and message in outcome["error"], outcome
    assert outcome["error"].startswith("H3KitEffectPrompt: input 'prompt'")
    assert outcome["seconds"] < 5 and outcome["peak_rss_growth_mib"] < 256, outcome
    assert probe["typed_markers"]["host_loads_during_attacks"] == []


def test_a_10000_folder_tree_is_walked_once_for_16_typed_markers(probe):
    tree = probe["typed_markers"]["tree_16_markers"]
    assert tree["rows"] == 16 * ROWS and tree["folders_read"] <= 10_000 and tree["seconds"] < 30, tree


def test_typed_markers_give_the_ids_of_the_hosts_own_parse(probe):
    assert all(probe["typed_markers"]["typed_equals_host_parse"]), probe["typed_markers"]
