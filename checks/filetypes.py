"""What a file is, from its first bytes, so a wrong file is named as what it is (never by its extension alone).

Every command that reads a file names the kind it found when the file is not what it expects ("sheet.png is a
PNG image, not a conditioning cache"); output names are checked against the format a command writes. Pure
Python: `sniff(head)` reads bytes; adapters/files.py `sniff_file(path)` reads at most HEAD_BYTES of a file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

HEAD_BYTES = 4096  # enough for every signature below and a safetensors header's first key
MAX_SAFETENSORS_HEADER = 100_000_000  # the safetensors library's own limit on the JSON header (MAX_HEADER_SIZE)
JSON_BLANKS = b" \t\r\n"
TEXT_CONTROLS = frozenset(b"\t\n\r\f")


@dataclass(frozen=True)
class FileKind:
    key: str  # stable id: png, jpeg, ..., safetensors, json, text, empty, unknown
    text: str  # "a PNG image", for messages
    suffixes: tuple[str, ...] = ()  # the extensions this kind is usually saved with


KINDS = {k.key: k for k in (
    FileKind("png", "a PNG image", (".png",)),
    FileKind("jpeg", "a JPEG image", (".jpg", ".jpeg")),
    FileKind("webp", "a WebP image", (".webp",)),
    FileKind("gif", "a GIF image", (".gif",)),
    FileKind("mp4", "an MP4/MOV video", (".mp4", ".mov", ".m4v")),
    FileKind("webm", "a WebM video", (".webm",)),
    FileKind("mkv", "a Matroska (MKV) video", (".mkv",)),
    FileKind("wav", "a WAV audio file", (".wav",)),
    FileKind("flac", "a FLAC audio file", (".flac",)),
    FileKind("ogg", "an Ogg audio file", (".ogg", ".opus")),
    FileKind("mp3", "an MP3 audio file", (".mp3",)),
    FileKind("torch_zip", "a PyTorch torch.save file (a zip of pickles)", (".pt", ".pth", ".ckpt", ".cond", ".bin")),
    FileKind("zip", "a zip archive", (".zip",)),
    FileKind("pickle", "a Python pickle (e.g. an old torch.save file)", (".pt", ".pth", ".pkl", ".ckpt", ".cond")),
    FileKind("gguf", "a GGUF model file", (".gguf",)),
    FileKind("safetensors", "a safetensors file", (".safetensors", ".sft")),
    FileKind("json", "a JSON file", (".json",)),
    FileKind("html", "an HTML page (a download that returned a web page, e.g. a login or error page)",
             (".html", ".htm")),
    FileKind("lfs_pointer", "a Git LFS pointer (a 130-byte stand-in, not the file itself)", ()),
    FileKind("text", "a text file", (".txt",)),
    FileKind("empty", "an empty file (0 bytes)", ()),
    FileKind("unknown", "a file of unknown type", ()),
)}
IMAGE_KINDS = frozenset({"png", "jpeg", "webp", "gif"})
VIDEO_KINDS = frozenset({"mp4", "webm", "mkv"})
AUDIO_KINDS = frozenset({"wav", "flac", "ogg", "mp3"})


def _is_safetensors(head: bytes) -> bool:
    """8-byte little-endian header length within the library's limit, then a JSON object's start: `{` followed
    (after any blanks) by `"` or `}`. Checked before every other signature, because the length's low bytes can
    spell one: 640, 896, 1152 and 1408 start with 0x80 0x02..0x05 (a pickle's opcode), 64,511 with 0xff 0xfb (MP3),
    3,359,817 with "ID3", 67,324,752 with "PK\x03\x04". No such file continues with 5 zero bytes and `{"`."""
    if len(head) < 10:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    if not 2 <= length <= MAX_SAFETENSORS_HEADER or head[8:9] != b"{":
        return False
    after = head[9:].lstrip(JSON_BLANKS)
    return after[:1] in (b'"', b"}", b"")


def looks_like_text(head: bytes) -> bool:
    """UTF-8 text (a character cut at the end of the sample allowed) without NUL or any other C0 control than tab,
    newline, carriage return and form feed: what a prompt file holds. A media file has such bytes in its first
    few hundred, so text that happens to start like a signature ("ID3 tags", "OggS", "GIF89a") stays text."""
    body = head.removeprefix(b"\xef\xbb\xbf")
    if any(byte < 0x20 and byte not in TEXT_CONTROLS for byte in body) or b"\x7f" in body:
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(body) - 3 and exc.reason == "unexpected end of data"
    return True


def _ebml_kind(head: bytes) -> str:
    """Matroska and WebM share the EBML header; its DocType says which."""
    return "webm" if b"webm" in head[:64] else "mkv"


def _zip_kind(head: bytes) -> str:
    """torch.save writes a zip whose first member is <name>/data.pkl (or byteorder / version entries)."""
    name_length = int.from_bytes(head[26:28], "little") if len(head) >= 30 else 0
    first = head[30:30 + name_length]
    return "torch_zip" if first.endswith((b"data.pkl", b"byteorder", b"version", b".format_version")) else "zip"


def _text_kind(head: bytes) -> str:
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    if not text:
        return "empty" if not head else "text"
    if text[:1] in (b"{", b"["):
        return "json"
    lower = text[:64].lower()
    if lower.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml")):
        return "html"
    if text.startswith(b"version https://git-lfs"):
        return "lfs_pointer"
    if b"\x00" in head:
        return "unknown"  # binary data, not text
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not only a character cut at the end of the sample
            return "unknown"
    return "text"


def sniff(head: bytes, text_expected: bool = False) -> FileKind:
    """The kind of file whose first bytes are `head` (pass at least HEAD_BYTES when the file has them).

    Our own format first: a safetensors header of any length is safetensors, whatever its length's bytes spell.
    `text_expected` (a prompt file, never a widget: widget text is never sniffed): text is text (`looks_like_text`),
    even when it starts like a media signature; only what is not text is named by its signature."""
    if not head:
        return KINDS["empty"]
    if _is_safetensors(head):
        return KINDS["safetensors"]
    if text_expected and looks_like_text(head):
        return KINDS[_text_kind(head)]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        key = "png"
    elif head.startswith(b"\xff\xd8\xff"):
        key = "jpeg"
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        key = "webp"
    elif head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        key = "wav"
    elif head.startswith(b"fLaC"):
        key = "flac"
    elif head.startswith(b"OggS"):
        key = "ogg"
    elif head.startswith(b"ID3") or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        key = "mp3"
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        key = "gif"
    elif head[4:8] == b"ftyp":
        key = "mp4"
    elif head.startswith(b"\x1a\x45\xdf\xa3"):
        key = _ebml_kind(head)
    elif head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        key = _zip_kind(head)
    elif head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        key = "pickle"
    elif head.startswith(b"GGUF"):
        key = "gguf"
    else:
        key = _text_kind(head)
    return KINDS[key]


def output_name_problem(path: Path | str, wanted: str) -> str | None:
    """Why `path` is a wrong name for a file of kind `wanted` (its extension says another format), or None.
    E.g. demo --output x.png: the demo writes an MP4 video, so the name must end in .mp4."""
    kind = KINDS[wanted]
    path = Path(path)
    if path.suffix.lower() in kind.suffixes:
        return None
    suggestion = path.with_suffix(kind.suffixes[0]) if path.suffix else path.with_name(path.name + kind.suffixes[0])
    found = next((k for k in KINDS.values() if path.suffix.lower() in k.suffixes), None) if path.suffix else None
    said = f"its extension says {found.text.split(' (')[0]}" if found else (
        f"'{path.suffix}' is not an extension of {kind.text}" if path.suffix else "it has no extension")
    return (f"{path}: this writes {kind.text} but {said}; name it {suggestion} (the extension is how ComfyUI, "
            "players and file browsers pick the format)")
