"""Issue 4: cached conditioning (format, names, bad files, never unpickling, nodes) — tier (a)."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import pickletools
import struct
import sys
import types
import zipfile
from pathlib import Path

import h3kit
import pytest
import torch
from h3kit.nodes import cond_cache_format as fmt
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.conditioning_cache import H3KitLoadConditioning, H3KitSaveConditioning, cache_folders
from safetensors import safe_open
from safetensors.torch import save_file


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "conditioning_cache"
    monkeypatch.setenv("H3KIT_COND_CACHE_DIR", str(folder))
    return folder


def h3_like() -> list:
    """Shaped like H3's encode: no pooled output, token tags, keyframe/reference dicts with latents."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 10, generator=g)
    return [[
        torch.randn(1, 12, 16, generator=g).to(torch.bfloat16),
        {
            "pooled_output": None,
            "minimax_token_tags": torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.int64),
            "minimax_keyframes": [
                {"latent": torch.randn(1, 24, 1, 4, 6, generator=g), "frame_idx": 0, "strength": 1.0},
                {"latent": torch.randn(1, 24, 1, 4, 6, generator=g).half(), "frame_idx": -1, "strength": 0.35},
            ],
            "minimax_refs": [{"latent": base.t(), "kind": "image", "label": "<Picture 1>", "mask": base > 0}],
            "minimax_visual_cond_noise_aug": 0.0,
            "latent_shapes": [torch.Size([1, 24, 8, 4, 6]), torch.Size([1, 32, 2, 40])],
            "strided": base[:, ::3],
            "specials": {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "neg_zero": -0.0, "tiny": 5e-324,
                         "big_int": 2**70, "tuple": (1, "a", None, True), "$dollar": 1, 3: "int key",
                         ("area", 2): [False, None]},
        },
    ]]


def ltx_like() -> list:
    """Shaped like LTX-2.5 after LTXVConditioning: attention mask, frame_rate, two entries."""
    g = torch.Generator().manual_seed(1)
    entry = lambda: [  # noqa: E731
        torch.randn(1, 16, 32, generator=g).to(torch.bfloat16),
        {"pooled_output": None, "attention_mask": torch.cat([torch.ones(1, 10), torch.zeros(1, 6)], 1).long(),
         "frame_rate": 24.0, "unprocessed_ltxav_embeds": True, "fp32": torch.randn(3, generator=g)},
    ]
    return [entry(), entry()]


def bits(value: float) -> bytes:
    return struct.pack(">d", value)


def assert_identical(a, b, where="value"):
    """Same types, same container order, tensors with the same dtype, shape and bytes, floats bit for bit."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{list(a.shape)} != {b.dtype}{list(b.shape)}"
        assert b.device.type == "cpu"
        assert torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)), where
    elif isinstance(a, float):
        assert bits(a) == bits(b), f"{where}: {a!r} != {b!r}"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_identical(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, where


def save_node(cache_dir, conditioning, name="c", **kw):
    return H3KitSaveConditioning().save(conditioning, name, **kw)


def load_node(name="c"):
    return H3KitLoadConditioning().load(name)


# ------------------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("make", [h3_like, ltx_like])
def test_round_trip_is_bitwise_identical(cache_dir, make):
    original = make()
    save_node(cache_dir, original, prompt_text="4K, refined, high quality")
    loaded, prompt_text, _ = load_node()
    assert_identical(original, loaded)
    assert prompt_text == "4K, refined, high quality"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.bool])
def test_every_dtype_round_trips(cache_dir, dtype):
    g = torch.Generator().manual_seed(2)
    raw = torch.randn(5, 7, generator=g) * 1000
    tensor = (raw > 0) if dtype == torch.bool else raw.to(dtype)
    special = tensor.clone()
    if dtype.is_floating_point:
        special.view(-1)[:3] = torch.tensor([math.nan, math.inf, -0.0]).to(dtype)
    original = [[tensor.t(), {"pooled_output": special, "scalar": tensor[0, 0].clone(), "empty": tensor[:0]}]]
    save_node(cache_dir, original)
    assert_identical(original, load_node()[0])


def test_nan_payload_and_negative_zero_floats_keep_their_bits(cache_dir):
    odd_nan = struct.unpack(">d", struct.pack(">Q", 0x7FF8_0000_0000_BEEF))[0]
    original = [[torch.zeros(1, 2, 3), {"a": odd_nan, "b": -0.0, "c": [math.inf, -math.inf]}]]
    save_node(cache_dir, original)
    loaded = load_node()[0]
    assert bits(loaded[0][1]["a"]) == struct.pack(">Q", 0x7FF8_0000_0000_BEEF)
    assert_identical(original, loaded)


def test_non_contiguous_inputs_round_trip_and_come_back_writable(cache_dir):
    big = torch.arange(2 * 8 * 6, dtype=torch.float32).reshape(2, 8, 6)
    view = big.permute(2, 0, 1)[:, :, ::2]
    assert not view.is_contiguous()
    save_node(cache_dir, [[view, {"mask": big[0, :, 0] > 10}]])
    loaded = load_node()[0]
    assert_identical([[view, {"mask": big[0, :, 0] > 10}]], loaded)
    loaded[0][0].add_(1)  # downstream nodes may write in place; must not raise or touch the file
    assert_identical([[view, {"mask": big[0, :, 0] > 10}]], load_node()[0])


def test_one_tensor_used_twice_is_stored_once_and_shared_after_loading(cache_dir):
    shared = torch.randn(1, 4, 8)
    save_node(cache_dir, [[shared, {"pooled_output": shared}]])
    loaded = load_node()[0]
    assert loaded[0][1]["pooled_output"] is loaded[0][0]
    with safe_open(str(cache_dir / "c.safetensors"), "pt") as f:
        assert len(list(f.keys())) == 1


def test_metadata_records_provenance_and_every_tensor(cache_dir):
    save_node(cache_dir, ltx_like(), prompt_text="4K, refined", encoder_name="gemma.safetensors (type ltxv)")
    with safe_open(str(cache_dir / "c.safetensors"), "pt") as f:
        md = f.metadata()
    assert md["h3kit_format"] == "h3kit.conditioning" and md["h3kit_format_version"] == "1"
    assert md["prompt_text"] == "4K, refined" and md["encoder"] == "gemma.safetensors (type ltxv)"
    assert md["prompt_sha256"] == hashlib.sha256(b"4K, refined").hexdigest()
    assert md["h3kit_version"] == h3kit.__version__
    assert md["created_utc"].endswith("Z") and md["created_utc"][:2] == "20"
    records = json.loads(md["tensors"])
    assert {r["path"] for r in records.values()} == {
        "[0][0]", "[0][1]['attention_mask']", "[0][1]['fp32']", "[1][0]", "[1][1]['attention_mask']", "[1][1]['fp32']",
    }
    assert records["t0"]["dtype"] == "bfloat16" and records["t0"]["shape"] == [1, 16, 32]
    json.loads(md["structure"])  # strict JSON: no bare NaN/Infinity


def test_file_is_standard_safetensors_readable_by_the_reference_loader(cache_dir):
    original = h3_like()
    save_node(cache_dir, original)
    from safetensors.torch import load_file

    tensors = load_file(str(cache_dir / "c.safetensors"))
    assert torch.equal(tensors["t0"], original[0][0])


def test_file_with_an_unpadded_header_from_another_writer_still_loads_bitwise(cache_dir):
    """safetensors pads its header to 8 bytes but the format does not require it: odd offsets must still load."""
    original = ltx_like()
    save_node(cache_dir, original)
    path = cache_dir / "c.safetensors"
    data = path.read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    header = data[8 : 8 + header_len] + b" "
    path.write_bytes(len(header).to_bytes(8, "little") + header + data[8 + header_len :])
    assert (8 + len(header)) % 8 == 1
    assert_identical(original, load_node()[0])


@pytest.mark.parametrize("bad, where", [
    (object(), "[0][1]['hooks']"),
    (lambda: None, "[0][1]['hooks']"),
    ({"inner": [1, print]}, "[0][1]['hooks']['inner'][1]"),
])
def test_unstorable_value_is_an_error_naming_its_key_path(cache_dir, bad, where):
    with pytest.raises(H3KitInputError) as err:
        save_node(cache_dir, [[torch.zeros(1, 2, 3), {"hooks": bad}]])
    assert err.value.input_name == "conditioning" and where in str(err.value)
    assert not cache_dir.exists() or not any(cache_dir.iterdir())


def test_unstorable_dtype_and_wrong_structure_are_errors(cache_dir):
    with pytest.raises(H3KitInputError, match=r"\[0\]\[1\]\['c'\].*complex64"):
        save_node(cache_dir, [[torch.zeros(1, 2, 3), {"c": torch.zeros(2, dtype=torch.complex64)}]])
    with pytest.raises(H3KitInputError, match="not a \\[tensor, dict\\] pair"):
        save_node(cache_dir, [[torch.zeros(1, 2, 3)]])
    with pytest.raises(H3KitInputError, match="non-empty list"):
        save_node(cache_dir, [])


# ------------------------------------------------------------------------------------------------ names

BAD_NAMES = {
    "slash": "sub/c", "backslash": "sub\\c", "parent": "..", "parent_path": "../c", "absolute": "/tmp/c",
    "windows_absolute": "C:\\c", "drive_relative": "C:c", "hidden": ".c", "empty": "", "only_suffix": ".safetensors",
    "too_long": "x" * 250, "reserved": "CON", "reserved_with_ext": "nul.cache", "reserved_com": "com1",
    "nul_byte": "a\x00b", "leading_space": " c", "trailing_space": "c ", "trailing_dot": "c.", "wildcard": "c*",
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_bad_names_are_refused_and_nothing_is_written(cache_dir, tmp_path, case):
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(H3KitInputError) as err:
        save_node(cache_dir, ltx_like(), name=BAD_NAMES[case])
    assert err.value.input_name == "name" and "Fix:" in str(err.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    verdict = H3KitLoadConditioning.VALIDATE_INPUTS(BAD_NAMES[case])
    assert isinstance(verdict, str) and "'name'" in verdict


@pytest.mark.parametrize("name, file_name", [
    ("ltx_generic_refine", "ltx_generic_refine.safetensors"),
    ("ltx_generic_refine.safetensors", "ltx_generic_refine.safetensors"),
    ("Übersicht v1.2", "Übersicht v1.2.safetensors"),
    ("x.SAFETENSORS", "x.SAFETENSORS"),
])
def test_good_names(cache_dir, name, file_name):
    save_node(cache_dir, ltx_like(), name=name)
    assert [p.name for p in cache_dir.iterdir()] == [file_name]
    assert H3KitLoadConditioning.VALIDATE_INPUTS(file_name) is True


# ------------------------------------------------------------------------------------------------ saving


def test_save_reports_the_written_path_in_ui_and_report(cache_dir):
    out = save_node(cache_dir, ltx_like(), name="refine", prompt_text="p")
    path = cache_dir / "refine.safetensors"
    assert path.is_file()
    (line,) = out["ui"]["text"]
    assert str(path) in line and line.startswith("saved")
    report = json.loads(out["result"][0])
    assert report["status"] == "written" and report["path"] == str(path) and report["entries"] == 2


def test_existing_file_is_never_replaced_unless_asked(cache_dir):
    save_node(cache_dir, ltx_like(), name="keep", prompt_text="first")
    path = cache_dir / "keep.safetensors"
    first = path.read_bytes()
    with pytest.raises(H3KitInputError, match="overwrite") as err:
        save_node(cache_dir, h3_like(), name="keep", prompt_text="second")
    assert err.value.input_name == "name" and str(path) in str(err.value)
    assert path.read_bytes() == first
    out = save_node(cache_dir, h3_like(), name="keep", prompt_text="second", overwrite=True)
    assert json.loads(out["result"][0])["status"] == "replaced"
    assert_identical(h3_like(), load_node("keep")[0])


def test_saving_identical_content_again_is_a_no_op(cache_dir):
    save_node(cache_dir, ltx_like(), name="same", prompt_text="p")
    path = cache_dir / "same.safetensors"
    stamp = path.stat().st_mtime_ns
    out = save_node(cache_dir, ltx_like(), name="same", prompt_text="p")
    assert json.loads(out["result"][0])["status"] == "unchanged" and out["ui"]["text"][0].startswith("unchanged")
    assert path.stat().st_mtime_ns == stamp


def test_failed_write_keeps_the_old_file_and_leaves_no_temp_file(cache_dir, monkeypatch):
    save_node(cache_dir, ltx_like(), name="safe")
    before = (cache_dir / "safe.safetensors").read_bytes()

    def half_write(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("safetensors.torch.save_file", half_write)
    with pytest.raises(H3KitInputError, match="disk is full; the existing file is unchanged"):
        save_node(cache_dir, h3_like(), name="safe", overwrite=True)
    assert (cache_dir / "safe.safetensors").read_bytes() == before
    assert [p.name for p in cache_dir.iterdir()] == ["safe.safetensors"]


def test_provenance_is_traced_from_the_graph_when_not_given(cache_dir):
    graph = {
        "1": {"class_type": "CLIPLoader", "inputs": {"clip_name": "gemma.safetensors", "type": "ltxv"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "4K, refined", "clip": ["1", 0]}},
        "3": {"class_type": "H3KitSaveConditioning", "inputs": {"conditioning": ["2", 0], "name": "t"}},
    }
    out = save_node(cache_dir, ltx_like(), name="t", prompt=graph, unique_id="3")
    md = fmt.read_cache(cache_dir / "t.safetensors").metadata
    assert md["prompt_text"] == "4K, refined" and md["encoder"] == "gemma.safetensors (type ltxv)"
    assert json.loads(out["result"][0])["provenance_source"] == "node 2 (CLIPTextEncode)"


def test_missing_prompt_text_is_a_visible_warning(cache_dir):
    report = json.loads(save_node(cache_dir, ltx_like())["result"][0])
    assert any("prompt_text" in w for w in report["warnings"])
    assert report["provenance_source"] == "none"


def test_save_is_changed_follows_the_target_file(cache_dir):
    absent = H3KitSaveConditioning.IS_CHANGED(name="x")
    save_node(cache_dir, ltx_like(), name="x")
    written = H3KitSaveConditioning.IS_CHANGED(name="x")
    assert written != absent
    (cache_dir / "x.safetensors").unlink()
    assert H3KitSaveConditioning.IS_CHANGED(name="x") == absent


# ------------------------------------------------------------------------------------------------ loading


def test_load_combo_lists_the_folder_and_declares_its_model_folder(cache_dir):
    save_node(cache_dir, ltx_like(), name="b")
    save_node(cache_dir, ltx_like(), name="a")
    (cache_dir / ".hidden.safetensors").write_bytes(b"x")
    (cache_dir / "old.pt").write_bytes(b"x")
    names, opts = H3KitLoadConditioning.INPUT_TYPES()["required"]["name"]
    assert names == ["a.safetensors", "b.safetensors"]
    assert opts["model_folder"] == "conditioning_cache" and opts["tooltip"]


def test_load_combo_is_empty_outside_comfyui_without_a_folder(monkeypatch):
    monkeypatch.delenv("H3KIT_COND_CACHE_DIR", raising=False)
    assert H3KitLoadConditioning.INPUT_TYPES()["required"]["name"][0] == []


def test_missing_name_lists_the_available_ones(cache_dir):
    save_node(cache_dir, ltx_like(), name="ltx_generic_refine")
    verdict = H3KitLoadConditioning.VALIDATE_INPUTS("nope.safetensors")
    assert isinstance(verdict, str) and "available: ltx_generic_refine.safetensors" in verdict
    with pytest.raises(H3KitInputError, match="available: ltx_generic_refine.safetensors"):
        load_node("nope.safetensors")


def test_load_is_changed_when_the_file_is_replaced(cache_dir):
    save_node(cache_dir, ltx_like(), name="c")
    first = H3KitLoadConditioning.IS_CHANGED("c.safetensors")
    assert H3KitLoadConditioning.IS_CHANGED("c.safetensors") == first
    save_node(cache_dir, h3_like(), name="c", overwrite=True)
    assert H3KitLoadConditioning.IS_CHANGED("c.safetensors") != first


def test_provenance_output_describes_the_file(cache_dir):
    save_node(cache_dir, ltx_like(), prompt_text="4K", encoder_name="gemma")
    _, prompt_text, info = load_node()
    info = json.loads(info)
    assert prompt_text == "4K" and info["encoder"] == "gemma" and info["file"] == str(cache_dir / "c.safetensors")
    assert info["entries"][0]["tensor"] == "bfloat16[1, 16, 32]"
    assert info["entries"][0]["options"]["attention_mask"] == "int64[1, 16]"


def test_inside_comfyui_the_folder_is_registered_under_models(tmp_path, monkeypatch):
    registered: dict = {}
    fake = types.ModuleType("folder_paths")  # the public API only: no folder_names_and_paths to write to (issue 17)
    fake.models_dir = str(tmp_path / "models")

    def add_model_folder_path(kind, path, is_default=False):
        registered.setdefault(kind, ([], set()))[0].append(path)

    fake.add_model_folder_path = add_model_folder_path
    fake.get_folder_paths = lambda kind: list(registered[kind][0])  # KeyError for an unknown kind, like the host
    monkeypatch.setitem(sys.modules, "folder_paths", fake)
    monkeypatch.setenv("H3KIT_COND_CACHE_DIR", str(tmp_path / "ignored_inside_comfyui"))
    assert cache_folders() == [tmp_path / "models" / "conditioning_cache"]
    save_node(None, ltx_like(), name="in_comfy")
    assert (tmp_path / "models" / "conditioning_cache" / "in_comfy.safetensors").is_file()
    assert H3KitLoadConditioning.INPUT_TYPES()["required"]["name"][0] == ["in_comfy.safetensors"]


# ------------------------------------------------------------------------------------------------ bad files


def _valid_file(cache_dir, name="c") -> Path:
    save_node(cache_dir, ltx_like(), name=name, prompt_text="p")
    return cache_dir / f"{name}.safetensors"


def _rewrite_metadata(path: Path, **changes) -> None:
    with safe_open(str(path), "pt") as f:
        metadata = {**f.metadata(), **changes}
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(path), metadata=metadata)


def _header_len(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[:8], "little")


def make_bad_file(kind: str, path: Path) -> None:
    data = path.read_bytes()
    header_end = 8 + _header_len(path)
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random_bytes":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "truncated_in_length_field":
        path.write_bytes(data[:5])
    elif kind == "truncated_in_header":
        path.write_bytes(data[: header_end - 20])
    elif kind == "truncated_in_data":
        path.write_bytes(data[:-100])
    elif kind == "corrupt_header_json":
        path.write_bytes(data[:9] + b"\xff" + data[10:])
    elif kind == "corrupt_tensor_data":
        flipped = bytearray(data)
        flipped[header_end + 5] ^= 0x40
        path.write_bytes(bytes(flipped))
    elif kind == "trailing_garbage":
        path.write_bytes(data + b"garbage")
    elif kind == "foreign_model":
        save_file({"model.weight": torch.zeros(4, 4)}, str(path), metadata={"format": "pt"})
    elif kind == "foreign_ltxv_conditioning":
        save_file({"conditioning_data_0": torch.zeros(1, 4, 8), "attention_mask_0": torch.ones(1, 4)}, str(path))
    elif kind == "future_version":
        _rewrite_metadata(path, h3kit_format_version="2", h3kit_version="9.0.0")
    elif kind == "table_mismatch":
        _rewrite_metadata(path, tensors=json.dumps({"t0": {"path": "[0][0]", "dtype": "float32", "shape": [1]}}))
    elif kind == "corrupt_structure":
        _rewrite_metadata(path, structure="[[{\"$tensor\": \"t9\"}, {}]]")
    else:
        raise AssertionError(kind)


BAD_FILES = {
    "empty": r"is an empty file \(0 bytes\), not an H3Kit conditioning cache", "random_bytes": "not a usable safetensors file", "truncated_in_length_field": "too short",
    "truncated_in_header": "truncated", "truncated_in_data": "truncated",
    "corrupt_header_json": "not UTF-8 text", "corrupt_tensor_data": "checksum",
    "trailing_garbage": "follow the last tensor", "foreign_model": "not an H3Kit conditioning cache",
    "foreign_ltxv_conditioning": "LTXVLoadConditioning", "future_version": "newer H3Kit",
    "table_mismatch": "tensor table", "corrupt_structure": "corrupt structure",
}


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_file_gives_a_clear_error_naming_the_file(cache_dir, kind):
    path = _valid_file(cache_dir)
    make_bad_file(kind, path)
    with pytest.raises(fmt.CacheError, match=BAD_FILES[kind]) as err:
        fmt.read_cache(path)
    assert str(path) in err.value.problem and err.value.fix
    with pytest.raises(H3KitInputError, match=BAD_FILES[kind]):
        load_node("c.safetensors")


def test_header_level_problems_are_caught_when_the_prompt_is_queued(cache_dir):
    make_bad_file("future_version", _valid_file(cache_dir, "future"))
    make_bad_file("foreign_model", _valid_file(cache_dir, "model"))
    for name, expected in (("future.safetensors", "newer H3Kit"), ("model.safetensors", "not an H3Kit")):
        verdict = H3KitLoadConditioning.VALIDATE_INPUTS(name)
        assert isinstance(verdict, str) and expected in verdict and "Fix:" in verdict


# ------------------------------------------------------------------------------------- planted pickles


class _SideEffect:
    """Unpickling this creates a directory: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


def _plant(path: Path, marker: Path, style: str) -> None:
    payload = [[torch.zeros(1, 2, 3), {"evil": _SideEffect(marker)}]]
    if style == "zip":
        torch.save(payload, path)
    elif style == "legacy":
        torch.save(payload, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=5))


def _pickle_streams(path: Path) -> list[bytes]:
    """The pickle byte streams inside a torch.save file (zip: data.pkl; legacy: the stream is the file)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return [archive.read(name) for name in archive.namelist() if name.endswith(".pkl")]
    return [path.read_bytes()]


def _calls_makedirs(stream: bytes) -> bool:
    """True when the pickle would import and call os.makedirs: read from its opcodes, never executed."""
    strings: list[str] = []
    found = False
    source = io.BytesIO(stream)
    try:
        while source.tell() < len(stream):  # a legacy torch file holds several pickles in a row
            for opcode, arg, _ in pickletools.genops(source):
                if isinstance(arg, str):
                    strings.append(arg)
                if opcode.name == "GLOBAL" and isinstance(arg, str) and arg.split()[-1] == "makedirs":
                    found = True
                if opcode.name == "STACK_GLOBAL" and strings[-1:] == ["makedirs"]:
                    found = True
    except ValueError:  # ... followed by raw storage bytes, which are no pickle
        pass
    return found


@pytest.mark.parametrize("style", ["zip", "legacy", "raw_pickle"])
def test_planted_pickle_would_run_code_if_unpickled(tmp_path, style):
    """Control, without executing the payload: the planted file's pickle imports os.makedirs and calls it
    (GLOBAL/STACK_GLOBAL + REDUCE), so an unrestricted unpickler would create the marker; the tests below
    prove H3Kit never lets that happen."""
    _plant(tmp_path / "evil.pt", tmp_path / "pwned", style)
    assert any(_calls_makedirs(stream) for stream in _pickle_streams(tmp_path / "evil.pt"))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("style", ["zip", "legacy", "raw_pickle"])
def test_planted_pickle_in_the_cache_folder_is_never_executed(cache_dir, tmp_path, style):
    marker = tmp_path / "pwned"
    cache_dir.mkdir()
    _plant(cache_dir / "evil.safetensors", marker, style)
    verdict = H3KitLoadConditioning.VALIDATE_INPUTS("evil.safetensors")
    assert isinstance(verdict, str) and "never unpickles" in verdict
    with pytest.raises(H3KitInputError, match="cond import"):
        load_node("evil.safetensors")
    assert not marker.exists()
