"""The one atomic writer. Every file the pack writes (caches, converted models, downloads, mp4s, generated
workflows) goes through here:

- the data goes to a temp file in the target's own folder, is flushed and fsynced, then published with one
  rename, so readers see the old file or the whole new one, never half of it;
- an existing target is never replaced unless the caller asks (`overwrite=True`, only where the user asked);
  without it the publish step is the one never-overwrite primitive, `publish_new`: a hard link, which fails
  atomically when the name appeared meanwhile (on a file system without hard links, the name is first reserved
  with O_CREAT|O_EXCL, which fails the same way, then the data is renamed onto the reservation). A check of
  `exists()` followed by a replace is never a publish: two writers would both pass the check;
- the result has the mode an ordinary `open()` would give (0o666 minus the umask), not mkstemp's 0600;
- on any error or interruption the temp file is removed and the target is untouched.

It is also the one home of the rules for names and paths the pack is given: `name_problem` (a file name H3Kit
creates must work on Linux, Windows and macOS: at most 255 bytes, no reserved device name, no character any of
them forbids, no character that does not print as itself on one line: `checks.problem.unsafe_char`) and
`open_regular` / `regular_file_problem` (a path read as a file must be a regular file: a FIFO or a device would
block or never end, and is refused before it is opened for reading), and of `sniff_file`: what a file is, from its
first bytes (the signatures are checks/filetypes.py's).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from ..checks.filetypes import HEAD_BYTES, FileKind, sniff
from ..checks.problem import unsafe_char
from .log import log_once

TEMP_SUFFIX = ".tmp"
MAX_NAME_TRIES = 10_000
MAX_NAME_BYTES = 255  # one file name (path component), UTF-8: ext4, NTFS (255 UTF-16 units), APFS
TEMP_PREFIX_BYTES = 100  # of the target's name in its temp file's name: room for mkstemp's suffix within 255
# Names Windows reserves for devices, with or without an extension ("nul.txt"), any case, trailing spaces.
WINDOWS_RESERVED_NAMES = frozenset({"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"} | {
    f"{port}{digit}" for port in ("COM", "LPT") for digit in (*"0123456789", "\u00b9", "\u00b2", "\u00b3")})
WINDOWS_FORBIDDEN_CHARS = frozenset('<>:"|?*')
_UMASK_LOCK = threading.Lock()
_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class NotARegularFile(OSError):
    """A path to read names a folder, a FIFO, a device or a socket; strerror says which."""


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a file H3Kit creates on every OS it runs on, or None. The reason is a phrase
    ("is 300 bytes long; at most 255 are allowed") that callers put after the name."""
    if name in ("", ".", ".."):
        return "names no file"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    if size > MAX_NAME_BYTES:
        return f"is {size} bytes long; at most {MAX_NAME_BYTES} are allowed (UTF-8)"
    if "/" in name or "\\" in name:
        return "contains a path separator"
    bad = sorted({ch for ch in name if ch in WINDOWS_FORBIDDEN_CHARS or unsafe_char(ch)})
    if bad:  # control, format, separator, invisible space: a name that prints as another or breaks a line
        return f"contains characters file names cannot hold on every system or print as: {bad!r}"
    if name != name.strip() or name.endswith("."):
        return "starts or ends with a space or ends with '.', which Windows strips"
    device = name.split(".")[0].rstrip(" ").upper()
    if device in WINDOWS_RESERVED_NAMES:
        return f"is the reserved device name '{name.split('.')[0]}' on Windows"
    return None


def regular_file_problem(path: Path | str) -> str | None:
    """Why `path` cannot be read as a file, or None: missing, a folder, a FIFO, a device, a socket, a link
    loop, a name too long. Never opens the path (opening a FIFO blocks until someone writes to it)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return os_reason(exc)
    except ValueError:
        return "contains a NUL character, which no path has"
    return _kind_problem(mode)


def _kind_problem(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((text for test, text in _FILE_KINDS if test(mode)), "not a regular file")
    return f"is {kind}, not a regular file"


def is_folder(path: Path | str) -> bool:
    """True for an existing folder; False for anything else, including a path the OS cannot even look up."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return False


def os_reason(exc: OSError) -> str:
    """An OSError as a short phrase naming the cause ("is a loop of symbolic links", "does not exist")."""
    if isinstance(exc, NotARegularFile):
        return exc.strerror
    reasons = {errno.ENOENT: "does not exist", errno.ELOOP: "is a loop of symbolic links",
               errno.ENAMETOOLONG: "has a name too long for the file system", errno.EACCES: "cannot be read (permission denied)",
               errno.ENOTDIR: "has a part that is not a folder", errno.ENOSPC: "cannot be written: the disk is full"}
    return reasons.get(exc.errno, f"cannot be used ({exc.strerror or exc})")


def open_regular(path: Path | str, mode: str = "rb", buffering: int = -1) -> IO:
    """`path` opened for reading, refused (NotARegularFile) unless it is a regular file. The check is on the
    opened file itself (opened without blocking, so a FIFO cannot hang us), not on the name."""
    if mode not in ("rb", "r"):
        raise ValueError(f"open_regular reads; mode {mode!r}")
    nonblock = getattr(os, "O_NONBLOCK", 0)  # POSIX: opening a FIFO without it waits for a writer
    fd = os.open(path, os.O_RDONLY | nonblock | getattr(os, "O_BINARY", 0))
    try:
        problem = _kind_problem(os.fstat(fd).st_mode)
        if problem is not None:
            raise NotARegularFile(errno.EINVAL, problem, str(path))
        if nonblock:
            os.set_blocking(fd, True)
        return os.fdopen(fd, mode, buffering=buffering, **({"encoding": "utf-8"} if mode == "r" else {}))
    except BaseException:
        os.close(fd)
        raise


def sniff_file(path: Path | str, text_expected: bool = False) -> FileKind | None:
    """The kind of the file at `path`, or None when it cannot be opened or is not a regular file (a FIFO or a
    device is never read: it would block or never end; the caller reports why). `text_expected`: a file that
    should hold text (a prompt) is text when it reads as text (checks/filetypes.sniff)."""
    try:
        with open_regular(path) as handle:
            return sniff(handle.read(HEAD_BYTES), text_expected)
    except OSError:
        return None


class TargetExists(FileExistsError):
    """The target exists and overwriting was not asked for; nothing was replaced."""

    def __init__(self, path: Path):
        super().__init__(errno.EEXIST, f"{path} already exists and was left as it is; choose another name, or turn "
                         "overwrite on to replace it", str(path))
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


def publish_new(tmp: Path, target: Path) -> None:
    """The one never-overwrite primitive: give the finished file `tmp` the name `target` unless that name exists,
    atomically (TargetExists when it does, even when it appeared a moment ago; the existing file is untouched).
    A hard link; where the file system has none, an O_EXCL reservation of the name, then a rename onto it."""
    try:
        os.link(tmp, target)  # fails with EEXIST if the name exists, even if it appeared a moment ago
    except FileExistsError:
        raise TargetExists(target) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        log_once("files:no-hard-links", f"H3Kit: {target.parent} has no hard links ({os_reason(exc)}); new files "
                 "there are published by reserving the name with O_EXCL, then renaming onto it")
        _reserve_then_rename(tmp, target)


def _reserve_then_rename(tmp: Path, target: Path) -> None:
    """A file system without hard links (FAT, some network shares): O_CREAT|O_EXCL creates the name only if no one
    has it (atomic, like the link); the rename then replaces our own empty reservation, nothing else."""
    try:
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0), 0o600)
    except FileExistsError:
        raise TargetExists(target) from None
    try:
        reserved = os.fstat(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, target)
    except BaseException:
        try:
            now = os.stat(target)
            if (now.st_dev, now.st_ino, now.st_size) == (reserved.st_dev, reserved.st_ino, 0):
                os.unlink(target)  # still our empty reservation: give the name back
        except OSError as exc:
            log_once(f"files:reservation:{target}", f"H3Kit: could not give back the reserved name {target} "
                     f"({os_reason(exc)}); it is an empty file")
        raise


def _publish(tmp: Path, target: Path, overwrite: bool, unique: bool) -> Path:
    """Move the finished temp file to its name; with `unique`, to the next free name if it was taken."""
    if overwrite:
        os.replace(tmp, target)
        return target
    for _ in range(MAX_NAME_TRIES):
        try:
            publish_new(tmp, target)
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
    short = target.name.encode("utf-8", "surrogateescape")[:TEMP_PREFIX_BYTES].decode("utf-8", "ignore")
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{short}.", suffix=TEMP_SUFFIX)
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
