"""Checks of a running ComfyUI: version (F01), its torch build (F12), every node of a workflow registered
(F35), the model files it names present. The server is reached through adapters/comfy_client.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..adapters.comfy_client import ComfyClient, ComfyError
from ..adapters.host import parse_version
from .environment import cuda_major_from_torch_tag
from .facts import MIN_COMFYUI, MIN_KITCHEN, MIN_TORCH_CUDA_MAJOR, version_text
from .graph import nodes_of, well_formed
from .problem import FAIL, PASS, WARN, Check
from .rules_files import model_inputs
from .rules_lints import is_refine, sigmas_of
from .schemas import providing_pack

# Nodes that only exist in, or only make sense for, the H3 -> LTX two-stage refine (F01 gate).
# The handoff alone (H3KitDraftToLTX without a refine after it) is not gated: it renders right on any host.
TWO_STAGE_NODES = {"LTXVLatentUpsampler", "H3KitRefineSetup", "MiniMaxH3SolEngineLTXIdentityRefinerSetupT8Advanced"}

MINIMUM = version_text(MIN_COMFYUI)
Disabled = Mapping[str, Sequence[str]]


def uses_two_stage_refine(graph: dict | None) -> bool:
    if not isinstance(graph, dict):
        return False
    if any(isinstance(n, dict) and n.get("class_type") in TWO_STAGE_NODES for n in graph.values()):
        return True
    return any(is_refine(graph, s, sigmas_of(graph, s)[2]) for _, s in nodes_of(graph, "SamplerCustomAdvanced"))


def comfyui_version_check(version: str | None, graph: dict | None) -> Check:
    if not version:
        return Check(WARN, "comfyui version", "the server does not report a version (older than 0.3.x?)",
                     f"update ComfyUI to >= {MINIMUM}")
    if parse_version(version) >= MIN_COMFYUI:
        return Check(PASS, "comfyui version", f"{version} (>= {MINIMUM}: native H3 / LTX-2.5, correct two-stage refine)")
    message = (f"ComfyUI {version} is older than {MINIMUM}: the two-stage H3 -> LTX-2.5 refine produces black or "
               f"noise frames with status 'success' on older stacks (F01); {MINIMUM} also brings native H3/LTX-2.5")
    fix = (f"update ComfyUI to >= {MINIMUM} together with comfy-kitchen {version_text(MIN_KITCHEN)} and Spectrum "
           "4783a22 (pip install -r requirements.txt, never with --upgrade)")
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


def missing_node_checks(graph: dict, available: Iterable[str], disabled: Disabled | None = None) -> list[Check]:
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
        pack = providing_pack(ct, disabled)
        fix = f"install {pack}, then restart ComfyUI" if pack else "install the custom node pack that provides it (or fix the name)"
        checks.append(Check(FAIL, "nodes", f"'{ct}' (node {', '.join(ids)}) is not registered on this server (F35)", fix,
                            node_id=ids[0]))
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
    except ComfyError:
        return None
    return [str(x) for x in listed] if isinstance(listed, list) else None


def model_file_checks(graph: dict, server_schemas: dict, fetch: Callable[[str], Any]) -> list[Check]:
    checks = []
    for nid, ct, name, folder, filename in model_inputs(graph, server_schemas):
        files = server_model_list(server_schemas, fetch, ct, name, folder)
        if files is None:
            checks.append(Check(WARN, "model files", f"cannot list the server's '{folder}' folder to find '{filename}'",
                                f"check that models/{folder}/{filename} exists on the server"))
        elif filename not in files:
            checks.append(Check(FAIL, "model files", f"node {nid} ({ct}) {name} = '{filename}' is not in the server's "
                                f"'{folder}' list ({len(files)} files)",
                                f"put the file into ComfyUI/models/{folder}/ and refresh (R in the UI) or restart",
                                node_id=nid, input=name))
    if not checks:
        checks.append(Check(PASS, "model files", "every model file the workflow names is on the server"))
    return checks


def server_checks(client: ComfyClient, graph: dict | None,
                  disabled: Disabled | None = None) -> tuple[list[Check], dict | None, int]:
    """(checks, the server's /object_info or None, exit code of the connection: 0, or 3/4/1 from the client)."""
    graph = None if graph is None else well_formed(graph)  # malformed nodes are the workflow checks' to report
    try:
        stats = client.get_json("/system_stats")
    except ComfyError as exc:
        return [Check(FAIL, "server", str(exc), "start ComfyUI or pass the right --server URL")], None, exc.exit_code
    system = stats.get("system", {}) if isinstance(stats, dict) else {}
    system = system if isinstance(system, dict) else {}
    devices = stats.get("devices", []) if isinstance(stats, dict) else []
    names = ", ".join(str(d.get("name")) for d in devices if isinstance(d, dict)) if isinstance(devices, list) else ""
    checks = [Check(PASS, "server", f"{client.server} answers; devices: {names or 'none reported'}"),
              comfyui_version_check(_text(system.get("comfyui_version")), graph),
              server_torch_check(_text(system.get("pytorch_version")) or "")]
    try:
        object_info = client.object_info()
    except ComfyError as exc:
        return checks + [Check(FAIL, "server", str(exc), "check the server log")], None, exc.exit_code
    if graph is not None:
        checks += missing_node_checks(graph, object_info, disabled)
        checks += model_file_checks(graph, object_info, client.get_json)
    return checks, object_info, 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
