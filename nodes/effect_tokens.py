"""`embedding:<name>` markers through the MiniMax-H3 text encoder the user connected, whatever its tokenizer does.

The host's MiniMax-H3 tokenizer (comfy/text_encoders/minimax.py MiniMaxH3Tokenizer) builds one flat token list:
the reference labels and vision blocks, then the prompt. ComfyUI 0.33.0 turns the prompt into Qwen ids directly, so a
marker is literal text; newer ComfyUI passes it through its inner SDTokenizer (comfy/sd1_clip.py), which splits the
text at `(?<=\\s)embedding:`, loads each file with load_embed from the encoder's embeddings folders and puts one
entry per row where the marker stood (host-api.md §4, §10). Both hosts carry that inner SDTokenizer, 5120 wide.

EffectTokenizer wraps the host tokenizer and always takes the second path: the reference part from the host
tokenizer itself (called with an empty prompt), the prompt piece by piece through the host's inner SDTokenizer, each
marker's rows scaled by `strength` once, in fp32 (the dtype the encoder splices in). A marker the inner tokenizer
cannot load stops the encode with an error; it never becomes text. Nothing of the host is patched: H3KitEffectPrompt
hands a clone of the CLIP with this tokenizer to the host's own nodes (MiniMaxH3ImageToVideo, CLIPTextEncode, ...).
"""

from __future__ import annotations

from re import compile as regex
from typing import Any

import torch

from ..checks import facts
from .common import H3KitInputError

MARKER = "embedding:"
MARKER_SPLIT = regex(r"(?<=\s)embedding:")  # the host's split (comfy/sd1_clip.py SDTokenizer.tokenize_with_weights)
REFERENCE_KWARGS = ("images", "minimax_ref_items")  # what MiniMaxH3Tokenizer turns into labels + vision blocks
FIX_ENCODER = "connect the MiniMax-H3 text encoder (CLIPLoader type 'minimax')"


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
        """(the prompt's entries, [(marker, index of its first row in them, row count)])."""
        entries: list[tuple] = []
        spans = []
        for piece in marker_pieces(text if isinstance(text, str) else str(text)):
            batch = single_batch(self.node, self.inner.tokenize_with_weights(piece, disable_weights=True), piece)
            if piece.startswith(MARKER):
                batch = self._scaled(piece, batch)
                spans.append((marker_word(piece), len(entries), len(leading_rows(batch))))
            entries += [(entry[0], entry[1]) for entry in batch]
        return entries, spans

    def _reference_entries(self, kwargs: dict) -> list[tuple]:
        """Labels and vision blocks exactly as the host tokenizer builds them (it appends the prompt last)."""
        if not any(kwargs.get(name) for name in REFERENCE_KWARGS):
            return []
        batches = self.host.tokenize_with_weights("", False, **kwargs).get(self.key)
        return [(entry[0], entry[1]) for entry in single_batch(self.node, batches, "references")]

    def _scaled(self, piece: str, batch: list[tuple]) -> list[tuple]:
        rows = leading_rows(batch)
        if not rows:
            word = marker_word(piece)
            raise H3KitInputError(
                self.node, "prompt", word,
                f"the text encoder cannot load {word}: its embeddings folders hold no such file (or the file has "
                "no tensor it can use), so the effect would be read as plain text",
                "put the effect file in models/embeddings/ and choose it in H3KitEffectPrompt's effect list")
        scaled = [(row.detach().to(torch.float32) * self.strength, 1.0) for row in rows]
        return scaled + batch[len(rows):]


def with_effects(node: str, clip: Any, strength: float) -> Any:
    """A clone of `clip` (the host's CLIP.clone: same model and patches) whose tokenizer resolves markers."""
    clone = clip.clone()
    clone.tokenizer = EffectTokenizer(node, clip.tokenizer, strength)
    return clone
