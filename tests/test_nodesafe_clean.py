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
