"""The tier-(d) harness's offline CDN mirror (tests/browser_ui.py): which file answers which URL, and that a page
script waiting for a CDN file gets it from the mirror. The first tests need no browser; the last one a Chromium."""

from __future__ import annotations

import pytest

browser_ui = pytest.importorskip("browser_ui", reason="playwright is not installed: pip install -e .[test]")

ACE_URL = "https://cdn.jsdelivr.net/npm/ace-builds@1.43.4/src-noconflict/ace.js"


@pytest.fixture
def mirror(tmp_path):
    root = tmp_path / "mirror"
    script = root / "cdn.jsdelivr.net" / "npm" / "ace-builds@1.43.4" / "src-noconflict" / "ace.js"
    script.parent.mkdir(parents=True)
    script.write_text("window.ace = {mirrored: true};")
    (tmp_path / "secret.js").write_text("window.secret = true;")
    return root.resolve()


def test_mirror_answers_host_and_path(mirror):
    assert browser_ui.mirrored_file(ACE_URL, mirror) == mirror / "cdn.jsdelivr.net/npm/ace-builds@1.43.4/src-noconflict/ace.js"
    assert browser_ui.mirrored_file(ACE_URL + "?v=1#x", mirror) is not None  # query and fragment name no file


@pytest.mark.parametrize("url", [
    "https://cdn.jsdelivr.net/npm/ace-builds@1.43.4/src-noconflict/mode-python.js",  # not in the mirror
    "https://other.example/npm/ace-builds@1.43.4/src-noconflict/ace.js",  # another host
    "https://cdn.jsdelivr.net/npm/ace-builds@1.43.4",  # a folder, not a file
    "https://cdn.jsdelivr.net/../secret.js",
    "https://cdn.jsdelivr.net/%2e%2e/secret.js",
    "https://cdn.jsdelivr.net/npm/%2e%2e%2f%2e%2e%2f..%2fsecret.js",
    "https:///secret.js",
])
def test_mirror_never_answers_outside_its_files(mirror, url):
    assert browser_ui.mirrored_file(url, mirror) is None


@pytest.mark.browser
def test_page_gets_the_mirrored_script_and_other_https_requests_go_to_the_network(mirror, monkeypatch):
    if browser_ui.find_chromium() is None:
        pytest.skip("no Chromium found: apt-get install -y chromium (or set H3KIT_CHROMIUM=/path/to/chrome)")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv(browser_ui.CDN_MIRROR_ENV, str(mirror))
    load = """url => new Promise(done => { const s = document.createElement('script'); s.src = url;
                s.onload = () => done(window.ace?.mirrored ? 'mirrored' : 'loaded'); s.onerror = () => done('error');
                document.head.appendChild(s); })"""
    with sync_playwright() as playwright:
        browser = browser_ui.launch_chromium(playwright)
        try:
            context = browser_ui.new_context(browser)
            page = context.new_page()
            page.set_content("<html><body></body></html>")
            assert page.evaluate(load, ACE_URL) == "mirrored"
            # not mirrored: passed on unchanged (here: no such host, so the browser reports an error)
            assert page.evaluate(load, "https://h3kit-no-such-host.invalid/x.js") == "error"
        finally:
            browser.close()
