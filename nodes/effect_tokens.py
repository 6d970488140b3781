"""`embedding:<name>` markers through the MiniMax-H3 text encoder the user connected, whatever its tokenizer does.

The host's MiniMax-H3 tokenizer (comfy/text_encoders/minimax.py MiniMaxH3Tokenizer) builds one flat token list:
the reference labels and vision blocks, then the prompt. ComfyUI 0.33.0 turns the prompt into Qwen ids directly, so a
marker is literal text; newer ComfyUI passes it through its inner SDTokenizer (comfy/sd1_clip.py), which splits the
text at `(?<=\\s)embedding:`, loads each file with load_embed from the encoder's embeddings folders and puts one
entry per row where the marker stood (host-api.md §4, §10). Both hosts carry that inner SDTokenizer, 5120 wide.

EffectTokenizer wraps the host tokenizer and always takes the second path: the reference part from the host
tokenizer itself (called with an empty prompt), the prompt cut where the host cuts it, its text through the host's
inner SDTokenizer, each marker resolved as the host's load_embed would (its word, cut at '<' or '[', retried without
trailing commas; the inner tokenizer's embeddings folders, indexed once per prompt: effect_files.EmbeddingIndex),
checked like a file chosen in the node (effect_files: layout from the header, at most 1,024 float rows, all finite;
at most 16 markers and 4,096 rows per prompt) and only then read, its rows scaled by `strength` once, in fp32 (the
dtype the encoder splices in), the text after the marker's word through the inner tokenizer again. A typed marker
never reaches the host's loader, which would read any file whole and walk every folder for each marker. A marker
that resolves to no file, to several, or to a file that fails a check stops the encode with an error; it never
becomes text. Nothing of the host is patched: H3KitEffectPrompt hands a clone of the CLIP with this tokenizer to the
host's own nodes (MiniMaxH3ImageToVideo, CLIPTextEncode, ...).

H3's dialogue tokens (`<d>`, `</d>` and five more, checks.facts.H3_DIALOGUE_TOKENS): upstream ComfyUI gives the inner
SDTokenizer's Qwen tokenizer these seven special tokens (Comfy-Org/ComfyUI#15808), so each is one id; ComfyUI 0.33.0
and yzkee @783545f6 split `<d>` into BPE pieces merged with its neighbours (` <`, `d`, `>[`). How the served tokenizer
splits them is asked at run time (dialogue_capability), never read from a version. with_dialogue_tokens copies the
host tokenizer and gives the copy's inner SDTokenizer a text tokenizer that cuts the text at the seven strings and
maps each to its upstream id, the rest through the host's own Qwen tokenizer, segment by segment: what a Hugging
Face tokenizer does with added special tokens, so the ids equal upstream's (checked on the real tokenizer in tier b).
Every path of the host (its outer tokenizer, its inner one with embedding: markers, EffectTokenizer) then reads
dialogue the upstream way; the host's own objects are never changed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from re import compile as regex
from typing import Any

import torch

from ..adapters.host import host_loaded, host_module
from ..checks import facts, h3_prompt
from . import effect_files
from .common import H3KitInputError, Report

MARKER = "embedding:"
MARKER_SPLIT = regex(r"(?<=\s)embedding:")  # the host's split (comfy/sd1_clip.py SDTokenizer.tokenize_with_weights)
NAME_END = regex(r"[<\[]")  # where the host cuts a marker's name (SDTokenizer._try_get_embedding)
REFERENCE_KWARGS = ("images", "minimax_ref_items")  # what MiniMaxH3Tokenizer turns into labels + vision blocks
FIX_ENCODER = "connect the MiniMax-H3 text encoder (CLIPLoader type 'minimax')"
H3_TOKENIZER_MODULE = "comfy.text_encoders.minimax"  # the host's MiniMax-H3 tokenizer (ComfyUI >= 0.33.0)
DIALOGUE = facts.H3_DIALOGUE_TOKENS
UPSTREAM_DIALOGUE = "Comfy-Org/ComfyUI#15808"


# ------------------------------------------------------------------------------------------- the host's parts
def token_key(tokenizer: Any) -> str | None:
    """The encoder name the outer tokenizer files its tokens under (SD1Tokenizer.clip_name; 'qwen3vl_32b' for H3)."""
    key = getattr(tokenizer, "clip_name", None)
    return key if isinstance(key, str) else None


def inner_tokenizer(node: str, tokenizer: Any) -> Any:
    """The host's embedding-aware SDTokenizer inside the outer tokenizer (SD1Tokenizer keeps it under the attribute
    named by `.clip`); it must be the 5120-wide H3 one."""
    attribute = getattr(tokenizer, "clip", None)
    inner = getattr(tokenizer, attribute, None) if isinstance(attribute, str) else None
    if inner is None or not callable(getattr(inner, "tokenize_with_weights", None)) or token_key(tokenizer) is None:
        raise H3KitInputError(node, "clip", type(tokenizer).__name__,
                              "this text encoder's tokenizer has no inner ComfyUI SDTokenizer to read embedding: "
                              "markers with", FIX_ENCODER)
    width = getattr(inner, "embedding_size", None)
    if width != facts.H3_EMBEDDING_WIDTH:
        raise H3KitInputError(node, "clip", token_key(tokenizer),
                              f"the connected text encoder takes {width}-wide embeddings, not the "
                              f"{facts.H3_EMBEDDING_WIDTH} of MiniMax-H3 effect rows", FIX_ENCODER)
    return inner


def host_tokenizer(tokenizer: Any) -> Any:
    """The host's own tokenizer behind any number of EffectTokenizer wrappers (so strength is applied once)."""
    while isinstance(tokenizer, EffectTokenizer):
        tokenizer = tokenizer.host
    return tokenizer


def marker_pieces(text: str) -> list[str]:
    """The text cut where the host cuts it: before every marker that follows whitespace. Markers start their piece."""
    parts = MARKER_SPLIT.split(text)
    return [piece for piece in (parts[0], *(MARKER + part for part in parts[1:])) if piece]


def marker_word(piece: str) -> str:
    return piece.split()[0] if piece.split() else piece


@dataclass(frozen=True)
class MarkerName:
    """What the host's SDTokenizer makes of a marker piece: the name load_embed is asked for and the text after it,
    and where the name ends in commas the name without them and the text that then follows."""
    word: str  # the marker as typed: its first word
    name: str
    leftover: str
    stripped: str | None
    stripped_leftover: str

    @classmethod
    def of(cls, piece: str) -> MarkerName:
        words = piece[len(MARKER):].strip("\n").split()
        name, leftover = (words[0], " ".join(words[1:])) if words else ("", "")
        cut = NAME_END.search(name)
        if cut is not None:
            leftover = name[cut.start():] + (" " + leftover if leftover else "")
            name = name[:cut.start()]
        stripped = name.strip(",")
        return cls(marker_word(piece), name, leftover, stripped if len(stripped) < len(name) else None,
                   f"{name[len(stripped):]} {leftover}")


@dataclass(frozen=True)
class ResolvedMarker:
    word: str
    files: list[str]  # every file load_embed could pick (real paths); one for a usable marker
    leftover: str  # the text after the name, tokenized as text


def resolve_marker(index: effect_files.EmbeddingIndex, piece: str) -> ResolvedMarker:
    """The files `piece`'s marker names in `index` (the host's rules: the name, else the name without its commas)."""
    parts = MarkerName.of(piece)
    found = index.candidates(parts.name)
    if found or parts.stripped is None:
        return ResolvedMarker(parts.word, found, parts.leftover)
    return ResolvedMarker(parts.word, index.candidates(parts.stripped), parts.stripped_leftover)


def checked_marker(node: str, input_name: str, index: effect_files.EmbeddingIndex,
                   marker: ResolvedMarker) -> effect_files.EffectInfo:
    """The one file a typed marker loads, checked as a chosen effect file is (effect_files.inspect_file); a marker that
    names no file or several stops with an error."""
    if not marker.files:
        where = ", ".join(index.roots) or "none configured"
        cut = f"; the folder walk {'; '.join(index.stopped)}" if index.stopped else ""
        raise H3KitInputError(node, input_name, marker.word,
                              f"the text encoder cannot load {marker.word}: its embeddings folders ({where}) hold no "
                              f"such file{cut}, so the effect would be read as plain text",
                              "put the effect file in models/embeddings/ and choose it in H3KitEffectPrompt's effect "
                              "list")
    if len(marker.files) > 1:
        raise H3KitInputError(node, input_name, marker.word,
                              f"{marker.word} names {len(marker.files)} files ({', '.join(marker.files[:3])}); ComfyUI "
                              "would load any one of them", "rename or remove the other files of that name")
    return effect_files.inspect_file(node, input_name, marker.word, Path(marker.files[0]))


def single_batch(node: str, batches: Any, what: str) -> list[tuple]:
    if not (isinstance(batches, list) and len(batches) == 1 and isinstance(batches[0], list)):
        raise H3KitInputError(node, "clip", what, "the text encoder's tokenizer did not return one token batch "
                              "(ComfyUI's token-list form, host-api.md §4)", FIX_ENCODER)
    return list(batches[0])


def leading_rows(entries: list[tuple]) -> list[torch.Tensor]:
    rows = []
    for entry in entries:
        if not torch.is_tensor(entry[0]):
            break
        rows.append(entry[0])
    return rows


def host_marker_rows(node: str, tokenizer: Any, marker: str) -> list[torch.Tensor]:
    """The rows the host's own embedding loader gives `marker` (its folders, its file rules); [] when it finds none."""
    inner = inner_tokenizer(node, host_tokenizer(tokenizer))
    return leading_rows(single_batch(node, inner.tokenize_with_weights(marker, disable_weights=True), marker))


def outer_parses_markers(node: str, tokenizer: Any, marker: str) -> bool:
    """Whether the host's outer tokenizer itself turns a loadable `marker` into rows (newer ComfyUI) or into text
    (ComfyUI 0.33.0). Ask only for a marker the inner tokenizer loads."""
    outer = host_tokenizer(tokenizer)
    batches = outer.tokenize_with_weights(f"effect {marker}").get(token_key(outer)) if callable(
        getattr(outer, "tokenize_with_weights", None)) else None
    return any(torch.is_tensor(entry[0]) for entry in single_batch(node, batches, marker))


# ------------------------------------------------------------------------------------------- the wrapper
class EffectTokenizer:
    """The host's MiniMax-H3 tokenizer with every `embedding:<name>` resolved to its rows x strength (see module)."""

    def __init__(self, node: str, tokenizer: Any, strength: float):
        self.host = host_tokenizer(tokenizer)
        self.inner = inner_tokenizer(node, self.host)
        self.key = token_key(self.host)
        self.node, self.strength = node, float(strength)

    def __getattr__(self, name: str) -> Any:
        # untokenize, state_dict, decode, clip, clip_name, the inner tokenizer ...: the host's own
        if name.startswith("__") or "host" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.host, name)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict:
        entries = self._reference_entries(kwargs) + self.prompt_tokens(text)[0]
        if not entries:
            entries = [(self.inner.pad_token, 1.0)]  # the host's empty prompt
        if return_word_ids:
            entries = [entry + (0,) for entry in entries]
        return {self.key: [entries]}

    def prompt_tokens(self, text: str) -> tuple[list[tuple], list[tuple[str, int, int]]]:
        """(the prompt's entries, [(marker, index of its first row in them, row count)]). Every marker is resolved
        and checked before any is read (module docstring); each file is read once."""
        pieces = marker_pieces(text if isinstance(text, str) else str(text))
        plan = self._checked_markers(pieces)
        entries: list[tuple] = []
        spans = []
        rows_of: dict[Path, torch.Tensor] = {}
        for piece in pieces:
            if not piece.startswith(MARKER):
                entries += self._text(piece)
                continue
            marker, info = plan[len(spans)]
            if info.path not in rows_of:
                rows_of[info.path] = effect_files.load_rows(self.node, "prompt", info) * self.strength
            rows = rows_of[info.path]
            spans.append((marker.word, len(entries), rows.shape[0]))
            entries += [(row, 1.0) for row in rows]
            if marker.leftover:
                entries += self._text(marker.leftover)
        return entries, spans

    def _text(self, text: str) -> list[tuple]:
        batch = single_batch(self.node, self.inner.tokenize_with_weights(text, disable_weights=True), text)
        return [(entry[0], entry[1]) for entry in batch]

    def _checked_markers(self, pieces: list[str]) -> list[tuple[ResolvedMarker, effect_files.EffectInfo]]:
        """Each marker piece's file, checked from its header; the prompt's budget (markers, then rows) first."""
        markers = [piece for piece in pieces if piece.startswith(MARKER)]
        effect_files.check_prompt_budget(self.node, "prompt", len(markers))
        if not markers:
            return []
        index = effect_files.EmbeddingIndex.of(getattr(self.inner, "embedding_directory", None))
        plan = []
        for piece in markers:
            marker = resolve_marker(index, piece)
            plan.append((marker, checked_marker(self.node, "prompt", index, marker)))
        effect_files.check_prompt_budget(self.node, "prompt", len(markers), sum(info.rows for _, info in plan))
        return plan

    def _reference_entries(self, kwargs: dict) -> list[tuple]:
        """Labels and vision blocks exactly as the host tokenizer builds them (it appends the prompt last)."""
        if not any(kwargs.get(name) for name in REFERENCE_KWARGS):
            return []
        batches = self.host.tokenize_with_weights("", False, **kwargs).get(self.key)
        return [(entry[0], entry[1]) for entry in single_batch(self.node, batches, "references")]


def with_effects(node: str, clip: Any, strength: float, tokenizer: Any = None) -> Any:
    """A clone of `clip` (the host's CLIP.clone: same model and patches) whose tokenizer resolves markers, around
    `tokenizer` (the clip's own, or its copy that reads dialogue tokens: prepare_dialogue)."""
    clone = clip.clone()
    clone.tokenizer = EffectTokenizer(node, clip.tokenizer if tokenizer is None else tokenizer, strength)
    return clone


# ------------------------------------------------------------------------------------------- the host's own tokenizer
@lru_cache(maxsize=8)
def _host_h3_tokenizer(folders: tuple[str, ...]) -> Any:
    return host_module(H3_TOKENIZER_MODULE).MiniMaxH3Tokenizer(embedding_directory=list(folders))


def served_h3_tokenizer(folders: list[str]) -> Any | None:
    """This ComfyUI's own MiniMax-H3 tokenizer (what CLIPLoader type 'minimax' builds, with `folders` as its embeddings
    folders), or None outside ComfyUI or on a host without one. Built once per folder list (it reads the Qwen vocabulary)."""
    if not host_loaded(H3_TOKENIZER_MODULE):
        return None
    return _host_h3_tokenizer(tuple(folders))


# ------------------------------------------------------------------------------------------- dialogue tokens
class DialogueIds:
    """A host text tokenizer (SDTokenizer.tokenizer: text -> {"input_ids": [...]}) that also knows H3's seven special
    tokens: the text is cut at each, which becomes its upstream id; every other segment goes through the host's own
    tokenizer on its own, as a Hugging Face tokenizer treats added special tokens."""

    def __init__(self, text_tokenizer: Callable[..., Any]):
        self.base = text_tokenizer

    def __getattr__(self, name: str) -> Any:
        # decode, get_vocab, ...: the host's own
        if name.startswith("__") or "base" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.base, name)

    def __call__(self, text: str, *args: Any, **kwargs: Any) -> dict[str, list[int]]:
        ids: list[int] = []
        done = 0
        for match in h3_prompt.DIALOGUE_TOKEN.finditer(text):
            if match.start() > done:
                ids += list(self.base(text[done:match.start()], *args, **kwargs)["input_ids"])
            ids.append(DIALOGUE[match.group(0)])
            done = match.end()
        if done < len(text) or not ids:
            ids += list(self.base(text[done:], *args, **kwargs)["input_ids"])
        return {"input_ids": ids}


def with_dialogue_tokens(node: str, tokenizer: Any) -> Any:
    """A copy of the host's outer tokenizer whose inner SDTokenizer reads H3's dialogue tokens as upstream does (see the
    module); the host's objects are untouched. An EffectTokenizer is unwrapped first (it wraps the copy instead)."""
    host = host_tokenizer(tokenizer)
    inner = inner_tokenizer(node, host)
    if isinstance(getattr(inner, "tokenizer", None), DialogueIds):
        return host
    if not callable(getattr(inner, "tokenizer", None)):
        raise H3KitInputError(node, "clip", type(inner).__name__, "the text encoder's tokenizer has no text "
                              "tokenizer to teach H3's dialogue tokens", FIX_ENCODER)
    outer, inner = copy.copy(host), copy.copy(inner)
    inner.tokenizer = DialogueIds(inner.tokenizer)
    if isinstance(getattr(inner, "inv_vocab", None), dict):  # untokenize() names every id
        inner.inv_vocab = {**inner.inv_vocab, **{token_id: token for token, token_id in DIALOGUE.items()}}
    setattr(outer, host.clip, inner)
    return outer


@dataclass(frozen=True)
class DialogueCapability:
    """How a tokenizer reads each of H3's dialogue tokens written alone: its ids, and the verdict."""
    ids: dict[str, list[int]]

    @property
    def native(self) -> bool:  # every token is its upstream id, as with #15808
        return all(self.ids[token] == [token_id] for token, token_id in DIALOGUE.items())

    @property
    def split(self) -> list[str]:  # the tokens it cuts into several pieces
        return [token for token, ids in self.ids.items() if len(ids) > 1]

    def describe(self, tokens: list[str]) -> str:
        return ", ".join(f"{token} -> {self.ids[token]}" for token in tokens)


def dialogue_capability(node: str, tokenizer: Any) -> DialogueCapability:
    """Ask the served outer tokenizer (what MiniMaxH3ImageToVideo / ReferenceToVideo call) for each token's ids."""
    key = token_key(host_tokenizer(tokenizer))
    ids = {}
    for token in DIALOGUE:
        batch = single_batch(node, tokenizer.tokenize_with_weights(token).get(key), token)
        ids[token] = [entry[0] for entry in batch]
    return DialogueCapability(ids)


def _taken_ids(node: str, tokenizer: Any) -> list[str]:
    """Upstream dialogue ids the host's vocabulary already gives another token (then mapping them would be wrong)."""
    vocab = getattr(inner_tokenizer(node, host_tokenizer(tokenizer)), "inv_vocab", None)
    if not isinstance(vocab, dict):
        return []
    return [f"{token_id} is '{vocab[token_id]}'" for token, token_id in DIALOGUE.items()
            if token_id in vocab and vocab[token_id] != token]


FIX_DIALOGUE_CLIP = ("connect the text encoder (CLIPLoader) to this node's 'clip' input and its 'clip' output to the "
                     "MiniMax-H3 node's 'clip' (MiniMaxH3ReferenceToVideo / MiniMaxH3ImageToVideo)")


def prepare_dialogue(node: str, clip_tokenizer: Any, text: str, report: Report,
                     fixed_by: str = "this node's clip output") -> Any:
    """The tokenizer to hand on for `text`: the host's, or its copy that reads H3's dialogue tokens as upstream
    (#15808) where the host splits them. The report says which, with the host's ids; nothing is silent."""
    tokens = h3_prompt.dialogue_tokens_in(text)
    if not tokens:
        report.set(dialogue_tokens="none in the prompt")
        return clip_tokenizer
    found = dialogue_capability(node, clip_tokenizer)
    if found.native:
        report.set(dialogue_tokens=f"the text encoder's tokenizer reads {', '.join(tokens)} as one token each "
                   f"({', '.join(str(DIALOGUE[t]) for t in tokens)}, as upstream {UPSTREAM_DIALOGUE})")
        return clip_tokenizer
    taken = _taken_ids(node, clip_tokenizer)
    if taken or not found.split:
        report.warn(f"this text encoder's tokenizer reads H3's dialogue tokens differently from upstream "
                    f"{UPSTREAM_DIALOGUE} ({found.describe(tokens)}{'; ' + ', '.join(taken) if taken else ''}), so "
                    "H3Kit cannot map them to H3's ids: dialogue / lip-sync conditioning may be weaker; use the "
                    "MiniMax-H3 text encoder (CLIPLoader type 'minimax') of an up-to-date ComfyUI")
        return clip_tokenizer
    prepared = with_dialogue_tokens(node, clip_tokenizer)
    check = dialogue_capability(node, prepared)
    if not check.native:
        raise H3KitInputError(node, "clip", check.describe(tokens), "H3Kit's copy of the tokenizer still splits the "
                              "dialogue tokens", FIX_ENCODER)
    report.set(dialogue_tokens=f"fixed by {fixed_by}: this host's tokenizer splits them into BPE pieces "
               f"({found.describe(tokens)}); H3Kit's copy of it maps {', '.join(tokens)} to "
               f"{', '.join(str(DIALOGUE[t]) for t in tokens)} as upstream {UPSTREAM_DIALOGUE}")
    return prepared


def report_served_dialogue(node: str, text: str, folders: list[str], report: Report, fix: str) -> bool | None:
    """Without a clip: whether this ComfyUI's own MiniMax-H3 tokenizer reads the prompt's dialogue tokens as upstream
    (True), splits them (False, a report warning naming `fix`), or cannot be asked (None, a visible fallback)."""
    tokens = h3_prompt.dialogue_tokens_in(text)
    if not tokens:
        report.set(dialogue_tokens="none in the prompt")
        return None
    try:
        served = served_h3_tokenizer(folders)
        if served is None:
            report.fallback("dialogue_not_checked", "no clip connected and no MiniMax-H3 tokenizer in this process: "
                            f"how {', '.join(tokens)} are tokenized was not checked; {fix} to be sure")
            return None
        found = dialogue_capability(node, served)
    except H3KitInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the host's tokenizer files or library may be missing or broken
        report.fallback("dialogue_host_tokenizer", f"could not ask this ComfyUI's MiniMax-H3 tokenizer "
                        f"({type(exc).__name__}: {str(exc)[:160]}); {fix} to be sure")
        return None
    if found.native:
        report.set(dialogue_tokens=f"this ComfyUI's MiniMax-H3 tokenizer reads {', '.join(tokens)} as one token each "
                   f"(as upstream {UPSTREAM_DIALOGUE})")
        return True
    report.set(dialogue_tokens=f"split by this ComfyUI's MiniMax-H3 tokenizer ({found.describe(tokens)})")
    report.warn(f"this ComfyUI's MiniMax-H3 tokenizer splits {', '.join(tokens)} into ordinary BPE pieces "
                f"({found.describe(tokens)}; one token each upstream since {UPSTREAM_DIALOGUE}), so dialogue / "
                f"lip-sync conditioning is weaker; {fix}")
    return False
