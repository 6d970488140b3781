"""Issue 27: every message names the command as the user invoked it (checks/invocation.py, one function).

Three ways in: the console script `h3kit`, `python -m h3kit`, and a plain clone `python custom_nodes/<folder>`
run with ComfyUI's Python. Each is run for real and its error names itself; inside ComfyUI (nobody typed a
command) the pack's folder decides. The README's troubleshooting uses the plain-clone form and names the others.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path
from subprocess import run as run_process
from types import SimpleNamespace

import pytest
from h3kit.checks.invocation import cli_command
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
PACKAGE_MAIN = SimpleNamespace(__spec__=SimpleNamespace(name="h3kit.__main__", origin="/x/h3kit/__main__.py"),
                               __package__="h3kit")
OTHER_MAIN = SimpleNamespace(__spec__=SimpleNamespace(name="pytest.__main__", origin="/x/pytest/__main__.py"),
                             __package__="pytest")


def clone_main(root: Path) -> SimpleNamespace:
    return SimpleNamespace(__spec__=SimpleNamespace(name="__main__", origin=str(root / "__main__.py")),
                           __package__="")


@pytest.mark.parametrize("argv0, main, root, expected", [
    ("/venv/bin/h3kit", OTHER_MAIN, Path("/src/H3Kit"), "h3kit"),
    ("C:\\venv\\Scripts\\h3kit.exe", OTHER_MAIN, Path("/src/H3Kit"), "h3kit"),
    ("/usr/lib/python3/h3kit/__main__.py", PACKAGE_MAIN, Path("/src/H3Kit"), "python -m h3kit"),
    ("custom_nodes/ComfyUI-H3Kit-main/", None, Path("/c/ComfyUI/custom_nodes/ComfyUI-H3Kit-main"),
     "python custom_nodes/ComfyUI-H3Kit-main"),
    ("ComfyUI/custom_nodes/H3Kit", None, Path("/c/ComfyUI/custom_nodes/H3Kit"), "python ComfyUI/custom_nodes/H3Kit"),
    ("my nodes/H3Kit", None, Path("/c/my nodes/H3Kit"), 'python "my nodes/H3Kit"'),
    ("/usr/bin/comfyui-server", OTHER_MAIN, Path("/c/ComfyUI/custom_nodes/H3Kit"), "python custom_nodes/H3Kit"),
    ("/venv/bin/pytest", OTHER_MAIN, Path("/src/H3Kit"), "python -m h3kit"),
])
def test_the_one_function_names_each_way_in(argv0, main, root, expected):
    main = main or clone_main(root)  # None: the clone's own __main__.py, run as a script
    assert cli_command([argv0], main, root) == expected


@pytest.fixture(scope="module")
def comfyui(tmp_path_factory) -> Path:
    """A ComfyUI folder with the pack as a plain clone under a folder name that is not 'H3Kit'."""
    root = tmp_path_factory.mktemp("inv") / "ComfyUI"
    shutil.copytree(REPO, root / "custom_nodes" / "H3Kit-main", ignore=shutil.ignore_patterns(
        ".git", ".pylink", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", "test-artifacts", "tests"))
    (root / "models").mkdir()
    Image.new("RGB", (4, 4)).save(root / "sheet.png")
    return root


def _bare(*args: str, cwd: Path) -> tuple[int, str, str]:
    """This Python without site processing (so no installed h3kit), with its third-party packages."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})}
    env.pop("COMFYUI_DIR", None)
    env.pop("H3KIT_COND_CACHE_DIR", None)
    done = run_process([sys.executable, "-S", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)
    return done.returncode, done.stdout, done.stderr


def test_a_plain_clone_names_itself_in_usage_and_errors(comfyui):
    code, out, err = _bare("custom_nodes/H3Kit-main", "cond", "info", "sheet.png", cwd=comfyui)
    assert code == 2 and out == ""
    assert "`python custom_nodes/H3Kit-main cond list`" in err and "python -m h3kit" not in err
    code, out, _ = _bare("custom_nodes/H3Kit-main", "--help", cwd=comfyui)
    assert code == 0 and out.startswith("usage: python custom_nodes/H3Kit-main ")


def test_the_missing_file_advice_of_a_plain_clone_names_the_clone(comfyui):
    api = "custom_nodes/H3Kit-main/workflows/api/h3_ltx_two_stage_turing.json"
    code, _, err = _bare("custom_nodes/H3Kit-main", "doctor", "--no-local", "--workflow", api, cwd=comfyui)
    assert code == 1  # the ComfyUI folder it runs in has an empty models/: every file is missing
    assert "`python custom_nodes/H3Kit-main convert bf16-to-fp16 models/vae/" in err
    assert "python -m h3kit" not in err


def test_python_dash_m_names_itself(tmp_path):
    png = tmp_path / "sheet.png"
    Image.new("RGB", (4, 4)).save(png)
    done = run_process([sys.executable, "-m", "h3kit", "cond", "info", str(png)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "COMFYUI_DIR"})
    assert done.returncode == 2 and "`python -m h3kit cond list`" in done.stderr


def test_the_console_script_names_itself(tmp_path):
    """What pip's `h3kit` entry point does: call scripts.cli.main() from a script named h3kit."""
    script = tmp_path / "bin" / "h3kit"
    script.parent.mkdir()
    script.write_text("import sys\nfrom h3kit.scripts.cli import main\nsys.exit(main())\n")
    png = tmp_path / "sheet.png"
    Image.new("RGB", (4, 4)).save(png)
    done = run_process([sys.executable, str(script), "cond", "info", str(png)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "COMFYUI_DIR"})
    assert done.returncode == 2 and "`h3kit cond list`" in done.stderr and "python -m" not in done.stderr
    helped = run_process([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert helped.stdout.startswith("usage: h3kit ")


def test_the_pyproject_console_script_is_the_one_main():
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'h3kit = "h3kit.scripts.cli:main"' in text


def test_no_message_hardcodes_a_command_form():
    """Runtime code derives the command (checks/invocation.py); only docstrings and comments may name a form."""
    import ast

    offenders = []
    for path in [*REPO.glob("checks/*.py"), *REPO.glob("nodes/*.py"), *REPO.glob("adapters/*.py"),
                 *REPO.glob("scripts/*.py")]:
        if path.name.startswith("bench_") or path.name in ("invocation.py", "make_icon.py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if "python -m h3kit" in node.value or "custom_nodes/H3Kit " in node.value:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_readme_troubleshooting_uses_the_readers_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    assert "python -m h3kit" not in section  # a plain clone has no `python -m h3kit`
    assert "python custom_nodes/H3Kit doctor" in section and "python custom_nodes/H3Kit cond list" in section
    first_run = readme.split("## First run", 1)[1].split("\n## ", 1)[0]
    assert "`h3kit …`" in first_run and "`python -m h3kit …`" in first_run  # how pip users type it
