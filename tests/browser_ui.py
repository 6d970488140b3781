"""The ComfyUI graph editor as a user drives it, in headless Chromium through playwright (tier d).

One `Editor` per page. Where frontends differ it branches on what the page itself says: its version
(`window.__COMFYUI_FRONTEND_VERSION__`) or the presence of the newer UI's test ids. Known differences:
- templates: 1.27 lists pack templates under "Custom Nodes" (PrimeVue listbox, `.template-card`); 1.58 under
  "Extensions" (`[data-testid=template-workflow-<name>]`).
- load problems: 1.27 and 1.40 open a dialog listing missing nodes (or models); 1.49 and 1.58 show one "N errors
  found" overlay for every kind of problem, whose "View details" opens a panel with a group per kind
  (`[data-testid=error-group-missing-node]`, `...-missing-model` for model files the server lacks,
  `...-missing-media`), and load what they can of an API file. `Editor.load_report` reads them by kind.
- toasts: 1.27 PrimeVue `.p-toast-message-<severity>`; 1.58 `li[data-testid=toast][data-toast-kind]`.
Playwright drives the system Chromium (never a downloaded one).

Offline machines: a host's frontend extension may load a script from a CDN and wait for it before the editor
finishes loading (the installable 0.12.1 fork's `eval_python.js` awaits the Ace editor from cdn.jsdelivr.net and
never settles when that fails). H3KIT_BROWSER_CDN_MIRROR names a folder laid out as `<host>/<path>` from which such
https requests are answered, so the page gets the same file a browser with internet gets; without it, an editor
that stays blocked by an unreachable script raises `EditorBlocked` naming the URL and the extension that waits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from comfyui_host import combo_options
from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")
# window.app is a global in 1.27 and 1.58; 1.40 only exposes it as comfyAPI.app.app
APP = "(window.app ?? window.comfyAPI?.app?.app)"
READY = f"!!({APP} && {APP}.graph && window.LiteGraph && ({APP}.vueAppReady ?? true))"
PREFLIGHT_DIALOG = "[data-testid=h3kit-preflight-dialog]"
TEMPLATE_CARDS = "[data-testid^='template-workflow-']"  # 1.40 and 1.58; 1.27: .template-card
CDN_MIRROR_ENV = "H3KIT_BROWSER_CDN_MIRROR"
LOAD_TIMEOUT_S = 180
BLOCKED_GRACE_S = 45  # an unreachable script that something awaits: give up this long after it failed

# In-page probes: the graph read back through the frontend's own serialisation; dialogs and error toasts
# of either UI generation.
PAGE_HELPERS = r"""
window.app ??= window.comfyAPI.app.app;
window.__h3 = {
  graph() {
    const data = app.graph.serialize();
    return {
      nodes: data.nodes.length,
      links: data.links.length,
      broken: app.graph.nodes.filter(n => n.has_errors).map(n => n.type),
      types: data.nodes.map(n => n.type),
    };
  },
  dialogs() {
    return [...document.querySelectorAll('.p-dialog, [role=dialog]')]
      .filter(d => d.offsetParent !== null && !d.matches('[data-testid=h3kit-preflight-dialog]'))
      .map(d => d.innerText.trim());
  },
  errorToasts() {
    const old = [...document.querySelectorAll('.p-toast-message-error, .p-toast-message-warn')];
    const neu = [...document.querySelectorAll('li[data-testid=toast][data-state=open]')]
      .filter(t => ['error', 'warning'].includes(t.dataset.toastKind));
    return [...old, ...neu].map(t => t.innerText.trim());
  },
  closeAll() {
    document.querySelectorAll('.p-toast-close-button').forEach(b => b.click());
    app.extensionManager?.toast?.dismissAll?.();
    document.querySelectorAll('.p-dialog .p-dialog-close-button, .p-dialog [aria-label="Close"], '
      + '.p-dialog [aria-label="Close dialog"]').forEach(b => b.click());
    document.querySelector('.h3kit-preflight .h3kit-close')?.click();
  },
  drop(name, text) {
    const file = new File([text], name, {type: 'application/json'});
    const transfer = new DataTransfer();
    transfer.items.add(file);
    const target = app.canvasEl ?? document.querySelector('canvas');
    target.dispatchEvent(new DragEvent('drop', {dataTransfer: transfer, bubbles: true, cancelable: true}));
  },
};
true
"""


def find_chromium() -> str | None:
    explicit = os.environ.get("H3KIT_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=find_chromium(),
                                      args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])


def new_context(browser, viewport: dict | None = None):
    """A browser context that answers https requests from H3KIT_BROWSER_CDN_MIRROR where it has the file."""
    context = browser.new_context(viewport=viewport or {"width": 1600, "height": 1000})
    mirror = os.environ.get(CDN_MIRROR_ENV)
    if mirror:
        root = Path(mirror).resolve()
        context.route("https://**/*", lambda route: _answer_from_mirror(route, root))
    return context


def mirrored_file(url: str, root: Path) -> Path | None:
    """`root/<host>/<path>` for an https URL, or None when absent or outside `root` (a URL never leaves it)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    local = (root / parts.hostname / unquote(parts.path).lstrip("/")).resolve()
    return local if local.is_relative_to(root) and local.is_file() else None


def _answer_from_mirror(route, root: Path) -> None:
    local = mirrored_file(route.request.url, root)
    if local is None:
        route.continue_()  # as a user's browser would: the network answers, or the request fails
    else:
        route.fulfill(path=str(local))


class EditorBlocked(Exception):
    """The editor never finished loading because a script it waits for could not be fetched."""


class EditorBroken(EditorBlocked):
    """The editor loaded but threw while registering the node types the server serves (a host/frontend mismatch)."""


# served node types the frontend did not register, and served definitions whose python_module is not a string
UNREGISTERED = """async () => {
  const served = await (await fetch('/api/object_info')).json();
  const registered = LiteGraph.registered_node_types;
  return [Object.keys(served).filter(t => !(t in registered)),
          Object.keys(served).filter(t => typeof served[t].python_module !== 'string')];
}"""


# the error panel's groups (1.49 on), one per kind of problem; display-message is a group's caption, not a group
ERROR_GROUPS = "[data-testid^=error-group-]:not([data-testid=error-group-display-message])"
# what the dialogs of 1.27 and 1.40 say (English UI): node types vs model files the server lacks
DIALOG_KINDS = (
    ("missing-model", ("models were not found", "missing models")),
    ("missing-node", ("node types were not found", "some nodes are missing", "missing nodes")),
)


def dialog_kind(text: str) -> str:
    """The kind of problem a frontend dialog reports, from its text; "dialog" for any other dialog."""
    lowered = text.lower()
    return next((kind for kind, phrases in DIALOG_KINDS if any(p in lowered for p in phrases)), "dialog")


FILE_KINDS = ("missing-model", "missing-media")  # what a graph names that a server may not have: not a node
# how the lines of a missing-file report that name a file end: model weights, then an input folder's media
FILE_SUFFIXES = {".safetensors", ".sft", ".gguf", ".ckpt", ".pt", ".pth", ".bin",
                 ".png", ".jpg", ".jpeg", ".webp", ".wav", ".flac", ".mp3", ".mp4", ".webm"}


@dataclasses.dataclass
class AbsentFiles:
    """What a graph names that a server does not list, by kind (FILE_KINDS): the file names, and the names of
    the nodes that ask for them (title, type, display name)."""

    files: dict[str, set[str]] = dataclasses.field(default_factory=lambda: {k: set() for k in FILE_KINDS})
    nodes: dict[str, set[str]] = dataclasses.field(default_factory=lambda: {k: set() for k in FILE_KINDS})
    node_types: set[str] = dataclasses.field(default_factory=set)


def _node_names(node: dict, info: dict) -> set[str]:
    names = (node.get("_meta", {}).get("title"), node["class_type"], info.get("display_name"))
    return {name for name in names if isinstance(name, str) and name}  # 0.33.0 serves display_name null for some


def absent_files(graph: dict, server_info: dict) -> AbsentFiles:
    """Every literal combo value of a served node that the served options lack (a combo whose options are file
    names: the only kind a shipped graph names outside its options). Upload combos are media, others models."""
    absent = AbsentFiles()
    for node in graph.values():
        info = server_info.get(node["class_type"])
        if info is None:
            continue
        specs = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
        for key, value in node["inputs"].items():
            spec = specs.get(key)
            if not (isinstance(value, str) and spec and (isinstance(spec[0], list) or spec[0] == "COMBO")):
                continue
            if value in [o.get("key") if isinstance(o, dict) else o for o in combo_options(spec)]:
                continue
            opts = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
            kind = "missing-media" if any(opts.get(f"{m}_upload") for m in ("image", "audio", "video")) \
                else "missing-model"
            absent.files[kind].add(value)
            absent.nodes[kind] |= _node_names(node, info)
            absent.node_types.add(node["class_type"])
    return absent


def named_in_report(texts: list[str], graph: dict, server_info: dict) -> set[str]:
    """What a missing-file report names: its lines that are a file name (1.49 on list model files one a line) and
    the graph's nodes a line starts with ("<node title> - image": 1.49 lists media inputs by node)."""
    lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
    names = {line for line in lines if Path(line).suffix.lower() in FILE_SUFFIXES and " " not in line}
    for node in graph.values():
        for name in _node_names(node, server_info.get(node["class_type"], {})):
            if any(line == name or line.startswith(name + " - ") for line in lines):
                names.add(name)
    return names


def load_report_problems(report: dict[str, list[str]], graph: dict, server_info: dict) -> list[str]:
    """How a frontend's load report (`Editor.load_report`) differs from what the server lacks: node types it does
    not serve are reported as missing nodes (never an H3Kit node, never one it serves), files it does not list as
    missing models or media (a graph opened on a server without its weights is not missing a node), and nothing
    else is reported. [] when the report is right."""
    unknown = {node["class_type"] for node in graph.values()} - set(server_info)
    problems = [f"the frontend reported {kind}: {report[kind]}" for kind in report
                if kind not in ("missing-node", *FILE_KINDS)]
    nodes = "\n".join(report.get("missing-node", []))
    if nodes and not unknown:
        problems.append(f"a missing-nodes report although the server serves every node: {nodes[:800]}")
    problems += [f"the missing-nodes report does not name {t}" for t in sorted(unknown) if t not in nodes]
    problems += [f"H3Kit node reported missing: {w}" for w in nodes.replace(",", " ").split()
                 if w.startswith("H3Kit") and w not in unknown]
    absent = absent_files(graph, server_info)
    for kind in FILE_KINDS:
        named, expected = named_in_report(report.get(kind, []), graph, server_info), absent.files[kind] | absent.nodes[kind]
        if named - expected:
            problems.append(f"the {kind} report names what the server has: {sorted(named - expected)}")
        if report.get(kind) and not named:
            problems.append(f"a {kind} report that names no absent file or node: {report[kind]}")
    return problems


def parse_version(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in (text or "0").split(".")[:3] if p.isdigit())


class Editor:
    def __init__(self, page, url: str):
        self.page = page
        self.url = url
        self.requests: list[tuple[float, str, str]] = []  # (time, method, path) of every /api request
        page.on("request", self._record)
        self.page_errors: list[str] = []
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))
        self.failed_scripts: list[tuple[float, str, str]] = []  # (time, url, reason) of scripts from elsewhere
        page.on("requestfailed", self._record_failure)
        self.console_errors: list[str] = []
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))
        self.open()

    def _record_failure(self, request) -> None:
        if request.resource_type == "script" and not request.url.startswith(self.url):
            self.failed_scripts.append((time.monotonic(), request.url, request.failure or "failed"))

    def _record(self, request) -> None:
        path = request.url.removeprefix(self.url)
        if path.startswith("/api/") or path.startswith("/prompt"):
            self.requests.append((time.monotonic(), request.method, path.split("?")[0]))

    def open(self) -> None:
        self.page.goto(self.url)
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not self.page.evaluate(READY):
            if self.failed_scripts and time.monotonic() - self.failed_scripts[0][0] > BLOCKED_GRACE_S:
                raise EditorBlocked(self._blocked_reason())
            if time.monotonic() > deadline:
                version = self.page.evaluate("window.__COMFYUI_FRONTEND_VERSION__ ?? 'unknown'")
                raise AssertionError(f"frontend {version} at {self.url} did not finish loading within "
                                     f"{LOAD_TIMEOUT_S} s (app.graph never set); page errors: {self.page_errors[:3]}")
            self.page.wait_for_timeout(500)
        self.page.evaluate(PAGE_HELPERS)
        self.version = parse_version(self.page.evaluate("window.__COMFYUI_FRONTEND_VERSION__"))
        # a frontend may leave some types out by design (1.40 registers no Load3D/Preview3D/SaveGLB here and
        # works); broken is when registering the served definitions threw
        unregistered, no_module = self.page.evaluate(UNREGISTERED)  # also time for the console to report
        thrown = [e.splitlines()[0] for e in self.console_errors if "registerNodeDef" in e]
        if unregistered and thrown:
            raise EditorBroken(
                f"frontend {'.'.join(map(str, self.version))} at {self.url} threw while registering this server's "
                f"node definitions ({thrown[0]}); not registered: {', '.join(sorted(unregistered)[:8])}; served "
                f"definitions without a python_module string: {', '.join(no_module) or 'none'}. Graphs and templates "
                "do not load reliably in this editor (docs/failures.md, 'The graph editor')")
        self.page.keyboard.press("Escape")  # a first-run template dialog, if any

    def _blocked_reason(self) -> str:
        _, url, failure = self.failed_scripts[0]
        waiting = [name for name in self.page.evaluate("fetch('/api/extensions').then(r => r.json())")
                   if url in self.page.request.get(self.url + name).text()]
        version = self.page.evaluate("window.__COMFYUI_FRONTEND_VERSION__ ?? 'unknown'")
        return (f"frontend {version} at {self.url} never finished loading: the page could not fetch {url} ({failure}) "
                f"and the host's extension {', '.join(waiting) or '(none names it)'} waits for it; a browser without "
                f"access to {urlsplit(url).hostname} hangs the same way (docs/failures.md, 'The graph editor'). To test this host "
                f"offline, set {CDN_MIRROR_ENV} to a folder holding {urlsplit(url).hostname}{urlsplit(url).path}")

    @property
    def pack_section(self) -> str:
        """Where the template browser lists custom-node templates."""
        return "Extensions" if self.newer_ui else "Custom Nodes"

    @property
    def newer_ui(self) -> bool:
        """The reworked template browser (1.40 on)."""
        return self.version >= (1, 40)

    def js(self, expression: str, arg=None):
        return self.page.evaluate(expression, arg)

    def start_clean(self) -> None:
        self.js("__h3.closeAll(); app.graph.clear(); true")
        self.page.wait_for_function("__h3.dialogs().length === 0", timeout=10_000)

    def state(self) -> dict:
        return self.js("({graph: __h3.graph(), dialogs: __h3.dialogs(), toasts: __h3.errorToasts()})")

    def settle(self, expected_nodes: int | None, timeout_s: float = 30) -> dict:
        """The probe once the graph has `expected_nodes` nodes (or a dialog/toast appeared)."""
        deadline = time.monotonic() + timeout_s
        state = self.state()
        while time.monotonic() < deadline:
            if state["graph"]["nodes"] == expected_nodes or state["dialogs"] or state["toasts"]:
                self.page.wait_for_timeout(800)  # a report that follows the graph (missing nodes) renders
                return self.state()
            self.page.wait_for_timeout(250)
            state = self.state()
        return state

    def load_workflow(self, workflow: dict) -> None:
        """Load a UI-format workflow and wait until the frontend has finished loading it (its graph may be replaced
        until then)."""
        self.js("async wf => { await app.loadGraphData(wf); return true }", workflow)

    def drop(self, name: str, text: str) -> None:
        self.js("([name, text]) => __h3.drop(name, text)", [name, text])

    # ------------------------------------------------------------------ templates
    def _browse_pack_templates(self, module: str) -> None:
        """Templates -> the pack's entry (Custom Nodes / Extensions): its cards are shown."""
        self.js("() => { app.extensionManager.command.execute('Comfy.BrowseTemplates'); }")
        # the browser fills in once the host's template index is read: seconds on a loaded 2-core machine
        self.page.locator(f"{TEMPLATE_CARDS}, .template-card").first.wait_for(state="attached", timeout=60_000)
        entry = self.page.locator(".p-dialog li.p-listbox-option, [role=dialog] *, [data-reka-dialog-content] *") \
            .get_by_text(module, exact=True).first
        try:
            entry.wait_for(state="visible", timeout=20_000)
        except PlaywrightTimeout:  # the section that holds pack templates can open collapsed: expand it
            self.page.get_by_text(self.pack_section, exact=True).first.click(timeout=60_000)
        # 1.49 is busy for 10-15 s after the browser opens (it renders every template card) and a click waits
        # for the entry to be stable, which needs rendered frames: a short timeout fails on a visible entry
        entry.click(timeout=90_000)
        self._scroll_to_every_card()

    def _scroll_to_every_card(self) -> None:
        """Scroll the card list to its end until no more cards appear, as a user does: 1.27's list (a PrimeVue
        DataView) renders the first 12 cards and the rest only once it is scrolled (19 of the pack's templates)."""
        cards = self.page.locator(f"{TEMPLATE_CARDS}, .template-card")
        shown = -1
        for _ in range(20):
            cards.first.wait_for(state="attached", timeout=60_000)
            if cards.count() == shown:
                return
            shown = cards.count()
            cards.last.evaluate("""card => { let box = card.parentElement;
                while (box && !(box.scrollHeight > box.clientHeight && /(auto|scroll)/.test(getComputedStyle(box).overflowY)))
                    box = box.parentElement;
                if (box) box.scrollTop = box.scrollHeight; }""")
            self.page.wait_for_timeout(1000)

    def open_template(self, module: str, name: str) -> None:
        """The user's path: Templates -> the pack's entry (Custom Nodes / Extensions) -> the template's card."""
        self._browse_pack_templates(module)
        card = self.page.locator(f"[data-testid='template-workflow-{name}']")
        if not card.count():
            card = self.page.locator(".template-card").filter(
                has=self.page.locator("h3", has_text=name)).filter(has_not_text=f"{name}_").first
        card.scroll_into_view_if_needed(timeout=30_000)  # thumbnails load lazily, when the card is visible
        card.locator("img").first.wait_for(timeout=20_000)
        self.page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                                    arg=card.locator("img").first.element_handle(), timeout=20_000)
        card.click()

    def template_cards(self, module: str) -> list[dict]:
        """The template browser's cards for `module` as a user sees them: {title (the card's heading), cut (the heading
        is cut with an ellipsis: its text is wider than the card), image (the SHA-256 of the picture it shows)}."""
        self._browse_pack_templates(module)
        self.page.wait_for_timeout(3000)
        cards = self.page.locator(f"{TEMPLATE_CARDS}, .template-card")
        found = []
        for i in range(cards.count()):
            card = cards.nth(i)
            card.scroll_into_view_if_needed(timeout=30_000)  # thumbnails load lazily, when the card is visible
            image = card.locator("img").first
            image.wait_for(timeout=20_000)
            self.page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle(),
                                        timeout=20_000)
            found.append(card.evaluate("""async card => { const h = card.querySelector('h3, [class*=title]');
                const img = card.querySelector('img');
                const bytes = await (await fetch(img.currentSrc || img.src)).arrayBuffer();
                const digest = [...new Uint8Array(await crypto.subtle.digest('SHA-256', bytes))]
                    .map(b => b.toString(16).padStart(2, '0')).join('');
                return {title: h?.textContent.trim(), cut: !!h && h.scrollWidth > h.clientWidth + 1, image: digest}; }"""))
        self.page.keyboard.press("Escape")
        # 1.40's template browser keeps its dialog when the focus has left it (each card's picture was fetched):
        # its "Close dialog" button closes it, as a user would
        self.js("__h3.closeAll(); true")
        self.page.wait_for_function("__h3.dialogs().length === 0", timeout=10_000)
        return found

    def view(self) -> dict:
        """The canvas as the user sees it: zoom, whether nodes are drawn without text (level of detail), and the nodes
        not wholly inside the visible area."""
        return self.js("""() => { const c = app.canvas, r = c.canvas.getBoundingClientRect(), th = LiteGraph.NODE_TITLE_HEIGHT;
            const [vx, vy, vw, vh] = [-c.ds.offset[0], -c.ds.offset[1], r.width / c.ds.scale, r.height / c.ds.scale];
            const outside = app.graph.nodes.filter(n => n.pos[0] < vx || n.pos[1] - th < vy
                || n.pos[0] + n.size[0] > vx + vw || n.pos[1] + n.size[1] > vy + vh).map(n => n.title);
            return {scale: c.ds.scale, low_quality: !!(c.low_quality ?? c._isLowQuality), outside}; }""")

    # ------------------------------------------------------------------ what the frontend reports
    def load_report(self, expected: bool) -> dict[str, list[str]]:
        """What the frontend reported about the graph it just loaded, by kind, read from the page's own content:
        {"missing-node": [...], "missing-model": [...], "missing-media": [...], ...}, each a list of texts.

        Newer frontends (1.49, 1.58) show one "N errors found" overlay for every kind of problem; its "View
        details" opens a panel with one group per kind (`data-testid=error-group-<kind>`: a graph whose model
        files this server lacks gets `missing-model`, not `missing-node`). 1.27 and 1.40 open a dialog per kind,
        told apart by what it says (`dialog_kind`). `expected`: wait for a report first (1.40 opens its dialog
        seconds after a large graph is on the canvas)."""
        if expected:
            try:
                self.page.wait_for_function(
                    "__h3.dialogs().length > 0 || document.body.innerText.includes('View details')", timeout=15_000)
            except PlaywrightTimeout:
                pass  # no report at all: the caller's assertion names what it lacks
        report: dict[str, list[str]] = {}
        for text in self.js("__h3.dialogs()"):
            report.setdefault(dialog_kind(text), []).append(text)
        details = self.page.get_by_text("View details")
        if details.count():
            details.first.click()
            self.page.locator(ERROR_GROUPS).first.wait_for(timeout=10_000)
            for kind, text in self.js(f"""[...document.querySelectorAll("{ERROR_GROUPS}")]
                    .map(g => [g.dataset.testid.slice('error-group-'.length), g.innerText.trim()])"""):
                report.setdefault(kind, []).append(text)
        return report

    # ------------------------------------------------------------------ queueing and the preflight
    def queue(self) -> float:
        """Press Run (the QueuePrompt command) without waiting for it; the time it was pressed."""
        pressed = time.monotonic()
        self.js("() => { app.extensionManager.command.execute('Comfy.QueuePrompt'); }")
        return pressed

    def set_setting(self, setting_id: str, value) -> None:
        self.js("([id, value]) => app.extensionManager.setting.set(id, value)", [setting_id, value])

    def widgets(self, node_type: str, **values) -> None:
        self.js("""([type, values]) => { const node = app.graph.nodes.find(n => n.type === type);
            for (const [name, value] of Object.entries(values)) node.widgets.find(w => w.name === name).value = value;
            return true }""", [node_type, values])

    def posts(self, path: str, since: float = 0.0) -> list[float]:
        return [t for t, method, p in self.requests if method == "POST" and p == path and t >= since]

    def preflight_dialog(self):
        return self.page.locator(PREFLIGHT_DIALOG)

    def selected_node_ids(self) -> list[str]:
        return self.js("Object.keys(app.canvas.selected_nodes ?? {})")

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path


def dumps(value) -> str:
    return json.dumps(value, indent=1)[:3000]
