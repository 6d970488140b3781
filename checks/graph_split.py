"""The two-stage graph cut at the handoff into a stage-1 graph (ends in H3KitSaveDraft) and a stage-2 graph (starts
at H3KitLoadDraft), so that H3 and LTX can run on two GPUs, processes or machines (issue 32).

Where the cut is: H3KitDraftToLTX hands LTX 8n+1 frames at half the output size, and LTX's VAEEncode turns them into
the latent that LTXVLatentUpsampler refines. The draft file carries that latent (the encode runs in stage 1) and the
handoff's trimmed H3 audio, which bypasses stage 2 and is muxed at the end. Why the latent and not the decoded frames:
for the shipped 1344x768 graph the frames are 121 x 384 x 672 x 3 float32 = 375 MB (over ComfyUI's default 100 MB
upload limit, and float32 is what keeps them exact), the latent 128 x 16 x 12 x 21 float32 = 2.1 MB (plus 1.3 MB of
32 kHz stereo audio); both are bitwise what the single graph hands on, and the encode moves to stage 1. Not the H3
latent either: stage 2 would then need the H3 VAEs (5.4 GiB) and do H3's decode, the heavier stage getting heavier. The latent is
decoded by the LTX VAE that encoded it: stage 2 loads the same VAELoader (a copy of the node) for the upsampler and the
decode, and the draft records the encoder's file name (nodes/draft.py).

`split_graph` is the one function that makes the shipped split graphs (`workflows split`) and the graphs `run
--stage1-server/--stage2-server` queues. Node ids are kept on both sides (so `--set NODE.INPUT=VALUE` means the same
node), loaders both stages use are copied into each, and the two new nodes take the next free id. Pure: no I/O.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from .graph import ancestors, inputs_of, is_link
from .problem import printable

HANDOFF = "H3KitDraftToLTX"
SAVE_DRAFT = "H3KitSaveDraft"
LOAD_DRAFT = "H3KitLoadDraft"
ENCODERS = ("VAEEncode", "VAEEncodeTiled")  # the stage-1 end: what turns the handoff's frames into LTX's latent
DRAFT_FOLDER = "h3kit_drafts"  # subfolder of ComfyUI's output/ (H3KitSaveDraft) and input/ (uploads, H3KitLoadDraft)
DRAFT_PREFIX = f"{DRAFT_FOLDER}/draft"  # H3KitSaveDraft's default filename_prefix
DRAFT_PLACEHOLDER = f"{DRAFT_FOLDER}/draft.safetensors"  # H3KitLoadDraft's value in the shipped stage-2 graphs
DRAFT_INPUT = "draft"  # H3KitLoadDraft's file input
DRAFT_UI_KEY = "h3kit_drafts"  # H3KitSaveDraft's UI output (history) key listing the file it wrote
DRAFT_SUFFIX = ".safetensors"
HANDOFF_AUDIO = 1  # H3KitDraftToLTX's audio output
STAGE_SUFFIXES = ("_stage1", "_stage2")  # workflows/api/<name>_stage1.json, <name>_stage2.json
# What crosses the cut: (which node, its output) -> the output of H3KitLoadDraft that replaces it.
LATENT_OUT, AUDIO_OUT = 0, 1


class SplitError(ValueError):
    """The graph cannot be cut at the handoff; the message names the node and what to change."""


@dataclass
class Split:
    stage1: dict  # ... -> H3 draft -> handoff -> LTX encode -> H3KitSaveDraft
    stage2: dict  # H3KitLoadDraft -> LTX upsample, refine, decode -> mux, save
    draft_id: str  # the id of H3KitSaveDraft in stage1 and of H3KitLoadDraft in stage2
    handoff_id: str
    encode_id: str


def is_split_name(name: str) -> bool:
    """True for a generated stage graph's file stem (<name>_stage1 / <name>_stage2)."""
    return name.endswith(STAGE_SUFFIXES)


def stage_names(name: str) -> tuple[str, str]:
    return f"{name}{STAGE_SUFFIXES[0]}", f"{name}{STAGE_SUFFIXES[1]}"


def _describe(graph: dict, nid: str) -> str:
    return f"node {printable(nid, 40)} ({printable(graph[nid].get('class_type', '?'), 60)})"


def _consumers(graph: dict, source: str, slot: int | None = None) -> list[tuple[str, str]]:
    """(node id, input name) of every input linked to `source` (output `slot`, or any)."""
    return [(nid, name) for nid, node in graph.items() for name, value in inputs_of(node).items()
            if is_link(value) and str(value[0]) == source and (slot is None or value[1] == slot)]


def _handoff(graph: dict) -> tuple[str, str]:
    """(the handoff's id, the id of the LTX encode its frames feed)."""
    handoffs = [nid for nid, node in graph.items() if isinstance(node, dict) and node.get("class_type") == HANDOFF]
    if len(handoffs) != 1:
        raise SplitError(f"the graph has {len(handoffs)} {HANDOFF} nodes; a two-stage graph is cut at exactly one "
                         "handoff (H3 draft -> LTX refine)")
    handoff = handoffs[0]
    users = _consumers(graph, handoff, 0)
    encoders = [nid for nid, _ in users if graph[nid].get("class_type") in ENCODERS]
    if len(users) != 1 or len(encoders) != 1:
        shown = ", ".join(_describe(graph, nid) for nid, _ in users) or "nothing"
        raise SplitError(f"the frames of {_describe(graph, handoff)} feed {shown}; the cut needs them to feed one "
                         f"{' or '.join(ENCODERS)} (LTX's encode), whose latent the draft file carries")
    return handoff, encoders[0]


def _link_sources(node: dict) -> list[str]:
    return [str(value[0]) for value in inputs_of(node).values() if is_link(value)]


def split_graph(graph: dict) -> Split:
    """Cut `graph` at the handoff. Stage 1: the handoff, the LTX encode and everything upstream of them, plus the nodes
    that only look at stage-1 values (the handoff's report preview), ending in H3KitSaveDraft. Stage 2: the rest, its
    links to the encode's latent and the handoff's audio taken from H3KitLoadDraft, and a copy of each stage-1 loader
    (a node without links) it also uses. Anything else stage 2 would need from stage 1 is a SplitError."""
    if not isinstance(graph, dict) or not all(isinstance(n, dict) for n in graph.values()):
        raise SplitError("not an API-format graph (a JSON object of nodes)")
    done = [nid for nid, node in graph.items() if node.get("class_type") in (SAVE_DRAFT, LOAD_DRAFT)]
    if done:
        raise SplitError(f"{_describe(graph, done[0])}: this graph is already split (a stage graph); split the whole "
                         "two-stage graph, or queue this stage graph with --server")
    handoff, encode = _handoff(graph)
    core = ancestors(graph, [handoff, encode])
    stage1 = set(core)
    changed = True
    while changed:  # nodes fed by stage 1 alone (previews of its reports) stay with it
        changed = False
        for nid, node in graph.items():
            sources = _link_sources(node)
            if nid not in stage1 and sources and all(s in stage1 for s in sources):
                stage1.add(nid)
                changed = True
    carried = {(encode, 0): LATENT_OUT, (handoff, HANDOFF_AUDIO): AUDIO_OUT}
    numeric = [int(nid) for nid in graph if nid.isdigit()]
    draft_id = str(max(numeric, default=0) + 1)
    while draft_id in graph:
        draft_id = str(int(draft_id) + 1)
    second: dict[str, dict] = {}
    copied: set[str] = set()
    for nid, node in graph.items():
        if nid in stage1:
            continue
        new = copy.deepcopy(node)
        for name, value in inputs_of(new).items():
            if not is_link(value) or str(value[0]) not in stage1:
                continue
            source = str(value[0])
            if (source, value[1]) in carried:
                new["inputs"][name] = [draft_id, carried[(source, value[1])]]
            elif not _link_sources(graph[source]):  # a loader or constant: stage 2 loads its own copy
                copied.add(source)
            else:
                raise SplitError(f"{_describe(graph, nid)} input '{printable(name, 60)}' takes output {value[1]} of "
                                 f"{_describe(graph, source)}, which is computed in stage 1 and not in the draft (it "
                                 "carries the LTX encode's latent and the handoff's audio); take it from those, or "
                                 "move the node before the handoff")
        second[nid] = new
    if not any(value[0] == draft_id for node in second.values() for value in inputs_of(node).values()
               if is_link(value)):
        raise SplitError(f"no stage-2 node uses the latent of {_describe(graph, encode)}: nothing is refined")
    uses_audio = any(is_link(v) and v[0] == draft_id and v[1] == AUDIO_OUT
                     for node in second.values() for v in inputs_of(node).values())
    first = {nid: copy.deepcopy(node) for nid, node in graph.items() if nid in stage1}
    first[draft_id] = {
        "class_type": SAVE_DRAFT,
        "inputs": {"latent": [encode, 0], **({"audio": [handoff, HANDOFF_AUDIO]} if uses_audio else {}),
                   "filename_prefix": DRAFT_PREFIX},
        "_meta": {"title": "Save draft for stage 2 (LTX latent + H3 audio)"},
    }
    stage2 = {nid: copy.deepcopy(graph[nid]) for nid in graph if nid in copied}
    stage2[draft_id] = {"class_type": LOAD_DRAFT, "inputs": {DRAFT_INPUT: DRAFT_PLACEHOLDER},
                        "_meta": {"title": "Load draft from stage 1"}}
    stage2.update(second)
    return Split(first, {nid: stage2[nid] for nid in _ordered(graph, stage2, draft_id)}, draft_id, handoff, encode)


def _ordered(graph: dict, stage: dict, draft_id: str) -> list[str]:
    """The stage's ids in the original graph's order, the new node first (it is the stage's source)."""
    return [draft_id] + [nid for nid in graph if nid in stage]


def is_two_stage(graph: dict) -> bool:
    """True when `graph` has the handoff feeding LTX's encode: the graphs `split_graph` cuts."""
    if not isinstance(graph, dict) or any(isinstance(n, dict) and n.get("class_type") in (SAVE_DRAFT, LOAD_DRAFT)
                                          for n in graph.values()):
        return False
    handoffs = [nid for nid, node in graph.items() if isinstance(node, dict) and node.get("class_type") == HANDOFF]
    return any(isinstance(graph.get(nid), dict) and graph[nid].get("class_type") in ENCODERS
               for handoff in handoffs for nid, _ in _consumers(graph, handoff, 0))
