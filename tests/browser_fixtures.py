"""Fixtures of the tier-(d) tests (registered in tests/conftest.py): each configured host x frontend (its own and
each folder of H3KIT_FRONTEND_ROOTS, served with --front-end-root), the system Chromium, and an editor page."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from browser_ui import Editor, EditorBlocked, find_chromium, launch_chromium, new_context
from comfyui_host import ComfyUIServer, FrontendHost, configured_hosts


def _combinations() -> list[FrontendHost]:
    hosts, _ = configured_hosts()
    roots = [r for r in os.environ.get("H3KIT_FRONTEND_ROOTS", "").split(os.pathsep) if r.strip()]
    fields = lambda h: {f.name: getattr(h, f.name) for f in dataclasses.fields(h)}  # noqa: E731
    return [FrontendHost(**fields(h), front_end_root=root) for h in hosts for root in (None, *roots)]


COMBINATIONS = _combinations()


@pytest.fixture(scope="module", params=COMBINATIONS or [None], ids=[c.label for c in COMBINATIONS] or ["no-host"])
def server(request):
    if request.param is None:
        pytest.skip(configured_hosts()[1])
    if request.param.front_end_root and not (Path(request.param.front_end_root) / "index.html").is_file():
        pytest.fail(f"H3KIT_FRONTEND_ROOTS names {request.param.front_end_root}, which has no index.html: point it "
                    "at the static/ folder of an unpacked comfyui-frontend-package wheel")
    started = ComfyUIServer(request.param)
    started.start()
    try:
        status, _ = started.post("/api/settings/Comfy.TutorialCompleted", True)  # no first-run template dialog
        assert status == 200
        yield started
    finally:
        started.stop()
        started.cleanup()


@pytest.fixture(scope="module")
def chromium():
    if find_chromium() is None:
        pytest.skip("no Chromium found: apt-get install -y chromium (or set H3KIT_CHROMIUM=/path/to/chrome)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install -e .[test]")
    with sync_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()


_BLOCKED_EDITORS: dict[str, str] = {}  # server url -> why its editor never loads (found once per server)


def open_editor(chromium, server, blocked: str | None = None) -> tuple[Editor, object]:
    if server.url in _BLOCKED_EDITORS:
        pytest.skip(_BLOCKED_EDITORS[server.url])
    context = new_context(chromium)
    if blocked:
        context.route(blocked, lambda route: route.abort())
    try:
        return Editor(context.new_page(), server.url), context
    except EditorBlocked as exc:
        context.close()
        _BLOCKED_EDITORS[server.url] = str(exc)
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def editor(chromium, server):
    page_editor, context = open_editor(chromium, server)
    try:
        yield page_editor
    finally:
        context.close()


@pytest.fixture(scope="module")
def server_info(server) -> dict:
    return server.object_info()


@pytest.fixture(scope="module")
def server_nodes(server_info) -> set[str]:
    return set(server_info)
