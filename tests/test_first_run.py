"""Issue 15: the tools without a second install, and quiet by default.

A ComfyUI user has the pack as a plain clone in custom_nodes/ and ComfyUI's own Python, nothing installed:
`python custom_nodes/<folder> COMMAND` must work whatever the folder is called. The clone is copied to a folder
with dashes, and Python runs with -S (no site .pth files), so the editable install of this checkout is not
importable there: whatever answers comes from the clone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from subprocess import run as run_process

import pytest

REPO = Path(__file__).resolve().parent.parent
CLONE_NAME = "ComfyUI-H3Kit-main"  # the folder name GitHub's zip download gives: not a Python identifier


@pytest.fixture(scope="module")
def comfyui_dir(tmp_path_factory) -> Path:
    comfyui = tmp_path_factory.mktemp("first_run") / "ComfyUI"
    shutil.copytree(REPO, comfyui / "custom_nodes" / CLONE_NAME, ignore=shutil.ignore_patterns(
        ".git", ".pylink", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", "test-artifacts", ".venv", "build"))
    return comfyui


def _bare_python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """This Python with its third-party packages (torch, av, ...) but without site processing: no h3kit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})}
    return run_process([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def test_the_bare_python_cannot_import_an_installed_h3kit(comfyui_dir):
    proc = _bare_python("-c", "import h3kit", cwd=comfyui_dir)
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'h3kit'" in proc.stderr


def test_cli_runs_from_a_plain_clone_with_a_dashed_folder_name(comfyui_dir):
    clone = f"custom_nodes/{CLONE_NAME}"
    helped = _bare_python(clone, "--help", cwd=comfyui_dir)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: python {clone} [-h] COMMAND")
    assert helped.stderr == ""
    listed = _bare_python(clone, "nodes", "--json", cwd=comfyui_dir)
    assert listed.returncode == 0, listed.stderr
    ids = {row["id"] for row in json.loads(listed.stdout)["nodes"]}
    assert {"H3KitDraftToLTX", "H3KitTestPattern", "H3KitHandoffSheet"} <= ids


def test_validate_from_a_plain_clone_uses_the_clone(comfyui_dir):
    clone = f"custom_nodes/{CLONE_NAME}"
    proc = _bare_python(clone, "validate", f"{clone}/workflows/api/h3kit_handoff_demo.json", cwd=comfyui_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"], ["demo", "--help"], ["run", "--help"]])
def test_help_is_quiet(argv):
    """No optional-package notes (sageattention is not installed here) or any other log line on stderr."""
    proc = run_process([sys.executable, "-m", "h3kit", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert proc.stderr == ""


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(f"\n{heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:end if end != -1 else None]


def test_ci_runs_the_readme_install_commands_verbatim():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = _section(readme, "## Run the tests").split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands[0] == "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"  # a CPU wheel
    for command in commands:
        assert command in ci_lines, command


def test_readme_links_and_section_references_resolve():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\(((?:docs|workflows)/[^)#]+)\)", readme):
        assert (REPO / target).exists(), target
    assert "(docs/host-graphs.md)" in readme
    headings = set(re.findall(r"^#+ (.+)$", readme, flags=re.M))
    for source in [*REPO.glob("tests/*.py"), *REPO.glob("scripts/*.py"), REPO / "pyproject.toml"]:
        for cited in re.findall(r"README, section '?([A-Za-z][^'\")]*)", source.read_text(encoding="utf-8")):
            assert cited.strip() in headings, f"{source.name} points to README section {cited!r}"
