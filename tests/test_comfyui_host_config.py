"""Issue 17, tier (a): how tier (b)/(d) find their hosts (COMFYUI_DIRS / COMFYUI_DIR and per-host python and
launch), without starting any server."""

from __future__ import annotations

import sys

import pytest
from comfyui_host import LAUNCH_CONSOLE, LAUNCH_MAIN, configured_hosts


def _checkout(root, name: str, installable: bool = False, version: str | None = None):
    """A fake checkout; `version` is written where each layout keeps it (the server serves it as comfyui_version)."""
    folder = root / name
    folder.mkdir()
    (folder / "main.py").write_text("")
    if installable:
        (folder / "comfy" / "cmd").mkdir(parents=True)
        (folder / "comfy" / "cmd" / "main.py").write_text("")
    if version and installable:
        (folder / "comfy" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    elif version:
        (folder / "comfyui_version.py").write_text(f"# generated\n__version__ = '{version}'\n")
    return folder


def test_every_host_in_comfyui_dirs_with_its_own_python_and_launch(tmp_path):
    old = _checkout(tmp_path, "old", version="0.3.64")
    new = _checkout(tmp_path, "new", installable=True, version="0.12.1")
    hosts, reason = configured_hosts({
        "COMFYUI_DIRS": f"{old}:{new}", "H3KIT_HOST_PYTHON_0": "/venv-a/bin/python",
        "H3KIT_HOST_PYTHON_1": "/venv-b/bin/python", "COMFYUI_PYTHON": "/ignored-with-dirs",
    })
    assert reason == ""
    assert [(h.index, h.name, h.python, h.launch) for h in hosts] == [
        (0, "comfyui-0.3.64", "/venv-a/bin/python", LAUNCH_MAIN),
        (1, "comfyui-0.12.1", "/venv-b/bin/python", LAUNCH_CONSOLE),  # its main.py ignores --base-directory
    ]
    command = hosts[1].command(8188, tmp_path / "base")
    assert command[:3] == ["/venv-b/bin/python", "-m", "comfy.cmd.main"]
    assert command[command.index("--base-directory") + 1] == str(tmp_path / "base")
    assert command[command.index("--listen") + 1] == "127.0.0.1" and "--cpu" in command
    assert hosts[0].command(8188, tmp_path)[:2] == ["/venv-a/bin/python", "main.py"]


def test_single_comfyui_dir_takes_comfyui_python_and_the_launch_can_be_forced(tmp_path):
    folder = _checkout(tmp_path, "ComfyUI", installable=True)
    (host,), _ = configured_hosts({"COMFYUI_DIR": str(folder), "COMFYUI_PYTHON": "/p/python",
                                   "H3KIT_HOST_LAUNCH_0": LAUNCH_MAIN})
    assert (host.python, host.launch) == ("/p/python", LAUNCH_MAIN)
    (host,), _ = configured_hosts({"COMFYUI_DIR": str(folder)})
    assert host.python == sys.executable


@pytest.mark.parametrize("env, expected", [
    ({}, "COMFYUI_DIRS / COMFYUI_DIR is not set"),
    ({"COMFYUI_DIRS": "/nowhere/ComfyUI"}, "/nowhere/ComfyUI (in COMFYUI_DIRS/COMFYUI_DIR) has no main.py"),
])
def test_no_usable_host_is_a_reason_not_an_error(env, expected):
    hosts, reason = configured_hosts(env)
    assert hosts == [] and expected in reason


def test_an_unknown_launch_mode_is_refused_by_name(tmp_path):
    folder = _checkout(tmp_path, "ComfyUI")
    hosts, reason = configured_hosts({"COMFYUI_DIRS": str(folder), "H3KIT_HOST_LAUNCH_0": "docker"})
    assert hosts == [] and "H3KIT_HOST_LAUNCH_0='docker'" in reason


def test_test_ids_carry_the_version_the_checkout_serves_not_its_folder_name(tmp_path):
    a = _checkout(tmp_path, "ComfyUI", version="0.33.0")
    b = _checkout(tmp_path, "comfyui-0.3.64", version="0.3.65")  # a folder renamed after an update
    c = _checkout(tmp_path, "copy", version="0.33.0")
    d = _checkout(tmp_path, "bare")
    hosts, _ = configured_hosts({"COMFYUI_DIRS": f"{a}:{b}:{c}:{d}"})
    assert [h.name for h in hosts] == ["comfyui-0.33.0#0", "comfyui-0.3.65", "comfyui-0.33.0#2", "comfyui-unknown-bare"]
