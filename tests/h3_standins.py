"""CPU stand-ins for the MiniMax-H3 text path of a real ComfyUI host, for tier (a) (no ComfyUI, no Qwen vocabulary).

Each follows one real class, same call signature and output form (tests/test_effects_comfyui.py checks them against
ComfyUI 0.33.0 in the host's python: signatures equal, outputs equal once the stand-in is given the real ids and
embedding table):

StandInTextTokenizer     the Hugging Face Qwen tokenizer behind SDTokenizer.tokenizer: text -> {"input_ids": [...]};
                         special=True knows H3's seven dialogue tokens as upstream ComfyUI's does (#15808: the text
                         is cut at each, which is one id); False is ComfyUI 0.33.0 / yzkee @783545f6 (BPE pieces).
StandInSDTokenizer       comfy/sd1_clip.py SDTokenizer as the H3 encoder configures it (Qwen3VLSDTokenizer: no start
                         or end token, pad 151643, min_length 1, embedding_size 5120, embedding_key qwen3vl_32b):
                         text split at `(?<=\\s)embedding:`, a marker piece's first word (cut at '<' or '[', retried
                         without trailing commas) loaded like load_embed (every folder and subfolder, name, then
                         name + .safetensors/.pt/.bin; the 'qwen3vl_32b' tensor or the first one), one (row, weight)
                         entry per row, the rest re-joined with single spaces and tokenized as text; a missing file
                         is dropped (the host logs a warning). Only the disable_weights=True path the H3 tokenizer uses.
StandInMiniMaxH3Tokenizer comfy/text_encoders/minimax.py MiniMaxH3Tokenizer: reference labels and vision blocks, then
                         the prompt. parse_markers=False is ComfyUI 0.33.0 (prompt -> raw ids through the inner's
                         text tokenizer, add_special_tokens=False; a marker is text); True is the newer upstream file
                         (every text piece through the inner SDTokenizer). dialogue=True: its text tokenizer knows
                         H3's dialogue tokens (upstream #15808).
StandInH3Encoder         comfy/sd1_clip.py SDClipModel.process_tokens + ClipTokenWeightEncoder for the H3 model:
                         ints embedded from a table (ids beyond a small tier-(a) table wrap), each tensor entry spliced at its index (another width: dropped,
                         a pad row appended), weights != 1 interpolated against the all-pad encoding; "passthrough"
                         returns that sequence (the tiny host encoder with zero output projections does the same),
                         "mix" a causal running mean. Vision dicts become one row (the real vision tower is not
                         modelled). Extras carry minimax_token_tags like MiniMaxH3ClipModel.
StandInCLIP              comfy/sd.py CLIP: tokenize(), encode_from_tokens_scheduled(), clone().

Ids in tier (a) come from a deterministic word-piece hash (`hash_ids`); tier (b) passes the real Qwen tokenizer.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from re import compile as regex

import torch

WIDTH = 5120
KEY = "qwen3vl_32b"
PAD = 151643
VISION_START, VISION_END = 151652, 151653
EXTENSIONS = (".safetensors", ".pt", ".bin")
HASH_VOCAB = 1024
WORD_PIECES = regex(r" ?\w+| ?[^\w\s]+|\s+")


def hash_ids(text: str) -> list[int]:
    """Tier-(a) ids: one per word piece (a leading space belongs to the piece, as in byte-level BPE)."""
    return [zlib.crc32(piece.encode()) % (HASH_VOCAB - 1) + 1 for piece in WORD_PIECES.findall(text)]


DIALOGUE_IDS = {"<d>": 151669, "</d>": 151670, "<|cutoff|>": 151671, "<|lyrics_start|>": 151672,
                "<|lyrics_end|>": 151673, "<|caption_start|>": 151674, "<|caption_end|>": 151675}
DIALOGUE_SPLIT = regex("(" + "|".join(re.escape(token) for token in DIALOGUE_IDS) + ")")


class StandInTextTokenizer:
    def __init__(self, ids: Callable[[str], list[int]] = hash_ids, special: bool = False):
        self.ids, self.special = ids, special
        self.calls: list[str] = []  # every text it was given (tests read them)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        self.calls.append(text)
        if not self.special:
            return {"input_ids": self.ids(text)}
        out: list[int] = []
        for piece in DIALOGUE_SPLIT.split(text):
            out += [DIALOGUE_IDS[piece]] if piece in DIALOGUE_IDS else self.ids(piece) if piece else []
        return {"input_ids": out}


def load_embed(name: str, folders: list[str], embed_key: str = KEY) -> torch.Tensor | None:
    """comfy/sd1_clip.py load_embed for safetensors files (what effect files are)."""
    from safetensors.torch import load_file

    expanded = []
    for folder in folders:
        expanded.append(folder)
        expanded += [root for root, _, _ in os.walk(folder, followlinks=True) if root != folder]
    for folder in expanded:
        path = os.path.abspath(os.path.join(folder, name))
        if os.path.commonpath((os.path.abspath(folder), path)) != os.path.abspath(folder):
            continue
        candidates = [path] if os.path.isfile(path) else [path + ext for ext in EXTENSIONS]
        for candidate in candidates:
            if os.path.isfile(candidate) and candidate.endswith(".safetensors"):
                tensors = load_file(candidate, device="cpu")
                return tensors[embed_key] if embed_key in tensors else next(iter(tensors.values()))
    return None


class StandInSDTokenizer:
    embedding_identifier = "embedding:"

    def __init__(self, embedding_directory=None, ids: Callable[[str], list[int]] = hash_ids,
                 embedding_size: int = WIDTH, embedding_key: str = KEY, dialogue: bool = False):
        if isinstance(embedding_directory, (str, Path)):
            embedding_directory = [str(embedding_directory)]
        self.embedding_directory = embedding_directory
        self.tokenizer = StandInTextTokenizer(ids, special=dialogue)
        self.inv_vocab = {token_id: token for token, token_id in DIALOGUE_IDS.items()} if dialogue else {}
        self.embedding_size, self.embedding_key = embedding_size, embedding_key
        self.pad_token, self.min_length = PAD, 1
        self.loaded: list[str] = []  # names load_embed was asked for (tests read it)

    def _try_get_embedding(self, name: str) -> tuple[torch.Tensor | None, str, str]:
        words = name.split()
        name, leftover = words[0], " ".join(words[1:])
        cut = re.search(r"[<\[]", name)
        if cut is not None:
            leftover = name[cut.start():] + (" " + leftover if leftover else "")
            name = name[:cut.start()]
        self.loaded.append(name)
        embed = load_embed(name, self.embedding_directory, self.embedding_key)
        if embed is None:
            stripped = name.strip(",")
            if len(stripped) < len(name):
                embed = load_embed(stripped, self.embedding_directory, self.embedding_key)
                return embed, name, f"{name[len(stripped):]} {leftover}"
        return embed, name, leftover

    def tokenize_with_weights(self, text: str, return_word_ids=False, tokenizer_options={}, **kwargs):  # noqa: B006 - the host's signature
        if not kwargs.get("disable_weights", False):
            raise NotImplementedError("the stand-in models the disable_weights=True path the H3 tokenizer uses")
        min_length = kwargs.get("min_length", self.min_length)
        split = re.split(rf"(?<=\s){re.escape(self.embedding_identifier)}", text)
        words = [w for w in [split[0], *(self.embedding_identifier + s for s in split[1:])] if w != ""]
        groups: list[list[tuple]] = []
        for word in words:
            if word.startswith(self.embedding_identifier) and self.embedding_directory is not None:
                embed, _, leftover = self._try_get_embedding(word[len(self.embedding_identifier):].strip("\n"))
                if embed is not None:
                    rows = [embed] if embed.ndim == 1 else [embed[i] for i in range(embed.shape[0])]
                    groups.append([(row, 1.0) for row in rows])
                if leftover == "":
                    continue
                word = leftover
            groups.append([(t, 1.0) for t in self.tokenizer(word)["input_ids"]])
        batch = [(t, w, i + 1) for i, group in enumerate(groups) for t, w in group]
        if len(batch) < min_length:
            batch += [(self.pad_token, 1.0, 0)] * (min_length - len(batch))
        return [batch if return_word_ids else [(t, w) for t, w, _ in batch]]


class StandInMiniMaxH3Tokenizer:
    def __init__(self, embedding_directory=None, tokenizer_data={}, ids: Callable[[str], list[int]] = hash_ids,  # noqa: B006
                 parse_markers: bool = False, dialogue: bool = False):
        self.clip_name = self.clip = KEY
        self.qwen3vl_32b = StandInSDTokenizer(embedding_directory, ids, dialogue=dialogue)
        self.parse_markers = parse_markers

    def _text(self, text: str) -> list[tuple]:
        if not text:
            return []
        if self.parse_markers:  # newer upstream: the inner SDTokenizer, one batch
            (batch,) = self.qwen3vl_32b.tokenize_with_weights(text, return_word_ids=False, disable_weights=True)
            return batch
        return [(t, 1.0) for t in self.qwen3vl_32b.tokenizer(text, add_special_tokens=False)["input_ids"]]  # 0.33.0

    @staticmethod
    def _vision(data, video_block: bool = False) -> list[tuple]:
        entry = {"type": "image", "data": data, "original_type": "image"}
        if video_block:
            entry["minimax_video_block"] = True
        return [(VISION_START, 1.0), (entry, 1.0), (VISION_END, 1.0)]

    def tokenize_with_weights(self, text, return_word_ids=False, images=[], minimax_ref_items=None, **kwargs):  # noqa: B006
        entries: list[tuple] = []
        if minimax_ref_items:
            counters = {"image": 0, "audio": 0, "video": 0}
            for item in minimax_ref_items:
                kind = item["type"]
                counters[kind] += 1
                if kind == "image":
                    entries += self._text(f"<Picture {counters['image']}>: ") + self._vision(item["data"])
                elif kind == "audio":
                    entries += self._text(f"<Audio {counters['audio']}>: ")
                else:
                    frames = item["data"]
                    stamps = list(item.get("timestamps") or [i / 2.0 for i in range(frames.shape[0])])
                    if frames.shape[0] % 2 == 1:
                        frames = torch.cat([frames, frames[-1:]], dim=0)
                        stamps.append(stamps[-1])
                    entries += self._text(f"<Video {counters['video']}>: ")
                    for i in range(0, frames.shape[0], 2):
                        entries += self._text("<%.1f seconds>" % ((stamps[i] + stamps[i + 1]) / 2.0))
                        entries += self._vision(frames[i:i + 2], video_block=True)
        else:
            for i, image in enumerate(images):
                entries += self._text(f"<Picture {i + 1}>: ") + self._vision(image)
        entries += self._text(text)
        if not entries:
            entries.append((PAD, 1.0))
        if return_word_ids:
            entries = [entry + (0,) for entry in entries]
        return {KEY: [entries]}

    def untokenize(self, token_weight_pair):
        return [(pair, str(pair[0])) for pair in token_weight_pair]

    def state_dict(self):
        return {}


class StandInH3Encoder:
    def __init__(self, table: torch.Tensor, kind: str = "passthrough"):
        self.table, self.kind = table, kind
        self.encoded: list[list[tuple]] = []  # every token list it was given (tests read them)

    def rows(self, ids: list[int]) -> torch.Tensor:
        """Embedding rows in fp32 (the host's out_dtype). Ids beyond a small tier-(a) table wrap around it."""
        return self.table[torch.tensor(ids, dtype=torch.long) % len(self.table)].to(torch.float32)

    def _sequence(self, tokens: list) -> tuple[torch.Tensor, list[dict]]:
        ids, others = [], []
        for index, token in enumerate(tokens):
            (ids if isinstance(token, int) else others).append(token if isinstance(token, int) else (index, token))
        seq = self.rows(ids).unsqueeze(0)
        info, shift, pad_extra = [], 0, 0
        for index, token in others:
            if torch.is_tensor(token):
                kind, rows = "embedding", token
            else:
                kind, rows = "image", torch.full((1, seq.shape[-1]), 0.5)
            rows = rows.view(1, -1, rows.shape[-1]).to(torch.float32)
            at = shift + index
            if rows.shape[-1] == seq.shape[-1]:
                seq = torch.cat([seq[:, :at], rows, seq[:, at:]], dim=1)
                shift += rows.shape[1] - 1
                info.append({"type": kind, "index": at, "size": rows.shape[1]})
            else:
                shift -= 1
                pad_extra += rows.shape[1]
        if pad_extra:
            seq = torch.cat([seq, self.rows([PAD] * pad_extra).unsqueeze(0)], dim=1)
        return seq, info

    def _encode(self, tokens: list) -> tuple[torch.Tensor, torch.Tensor]:
        seq, info = self._sequence(tokens)
        if self.kind == "mix":
            seq = seq.cumsum(1) / torch.arange(1, seq.shape[1] + 1).view(1, -1, 1)
        tags = torch.ones(seq.shape[1], dtype=torch.long)
        for item in info:
            if item["type"] == "image":
                tags[max(0, item["index"] - 1):item["index"] + item["size"] + 1] = 0
        return seq, tags

    def encode_token_weights(self, pairs: list[list[tuple]]) -> tuple:
        (batch,) = pairs
        self.encoded.append(batch)
        z, tags = self._encode([entry[0] for entry in batch])
        if any(entry[1] != 1.0 for entry in batch):
            empty, _ = self._encode([PAD] * len(batch))
            for j, entry in enumerate(batch):
                if entry[1] != 1.0:
                    z[0, j] = (z[0, j] - empty[0, j]) * entry[1] + empty[0, j]
        return z, None, {"minimax_token_tags": tags}


class StandInCLIP:
    def __init__(self, tokenizer=None, encoder=None, no_init=False):
        if no_init:
            return
        self.tokenizer, self.cond_stage_model = tokenizer, encoder
        self.tokenizer_options: dict = {}

    def clone(self, disable_dynamic=False):
        clone = StandInCLIP(no_init=True)
        clone.tokenizer, clone.cond_stage_model = self.tokenizer, self.cond_stage_model
        clone.tokenizer_options = self.tokenizer_options.copy()
        return clone

    def tokenize(self, text, return_word_ids=False, **kwargs):
        options = {**self.tokenizer_options, **kwargs.get("tokenizer_options", {})}
        if options:
            kwargs["tokenizer_options"] = options
        return self.tokenizer.tokenize_with_weights(text, return_word_ids, **kwargs)

    def encode_from_tokens_scheduled(self, tokens, unprojected=False, add_dict={}, show_pbar=True):  # noqa: B006
        cond, pooled, extra = self.cond_stage_model.encode_token_weights(tokens[KEY])
        return [[cond, {"pooled_output": pooled, **extra, **add_dict}]]


def h3_clip(embeddings: str | os.PathLike | None, *, parse_markers: bool = False, kind: str = "passthrough",
            table: torch.Tensor | None = None, ids: Callable[[str], list[int]] = hash_ids,
            dialogue: bool = False) -> StandInCLIP:
    """A CLIP stand-in as CLIPLoader(type minimax) gives it, with `embeddings` as the embeddings folder."""
    if table is None:
        table = torch.randn(HASH_VOCAB, WIDTH, generator=torch.Generator().manual_seed(7))
    folders = None if embeddings is None else [str(embeddings)]
    tokenizer = StandInMiniMaxH3Tokenizer(folders, ids=ids, parse_markers=parse_markers, dialogue=dialogue)
    return StandInCLIP(tokenizer, StandInH3Encoder(table, kind))
