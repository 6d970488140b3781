"""Issue 2: registration contract, import isolation, optional-dependency handling."""

from __future__ import annotations

import json
import logging
import sys
import types
from pathlib import Path
from subprocess import run as run_process

import h3kit
import pytest
from h3kit import nodes as registry

PACK_ROOT = Path(h3kit.__file__).resolve().parent
HOST_PREFIXES = ("comfy", "folder_paths", "server")


def _pack_modules() -> list[str]:
    names = []
    for path in PACK_ROOT.rglob("*.py"):
        rel = path.relative_to(PACK_ROOT)
        if rel.parts[0] in ("tests", "workflows") or rel.name == "__main__.py":
            continue
        parts = ["h3kit", *rel.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return sorted(names)


def test_import_never_pulls_in_the_host_or_cuda():
    code = (
        "import sys, h3kit\n"
        "from importlib import import_module\n"
        f"for name in {_pack_modules()!r}:\n"
        "    import_module(name)\n"
        f"host = sorted(m for m in sys.modules if m.split('.')[0] in {HOST_PREFIXES!r})\n"
        "import torch\n"
        "print(host, torch.cuda.is_initialized())\n"
    )
    out = run_process([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[] False"


def test_every_capability_module_imports():
    assert registry.IMPORT_FAILURES == {}
    assert registry.NODE_CLASS_MAPPINGS, "no nodes registered"


def test_exported_mappings_match():
    assert h3kit.NODE_CLASS_MAPPINGS is registry.NODE_CLASS_MAPPINGS
    assert set(h3kit.NODE_DISPLAY_NAME_MAPPINGS) == set(h3kit.NODE_CLASS_MAPPINGS)


@pytest.mark.parametrize("node_id", sorted(registry.NODE_CLASS_MAPPINGS))
def test_node_follows_the_schema_contract(node_id):
    cls = registry.NODE_CLASS_MAPPINGS[node_id]
    assert node_id.startswith("H3Kit") and cls.__name__ == node_id
    assert cls.CATEGORY.startswith("H3Kit/")
    assert cls.DESCRIPTION.strip(), "DESCRIPTION missing"
    assert callable(getattr(cls, cls.FUNCTION))
    assert len(getattr(cls, "RETURN_NAMES", cls.RETURN_TYPES)) == len(cls.RETURN_TYPES)
    spec = cls.INPUT_TYPES()
    json.dumps(spec, default=str)  # /object_info must be able to serialise it
    for section in ("required", "optional"):
        for name, value in spec.get(section, {}).items():
            opts = value[1] if len(value) > 1 else {}
            assert opts.get("tooltip"), f"{node_id}.{name} has no tooltip"


def _fake_module(name: str, node_classes: list[type]) -> types.ModuleType:
    module = types.ModuleType(f"h3kit.nodes.{name}")
    module.NODES = node_classes
    return module


def test_missing_optional_package_disables_only_its_nodes(monkeypatch, caplog):
    needs_missing = type("H3KitNeedsMissing", (), {"REQUIRES": ("h3kit_surely_absent_pkg",)})
    fine = type("H3KitFine", (), {})
    monkeypatch.setitem(sys.modules, "h3kit.nodes.fake_family", _fake_module("fake_family", [needs_missing, fine]))
    monkeypatch.setattr(registry, "NODE_MODULES", ("fake_family",))
    monkeypatch.setattr(registry, "DISABLED_NODES", {})
    monkeypatch.setattr(registry, "OPTIONAL_NOTES", [])
    with caplog.at_level(logging.INFO, logger="H3Kit"):
        found = registry.collect_nodes()
        registry.log_optional_notes()  # what the pack's registration does in ComfyUI
    assert set(found) == {"H3KitFine"}
    lines = [r for r in caplog.records if "h3kit_surely_absent_pkg" in r.getMessage()]
    # one INFO line for ComfyUI's log: an optional node that is off is not a warning
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and "H3KitNeedsMissing" in lines[0].getMessage()
    assert registry.DISABLED_NODES == {"h3kit_surely_absent_pkg": ["H3KitNeedsMissing"]}
    assert registry.OPTIONAL_NOTES == [lines[0].getMessage()]


def test_sage_note_names_the_versions_that_work():
    from h3kit.nodes.turing import H3KitSageAttention

    note = registry.optional_note(H3KitSageAttention, ["sageattention", "triton"])
    assert note == ("H3Kit: optional node H3KitSageAttention is off (sageattention, triton not installed); every other "
                    "node works without it. It is for RTX 20xx (sm_75) only: pip install sageattention==1.0.6 with "
                    "Triton 3.2 (torch 2.6's); newer GPUs use ComfyUI's own --use-sage-attention with sageattention 2.x.")


def test_broken_module_loses_only_its_own_nodes(monkeypatch, caplog):
    fine = type("H3KitFine", (), {})
    monkeypatch.setitem(sys.modules, "h3kit.nodes.good_family", _fake_module("good_family", [fine]))
    monkeypatch.setattr(registry, "NODE_MODULES", ("good_family", "no_such_family_module"))
    monkeypatch.setattr(registry, "IMPORT_FAILURES", {})
    with caplog.at_level(logging.ERROR, logger="H3Kit"):
        found = registry.collect_nodes()
        registry.log_optional_notes()  # what the pack's registration does in ComfyUI
    assert set(found) == {"H3KitFine"}
    assert "no_such_family_module" in registry.IMPORT_FAILURES
    assert any("no_such_family_module" in r.getMessage() for r in caplog.records)


def test_a_host_that_imports_the_pack_twice_logs_each_optional_note_once():
    """The installable ComfyUI 0.12.1 imports a custom node package twice at start-up, under two module names: each
    copy registered and logged "optional node H3KitSageAttention is off", so its start-up log held the line twice
    (tier b, test_demo_comfyui). The once-per-process lines are kept on the logger, which logging holds once per
    process by its name. Run in a fresh interpreter: two copies of the package, each asked for its mappings."""
    if not registry.OPTIONAL_NOTES:
        pytest.skip("every optional node is on here: no note to log")
    code = (
        "import importlib.util, logging, sys\n"
        "lines = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): lines.append(record.getMessage())\n"
        "logging.getLogger('H3Kit').addHandler(Keep()); logging.getLogger('H3Kit').setLevel(logging.INFO)\n"
        "for name in ('copy_one', 'copy_two'):\n"
        f"    spec = importlib.util.spec_from_file_location(name, {str(PACK_ROOT / '__init__.py')!r},\n"
        f"                                                  submodule_search_locations=[{str(PACK_ROOT)!r}])\n"
        "    module = importlib.util.module_from_spec(spec); sys.modules[name] = module\n"
        "    spec.loader.exec_module(module)\n"
        "    assert module.NODE_CLASS_MAPPINGS and sys.modules[name + '.nodes'].OPTIONAL_NOTES\n"
        "print(sum('optional node' in line and 'is off' in line for line in lines),\n"
        "      len(sys.modules['copy_one.nodes'].OPTIONAL_NOTES))\n"
    )
    done = run_process([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PACK_ROOT.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    logged, notes = done.stdout.strip().splitlines()[-1].split()
    assert logged == notes, done.stdout + done.stderr[-2000:]
