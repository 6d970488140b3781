"""Issue 27: one exit-code table and one stream rule for EVERY command (README, section 'Exit codes and output').

Each command runs in the situations a user meets (success, a wrong file, a missing file, a server that is not
there, an output name of the wrong kind) and is held to the table: the code is the documented one and is listed
in that command's EXIT_STATUSES, results go to stdout, every error and warning to stderr, and a file of the wrong
type is named as what it is. The README's table is checked against checks/facts.py and the commands' statuses.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from re import M as MULTILINE
from re import compile as regex
from re import findall

import pytest
import torch
from h3kit.checks import facts
from h3kit.scripts import cli
from h3kit.scripts.cli import COMMANDS
from PIL import Image
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parent.parent
API = REPO / "workflows" / "api"
DEMO_GRAPH = API / "h3kit_handoff_demo.json"  # no model files, no seed input
TWO_STAGE = API / "h3_ltx_two_stage.json"
# A line that reports a problem: what must never be on stdout.
PROBLEM = regex(r"^\s*(\S+: )?(FAIL|WARN|ERROR|WARNING|REJECTED|TIMEOUT|UNREACHABLE|STALE|error:|warning:|"
                     r"convert:|demo FAILED|\[FAIL\])")


def command_module(name: str):
    from importlib import import_module

    return import_module(f"h3kit.scripts.{COMMANDS[name][0]}")


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A PNG, a good bf16 safetensors file, an empty models folder; no ComfyUI folder around (cwd = tmp)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COMFYUI_DIR", raising=False)
    monkeypatch.setenv("H3KIT_COND_CACHE_DIR", str(tmp_path / "cache"))
    png = tmp_path / "sheet.png"
    Image.new("RGB", (8, 8)).save(png)
    model = tmp_path / "vae-bf16.safetensors"
    save_file({"w": torch.ones(4, dtype=torch.bfloat16)}, str(model), metadata={"config": "{}"})
    (tmp_path / "models").mkdir()
    (tmp_path / "exists.mp4").write_bytes(b"mine")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    return {"png": str(png), "model": str(model), "models": str(tmp_path / "models"), "tmp": tmp_path,
            "closed": closed}


# (command, argv, exit code, text that must be in stderr (None: stderr must be empty), text on stdout)
SCENARIOS = [
    ("nodes", ["nodes"], 0, None, "H3KitDraftToLTX"),
    ("validate", ["validate", str(DEMO_GRAPH)], 0, None, "OK "),
    ("validate", ["validate", "{png}"], 2, "is a PNG image, not a JSON workflow", ""),
    ("validate", ["validate", "{tmp}/missing.json"], 2, "missing.json does not exist", ""),
    ("validate", ["validate", str(DEMO_GRAPH), "--server", "{closed}"], 4, "cannot reach ComfyUI", ""),
    ("doctor", ["doctor", "--no-local", "--workflow", str(DEMO_GRAPH)], 0, None, "names no model file"),
    ("doctor", ["doctor", "--no-local", "--workflow", str(TWO_STAGE), "--models-dir", "{models}"], 1,
     "is not in {models}/diffusion_models", "FAIL"),
    ("doctor", ["doctor", "--no-local", "--workflow", "{png}"], 2, "is a PNG image", "FAIL"),
    ("doctor", ["doctor", "--no-local", "--models-dir", "{png}"], 2, "is not a folder", "FAIL"),
    ("doctor", ["doctor", "--no-local", "--server", "{closed}"], 4, "cannot reach ComfyUI", "FAIL"),
    ("demo", ["demo", "--output", "{tmp}/x.png"], 2, "name it {tmp}/x.mp4", ""),
    ("demo", ["demo", "--output", "{tmp}/exists.mp4"], 2, "exists. Choose another --output", ""),
    ("run", ["run", "{png}", "--server", "{closed}"], 2, "is a PNG image, not a JSON workflow", ""),
    ("run", ["run", str(DEMO_GRAPH), "--server", "{closed}", "--seed", "random"], 2,
     "this workflow has no seed or noise_seed input", ""),
    ("run", ["run", str(DEMO_GRAPH), "--server", "{closed}"], 4, "UNREACHABLE", ""),
    ("convert", ["convert", "bf16-to-fp16", "{png}", "{tmp}/out.safetensors"], 2, "is a PNG image", ""),
    ("convert", ["convert", "bf16-to-fp16", "{model}", "{tmp}/out.png"], 2, "name it {tmp}/out.safetensors", ""),
    ("convert", ["convert", "bf16-to-fp16", "{model}", "{tmp}/out.safetensors"], 0, None, "wrote {tmp}/out.safetensors"),
    ("cond", ["cond", "info", "{png}"], 2, "is a PNG image, not an H3Kit conditioning cache", ""),
    ("cond", ["cond", "import", "{png}", "x"], 2, "is a PNG image, not a legacy torch.save cache", ""),
    ("cond", ["cond", "build", "--server", "{closed}", "--text-file", "{png}", "--clip", "c", "--name", "n"], 2,
     "is a PNG image, not a UTF-8 text file", ""),
    ("cond", ["cond", "build", "--server", "{closed}", "--text", "x", "--clip", "c", "--name", "n"], 4,
     "cannot reach ComfyUI", ""),
    ("cond", ["cond", "list"], 0, None, "cache file(s)"),
    ("workflows", ["workflows", "ui", "--check"], 0, None, "up to date"),
]


@pytest.mark.parametrize("command, argv, code, err_text, out_text", SCENARIOS,
                         ids=[f"{s[0]}-{i}" for i, s in enumerate(SCENARIOS)])
def test_every_command_keeps_the_exit_table_and_the_stream_rule(files, capsys, command, argv, code, err_text,
                                                                 out_text):
    argv = [a.format(**files) for a in argv]
    if command == "cond" and argv[1] == "list":
        (files["tmp"] / "cache").mkdir()
    assert cli.main(argv) == code
    out, err = capsys.readouterr()
    assert code in cli.statuses_of(command_module(command)), f"{command} exits {code} but does not document it"
    assert not [line for line in out.splitlines() if PROBLEM.match(line)], f"a problem on stdout:\n{out}"
    if err_text is None:
        assert err == "", err
    else:
        assert err_text.format(**files) in err
        assert [line for line in err.splitlines() if PROBLEM.match(line) or line.strip().startswith("fix:")], err
    assert out_text.format(**files) in out
    assert "delete" not in err.lower() or command == "workflows"  # never advise deleting a file the user passed
    assert "Traceback" not in out + err


def test_bad_arguments_exit_2_on_stderr_for_every_command(capsys):
    for name in COMMANDS:
        with pytest.raises(SystemExit) as done:
            cli.main([name, "--no-such-option"])
        assert done.value.code == facts.EXIT_INVALID
        out, err = capsys.readouterr()
        assert out == "" and "unrecognized arguments" in err or "required" in err


def test_every_command_documents_ok_and_refused_and_only_table_codes():
    for name in COMMANDS:
        statuses = command_module(name).EXIT_STATUSES
        assert {facts.EXIT_OK, facts.EXIT_INVALID} <= set(statuses) <= set(facts.EXIT_CODES), name
        assert all(isinstance(text, str) and text for text in statuses.values()), name


def _readme_exit_rows() -> dict[int, tuple[str, str]]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Exit codes and output", 1)[1].split("\n## ", 1)[0]
    rows = findall(r"^\| (\d+) \| (.+?) \| (.+?) \|$", section, flags=MULTILINE)
    return {int(code): (meaning, commands) for code, meaning, commands in rows}


def test_the_readme_table_is_the_facts_table_and_names_each_command_that_uses_a_code():
    rows = _readme_exit_rows()
    assert sorted(rows) == sorted(facts.EXIT_CODES) == [0, 1, 2, 3, 4, 130]  # the documented numbers, literally
    for code, (meaning, commands) in rows.items():
        assert facts.EXIT_CODES[code].startswith(meaning.split(" (also")[0]), code
        users = {name for name in COMMANDS if code in cli.statuses_of(command_module(name))}
        named = set(COMMANDS) if commands == "all" else {c.strip() for c in commands.split(",")}
        assert named == users, (code, named ^ users)


def test_help_shows_each_commands_exit_codes_and_the_stream_rule(capsys):
    for name in COMMANDS:
        with pytest.raises(SystemExit):
            cli.main([name, "--help"])
        out = capsys.readouterr().out
        for code in cli.statuses_of(command_module(name)):
            assert f"{code} " in out.split("exit status:", 1)[1], name
        assert "stderr" in out


def test_json_reports_are_whole_on_stdout(files, capsys):
    assert cli.main(["doctor", "--no-local", "--json", "--workflow", str(TWO_STAGE), "--models-dir",
                     files["models"]]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["exit"] == 1 and report["fail"] == 9 and err == ""


def test_demo_output_may_be_a_folder_and_must_otherwise_be_named_mp4(tmp_path):
    from h3kit.scripts.demo import output_path

    assert output_path(tmp_path) == tmp_path / "h3kit_demo.mp4"
    assert output_path(tmp_path / "take.MP4") == tmp_path / "take.MP4"
    for wrong in ("take.png", "take.mkv", "take"):
        try:
            output_path(tmp_path / wrong)
        except ValueError as exc:
            assert f"name it {tmp_path / 'take.mp4'}" in str(exc)
        else:
            raise AssertionError(f"{wrong} accepted")
    default = output_path(None)  # a new temporary folder
    assert default.name == "h3kit_demo.mp4" and default.parent.is_dir()
    default.parent.rmdir()
