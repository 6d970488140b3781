"""The one atomic writer. Every file the pack writes (caches, converted models, downloads, mp4s, generated
workflows) goes through here:

- the data goes to a temp file in the target's own folder, is flushed and fsynced, then published with one
  rename, so readers see the old file or the whole new one, never half of it;
- an existing target is never replaced unless the caller asks (`overwrite=True`); without it the publish
  step is a hard link, which fails atomically when the name appeared meanwhile;
- the result has the mode an ordinary `open()` would give (0o666 minus the umask), not mkstemp's 0600;
- on any error or interruption the temp file is removed and the target is untouched.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

TEMP_SUFFIX = ".tmp"
MAX_NAME_TRIES = 10_000
_UMASK_LOCK = threading.Lock()


class TargetExists(FileExistsError):
    """The target exists and overwriting was not asked for."""

    def __init__(self, path: Path):
        super().__init__(errno.EEXIST, f"{path} exists; choose another name or allow overwriting", str(path))
        self.path = Path(path)


def _proc_umask() -> int | None:
    """Linux reports the umask in /proc/self/status; None elsewhere."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("Umask:") and len(line.split()) == 2:
            return int(line.split()[1], 8)
    return None


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows (Linux), else set-and-restore
    (under a lock: other threads of this process never see the temporary value from here)."""
    found = _proc_umask()
    if found is not None:
        return found
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); folders cannot be opened for fsync on Windows."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_no_overwrite(tmp: Path, target: Path) -> None:
    try:
        os.link(tmp, target)  # fails with EEXIST if the name exists, even if it appeared a moment ago
    except FileExistsError:
        raise TargetExists(target) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        # A file system without hard links (FAT, some network shares): check, then rename.
        if target.exists():
            raise TargetExists(target) from None
        os.replace(tmp, target)


def _publish(tmp: Path, target: Path, overwrite: bool, unique: bool) -> Path:
    """Move the finished temp file to its name; with `unique`, to the next free name if it was taken."""
    if overwrite:
        os.replace(tmp, target)
        return target
    for _ in range(MAX_NAME_TRIES):
        try:
            _link_no_overwrite(tmp, target)
            return target
        except TargetExists:
            if not unique:
                raise
            target = free_name(target.parent, target.name)
    raise TargetExists(target)


class Pending:
    """An atomic write in progress: data goes to `tmp`; `path` is where it landed once published."""

    def __init__(self, tmp: Path, target: Path):
        self.tmp, self.path = tmp, target


@contextlib.contextmanager
def atomic_write(target: Path | str, overwrite: bool = False, check: Callable[[Path], Any] | None = None,
                 unique: bool = False) -> Iterator[Pending]:
    """The one atomic write. Write to `pending.tmp`; when the block ends without error and `check(tmp)`
    (optional) returns, the file is fsynced, given the umask's mode and published as `target` (with
    `unique`: as the next free name when `target` is taken). On any error the temp file is removed."""
    target = Path(target)
    if target.exists() and not overwrite and not unique:
        raise TargetExists(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=TEMP_SUFFIX)
    os.close(fd)
    pending = Pending(Path(name), target)
    try:
        yield pending
        with open(pending.tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        if check is not None:
            check(pending.tmp)
        os.chmod(pending.tmp, 0o666 & ~current_umask())
        pending.path = _publish(pending.tmp, target, overwrite, unique)
        _fsync_folder(target.parent)
    finally:
        pending.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(target: Path | str, overwrite: bool = False,
                check: Callable[[Path], Any] | None = None) -> Iterator[Path]:
    """A temp path beside `target` for a library that writes by path (safetensors, PyAV); see atomic_write."""
    with atomic_write(target, overwrite, check) as pending:
        yield pending.tmp


@contextlib.contextmanager
def atomic_file(target: Path | str, overwrite: bool = False, text: bool = False,
                check: Callable[[Path], Any] | None = None) -> Iterator[IO]:
    """An open file (binary, or UTF-8 text) whose content replaces `target` atomically when the block ends."""
    with atomic_path(target, overwrite, check) as tmp:
        with open(tmp, "w" if text else "wb", **({"encoding": "utf-8", "newline": ""} if text else {})) as handle:
            yield handle
            handle.flush()


def write_bytes(target: Path | str, data: bytes, overwrite: bool = False) -> Path:
    with atomic_file(target, overwrite) as handle:
        handle.write(data)
    return Path(target)


def write_text(target: Path | str, text: str, overwrite: bool = False) -> Path:
    return write_bytes(target, text.encode("utf-8"), overwrite)


def write_new(folder: Path | str, name: str, chunks: Iterable[bytes]) -> Path:
    """Stream `chunks` into a new file `folder/name`, or `stem-1.ext`, `-2` ... when that name is taken (also
    when another writer takes it while we write): never overwrites. Returns the path written."""
    with atomic_write(free_name(folder, name), unique=True) as pending:
        with open(pending.tmp, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
    return pending.path


def free_name(folder: Path | str, name: str, limit: int = MAX_NAME_TRIES) -> Path:
    """`folder/name`, or `folder/stem-1.ext`, `-2` ... : the first that does not exist (never overwrite)."""
    folder, base = Path(folder), Path(name)
    candidate = folder / base.name
    for i in range(1, limit):
        if not candidate.exists():
            return candidate
        candidate = folder / f"{base.stem}-{i}{base.suffix}"
    raise TargetExists(candidate)
