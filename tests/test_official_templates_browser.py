"""Issue 30, tier (d): the official H3 / LTX-2.x templates in the real editor, as a user meets them, on every host x
frontend (own + H3KIT_FRONTEND_ROOTS).

Each template the host serves itself (its pinned comfyui-workflow-templates, GET /templates/<name>.json) and each one
of the folders in H3KIT_TEMPLATE_ROOTS (`<version>=<folder>` of an unpacked comfyui-workflow-templates-json, e.g. the
newest) is opened in the editor, converted by the frontend's own graph-to-prompt and queued with the Run command,
placeholder files standing for the user's models and inputs. Where ComfyUI alone runs the graph whole (the corpus
manifest's verdict for this host's tag, tests/official_templates.py), the pack's preflight lets it through without a
dialog; where ComfyUI rejects it, the pack's dialog stops it, or the pack adds nothing to ComfyUI's own refusal (a
frontend that leaves the nodes a host lacks out of the prompt leaves no H3 / LTX node for the pack to check). The frontend 1.58.1 conversion is byte-for-byte the
committed corpus graph on the host that converted it (the corpus is what the real frontend sends).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from official_templates import (
    TEMPLATE_NAME,
    absent_named_files,
    cancel_everything,
    convert,
    corpus,
    runs_whole,
    template_files,
    write_placeholders,
)

pytestmark = pytest.mark.browser

TEMPLATE_ROOTS_ENV = "H3KIT_TEMPLATE_ROOTS"
CORPUS = {(g.package_version, g.name): g for g in corpus()}
# the frontend and host that converted the committed corpus (its manifest says so): a frontend converts a graph by the
# node definitions the host serves, so only there is the conversion the committed graph byte for byte
CORPUS_FRONTEND, CORPUS_HOST_TAG = (1, 58, 1), "kat3ri-0f1fa67a"
QUEUE_WAIT_MS = 30_000


def _extra_templates() -> list[tuple[str, Path]]:
    """(version, template file) of every folder named in H3KIT_TEMPLATE_ROOTS."""
    found = []
    for item in filter(None, os.environ.get(TEMPLATE_ROOTS_ENV, "").split(os.pathsep)):
        version, _, folder = item.partition("=")
        found += [(version, path) for path in template_files(Path(folder))]
    return found


def _served_templates(server) -> list[tuple[str, str]]:
    """(the host's pinned templates-json version, name) of each official H3 / LTX template this host serves."""
    stats = server.get("/system_stats")
    pinned = stats.get("system", {}).get("installed_templates_version")
    index = server.get("/templates/index.json")
    names = {t["name"] for category in index for t in category.get("templates", [])}
    version = next((v for (v, n) in CORPUS if n in names and v in _JSON_OF.get(pinned, ())), None)
    return [(version, name) for name in sorted(names) if TEMPLATE_NAME.match(name)]


# comfyui-workflow-templates (what a host pins) -> comfyui-workflow-templates-json (what the corpus names)
_JSON_OF = {"0.11.41": ("0.1.47",), "0.11.44": ("0.1.50",)}


def _queue_as_a_user(editor, server, workflow: dict) -> tuple[dict, bool, str]:
    """(the converted prompt, whether it reached /prompt, the preflight dialog's text or "")."""
    prompt = convert(editor, workflow)
    write_placeholders(server.base_dir, [f for f in server.get("/models") if f != "custom_nodes"],
                       absent_named_files(prompt, server.object_info()))
    editor.js("wf => { app.loadGraphData(wf, true, true, null); return true }", workflow)
    editor.page.wait_for_timeout(500)
    pressed = editor.queue()
    dialog = editor.preflight_dialog()
    deadline = time.monotonic() + QUEUE_WAIT_MS / 1000
    while time.monotonic() < deadline and not editor.posts("/api/prompt", pressed) and not dialog.count():
        editor.page.wait_for_timeout(250)
    text = dialog.inner_text() if dialog.count() else ""
    queued = bool(editor.posts("/api/prompt", pressed))
    cancel_everything(server)
    editor.js("__h3.closeAll(); true")
    return prompt, queued, text


def _verdict_problem(editor, server, version: str | None, name: str, workflow: dict) -> str | None:
    """What differs from ComfyUI's own verdict when a user queues `workflow`, or None; "skip: ..." when the corpus
    has no verdict for it on this host."""
    entry = CORPUS.get((version, name))
    if entry is None or server.host.tag not in entry.verdicts:
        return f"skip: {version}/{name}: no ComfyUI verdict for host tag {server.host.tag!r} in the corpus"
    accepted = runs_whole(entry.verdicts[server.host.tag])
    prompt, queued, dialog = _queue_as_a_user(editor, server, workflow)
    if (editor.version, server.host.tag) == (CORPUS_FRONTEND, CORPUS_HOST_TAG) and prompt != entry.graph:
        return f"{version}/{name}: frontend 1.58.1 on {CORPUS_HOST_TAG} no longer converts it as the corpus holds"
    if accepted and not (queued and not dialog):
        return f"{version}/{name}: ComfyUI accepts it, the pack stopped it:\n{dialog[:2000]}"
    if not accepted and not queued and not dialog:
        return f"{version}/{name}: ComfyUI rejects it, and the Run button neither queued it nor said why"
    # a rejected graph is either stopped by the pack's dialog or, where the frontend left the nodes this host lacks
    # out of the prompt (no H3 / LTX node left for the pack to check), refused by ComfyUI itself with its own error
    return None


def test_templates_the_host_serves_queue_as_comfyui_decides(editor, server):
    served = _served_templates(server)
    if not served:  # v0.3.64 pins templates from before LTX-2 and H3
        pytest.skip(f"{server.host.name} serves no official H3 / LTX-2.x template of its own")
    found = [_verdict_problem(editor, server, version, name, server.get(f"/templates/{name}.json"))
             for version, name in served]
    skipped = [f for f in found if f and f.startswith("skip: ")]
    if len(skipped) == len(found):
        pytest.skip(skipped[0])
    problems = [f for f in found if f and not f.startswith("skip: ")]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("version, path", _extra_templates(), ids=lambda v: getattr(v, "stem", v))
def test_newest_templates_queue_as_comfyui_decides(editor, server, version, path):
    import json

    problem = _verdict_problem(editor, server, version, path.stem, json.loads(path.read_text(encoding="utf-8")))
    if problem and problem.startswith("skip: "):
        pytest.skip(problem)
    assert problem is None, problem
