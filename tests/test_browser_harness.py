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


# --- reading a frontend's load report (issue 23: a missing-model panel is not a missing node) ----------------

SERVER_INFO = {  # the parts of a served /object_info these checks read: a V1 file combo, a V3 one, an upload combo
    "UNETLoader": {"input": {"required": {"unet_name": [["tiny_h3.safetensors"], {}]}}, "display_name": "Load Diffusion Model"},
    "VAELoader": {"input": {"required": {"vae_name": ["COMBO", {"options": ["tiny_vae.safetensors"]}]}},
                  "display_name": None},  # served as null by some 0.33.0 nodes
    "LoadImage": {"input": {"required": {"image": [["a.png"], {"image_upload": True}]}}, "display_name": "Load Image"},
}
GRAPH = {
    "1": {"class_type": "UNETLoader", "inputs": {"unet_name": "minimax_h3_fl2va_pruned_nvfp4.safetensors"}},
    "2": {"class_type": "VAELoader", "inputs": {"vae_name": "tiny_vae.safetensors"}},
    "3": {"class_type": "LoadImage", "inputs": {"image": "ref2va_subject_1.png"},
          "_meta": {"title": "Reference 1 = <Picture 1> (upload first)"}},
}
# the 1.49.6 panel's groups for that graph on a server without the weights (text as the page renders it)
MODEL_GROUP = ("1\nMissing Models\n\nDownload a model, or open the node to replace it.\n\n"
               "minimax_h3_fl2va_pruned_nvfp4.safetensors\ndiffusion_models")
MEDIA_GROUP = ("1\nMissing Inputs\n\nA required media input has no file selected.\n\n"
               "Reference 1 = <Picture 1> (upload first) - image")


@pytest.mark.parametrize(("text", "kind"), [
    ("Some Nodes Are Missing\nWhen loading the graph, the following node types were not found.\nMiniMaxH3SigmaShift",
     "missing-node"),  # 1.27
    ("This workflow has missing nodes\nThis workflow uses custom nodes you haven't installed yet.", "missing-node"),  # 1.40
    ("When loading the graph, the following models were not found\nx.safetensors", "missing-model"),  # 1.27
    ("Missing Models\nx.safetensors", "missing-model"),
    ("Settings\nAppearance", "dialog"),
])
def test_dialogs_are_told_apart_by_what_they_say(text, kind):
    assert browser_ui.dialog_kind(text) == kind


def test_absent_files_are_the_literal_combo_values_the_server_does_not_list():
    absent = browser_ui.absent_files(GRAPH, SERVER_INFO)
    assert absent.files == {"missing-model": {"minimax_h3_fl2va_pruned_nvfp4.safetensors"},
                            "missing-media": {"ref2va_subject_1.png"}}
    assert absent.node_types == {"UNETLoader", "LoadImage"}  # the VAE file is served (a V3 combo)


def test_missing_model_and_media_groups_are_not_missing_nodes():
    report = {"missing-model": [MODEL_GROUP], "missing-media": [MEDIA_GROUP]}
    assert browser_ui.load_report_problems(report, GRAPH, SERVER_INFO) == []
    assert browser_ui.load_report_problems({}, GRAPH, SERVER_INFO) == []  # a frontend that reports no files


def test_a_missing_node_report_for_a_served_graph_is_a_problem():
    problems = browser_ui.load_report_problems({"missing-node": [MODEL_GROUP]}, GRAPH, SERVER_INFO)
    assert problems and "serves every node" in problems[0]


def test_missing_nodes_must_each_be_named_and_never_h3kit():
    graph = {**GRAPH, "4": {"class_type": "MiniMaxH3SigmaShift", "inputs": {}}}
    assert browser_ui.load_report_problems({"missing-node": ["MiniMaxH3SigmaShift"]}, graph, SERVER_INFO) == []
    assert browser_ui.load_report_problems({}, graph, SERVER_INFO) == ["the missing-nodes report does not name "
                                                                      "MiniMaxH3SigmaShift"]
    problems = browser_ui.load_report_problems({"missing-node": ["MiniMaxH3SigmaShift H3KitDraftToLTX"]}, graph,
                                               SERVER_INFO)
    assert problems == ["H3Kit node reported missing: H3KitDraftToLTX"]


@pytest.mark.parametrize("group", [
    MODEL_GROUP.replace("minimax_h3_fl2va_pruned_nvfp4", "tiny_vae"),  # a file the server lists
    "1\nMissing Models\n\nDownload a model, or open the node to replace it.",  # names nothing
    MEDIA_GROUP.replace("Reference 1 = <Picture 1> (upload first)", "Load Diffusion Model"),  # a node with its file
])
def test_a_file_report_must_name_only_what_is_absent(group):
    kind = "missing-media" if "Inputs" in group else "missing-model"
    assert browser_ui.load_report_problems({kind: [group]}, GRAPH, SERVER_INFO) != []


def test_any_other_kind_of_report_is_a_problem():
    assert browser_ui.load_report_problems({"execution": ["1\nError"]}, GRAPH, SERVER_INFO) != []
