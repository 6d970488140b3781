"""One source per fact (issue 16): the documented numbers and grammars live in checks/facts.py only, and the
checks/ package stays pure (no torch, no ComfyUI, nothing else of ours); imports point down the layers (checks <
adapters < kernels < nodes < scripts) without import circles."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from subprocess import run as run_process

import pytest
from h3kit.checks import facts
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(facts.__file__).resolve().parent.parent
PACKAGES = ("adapters", "checks", "kernels", "nodes", "scripts")
RUNTIME = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).glob("*.py"))
           if not p.name.startswith("bench_")] + [ROOT / "__init__.py", ROOT / "__main__.py"]
FACTS_FILE = ROOT / "checks" / "facts.py"


def test_documented_values_are_the_readme_and_field_notes_numbers():
    # Literals on purpose: these are the published numbers, not whatever the module says today.
    assert facts.REPAINT_SIGMA_LIMIT == 0.8
    assert facts.H3_EMBEDDING_WIDTH == 5120
    assert facts.MIN_COMFYUI == (0, 34, 0)
    assert (facts.H3_LENGTH_MIN, facts.H3_LENGTH_STEP, facts.H3_LENGTH_MAX) == (5, 17, 362)
    assert facts.H3_LENGTH_HOST_MAX == 3600  # ComfyUI 0.33.0 MiniMaxH3* length input
    assert facts.H3_REF_SLOTS == {"ref_images": 9, "ref_videos": 3, "ref_video_audios": 3, "ref_audios": 3}
    assert (facts.H3_REF_AUDIO_CLIPS_MAX, facts.H3_REF_FILES_MAX) == (3, 12)  # field-notes §C1
    assert facts.LTX_FRAME_STEP == 8 and facts.OUTPUT_SIDE_MULTIPLE == 64
    assert (facts.EXIT_OK, facts.EXIT_FAILED, facts.EXIT_INVALID, facts.EXIT_TIMEOUT, facts.EXIT_UNREACHABLE) == (
        0, 1, 2, 3, 4)
    assert list(facts.h3_grid_lengths())[:3] == [5, 22, 39] and 124 in facts.h3_grid_lengths()
    assert [n for n in range(1, 130) if facts.is_ltx_length(n)][-2:] == [121, 129]


def test_worst_exit_code_wins():
    assert facts.worst_exit([0, 1, 0]) == 1 and facts.worst_exit([0, 4, 3]) == 4 and facts.worst_exit([]) == 0


@pytest.mark.parametrize("text, values", [
    ("0.78, 0.643, 0.546, 0", [0.78, 0.643, 0.546, 0.0]),
    ("[0.5; 0.2 -> 0]", [0.5, 0.2, 0.0]),
])
def test_the_one_sigma_grammar_accepts(text, values):
    assert facts.parse_sigmas(text) == pytest.approx(values)


@pytest.mark.parametrize("text, why", [
    ("0.5, 0.7, 0", "descending"), ("0.9, 0.5", "end at 0"), ("1.5, 0", "outside"), ("nan, 0", "finite"),
    ("0.5", "at least two"), ("0.5, x, 0", "not a number"), ("0." + "1" * 5000 + ", 0", "characters"),
])
def test_the_one_sigma_grammar_refuses_with_the_reason(text, why):
    with pytest.raises(facts.SigmaError, match=why):
        facts.parse_sigmas(text)


# --- duplicated literals ------------------------------------------------------------------------

def _fact_copies(tree: ast.AST) -> list[str]:
    """Places that restate a fact instead of importing it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
            if node.value in (0.8, 5120, 362) and isinstance(node.value, (int, float)):
                found.append(f"line {node.lineno}: {node.value!r}")
            if node.value in ("identity_0.78", "0.78, 0.643, 0.546, 0"):
                found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Tuple) and all(isinstance(e, ast.Constant) for e in node.elts):
            if tuple(e.value for e in node.elts) in ((0, 34, 0), (0, 2, 31)):
                found.append(f"line {node.lineno}: a version tuple")
        elif isinstance(node, ast.Dict):  # a widget restating the H3 grid: {"step": 17}
            for key, value in zip(node.keys, node.values, strict=False):
                if isinstance(key, ast.Constant) and key.value == "step" and isinstance(value, ast.Constant) \
                        and value.value == 17:
                    found.append(f"line {node.lineno}: a widget on the H3 grid (step 17)")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.right, ast.Constant):
            grid_step = node.right.value == 17 or (
                node.right.value == 8 and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Sub))
            if grid_step:
                found.append(f"line {node.lineno}: a frame-grid formula (% {node.right.value})")
    return found


def test_no_runtime_module_restates_a_fact():
    copies = {str(p.relative_to(ROOT)): hits for p in RUNTIME if p != FACTS_FILE
              for hits in [_fact_copies(ast.parse(p.read_text(encoding="utf-8")))] if hits}
    assert copies == {}, "import these from checks/facts.py instead"


def test_the_walker_finds_a_planted_copy():
    planted = 'LIMIT = 0.8\nok = (n - 5) % 17 == 0\nMIN = (0, 34, 0)\nW = {"min": 5, "step": 17}\n'
    assert len(_fact_copies(ast.parse(planted))) == 4


# --- layering -----------------------------------------------------------------------------------

def _imports(path: Path, top_level_only: bool) -> set[str]:
    """The pack modules a file imports, as 'package.module' (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = path.parent.name if path.parent != ROOT else ""
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = [package] if node.level == 1 and package else []
            parts = [*base, *(node.module.split(".") if node.module else [])]
            if node.module is None or len(parts) == 1:
                found.update(".".join([*parts, alias.name]) for alias in node.names)
            else:
                found.add(".".join(parts[:2]))
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _module(path: Path) -> str:
    return f"{path.parent.name}.{path.stem}"


# Imports point down: each layer imports only the layers below it (brief, "Layout and style").
LAYER_ORDER = ("checks", "adapters", "kernels", "nodes", "scripts")


def test_imports_point_down_the_layers():
    """checks/ (rules, facts) imports nothing of ours; adapters/ only checks/; kernels/ checks/ and adapters/;
    nodes/ never scripts/. Lazy imports inside functions count too."""
    upward = []
    for path in RUNTIME:
        layer = path.parent.name
        if layer not in LAYER_ORDER:
            continue  # the root __init__ (registration) and __main__ wire every layer
        above = LAYER_ORDER[LAYER_ORDER.index(layer) + 1:]
        upward += [f"{layer}/{path.name} -> {m}" for m in sorted(_imports(path, top_level_only=False))
                   if m.split(".")[0] in above]
    assert upward == []


def test_the_layer_walker_sees_an_upward_import(tmp_path):
    planted = tmp_path / "checks" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("def f():\n    from ..adapters.files import open_regular\n    from . import facts\n")
    assert _imports(planted, top_level_only=False) == {"adapters.files", "checks.facts"}


def test_no_import_circles_between_modules():
    graph = {_module(p): {m for m in _imports(p, top_level_only=True) if (ROOT / (m.replace(".", "/") + ".py")).exists()}
             for p in RUNTIME if p.parent != ROOT}
    state: dict[str, int] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            assert state.get(dep) != 1, "import circle: " + " -> ".join([*path, dep])
            if dep not in state:
                visit(dep, [*path, dep])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_checks_import_without_torch_or_comfyui():
    """Imported on its own (the pack's root __init__ registers nodes and is skipped here), checks/ is pure: no torch,
    no ComfyUI, nothing of the pack outside checks/."""
    code = f"""
import sys, types
from importlib import import_module
pack = types.ModuleType("h3kit"); pack.__path__ = [{str(ROOT)!r}]; sys.modules["h3kit"] = pack
for name in {sorted(p.stem for p in (ROOT / "checks").glob("*.py"))!r}:
    import_module("h3kit.checks." + name)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "comfy", "folder_paths", "numpy", "av")
               or m.startswith(("h3kit.adapters", "h3kit.nodes", "h3kit.scripts", "h3kit.kernels")))
print(heavy)
"""
    result = run_process([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- the sigma grammar, fuzzed ------------------------------------------------------------------

@given(st.text(max_size=200))
def test_any_text_is_a_schedule_or_a_sigma_error(text):
    try:
        values = facts.parse_sigmas(text)
    except facts.SigmaError:
        return
    assert len(values) >= 2 and values[-1] == 0.0 and all(0.0 <= v <= 1.0 for v in values)
    assert all(a > b for a, b in zip(values, values[1:], strict=False))


@given(st.lists(st.floats(min_value=0.0, max_value=1.0, exclude_min=True), min_size=1, max_size=8, unique=True),
       st.sampled_from([", ", " ", ";", " -> ", ",\n"]))
def test_every_descending_schedule_ending_at_0_parses_back(values, separator):
    schedule = sorted(values, reverse=True) + [0.0]
    assert facts.parse_sigmas(separator.join(repr(v) for v in schedule)) == schedule
