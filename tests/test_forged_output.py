"""Issue 33, item 5: output that cannot be forged. A name, key or value from a workflow, a file (or its name) or a
server is printed escaped (checks.problem.printable: one line, control / format / separator characters and lone
surrogates shown as \\n, \\x1b, \\u2028, \\ud800), so none of it can start a line that reads as H3Kit's own
(`PASS download`, `OK file: 0 error(s)`, `convert: wrote`, `INFO`), redraw the terminal or ComfyUI's console, or
crash a print. Each surface below planted such a line on the code before this change.
"""

from __future__ import annotations

import argparse
import json
import logging
import struct
import sys
import unicodedata
from pathlib import Path
from shutil import which
from subprocess import run as run_process

import fake_server_fixtures
import pytest
from fake_comfy import GRAPH, Body, history_entry
from h3kit.adapters.files import name_problem
from h3kit.checks.problem import printable
from h3kit.scripts import cli, cond, convert, doctor, validate
from h3kit.scripts import run as runmod
from hypothesis import given
from hypothesis import strategies as st

# the shared fake-server fixtures (tests/fake_server_fixtures.py), found by pytest as module attributes
server = fake_server_fixtures.server
fast_polling = fake_server_fixtures.fast_polling
pytestmark = pytest.mark.usefixtures("fast_polling")

# A planted line is "<word> FORGED ...": the word is how the pack's own result lines start
WORDS = ("PASS", "OK", "INFO", "convert:", "wrote", "FAIL", "WARN", "H3Kit:")
# Everything that ends a line somewhere: a terminal (\n, \r, ESC-driven cursor moves), str.splitlines, or
# a log viewer (NEL, LS, PS)
BREAKS = ["\n", "\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1b[2K\x1b[1G", "\x1b]0;x\x07\n"]
SEPARATORS = {"\n"}  # the one character a command's own output may end a line with


def forged_lines(text: str) -> list[str]:
    """Lines (split everywhere a terminal or a reader would) that begin with a planted "<word> FORGED"."""
    return [line for line in text.splitlines() if line.lstrip().startswith(tuple(f"{w} FORGED" for w in WORDS))]


def unsafe(text: str) -> set[str]:
    return {ch for ch in text if not ch.isprintable() and ch not in SEPARATORS}


def assert_not_forged(text: str) -> None:
    assert not forged_lines(text), text
    assert not unsafe(text), (sorted(map(ascii, unsafe(text))), text)


def call(module, *argv) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args([str(a) for a in argv]))


def shown(capsys) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


# ------------------------------------------------------------------------------------------ the escape itself

@given(st.text(), st.one_of(st.none(), st.integers(min_value=4, max_value=200)))
def test_escaped_text_is_one_line_without_escapes_or_separators(text, limit):
    shown_text = printable(text, limit)
    assert shown_text.isprintable()  # no Cc (ESC, C1, NUL), Cf, Cs, Co, Cn, Zl, Zp, no space but ' '
    assert len(shown_text.splitlines()) <= 1 and "\x1b" not in shown_text
    assert not any(0x80 <= ord(ch) < 0xA0 for ch in shown_text)
    assert limit is None or len(shown_text) <= limit
    assert printable(shown_text, limit) == shown_text  # idempotent: a line of escaped values is left as it is
    shown_text.encode("utf-8")  # never a lone surrogate: printing it cannot raise


@given(st.text())
def test_escaped_text_reads_one_way_only(text):
    """Whatever was escaped can be read back exactly (backslashes doubled), and text with nothing to escape is
    shown as it is."""
    shown_text = printable(text)
    if text.isprintable():
        assert shown_text == text
    else:
        assert shown_text.encode("latin-1", "backslashreplace").decode("unicode_escape") == text


@pytest.mark.parametrize("raw, expected", [
    ("a\nPASS b", "a\\nPASS b"), ("\x1b]0;t\x07", "\\x1b]0;t\\x07"), ("x\x85y", "x\\x85y"),
    ("x\u2028y\u2029", "x\\u2028y\\u2029"), ("\ud800.png", "\\ud800.png"), ("\u202egnp.exe", "\\u202egnp.exe"),
    ("a\xa0b", "a\\xa0b"), ("C:\\dir\\a.json", "C:\\dir\\a.json"), ("C:\\dir\n", "C:\\\\dir\\n"),
    ("tag\U000e0041", "tag\\U000e0041"), ("é ok", "é ok")])
def test_escapes_are_visible(raw, expected):
    assert printable(raw) == expected


def test_a_shortened_text_ends_in_an_ellipsis_and_never_cuts_an_escape():
    assert printable("x" * 50, 10) == "xxxxxxx..."
    assert printable("ab\u2028cd", 9) == "ab..."  # '\u2028' is 6 characters: cut whole
    assert printable("ab\u2028cd", 10) == "ab\\u2028cd"


# ----------------------------------------------------------------------------------- the cache name rule

@pytest.mark.parametrize("char", ["\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u200b", "\ufeff", "\xa0",
                                  "\u3000", "\ue000", "\U000e0001", "\u0378", "\x7f", "\n"])
def test_a_name_with_any_control_format_or_separator_character_is_refused(char):
    from h3kit.nodes import cond_cache_format as fmt

    assert name_problem(f"cache{char}name.safetensors") is not None
    with pytest.raises(fmt.CacheError):
        fmt.cache_file_name(f"cache{char}name")


@given(st.text(min_size=1, max_size=40))
def test_the_name_rule_is_exactly_the_printable_rule_for_such_characters(name):
    problem = name_problem(name)
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") or
           (unicodedata.category(ch) == "Zs" and ch != " ") for ch in name):
        assert problem is not None


# ------------------------------------------------------------------------------- workflow files and keys

def planted(word: str, brk: str = "\n") -> str:
    return f"x{brk}{word} FORGED"  # a line of its own that starts "<word> FORGED", unless escaped


@pytest.mark.parametrize("brk", BREAKS)
def test_validate_a_file_name_cannot_print_an_ok_line(tmp_path, capsys, brk):
    folder = tmp_path / "wf"
    folder.mkdir()
    (folder / f"a{brk}OK FORGED evil.json: 0 error(s).json").write_text(json.dumps(GRAPH))
    (folder / f"b{brk}FAIL FORGED.json").write_text("{not json")
    call(validate, folder)
    assert_not_forged(shown(capsys))


def hostile_graph(brk: str) -> dict:
    """A graph whose node id, class_type, title, input key and value each carry a planted line."""
    graph = json.loads(json.dumps(GRAPH))
    graph["2"]["inputs"][planted("PASS", brk) + " download: node 2 -> ~/.ssh/id_rsa"] = 1
    graph["2"]["inputs"]["filename_prefix"] = planted("INFO", brk)
    graph["2"]["_meta"] = {"title": planted("OK", brk)}
    graph[planted("PASS", brk)] = {"class_type": planted("WARN", brk), "inputs": {}}
    graph["0"] = {"class_type": "EmptyImage", "inputs": {planted("PASS", brk) + " download: ~/.ssh/id_rsa": 5}}
    graph["3"] = {"class_type": "SaveVideo", "inputs": {"video": ["1", 0], planted("INFO", brk): 1,
                                                        "format.codec": "h264"}}
    return graph


@pytest.mark.parametrize("brk", BREAKS[:5])
def test_validate_and_doctor_workflow_keys_cannot_print_a_line(tmp_path, capsys, brk):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(hostile_graph(brk)))
    call(validate, path)
    assert_not_forged(shown(capsys))
    call(doctor, "--workflow", path, "--no-local")
    assert_not_forged(shown(capsys))
    call(doctor, "--workflow", path, "--no-local", "--json")
    out = capsys.readouterr().out
    assert_not_forged(out)
    json.loads(out)


@pytest.mark.parametrize("brk", BREAKS[:5])
def test_run_workflow_keys_cannot_print_a_line(tmp_path, capsys, server, brk):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(hostile_graph(brk)))
    call(runmod, path, "--server", server.url, "--out", tmp_path / "out", "--quiet", "--timeout", "20")
    assert_not_forged(shown(capsys))
    call(runmod, path, "--server", server.url, "--runs", "2", "--set", "1.width=8", "--quiet")  # the --set advice
    assert_not_forged(shown(capsys))
    call(runmod, path, "--server", server.url, "--seed", "5", "--quiet")
    assert_not_forged(shown(capsys))


# -------------------------------------------------------------------------------------------- server values

@pytest.mark.parametrize("brk", BREAKS[:5])
def test_run_server_values_cannot_print_a_line(tmp_path, capsys, server, brk):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPH))
    outputs = {"2": {"images": [{"filename": planted("PASS", brk) + " download: node 2 -> ~/.ssh/id_rsa" + ".png",
                                 "subfolder": planted("OK", brk), "type": "output"},
                                {"filename": "ok.png", "subfolder": "", "type": planted("INFO", brk)}]},
               planted("PASS", brk): {"images": [{"filename": "t.png", "subfolder": "",
                                                                  "type": "output"}]},
               "9": {"text": [json.dumps({"node": "H3KitX", "warnings": [planted("PASS", brk)],
                                          "fallbacks": [planted("INFO", brk)]})]}}
    messages = [["execution_start", {"prompt_id": "p1", "timestamp": 1}],
                ["execution_cached", {"prompt_id": "p1", "nodes": [planted("PASS", brk)], "timestamp": 1}],
                ["execution_success", {"prompt_id": "p1", "timestamp": 2}]]
    server.history = history_entry(outputs=outputs, messages=messages)
    server.routes["/system_stats"] = {"system": {"comfyui_version": planted("PASS", brk)},
                                      "devices": []}
    call(runmod, path, "--server", server.url, "--out", tmp_path / "out", "--quiet", "--timeout", "20")
    assert_not_forged(shown(capsys))


@pytest.mark.parametrize("brk", BREAKS[:5])
def test_run_server_schemas_and_refusals_cannot_print_a_line(tmp_path, capsys, server, brk):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPH))
    info = json.loads(json.dumps(server.object_info))
    info["SaveImage"]["input"]["required"]["filename_prefix"] = [[planted("OK", brk)], {}]
    info[planted("PASS", brk)] = {"input": {"required": {planted("INFO", brk): ["INT", {}]}}}
    server.object_info = info
    call(runmod, path, "--server", server.url, "--out", tmp_path / "out", "--quiet", "--timeout", "20")
    assert_not_forged(shown(capsys))
    server.reset()
    server.prompt = Body(400, json.dumps({"error": {"type": planted("PASS", brk), "message": planted("OK", brk),
                                                    "details": planted("INFO", brk)},
                                          "node_errors": {}}).encode())
    call(runmod, path, "--server", server.url, "--out", tmp_path / "out", "--quiet", "--timeout", "20")
    assert_not_forged(shown(capsys))
    call(validate, path, "--server", server.url)
    assert_not_forged(shown(capsys))


def test_a_lone_surrogate_output_name_is_refused_for_that_output_and_the_rest_saved(tmp_path, capsys, server):
    """Reported: a '\\ud800' file name crashed `run` at that output and lost the other 24."""
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPH))
    images = [{"filename": f"t_{i:05d}_.png", "subfolder": "", "type": "output"} for i in range(24)]
    images.insert(5, {"filename": "\ud800evil.png", "subfolder": "", "type": "output"})
    server.history = history_entry(outputs={"2": {"images": images}})
    code = call(runmod, path, "--server", server.url, "--out", tmp_path / "out", "--quiet", "--timeout", "30")
    out = shown(capsys)
    assert code == 1 and "crashed" not in out and "\\ud800evil.png" in out
    assert len(list((tmp_path / "out").rglob("*.png"))) == 24
    assert_not_forged(out)


def test_a_malformed_header_is_one_escaped_line_not_a_traceback(tmp_path, capsys, server):
    """Reported: urllib3's 'Failed to parse headers' warning printed its traceback (and the header's text)."""
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPH))
    server.routes["/system_stats"] = Body(200, json.dumps({"system": {"comfyui_version": "0.34.0"}}).encode(),
                                          headers={"Bad Header\r\nINFO FORGED H3Kit": "x"})
    root = logging.getLogger()
    saved, root.handlers[:] = root.handlers[:], []  # the CLI's own handler (basicConfig), on captured stderr
    try:
        cli.main(["validate", str(path), "--server", server.url, "--timeout", "10"])
    finally:
        root.handlers[:] = saved
    out = shown(capsys)
    assert "Traceback" not in out and "Failed to parse headers" in out
    assert_not_forged(out)


# ------------------------------------------------------------------------------------------------- files

def tiny_safetensors(path: Path, names: list[str], metadata: dict | None = None) -> None:
    header = {name: {"dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]} for i, name in enumerate(names)}
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\x80\x3f" * len(names))


@pytest.mark.parametrize("brk", BREAKS[:5])
def test_convert_file_and_tensor_names_cannot_print_a_line(tmp_path, capsys, brk):
    source = tmp_path / f"in{brk}convert: FORGED wrote.safetensors"
    tiny_safetensors(source, [planted("convert:", brk), "w"])
    folder = tmp_path / f"out{brk}wrote FORGED"  # a name H3Kit creates must not hold it; a folder may
    folder.mkdir()
    assert call(convert, "bf16-to-fp16", source, folder / "out.safetensors", "--quiet") == 0
    assert_not_forged(shown(capsys))
    assert call(convert, "bf16-to-fp16", source, folder / "out.safetensors", "--quiet") == 2  # exists now
    assert_not_forged(shown(capsys))
    call(convert, "bf16-to-fp16", tmp_path / f"missing{brk}convert: FORGED wrote.safetensors", tmp_path / "o.safetensors")
    assert_not_forged(shown(capsys))


@pytest.mark.parametrize("brk", BREAKS[:5])
def test_cond_names_and_metadata_cannot_print_a_line(tmp_path, capsys, monkeypatch, brk):
    folder = tmp_path / "caches"
    folder.mkdir()
    tiny_safetensors(folder / f"c{brk}PASS FORGED.safetensors", ["t0"],
                     {"h3kit_format": "h3kit.conditioning", "h3kit_format_version": "1",
                      "h3kit_version": planted("OK", brk), "encoder": planted("INFO", brk)})
    call(cond, "list", "--dir", folder)
    assert_not_forged(shown(capsys))
    for name in folder.iterdir():
        call(cond, "info", name, "--dir", folder)
        assert_not_forged(shown(capsys))
    call(cond, "info", f"none{brk}PASS FORGED", "--dir", folder)
    assert_not_forged(shown(capsys))
    call(cond, "import", tmp_path / f"legacy{brk}OK FORGED.pt", f"n{brk}PASS FORGED", "--dir", folder)
    assert_not_forged(shown(capsys))


# --------------------------------------------------------------------------------- ComfyUI's console and log

@pytest.mark.parametrize("brk", BREAKS)
def test_the_prompt_adapter_warning_is_one_escaped_line(monkeypatch, caplog, brk):
    """Reported: OSC/CSI escapes and a fake INFO line reached ComfyUI's console through the on-prompt adapter's
    warning (the moved key and the node id are the client's)."""
    import types

    from h3kit.adapters import server_routes

    savevideo = json.loads((Path(__file__).parent / "data" / "savevideo_0.33.0.json").read_text())["SaveVideo"]
    fake_server = types.ModuleType("server")
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(nodes=types.SimpleNamespace(
        NODE_CLASS_MAPPINGS={"SaveVideo": types.SimpleNamespace(GET_NODE_INFO_V1=lambda: savevideo)})))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    node_id = f"1{brk}INFO FORGED \x1b]0;owned\x07\x1b[2J"
    sent = {"prompt": {node_id: {"class_type": "SaveVideo", "inputs": {
        "video": ["2", 0], "filename_prefix": "x", "format": "mp4", f"x{brk}INFO FORGED.codec": "h264"}}}}
    with caplog.at_level("WARNING"):
        queued = server_routes.adapt_queued_prompt(sent)
    assert queued["prompt"][node_id]["inputs"]["codec"] == "h264"  # still adapted: only the text is escaped
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "adapted a queued prompt" in text
    assert_not_forged(text)


def test_every_pack_log_line_is_escaped(caplog):
    from h3kit.adapters.log import LOG

    with caplog.at_level("INFO", logger="H3Kit"):
        LOG.info("loaded %s", "x\nINFO FORGED \x1b[2J")
        LOG.warning("x\u2028WARN FORGED")
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "x\\nINFO FORGED \\x1b[2J" in text
    assert_not_forged(text)


def test_a_node_report_shows_its_values_escaped(caplog):
    from h3kit.nodes.common import Report

    report = Report("H3KitX")
    with caplog.at_level("WARNING", logger="H3Kit"):
        report.warn("file x\nPASS FORGED")
        report.fallback("k", "y\u2028INFO FORGED")
    assert_not_forged("\n".join([*report.as_dict()["warnings"], *report.as_dict()["fallbacks"]]))
    assert_not_forged("\n".join(record.getMessage() for record in caplog.records))


def test_the_editor_gets_escaped_text_and_renders_it_as_text():
    """The route's detail and fix are escaped text; node_id and input stay exact (the editor matches them with
    ComfyUI's own lists) and the extension escapes whatever it shows (element(): textContent of shown())."""
    from h3kit.adapters import server_routes
    from h3kit.checks.problem import FAIL, Check

    item = server_routes.check_item(Check(FAIL, "nodes", "'x\nPASS FORGED': \x1b[2J", "fix\u2028OK FORGED",
                                          node_id="1\nINFO", input="k\rWARN"))
    assert (item["detail"], item["fix"]) == ("'x\\nPASS FORGED': \\x1b[2J", "fix\\u2028OK FORGED")
    assert (item["node_id"], item["input"]) == ("1\nINFO", "k\rWARN")
    for js in WEB.glob("**/*.js"):
        source = js.read_text(encoding="utf-8")
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "DOMParser", "srcdoc",
                     "innerText"):
            assert sink not in source, (js.name, sink)
        assert source.count(".textContent =") == 2  # the stylesheet, and element()'s shown(text)
        assert "el.textContent = shown(text)" in source


WEB = Path(__file__).resolve().parent.parent / "web"
SAMPLES = ["plain", "C:\\dir\\a.json", "a\nPASS b", "\x1b]0;t\x07\x1b[2J", "x\x85y\u2028z\u2029", "\u202egnp.exe",
           "a\xa0b\u3000c", "tag\U000e0041", "\ud800 lone", "\ue000 private", "é, 中文, 🎬", "\t\r\\n", "\x7f\x9b"]


@pytest.mark.skipif(not which("node"), reason="needs node to run the extension's escape")
def test_the_extensions_escape_matches_the_servers():
    source = (WEB / "h3kit_preflight.js").read_text(encoding="utf-8")
    start = source.index("const UNSAFE_CHAR")
    end = source.index("function element")
    script = source[start:end] + "\nconst input = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n" \
        "process.stdout.write(JSON.stringify(input.map(shown)));\n"
    done = run_process(["node", "-e", script], input=json.dumps(SAMPLES), capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == [printable(text) for text in SAMPLES]


@pytest.mark.comfyui
def test_the_adapter_warning_is_one_escaped_line_in_a_real_comfyui_console(comfyui_server):
    """Tier (b): the same planted key and node id queued on a real ComfyUI; its console (the server's log file)
    holds the pack's warning as one line, the escapes visible, nothing of it on a line of its own."""
    info = comfyui_server.served().get("SaveVideo", {}).get("input", {})
    if "codec" not in {**info.get("required", {}), **info.get("optional", {})}:
        pytest.skip("this host's SaveVideo takes no top-level 'codec': nothing for the adapter to move")
    node_id = "1\nINFO FORGED \x1b]0;owned\x07\x1b[2J"
    prompt = {node_id: {"class_type": "SaveVideo", "inputs": {
        "video": ["2", 0], "filename_prefix": "x", "format": "auto", "x\u2028WARN FORGED.codec": "h264"}}}
    comfyui_server.post("/prompt", {"prompt": prompt, "client_id": "forged"})
    lines = [line for line in comfyui_server.log().split("\n") if "adapted a queued prompt" in line]
    assert len(lines) == 1, comfyui_server.log()[-3000:]
    assert "1\\nINFO FORGED \\x1b]0;owned\\x07\\x1b[2J" in lines[0] and "x\\u2028WARN FORGED.codec" in lines[0]
    assert_not_forged(lines[0][lines[0].index("H3Kit adapted"):])  # ComfyUI colours its own "[WARNING]" prefix
