"""Checks of a running ComfyUI: version (F01), its torch build (F12), every node of a workflow registered
(F35), the model files it names present. The server is reached through adapters/comfy_client.py.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..adapters.comfy_client import ComfyClient, ComfyError
from ..adapters.host import host_loaded, parse_version
from .environment import cuda_major_from_torch_tag
from .facts import MIN_COMFYUI, MIN_KITCHEN, MIN_TORCH_CUDA_MAJOR, version_text
from .graph import nodes_of, well_formed
from .model_files import folder_name, how_to_get
from .problem import FAIL, PASS, WARN, Check
from .rules_files import model_inputs
from .rules_lints import is_refine, sigmas_of
from .schemas import core_document, core_since, providing_pack, unknown_node_advice

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


def native_h3_nodes() -> frozenset[str]:
    """The core MiniMax-H3 node ids (from the pinned ComfyUI 0.34 schemas): a host that has them has native H3."""
    return frozenset(name for name, info in core_document()["nodes"].items()
                     if "MiniMaxH3" in name and info.get("pack", "core") == "core")


def _running_host_node_ids() -> set[str] | None:
    """Inside ComfyUI: the ids its node registry holds (never imports ComfyUI). The installable fork's registry
    is a Mapping shim, not a dict (complete while a prompt runs, which is when the H3KitPreflight node asks)."""
    module = sys.modules.get("nodes") if host_loaded("nodes") else None
    mappings = getattr(module, "NODE_CLASS_MAPPINGS", None)
    return set(mappings) if isinstance(mappings, Mapping) else None


def comfyui_version_check(version: str | None, graph: dict | None,
                          node_ids: Iterable[str] | None = None) -> Check:
    """F01 and the core-version gate, from what the host can do (its node list: `node_ids`, or the running
    ComfyUI's registry) rather than its version number alone: forks number differently (0.12.1 has LTX-2 AV
    but no native H3). Only a host WITH native H3 that is older than 0.34 is the F01 stack."""
    ids = set(node_ids) if node_ids is not None else _running_host_node_ids()
    shown = version or "(no version reported)"
    if ids is not None and not ids & native_h3_nodes():
        lacking = sorted({n.get("class_type") for n in graph.values() if isinstance(n, dict)
                          and isinstance(n.get("class_type"), str) and core_since(n["class_type"])
                          and n["class_type"] not in ids}) if isinstance(graph, dict) else []
        if lacking:  # WARN: each of these FAILs under 'nodes' with the same update
            return Check(WARN, "comfyui version", f"ComfyUI {shown} lacks core nodes this workflow needs "
                         f"({', '.join(lacking)}; read from its node list): this ComfyUI is older than the workflow, "
                         f"which needs ComfyUI core >= {MINIMUM}", f"update ComfyUI to >= {MINIMUM}")
        return Check(PASS, "comfyui version", f"{shown}: no native MiniMax-H3 here (read from its node list), so the "
                     "F01 stack does not apply; graphs without H3 nodes (LTX, H3Kit's handoff) run")
    if not version:
        return Check(WARN, "comfyui version", "the server does not report a version (older than 0.3.x?)",
                     f"update ComfyUI to >= {MINIMUM}")
    if parse_version(version) >= MIN_COMFYUI:
        return Check(PASS, "comfyui version", f"{version} (>= {MINIMUM}: native H3 / LTX-2.5, correct two-stage refine)")
    message = (f"ComfyUI {version} has native H3 but is older than {MINIMUM}: the two-stage H3 -> LTX-2.5 refine "
               "produces black or noise frames with status 'success' on such stacks (F01)")
    fix = (f"update ComfyUI to >= {MINIMUM} together with comfy-kitchen {version_text(MIN_KITCHEN)} and Spectrum "
           "4783a22 (pip install -r requirements.txt, never with --upgrade)")
    if ids is None:
        message = message.replace("has native H3 but is older", "is older")
    if uses_two_stage_refine(graph):
        return Check(FAIL, "comfyui version", message + "; this workflow contains the two-stage refine", fix)
    if graph is not None:
        return Check(WARN, "comfyui version", message + "; this workflow has no refine stage", fix)
    return Check(WARN, "comfyui version", message + " (pass --workflow to check a specific graph)", fix)


def server_torch_check(torch_version: str, devices: Sequence[Any] | None = None) -> Check:
    """F12 on the server; only where it renders on a CUDA GPU (`devices` from /system_stats, None: unknown)."""
    major = cuda_major_from_torch_tag(torch_version)
    on_gpu = devices is None or any(isinstance(d, dict) and d.get("type") == "cuda" for d in devices)
    if not on_gpu:
        return Check(PASS, "server torch", f"{torch_version or 'unknown'} (the server renders on CPU: its CUDA build "
                     "does not matter there)")
    if major is not None and major < MIN_TORCH_CUDA_MAJOR:
        return Check(WARN, "server torch", f"{torch_version}: CUDA {major} build, kitchen's CUDA backend is off (F12)",
                     "install a cu130 torch in the server's environment")
    return Check(PASS, "server torch", torch_version or "unknown")


def missing_node_checks(graph: dict, available: Iterable[str], disabled: Disabled | None = None,
                        pack_of: Callable[[str], str | None] | None = None) -> list[Check]:
    """F35: every class_type the graph uses must be registered; each missing one gets one message: the pack
    that provides it, the ComfyUI core version that has it (this ComfyUI is older), or the node it misspells."""
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
        pack = pack_of(ct) if pack_of is not None else providing_pack(ct, disabled)
        message, fix = unknown_node_advice(ct, pack, have)
        checks.append(Check(FAIL, "nodes", f"node {', '.join(ids)}: {message} (F35)", fix, node_id=ids[0]))
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
                                f"check that models/{folder_name(folder)}/{filename} exists on the server"))
        elif filename not in files:
            listed = f"it has {len(files)} there: {', '.join(files)}" if files else "that folder is empty"
            checks.append(Check(FAIL, "model files", f"node {nid} ({ct}) {name} = '{filename}' is not in the "
                                f"server's models/{folder_name(folder)} ({listed})", how_to_get(filename, folder),
                                node_id=nid, input=name))
    if not checks:
        checks.append(Check(PASS, "model files", "every model file the workflow names is on the server"))
    return checks


def server_checks(client: ComfyClient, graph: dict | None, disabled: Disabled | None = None,
                  pack_of: Callable[[str], str | None] | None = None) -> tuple[list[Check], dict | None, int]:
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
    try:
        object_info = client.object_info()
    except ComfyError as exc:
        return [Check(PASS, "server", f"{client.server} answers /system_stats"),
                Check(FAIL, "server", str(exc), "check the server log")], None, exc.exit_code
    checks = [Check(PASS, "server", f"{client.server} answers; devices: {names or 'none reported'}"),
              comfyui_version_check(_text(system.get("comfyui_version")), graph, object_info),
              server_torch_check(_text(system.get("pytorch_version")) or "",
                                 devices if isinstance(devices, list) else None)]
    if graph is not None:
        checks += missing_node_checks(graph, object_info, disabled, pack_of)
        checks += model_file_checks(graph, object_info, client.get_json)
    return checks, object_info, 0


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
