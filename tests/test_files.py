"""adapters/files.py, the one atomic writer: all or nothing, never overwrites unless asked, honours the umask."""

from __future__ import annotations

import os
import stat

import pytest
from h3kit.adapters import files


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_result_has_the_mode_open_would_give(tmp_path, umask, mask, mode):
    umask(mask)
    path = files.write_bytes(tmp_path / "a.bin", b"x")
    assert stat.S_IMODE(path.stat().st_mode) == mode  # not mkstemp's 0600


def test_never_overwrites_unless_asked(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("mine")
    with pytest.raises(FileExistsError):
        files.write_text(target, "theirs")
    assert target.read_text() == "mine"
    files.write_text(target, "theirs", overwrite=True)
    assert target.read_text() == "theirs"


def test_a_name_taken_while_writing_is_not_overwritten(tmp_path):
    target = tmp_path / "a.txt"
    with pytest.raises(FileExistsError):
        with files.atomic_file(target) as handle:
            handle.write(b"new")
            target.write_text("appeared meanwhile")
    assert target.read_text() == "appeared meanwhile"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]  # no temp file left


def test_an_error_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with files.atomic_file(tmp_path / "a.bin") as handle:
            handle.write(b"half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_check_publishes_nothing(tmp_path):
    def check(path):
        raise ValueError(f"{path.name} does not verify")

    with pytest.raises(ValueError):
        with files.atomic_path(tmp_path / "a.bin", check=check) as tmp:
            tmp.write_bytes(b"bad")
    assert list(tmp_path.iterdir()) == []


def test_write_new_takes_the_next_free_name(tmp_path):
    (tmp_path / "v.mp4").write_bytes(b"mine")
    first = files.write_new(tmp_path, "v.mp4", [b"a", b"b"])
    second = files.write_new(tmp_path, "v.mp4", iter([b"c"]))
    assert (first.name, second.name) == ("v-1.mp4", "v-2.mp4")
    assert (tmp_path / "v.mp4").read_bytes() == b"mine" and first.read_bytes() == b"ab"


def test_write_new_survives_a_racing_writer(tmp_path):
    def chunks():
        yield b"ours"
        (tmp_path / "v.mp4").write_bytes(b"racer")  # takes our name while we stream

    path = files.write_new(tmp_path, "v.mp4", chunks())
    assert path.name == "v-1.mp4" and (tmp_path / "v.mp4").read_bytes() == b"racer"
