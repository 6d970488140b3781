"""Issue 30, tier (b): on a real host with the pack installed, every official H3 / LTX-2.x template that ComfyUI alone
accepts passes every checker of the pack — `validate --server`, `doctor --server --workflow`, the editor's preflight
route and the pack's /prompt hook — with no FAIL, and one the host rejects is rejected by them too.

The graphs are the committed corpus (tests/data/official_templates/, converted by the real frontend); ComfyUI's own
verdict on each is the manifest's entry for this host's tag (H3KIT_HOST_TAG_<n>, recorded with the pack NOT installed:
tests/official_templates.py). Placeholder files named as each graph's models and inputs stand for a user's files.
"""

from __future__ import annotations

import json

import pytest
from comfyui_host import NATIVE_H3
from h3kit.adapters.server_routes import PREFLIGHT_ROUTE
from h3kit.checks.problem import FAIL
from official_templates import absent_named_files, cancel_everything, corpus, runs_whole, write_placeholders

pytestmark = pytest.mark.comfyui

CORPUS = corpus()


@pytest.fixture(scope="module")
def host_with_files(comfyui_server):
    """The server, with placeholder files for every corpus graph, and ComfyUI's own verdicts for it."""
    comfyui_server.require(NATIVE_H3)
    tag = comfyui_server.host.tag
    if not all(tag in graph.verdicts for graph in CORPUS):
        pytest.skip(f"{comfyui_server.host.name}: the corpus has no verdict of a host tagged {tag!r} "
                    "(H3KIT_HOST_TAG_<n>; record one with `python tests/official_templates.py verdicts`)")
    info = comfyui_server.object_info()
    folders = [f for f in comfyui_server.get("/models") if f != "custom_nodes"]
    for graph in CORPUS:
        write_placeholders(comfyui_server.base_dir, folders, absent_named_files(graph.graph, info))
    return comfyui_server


def _cli(capsys, *args: str) -> tuple[int, str]:
    from h3kit.scripts.cli import main

    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _fails(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith(FAIL)]


@pytest.mark.parametrize("graph", CORPUS, ids=lambda g: g.label)
def test_every_checker_gives_the_hosts_verdict(host_with_files, graph, tmp_path, capsys):
    server = host_with_files
    accepted = runs_whole(graph.verdicts[server.host.tag])  # accepted, no output dropped
    path = tmp_path / f"{graph.name}.json"
    path.write_text(json.dumps(graph.graph), encoding="utf-8")

    code, out = _cli(capsys, "validate", str(path), "--server", server.url)
    assert (code == 0) == accepted, f"validate --server exit {code} where ComfyUI {'accepts' if accepted else 'rejects'}:\n{out}"

    code, out = _cli(capsys, "doctor", "--server", server.url, "--workflow", str(path), "--no-local")
    assert (not _fails(out)) == accepted, f"doctor (exit {code}):\n{out}"

    status, report = server.post(PREFLIGHT_ROUTE, {"prompt": graph.graph})
    assert status == 200, report
    assert (report["status"] != FAIL) == accepted, json.dumps(report, indent=1)[:4000]

    status, body = server.submit(report.get("adapted", {}).get("prompt", graph.graph))
    cancel_everything(server)
    whole = status == 200 and not body.get("node_errors")
    assert whole == accepted, f"/prompt with the pack's hook: {status} {json.dumps(body)[:2000]}"
