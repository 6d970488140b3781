"""Issue 27: packaging a ComfyUI user can install.

- pyproject.toml against the Comfy Registry's published rules (docs.comfy.org/registry/specifications: [project]
  name / version / license / urls.Repository, [tool.comfy] PublisherId / DisplayName / Icon: SVG, PNG, JPG or
  GIF, at most 400x400, square);
- every runtime dependency is imported by the pack's own code, and requirements.txt says the same;
- no OpenCV, headless or not (nothing needs it; two variants fight over cv2);
- the `test` extra installs into a ComfyUI environment without moving its pins.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from subprocess import run as run_process

import pytest
from h3kit.adapters.files import sniff_file
from packaging.requirements import Requirement
from packaging.version import Version
from PIL import Image

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT, COMFY = PYPROJECT["project"], PYPROJECT["tool"]["comfy"]
# The clone URL the README gives; Repository is inferred from it (docs/development.md says so).
REPOSITORY = "https://github.com/h3kit/H3Kit"
# Where each distribution is imported from (import name differs from the distribution name for some).
IMPORT_NAMES = {"pillow": "PIL", "websocket-client": "websocket", "safetensors": "safetensors", "av": "av",
                "numpy": "numpy", "requests": "requests", "tqdm": "tqdm", "torch": "torch",
                "pyyaml": "yaml"}
# Pins of the ComfyUI hosts the `test` extra must not move (their requirements files, read when present).
HOST_PINS = {
    "comfyui-0.33.0": {"comfy-kitchen": "0.2.31", "comfy-aimdo": "0.4.13", "comfyui-frontend-package": "1.49.6",
                       "comfyui-workflow-templates": "0.11.41", "comfyui-embedded-docs": "0.5.10"},
}
HOSTS = Path("/work/hosts")


# --- the Registry's rules -------------------------------------------------------------------------------

def test_name_follows_the_registry_rules():
    name = PROJECT["name"]
    assert len(name) < 100 and re.fullmatch(r"[A-Za-z][A-Za-z0-9._-]*", name)
    assert not re.search(r"[._-]{2}", name) and "comfyui" not in name.lower()


def test_version_is_three_part_semver():
    assert re.fullmatch(r"\d+\.\d+\.\d+", PROJECT["version"])


def test_license_is_the_mit_file_in_the_registry_form():
    assert PROJECT["license"] == {"file": "LICENSE"}  # the Registry's file form; a bare string is refused there
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text
    assert "MIT" in (REPO / "README.md").read_text(encoding="utf-8").split("## Licence", 1)[1]


def test_repository_url_is_the_readmes_clone_url():
    assert PROJECT["urls"]["Repository"] == REPOSITORY
    assert f"git clone {REPOSITORY}.git" in (REPO / "README.md").read_text(encoding="utf-8")


def test_tool_comfy_has_publisher_display_name_and_an_icon_in_this_repository():
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", COMFY["PublisherId"]) and COMFY["DisplayName"]
    prefix = REPOSITORY.replace("https://github.com/", "https://raw.githubusercontent.com/") + "/main/"
    assert COMFY["Icon"].startswith(prefix)
    icon = REPO / COMFY["Icon"].removeprefix(prefix)
    assert icon.is_file()
    assert sniff_file(icon).key in ("png", "jpeg", "gif") or icon.suffix == ".svg"  # the Registry's file types
    with Image.open(icon) as image:
        assert image.width == image.height <= 400  # square, at most 400x400
    assert COMFY.get("includes") == []


def test_the_icon_is_what_the_generator_draws():
    from h3kit.scripts.make_icon import ICON, draw_icon

    with Image.open(ICON) as committed:
        assert committed.size == (400, 400)
    assert draw_icon()[:8] == b"\x89PNG\r\n\x1a\n"


# --- dependencies -----------------------------------------------------------------------------------------

def _pack_imports() -> set[str]:
    """Top-level modules imported anywhere in the pack's runtime code (not tests, not benchmarks)."""
    found: set[str] = set()
    for path in REPO.rglob("*.py"):
        relative = path.relative_to(REPO).parts
        if relative[0] in ("tests", ".pylink", "build") or path.name.startswith("bench_") or relative[0].startswith("."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def _requirements_txt() -> list[Requirement]:
    lines = (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def test_every_runtime_dependency_is_imported_by_the_pack():
    imported = _pack_imports()
    for requirement in map(Requirement, PROJECT["dependencies"]):
        assert IMPORT_NAMES[requirement.name.lower()] in imported, requirement.name


def test_requirements_txt_is_the_dependency_list_without_torch():
    ours = {str(r) for r in map(Requirement, PROJECT["dependencies"]) if r.name != "torch"}
    assert {str(r) for r in _requirements_txt()} == ours


def test_no_opencv_and_no_unused_packages_anywhere():
    everything = [*PROJECT["dependencies"], *(r for extra in PROJECT["optional-dependencies"].values() for r in extra)]
    names = {Requirement(r).name.lower() for r in everything} | {r.name.lower() for r in _requirements_txt()}
    assert not {n for n in names if n.startswith("opencv")}, "cv2: never one variant next to another"
    assert "einops" not in names
    assert "cv2" not in _pack_imports() and "einops" not in _pack_imports()


def _host_pins() -> dict[str, dict[str, str]]:
    """Each host's exact pins: from its requirements file when the host is here, else the literal snapshot."""
    pins = {host: dict(values) for host, values in HOST_PINS.items()}
    for host in pins:
        source = HOSTS / host / "requirements.txt"
        if source.is_file():
            for line in source.read_text(encoding="utf-8").splitlines():
                if "==" in line and not line.startswith("#"):
                    requirement = Requirement(line.split("#")[0].strip())
                    pins[host][requirement.name.lower()] = str(requirement.specifier).removeprefix("==")
    return pins


def test_the_test_extra_never_moves_a_host_pin():
    test_extra = [Requirement(r) for r in PROJECT["optional-dependencies"]["test"]]
    runtime = [Requirement(r) for r in PROJECT["dependencies"]]
    for host, pins in _host_pins().items():
        for requirement in test_extra + runtime:
            pinned = pins.get(requirement.name.lower())
            if pinned is not None:
                assert requirement.specifier.contains(Version(pinned)), (host, str(requirement), pinned)
    assert not {r.name for r in test_extra} & {"comfy-kitchen", "comfy_kitchen"}
    assert any(r.startswith("comfy-kitchen>=0.2.40") for r in PROJECT["optional-dependencies"]["oracle"])


def test_ci_installs_what_the_tests_need():
    """The kitchen oracle is in its own extra; CI (README's lines, verbatim) must install it with `test`."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'pip install -e ".[test,oracle]"' in ci
    assert 'pip install -e ".[test,oracle]"' in (REPO / "README.md").read_text(encoding="utf-8")


def _host_cases():
    from comfyui_host import configured_hosts

    hosts, _ = configured_hosts()
    return hosts or [None]


@pytest.mark.comfyui
@pytest.mark.parametrize("host", _host_cases(), ids=lambda h: h.name if h else "no-host")
def test_the_test_extra_installs_into_each_host_venv_without_replacing_anything(host, tmp_path):
    """pip's own resolver, dry run, in the host's environment: `.[test]` only adds packages; `.[test,oracle]`
    would replace the host's comfy-kitchen (the reason `oracle` is separate)."""
    if host is None:
        pytest.skip("COMFYUI_DIRS / COMFYUI_DIR is not set: no host environment to install into (docs/testing.md)")
    installed = json.loads(run_process([host.python, "-m", "pip", "list", "--format", "json"], capture_output=True,
                                       text=True, timeout=300, check=True).stdout)
    have = {_norm(p["name"]): p["version"] for p in installed}

    def would_install(extras: str) -> dict[str, str]:
        report = tmp_path / f"{extras}.json"
        done = run_process([host.python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
                            f"{REPO}[{extras}]"], capture_output=True, text=True, timeout=900)
        if done.returncode != 0 and "Could not find a version" in done.stderr + done.stdout:
            pytest.skip(f"no package index reachable from here: {done.stderr.strip()[-300:]}")
        assert done.returncode == 0, done.stderr
        return {_norm(i["metadata"]["name"]): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}

    replaced = {name: (have[name], version) for name, version in would_install("test").items()
                if name in have and name != "h3kit"}
    assert replaced == {}, f"{host.name}: installing .[test] would replace {replaced}"
    if "comfy-kitchen" in have:
        assert "comfy-kitchen" in would_install("test,oracle") or Version(have["comfy-kitchen"]) >= Version("0.2.40")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")
