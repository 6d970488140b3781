"""Issue 33, item 7 (the first hour): the command line starts without torch.

`import h3kit` registers nothing until ComfyUI reads NODE_CLASS_MAPPINGS, and the CLI reads H3Kit's own schemas
from the pinned file (workflows/schemas/h3kit-nodes.json), so --help, every command's --help, validate and doctor
without the machine checks never import torch. Before: every command imported torch first (4-11 s on a busy
2-core machine; 1.2-1.5 s warm here).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from subprocess import run as run_process

import h3kit
import pytest
from h3kit.scripts.cli import COMMANDS

PACK_ROOT = Path(h3kit.__file__).resolve().parent
WORKFLOW = "workflows/api/h3_ltx_two_stage.json"
# --help measured 0.14 s here (2 shared cores, warm file cache, 2026-12-02: `time python -m h3kit --help`); the
# promise is under 1 s. The bound is generous so a busy CI machine does not fail it; torch's import alone took
# 0.8-1.2 s warm and 4-11 s cold, which the sys.modules test below catches whatever the timing.
HELP_WALL_BOUND_S = 3.0
HELP_PROMISE_S = 1.0

PROBE = """
import runpy, sys
sys.argv = ["h3kit", *{args!r}]
code = 0
try:
    runpy.run_module("h3kit", run_name="__main__", alter_sys=True)
except SystemExit as done:
    code = done.code
heavy = sorted(m for m in ("torch", "numpy", "av", "comfy", "h3kit.nodes", "h3kit.kernels") if m in sys.modules)
print("PROBE", code, ",".join(heavy) or "-", file=sys.stderr)
"""


def _probe(*args: str, cwd=None) -> tuple[int, str]:
    result = run_process([sys.executable, "-c", PROBE.format(args=list(args))], capture_output=True, text=True,
                         timeout=120, cwd=cwd)
    line = [ln for ln in result.stderr.splitlines() if ln.startswith("PROBE ")]
    assert line, result.stderr[-2000:]
    _, code, heavy = line[-1].split(" ")
    return int(code or 0), heavy


def test_import_h3kit_imports_neither_torch_nor_the_nodes():
    code = "import sys, h3kit; print(sorted(m for m in ('torch', 'h3kit.nodes') if m in sys.modules))"
    out = run_process([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("args", [("--help",), *[(name, "--help") for name in sorted(COMMANDS)]],
                         ids=lambda args: " ".join(args))
def test_help_never_imports_torch(args):
    assert _probe(*args) == (0, "-")


def test_validate_and_doctor_without_machine_checks_never_import_torch():
    assert _probe("validate", WORKFLOW, cwd=PACK_ROOT) == (0, "-")
    assert _probe("doctor", "--no-local", "--workflow", WORKFLOW, cwd=PACK_ROOT)[1] == "-"


def test_comfyui_still_gets_the_nodes_from_the_package():
    code = ("import sys, h3kit\n"
            "assert 'torch' not in sys.modules\n"
            "assert hasattr(h3kit, 'NODE_CLASS_MAPPINGS')  # what ComfyUI's loader asks first\n"
            "from h3kit import nodes\n"
            "assert h3kit.NODE_CLASS_MAPPINGS is nodes.NODE_CLASS_MAPPINGS\n"
            "assert set(h3kit.NODE_DISPLAY_NAME_MAPPINGS) == set(nodes.NODE_CLASS_MAPPINGS)\n"
            "print(len(h3kit.NODE_CLASS_MAPPINGS), 'torch' in sys.modules, hasattr(h3kit, 'NO_SUCH_NAME'))\n")
    out = run_process([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True).stdout
    count, torch_loaded, bogus = out.split()
    assert int(count) >= 16 and torch_loaded == "True" and bogus == "False"


def test_help_answers_within_the_bound():
    start = time.perf_counter()
    result = run_process([sys.executable, "-m", "h3kit", "--help"], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0 and "usage:" in result.stdout
    assert elapsed < HELP_WALL_BOUND_S, f"--help took {elapsed:.2f} s (promise: under {HELP_PROMISE_S} s)"


def test_the_pinned_own_schemas_are_the_codes():
    """The CLI validates against the pinned file; it must say what the node classes say."""
    from h3kit.checks.schemas import OWN_SCHEMA_FILE
    from h3kit.scripts.schemas import own_schema_text

    assert OWN_SCHEMA_FILE.read_text(encoding="utf-8") == own_schema_text(), (
        f"{OWN_SCHEMA_FILE.name} is stale: run `python -m h3kit.scripts.schemas own` and commit it")


def test_the_pinned_own_schemas_cover_every_node_and_its_requirements():
    from h3kit.checks.schemas import OWN_SCHEMA_FILE

    document = json.loads(OWN_SCHEMA_FILE.read_text(encoding="utf-8"))
    from h3kit.nodes import DISABLED_NODES, NODE_CLASS_MAPPINGS

    off_here = {node_id for ids in DISABLED_NODES.values() for node_id in ids}
    assert set(document["nodes"]) == set(NODE_CLASS_MAPPINGS) | off_here
    assert document["requires"]["H3KitSageAttention"] == ["sageattention", "triton"]
