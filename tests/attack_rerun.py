"""Issue 26: the review's attacks, re-run as a user or an attacker would, against any checkout of H3Kit (before
and after a change), each in its own process under a time and memory limit. Not a test module (pytest does not
collect it); the regression tests of each case are tests/test_hostile_bounds.py and tests/test_route_bounds.py.

    python tests/attack_rerun.py --pack /path/to/checkout [--json out.json]

Each attack runs `python -m h3kit ...` (or, for the editor route, the pack's routes on an aiohttp server) with
RLIMIT_AS of MEMORY bytes and a wall clock of SECONDS, and is judged:
  hang       did not end within SECONDS
  memory     died or failed for lack of memory (the address-space limit)
  traceback  a Python traceback reached the terminal, or a route answered 500
  escape     a file was written outside the folder it belongs in
  loss       a file that existed before was changed or removed
  held       none of these (the promise held); `wrong` when it ended without any of these but not as the issue
             asks (e.g. a valid graph refused): said in the detail
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from subprocess import PIPE, STDOUT, Popen

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fake_comfy import GRAPH, OBJECT_INFO, Body, FakeComfy, history_entry  # noqa: E402
from test_hostile_bounds import silent_flac_mkv  # noqa: E402

FLAC: list[bytes] = []  # the .mkv the FLAC attack serves (made once)
SECONDS = 60.0
MEMORY = 4 * 2**30
RUNAWAY_MIB = 1536  # peak resident size judged runaway (importing torch and the pack takes about 400 MiB)


def limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(pythonpath: str, argv: list[str], cwd: Path, code: str | None = None) -> tuple[str, int | None, str, float]:
    """(outcome, exit code, output, peak resident MiB) of one process: `python -m h3kit ARGV`, or `python -c CODE`."""
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", "h3kit", *argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([pythonpath, str(HERE)]), "H3KIT_LOG_DIR": str(cwd / "logs")}
    process = Popen(command, cwd=cwd, stdout=PIPE, stderr=STDOUT, env=env, preexec_fn=limits, start_new_session=True)
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: process.stdout.read(65536), b"")), daemon=True)
    reader.start()
    ends = time.monotonic() + SECONDS
    status = usage = None
    while time.monotonic() < ends:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.05)
    else:
        os.killpg(process.pid, signal.SIGKILL)
        _, status, usage = os.wait4(process.pid, 0)
        reader.join(5)
        return "hang", None, b"".join(chunks).decode(errors="replace"), usage.ru_maxrss / 1024
    reader.join(5)
    process.returncode = os.waitstatus_to_exitcode(status)
    text, peak = b"".join(chunks).decode(errors="replace"), usage.ru_maxrss / 1024
    if "MemoryError" in text or "Cannot allocate memory" in text or "out of memory" in text or process.returncode < 0 \
            or peak > RUNAWAY_MIB:
        return "memory", process.returncode, text, peak
    if "Traceback (most recent call last)" in text:
        return "traceback", process.returncode, text, peak
    return "held", process.returncode, text, peak


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.stat().st_size
            < 2**24 and "logs" not in p.parts}


# ------------------------------------------------------------------------------------------------ attacks
def autogrow(slots):
    info = json.loads(json.dumps(OBJECT_INFO))
    info["EmptyImage"]["input"]["optional"] = {"refs": ["AUTOGROW", {"prefix": "r", "max": slots, "types": ["IMAGE"]}]}
    return info


def server_attacks() -> list[tuple[str, str, dict, list[str]]]:
    """(name, category, server setup, argv) against the scripted server ({wf}, {out}, {url} filled in per run)."""
    wf, out = "{wf}", "{out}"
    body = json.dumps(OBJECT_INFO).encode()
    trickle = {"object_info": lambda: Body(200, (bytes([b]) for b in body), headers={"Content-Length": str(len(body))},
                                           delay=1.0)}
    wrong = {"object_info": lambda: {**OBJECT_INFO, "EmptyImage": {"input": {"required": ["width"]}, "output": ["IMAGE"]}}}
    listed = [{"filename": f"t_{i:05d}_.png", "subfolder": "", "type": "output"} for i in range(200)]
    return [
        ("autogrow max 10**9: run", "hang", {"object_info": lambda: autogrow(10**9)}, ["run", wf, "--server", "{url}", "--out", out, "--timeout", "20"]),
        ("autogrow max 10**9: validate --server", "hang", {"object_info": lambda: autogrow(10**9)}, ["validate", wf, "--server", "{url}", "--timeout", "20"]),
        ("autogrow max 10**9: doctor --server", "hang", {"object_info": lambda: autogrow(10**9)}, ["doctor", "--server", "{url}", "--workflow", wf, "--no-local", "--timeout", "20"]),
        ("/object_info one byte per second: run --timeout 10", "hang", trickle, ["run", wf, "--server", "{url}", "--out", out, "--timeout", "10"]),
        ("/object_info one byte per second: validate --server --timeout 10", "hang", trickle, ["validate", wf, "--server", "{url}", "--timeout", "10"]),
        ("/object_info one byte per second: doctor --server --timeout 10", "hang", trickle, ["doctor", "--server", "{url}", "--no-local", "--timeout", "10"]),
        ("job in neither /history nor /queue, no --timeout", "hang", {"history": lambda: {}}, ["run", wf, "--server", "{url}", "--out", out]),
        ("wrong-typed /object_info schema: run", "traceback", wrong, ["run", wf, "--server", "{url}", "--out", out, "--timeout", "20"]),
        ("wrong-typed /object_info schema: validate --server", "traceback", wrong, ["validate", wf, "--server", "{url}", "--timeout", "20"]),
        ("200 listed outputs of 100 KB, a 1 MB total asked", "disk",
         {"history": lambda: history_entry(outputs={"2": {"images": listed}}), "view": lambda: Body(200, b"x" * 100_000)},
         ["run", wf, "--server", "{url}", "--out", out, "--timeout", "60", "--max-job-download", "1000000"]),
        ("20-minute silent FLAC in a small .mkv, verified", "memory",
         {"history": lambda: history_entry(outputs={"2": {"images": [{"filename": "t.mkv", "subfolder": "", "type": "output"}]}}),
          "view": lambda: Body(200, FLAC[0])}, ["run", wf, "--server", "{url}", "--out", out, "--timeout", "55"]),
        ("newline in server error text", "terminal", {"history": lambda: history_entry(status="error", outputs={}, messages=[
            ["execution_error", {"prompt_id": "p1", "node_id": "2", "node_type": "X",
                                 "exception_message": "boom\nPASS  download: node 2 -> /tmp/evil.png"}]])},
         ["run", wf, "--server", "{url}", "--out", out, "--timeout", "20"]),
        ("reserved download name CON", "terminal", {"history": lambda: history_entry(outputs={"2": {"images": [
            {"filename": "CON", "subfolder": "", "type": "output"}]}})}, ["run", wf, "--server", "{url}", "--out", out, "--timeout", "20"]),
    ]


def file_attacks(work: Path) -> list[tuple[str, str, list[str]]]:
    os.mkfifo(work / "pipe.json")
    os.mkfifo(work / "pipe.safetensors")
    header = {"__metadata__": {"h3kit_format": "h3kit.conditioning", "h3kit_format_version": "1",
                               "structure": json.dumps([[{"$tensor": "t0"}, {}]]),
                               "tensors": json.dumps({"t0": {"path": "[0][0]", "dtype": "uint8",
                                                             "shape": [0, 2**64 - 1], "crc32": "00000000"}})},
              "t0": {"dtype": "U8", "shape": [0, 2**64 - 1], "data_offsets": [0, 0]}}
    text = json.dumps(header).encode()
    (work / "caches").mkdir()
    (work / "caches" / "shape.safetensors").write_bytes(struct.pack("<Q", len(text)) + text)
    structure = "[" + ",".join(["[1,2,3,4]"] * 4_000_000) + "]"
    big = {"__metadata__": {**header["__metadata__"], "structure": structure,
                            "tensors": json.dumps({"t0": {"path": "[0][0]", "dtype": "uint8", "shape": [0],
                                                          "crc32": "00000000"}})},
           "t0": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}
    text = json.dumps(big).encode()
    (work / "caches" / "big.safetensors").write_bytes(struct.pack("<Q", len(text)) + text)
    (work / "models" / "vae").mkdir(parents=True)
    os.symlink(work / "models" / "vae" / "loop.safetensors", work / "models" / "vae" / "loop.safetensors")
    (work / "loop.json").write_text(json.dumps({"1": {"class_type": "VAELoader", "inputs": {"vae_name": "loop.safetensors"}},
                                                "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}))
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2, dtype=torch.bfloat16)}, str(work / "in.safetensors"), metadata={"a": "b"})
    return [
        ("FIFO given to validate", "hang", ["validate", str(work / "pipe.json")]),
        ("FIFO given to convert", "hang", ["convert", "bf16-to-fp16", str(work / "pipe.safetensors"), str(work / "o.safetensors")]),
        ("FIFO given to doctor --workflow", "hang", ["doctor", "--workflow", str(work / "pipe.json"), "--no-local"]),
        ("/dev/zero given to validate", "hang", ["validate", "/dev/zero"]),
        ("cache tensor shape [0, 2**64-1]: cond info", "traceback", ["cond", "info", str(work / "caches" / "shape.safetensors")]),
        ("40 MB structure entry: cond list", "memory", ["cond", "list", "--dir", str(work / "caches")]),
        ("symlink loop in models/ named by a workflow: doctor", "traceback", ["doctor", "--workflow", str(work / "loop.json"), "--models-dir", str(work / "models"), "--no-local"]),
        ("name over 255 bytes: convert OUT", "traceback", ["convert", "bf16-to-fp16", str(work / "in.safetensors"), str(work / ("é" * 200 + ".safetensors"))]),
        ("name over 255 bytes: doctor --models-dir", "traceback", ["doctor", "--models-dir", str(work / ("é" * 200)), "--no-local"]),
        ("reserved name CON.safetensors: convert OUT", "traceback", ["convert", "bf16-to-fp16", str(work / "in.safetensors"), str(work / "CON.safetensors")]),
    ]


ROUTE_CODE = r'''
import asyncio, json, sys, types
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
table = web.RouteTableDef()
fake = types.ModuleType("server"); fake.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=table))
sys.modules["server"] = fake
from h3kit.adapters import server_routes
from h3kit.scripts.schemas import offline_schemas, providing_pack
S = offline_schemas()
server_routes.comfyui_host = lambda g, pack: server_routes.HostView(S, set(S), pack_of=pack.pack_of)
server_routes.register_routes("H3Kit", server_routes.PackNodes({}, providing_pack))
CASE = sys.argv[1]
demo = json.load(open("WORKFLOWS/h3kit_handoff_demo.json"))
def big(n):
    g = {}
    c = 0
    while len(g) < n:
        for k, v in demo.items():
            if len(g) == n: break
            g[f"{c}_{k}"] = {**v, "inputs": {a: ([f"{c}_{b[0]}", b[1]] if isinstance(b, list) and len(b) == 2 else b) for a, b in v["inputs"].items()}}
        c += 1
    return g
async def go():
    app = web.Application(client_max_size=100 * 2**20); app.add_routes(table)
    async with TestClient(TestServer(app)) as c:
        h = {"Content-Type": "application/json"}
        if CASE == "5mb":
            g = dict(demo); g["99"] = {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "A long prompt. " * 350000}}
            raw = json.dumps({"prompt": g}).encode()
            async def pieces():
                for i in range(0, len(raw), 65536):
                    await asyncio.sleep(0.001); yield raw[i:i + 65536]
            r = await c.post("/h3kit/preflight", data=pieces(), headers=h)
            want = {200}
        elif CASE == "10000":
            r = await c.post("/h3kit/preflight", json={"prompt": big(10000)}); want = {200}
        elif CASE == "deep":
            r = await c.post("/h3kit/preflight", data=b'{"prompt": {"1": {"class_type": "X", "inputs": {"a": ' + b"[" * 100000 + b"]" * 100000 + b"}}}}", headers=h); want = {400}
        elif CASE == "classlist":
            r = await c.post("/h3kit/preflight", json={"prompt": {"1": {"class_type": ["KSampler"], "inputs": {}}}}); want = {400}
        elif CASE == "textplain":
            r = await c.post("/h3kit/preflight", data=json.dumps({"prompt": demo}), headers={"Content-Type": "text/plain"}); want = {400, 415}
        body = await r.read()
        print("STATUS", r.status, "WANT", sorted(want), body[:200])
asyncio.run(go())
'''


def route_attacks() -> list[tuple[str, str, str]]:
    return [("route: 5 MB graph sent in pieces", "wrong", "5mb"), ("route: 10,000-node graph", "wrong", "10000"),
            ("route: JSON nested 100,000 deep", "traceback", "deep"), ("route: class_type as a list", "traceback", "classlist"),
            ("route: text/plain body (cross-site form)", "wrong", "textplain")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", type=Path, required=True, help="a checkout of H3Kit (its folder is the package)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    link = Path(tempfile.mkdtemp(prefix="h3kit-attack-pkg-"))
    (link / "h3kit").symlink_to(args.pack.resolve(), target_is_directory=True)
    results = []

    def record(name, category, outcome, code, text, peak, extra=""):
        lines = [line for line in text.strip().splitlines() if "on-prompt handlers" not in line]
        results.append({"attack": name, "category": category, "outcome": outcome, "exit": code,
                        "peak_mib": round(peak), "detail": (extra or (lines[-1] if lines else ""))[:240]})
        print(f"{outcome:9} exit={code!s:5} peak={peak:6.0f} MiB  {name}: {results[-1]['detail'][:130]}", flush=True)

    has_total_cap = "--max-job-download" in run(str(link), ["run", "--help"], Path(tempfile.gettempdir()))[2]
    FLAC.append(silent_flac_mkv(Path(tempfile.mkdtemp(prefix="h3kit-attack-media-")) / "long.mkv", 20).read_bytes())
    server = FakeComfy()
    try:
        for name, category, setup, argv in server_attacks():
            server.reset()
            work = Path(tempfile.mkdtemp(prefix="h3kit-attack-"))
            (work / "wf.json").write_text(json.dumps(GRAPH))
            (work / "keep.txt").write_text("the user's own file")
            for key, make in setup.items():
                value = make()
                if key == "view":
                    original = server.send
                    server.send = lambda h, a, _o=original, _m=make: _o(h, _m() if a is server.view else a)
                else:
                    setattr(server, key, value)
            argv = [a.format(wf=work / "wf.json", out=work / "out", url=server.url) for a in argv]
            if "--max-job-download" in argv and not has_total_cap:  # a checkout without the cap: no way to ask
                argv = argv[:argv.index("--max-job-download")]
            before = snapshot(work)
            outcome, code, text, peak = run(str(link), argv, work)
            server.send = FakeComfy.send.__get__(server)
            after = snapshot(work)
            written = [p for p in after if p not in before and not p.startswith("out/")]
            lost = [p for p in before if after.get(p) != before[p]]
            extra = ""
            if outcome == "held" and written:
                outcome, extra = "escape", f"wrote {written[:3]}"
            if outcome == "held" and lost:
                outcome, extra = "loss", f"changed {lost[:3]}"
            fetched = len(list((work / "out").rglob("*.png"))) if (work / "out").exists() else 0
            if outcome == "held" and name.startswith("200 listed") and fetched > 10:
                outcome, extra = "disk", f"{fetched} of 200 outputs written (1,000,000 bytes asked)"
            if outcome == "held" and name.startswith("newline") and any(
                    line.startswith("PASS  download: node 2 -> /tmp/evil.png") for line in text.splitlines()):
                outcome, extra = "terminal", "the server's text printed a line of its own"
            if outcome == "held" and name.startswith("reserved download") and (work / "out").exists() and any(
                    p.name.split(".")[0].upper() == "CON" for p in (work / "out").rglob("*")):
                outcome, extra = "terminal", "saved under the reserved name CON"
            record(name, category, outcome, code, text, peak, extra)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        server.close()

    work = Path(tempfile.mkdtemp(prefix="h3kit-attack-files-"))
    for name, category, argv in file_attacks(work):
        before = snapshot(work)
        outcome, code, text, peak = run(str(link), argv, work)
        lost = [p for p in before if snapshot(work).get(p) != before[p]]
        record(name, category, "loss" if outcome == "held" and lost else outcome, code, text, peak)
    shutil.rmtree(work, ignore_errors=True)

    code_text = ROUTE_CODE.replace("WORKFLOWS", str(args.pack.resolve() / "workflows" / "api"))
    for name, category, case in route_attacks():
        work = Path(tempfile.mkdtemp(prefix="h3kit-attack-route-"))
        outcome, code, text, peak = run(str(link), [], work, code=code_text.replace("sys.argv[1]", repr(case)))
        line = next((line for line in text.splitlines() if line.startswith("STATUS")), "")
        if outcome == "held" and line:
            status, want = int(line.split()[1]), line.split("WANT")[1].split("]")[0]
            if status >= 500:
                outcome = "traceback"
            elif str(status) not in want:
                outcome = "wrong"
        record(name, category, outcome, code, text, peak, line[:200])
        shutil.rmtree(work, ignore_errors=True)

    counts = {k: sum(r["outcome"] == k for r in results) for k in ("hang", "memory", "traceback", "escape", "loss",
                                                                   "disk", "terminal", "wrong", "held")}
    print(json.dumps(counts))
    if args.json:
        args.json.write_text(json.dumps({"pack": str(args.pack), "results": results, "counts": counts}, indent=1))
    shutil.rmtree(link, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
