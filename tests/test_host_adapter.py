"""Issue 17, tier (a): the host adapter uses only folder_paths' public API, and a host quirk in one combo
list never takes a node (or /object_info) down: empty combo, one log line, a reason the node reports."""

from __future__ import annotations

import logging
import sys
import types

import pytest
from h3kit.adapters import host
from h3kit.nodes.conditioning_cache import H3KitLoadConditioning


@pytest.fixture(autouse=True)
def _clean_failures(monkeypatch):
    monkeypatch.setattr(host, "CHOICE_FAILURES", {})


def _fork_like_folder_paths(tmp_path, *, register=True) -> types.ModuleType:
    """Like the installable fork: get_folder_paths returns [] for an unknown kind (no KeyError), and the
    registry is a live object the pack must not assign into (so this fake does not expose it at all)."""
    folders: dict[str, list[str]] = {}
    fake = types.ModuleType("folder_paths")
    fake.models_dir = str(tmp_path / "models")
    fake.get_folder_paths = lambda kind: list(folders.get(kind, []))
    fake.add_model_folder_path = (lambda kind, path, is_default=False: folders.setdefault(kind, []).append(path)) \
        if register else (lambda kind, path, is_default=False: None)
    return fake


def _comfy_org_like_folder_paths(tmp_path) -> types.ModuleType:
    folders: dict[str, list[str]] = {"embeddings": [str(tmp_path / "models" / "embeddings")]}
    fake = types.ModuleType("folder_paths")
    fake.models_dir = str(tmp_path / "models")
    fake.get_folder_paths = lambda kind: list(folders[kind])  # KeyError for an unknown kind
    fake.add_model_folder_path = lambda kind, path, is_default=False: folders.setdefault(kind, []).append(path)
    return fake


@pytest.mark.parametrize("make", [_fork_like_folder_paths, _comfy_org_like_folder_paths])
def test_unknown_kind_is_registered_under_models_through_the_public_api(tmp_path, monkeypatch, make):
    monkeypatch.setitem(sys.modules, "folder_paths", make(tmp_path))
    assert host.model_folder("conditioning_cache") == tmp_path / "models" / "conditioning_cache"
    assert host.model_folder("conditioning_cache") == tmp_path / "models" / "conditioning_cache"  # once only
    assert sys.modules["folder_paths"].get_folder_paths("conditioning_cache") == [
        str(tmp_path / "models" / "conditioning_cache")]


def test_known_kind_keeps_the_users_first_folder(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "folder_paths", _comfy_org_like_folder_paths(tmp_path))
    assert host.model_folder("embeddings") == tmp_path / "models" / "embeddings"


def test_a_host_that_registers_nothing_is_named_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "folder_paths", _fork_like_folder_paths(tmp_path, register=False))
    with pytest.raises(host.HostUnavailable, match="conditioning_cache.*extra_model_paths.yaml"):
        host.model_folder("conditioning_cache")


def test_a_failing_list_gives_an_empty_combo_logged_once(caplog):
    def broken() -> list[str]:
        raise IndexError("list index out of range")

    with caplog.at_level(logging.WARNING, logger="H3Kit"):
        assert host.host_choices("H3KitX", "name", broken) == []
        assert host.host_choices("H3KitX", "name", broken) == []
    lines = [r.getMessage() for r in caplog.records if "H3KitX" in r.getMessage()]
    assert len(lines) == 1 and "'name'" in lines[0] and "IndexError" in lines[0] and "Fix:" in lines[0]
    assert "IndexError: list index out of range" in host.choice_failure("H3KitX", "name")
    assert host.choice_failure("H3KitX", "other") is None


def test_guard_serves_the_schema_with_empty_host_lists_when_input_types_raises():
    calls = {"n": 0}

    class H3KitFlaky:
        @classmethod
        def INPUT_TYPES(cls):
            calls["n"] += 1
            names = host.host_choices("H3KitFlaky", "name", lambda: ["a.safetensors"])
            if names:  # a host failure outside host_choices (e.g. a registry read) on the normal path
                raise KeyError("conditioning_cache")
            return {"required": {"name": (names, {"tooltip": "t"}), "strength": ("FLOAT", {"default": 1.0})}}

    host.guard_input_types(H3KitFlaky)
    schema = H3KitFlaky.INPUT_TYPES()
    assert schema["required"]["name"][0] == [] and schema["required"]["strength"][0] == "FLOAT"
    assert calls["n"] == 2 and "KeyError" in host.choice_failure("H3KitFlaky", "*")
    assert host.host_choices("H3KitFlaky", "name", lambda: ["b"]) == ["b"]  # offline only during the retry


def test_guard_reraises_a_schema_that_is_broken_without_the_host():
    class H3KitBroken:
        @classmethod
        def INPUT_TYPES(cls):
            raise TypeError("a bug, not a host quirk")

    host.guard_input_types(H3KitBroken)
    with pytest.raises(TypeError, match="a bug"):
        H3KitBroken.INPUT_TYPES()


def test_load_conditioning_survives_a_broken_folder_registry(tmp_path, monkeypatch):
    """The 0.12.1 failure of issue 17: the folder lookup raised IndexError inside INPUT_TYPES."""
    fake = types.ModuleType("folder_paths")
    fake.models_dir = str(tmp_path / "models")

    def get_folder_paths(kind):
        raise IndexError("list index out of range")

    fake.get_folder_paths = get_folder_paths
    fake.add_model_folder_path = lambda kind, path, is_default=False: None
    monkeypatch.setitem(sys.modules, "folder_paths", fake)
    combo, opts = H3KitLoadConditioning.INPUT_TYPES()["required"]["name"]
    assert combo == [] and opts["model_folder"] == "conditioning_cache"
    assert "IndexError" in host.choice_failure("H3KitLoadConditioning", "name")
