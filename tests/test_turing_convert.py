"""bf16 -> fp16 converter (F06, F14): metadata kept, overflow refused, untouched tensors, atomic writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from subprocess import run as run_process

import pytest
import torch
from h3kit.adapters import bf16_convert
from h3kit.scripts import convert
from safetensors import safe_open
from safetensors.torch import save_file

METADATA = {"config": json.dumps({"_class_name": "CausalVideoAutoencoder", "dims": 3}), "format": "pt"}
STANDALONE = Path(convert.__file__).with_name("bf16_to_fp16.py")


def _source(folder: Path, extra: dict[str, torch.Tensor] | None = None) -> tuple[Path, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    tensors = {
        "encoder.conv.weight": (torch.randn(16, 8, 3) * 4).bfloat16(),
        "encoder.conv.bias": torch.randn(16).bfloat16(),
        "per_channel_statistics.mean": torch.randn(8, dtype=torch.float32),
        "decoder.scale": torch.randn(4).half(),
        "step": torch.tensor([3, 1, 4], dtype=torch.int64),
        "tiny": torch.tensor([1e-9, -2.0, 0.0]).bfloat16(),
        **(extra or {}),
    }
    path = folder / "vae_bf16.safetensors"
    save_file(tensors, str(path), metadata=METADATA)
    return path, tensors


def _read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str] | None]:
    with safe_open(str(path), framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}, handle.metadata()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_f14_metadata_and_names_survive_and_f06_bf16_becomes_fp16(tmp_path, monkeypatch):
    monkeypatch.setattr(bf16_convert, "CHUNK_ELEMENTS", 100)  # force several chunks per tensor
    source, tensors = _source(tmp_path)
    out = tmp_path / "vae_fp16.safetensors"
    result = bf16_convert.bf16_to_fp16(source, out)
    written, metadata = _read(out)
    assert result.written and metadata == METADATA
    assert set(written) == set(tensors)
    for name, original in tensors.items():
        if original.dtype == torch.bfloat16:
            assert written[name].dtype == torch.float16
            assert torch.equal(written[name], original.to(torch.float16)), name
        else:  # F32 / F16 / I64 copied unchanged
            assert written[name].dtype == original.dtype and torch.equal(written[name], original), name
    assert out.stat().st_size < source.stat().st_size + 64  # same 2 bytes per value, not an fp32 upcast
    peaks = {row.name: row.max_abs for row in result.tensors}
    assert peaks["encoder.conv.weight"] == pytest.approx(float(tensors["encoder.conv.weight"].float().abs().max()))
    assert peaks["per_channel_statistics.mean"] is None
    assert next(r for r in result.tensors if r.name == "tiny").flushed_to_zero == 1


def test_overflow_is_refused_naming_the_tensor_and_nothing_is_written(tmp_path):
    source, _ = _source(tmp_path, {"huge": torch.tensor([1.0, -70000.0, 3.0]).bfloat16(),
                                   "also_huge": torch.tensor([9e4]).bfloat16()})
    out = tmp_path / "out.safetensors"
    done = run_process([sys.executable, str(STANDALONE), str(source), str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "huge (max |x| 70" in done.stderr and "also_huge" in done.stderr and "--clamp" in done.stderr
    assert not out.exists() and _leftovers(tmp_path) == []


def test_clamp_writes_fp16_max(tmp_path):
    source, _ = _source(tmp_path, {"huge": torch.tensor([1.0, -70000.0]).bfloat16()})
    out = tmp_path / "out.safetensors"
    result = bf16_convert.bf16_to_fp16(source, out, clamp=True)
    written, _ = _read(out)
    assert torch.equal(written["huge"], torch.tensor([1.0, -65504.0], dtype=torch.float16))
    assert next(r for r in result.tensors if r.name == "huge").clamped == 1


def test_refuses_existing_output_and_same_file(tmp_path):
    source, _ = _source(tmp_path)
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"user file")
    with pytest.raises(bf16_convert.ConvertError, match="--overwrite"):
        bf16_convert.bf16_to_fp16(source, out)
    assert out.read_bytes() == b"user file"
    with pytest.raises(bf16_convert.ConvertError, match="same file"):
        bf16_convert.bf16_to_fp16(source, tmp_path / "." / source.name, overwrite=True)
    bf16_convert.bf16_to_fp16(source, out, overwrite=True)
    assert _read(out)[1] == METADATA


def test_not_a_safetensors_file_is_a_clear_error(tmp_path):
    bogus = tmp_path / "model.safetensors"
    bogus.write_bytes(b"\x00" * 4)
    with pytest.raises(bf16_convert.ConvertError, match="not a safetensors file the safetensors library would load"):
        bf16_convert.bf16_to_fp16(bogus, tmp_path / "out.safetensors")


@pytest.mark.parametrize("existing", [False, True])
def test_interrupted_write_leaves_no_partial_output(tmp_path, monkeypatch, existing):
    source, _ = _source(tmp_path)
    out = tmp_path / "out.safetensors"
    if existing:
        out.write_bytes(b"previous result")
    calls = []

    def interrupted(src, dst, plan, progress):
        calls.append(plan.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_copy(src, dst, plan, progress)

    real_copy = bf16_convert.copy_tensor
    monkeypatch.setattr(bf16_convert, "copy_tensor", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bf16_convert.bf16_to_fp16(source, out, overwrite=True)
    assert _leftovers(tmp_path) == []
    assert out.read_bytes() == b"previous result" if existing else not out.exists()


def test_cli_prints_a_per_tensor_summary(tmp_path):
    source, _ = _source(tmp_path)
    out = tmp_path / "out.safetensors"
    args = type("Args", (), {"input": source, "output": out, "clamp": False, "overwrite": False})()
    assert convert.run(args) == 0
    assert convert.run(args) == 2  # second time OUT exists


def test_standalone_script_converts(tmp_path):
    source, _ = _source(tmp_path)
    out = tmp_path / "out.safetensors"
    done = run_process([sys.executable, str(STANDALONE), str(source), str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "encoder.conv.weight" in done.stdout and "BF16->F16" in done.stdout and "verified" in done.stdout
    assert _read(out)[1] == METADATA
