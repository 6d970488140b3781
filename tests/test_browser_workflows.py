"""Tier (d): the shipped workflows in the real ComfyUI frontend, in headless Chromium (`pytest -m browser`).

Needs COMFYUI_DIR (tier b's server, whose frontend package is the one under test) and a Chromium binary
(Debian: `apt-get install -y chromium`; or H3KIT_CHROMIUM=/path/to/chrome). Driven over the DevTools
protocol with websocket-client (tests/cdp_browser.py); skipped with the reason when either is missing.
Screenshots go to test-artifacts/browser/ (H3KIT_BROWSER_ARTIFACTS overrides it).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from cdp_browser import BrowserError, Chromium, find_chromium

pytestmark = pytest.mark.browser

PACK_ROOT = Path(__file__).resolve().parent.parent
API_DIR = PACK_ROOT / "workflows" / "api"
WORKFLOW_NAMES = sorted(p.stem for p in API_DIR.glob("*.json"))
ARTIFACTS = Path(os.environ.get("H3KIT_BROWSER_ARTIFACTS", PACK_ROOT / "test-artifacts" / "browser"))
TEMPLATE_MODULE = "H3Kit"  # tests/comfyui_host.py links the pack as custom_nodes/H3Kit
RUNNABLE_WORKFLOW = "h3kit_handoff_demo"  # core nodes + H3Kit nodes only: queued from the UI
# One screenshot per workflow family for the README, refreshed with H3KIT_README_SHOTS=1 (docs/img/).
README_SHOTS = {"h3_ltx_two_stage", "h3_ref2va_two_stage", "h3_effects_t2va", "h3_native_362_lowvram", RUNNABLE_WORKFLOW}
DOCS_IMG = PACK_ROOT / "docs" / "img"

# In-page probes. A missing-nodes warning is a dialog; anything else (toast of severity error, other dialog)
# is a failure. The graph is read back through the frontend's own serialisation.
PAGE_HELPERS = r"""
window.__h3 = {
  dialogs() {
    return [...document.querySelectorAll('.p-dialog')].map(d => d.innerText.trim());
  },
  errorToasts() {
    return [...document.querySelectorAll('.p-toast-message-error, .p-toast-message-warn')]
      .map(t => t.innerText.trim());
  },
  closeAll() {
    document.querySelectorAll('.p-toast-close-button').forEach(b => b.click());
    document.querySelectorAll('.p-dialog .p-dialog-close-button, .p-dialog [aria-label="Close"]')
      .forEach(b => b.click());
  },
  graph() {
    const data = app.graph.serialize();
    return {
      nodes: data.nodes.length,
      links: data.links.length,
      broken: app.graph.nodes.filter(n => n.has_errors).map(n => n.type),
      types: data.nodes.map(n => n.type),
    };
  },
  async drop(name, text) {
    const file = new File([text], name, {type: 'application/json'});
    const transfer = new DataTransfer();
    transfer.items.add(file);
    app.canvasEl.dispatchEvent(new DragEvent('drop', {dataTransfer: transfer, bubbles: true, cancelable: true}));
  },
};
true
"""


def _skip_reason() -> str | None:
    if find_chromium() is None:
        return "no Chromium found: apt-get install -y chromium (or set H3KIT_CHROMIUM=/path/to/chrome)"
    try:
        import websocket  # noqa: F401
    except ImportError:
        return "websocket-client is not installed: pip install -e .[test]"
    return None


@pytest.fixture(scope="module")
def page(comfyui_server):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    # a fresh user dir would open the "Get Started" template dialog over the canvas on first load
    status, _ = comfyui_server.post("/api/settings/Comfy.TutorialCompleted", True)
    assert status == 200
    browser = Chromium(find_chromium())
    try:
        browser.goto(comfyui_server.url)
        browser.wait_for("!!(window.app && app.graph && app.vueAppReady && window.LiteGraph)", 120, "the frontend")
        browser.evaluate(PAGE_HELPERS)
        yield browser
    finally:
        browser.close()


@pytest.fixture(scope="module")
def server_nodes(comfyui_server) -> set[str]:
    return set(comfyui_server.object_info())


def _api_graph(name: str) -> dict:
    return json.loads((API_DIR / f"{name}.json").read_text(encoding="utf-8"))


def _unknown_types(graph: dict, server_nodes: set[str]) -> set[str]:
    return {node["class_type"] for node in graph.values()} - server_nodes


def _link_count(graph: dict) -> int:
    return sum(1 for node in graph.values() for v in node["inputs"].values() if isinstance(v, list) and len(v) == 2
               and isinstance(v[1], int))


def _start_clean(page: Chromium) -> None:
    page.evaluate("__h3.closeAll(); app.graph.clear(); true")
    page.wait_for("__h3.dialogs().length === 0 && __h3.errorToasts().length === 0", 10, "dialogs and toasts to close")


def _settle(page: Chromium, expected_nodes: int | None) -> dict:
    """Wait until the graph has expected_nodes nodes (or a dialog appeared), then return the probe."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = page.evaluate("({graph: __h3.graph(), dialogs: __h3.dialogs(), toasts: __h3.errorToasts()})")
        if state["graph"]["nodes"] == expected_nodes or state["dialogs"] or state["toasts"]:
            time.sleep(0.5)  # let a dialog that follows the graph (missing nodes) render
            return page.evaluate("({graph: __h3.graph(), dialogs: __h3.dialogs(), toasts: __h3.errorToasts()})")
        time.sleep(0.25)
    return page.evaluate("({graph: __h3.graph(), dialogs: __h3.dialogs(), toasts: __h3.errorToasts()})")


def _assert_only_missing_nodes_reported(state: dict, unknown: set[str], name: str) -> None:
    assert state["toasts"] == [], f"{name}: error toast(s): {state['toasts']}"
    if not unknown:
        assert state["dialogs"] == [], f"{name}: unexpected dialog(s): {state['dialogs']}"
        return
    assert len(state["dialogs"]) == 1, f"{name}: expected one missing-nodes dialog, got {state['dialogs']}"
    text = state["dialogs"][0]
    for class_type in unknown:
        assert class_type in text, f"{name}: missing-nodes dialog does not list {class_type}: {text[:500]}"
    reported_h3kit = [word for word in text.replace(",", " ").split() if word.startswith("H3Kit")]
    assert reported_h3kit == [], f"{name}: H3Kit nodes reported missing: {reported_h3kit}"


def _open_template(page: Chromium, name: str) -> None:
    """The user's path: Templates dialog -> Custom Nodes -> H3Kit -> the template's card."""
    page.evaluate("app.extensionManager.command.execute('Comfy.BrowseTemplates'); true")
    option = f"[...document.querySelectorAll('.p-dialog li.p-listbox-option')].find(e => e.innerText.trim() === {json.dumps(TEMPLATE_MODULE)})"
    page.wait_for(f"!!({option})", 30, "the H3Kit entry under Custom Nodes in the template browser")
    page.evaluate(f"{option}.click(); true")
    card = (f"[...document.querySelectorAll('.p-dialog .template-card')]"
            f".find(c => [...c.querySelectorAll('h3')].some(h => h.innerText.trim() === {json.dumps(name)}))")
    page.wait_for(f"!!({card})", 30, f"the template card {name}")
    page.evaluate(f"{card}.scrollIntoView(); true")  # thumbnails load lazily, when the card is visible
    thumbnail_ok = page.wait_for(f"[...{card}.querySelectorAll('img')].some(i => i.complete && i.naturalWidth > 0)",
                                 20, f"the thumbnail of {name}")
    assert thumbnail_ok
    page.evaluate(f"{card}.click(); true")


def _save_readme_shot(png: Path, target: Path) -> None:
    from PIL import Image

    with Image.open(png) as image:
        small = image.convert("RGB").resize((image.width * 9 // 16, image.height * 9 // 16), Image.LANCZOS)
    target.parent.mkdir(parents=True, exist_ok=True)
    small.save(target, format="JPEG", quality=72, optimize=True)


def test_templates_are_listed_with_thumbnails(comfyui_server):
    listed = comfyui_server.get("/api/workflow_templates")
    assert sorted(listed.get(TEMPLATE_MODULE, [])) == WORKFLOW_NAMES


@pytest.mark.parametrize("name", WORKFLOW_NAMES)
def test_template_browser_opens_workflow(page, server_nodes, name):
    graph = _api_graph(name)
    unknown = _unknown_types(graph, server_nodes)
    assert not {t for t in unknown if t.startswith("H3Kit")}, f"H3Kit nodes absent from the server: {unknown}"
    _start_clean(page)
    _open_template(page, name)
    state = _settle(page, len(graph))
    page.evaluate("__h3.dialogs().length && __h3.closeAll(); true")
    time.sleep(0.5)
    shot = page.screenshot(ARTIFACTS / f"{name}.png")
    if os.environ.get("H3KIT_README_SHOTS") == "1" and name in README_SHOTS:
        _save_readme_shot(shot, DOCS_IMG / f"workflow-{name}.jpg")
    assert state["graph"]["nodes"] == len(graph), f"{name}: {state}"
    assert state["graph"]["links"] == _link_count(graph)
    _assert_only_missing_nodes_reported(state, unknown, name)
    assert set(state["graph"]["broken"]) == unknown


@pytest.mark.parametrize("name", WORKFLOW_NAMES)
def test_dropping_ui_file_loads_workflow(page, server_nodes, name):
    graph = _api_graph(name)
    unknown = _unknown_types(graph, server_nodes)
    _start_clean(page)
    text = (PACK_ROOT / "workflows" / f"{name}.json").read_text(encoding="utf-8")
    page.evaluate(f"__h3.drop({json.dumps(name + '.json')}, {json.dumps(text)})")
    state = _settle(page, len(graph))
    assert state["graph"]["nodes"] == len(graph), f"{name}: {state}"
    assert state["graph"]["links"] == _link_count(graph)
    _assert_only_missing_nodes_reported(state, unknown, name)
    assert set(state["graph"]["broken"]) == unknown


@pytest.mark.parametrize("name", WORKFLOW_NAMES)
def test_dropping_api_file_loads_or_names_missing_nodes(page, server_nodes, name):
    """The frontend lays out an API file only when it knows every node; otherwise it loads nothing and
    lists the missing types, which must be exactly the nodes this ComfyUI version lacks."""
    graph = _api_graph(name)
    unknown = _unknown_types(graph, server_nodes)
    _start_clean(page)
    text = (API_DIR / f"{name}.json").read_text(encoding="utf-8")
    page.evaluate(f"__h3.drop({json.dumps(name + '.api.json')}, {json.dumps(text)})")
    state = _settle(page, len(graph))
    _assert_only_missing_nodes_reported(state, unknown, name)
    if not unknown:
        assert state["graph"]["nodes"] == len(graph)
        assert state["graph"]["links"] == _link_count(graph)
        assert state["graph"]["broken"] == []


@pytest.mark.skipif(RUNNABLE_WORKFLOW not in WORKFLOW_NAMES, reason=f"workflows/api/{RUNNABLE_WORKFLOW}.json is absent")
def test_known_node_workflow_queues_from_the_ui(page, comfyui_server, server_nodes):
    graph = _api_graph(RUNNABLE_WORKFLOW)
    assert _unknown_types(graph, server_nodes) == set()
    _start_clean(page)
    _open_template(page, RUNNABLE_WORKFLOW)
    assert _settle(page, len(graph))["graph"]["nodes"] == len(graph)
    before = set(comfyui_server.get("/history"))
    page.evaluate("app.extensionManager.command.execute('Comfy.QueuePrompt'); true")
    deadline = time.monotonic() + 120
    entry = None
    while time.monotonic() < deadline:
        new = {k: v for k, v in comfyui_server.get("/history").items() if k not in before}
        entry = next(iter(new.values()), None)
        if entry and entry.get("status", {}).get("completed") is not None:
            break
        time.sleep(0.5)
    assert entry is not None, f"nothing reached /history after queueing from the UI:\n{comfyui_server.log()[-2000:]}"
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
    saved = entry["outputs"]["4"]["images"]
    assert len(saved) == 17  # 22 stand-in frames trimmed to LTX's 8n+1 grid
    assert all(comfyui_server.output_path(info).is_file() for info in saved)
    page.screenshot(ARTIFACTS / f"{RUNNABLE_WORKFLOW}-queued.png")


def test_browser_helpers_raise_on_page_errors(page):
    with pytest.raises(BrowserError, match="h3kit-probe"):
        page.evaluate("(() => { throw new Error('h3kit-probe') })()")
