"""Planted-bug mutation run: does the test suite notice each known bug?

Each mutant in planted.py is (id, what it breaks, file, exact old text, new text, tests). The runner copies the
working tree (tracked + untracked-not-ignored files) to a temporary folder named `h3kit`, makes that copy the
importable `h3kit` package (PYTHONPATH, ahead of any editable install), checks the selected tests pass on the
unmodified copy, then applies one mutant at a time - the old text must occur exactly once, so a table that no
longer matches the code is an error, never a silent "survived" - runs the mutant's tests, and restores the file.

A mutant is KILLED when pytest reports failures (exit 1), SURVIVED when the tests pass (exit 0). Anything else
(collection error, no tests, timeout) is reported as such and counts as not killed.

    python tests/mutation/run_planted.py                  # all mutants, their own tests
    python tests/mutation/run_planted.py --suite          # ... and every survivor again against the whole suite
    python tests/mutation/run_planted.py --only M01 M05   # a few
    python tests/mutation/run_planted.py --list           # the table, nothing run
    python tests/mutation/run_planted.py --check          # only verify each old text occurs exactly once
    python tests/mutation/run_planted.py --sage-python /path/to/sage-venv/bin/python   # SageAttention mutants there

Mutants marked needs="sage" run their tests with --sage-python (a venv with sageattention==1.0.6 and
triton==3.2.0, like CI's sage job; comfy-kitchen's Triton backend cannot import in it without a GPU, so the
other mutants use this interpreter). A survivor whose tests skipped is flagged: a skip proves nothing.

Exit status: 0 every mutant killed, 1 a mutant survived or could not be judged, 2 the table or the baseline is wrong.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import run as run_process

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from planted import MUTANTS, Mutant  # noqa: E402

REPO = HERE.parent.parent
PYTEST = ["-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider"]
HOST_VARIABLES = ("COMFYUI_DIR", "COMFYUI_DIRS")  # tier b/c/d skip: the run judges the CI tier only


@dataclass
class Outcome:
    mutant: Mutant
    verdict: str  # killed | survived | error | timeout
    by: str
    seconds: float
    suite: str = ""  # for survivors with --suite: killed/survived by the whole tier-a suite


def occurrences(root: Path, mutant: Mutant) -> int:
    path = root / mutant.path
    return path.read_text(encoding="utf-8").count(mutant.old) if path.is_file() else 0


def stale(root: Path, mutants: list[Mutant]) -> list[str]:
    problems = []
    for m in mutants:
        count = occurrences(root, m)
        if count != 1:
            problems.append(f"{m.id}: the old text occurs {count} times in {m.path} (must be exactly once)")
        for test in m.tests:
            if not (root / test.split("::")[0]).exists():
                problems.append(f"{m.id}: test path {test} does not exist")
    return problems


def copy_tree(dest: Path) -> Path:
    """The working tree as git sees it (tracked + untracked, not ignored) under dest/h3kit."""
    listing = run_process(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=REPO, check=True, capture_output=True).stdout.decode()
    package = dest / "h3kit"
    for name in filter(None, listing.split("\0")):
        src = REPO / name
        if src.is_file():
            target = package / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return package


def environment(dest: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in HOST_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(dest), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_import(python: str, package: Path, env: dict[str, str]) -> None:
    found = run_process([python, "-c", "import h3kit; print(h3kit.__file__)"], cwd=package, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(package.resolve()):
        sys.exit(f"run_planted: `import h3kit` resolves to {found}, not the copy in {package}")


def failing_tests(output: str) -> str:
    names = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)
    return names[0] if names else ""


def run_tests(python: str, package: Path, env: dict[str, str], tests: list[str],
              timeout: float) -> tuple[int | None, str]:
    try:
        done = run_process([python, *PYTEST, *tests], cwd=package, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, ""
    return done.returncode, done.stdout + done.stderr


def judge(code: int | None, output: str) -> tuple[str, str]:
    if code is None:
        return "timeout", ""
    if code == 1:
        return "killed", failing_tests(output)
    if code == 0:
        skipped = re.search(r"(\d+) skipped", output)
        return "survived", f"({skipped.group(1)} tests skipped)" if skipped else ""
    tail = output.strip().splitlines()[-1:] or [""]
    return "error", f"pytest exit {code}: {tail[0][:120]}"


def run_mutant(python: str, package: Path, env: dict[str, str], mutant: Mutant, timeout: float,
               suite: bool) -> Outcome:
    path = package / mutant.path
    original = path.read_text(encoding="utf-8")
    path.write_text(original.replace(mutant.old, mutant.new, 1), encoding="utf-8")
    start = time.monotonic()
    try:
        verdict, by = judge(*run_tests(python, package, env, list(mutant.tests), timeout))
        outcome = Outcome(mutant, verdict, by, time.monotonic() - start)
        if suite and verdict == "survived":
            whole, whole_by = judge(*run_tests(python, package, env, ["tests"], timeout * 4))
            outcome.suite = f"{whole} {whole_by}".strip()
    finally:
        path.write_text(original, encoding="utf-8")
    return outcome


def table(outcomes: list[Outcome]) -> str:
    lines = ["| id | planted bug | file | verdict | killed by | s |", "|---|---|---|---|---|---:|"]
    for o in outcomes:
        verdict = o.verdict + (f" (whole suite: {o.suite})" if o.suite else "")
        lines.append(f"| {o.mutant.id} | {o.mutant.summary} | `{o.mutant.path}` | {verdict} | "
                     f"{'`' + o.by + '`' if o.by else '-'} | {o.seconds:.0f} |")
    killed = sum(o.verdict == "killed" or o.suite.startswith("killed") for o in outcomes)
    lines.append(f"\nMutation score: {killed}/{len(outcomes)} killed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="print the table of mutants and exit")
    parser.add_argument("--check", action="store_true", help="only check that every mutant still applies")
    parser.add_argument("--suite", action="store_true", help="re-run each survivor against the whole tier-a suite")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mutant's test run (default 600)")
    parser.add_argument("--markdown", type=Path, help="also write the result table to this file")
    parser.add_argument("--sage-python", default=sys.executable,
                        help="interpreter with sageattention 1.0.6 + Triton 3.2.0 for the needs='sage' mutants")
    args = parser.parse_args(argv)

    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    unknown = set(args.only or ()) - {m.id for m in MUTANTS}
    if unknown:
        print(f"run_planted: unknown mutant id(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutants:
            print(f"{m.id}  {m.path}: {m.summary}  [{' '.join(m.tests)}]")
        return 0
    problems = stale(REPO, mutants)
    if problems or args.check:
        print("\n".join(problems) or f"all {len(mutants)} mutants apply", file=sys.stderr if problems else sys.stdout)
        return 2 if problems else 0

    with tempfile.TemporaryDirectory(prefix="h3kit-mutation-") as tmp:
        package = copy_tree(Path(tmp))
        env = environment(Path(tmp))
        pythons = {m.id: args.sage_python if m.needs == "sage" else sys.executable for m in mutants}
        for python in sorted(set(pythons.values())):
            check_import(python, package, env)
            tests = sorted({t for m in mutants if pythons[m.id] == python for t in m.tests})
            code, output = run_tests(python, package, env, tests, args.timeout * 4)
            if code != 0:
                print(f"run_planted: the unmodified copy fails its tests with {python} (exit {code}):\n"
                      f"{output[-3000:]}", file=sys.stderr)
                return 2
        outcomes = []
        for m in mutants:
            outcome = run_mutant(pythons[m.id], package, env, m, args.timeout, args.suite)
            print(f"{m.id} {outcome.verdict:<8} {outcome.by or outcome.suite} ({outcome.seconds:.0f} s)", flush=True)
            outcomes.append(outcome)
    report = table(outcomes)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n", encoding="utf-8")
    return 0 if all(o.verdict == "killed" or o.suite.startswith("killed") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
