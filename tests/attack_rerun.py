"""The reviews' attacks (issues 26 and 33), re-run as a user, an attacker or a hostile server would, against any
checkout of H3Kit (before and after a change), each in its own process under a time and memory limit. Not a test
module: pytest does not collect it (tests/test_attack_rerun_table.py checks only that its case table covers every
finding listed in docs/security.md, "The attack re-run").

    python tests/attack_rerun.py --pack CHECKOUT [--json OUT.json] [--only ID,ID...] [--list]
                                 [--comfyui DIR --comfyui-python PYTHON]

Surfaces (a case's `surface`):
  cli      `python -m h3kit ...` in the runner's Python, against files or a scripted hostile server on 127.0.0.1
           (tests/fake_comfy.py)
  python   a node or library call in the runner's Python (a save race, a node's inputs, a full disk)
  host     ComfyUI's own Python and modules without a server (ComfyUI 0.33.0's MiniMax-H3 tokenizer path)
  comfyui  a real ComfyUI (default: the first host of $COMFYUI_DIRS, e.g. 0.33.0) started fresh for the case with
           the pack linked as custom_nodes/H3Kit (tests/comfyui_host.py); the attack is a client process. A probe
           asks ComfyUI for /features every 20 ms throughout (the event loop's latency) and the server's resident
           size is read before the attack and at its peak (/proc VmHWM, reset through clear_refs).

Every attack runs in a session of its own, stopped at MEMORY (4 GiB resident over its processes, read every 20 ms;
RLIMIT_AS of 16 GiB as a backstop, so a mapped sparse file counts as what it costs) and after SECONDS (60 s) of wall
clock; its peak is the processes' own VmHWM.
Verdicts, the first that applies:
  hang       did not end within its time, or ran past its own --timeout by more than TIMEOUT_GRACE_S
  memory     died or failed for lack of memory, or its peak resident size passed its baseline by more than
             OVER_BASELINE_MIB (ComfyUI: the server's peak over its size before the attack)
  traceback  a Python traceback reached the terminal (or ComfyUI's log), or a route answered 500
  escape     a file was written outside the folder it belongs in
  loss       a file that existed, or that a step reported as written, was changed, replaced or lost
  disk       more was written than asked for
  forged     a line the pack did not write as such: a line of the output (or ComfyUI's log) that starts with text
             planted in a file name, a workflow or a server answer, or a control / separator character planted there
             printed raw; a name the pack's rule says it refuses, accepted
  slow-loop  ComfyUI's event loop answered a probe later than LOOP_MS (beyond ComfyUI's own time for the same bytes,
             measured on a control request, where the case has one)
  exit-code  ended with an exit code the README's table does not give this case (bad arguments: 2)
  wrong      ended without any of these, but not as the issue asks (a valid graph refused, a cap not applied)
  skip       could not run here (the reason is given: no ComfyUI host, no mount namespace)
  held       none of these: the promise held

The baseline of a `python -m h3kit` process is the peak of `validate` on a small valid graph, measured first; a
python/host case prints its own (BASELINE_MIB, after its imports and set-up).
"""

from __future__ import annotations

import argparse
import fnmatch
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from re import split as regex_split
from subprocess import PIPE, STDOUT, Popen

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fake_comfy import GRAPH, OBJECT_INFO, Body, FakeComfy, history_entry, silent_flac_mkv, ws_frame  # noqa: E402

SECONDS = 60.0
MEMORY = 4 * 2**30  # resident, summed over the attack's processes (watched every 50 ms)
ADDRESS_SPACE = 16 * 2**30  # RLIMIT_AS backstop: mapping a large sparse file is address space, not memory
OVER_BASELINE_MIB = 1024
LOOP_MS = 100.0
PROBE_EVERY_S = 0.02
TIMEOUT_GRACE_S = 15.0
POLL_S = 0.02  # how often an attack's memory is read
SERVER_KILL_OVER_MIB = 3 * 1024  # the probe stops a ComfyUI that grows this far (the machine must survive the run)
VERDICTS = ("hang", "memory", "traceback", "escape", "loss", "disk", "forged", "slow-loop", "exit-code", "wrong",
            "skip", "held")
DOCUMENTED_EXITS = {"run": {0, 1, 2, 3, 4}, "validate": {0, 1, 2, 3, 4}, "doctor": {0, 1, 2, 3, 4},
                    "cond": {0, 1, 2, 3, 4}, "convert": {0, 1, 2}}  # README, "Exit codes and output" (130: Ctrl-C)
PLANTED = "PASS  download: node 9 -> /home/user/.ssh/id_rsa"  # a line of the pack's own form, planted in data
SHOWS_LINE_BREAK = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines (and many terminals) break at
PLANTED_RAW = "\x1b\x07\x9b\u2028\u2029\x85\u202e"  # planted characters that must never be printed raw


@dataclass
class Ended:
    """One process's end: "ended" or "hang", exit code, output (stdout and stderr together), peak resident MiB,
    wall seconds."""

    outcome: str
    code: int | None
    text: str
    peak_mib: float
    seconds: float

    def baseline(self, default: float) -> float:
        """BASELINE_MIB printed by the process itself (after its imports), else `default`."""
        for line in self.text.splitlines():
            if line.startswith("BASELINE_MIB "):
                return float(line.split()[1])
        return default


@dataclass
class Verdict:
    verdict: str
    detail: str = ""
    ended: Ended | None = None
    baseline_mib: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    id: str  # stable: --only selects it, the JSON names it
    finding: str  # the finding it re-runs (docs/security.md, "The attack re-run")
    surface: str  # cli | python | host | comfyui
    title: str
    attack: Callable[[Context], Verdict]


def limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_process(command: list[str], cwd: Path, env: dict[str, str], seconds: float = SECONDS,
                stdin: bytes | None = None) -> Ended:
    """Run `command` under `limits()` in its own session; kill its group after `seconds`."""
    started = time.monotonic()
    process = Popen(command, cwd=cwd, stdout=PIPE, stderr=STDOUT, stdin=PIPE if stdin is not None else None, env=env,
                    preexec_fn=limits, start_new_session=True)
    if stdin is not None:
        process.stdin.write(stdin)
        process.stdin.close()
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: process.stdout.read(65536), b"")), daemon=True)
    reader.start()
    ends = started + seconds
    status = usage = None
    resident = peak = 0
    while time.monotonic() < ends:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        now, high = session_memory_kib(process.pid)
        resident, peak = max(resident, now), max(peak, high)
        if resident * 1024 > MEMORY:
            break
        time.sleep(POLL_S)
    if not pid:
        os.killpg(process.pid, signal.SIGKILL)
        _, status, usage = os.wait4(process.pid, 0)
        reader.join(5)
        outcome = "killed-memory" if resident * 1024 > MEMORY else "hang"
        return Ended(outcome, None, b"".join(chunks).decode(errors="replace"), max(peak, resident) / 1024,
                     time.monotonic() - started)
    try:
        os.killpg(process.pid, signal.SIGKILL)  # anything it left behind in its session
    except ProcessLookupError:
        pass
    reader.join(5)
    # ru_maxrss would count this harness's own pages at fork time; the polled VmHWM is the process's own (a process
    # that ended before the first poll falls back to ru_maxrss)
    return Ended("ended", os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace"),
                 (peak or usage.ru_maxrss) / 1024, time.monotonic() - started)


def base_verdict(ended: Ended, baseline_mib: float, seconds: float = SECONDS) -> Verdict:
    """hang, memory or traceback, else held (a case's own checks come after)."""
    text = ended.text
    if ended.outcome == "killed-memory":
        return Verdict("memory", f"stopped at {ended.peak_mib:,.0f} MiB resident (limit {MEMORY // 2**20:,}); "
                       f"{last_line(text)}", ended, baseline_mib)
    if ended.outcome == "hang":
        return Verdict("hang", f"killed after {seconds:.0f} s; {last_line(text)}", ended, baseline_mib)
    over = ended.peak_mib - baseline_mib
    if ("MemoryError" in text or "Cannot allocate memory" in text or "out of memory" in text.lower()
            or ended.code < 0 or over > OVER_BASELINE_MIB):
        return Verdict("memory", f"peak {ended.peak_mib:.0f} MiB (+{over:.0f} over {baseline_mib:.0f}), exit "
                       f"{ended.code}; {last_line(text)}", ended, baseline_mib)
    if "Traceback (most recent call last)" in text:
        return Verdict("traceback", last_line(text), ended, baseline_mib)
    return Verdict("held", last_line(text), ended, baseline_mib)


def session_memory_kib(session: int) -> tuple[int, int]:
    """(resident KiB, sum of peak resident KiB) of every process in `session` (the attack and what it started)."""
    now = high = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == session:
                now += vm_kib(int(entry.name), "VmRSS")
                high += vm_kib(int(entry.name), "VmHWM")
        except (OSError, IndexError, ValueError):
            continue
    return now, high


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.startswith("BASELINE_MIB")]
    return lines[-1][:240] if lines else ""


def forged(text: str, prefixes: tuple[str, ...] = (PLANTED,), raw: str = PLANTED_RAW) -> str | None:
    """The first line (as a terminal or str.splitlines shows it) that starts with a planted prefix, or a planted
    character printed raw; None when there is none."""
    for line in regex_split("[" + SHOWS_LINE_BREAK + "]", text):
        for prefix in prefixes:
            if line.lstrip().startswith(prefix):
                return f"a line of its own from planted data: {line.strip()[:120]!r}"
    for char in raw:
        if char in text:
            return f"the planted character {ascii(char)} printed raw"
    return None


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.is_symlink() and p.stat().st_size < 2**24 and "logs" not in p.parts}


def vm_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Context:
    """What the cases share: the pack under test, how to run it, the scripted server, the ComfyUI host."""

    def __init__(self, pack: Path, comfyui: Path | None, comfyui_python: str | None):
        self.pack = pack.resolve()
        self.link = Path(tempfile.mkdtemp(prefix="h3kit-attack-pkg-"))
        (self.link / "h3kit").symlink_to(self.pack, target_is_directory=True)
        self.comfyui, self.comfyui_python = comfyui, comfyui_python
        self.fake: FakeComfy | None = None
        self.cli_baseline = 0.0
        self.flac: bytes | None = None
        self.has_total_cap = True

    def env(self, work: Path) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.link), str(HERE)]),
                "H3KIT_LOG_DIR": str(work / "logs"), "PYTHONUNBUFFERED": "1"}

    def server(self) -> FakeComfy:
        if self.fake is None:
            self.fake = FakeComfy()
        self.fake.reset()
        return self.fake

    def h3kit(self, argv: list[str], work: Path, seconds: float = SECONDS) -> Ended:
        return run_process([sys.executable, "-m", "h3kit", *map(str, argv)], work, self.env(work), seconds)

    def python(self, code: str, work: Path, extra_env: dict | None = None, seconds: float = SECONDS,
               wrap: list[str] | None = None) -> Ended:
        env = {**self.env(work), **(extra_env or {})}
        return run_process([*(wrap or []), sys.executable, "-c", code], work, env, seconds)

    def measure_baseline(self) -> None:
        work = Path(tempfile.mkdtemp(prefix="h3kit-attack-base-"))
        (work / "wf.json").write_text(json.dumps(GRAPH))
        self.cli_baseline = self.h3kit(["validate", work / "wf.json"], work).peak_mib
        self.has_total_cap = "--max-job-download" in self.h3kit(["run", "--help"], work).text
        shutil.rmtree(work, ignore_errors=True)

    def close(self) -> None:
        if self.fake is not None:
            self.fake.close()
        shutil.rmtree(self.link, ignore_errors=True)


# The scripted-server and file attacks (`python -m h3kit`)

def cli_case(argv: list[str], serve: Callable[[FakeComfy, Path], None] | None = None,
             prepare: Callable[[Path], None] | None = None, exits: set[int] | None = None,
             checks: tuple[Callable[[Ended, Path], tuple[str, str] | None], ...] = (), seconds: float = SECONDS,
             timeout: float | None = None) -> Callable[[Context], Verdict]:
    """An attack as `python -m h3kit ARGV` in a fresh folder holding wf.json (a small valid graph) and keep.txt;
    {wf}, {out}, {url}, {work} in ARGV are filled in. Judged: base_verdict, then escape (a file written outside
    out/ and the case's own files), loss (a file that was there changed), `checks` in order, then the exit code
    (`exits`, default: the command's documented codes), and `timeout`: the command's own --timeout, which it must
    keep (plus TIMEOUT_GRACE_S)."""

    def attack(ctx: Context) -> Verdict:
        work = Path(tempfile.mkdtemp(prefix="h3kit-attack-"))
        try:
            (work / "wf.json").write_text(json.dumps(GRAPH))
            (work / "keep.txt").write_text("the user's own file")
            if prepare is not None:
                prepare(work)
            url = ""
            if serve is not None:
                fake = ctx.server()
                serve(fake, work)
                url = fake.url
            args = [str(a).format(wf=work / "wf.json", out=work / "out", url=url, work=work) for a in argv]
            if "--max-job-download" in args and not ctx.has_total_cap:  # a checkout without the cap: no way to ask
                index = args.index("--max-job-download")
                args = args[:index] + args[index + 2:]
            before = snapshot(work)
            ended = ctx.h3kit(args, work, seconds)
            result = base_verdict(ended, ctx.cli_baseline, seconds)
            if result.verdict != "held":
                return result
            after = snapshot(work)
            written = [p for p in after if p not in before and not p.startswith("out/")]
            lost = [p for p in before if after.get(p) != before[p]]
            found = (("escape", f"wrote {written[:3]}") if written else ("loss", f"changed {lost[:3]}") if lost else None)
            for check in checks:
                found = found or check(ended, work)
            if found is None and timeout is not None and ended.seconds > timeout + TIMEOUT_GRACE_S:
                found = ("hang", f"ran {ended.seconds:.0f} s for --timeout {timeout:g}")
            allowed = exits if exits is not None else DOCUMENTED_EXITS.get(args[0], {0, 1, 2})
            if found is None and ended.code not in allowed:
                found = ("exit-code", f"exit {ended.code}, documented here: {sorted(allowed)}; {last_line(ended.text)}")
            if found is not None:
                result.verdict, result.detail = found
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return attack


def no_forged_line(*prefixes: str) -> Callable[[Ended, Path], tuple[str, str] | None]:
    def check(ended: Ended, work: Path) -> tuple[str, str] | None:
        why = forged(ended.text, prefixes or (PLANTED,))
        return ("forged", why) if why else None
    return check


def says_not(*words: str, verdict: str = "wrong") -> Callable[[Ended, Path], tuple[str, str] | None]:
    def check(ended: Ended, work: Path) -> tuple[str, str] | None:
        hit = next((w for w in words if w.lower() in ended.text.lower()), None)
        return (verdict, f"said {hit!r}: {last_line(ended.text)}") if hit else None
    return check


def autogrow(slots: int) -> dict:
    info = json.loads(json.dumps(OBJECT_INFO))
    info["EmptyImage"]["input"]["optional"] = {"refs": ["AUTOGROW", {"prefix": "r", "max": slots, "types": ["IMAGE"]}]}
    return info


def trickled(fake: FakeComfy, work: Path) -> None:
    body = json.dumps(OBJECT_INFO).encode()
    fake.object_info = lambda: Body(200, (bytes([b]) for b in body), headers={"Content-Length": str(len(body))},
                                    delay=1.0)


def wrong_schema(schema: object) -> Callable[[FakeComfy, Path], None]:
    def serve(fake: FakeComfy, work: Path) -> None:
        fake.object_info = {**OBJECT_INFO, "EmptyImage": schema}
    return serve


def held_job(fake: FakeComfy, work: Path) -> None:
    """A job the server holds forever: not in /history, running in /queue."""
    fake.history = {}
    fake.queue = {"queue_running": [[0, "p1", {}, {}, []]], "queue_pending": []}


def lists_json(size: int, head: bytes, tail: bytes) -> bytes:
    """`head` + [[],[],...] + `tail`, `size` bytes in all: JSON that grows about 37x as Python objects."""
    count = (size - len(head) - len(tail) - 2) // 3
    return head + b"[" + b"[]," * count + b"[]]" + tail


OBJECT_INFO_LISTS: list[bytes] = []


def object_info_of_lists(fake: FakeComfy, work: Path) -> None:
    """A 95 MiB /object_info (under the client's 96 MiB cap) whose extra entry is empty lists."""
    if not OBJECT_INFO_LISTS:
        head = json.dumps(OBJECT_INFO).encode()[:-1] + b', "H3KitAttackLists": '
        OBJECT_INFO_LISTS.append(lists_json(95 * 2**20, head, b"}"))
    fake.object_info = Body(200, OBJECT_INFO_LISTS[0])


def history_of_lists(fake: FakeComfy, work: Path) -> None:
    """A 31 MiB /history answer (under the client's 32 MiB cap) of a finished job, padded with empty lists."""
    head = json.dumps(history_entry())[:-2].encode() + b', "pad": '
    fake.history = Body(200, lists_json(31 * 2**20, head, b"}}"))


def held_job_flooding_events(fake: FakeComfy, work: Path, size: int = 2**16) -> None:
    """A held job whose websocket sends `size`-byte execution_start events of that job, padded with empty lists (a
    64 KiB event is about 1.4 MB as Python objects), as fast as the client reads."""
    held_job(fake, work)
    head = b'{"type": "execution_start", "data": {"prompt_id": "p1", "timestamp": 1, "pad": '
    frame = ws_frame(lists_json(size, head, b"}}"))

    def frames():
        ends = time.monotonic() + SECONDS
        while time.monotonic() < ends:
            yield frame
    fake.ws_frames = frames


def hostile_schema_cpu(fake: FakeComfy, work: Path) -> None:
    """300,000 required inputs on EmptyImage (7 MB): checking a graph against it is CPU work on server data."""
    info = json.loads(json.dumps(OBJECT_INFO))
    info["EmptyImage"]["input"]["required"].update({f"w{i}": ["INT", {}] for i in range(300_000)})
    fake.object_info = Body(200, json.dumps(info).encode())


PNG_HEAD = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


def big_upload(fake: FakeComfy, work: Path) -> None:
    """A 5 GiB PNG (sparse: its header, then zeros) for LoadImage; the server drains the upload."""
    with open(work / "big.png", "wb") as handle:
        handle.write(PNG_HEAD)
        handle.truncate(5 * 2**30)
    (work / "wf.json").write_text(json.dumps({
        "1": {"class_type": "LoadImage", "inputs": {"image": "x.png"}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "t"}}}))
    fake.object_info = {**OBJECT_INFO, "LoadImage": {"input": {"required": {"image": [["x.png"], {"image_upload": True}]}},
                                                     "output": ["IMAGE", "MASK"], "output_node": False}}
    fake.post_routes["/upload/image"] = {"name": "big.png", "subfolder": "", "type": "input"}


def surrogate_output_name(fake: FakeComfy, work: Path) -> None:
    """25 outputs, one named with a lone surrogate (valid JSON: "\\ud800.png")."""
    images = [{"filename": f"t_{i:05d}_.png", "subfolder": "", "type": "output"} for i in range(24)]
    images.insert(12, {"filename": "\ud800.png", "subfolder": "", "type": "output"})
    fake.history = history_entry(outputs={"2": {"images": images}})


def outputs_written(least: int) -> Callable[[Ended, Path], tuple[str, str] | None]:
    def check(ended: Ended, work: Path) -> tuple[str, str] | None:
        count = len(list((work / "out").rglob("*.png"))) if (work / "out").exists() else 0
        return ("loss", f"{count} of the {least} good outputs written; {last_line(ended.text)}") if count < least else None
    return check


def bad_header(fake: FakeComfy, work: Path) -> None:
    """/object_info whose last header line has no colon (urllib3 logs a HeaderParsingError)."""
    body = json.dumps(OBJECT_INFO).encode()
    fake.object_info = Body(200, body, headers={"Content-Length": str(len(body)), "X-H3Kit": "a\r\nnot a header line"})


def forged_server_names(fake: FakeComfy, work: Path) -> None:
    """Server values carrying a newline: a node type, an input name (the layout move prints it) and an error text."""
    info = json.loads(json.dumps(OBJECT_INFO))
    nested = f"f\n{PLANTED.replace('.', '')}"
    info["EmptyImage"]["input"]["required"].pop("width")
    info["EmptyImage"]["input"]["required"][nested] = ["COMFY_DYNAMICCOMBO_V3", {"options": [
        {"key": "a", "inputs": {"required": {"width": ["INT", {}]}}}]}]
    info[f"Node\n{PLANTED}"] = {"input": {"required": {}}, "output": [], "output_node": True}
    fake.object_info = info
    fake.prompt = Body(400, json.dumps({"error": {"message": f"bad\n{PLANTED}", "type": f"t\r{PLANTED}"},
                                        "node_errors": {}}).encode())


def forged_key_graph(work: Path) -> None:
    """A workflow whose input keys and node id carry a newline: the key moves to the host's layout (validate and run
    print the move) and another key is undeclared (printed as a warning)."""
    graph = {"1": {"class_type": "EmptyImage", "inputs": {"height": 8, "batch_size": 1, "color": 0,
                                                          f"x\n{PLANTED.replace('.', '')}.width": 8,
                                                          f"seed\r{PLANTED}": 1, f"s\u2028{PLANTED}": 2}},
             f"2\n{PLANTED}": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "t"}}}
    (work / "wf.json").write_text(json.dumps(graph))


def forged_file_name(work: Path) -> None:
    (work / "x\nOK evil.json: 0 error(s)\n.json").write_text(json.dumps({"1": {"class_type": "EmptyImage",
                                                                               "inputs": {}}}))


def bf16_file(work: Path) -> None:
    code = ("import torch, sys; from safetensors.torch import save_file; "
            "save_file({'w': torch.ones(2, dtype=torch.bfloat16)}, sys.argv[1], metadata={'a': 'b'})")
    run_process([sys.executable, "-c", code, str(work / "in.safetensors")], work, dict(os.environ))


def special_files(work: Path) -> None:
    os.mkfifo(work / "pipe.json")
    os.mkfifo(work / "pipe.safetensors")


def cache_header(structure: str, tensors: dict, shape: list) -> bytes:
    header = {"__metadata__": {"h3kit_format": "h3kit.conditioning", "h3kit_format_version": "1",
                               "structure": structure, "tensors": json.dumps(tensors)},
              "t0": {"dtype": "U8", "shape": shape, "data_offsets": [0, 0]}}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text


def shape_cache(work: Path) -> None:
    (work / "caches").mkdir(exist_ok=True)
    shape = [0, 2**64 - 1]
    (work / "caches" / "shape.safetensors").write_bytes(cache_header(
        json.dumps([[{"$tensor": "t0"}, {}]]), {"t0": {"path": "[0][0]", "dtype": "uint8", "shape": shape,
                                                       "crc32": "00000000"}}, shape))


def structure_cache(work: Path) -> None:
    """A cache whose 'structure' entry is 40 MB."""
    (work / "caches").mkdir(exist_ok=True)
    structure = "[" + ",".join(["[1,2,3,4]"] * 4_000_000) + "]"
    (work / "caches" / "big.safetensors").write_bytes(cache_header(
        structure, {"t0": {"path": "[0][0]", "dtype": "uint8", "shape": [0], "crc32": "00000000"}}, [0]))


def loop_models(work: Path, looped_dir: bool = False) -> None:
    (work / "models" / "vae").mkdir(parents=True)
    loop = work / "models" / "vae" / "loop.safetensors"
    os.symlink(loop, loop)
    if looped_dir:
        os.symlink(work / "looped", work / "looped")
    (work / "loop.json").write_text(json.dumps({
        "1": {"class_type": "VAELoader", "inputs": {"vae_name": "loop.safetensors"}},
        "2": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}))


def stride0_pt(work: Path) -> None:
    """A 2 KB legacy .pt whose tensor is a stride-0 view of one float: 2 GiB once materialised."""
    code = ("import torch, sys; t = torch.zeros(1).expand(2**29).view(1, 2**27, 4); "
            "torch.save([[t, {'pooled_output': torch.zeros(1, 4)}]], sys.argv[1])")
    run_process([sys.executable, "-c", code, str(work / "old.pt")], work, dict(os.environ))


def wrote_at_most(mib: int) -> Callable[[Ended, Path], tuple[str, str] | None]:
    def check(ended: Ended, work: Path) -> tuple[str, str] | None:
        size = sum(p.stat().st_size for p in work.rglob("*") if p.is_file() and not p.is_symlink()
                   and p.name != "old.pt" and "logs" not in p.parts)
        return ("disk", f"wrote {size / 2**20:,.0f} MiB from a {(work / 'old.pt').stat().st_size:,}-byte file") \
            if size > mib * 2**20 else None
    return check


PREP_CACHE = """
import sys, torch
from pathlib import Path
from h3kit.nodes.cond_cache_format import save_conditioning
save_conditioning(Path(sys.argv[1]), sys.argv[2], [[torch.zeros(1, 2, 4), {}]], prompt_text="a cat")
"""


def own_cache(length: int, truncated: bool) -> Callable[[Path], None]:
    """The pack's own cache (saved by the pack), its header padded to `length` bytes: 640, 896, 1152 and 1408 give a
    file that starts 80 02 / 80 03 / 80 04 / 80 05, a pickle's first two bytes."""

    def prepare(work: Path) -> None:
        (work / "caches").mkdir()
        env = {**os.environ, "PYTHONPATH": os.environ.get("H3KIT_ATTACK_LINK", "")}
        run_process([sys.executable, "-c", PREP_CACHE, str(work / "caches"), "own"], work, env)
        path = work / "caches" / "own.safetensors"
        raw = path.read_bytes()
        size = struct.unpack("<Q", raw[:8])[0]
        header, data = raw[8:8 + size].rstrip(b" "), raw[8 + size:]
        if len(header) > length:
            raise RuntimeError(f"the pack's cache header is {len(header)} bytes, over {length}")
        raw = struct.pack("<Q", length) + header + b" " * (length - len(header)) + data
        path.write_bytes(raw[:-4] if truncated else raw)
    return prepare


def exit_case(argv: list[str]) -> Callable[[Context], Verdict]:
    """A bad numeric option: refused before any work, exit 2 (the scripted server finishes the job at once)."""
    return cli_case(argv, serve=lambda fake, work: None, exits={2}, seconds=30)


# Python and host attacks

def python_case(code: str, prepare: Callable[[Path], dict] | None = None, unshare_mount: bool = False,
                judge: Callable[[Ended], tuple[str, str] | None] | None = None, host: bool = False,
                seconds: float = SECONDS) -> Callable[[Context], Verdict]:
    """`python -c CODE` (the runner's Python, or the ComfyUI host's with cwd = its checkout) in a fresh folder
    ($ATTACK_WORK); `prepare(work)` returns more environment. CODE prints BASELINE_MIB after its set-up and RESULT
    lines that `judge` reads."""

    def attack(ctx: Context) -> Verdict:
        if host and not (ctx.comfyui and ctx.comfyui_python):
            return Verdict("skip", "no ComfyUI host (--comfyui / $COMFYUI_DIRS)")
        work = Path(tempfile.mkdtemp(prefix="h3kit-attack-py-"))
        try:
            env = {"ATTACK_WORK": str(work), **(prepare(work) if prepare else {})}
            wrap = None
            if unshare_mount:
                mount = work / "small"
                mount.mkdir()
                user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
                probe = run_process(["unshare", *user, "--mount", "true"], work, dict(os.environ), 10)
                if probe.code != 0:
                    return Verdict("skip", f"no mount namespace here: {last_line(probe.text)}")
                wrap = ["unshare", *user, "--mount", "sh", "-c",
                        f'mount -t tmpfs -o size=1m tmpfs "{mount}" && exec "$@"', "sh"]
                env["ATTACK_MOUNT"] = str(mount)
            if host:
                full = {**ctx.env(work), **env}
                ended = run_process([ctx.comfyui_python, "-c", code], ctx.comfyui, full, seconds)
            else:
                ended = ctx.python(code, work, env, seconds, wrap)
            baseline = ended.baseline(ctx.cli_baseline)
            result = base_verdict(ended, baseline, seconds)
            if result.verdict == "held" and "RESULT" not in ended.text:
                result.verdict, result.detail = "wrong", f"the attack did not get to its end: {last_line(ended.text)}"
            elif result.verdict == "held" and judge is not None:
                found = judge(ended)
                if found:
                    result.verdict, result.detail = found
            return result
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return attack


def result_lines(ended: Ended) -> list[str]:
    return [line.split("RESULT ", 1)[1] for line in ended.text.splitlines() if line.startswith("RESULT ")]


def refused(ended: Ended) -> tuple[str, str] | None:
    """Every RESULT must be a refusal."""
    accepted = [line for line in result_lines(ended) if not line.startswith("refused")]
    return ("wrong", f"accepted: {accepted[0][:200]}") if accepted else None


NODE_ERROR = "from h3kit.nodes.common import H3KitInputError\n"
BASELINE = "import resource\nprint('BASELINE_MIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, flush=True)\n"

EFFECT_ROWS = NODE_ERROR + """
import os
from h3kit.nodes.effects import H3KitEffectPrompt
""" + BASELINE + """
try:
    H3KitEffectPrompt().execute(prompt="integrated_multimodal_description: [Shot 1] A kite rises.",
                                effect="huge.safetensors")
    print("RESULT accepted a 1,000,000-row effect")
except H3KitInputError as exc:
    print("RESULT refused", str(exc)[:200])
"""


def huge_effect(work: Path) -> dict:
    rows = 10**6
    header = json.dumps({"qwen3vl_32b": {"dtype": "BF16", "shape": [rows, 5120],
                                         "data_offsets": [0, rows * 5120 * 2]}}).encode()
    (work / "emb").mkdir()
    with open(work / "emb" / "huge.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + rows * 5120 * 2)  # sparse
    return {"H3KIT_EMBEDDINGS_DIR": str(work / "emb")}


FULL_DISK = NODE_ERROR + """
import os, torch
from pathlib import Path
from h3kit.nodes.conditioning_cache import H3KitSaveConditioning
folder = Path(os.environ["ATTACK_MOUNT"])
os.environ["H3KIT_COND_CACHE_DIR"] = str(folder)
node = H3KitSaveConditioning()
node.save([[torch.zeros(1, 4, 8), {}]], "keep", prompt_text="old")
before = (folder / "keep.safetensors").read_bytes()
""" + BASELINE + """
try:
    node.save([[torch.ones(1, 1024, 1024), {}]], "keep", overwrite=True, prompt_text="new")  # 4 MiB on a 1 MiB disk
    print("RESULT saved?! on a full disk")
except H3KitInputError as exc:
    print("RESULT refused", str(exc)[:200])
if (folder / "keep.safetensors").read_bytes() != before:
    print("RESULT lost: the old cache changed")
"""


def old_cache_kept(ended: Ended) -> tuple[str, str] | None:
    lines = result_lines(ended)
    if any(line.startswith("lost") for line in lines):
        return "loss", "the old cache changed"
    return refused(ended)


LOAD_NODE_STRUCTURE = """
import os
from h3kit.nodes.conditioning_cache import H3KitLoadConditioning
os.environ["H3KIT_COND_CACHE_DIR"] = os.path.join(os.environ["ATTACK_WORK"], "caches")
""" + BASELINE + """
verdict = H3KitLoadConditioning.VALIDATE_INPUTS("big.safetensors")
print("RESULT", "refused" if verdict is not True else "accepted", str(verdict)[:200])
"""


def structure_cache_env(work: Path) -> dict:
    structure_cache(work)
    return {}


CACHE_NAMES = """
import os, torch
os.environ["H3KIT_COND_CACHE_DIR"] = os.environ["ATTACK_WORK"]
from h3kit.nodes.conditioning_cache import H3KitSaveConditioning
""" + BASELINE + """
for name in ["a\\x85b", "a\\u2028b", "a\\u2029b", "a\\x9bb", "a\\u202eb", "a\\u200eb", "a\\u061cb", "a\\x1bb"]:
    try:
        H3KitSaveConditioning().save([[torch.zeros(1, 2, 4), {}]], name)
        print("RESULT accepted", ascii(name))
    except Exception as exc:  # the node's error, as ComfyUI shows it
        print("RESULT refused", ascii(name), type(exc).__name__)
"""


def names_refused(ended: Ended) -> tuple[str, str] | None:
    accepted = [line.split()[1] for line in result_lines(ended) if line.startswith("accepted")]
    return ("forged", f"cache names with control/format/separator characters accepted: {', '.join(accepted)}") \
        if accepted else None


RACE = """
import json, os, sys, time
from subprocess import PIPE, Popen
RACER = '''
import json, os, sys, time, torch
from h3kit.nodes.conditioning_cache import H3KitSaveConditioning
who, tries = int(sys.argv[1]), int(sys.argv[2])
node = H3KitSaveConditioning()
print("READY", flush=True)
start = float(sys.stdin.readline())
for k in range(tries):
    at = start + k * 0.4
    while time.time() < at - 0.01:
        time.sleep(0.005)
    while time.time() < at:
        pass
    try:
        out = node.save([[torch.full((1, 256, 64), float(who * 1000 + k)), {}]], f"race_{k}", overwrite=False)
        print(json.dumps({"who": who, "k": k, "status": json.loads(out["result"][0]).get("status")}), flush=True)
    except Exception as exc:  # the node's refusal: the name exists
        print(json.dumps({"who": who, "k": k, "error": type(exc).__name__}), flush=True)
'''
os.environ["H3KIT_COND_CACHE_DIR"] = os.environ["ATTACK_WORK"]
tries = 12
racers = [Popen([sys.executable, "-c", RACER, str(who), str(tries)], stdin=PIPE, stdout=PIPE, text=True)
          for who in (1, 2)]
for racer in racers:
    assert racer.stdout.readline().strip() == "READY"
""" + BASELINE + """
start = time.time() + 0.5
for racer in racers:
    racer.stdin.write(f"{start}\\n")
    racer.stdin.flush()
results = {}
for racer in racers:
    out, _ = racer.communicate(timeout=50)
    for line in out.splitlines():
        item = json.loads(line)
        results.setdefault(item["k"], []).append(item)
both = [k for k, items in results.items() if sum(i.get("status") in ("written", "replaced") for i in items) == 2]
print("RESULT", "lost" if both else "kept", f"{len(both)} of {tries} tries: both saves reported written", both[:5])
"""


def race_kept(ended: Ended) -> tuple[str, str] | None:
    line = next(iter(result_lines(ended)), "")
    return ("loss", line) if line.startswith("lost") else None


MARKERS = NODE_ERROR + """
import os, sys, json
sys.path.insert(0, os.getcwd())
import tiny_h3_text_encoder as tiny
tiny.force_cpu()
import folder_paths
EMB = os.path.join(os.environ["ATTACK_WORK"], "emb")
folder_paths.folder_names_and_paths["embeddings"] = ([EMB], set(folder_paths.supported_pt_extensions))
from comfy.text_encoders import minimax
from h3kit.nodes.effects import H3KitEffectPrompt


class TokenizerCLIP:
    # the two parts of comfy.sd.CLIP the node and MiniMaxH3ImageToVideo's tokenize use; the tokenizer is the host's
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def clone(self):
        return TokenizerCLIP(self.tokenizer)

    def tokenize(self, text, return_word_ids=False, **kwargs):
        return self.tokenizer.tokenize_with_weights(text, return_word_ids, **kwargs)


clip = TokenizerCLIP(minimax.MiniMaxH3Tokenizer(embedding_directory=[EMB]))
prompt = open(os.path.join(os.environ["ATTACK_WORK"], "prompt.txt")).read()
""" + BASELINE + """
try:
    text, report, prepared = H3KitEffectPrompt().execute(prompt=prompt, effect="none", clip=clip)
    entries = prepared.tokenize(text)["qwen3vl_32b"][0]
    rows = [e[0] for e in entries if hasattr(e[0], "shape")]
    top = max((float(r.abs().max()) for r in rows), default=0.0)
    print("RESULT accepted", len(rows), "effect rows spliced; largest value", top)
except H3KitInputError as exc:
    print("RESULT refused", str(exc)[:200])
"""
PROMPT_HEAD = "integrated_multimodal_description: [Shot 1] A kite rises over the hill."


def marker_files(rows: int, dtype: str = "BF16", fill: bytes | None = None, markers: int = 1, folders: int = 0,
                 sparse: bool = False) -> Callable[[Path], dict]:
    """models/embeddings holding effect.safetensors ([rows, 5120] of `dtype`) and `folders` empty folders; a prompt
    that types `markers` markers of it."""
    width = {"BF16": 2, "F32": 4, "I64": 8}[dtype]

    def prepare(work: Path) -> dict:
        emb = work / "emb"
        emb.mkdir()
        header = json.dumps({"qwen3vl_32b": {"dtype": dtype, "shape": [rows, 5120],
                                             "data_offsets": [0, rows * 5120 * width]}}).encode()
        header += b" " * (-len(header) % 8)
        with open(emb / "effect.safetensors", "wb") as handle:
            handle.write(struct.pack("<Q", len(header)) + header)
            if sparse:
                handle.truncate(8 + len(header) + rows * 5120 * width)
            else:
                handle.write((fill or b"\x80\x3f") * (rows * 5120))  # bf16 1.0 by default
        for i in range(folders):
            (emb / f"d{i // 100:03d}" / f"e{i:05d}").mkdir(parents=True)
        (work / "prompt.txt").write_text(PROMPT_HEAD + " embedding:effect" * markers + " It lands.")
        return {}
    return prepare


# Real ComfyUI attacks: a fresh server per case, the attack a client process

CLIENT = r'''
import http.client, json, sys, threading, time
PORT, PACK = int(sys.argv[1]), sys.argv[2]
ROUTE = "/h3kit/preflight"
DEMO = json.load(open(PACK + "/workflows/api/h3kit_handoff_demo.json"))


def request(method, path, body=None, ctype="application/json", chunked=False, timeout=120):
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", PORT, timeout=timeout)
    try:
        headers = {"Content-Type": ctype} if ctype else {}
        if chunked:
            pieces = iter([body[i:i + 65536] for i in range(0, len(body), 65536)])
            connection.request(method, path, body=pieces, headers=headers, encode_chunked=True)
        else:
            connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read(), time.monotonic() - started
    except OSError as exc:
        return None, repr(exc).encode(), time.monotonic() - started
    finally:
        connection.close()


def say(label, answer):
    status, raw, seconds = answer
    print(f"STATUS {label} {status} {seconds:.2f} {raw[:300]!r}", flush=True)


def many(count):
    graph, copy = {}, 0
    while len(graph) < count:
        for nid, node in DEMO.items():
            if len(graph) == count:
                break
            inputs = {k: ([f"{copy}_{v[0]}", v[1]] if isinstance(v, list) and len(v) == 2 else v)
                      for k, v in node["inputs"].items()}
            graph[f"{copy}_{nid}"] = {**node, "inputs": inputs}
        copy += 1
    return graph


def lists(size):
    head = b'{"prompt": {"1": {"class_type": "PreviewAny", "inputs": {"source": ['
    tail = b"]}}}}"
    return head + b"[]," * ((size - len(head) - len(tail)) // 3 - 1) + b"[]" + tail


def undeclared(size, class_type):
    keys, total, i = {}, 0, 0
    while total < size:
        keys[f"u{i}"] = 0
        total += len(f"u{i}") + 7
        i += 1
    return json.dumps({"prompt": {"1": {"class_type": class_type, "inputs": keys}}}).encode()
'''


@dataclass(frozen=True)
class ServerAttack:
    """A client script run against a fresh ComfyUI; `want` {label: statuses} for the STATUS lines it prints;
    `control`: a client whose loop latency is ComfyUI's own share for the same bytes; `log`: judge the server's log
    (the part written during the attack)."""

    script: str
    want: dict[str, set[int]]
    control: str | None = None
    log: Callable[[str], str | None] | None = None
    within: dict[str, float] = field(default_factory=dict)  # {label: seconds its every answer may take}


class Probe:
    """GET /features every PROBE_EVERY_S on one keep-alive connection (the loop's latency) and the server's resident
    size; stops a server that grows SERVER_KILL_OVER_MIB over its baseline."""

    def __init__(self, port: int, pid: int, baseline_kib: int):
        self.port, self.pid, self.baseline_kib = port, pid, baseline_kib
        self.latencies: list[float] = []
        self.rss_peak_kib = 0
        self.killed = False
        self._stop = threading.Event()
        self._pending: float | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def _run(self) -> None:
        import http.client

        connection = None
        while not self._stop.is_set():
            rss = vm_kib(self.pid, "VmRSS")
            self.rss_peak_kib = max(self.rss_peak_kib, rss)
            if rss - self.baseline_kib > SERVER_KILL_OVER_MIB * 1024 and not self.killed:
                self.killed = True
                os.killpg(self.pid, signal.SIGKILL)
            started = time.monotonic()
            self._pending = started
            try:
                connection = connection or http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
                connection.request("GET", "/features")
                connection.getresponse().read()
            except OSError:
                connection = None
            self._pending = None
            self.latencies.append((time.monotonic() - started) * 1000)
            time.sleep(PROBE_EVERY_S)

    def stop(self) -> float:
        """The worst latency in ms (a probe still waiting counts as waiting since it was sent)."""
        self._stop.set()
        pending = self._pending
        self._thread.join(1)
        worst = max(self.latencies, default=0.0)
        if pending is not None and self._thread.is_alive():
            worst = max(worst, (time.monotonic() - pending) * 1000)
        return worst


def comfyui_case(attack_spec: ServerAttack) -> Callable[[Context], Verdict]:
    def attack(ctx: Context) -> Verdict:
        if not (ctx.comfyui and ctx.comfyui_python):
            return Verdict("skip", "no ComfyUI host (--comfyui / $COMFYUI_DIRS)")
        import comfyui_host

        comfyui_host.PACK_ROOT = ctx.pack  # the pack under test, linked as custom_nodes/H3Kit
        host = comfyui_host.HostSpec(0, ctx.comfyui, ctx.comfyui_python, comfyui_host.LAUNCH_MAIN)
        server = comfyui_host.ComfyUIServer(host)
        work = Path(tempfile.mkdtemp(prefix="h3kit-attack-client-"))
        try:
            server.start()
            pid = server.process.pid
            warm = CLIENT + "say('warm', request('POST', '/h3kit/preflight', json.dumps({'prompt': DEMO}).encode()))\n"
            client = [sys.executable, "-c"]
            args = [str(server.port), str(ctx.pack)]
            run_process([*client, warm, *args], work, ctx.env(work))
            quiet = Probe(server.port, pid, vm_kib(pid, "VmRSS")).start()
            time.sleep(1.0)
            quiet_ms = quiet.stop()
            allowed = LOOP_MS
            control_ms = None
            if attack_spec.control:
                probe = Probe(server.port, pid, vm_kib(pid, "VmRSS")).start()
                run_process([*client, CLIENT + attack_spec.control, *args], work, ctx.env(work))
                control_ms = probe.stop()
                allowed = LOOP_MS + control_ms
            baseline_kib = vm_kib(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here
            log_start = len(server.log())
            probe = Probe(server.port, pid, baseline_kib).start()
            ended = run_process([*client, CLIENT + attack_spec.script, *args], work, ctx.env(work))
            time.sleep(2.0)  # the loop after the answer (a worker left running)
            worst_ms = probe.stop()
            alive = server.process.poll() is None
            peak_kib = max(vm_kib(pid, "VmHWM"), probe.rss_peak_kib) if alive else probe.rss_peak_kib
            over_mib = (peak_kib - baseline_kib) / 1024
            log = server.log()[log_start:]
            extra = {"loop_max_ms": round(worst_ms, 1), "loop_quiet_ms": round(quiet_ms, 1),
                     "loop_control_ms": None if control_ms is None else round(control_ms, 1),
                     "server_baseline_mib": round(baseline_kib / 1024), "server_over_mib": round(over_mib)}
            return judge_server(attack_spec, ended, alive, probe, over_mib, worst_ms, allowed, log, extra)
        except RuntimeError as exc:  # the server did not start
            return Verdict("skip", f"ComfyUI did not start: {str(exc)[:300]}")
        finally:
            server.stop()
            server.cleanup()
            shutil.rmtree(work, ignore_errors=True)

    return attack


def judge_server(spec: ServerAttack, ended: Ended, alive: bool, probe: Probe, over_mib: float, worst_ms: float,
                 allowed_ms: float, log: str, extra: dict) -> Verdict:
    def verdict(kind: str, detail: str) -> Verdict:
        return Verdict(kind, detail, ended, None, extra)

    answers = {}
    for line in ended.text.splitlines():
        if line.startswith("STATUS "):
            _, label, status, seconds, body = line.split(" ", 4)
            answers.setdefault(label, []).append((None if status == "None" else int(status), float(seconds), body))
    if ended.outcome == "hang":
        return verdict("hang", f"the client waited {SECONDS:.0f} s; answers so far: {summary(answers)}")
    if not answers and ended.code != 0:
        return verdict("skip", f"the attack client failed (harness): {last_line(ended.text)}")
    if probe.killed or over_mib > OVER_BASELINE_MIB:
        return verdict("memory", f"ComfyUI grew {over_mib:,.0f} MiB{' (stopped)' if probe.killed else ''}; "
                       f"answers: {summary(answers)}")
    if not alive:
        return verdict("traceback", f"ComfyUI exited during the attack: {last_line(log)}")
    if "Traceback (most recent call last)" in log or any(a[0] == 500 for items in answers.values() for a in items):
        return verdict("traceback", f"answers: {summary(answers)}; log: {traceback_line(log)}")
    if spec.log is not None:
        found = spec.log(log)
        if found:
            return verdict("forged", found)
    if worst_ms > allowed_ms:
        return verdict("slow-loop", f"a probe waited {worst_ms:,.0f} ms (allowed {allowed_ms:,.0f}); "
                       f"answers: {summary(answers)}")
    for label, statuses in spec.want.items():
        got = answers.get(label)
        if not got or any(a[0] not in statuses for a in got):
            return verdict("wrong", f"{label}: wanted {sorted(statuses)}, got {summary({label: got or []})}")
        if label in spec.within and any(a[1] > spec.within[label] for a in got):
            return verdict("wrong", f"{label}: wanted within {spec.within[label]:.0f} s, got {summary({label: got})}")
    if "Traceback" in ended.text:
        return verdict("traceback", last_line(ended.text))
    return verdict("held", summary(answers))


def summary(answers: dict) -> str:
    return "; ".join(f"{label} " + ", ".join(f"{a[0]} in {a[1]:.1f} s {a[2][:60]}" for a in items)
                     for label, items in answers.items())[:400]


def traceback_line(log: str) -> str:
    lines = log.splitlines()
    index = max(i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line) if any(
        "Traceback (most recent call last)" in line for line in lines) else len(lines) - 1
    tail = [line for line in lines[index:index + 40] if line and not line.startswith(" ")]
    return (tail[-1] if tail else "")[:200]


RECORD_START = r"(?=\x1b\[[0-9;]*m\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\]\x1b\[0m )"  # ComfyUI's log prefix


def log_forged(log: str) -> str | None:
    """In a record of ComfyUI's log that H3Kit wrote (its message starts with "H3Kit"): a line starting with the
    planted INFO text, or the planted OSC / CSI sequences raw. ComfyUI's own records (its validation errors echo a
    node id as sent) are ComfyUI's, not the pack's."""
    records = regex_split(RECORD_START, log)
    for record in records:
        message = record.split("\x1b[0m ", 1)[-1] if record.startswith("\x1b[") else record
        if len(records) > 1 and not message.startswith("H3Kit"):
            continue
        for line in regex_split("[" + SHOWS_LINE_BREAK + "]", record):
            if line.lstrip().startswith("[INFO] H3Kit planted"):
                return f"a log line of its own from a queued prompt: {line.strip()[:120]!r}"
        for sequence in ("\x1b]0;pwned\x07", "\x1b[2J"):
            if sequence in record:
                return f"the planted escape {sequence!r} reached ComfyUI's console raw"
    return None


PLANTED_LOG = "\x1b]0;pwned\x07\x1b[2J\n[INFO] H3Kit planted this line"
ADAPTER_WARNING = (
    f"planted = {PLANTED_LOG!r}\n"
    "g = {'1': {'class_type': 'EmptyImage', 'inputs': {'width': 8, 'height': 8, 'batch_size': 1, 'color': 0}},\n"
    "     '9' + planted: {'class_type': 'SaveVideo', 'inputs': {'video': ['1', 0], 'format': 'auto', 'codec': 'auto',\n"
    "                                                     'x' + planted + '.filename_prefix': 'video/x'}}}\n"
    "say('prompt', request('POST', '/prompt', json.dumps({'prompt': g}).encode()))\n"
)
SERVER_ATTACKS = {
    "template": ServerAttack("say('get', request('GET', '/workflow_templates/H3Kit/' + 'a' * 5000 + '.json'))\n",
                             {"get": {400, 404, 414}}),
    "5mb": ServerAttack(
        "g = dict(DEMO); g['99'] = {'class_type': 'PrimitiveStringMultiline', 'inputs': {'value': 'A long prompt. ' * "
        "350000}}\nsay('route', request('POST', ROUTE, json.dumps({'prompt': g}).encode(), chunked=True))\n",
        {"route": {200}}),
    "1mb": ServerAttack(
        "g = dict(DEMO); g['99'] = {'class_type': 'PrimitiveStringMultiline', 'inputs': {'value': 'A long prompt. ' * "
        "70000}}\nsay('route', request('POST', ROUTE, json.dumps({'prompt': g}).encode(), chunked=True))\n",
        {"route": {200}}),
    "10000": ServerAttack("say('route', request('POST', ROUTE, json.dumps({'prompt': many(10000)}).encode()))\n",
                          {"route": {200}}),
    "deep": ServerAttack("say('route', request('POST', ROUTE, b'{\"prompt\": {\"1\": {\"class_type\": \"X\", "
                         "\"inputs\": {\"a\": ' + b'[' * 100000 + b']' * 100000 + b'}}}}'))\n", {"route": {400}}),
    "classlist": ServerAttack("say('route', request('POST', ROUTE, json.dumps({'prompt': {'1': {'class_type': "
                              "['KSampler'], 'inputs': {}}}}).encode()))\n", {"route": {400}}),
    "textplain": ServerAttack("say('route', request('POST', ROUTE, json.dumps({'prompt': DEMO}).encode(), "
                              "ctype='text/plain'))\n", {"route": {400, 415}}),
    "undeclared": ServerAttack(
        "say('prompt', request('POST', '/prompt', undeclared(20 * 2**20, 'MiniMaxH3ReferenceToVideo')))\n",
        {"prompt": {200, 400}},
        control="say('control', request('POST', '/prompt', undeclared(20 * 2**20, 'H3KitAttackNoSuchNode')))\n"),
    "lists": ServerAttack("say('route', request('POST', ROUTE, lists(31 * 2**20)))\n", {"route": {400, 413}}),
    "lists4": ServerAttack(
        "body = lists(31 * 2**20)\n"
        "threads = [threading.Thread(target=lambda i=i: say(f'route{i}', request('POST', ROUTE, body))) for i in range(4)]\n"
        "[t.start() for t in threads]\n[t.join() for t in threads]\n",
        {f"route{i}": {400, 413} for i in range(4)}),
    "after": ServerAttack(
        "hostile = threading.Thread(target=lambda: say('hostile', request('POST', ROUTE, lists(31 * 2**20), "
        "timeout=55)), daemon=True)\nhostile.start()\ntime.sleep(3)\n"
        "say('ordinary', request('POST', ROUTE, json.dumps({'prompt': DEMO}).encode(), timeout=25))\n"
        "hostile.join(50)\nsay('ordinary', request('POST', ROUTE, json.dumps({'prompt': DEMO}).encode(), timeout=25))\n",
        {"ordinary": {200}}, within={"ordinary": 10.0}),
    "adapter": ServerAttack(ADAPTER_WARNING, {"prompt": {200, 400}}, log=log_forged),
}


# The case table: every finding of issues 26 and 33 (docs/security.md, "The attack re-run"), each case in its
# own process. Ids are stable: --only selects them, and the JSON and the docs name them.

def cases() -> list[Case]:
    run = ["run", "{wf}", "--server", "{url}", "--out", "{out}"]
    validate = ["validate", "{wf}", "--server", "{url}"]
    doctor = ["doctor", "--server", "{url}", "--workflow", "{wf}", "--no-local"]
    loose = {0, 1, 2, 3, 4}
    table = [
        Case("autogrow-run", "26.01", "cli", "autogrow max 10**9: run",
             cli_case([*run, "--timeout", "20"], lambda f, w: setattr(f, "object_info", autogrow(10**9)))),
        Case("autogrow-validate", "26.01", "cli", "autogrow max 10**9: validate --server",
             cli_case([*validate, "--timeout", "20"], lambda f, w: setattr(f, "object_info", autogrow(10**9)))),
        Case("autogrow-doctor", "26.01", "cli", "autogrow max 10**9: doctor --server",
             cli_case([*doctor, "--timeout", "20"], lambda f, w: setattr(f, "object_info", autogrow(10**9)))),
        Case("trickle-run", "26.02", "cli", "/object_info one byte per second: run --timeout 10",
             cli_case([*run, "--timeout", "10"], trickled, timeout=10)),
        Case("trickle-validate", "26.02", "cli", "/object_info one byte per second: validate --server --timeout 10",
             cli_case([*validate, "--timeout", "10"], trickled, timeout=10)),
        Case("trickle-doctor", "26.02", "cli", "/object_info one byte per second: doctor --server --timeout 10",
             cli_case(["doctor", "--server", "{url}", "--no-local", "--timeout", "10"], trickled, timeout=10)),
        Case("lost-job", "26.03", "cli", "job in neither /history nor /queue, no --timeout",
             cli_case(run, lambda f, w: setattr(f, "history", {}))),
        Case("fifo-validate", "26.04", "cli", "FIFO given to validate",
             cli_case(["validate", "{work}/pipe.json"], prepare=special_files)),
        Case("fifo-convert", "26.04", "cli", "FIFO given to convert",
             cli_case(["convert", "bf16-to-fp16", "{work}/pipe.safetensors", "{work}/o.safetensors"],
                      prepare=special_files)),
        Case("fifo-doctor", "26.04", "cli", "FIFO given to doctor --workflow",
             cli_case(["doctor", "--workflow", "{work}/pipe.json", "--no-local"], prepare=special_files)),
        Case("dev-zero-validate", "26.04", "cli", "/dev/zero given to validate", cli_case(["validate", "/dev/zero"])),
        Case("wrong-schema-run", "26.05", "cli", "wrong-typed /object_info schema: run",
             cli_case([*run, "--timeout", "20"], wrong_schema({"input": {"required": ["width"]}, "output": ["IMAGE"]}))),
        Case("wrong-schema-validate", "26.05", "cli", "wrong-typed /object_info schema: validate --server",
             cli_case([*validate, "--timeout", "20"], wrong_schema({"input": {"required": ["width"]},
                                                                    "output": ["IMAGE"]}))),
        Case("wrong-schema-doctor", "26.05", "cli", "wrong-typed /object_info schema: doctor --server",
             cli_case([*doctor, "--timeout", "20"], wrong_schema({"input": {"required": ["width"]},
                                                                  "output": ["IMAGE"]}))),
        Case("wrong-schema-step0", "26.05", "cli", "/object_info INT with step 0: validate --server",
             cli_case([*validate, "--timeout", "20"], wrong_schema({"input": {"required": {
                 "width": ["INT", {"step": 0, "min": 0}]}}, "output": ["IMAGE"]}))),
        Case("outputs-200", "26.06", "cli", "200 listed outputs of 100 KB, a 1 MB total asked",
             cli_case([*run, "--timeout", "60", "--max-job-download", "1000000"], listed_outputs,
                      checks=(at_most_outputs(10),), seconds=SECONDS)),
        Case("flac-20min", "26.07", "cli", "20-minute silent FLAC in a small .mkv, verified",
             cli_case([*run, "--timeout", "55"], flac_output)),
        Case("structure-cond-list", "26.08", "cli", "40 MB structure entry: cond list",
             cli_case(["cond", "list", "--dir", "{work}/caches"], prepare=structure_cache)),
        Case("structure-cond-info", "26.08", "cli", "40 MB structure entry: cond info",
             cli_case(["cond", "info", "{work}/caches/big.safetensors"], prepare=structure_cache)),
        Case("structure-load-node", "26.08", "python", "40 MB structure entry: H3KitLoadConditioning's validation",
             python_case(LOAD_NODE_STRUCTURE, structure_cache_env, judge=refused)),
        Case("shape-cond-info", "26.09", "cli", "cache tensor shape [0, 2**64-1]: cond info",
             cli_case(["cond", "info", "{work}/caches/shape.safetensors"], prepare=shape_cache)),
        Case("effect-rows", "26.10", "python", "an effect file of 1,000,000 rows: H3KitEffectPrompt",
             python_case(EFFECT_ROWS, huge_effect, judge=refused)),
        Case("symlink-loop-file", "26.11", "cli", "symlink loop in models/ named by a workflow: doctor",
             cli_case(["doctor", "--workflow", "{work}/loop.json", "--models-dir", "{work}/models", "--no-local"],
                      prepare=loop_models)),
        Case("symlink-loop-dir", "26.11", "cli", "--models-dir is a symlink loop: doctor",
             cli_case(["doctor", "--workflow", "{work}/loop.json", "--models-dir", "{work}/looped", "--no-local"],
                      prepare=lambda w: loop_models(w, looped_dir=True))),
        Case("long-name-convert", "26.12", "cli", "name over 255 bytes: convert OUT",
             cli_case(["convert", "bf16-to-fp16", "{work}/in.safetensors", "{work}/" + "é" * 200 + ".safetensors"],
                      prepare=bf16_file)),
        Case("long-name-doctor", "26.12", "cli", "name over 255 bytes: doctor --models-dir",
             cli_case(["doctor", "--models-dir", "{work}/" + "é" * 200, "--no-local"])),
        Case("long-name-validate", "26.12", "cli", "name over 255 bytes: validate",
             cli_case(["validate", "{work}/" + "é" * 200 + ".json"])),
        Case("long-name-cond-info", "26.12", "cli", "name over 255 bytes: cond info",
             cli_case(["cond", "info", "{work}/" + "é" * 200 + ".safetensors", "--dir", "{work}"])),
        Case("reserved-download", "26.13", "cli", "reserved download name CON",
             cli_case([*run, "--timeout", "20"], reserved_output, checks=(no_reserved_name,))),
        Case("reserved-convert", "26.13", "cli", "reserved name CON.safetensors: convert OUT",
             cli_case(["convert", "bf16-to-fp16", "{work}/in.safetensors", "{work}/CON.safetensors"], prepare=bf16_file,
                      exits={2})),
        Case("full-disk-save", "26.14", "python", "saving a conditioning on a full disk (1 MiB tmpfs)",
             python_case(FULL_DISK, unshare_mount=True, judge=old_cache_kept)),
        Case("newline-server-error", "26.15", "cli", "newline in server error text",
             cli_case([*run, "--timeout", "20"], server_error_text, checks=(no_forged_line(),))),
        Case("route-5mb", "26.16", "comfyui", "route: 5 MB graph sent in pieces", comfyui_case(SERVER_ATTACKS["5mb"])),
        Case("route-1mb", "26.16", "comfyui", "route: 1 MB graph sent in pieces", comfyui_case(SERVER_ATTACKS["1mb"])),
        Case("route-10000", "26.17", "comfyui", "route: 10,000-node graph", comfyui_case(SERVER_ATTACKS["10000"])),
        Case("route-deep", "26.18", "comfyui", "route: JSON nested 100,000 deep", comfyui_case(SERVER_ATTACKS["deep"])),
        Case("route-classlist", "26.19", "comfyui", "route: class_type as a list",
             comfyui_case(SERVER_ATTACKS["classlist"])),
        Case("route-textplain", "26.20", "comfyui", "route: text/plain body (cross-site form)",
             comfyui_case(SERVER_ATTACKS["textplain"])),
        Case("template-long-name", "26.21", "comfyui", "GET /workflow_templates/H3Kit/<5,000-char name>.json",
             comfyui_case(SERVER_ATTACKS["template"])),
        # issue 33: the event loop
        Case("loop-undeclared-keys", "33.01", "comfyui",
             "20 MB POST /prompt of undeclared keys on MiniMaxH3ReferenceToVideo (control: a node ComfyUI lacks)",
             comfyui_case(SERVER_ATTACKS["undeclared"])),
        Case("loop-route-lists", "33.02", "comfyui", "31 MiB of [] to the preflight route",
             comfyui_case(SERVER_ATTACKS["lists"])),
        Case("loop-route-lists-x4", "33.03", "comfyui", "31 MiB of [] to the preflight route, four at once",
             comfyui_case(SERVER_ATTACKS["lists4"])),
        Case("loop-route-after-given-up", "33.04", "comfyui",
             "an ordinary graph while and after the route works on a hostile one",
             comfyui_case(SERVER_ATTACKS["after"])),
        # issue 33: memory bounded by what is built
        Case("object-info-lists-run", "33.05", "cli", "95 MiB /object_info of []: run",
             cli_case([*run, "--timeout", "50"], object_info_of_lists, exits=loose)),
        Case("object-info-lists-validate", "33.05", "cli", "95 MiB /object_info of []: validate --server",
             cli_case([*validate, "--timeout", "50"], object_info_of_lists)),
        Case("object-info-lists-doctor", "33.05", "cli", "95 MiB /object_info of []: doctor --server",
             cli_case([*doctor, "--timeout", "50"], object_info_of_lists)),
        Case("history-lists", "33.06", "cli", "31 MiB /history of []: run",
             cli_case([*run, "--timeout", "50"], history_of_lists)),
        Case("ws-events-held-job", "33.07", "cli", "4 MiB websocket events of a held job for 50 s: run --timeout 40",
             cli_case([*run, "--timeout", "40"], held_job_flooding_events, timeout=40)),
        Case("cond-import-stride0", "33.08", "cli", "cond import of a 2 KB .pt holding a stride-0 view (2 GiB)",
             cli_case(["cond", "import", "{work}/old.pt", "big", "--dir", "{work}/caches"], prepare=stride0_pt,
                      checks=(wrote_at_most(64),))),
        Case("timeout-nan", "33.09", "cli", "run --timeout nan on a job the server holds",
             cli_case([*run, "--timeout", "nan"], held_job, exits={2})),
        Case("hostile-schema-cpu", "33.10", "cli", "300,000 required inputs in /object_info: validate --timeout 5",
             cli_case([*validate, "--timeout", "5"], hostile_schema_cpu, timeout=5)),
        Case("upload-5gib", "33.11", "cli", "run --upload of a 5 GiB file (sparse)",
             cli_case([*run, "--upload", "1={work}/big.png", "--timeout", "55"], big_upload)),
        # issue 33: no loss
        Case("save-race", "33.12", "python", "two H3KitSaveConditioning to one new name, overwrite off (12 tries)",
             python_case(RACE, judge=race_kept)),
        # issue 33: typed effect markers on the host's tokenizer path
        Case("markers-200000-rows", "33.13", "host", "a typed marker of a 200,000-row file (sparse)",
             python_case(MARKERS, marker_files(200_000, sparse=True), judge=refused, host=True)),
        Case("markers-1025-rows", "33.14", "host", "a typed marker of a 1,025-row file (cap 1,024)",
             python_case(MARKERS, marker_files(1025), judge=refused, host=True)),
        Case("markers-int64", "33.15", "host", "a typed marker of int64 rows of 2**40",
             python_case(MARKERS, marker_files(4, "I64", struct.pack("<q", 2**40)), judge=refused, host=True)),
        Case("markers-100000", "33.16", "host", "100,000 typed markers",
             python_case(MARKERS, marker_files(1, markers=100_000), host=True)),
        Case("markers-10000-folders", "33.17", "host", "200 typed markers, a 10,000-folder embeddings tree",
             python_case(MARKERS, marker_files(1, markers=200, folders=10_000), host=True)),
        # issue 33: output that cannot be forged
        Case("forged-workflow-key-validate", "33.18", "cli", "newline in workflow input keys and node id: validate",
             cli_case(["validate", "{wf}"], prepare=forged_key_graph, checks=(no_forged_line(),))),
        Case("forged-workflow-key-run", "33.18", "cli", "newline in workflow input keys and node id: run",
             cli_case([*run, "--timeout", "20"], lambda f, w: None, prepare=forged_key_graph, checks=(no_forged_line(),))),
        Case("forged-file-name-validate", "33.19", "cli", "a file name holding a newline and an OK line: validate",
             cli_case(["validate", "{work}/x\nOK evil.json: 0 error(s)\n.json"], prepare=forged_file_name,
                      checks=(no_forged_line("OK evil.json"),))),
        Case("forged-file-name-convert", "33.19", "cli", "an OUT name holding a newline and a convert line: convert",
             cli_case(["convert", "bf16-to-fp16", "{work}/in.safetensors", "{work}/o\nconvert: wrote fake.safetensors"],
                      prepare=bf16_file, checks=(no_forged_line("convert: wrote fake"),))),
        Case("forged-server-values", "33.20", "cli", "newlines in a node type, an input name and an error: run",
             cli_case([*run, "--timeout", "20"], forged_server_names, checks=(no_forged_line(),))),
        Case("forged-adapter-warning", "33.21", "comfyui", "OSC/CSI and a fake INFO line through the adapter's warning",
             comfyui_case(SERVER_ATTACKS["adapter"])),
        Case("forged-cache-names", "33.22", "python", "C1, U+2028 and format characters in cache names",
             python_case(CACHE_NAMES, judge=names_refused)),
        Case("surrogate-output-name", "33.23", "cli", "a \\ud800 output name among 25 outputs: run",
             cli_case([*run, "--timeout", "30"], surrogate_output_name, checks=(outputs_written(24),))),
        Case("urllib3-header-warning", "33.24", "cli", "a malformed header line from the server: validate --server",
             cli_case([*validate, "--timeout", "20"], bad_header)),
        # issue 33: sniffing knows our own files first
        *[Case(f"sniff-own-cache-{n}", "33.25", "cli", f"the pack's own cache with a {n}-byte header: cond info",
               cli_case(["cond", "info", "{work}/caches/own.safetensors"], prepare=own_cache(n, False), exits={0},
                        checks=(says_not("pickle", "cond import", "torch.save"),)))
          for n in (640, 896, 1152, 1408)],
        Case("sniff-own-cache-640-truncated", "33.25", "cli", "the pack's own cache, 640-byte header, cut short",
             cli_case(["cond", "info", "{work}/caches/own.safetensors"], prepare=own_cache(640, True), exits={2},
                      checks=(says_not("pickle", "cond import", "torch.save"),))),
        Case("sniff-own-cache-640-import", "33.25", "cli", "cond import of the pack's own cache, 640-byte header",
             cli_case(["cond", "import", "{work}/caches/own.safetensors", "again", "--dir", "{work}/caches"],
                      prepare=own_cache(640, False), exits={2}, checks=(says_not("torch.load", "pickle"),))),
        Case("sniff-prompt-id3", "33.26", "cli", "a prompt text starting 'ID3': cond build --text-file",
             cli_case(["cond", "build", "--text-file", "{work}/prompt.txt", "--clip", "c", "--name", "n", "--server",
                       "{url}", "--timeout", "20"], lambda f, w: None, prepare=id3_prompt, checks=(says_not("MP3"),))),
        # issue 33: exit codes
        Case("exit-run-max-job-download", "33.27", "cli", "run --max-job-download -1",
             exit_case([*run, "--max-job-download", "-1"])),
        Case("exit-run-max-download", "33.27", "cli", "run --max-download -1", exit_case([*run, "--max-download", "-1"])),
        Case("exit-run-timeout-negative", "33.27", "cli", "run --timeout -1", exit_case([*run, "--timeout", "-1"])),
        Case("exit-run-timeout-inf", "33.27", "cli", "run --timeout inf", exit_case([*run, "--timeout", "inf"])),
        Case("exit-run-runs-0", "33.27", "cli", "run --runs 0", exit_case([*run, "--runs", "0"])),
        Case("exit-validate-timeout-negative", "33.27", "cli", "validate --server --timeout -1",
             exit_case([*validate, "--timeout", "-1"])),
        Case("exit-validate-timeout-nan", "33.27", "cli", "validate --server --timeout nan",
             exit_case([*validate, "--timeout", "nan"])),
        Case("exit-doctor-timeout-negative", "33.27", "cli", "doctor --server --timeout -1",
             exit_case([*doctor, "--timeout", "-1"])),
        Case("exit-cond-build-timeout-negative", "33.27", "cli", "cond build --timeout -1",
             exit_case(["cond", "build", "--text", "a cat", "--clip", "c", "--name", "n", "--server", "{url}",
                        "--timeout", "-1"])),
    ]
    return table


def listed_outputs(fake: FakeComfy, work: Path) -> None:
    listed = [{"filename": f"t_{i:05d}_.png", "subfolder": "", "type": "output"} for i in range(200)]
    fake.history = history_entry(outputs={"2": {"images": listed}})
    fake.view = Body(200, b"x" * 100_000)


def at_most_outputs(count: int) -> Callable[[Ended, Path], tuple[str, str] | None]:
    def check(ended: Ended, work: Path) -> tuple[str, str] | None:
        fetched = len(list((work / "out").rglob("*.png"))) if (work / "out").exists() else 0
        return ("disk", f"{fetched} of 200 outputs written (1,000,000 bytes asked)") if fetched > count else None
    return check


FLAC: list[bytes] = []


def flac_output(fake: FakeComfy, work: Path) -> None:
    if not FLAC:
        FLAC.append(silent_flac_mkv(work / "long.mkv", 20).read_bytes())
        (work / "long.mkv").unlink()
    fake.history = history_entry(outputs={"2": {"images": [{"filename": "t.mkv", "subfolder": "", "type": "output"}]}})
    fake.view = Body(200, FLAC[0])


def reserved_output(fake: FakeComfy, work: Path) -> None:
    fake.history = history_entry(outputs={"2": {"images": [{"filename": "CON", "subfolder": "", "type": "output"}]}})


def no_reserved_name(ended: Ended, work: Path) -> tuple[str, str] | None:
    if (work / "out").exists() and any(p.name.split(".")[0].upper() == "CON" for p in (work / "out").rglob("*")):
        return "forged", "saved under the reserved name CON"
    return None


def server_error_text(fake: FakeComfy, work: Path) -> None:
    fake.history = history_entry(status="error", outputs={}, messages=[["execution_error", {
        "prompt_id": "p1", "node_id": "2", "node_type": "X", "exception_message": f"boom\n{PLANTED}"}]])


def id3_prompt(work: Path) -> None:
    (work / "prompt.txt").write_text("ID3 of the tape reads: a cat walks along a wall at dusk.")


# Running

def select(table: list[Case], only: str | None) -> list[Case]:
    if not only:
        return table
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    chosen = [c for c in table if any(fnmatch.fnmatch(c.id, p) or fnmatch.fnmatch(c.finding, p) for p in patterns)]
    unknown = [p for p in patterns if not any(fnmatch.fnmatch(c.id, p) or fnmatch.fnmatch(c.finding, p) for c in table)]
    if unknown:
        raise SystemExit(f"--only: no case matches {', '.join(unknown)} (--list shows the ids)")
    return chosen


def default_host() -> tuple[Path | None, str | None]:
    dirs = [p for p in os.environ.get("COMFYUI_DIRS", os.environ.get("COMFYUI_DIR", "")).split(os.pathsep) if p]
    if not dirs:
        return None, None
    return Path(dirs[0]), os.environ.get("H3KIT_HOST_PYTHON_0") or os.environ.get("COMFYUI_PYTHON") or sys.executable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", type=Path, help="a checkout of H3Kit (its folder is the package)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--only", help="comma-separated case ids, id patterns (loop-*) or finding ids (33.05)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--comfyui", type=Path, help="ComfyUI checkout for the comfyui and host cases "
                        "(default: the first of $COMFYUI_DIRS)")
    parser.add_argument("--comfyui-python", help="its Python (default: $H3KIT_HOST_PYTHON_0)")
    args = parser.parse_args()
    table = select(cases(), args.only)
    if args.list:
        for case in table:
            print(f"{case.id:34} {case.finding:6} {case.surface:8} {case.title}")
        return 0
    if args.pack is None:
        parser.error("--pack is required")
    comfyui, comfyui_python = default_host()
    ctx = Context(args.pack, args.comfyui or comfyui, args.comfyui_python or comfyui_python)
    os.environ["H3KIT_ATTACK_LINK"] = str(ctx.link)
    sys.path.insert(0, str(ctx.link))  # comfyui_host's client: the pack under test's
    results = []
    try:
        ctx.measure_baseline()
        print(f"pack {ctx.pack}; cli baseline {ctx.cli_baseline:.0f} MiB; ComfyUI {ctx.comfyui or 'none'}", flush=True)
        for case in table:
            started = time.monotonic()
            try:
                result = case.attack(ctx)
            except Exception as exc:  # noqa: BLE001 - a broken case is reported, the others still run
                result = Verdict("skip", f"the harness failed on this case: {type(exc).__name__}: {exc}")
            ended = result.ended
            row = {"id": case.id, "finding": case.finding, "surface": case.surface, "attack": case.title,
                   "verdict": result.verdict, "exit": ended.code if ended else None,
                   "seconds": round(time.monotonic() - started, 1),
                   "process_seconds": round(ended.seconds, 1) if ended else None,
                   "peak_mib": round(ended.peak_mib) if ended else None,
                   "baseline_mib": round(result.baseline_mib) if result.baseline_mib is not None else None,
                   **result.extra, "detail": result.detail[:300]}
            results.append(row)
            loop = f" loop {row['loop_max_ms']:,.0f} ms, server +{row['server_over_mib']} MiB" if "loop_max_ms" in row else ""
            print(f"{row['verdict']:9} {case.id:34} exit={row['exit']!s:5} {row['seconds']:6.1f} s "
                  f"peak={row['peak_mib']!s:>5} MiB{loop}  {row['detail'][:150]}", flush=True)
    finally:
        ctx.close()
    counts = {kind: sum(r["verdict"] == kind for r in results) for kind in VERDICTS}
    print(json.dumps({k: v for k, v in counts.items() if v}))
    if args.json:
        args.json.write_text(json.dumps({"pack": str(args.pack), "comfyui": str(ctx.comfyui), "results": results,
                                         "counts": counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
