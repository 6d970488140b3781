"""Issue 33, item 7 (the first hour): the command line starts without torch.

`import h3kit` registers nothing until ComfyUI reads NODE_CLASS_MAPPINGS, and the CLI reads H3Kit's own schemas
from the pinned file (workflows/schemas/h3kit-nodes.json), so --help, every command's --help, validate and doctor
without the machine checks never import torch. Before: every command imported torch first (4-11 s on a busy
2-core machine; 1.2-1.5 s warm here).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from subprocess import run as run_process

import h3kit
import pytest
from h3kit.scripts.cli import COMMANDS

PACK_ROOT = Path(h3kit.__file__).resolve().parent
WORKFLOW = "workflows/api/h3_ltx_two_stage.json"
# `time python -m h3kit --help` here, 2026-12-02, 2 shared cores: 0.14 s idle, 0.33-0.46 s at load average 7
# (main before this change: 1.2-1.5 s idle, 3.6-4.1 s at load 7; issue 33 saw 4-11 s). The promise is under 1 s;
# the bound is generous so a busy CI machine does not fail it: torch's import is what the sys.modules tests catch.
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


# --- doctor finds the model folders of a --base-directory, Desktop and extra_model_paths.yaml layout -------------

TWO_STAGE = PACK_ROOT / "workflows" / "api" / "h3_ltx_two_stage.json"
TWO_STAGE_TOTAL = "9 files, 67.55 GiB missing"  # README's per-graph table: files 1 8 4 6 7 13 14 10 12


def _clean_env(home: Path) -> dict[str, str]:
    """This process's environment without a ComfyUI hint and with an empty home (no ComfyUI Desktop config)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COMFYUI_DIR", "XDG_CONFIG_HOME", "APPDATA")}
    home.mkdir(parents=True, exist_ok=True)
    return {**env, "HOME": str(home)}


def test_doctor_in_a_base_directory_without_models_lists_every_missing_file(tmp_path):
    """ComfyUI started with --base-directory BASE and the clone linked into BASE/custom_nodes: BASE/models does not
    exist yet. Before: 'model files: not checked', exit 0."""
    base = tmp_path / "base"
    (base / "custom_nodes").mkdir(parents=True)
    (base / "custom_nodes" / "H3Kit").symlink_to(PACK_ROOT, target_is_directory=True)
    result = run_process([sys.executable, str(base / "custom_nodes" / "H3Kit"), "doctor", "--no-local", "--workflow",
                          str(TWO_STAGE)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=_clean_env(tmp_path / "home"))
    assert result.returncode == 1, result.stdout + result.stderr
    fails = [line for line in result.stderr.splitlines() if line.startswith("FAIL  model files")]
    assert len(fails) == 9
    assert f"in {base / 'models' / 'diffusion_models'} (11.67 GiB" in result.stderr
    assert result.stdout.rstrip().endswith(f"verdict FAIL; model files: {TWO_STAGE_TOTAL}")


def _comfyui_checkout(folder: Path) -> Path:
    for sub in ("custom_nodes", "models/diffusion_models", "models/vae"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text("# ComfyUI\n")
    return folder


def test_extra_model_paths_yaml_is_read_as_comfyui_reads_it(tmp_path, monkeypatch):
    from h3kit.adapters.model_folders import layout_files
    from h3kit.adapters.model_layout import find_layout

    comfy = _comfyui_checkout(tmp_path / "ComfyUI")
    shared = tmp_path / "shared"
    (shared / "big" / "unet").mkdir(parents=True)
    (shared / "big" / "unet" / "h3.safetensors").write_bytes(b"x")
    monkeypatch.setenv("H3KIT_TEST_SHARED", str(shared))
    (comfy / "extra_model_paths.yaml").write_text(
        "other:\n"
        "  base_path: $H3KIT_TEST_SHARED\n"
        "  unet: |\n"
        "    big/unet\n"
        "    more/unet\n"
        "  vae: vae_store\n"
        "first:\n"
        "  base_path: ../shared\n"
        "  is_default: true\n"
        "  clip: encoders\n"
        "empty:\n")
    layout, notes = find_layout({"HOME": str(tmp_path / "home")}, cwd=comfy, argv0="-c", platform="linux")
    assert notes == [] and layout is not None
    assert layout.folders("diffusion_models") == (comfy / "models" / "diffusion_models", comfy / "models" / "unet",
                                                 shared / "big" / "unet", shared / "more" / "unet")
    assert layout.folders("unet_gguf")[-2:] == (shared / "big" / "unet", shared / "more" / "unet")
    assert layout.folders("vae") == (comfy / "models" / "vae", shared / "vae_store")
    assert layout.folders("text_encoders")[0] == shared / "encoders"  # is_default: searched first, new files go there
    assert layout_files(layout).locate("diffusion_models", "h3.safetensors") == shared / "big" / "unet" / "h3.safetensors"
    assert "extra_model_paths.yaml" in layout.source


def test_an_unreadable_model_paths_config_is_a_warning_not_a_silent_skip(tmp_path):
    from h3kit.adapters.model_layout import find_layout

    comfy = _comfyui_checkout(tmp_path / "ComfyUI")
    (comfy / "extra_model_paths.yaml").write_text("a: [unclosed\n")
    layout, notes = find_layout({"HOME": str(tmp_path / "home")}, cwd=comfy, argv0="-c", platform="linux")
    assert layout is not None and layout.folders("vae") == (comfy / "models" / "vae",)
    assert [(n.status, n.name) for n in notes] == [("WARN", "model folders")]
    assert "extra_model_paths.yaml is not valid YAML" in notes[0].detail


@pytest.mark.parametrize("case", ["too big", "fifo", "not a mapping", "alias bomb", "not utf-8"])
def test_a_hostile_model_paths_config_is_named_and_bounded(tmp_path, case):
    from h3kit.adapters.model_layout import MAX_CONFIG_BYTES, find_layout

    comfy = _comfyui_checkout(tmp_path / "ComfyUI")
    config = comfy / "extra_model_paths.yaml"
    if case == "fifo":
        os.mkfifo(config)  # opening it without a writer must not hang doctor
    else:
        config.write_bytes({
            "too big": b"a:\n  vae: " + b"x" * MAX_CONFIG_BYTES + b"\n",
            "not a mapping": b"- just\n- a list\n",
            "alias bomb": b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
                b"%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n" % ((98 + i, 98 + i) + (97 + i,) * 9)
                for i in range(8)) + b"s:\n  vae: *i\n",
            "not utf-8": b"a:\n  vae: \xff\xfe\n"}[case])
    layout, notes = find_layout({"HOME": str(tmp_path / "home")}, cwd=comfy, argv0="-c", platform="linux")
    assert layout is not None and layout.folders("vae") == (comfy / "models" / "vae",)  # the defaults still apply
    if case == "alias bomb":  # a list where a folder line belongs is skipped, as ComfyUI cannot read it either
        assert notes == []
    else:
        assert [n.status for n in notes] == ["WARN"] and str(config) in notes[0].detail


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_comfyui_desktop_base_path_and_its_model_config_are_found(tmp_path, platform):
    from h3kit.adapters.model_layout import find_layout

    home = tmp_path / "home"
    user_data = {"linux": home / ".config" / "ComfyUI", "darwin": home / "Library" / "Application Support" / "ComfyUI",
                 "win32": tmp_path / "AppData" / "Roaming" / "ComfyUI"}[platform]
    user_data.mkdir(parents=True)
    desktop = tmp_path / "Documents" / "ComfyUI"
    (desktop / "models" / "loras").mkdir(parents=True)
    (user_data / "config.json").write_text(json.dumps({"basePath": str(desktop), "installState": "installed"}))
    (user_data / "extra_models_config.yaml").write_text(
        f"# ComfyUI extra_model_paths.yaml for {platform}\ncomfyui:\n  base_path: {desktop}\n  is_default: true\n"
        "  loras: models/loras/\n  unet: models/unet/\n  custom_nodes: custom_nodes/\n")
    env = {"HOME": str(home), "APPDATA": str(tmp_path / "AppData" / "Roaming")}
    layout, notes = find_layout(env, cwd=tmp_path, argv0="-c", platform=platform)
    assert notes == [] and layout is not None
    assert layout.models_dir == desktop / "models" and "ComfyUI Desktop" in layout.source
    assert layout.folders("loras") == (desktop / "models" / "loras",)
    assert layout.folders("diffusion_models")[0] == desktop / "models" / "unet"  # Desktop's is_default folder


def test_no_comfyui_anywhere_is_still_a_warning_that_says_what_to_pass(tmp_path):
    from h3kit.adapters.model_layout import find_layout

    assert find_layout({"HOME": str(tmp_path)}, cwd=tmp_path, argv0="-c", platform="linux") == (None, [])


def test_the_servers_folder_table_names_where_a_missing_file_goes():
    from h3kit.adapters.model_layout import served_layout
    from h3kit.checks.server import model_file_checks

    answers = {"/experiment/models": [
        {"name": "diffusion_models", "folders": ["/srv/base/models/unet", "/srv/base/models/diffusion_models"]},
        {"name": "vae", "folders": ["/srv/base/models/vae"]}]}
    layout = served_layout(answers.get, "http://s")
    assert layout.folders("diffusion_models")[0] == Path("/srv/base/models/diffusion_models")
    assert served_layout({"/internal/folder_paths": {"vae": ["/a/vae"]}}.get, "http://s").folders("vae") == (Path("/a/vae"),)
    assert served_layout({}.get, "http://s") is None
    graph = {"1": {"class_type": "UNETLoader", "inputs": {"unet_name": "minimax_h3_fl2va_pruned_nvfp4.safetensors",
                                                          "weight_dtype": "default"}}}
    schemas = {"UNETLoader": {"input": {"required": {"unet_name": [[], {}], "weight_dtype": [["default"], {}]}}}}
    [check] = model_file_checks(graph, schemas, answers.get)
    assert check.status == "FAIL" and "put minimax_h3_fl2va_pruned_nvfp4.safetensors in /srv/base/models/diffusion_models" in check.fix


def test_the_missing_total_counts_each_file_once():
    from h3kit.checks.model_files import missing_total

    graph = json.loads(TWO_STAGE.read_text(encoding="utf-8"))
    names = [n["inputs"][k] for n in graph.values() for k in ("unet_name", "clip_name", "vae_name", "lora_name",
                                                              "model_name") if k in n.get("inputs", {})]
    assert missing_total(names + names[:2]) == TWO_STAGE_TOTAL
    assert missing_total(["minimax_h3_audio_vae_fp32.safetensors", "mine.safetensors"]) == \
        "2 files, 0.56 GiB missing (1 of unknown size not counted)"


def test_validate_against_a_server_prints_the_same_f01_line_once(tmp_path):
    from fake_comfy import GRAPH, FakeComfy

    fake = FakeComfy()
    try:
        paths = []
        for name in ("a.json", "b.json", "c.json"):
            paths.append(tmp_path / name)
            paths[-1].write_text(json.dumps(GRAPH))
        result = run_process([sys.executable, "-m", "h3kit", "validate", *map(str, paths), "--server", fake.url],
                             capture_output=True, text=True, timeout=120)
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("comfyui version:") == 1
    assert result.stdout.count(": 0 error(s)") == 3


# --- torch: a lower bound, never a move ---------------------------------------------------------------------------

def test_the_torch_requirement_is_a_lower_bound_the_tested_wheels_satisfy():
    """README's test line installs the CPU wheel 2.13.0; the Turing stack runs torch 2.6.0 (field notes). The
    bound must accept both and never cap (an upper bound would move a ComfyUI's newer torch)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
        import tomli as tomllib

    project = tomllib.loads((PACK_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    [torch] = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "torch"]
    assert str(torch.specifier) == ">=2.6"
    for version in ("2.13.0+cpu", "2.6.0+cu124", "2.9.1+cu128", "2.11.0+cu130"):
        assert torch.specifier.contains(Version(version)), version
    readme = (PACK_ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme


# --- the attention-backend tests skip by capability where the `oracle` extra is missing -------------------------

def test_attention_tests_skip_without_comfy_kitchen():
    """Before: four tests failed with AttributeError on None (the fake H3 block calls comfy-kitchen's rope kernel).
    `sys.modules[name] = None` is how Python spells "not installed"."""
    code = ("import sys; sys.modules['comfy_kitchen'] = None\n"
            "import pytest\n"
            "sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', 'tests/test_attention_backend.py', "
            "'tests/test_attention_sites.py']))\n")
    result = run_process([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PACK_ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "4 skipped" in result.stdout and "needs comfy-kitchen's rms_rope_split_half_" in result.stdout


# --- tier (b): the real host's base directory, found offline and asked with --server ----------------------------

@pytest.mark.comfyui
def test_doctor_finds_the_real_hosts_model_folders_offline(comfyui_server, tmp_path):
    """The host runs with --base-directory BASE and the pack linked into BASE/custom_nodes (tests/comfyui_host.py):
    doctor run as a user runs it there lists every missing file in BASE/models (any host: no server is asked)."""
    from comfyui_host import PACK_LINK_NAME

    base = comfyui_server.base_dir
    clone = base / "custom_nodes" / PACK_LINK_NAME
    env = _clean_env(tmp_path / "home")
    offline = run_process([sys.executable, str(clone), "doctor", "--no-local", "--workflow", str(TWO_STAGE)],
                          capture_output=True, text=True, timeout=120, cwd=base, env=env)
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert f"in {base / 'models' / 'diffusion_models'} (11.67 GiB" in offline.stderr
    assert offline.stdout.rstrip().endswith(TWO_STAGE_TOTAL)


@pytest.mark.comfyui
def test_doctor_with_server_names_the_folders_the_server_reports(comfyui_server, tmp_path):
    """doctor --server names the folder the server itself reports for each missing file. Needs a host that serves
    every node of the two-stage graph: an older one refuses the graph's values (exit 2) and cannot say which folder
    a loader it lacks would read (v0.3.64: 8 files, not 9)."""
    from comfyui_host import LTXAV, NATIVE_H3, PACK_LINK_NAME

    comfyui_server.require(NATIVE_H3, LTXAV)
    base = comfyui_server.base_dir
    clone = base / "custom_nodes" / PACK_LINK_NAME
    env = _clean_env(tmp_path / "home")
    served = run_process([sys.executable, str(clone), "doctor", "--no-local", "--workflow", str(TWO_STAGE), "--server",
                          comfyui_server.url], capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert served.returncode == 1, served.stdout + served.stderr
    assert served.stderr.count("FAIL  model files") == 9
    assert f"put minimax_h3_fl2va_pruned_nvfp4.safetensors in {base.resolve() / 'models' / 'diffusion_models'}" in \
        served.stderr.replace(str(base), str(base.resolve()))
    assert served.stdout.rstrip().endswith(TWO_STAGE_TOTAL)
