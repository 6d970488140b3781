"""Issue 14: ComfyUI-node scanners (nodesafe 0.6) call a pack `malicious` on one literal high-severity pattern
anywhere in its text files, tests included. H3Kit writes such calls as plain imports (`from re import compile
as regex`, `from subprocess import run as run_process`, ...) so the scanner sees constants, not dynamic code;
this test keeps it that way without installing the scanner. The patterns are assembled at run time so this
file does not match them itself. docs/security.md records the scanner's own verdict."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED_SUFFIXES = {".py", ".txt", ".toml", ".md", ".yaml", ".yml", ".json"}
SKIPPED_PARTS = {".git", "__pycache__", ".venv", "venv", "node_modules"}
CALLS = ["eval", "exec", "compile", "__import__", "execfile", "os.system", "os.popen"]
NAMES = [("importlib", "import_module"), ("subprocess", "run"), ("subprocess", "Popen"), ("subprocess", "call"),
         ("subprocess", "check_call"), ("subprocess", "check_output"), ("subprocess", "getoutput"),
         ("os", "execv"), ("os", "spawnl"), ("os", "spawnv"), ("pty", "spawn"), ("base64", "b64decode"),
         ("base64", "decodebytes"), ("base64", "urlsafe_b64decode"), ("base64", "b32decode"), ("base64", "b16decode"),
         ("base64", "a85decode"), ("codecs", "decode"), ("binascii", "unhexlify"), ("binascii", "a2b_hex"),
         ("bytes", "fromhex"), ("marshal", "loads"), ("pickle", "loads"), ("pickle", "Unpickler"),
         ("cloudpickle", "loads"), ("dill", "loads"), ("zlib", "decompress"), ("lzma", "decompress"),
         ("gzip", "decompress")]
OTHERS = ["shell" + "=True", "globals" + "()[", "locals" + "()["]
PATTERNS = [name + "(" for name in CALLS] + [".".join(pair) for pair in NAMES] + OTHERS


def scanned_files() -> list[Path]:
    return [path for path in ROOT.rglob("*") if path.is_file() and path.suffix in SCANNED_SUFFIXES
            and not SKIPPED_PARTS & set(path.relative_to(ROOT).parts)]


def test_no_high_severity_scanner_pattern_in_the_pack():
    found = []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="ignore")
        for pattern in PATTERNS:
            if pattern in text:
                line = text[: text.index(pattern)].count("\n") + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {pattern}")
    assert found == [], "write these as plain imports (see docs/security.md, 'Scanner'):\n" + "\n".join(found)


# nodesafe 0.6's aggregate score (its layer 5) turns high at 0.60 from counts over every .py file: each run of 100+
# characters of the base64 alphabet adds 0.08 (at most 0.25; a long "# -----" separator is one), three or more imports
# of pickle-family modules 0.15 (one or two: 0.07); dynamic getattr and network calls, which the pack needs, add 0.20.
BASE64_RUN = 100
PICKLE_FAMILY = {"pickle", "marshal", "cloudpickle", "dill", "ctypes", "_ctypes", "winreg"}
MAX_PICKLE_FAMILY_IMPORTS = 2  # scripts/cond.py (the exception type of `cond import`) and the planted-payload tests


def _python_files() -> list[Path]:
    return [path for path in scanned_files() if path.suffix == ".py"]


def test_no_base64_looking_run_in_python_files():
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")
    found = []
    for path in _python_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="ignore").splitlines(), 1):
            run = 0
            for char in line:
                run = run + 1 if char in alphabet else 0
                if run >= BASE64_RUN:
                    found.append(f"{path.relative_to(ROOT)}:{number}")
                    break
    assert found == [], "shorten these (a scanner reads them as encoded payloads):\n" + "\n".join(found)


def test_pickle_family_imports_stay_few():
    found = []
    for path in _python_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="ignore").splitlines(), 1):
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from") and words[1].split(".")[0] in PICKLE_FAMILY:
                found.append(f"{path.relative_to(ROOT)}:{number}")
    assert len(found) <= MAX_PICKLE_FAMILY_IMPORTS, found
