"""The exit codes of every command that talks to a server, as the README's literal numbers:
0 ok, 1 execution/verification failure, 2 validation, 3 timeout, 4 unreachable (one meaning everywhere)."""

from __future__ import annotations

import argparse
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from h3kit.scripts import cond, doctor, run, validate

GRAPH = {"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
         "2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}


def call(module, argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


@pytest.fixture
def workflow(tmp_path):
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPH))
    return str(path)


@pytest.fixture
def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def silent_server():
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def command_lines(workflow: str, server: str) -> dict[str, tuple]:
    return {
        "run": (run, [workflow, "--server", server, "--timeout", "1"]),
        "validate": (validate, [workflow, "--server", server, "--timeout", "1"]),
        "doctor": (doctor, ["--server", server, "--no-local", "--timeout", "1"]),
        "cond build": (cond, ["build", "--server", server, "--text", "x", "--clip", "c", "--name", "n",
                              "--timeout", "1"]),
    }


@pytest.mark.parametrize("command", ["run", "validate", "doctor", "cond build"])
def test_unreachable_server_exits_4(command, workflow, closed_port):
    module, argv = command_lines(workflow, closed_port)[command]
    assert call(module, argv) == 4


@pytest.mark.parametrize("command", ["run", "validate", "doctor", "cond build"])
def test_server_that_never_answers_exits_3(command, workflow, silent_server):
    module, argv = command_lines(workflow, silent_server)[command]
    assert call(module, argv) == 3


@pytest.mark.parametrize("command", ["run", "validate", "doctor"])
def test_bad_server_address_exits_2(command, workflow):
    module, argv = command_lines(workflow, "ftp://example")[command]
    assert call(module, argv) == 2


def test_offline_validate_exits_2_on_errors_and_0_when_valid(tmp_path, workflow):
    bad = tmp_path / "bad.json"
    # (a node the pinned core list lacks is no longer enough: offline it is a warning, the server decides)
    bad.write_text(json.dumps({"1": {"class_type": "EmptyImage", "inputs": {"width": "wide"}}}))
    assert call(validate, [str(bad)]) == 2
    assert call(validate, [workflow]) == 0


# --- run: a job that crashes or lists unusable files is never 0 ------------------------------------

class HostileHistory:
    """A ComfyUI stand-in whose finished /history entry lists an output the client must refuse."""

    def __init__(self, outputs: dict, prompt_id: str = "p1", saver: bool = False):
        info = {"EmptyImage": {"input": {"required": {k: ["INT", {}] for k in ("width", "height", "batch_size",
                                                                               "color")}},
                               "output": ["IMAGE"], "output_node": False},
                "PreviewImage": {"input": {"required": {"images": ["IMAGE", {}]}}, "output": [], "output_node": True}}
        if saver:
            info["SaveImage"] = {"input": {"required": {"images": ["IMAGE", {}], "filename_prefix": ["STRING", {}]}},
                                 "output": [], "output_node": True}
        entry = {prompt_id: {"status": {"status_str": "success", "completed": True, "messages": []},
                             "outputs": outputs}}

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(info if self.path == "/object_info" else entry if self.path.startswith("/history")
                           else {})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._send({"prompt_id": prompt_id, "number": 0, "node_errors": {}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("outputs", [
    {"2": {"images": [{"filename": 7, "subfolder": "", "type": "output"}]}},
    {"2": {"images": [{"filename": "a\x00.png", "subfolder": "", "type": "output"}]}},
    {"2": {"images": [{"filename": "..", "subfolder": "", "type": "output"}]}},
])
def test_run_with_an_unusable_output_name_exits_1(outputs, workflow, tmp_path):
    server = HostileHistory(outputs)
    try:
        assert call(run, [workflow, "--server", server.url, "--out", str(tmp_path / "o")]) == 1
    finally:
        server.close()
    assert not (tmp_path / "o").exists() or all(p.is_relative_to(tmp_path / "o") for p in tmp_path.rglob("*"))


def test_run_with_a_path_as_prompt_id_exits_1_and_writes_nothing(workflow, tmp_path):
    server = HostileHistory({}, prompt_id="../../escape")
    try:
        assert call(run, [workflow, "--server", server.url, "--out", str(tmp_path / "o")]) == 1
    finally:
        server.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wf.json"]


def test_run_whose_save_node_lists_no_file_exits_1(tmp_path):
    graph = {**GRAPH, "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}
    path = tmp_path / "save.json"
    path.write_text(json.dumps(graph))
    server = HostileHistory({}, saver=True)
    try:
        assert call(run, [str(path), "--server", server.url, "--out", str(tmp_path / "o")]) == 1
    finally:
        server.close()


def test_run_job_that_crashes_exits_1(workflow, tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise TypeError("an answer nobody foresaw")

    monkeypatch.setattr(run.jobs, "timing_of", crash)
    server = HostileHistory({})
    try:
        assert call(run, [workflow, "--server", server.url, "--out", str(tmp_path / "o")]) == 1
    finally:
        server.close()


def test_fan_out_exit_is_the_worst_job(workflow, tmp_path):
    good, bad = HostileHistory({}), HostileHistory({"2": {"images": [{"filename": 7}]}})
    try:
        code = call(run, [workflow, "--server", good.url, "--server", bad.url, "--runs", "2",
                          "--out", str(tmp_path / "o")])
    finally:
        good.close()
        bad.close()
    assert code == 1  # one job is fine (0), the other lists an unusable output (1): the worst wins


# --- issue 33: numeric options, one parser type (scripts/options.py) --------------------------------

NUMERIC_REFUSALS = [
    # (argv after the command, the option named in the refusal); the first six exited 0, 1 or 3 before, the NaN
    # timeouts waited forever
    (["run", "{wf}", "--server", "{url}", "--max-job-download", "-1"], "--max-job-download"),
    (["run", "{wf}", "--server", "{url}", "--max-download", "-1"], "--max-download"),
    (["run", "{wf}", "--server", "{url}", "--timeout", "-1"], "--timeout"),
    (["validate", "{wf}", "--server", "{url}", "--timeout", "-1"], "--timeout"),
    (["doctor", "--no-local", "--server", "{url}", "--timeout", "-1"], "--timeout"),
    (["cond", "build", "--server", "{url}", "--text", "x", "--clip", "c", "--name", "n", "--timeout", "-1"],
     "--timeout"),
    (["run", "{wf}", "--server", "{url}", "--timeout", "nan"], "--timeout"),
    (["validate", "{wf}", "--server", "{url}", "--timeout", "nan"], "--timeout"),
    (["doctor", "--no-local", "--server", "{url}", "--timeout", "NaN"], "--timeout"),
    (["cond", "build", "--server", "{url}", "--text", "x", "--clip", "c", "--name", "n", "--timeout", "nan"],
     "--timeout"),
    (["run", "{wf}", "--server", "{url}", "--timeout", "inf"], "--timeout"),
    (["run", "{wf}", "--server", "{url}", "--timeout", "0"], "--timeout"),
    (["run", "{wf}", "--server", "{url}", "--runs", "0"], "--runs"),
    (["run", "{wf}", "--server", "{url}", "--max-download", "1e9"], "--max-download"),
]


@pytest.mark.parametrize("argv, option", NUMERIC_REFUSALS, ids=[" ".join(a[0:1] + a[-2:]) for a, _ in NUMERIC_REFUSALS])
def test_a_numeric_option_not_finite_or_not_above_0_is_refused_with_exit_2(argv, option, workflow, capsys):
    from h3kit.scripts import cli

    server = HostileHistory({"2": {"images": [{"filename": "a.png", "subfolder": "", "type": "output"}]}})
    try:
        with pytest.raises(SystemExit) as done:
            cli.main([a.format(wf=workflow, url=server.url) for a in argv])
    finally:
        server.close()
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and "greater than 0" in err and "Traceback" not in err


def test_every_numeric_option_of_every_command_uses_the_one_parser_type():
    from h3kit.scripts import cli, options

    numeric = []
    stack = [cli.build_parser("h3kit")]
    while stack:
        parser = stack.pop()
        for action in parser._actions:
            if isinstance(action.choices, dict):
                stack.extend(action.choices.values())
            elif action.type in (int, float) or isinstance(action.type, options.Number):
                numeric.append((action.option_strings, action.type))
    assert len(numeric) >= 7
    assert all(isinstance(kind, options.Number) for _, kind in numeric), numeric
