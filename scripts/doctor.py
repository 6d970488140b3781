"""Check this machine, a ComfyUI server and a workflow for the traps that make runs slow or silently wrong.

Every check prints PASS, WARN or FAIL with the fix. Exit status 1 when any check FAILs, else 0.

  local            Python, torch and its CUDA build (F12), comfy-kitchen and its registry, GPU capability
                   and bf16, SageAttention vs the GPU (F28), Triton cache
  --server URL     ComfyUI version (F01), every node of --workflow registered (F35), model files present
  --workflow FILE  lints: refine sigma (F23), effect markers (F15), sampler/LoRA family (F27), sizes (F19),
                   frame counts (F20), Spectrum warmup (F16), safetensors headers (F13, with --models-dir)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..adapters.host import parse_version
from . import schemas as schema_src

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
MIN_COMFYUI = (0, 34, 0)
MIN_KITCHEN = (0, 2, 31)
MIN_TORCH_CUDA_MAJOR = 13
# Nodes that only exist in, or only make sense for, the H3 -> LTX two-stage refine (F01 gate).
TWO_STAGE_NODES = {"LTXVLatentUpsampler", "H3KitDraftToLTX", "H3KitRefineSetup",
                   "MiniMaxH3SolEngineDraftToLTXT8Advanced", "MiniMaxH3SolEngineLTXIdentityRefinerSetupT8Advanced"}


@dataclass
class Check:
    status: str
    name: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status}  {self.name}: {self.detail}"
        return text + (f"\n      fix: {self.fix}" if self.fix and self.status != PASS else "")


# --- package versions ---------------------------------------------------------------------------

def dist_version(*names: str) -> str | None:
    """Installed version of the first distribution found among `names` (no import)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def cuda_major(cuda_version: str | None) -> int | None:
    """'13.0' -> 13; None for CPU builds."""
    if not cuda_version:
        return None
    head = parse_version(cuda_version)
    return head[0] if head else None


def cuda_major_from_torch_tag(torch_version: str) -> int | None:
    """'2.13.0+cu130' -> 13, '2.11.0+cu128' -> 12; None for +cpu / +rocm / no tag."""
    match = re.search(r"\+cu(\d+)", torch_version or "")
    return int(match.group(1)) // 10 if match else None


# --- local checks -------------------------------------------------------------------------------

def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    return Check(PASS, "python", f"{version} ({sys.executable})")  # the package itself requires >= 3.10


def torch_cuda_check(torch_version: str, cuda_version: str | None) -> Check:
    major = cuda_major(cuda_version)
    if major is None:
        return Check(WARN, "torch", f"{torch_version} is a CPU-only build: nothing renders on a GPU here",
                     "on the render machine install a CUDA 13 build: pip install torch --index-url "
                     "https://download.pytorch.org/whl/cu130 (never upgrade ComfyUI's torch by accident)")
    if major < MIN_TORCH_CUDA_MAJOR:
        return Check(WARN, "torch", f"{torch_version} is built for CUDA {cuda_version}: ComfyUI disables "
                     "comfy-kitchen's CUDA backend below CUDA 13, so NVFP4 weights run without the FP4 GEMM "
                     "(measured 1.48x slower, F12)",
                     "install the cu130 torch build and the matching +cu130 SageAttention wheel")
    return Check(PASS, "torch", f"{torch_version}, CUDA {cuda_version} (>= 13: kitchen CUDA backend usable)")


def check_torch() -> tuple[Check, Any]:
    version = dist_version("torch")
    if version is None:
        return Check(FAIL, "torch", "not installed", "install the torch that ComfyUI uses"), None
    import torch  # the CLI may probe CUDA; importing the pack never does

    return torch_cuda_check(torch.__version__, torch.version.cuda), torch


def kitchen_registry_state(module: Any) -> dict[str, Any] | None:
    """What comfy_kitchen's backend registry says about the CUDA backend; None when its API is not recognised."""
    registry = getattr(module, "registry", None)
    if registry is None:
        return None
    state: dict[str, Any] = {}
    for attr in ("is_enabled", "is_backend_enabled"):
        fn = getattr(registry, attr, None)
        if callable(fn):
            state["cuda_enabled"] = bool(fn("cuda"))
            break
    else:
        for attr in ("disabled", "_disabled", "disabled_backends", "_disabled_backends"):
            disabled = getattr(registry, attr, None)
            if isinstance(disabled, (set, list, tuple, dict)):
                state["cuda_enabled"] = "cuda" not in disabled
                break
    names: set[str] = set()
    for attr in ("list_functions", "capabilities", "list_capabilities", "functions", "_functions", "_registry"):
        found = getattr(registry, attr, None)
        found = found() if callable(found) else found
        if isinstance(found, dict):
            names.update(map(str, found))
        elif isinstance(found, (list, tuple, set)):
            names.update(map(str, found))
        if names:
            break
    if names:
        state["capabilities"] = len(names)
        state["scaled_mm_nvfp4"] = any("scaled_mm_nvfp4" in n for n in names)
    return state or None


def kitchen_checks(version: str | None, registry: dict[str, Any] | None, registry_note: str = "") -> list[Check]:
    if version is None:
        return [Check(WARN, "comfy-kitchen", "not installed: ComfyUI >= 0.34 needs it for quantized (NVFP4/int8) weights",
                      "pip install comfy-kitchen==0.2.31 in ComfyUI's environment")]
    checks = []
    if parse_version(version) < MIN_KITCHEN:
        checks.append(Check(FAIL, "comfy-kitchen", f"{version} is older than 0.2.31: ComfyUI 0.34 does not import with it "
                            "(X07) and older stacks produce garbage two-stage refines (F01)",
                            "pip install comfy-kitchen==0.2.31 (together with ComfyUI 0.34.0)"))
    else:
        checks.append(Check(PASS, "comfy-kitchen", version))
    if registry is None:
        if registry_note:
            checks.append(Check(WARN, "kitchen registry", registry_note,
                                "check ComfyUI's startup log for the kitchen backend lines"))
        return checks
    problems = []
    if registry.get("cuda_enabled") is False:
        problems.append("the CUDA backend is disabled")
    if registry.get("scaled_mm_nvfp4") is False:
        problems.append("scaled_mm_nvfp4 is not registered (needs cuBLASLt 13 at runtime)")
    detail = ", ".join(f"{k}={v}" for k, v in registry.items())
    if problems:
        checks.append(Check(WARN, "kitchen registry", "; ".join(problems) + f" ({detail}): NVFP4 matmuls run eager (F12)",
                            "use a CUDA 13 torch build (cu130) so kitchen registers its CUDA FP4 GEMM"))
    else:
        checks.append(Check(PASS, "kitchen registry", detail))
    return checks


def check_kitchen() -> list[Check]:
    version = dist_version("comfy-kitchen", "comfy_kitchen", "comfy-kitchen-no-cuda")
    if version is None or importlib.util.find_spec("comfy_kitchen") is None:
        return kitchen_checks(version, None)
    try:
        import comfy_kitchen
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding (F36)
        return kitchen_checks(version, None, f"comfy_kitchen does not import: {type(exc).__name__}: {exc} (F36)")
    state = kitchen_registry_state(comfy_kitchen)
    note = "" if state else "comfy_kitchen.registry has no API this doctor recognises; registry not read"
    return kitchen_checks(version, state, note)


def gpu_check(capability: tuple[int, int] | None, name: str = "", bf16: bool | None = None) -> Check:
    if capability is None:
        return Check(WARN, "gpu", "no CUDA GPU visible to torch", "render on a machine with an NVIDIA GPU (CUDA 13 driver)")
    sm = f"sm_{capability[0]}{capability[1]}"
    if bf16 is None:
        bf16 = capability >= (8, 0)
    if not bf16:
        return Check(WARN, "gpu", f"{name} ({sm}) has no bf16: LTX-2.5 computes in fp32 there (F04/F05, slow) and "
                     "LTX int8-convrot gives all-NaN black video on sm_75 (F10)",
                     "use the Turing build (GGUF Q4_K_M refiner, fp16 VAEs, workflows/api/*turing*.json)")
    return Check(PASS, "gpu", f"{name} ({sm}), bf16 supported")


def sage_checks(sage: str | None, sage3: str | None, capability: tuple[int, int] | None,
                torch_cuda: int | None) -> list[Check]:
    checks = []
    sm = f"sm_{capability[0]}{capability[1]}" if capability else "unknown GPU"
    if sage is None:
        checks.append(Check(PASS, "sageattention", "not installed (optional; ComfyUI uses PyTorch attention)"))
    elif capability is None:
        checks.append(Check(PASS, "sageattention", f"{sage} (no GPU here to check it against)"))
    elif parse_version(sage) >= (2,) and capability < (8, 0):
        checks.append(Check(FAIL, "sageattention", f"{sage} needs sm_80+, this GPU is {sm}: 'Unsupported CUDA "
                            "architecture' (X08, F28)", "pip install sageattention==1.0.6 (the sm_75 build)"))
    elif parse_version(sage) < (2,) and capability >= (8, 0):
        checks.append(Check(WARN, "sageattention", f"{sage} on {sm}: the flag is accepted but gives no speedup (F28)",
                            "install SageAttention 2.x built for your torch (e.g. 2.2.0+cu130 with a cu130 torch)"))
    elif torch_cuda and torch_cuda >= 13 and "+" in sage and "cu13" not in sage:
        checks.append(Check(WARN, "sageattention", f"{sage} is not a +cu13x build but torch is CUDA {torch_cuda}",
                            "install the +cu130 SageAttention wheel that matches this torch"))
    else:
        note = " (sm_75: watch the log for 'out of resource: shared memory' fallbacks, F07)" if capability < (8, 0) else ""
        checks.append(Check(PASS, "sageattention", f"{sage} on {sm}{note}"))
    if sage3 is not None:
        checks.append(Check(WARN, "sageattn3", f"{sage3} is installed: a separate package that "
                            "--use-sage-attention never selects (F28)",
                            "for --use-sage-attention install sageattention 2.x; sageattn3 needs nodes that call it"))
    return checks


def triton_check(env: dict[str, str] | None = None) -> Check:
    env = os.environ if env is None else env
    version = dist_version("triton", "triton-windows")
    cache = Path(env.get("TRITON_CACHE_DIR") or Path(env.get("HOME", str(Path.home()))) / ".triton" / "cache")
    entries = sum(1 for _ in cache.iterdir()) if cache.is_dir() else 0
    where = f"cache {cache} ({entries} entries)" if cache.is_dir() else f"cache {cache} (not created yet)"
    if version is None:
        return Check(PASS, "triton", f"not installed (only SageAttention/Sol-Attn need it); {where}")
    return Check(PASS, "triton", f"{version}; {where}. After editing a kernel file clear this folder and __pycache__ (F09)")


def local_checks() -> list[Check]:
    checks = [check_python()]
    torch_check, torch = check_torch()
    checks.append(torch_check)
    checks += check_kitchen()
    capability, torch_cuda = None, None
    if torch is not None:
        torch_cuda = cuda_major(torch.version.cuda)
        if torch.cuda.is_available():
            capability = tuple(torch.cuda.get_device_capability(0))
            checks.append(gpu_check(capability, torch.cuda.get_device_name(0), torch.cuda.is_bf16_supported()))
        else:
            checks.append(gpu_check(None))
    checks += sage_checks(dist_version("sageattention"), dist_version("sageattn3"), capability, torch_cuda)
    checks.append(triton_check())
    return checks


# --- server checks ------------------------------------------------------------------------------

def uses_two_stage_refine(graph: dict | None) -> bool:
    if not isinstance(graph, dict):
        return False
    from .lints import is_refine, nodes_of, sigmas_of

    if any(isinstance(n, dict) and n.get("class_type") in TWO_STAGE_NODES for n in graph.values()):
        return True
    return any(is_refine(graph, s, sigmas_of(graph, s)[2]) for _, s in nodes_of(graph, "SamplerCustomAdvanced"))


def comfyui_version_check(version: str | None, graph: dict | None) -> Check:
    if not version:
        return Check(WARN, "comfyui version", "the server does not report a version (older than 0.3.x?)",
                     "update ComfyUI to >= 0.34.0")
    if parse_version(version) >= MIN_COMFYUI:
        return Check(PASS, "comfyui version", f"{version} (>= 0.34.0: native H3 / LTX-2.5, correct two-stage refine)")
    message = (f"ComfyUI {version} is older than 0.34.0: the two-stage H3 -> LTX-2.5 refine produces black or "
               "noise frames with status 'success' on older stacks (F01); 0.34.0 also brings native H3/LTX-2.5")
    fix = ("update ComfyUI to >= 0.34.0 together with comfy-kitchen 0.2.31 and Spectrum 4783a22 "
           "(pip install -r requirements.txt, never with --upgrade)")
    if uses_two_stage_refine(graph):
        return Check(FAIL, "comfyui version", message + "; this workflow contains the two-stage refine", fix)
    if graph is not None:
        return Check(WARN, "comfyui version", message + "; this workflow has no refine stage", fix)
    return Check(WARN, "comfyui version", message + " (pass --workflow to check a specific graph)", fix)


def server_torch_check(torch_version: str) -> Check:
    major = cuda_major_from_torch_tag(torch_version)
    if major is not None and major < MIN_TORCH_CUDA_MAJOR:
        return Check(WARN, "server torch", f"{torch_version}: CUDA {major} build, kitchen's CUDA backend is off (F12)",
                     "install a cu130 torch in the server's environment")
    return Check(PASS, "server torch", torch_version or "unknown")


def missing_node_checks(graph: dict, available: Iterable[str]) -> list[Check]:
    """F35: every class_type the graph uses must be registered; name the pack that provides each missing one."""
    have = set(available)
    missing: dict[str, list[str]] = {}
    for nid, node in graph.items():
        if isinstance(node, dict) and node.get("class_type") not in have:
            missing.setdefault(str(node.get("class_type")), []).append(str(nid))
    if not missing:
        return [Check(PASS, "nodes", f"all {len({n.get('class_type') for n in graph.values() if isinstance(n, dict)})} "
                      "node types of the workflow are registered")]
    checks = []
    for ct, ids in sorted(missing.items()):
        pack = schema_src.providing_pack(ct)
        fix = f"install {pack}, then restart ComfyUI" if pack else "install the custom node pack that provides it (or fix the name)"
        checks.append(Check(FAIL, "nodes", f"'{ct}' (node {', '.join(ids)}) is not registered on this server (F35)", fix))
    return checks


def server_model_list(server_schemas: dict, fetch: Callable[[str], Any], ct: str, name: str, folder: str) -> list[str] | None:
    """The file names the server offers for a loader input: its /object_info combo, else GET /models/<folder>."""
    info = server_schemas.get(ct, {}).get("input", {})
    spec = {**info.get("required", {}), **info.get("optional", {})}.get(name)
    if spec:
        head = spec[0]
        options = head if isinstance(head, list) else (spec[1].get("options") if len(spec) > 1 and isinstance(spec[1], dict) else None)
        if isinstance(options, list):
            return [str(o) for o in options]
    try:
        listed = fetch(f"/models/{folder}")
    except schema_src.ServerUnreachable:
        return None
    return [str(x) for x in listed] if isinstance(listed, list) else None


def model_file_checks(graph: dict, server_schemas: dict, fetch: Callable[[str], Any]) -> list[Check]:
    from .lints import model_inputs

    checks = []
    for nid, ct, name, folder, filename in model_inputs(graph, server_schemas):
        files = server_model_list(server_schemas, fetch, ct, name, folder)
        if files is None:
            checks.append(Check(WARN, "model files", f"cannot list the server's '{folder}' folder to find '{filename}'",
                                f"check that models/{folder}/{filename} exists on the server"))
        elif filename not in files:
            checks.append(Check(FAIL, "model files", f"node {nid} ({ct}) {name} = '{filename}' is not in the server's "
                                f"'{folder}' list ({len(files)} files)",
                                f"put the file into ComfyUI/models/{folder}/ and refresh (R in the UI) or restart"))
    if not checks:
        checks.append(Check(PASS, "model files", "every model file the workflow names is on the server"))
    return checks


def server_checks(server: str, graph: dict | None) -> tuple[list[Check], dict | None]:
    """(checks, the server's /object_info or None when unreachable)."""
    def fetch(route: str) -> Any:
        return schema_src.fetch_json(server, route)

    try:
        stats = fetch("/system_stats")
    except schema_src.ServerUnreachable as exc:
        return [Check(FAIL, "server", str(exc), "start ComfyUI or pass the right --server URL")], None
    system = stats.get("system", {}) if isinstance(stats, dict) else {}
    devices = ", ".join(str(d.get("name")) for d in stats.get("devices", [])) if isinstance(stats, dict) else ""
    checks = [Check(PASS, "server", f"{server} answers; devices: {devices or 'none reported'}"),
              comfyui_version_check(system.get("comfyui_version"), graph),
              server_torch_check(str(system.get("pytorch_version", "")))]
    try:
        object_info = fetch("/object_info")
    except schema_src.ServerUnreachable as exc:
        return checks + [Check(FAIL, "server", str(exc), "check the server log")], None
    if graph is not None:
        checks += missing_node_checks(graph, object_info)
        checks += model_file_checks(graph, object_info, fetch)
    return checks, object_info


# --- workflow checks ----------------------------------------------------------------------------

def default_models_dir(env: dict[str, str] | None = None) -> Path | None:
    env = os.environ if env is None else env
    if env.get("COMFYUI_DIR"):
        candidate = Path(env["COMFYUI_DIR"]) / "models"
        if candidate.is_dir():
            return candidate
    return None


def problem_check(problem: Any) -> Check:
    where = f"node {problem.node_id} ({problem.class_type})"
    if problem.input is not None:
        where += f" input '{problem.input}'"
    shown = "" if problem.value is None else f" [value: {json.dumps(problem.value, default=str)[:80]}]"
    status = FAIL if problem.severity == "error" else WARN
    return Check(status, "workflow", f"{where}: {problem.message}{shown}", problem.fix)


def workflow_checks(graph: Any, schemas: dict, locate: Callable[[str, str], Path | None] | None,
                    skip_inputs: set[tuple[str, str]] = frozenset(), on_server: bool = False,
                    schema_check: bool = True) -> list[Check]:
    """Schema validation, the validate RULES (grid rules and H3Kit lints) and, with `locate`, safetensors headers.

    schema_check=False when the host already validated the graph (the preflight node's own graph).
    """
    from . import lints, validate

    problems = validate.validate_graph(graph, schemas) if schema_check else []
    if validate.looks_like_ui_format(graph) or not isinstance(graph, dict):
        return [problem_check(p) for p in problems]
    # With a server, missing nodes (F35) and model files are checked on their own with clearer messages.
    problems = [p for p in problems if (p.node_id, p.input) not in skip_inputs
                and not (on_server and "unknown node type" in p.message)]
    rules = validate.graph_rules()
    for rule in lints.GRAPH_LINTS:
        if rule not in rules:
            rules.append(rule)
    if locate is not None:
        rules.append(lints.safetensors_lint(locate))
    problems += lints.run_lints(graph, schemas, rules)
    checks = [problem_check(p) for p in problems]
    if not checks:
        checks.append(Check(PASS, "workflow", f"{len(graph)} nodes: schema checks and lints found nothing"))
    if locate is None:
        checks.append(Check(PASS, "model headers", "not checked: no models folder (doctor --models-dir DIR, or inside ComfyUI) for the F13 header checks"))
    return checks


def load_graph(path: Path) -> tuple[Any, Check | None]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")), None
    except (OSError, json.JSONDecodeError) as exc:
        return None, Check(FAIL, "workflow", f"cannot read {path}: {exc}", "pass a readable API-format JSON file")


def model_input_keys(graph: dict, schemas: dict) -> set[tuple[str, str]]:
    from .lints import model_inputs

    return {(nid, name) for nid, _, name, _, _ in model_inputs(graph, schemas)}


# --- CLI ----------------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--server", help="a running ComfyUI, e.g. http://127.0.0.1:8188")
    parser.add_argument("--workflow", type=Path, help="an API-format workflow JSON to lint (offline or with --server)")
    parser.add_argument("--models-dir", type=Path,
                        help="ComfyUI's models/ folder, to read the safetensors headers of the files the workflow "
                             "names (default: $COMFYUI_DIR/models when it exists)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument("--no-local", action="store_true", help="skip the checks of this machine's packages and GPU")
    parser.epilog = "exit status: 0 no FAIL, 1 at least one FAIL"


def collect(args: argparse.Namespace) -> list[Check]:
    checks: list[Check] = [] if args.no_local else local_checks()
    graph = None
    if args.workflow:
        graph, error = load_graph(args.workflow)
        if error:
            return checks + [error]
    object_info = None
    if args.server:
        server_part, object_info = server_checks(args.server, graph)
        checks += server_part
    if graph is not None:
        schemas = object_info if object_info is not None else schema_src.offline_schemas()
        models_dir = args.models_dir or default_models_dir()
        from .lints import folder_locator

        locate = folder_locator(models_dir) if models_dir else None
        skip = model_input_keys(graph, schemas) if object_info is not None and isinstance(graph, dict) else set()
        checks += workflow_checks(graph, schemas, locate, skip, on_server=object_info is not None)
    return checks


def run(args: argparse.Namespace) -> int:
    checks = collect(args)
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    if args.json:
        print(json.dumps({"checks": [asdict(c) for c in checks], "fail": failed, "warn": warned}, indent=2))
    else:
        for check in checks:
            print(check.line())
        print(f"\n{failed} FAIL, {warned} WARN, {len(checks) - failed - warned} PASS")
    return 1 if failed else 0
