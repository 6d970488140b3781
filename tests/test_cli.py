"""Issue 2: the CLI's surface: every subcommand answers --help, `nodes` lists the registry."""

from __future__ import annotations

import json
import subprocess
import sys
from subprocess import run as run_process

import pytest
from h3kit import NODE_CLASS_MAPPINGS
from h3kit.scripts.cli import COMMANDS, build_parser


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_process([sys.executable, "-m", "h3kit", *args], capture_output=True, text=True, timeout=120)


def test_top_level_help_lists_every_command():
    result = run_cli("--help")
    assert result.returncode == 0
    for name in COMMANDS:
        assert name in result.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command, "--help"])
    assert done.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_nodes_command_lists_every_node():
    result = run_cli("nodes", "--json")
    assert result.returncode == 0, result.stderr
    listed = {row["id"]: row for row in json.loads(result.stdout)["nodes"]}
    assert set(listed) == set(NODE_CLASS_MAPPINGS)
    assert all(row["category"].startswith("H3Kit/") and row["description"] for row in listed.values())
