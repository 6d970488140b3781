"""Issue 33 item 3, "no loss, ever": every file the pack writes is published through the one never-overwrite
primitive (adapters/files.py `publish_new`: a hard link, or an O_EXCL reservation where the file system has no hard
links); `overwrite=True` only where the user asked.

1. Real processes race H3KitSaveConditioning to one new name, overwrite off, many rounds, with each primitive:
   exactly one reports "written", its file survives byte for byte, the other gets an error naming the file and the
   fix (the old code checked `exists()`, then published with overwrite=True: both "written", the first lost).
2. A scan of every runtime module: no file is written or moved any other way (open(.., "w"), Path.write_*,
   os.replace, shutil.copy/move, torch.save, safetensors save_file, av output ...) except into the temp path of the
   atomic writer, and `overwrite=True` appears only where the user asked for it.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import pytest
import torch
from h3kit.adapters import files
from h3kit.nodes.common import H3KitInputError
from h3kit.nodes.conditioning_cache import H3KitSaveConditioning

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 12
RUNTIME = ("adapters", "checks", "kernels", "nodes", "scripts")


def _no_hard_links(*_args, **_kwargs):
    raise OSError(errno.EPERM, "Operation not permitted")  # what FAT / some network shares answer to link()


def _racer(seed: int, name: str, folder: str, barrier, results, primitive: str) -> None:
    """One save in its own process: both start together at the barrier, each with its own conditioning."""
    os.environ["H3KIT_COND_CACHE_DIR"] = folder
    if primitive == "o_excl":
        os.link = _no_hard_links
    cond = [[torch.randn(1, 256, 5120, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16),
             {"pooled_output": None}]]
    barrier.wait(timeout=60)
    try:
        out = H3KitSaveConditioning().save(cond, name, overwrite=False, prompt_text=f"writer {seed}")
    except H3KitInputError as exc:
        results.put((seed, "error", str(exc), ""))
        return
    status = json.loads(out["result"][0])["status"]
    digest = hashlib.sha256(Path(json.loads(out["result"][0])["path"]).read_bytes()).hexdigest()
    results.put((seed, status, "", digest))


@pytest.mark.parametrize("primitive", ["hard_link", "o_excl"])
def test_two_processes_saving_one_new_name_never_lose_a_file(tmp_path, primitive):
    folder = tmp_path / "conditioning_cache"
    # forkserver: the children fork from a process that imported the pack (torch loads once) but never ran a torch
    # op; forking this test process, whose torch thread pools may be in use, can deadlock a child
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["h3kit.nodes.conditioning_cache"])
    for round_index in range(ROUNDS):
        name = f"race_{round_index}"
        barrier, results = context.Barrier(2), context.Queue()
        racers = [context.Process(target=_racer, args=(2 * round_index + k, name, str(folder), barrier,
                                                          results, primitive))
                  for k in range(2)]
        for racer in racers:
            racer.start()
        outcomes = sorted((results.get(timeout=120) for _ in racers), key=lambda o: o[1] != "written")
        for racer in racers:
            racer.join(timeout=60)
            assert racer.exitcode == 0
        (winner, status, _, digest), (_, loser_status, message, _) = outcomes
        path = folder / f"{name}.safetensors"
        assert (status, loser_status) == ("written", "error"), f"round {round_index}: {outcomes}"
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, f"round {round_index}: the first file was replaced"
        assert str(path) in message and "already exists" in message and "left as it is" in message
        assert "turn on overwrite" in message and "choose another name" in message
        assert sorted(p.name for p in folder.iterdir()) == sorted(f"race_{i}.safetensors" for i in range(round_index + 1))


def test_without_hard_links_the_reservation_never_replaces_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "link", _no_hard_links)
    target = tmp_path / "a.bin"
    files.write_bytes(target, b"first")
    with pytest.raises(files.TargetExists, match="already exists and was left as it is"):
        with files.atomic_file(target) as handle:
            handle.write(b"second")
    assert target.read_bytes() == b"first" and [p.name for p in tmp_path.iterdir()] == ["a.bin"]
    # a name taken while the data was being written (after atomic_write's early check)
    with pytest.raises(files.TargetExists):
        with files.atomic_file(tmp_path / "b.bin") as handle:
            handle.write(b"ours")
            (tmp_path / "b.bin").write_bytes(b"theirs")
    assert (tmp_path / "b.bin").read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]


def test_without_hard_links_a_writer_between_check_and_rename_loses_nothing(tmp_path, monkeypatch):
    # Another writer publishes the same new name at the worst moment: just before our rename. With the O_EXCL
    # reservation the name is already ours, so it is refused; a check-then-rename would replace its file.
    monkeypatch.setattr(os, "link", _no_hard_links)
    target, real_replace, outcomes = tmp_path / "a.bin", os.replace, []

    def replace_after_a_rival(src, dst):
        if not outcomes:
            outcomes.append("rival started")
            try:
                files.write_bytes(target, b"theirs")
                outcomes.append("rival written")
            except files.TargetExists:
                outcomes.append("rival refused")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_after_a_rival)
    files.write_bytes(target, b"ours")
    assert outcomes == ["rival started", "rival refused"] and target.read_bytes() == b"ours"


def test_a_failed_rename_gives_the_reserved_name_back(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "link", _no_hard_links)

    def no_rename(*_args):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError, match="Input/output"):
        files.write_bytes(tmp_path / "c.bin", b"data")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------- the scan
# Calls that create, replace or move a file. Allowed only inside `with atomic_path/atomic_write/atomic_file(...)`,
# where the path written is the atomic writer's temp file (published by adapters/files.py).
WRITER_FUNCTIONS = {"os.replace", "os.rename", "os.renames", "os.truncate", "shutil.copy",
                    "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move", "torch.save", "save_file",
                    "safetensors.torch.save_file", "save_model", "np.save", "numpy.save", "os.mkfifo",
                    "tempfile.mkstemp", "tempfile.NamedTemporaryFile"}
# (links are left out: creating one fails when the name exists, it never replaces a file)
WRITER_METHODS = {"write_text", "write_bytes", "touch", "rename"}
ATOMIC = {"atomic_path", "atomic_write", "atomic_file"}
# `overwrite=True` written as a literal: each place and why the user asked for it.
OVERWRITE_ASKED = {
    "scripts/make_icon.py": "the command regenerates the pack's own web/icon.png",
    "scripts/schemas.py": "`schemas pin` regenerates the pinned core-schema file (--out)",
    "scripts/workflows_ui.py": "`workflows ui` regenerates the generated workflows/*.json and thumbnails",
    "scripts/bench_clip.py": "the benchmark's own cache in its own work folder (--workdir reruns replace it)",
    "scripts/bench_weights.py": "the benchmark's own random-weight files in its work folder (a stale one is rewritten)",
    "scripts/workflows_split.py": "`workflows split` regenerates the generated workflows/api/*_stage1/2.json",
}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return ""


def _open_writes(call: ast.Call) -> bool:
    """open(path, mode) / av.open(..., mode=...) / os.open(..., O_CREAT) with a mode that writes."""
    name = _name(call.func)
    mode = next((kw.value for kw in call.keywords if kw.arg == "mode"), call.args[1] if len(call.args) > 1 else None)
    if name in ("open", "io.open", "av.open", "Image.open"):
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
    if name == "os.open":
        return "O_CREAT" in ast.unparse(call) or "O_WRONLY" in ast.unparse(call) or "O_RDWR" in ast.unparse(call)
    return False


def _atomic_with(node: ast.With) -> bool:
    return any(isinstance(item.context_expr, ast.Call) and _name(item.context_expr.func).split(".")[-1] in ATOMIC
               for item in node.items)


def writes_outside_the_writer(tree: ast.AST) -> list[str]:
    found = []

    def visit(node: ast.AST, inside_atomic: bool) -> None:
        if isinstance(node, (ast.With, ast.AsyncWith)) and _atomic_with(node):
            inside_atomic = True
        if isinstance(node, ast.Call) and not inside_atomic:
            name = _name(node.func)
            method = (isinstance(node.func, ast.Attribute) and node.func.attr in WRITER_METHODS
                      and _name(node.func.value) != "files")  # files.write_text: the writer's own function
            if name in WRITER_FUNCTIONS or method or _open_writes(node):
                found.append(f"line {node.lineno}: {ast.unparse(node)[:100]}")
        for child in ast.iter_child_nodes(node):
            visit(child, inside_atomic)

    visit(tree, False)
    return found


def runtime_modules() -> list[Path]:
    return sorted([p for folder in RUNTIME for p in (ROOT / folder).rglob("*.py")] + list(ROOT.glob("*.py")))


def test_no_module_publishes_a_file_but_through_the_atomic_writer():
    offenders = {}
    for path in runtime_modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "adapters/files.py":  # the writer itself
            continue
        found = writes_outside_the_writer(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[rel] = found
    assert not offenders, f"write through adapters/files.py (atomic_path / write_bytes / write_new): {offenders}"


def test_overwrite_true_only_where_the_user_asked():
    found = {}
    for path in runtime_modules():
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                flags = [kw for kw in node.keywords if kw.arg == "overwrite"]
                if any(isinstance(kw.value, ast.Constant) and kw.value.value is True for kw in flags):
                    found.setdefault(rel, []).append(node.lineno)
    assert set(found) <= set(OVERWRITE_ASKED), {k: v for k, v in found.items() if k not in OVERWRITE_ASKED}


@pytest.mark.parametrize(("source", "caught"), [
    ("Path(p).write_text('x')", True),
    ("open(p, 'w').write('x')", True),
    ("open(p, mode='ab')", True),
    ("open(p, 'rb')", False),
    ("files.write_text(p, 'x')", False),
    ("os.replace(a, b)", True),
    ("shutil.copy(a, b)", True),
    ("torch.save(x, p)", True),
    ("av.open(p, mode='w', format='mp4')", True),
    ("with atomic_path(p) as tmp:\n    torch.save(x, tmp)", False),
    ("with atomic_path(p) as tmp, open(tmp, 'wb') as f:\n    f.write(b'')", False),
    ("with other(p) as tmp:\n    torch.save(x, tmp)", True),
])
def test_the_scan_finds_what_it_should(source, caught):
    assert bool(writes_outside_the_writer(ast.parse(source))) is caught
