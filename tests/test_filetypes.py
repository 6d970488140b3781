"""Issue 27: file types recognised by their first bytes (checks/filetypes.py), from files written by the real
libraries (Pillow, PyAV, torch, safetensors, zipfile), never by extension; and output names checked against
the format a command writes."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from h3kit.adapters.files import sniff_file
from h3kit.checks.filetypes import (
    AUDIO_KINDS,
    HEAD_BYTES,
    IMAGE_KINDS,
    KINDS,
    MAX_SAFETENSORS_HEADER,
    VIDEO_KINDS,
    output_name_problem,
    sniff,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from safetensors.torch import save_file


def _image(path: Path, fmt: str) -> Path:
    Image.new("RGB", (16, 16), (200, 10, 10)).save(path, format=fmt)
    return path


def _video(path: Path, fmt: str, codec: str) -> Path:
    with av.open(str(path), "w", format=fmt) as container:
        stream = container.add_stream(codec, rate=24)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for _ in range(3):
            frame = av.VideoFrame.from_ndarray(np.zeros((32, 32, 3), np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    return path


def _wav(path: Path) -> Path:
    import wave

    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(8000)
        handle.writeframes(bytes(160))
    return path


def _gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    return path


WRITERS = {
    "png": lambda p: _image(p / "a.png", "PNG"),
    "jpeg": lambda p: _image(p / "a.jpg", "JPEG"),
    "webp": lambda p: _image(p / "a.webp", "WEBP"),
    "gif": lambda p: _image(p / "a.gif", "GIF"),
    "mp4": lambda p: _video(p / "a.mp4", "mp4", "h264"),
    "mkv": lambda p: _video(p / "a.mkv", "matroska", "h264"),
    "torch_zip": lambda p: (torch.save({"x": torch.zeros(2)}, p / "a.pt"), p / "a.pt")[1],
    "pickle": lambda p: (torch.save({"x": torch.zeros(2)}, p / "b.pt", _use_new_zipfile_serialization=False),
                         p / "b.pt")[1],
    "zip": lambda p: _zip(p / "a.zip"),
    "wav": lambda p: _wav(p / "a.wav"),
    "gguf": lambda p: _gguf(p / "a.gguf"),
    "safetensors": lambda p: (save_file({"w": torch.zeros(3)}, str(p / "a.safetensors")), p / "a.safetensors")[1],
    "json": lambda p: (p / "a.json").write_text('\ufeff  {"1": {}}', encoding="utf-8") and p / "a.json",
    "html": lambda p: (p / "a.safetensors").write_text("<!DOCTYPE html><html>login</html>") and p / "a.safetensors",
    "lfs_pointer": lambda p: (p / "a.gguf").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\n")
    and p / "a.gguf",
    "text": lambda p: (p / "a.txt").write_text("4K, refined, natural motion.") and p / "a.txt",
    "empty": lambda p: (p / "a.json").write_bytes(b"") or p / "a.json",
}


@pytest.mark.parametrize("key", sorted(WRITERS))
def test_each_kind_is_recognised_from_a_real_file(tmp_path, key):
    path = WRITERS[key](tmp_path)
    assert sniff_file(path).key == key


def test_kinds_ignore_the_extension(tmp_path):
    png = _image(tmp_path / "renamed.safetensors", "PNG")
    assert sniff_file(png).key == "png"
    weights = tmp_path / "weights.png"
    save_file({"w": torch.zeros(3)}, str(weights))
    assert sniff_file(weights).key == "safetensors"


def test_webm_is_told_from_matroska_by_its_doctype():
    ebml = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm\x42\x87\x81\x02"
    assert sniff(ebml).key == "webm"
    assert sniff(ebml.replace(b"webm", b"matroska"[:4])).key == "mkv"


@pytest.mark.parametrize("head, key", [
    (b"\x00" * 64, "unknown"),  # binary data is never "text"
    (struct.pack("<Q", 10**12) + b"{", "unknown"),  # a header length no safetensors file has
    (b"\x80\x04\x95", "pickle"),
    (b"\x80\x02}q\x00X\x01\x00", "pickle"),  # the first 8 bytes of pickle.dumps({"a": 1}, protocol=2)
    (b"   \n", "text"),
    (b"fLaC\x00\x00\x00\x22", "flac"),
    (b"OggS\x00\x02", "ogg"),
    (b"ID3\x04\x00", "mp3"),
    (b"", "empty"),
])
def test_boundaries(head, key):
    assert sniff(head).key == key


def test_sniffing_reads_only_the_head(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as handle:
        handle.write(b"GGUF")
        handle.truncate(2**33)  # 8 GiB sparse file: reading it would take minutes
    assert sniff_file(big).key == "gguf" and HEAD_BYTES <= 4096
    assert sniff_file(tmp_path / "missing") is None and sniff_file(tmp_path) is None


@pytest.mark.parametrize("name, wanted, problem", [
    ("x.mp4", "mp4", None),
    ("X.MP4", "mp4", None),
    ("x.png", "mp4", "this writes an MP4/MOV video but its extension says a PNG image; name it x.mp4"),
    ("x", "mp4", "it has no extension; name it x.mp4"),
    ("x.mp3", "mp4", "this writes an MP4/MOV video but its extension says an MP3 audio file; name it x.mp4"),
    ("x.mpg", "mp4", "'.mpg' is not an extension of an MP4/MOV video; name it x.mp4"),
    ("out.safetensors", "safetensors", None),
    ("out.gguf", "safetensors", "its extension says a GGUF model file; name it out.safetensors"),
])
def test_output_names_are_checked_against_the_format_written(name, wanted, problem):
    found = output_name_problem(Path(name), wanted)
    assert (found is None) == (problem is None)
    if problem:
        assert problem in found


def test_every_kind_has_a_text_for_messages():
    assert all(kind.text.startswith(("a ", "an ")) for kind in KINDS.values())


# ------------------------------------------------------------------------------------------- issue 33 item 6
# Header lengths whose little-endian bytes spell another signature: a pickle's \x80 \x02..\x05 (640, 896, 1152,
# 1408 and every 0x..0280-0x..0580), MP3's \xff\xfb / \xff\xf3 / \xff\xf2, "ID3", JPEG's \xff\xd8\xff, "PK\x03\x04".
SPELLING_LENGTHS = [640, 896, 1152, 1408, 0x010280, 0x050580, 0xFBFF, 0xF3FF, 0xF2FF, 0x01FBFF, 0x334449,
                    0xFFD8FF, 0x04034B50, 0x04334449, MAX_SAFETENSORS_HEADER]
MEDIA = IMAGE_KINDS | VIDEO_KINDS | AUDIO_KINDS | {"pickle", "torch_zip", "zip", "gguf"}


def _header_head(length: int, body: bytes = b'{"__metadata__":{"h3kit_format":"h3kit.conditioning"}}') -> bytes:
    return (struct.pack("<Q", length) + body + b" " * HEAD_BYTES)[:HEAD_BYTES]


@pytest.mark.parametrize("body", [b'{"__metadata__":{}}', b'{"t0":{"dtype":"BF16"', b"{}", b'{ \n "w"'])
def test_a_safetensors_header_of_every_length_is_safetensors(body):
    lengths = [*range(2, 2**17), *SPELLING_LENGTHS]
    wrong = [(n, sniff(_header_head(n, body)).key) for n in lengths if sniff(_header_head(n, body)).key != "safetensors"]
    assert not wrong, wrong[:10]


def _sized_safetensors(path: Path, header: int) -> Path:
    """A real safetensors file (written by the library) whose JSON header is exactly `header` bytes long."""
    for pad in range(header):
        save_file({"w": torch.zeros(3)}, str(path), metadata={"pad": "x" * pad})
        (length,) = struct.unpack("<Q", path.read_bytes()[:8])
        if length == header:
            return path
    raise AssertionError(f"no padding gives a {header}-byte header")


@pytest.mark.parametrize("header", [640, 896, 1152, 1408])
def test_a_real_file_whose_header_length_spells_a_pickle_is_safetensors(tmp_path, header):
    path = _sized_safetensors(tmp_path / "a.safetensors", header)
    assert path.read_bytes()[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
    assert sniff_file(path).key == "safetensors"
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(path.read_bytes()[:header // 2])  # cut inside the header: still ours, damaged
    assert sniff_file(truncated).key == "safetensors"


@settings(max_examples=60)
@given(metadata=st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=400), max_size=4),
       names=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True))
def test_whatever_the_library_writes_is_safetensors(metadata, names):
    from safetensors.torch import save

    data = save({name: torch.zeros(i + 1) for i, name in enumerate(names)}, metadata=metadata or None)
    assert sniff(data[:HEAD_BYTES]).key == "safetensors"


PROMPT_STARTS = ["ID3 tags, a record shop at night", "OggS", "fLaC is a codec", "GIF89a: a looping cat",
                 "RIFF1234WAVEfmt ", "GGUF", "PK zip", "\u00ff\u00fb", "OggS\u00ff", "<Shot 1>", "{ \"x\": 1 }"]


@pytest.mark.parametrize("text", PROMPT_STARTS)
def test_prompt_text_is_text_whatever_it_starts_with(tmp_path, text):
    path = tmp_path / "prompt.txt"
    path.write_text(text + "\n[Shot 1] A kite rises.", encoding="utf-8")
    assert sniff_file(path, text_expected=True).key in ("text", "json")
    assert sniff(b"ID3\x04\x00\x00\x00\x00\x0f\x76", text_expected=True).key == "mp3"  # a real MP3 stays an MP3


@settings(max_examples=100)
@given(start=st.sampled_from(["", "ID3", "OggS", "fLaC", "GIF89a", "RIFF", "GGUF", "PK"]),
       text=st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\t\n\r"), max_size=300))
def test_no_text_is_sniffed_as_media(start, text):
    head = (start + text).encode("utf-8")[:HEAD_BYTES]
    assert sniff(head, text_expected=True).key not in MEDIA | {"safetensors", "unknown"}
