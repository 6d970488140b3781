"""Checks of a running ComfyUI: version (F01), its torch build (F12), every node of a workflow registered
(F35), the model files it names present. Pure: judged from the server's answers, which adapters/server_probe.py
reads through the client (adapters/comfy_client.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .deadline import check_time
from .environment import cuda_major_from_torch_tag, renders_on_cuda
from .facts import (
    F01_CORRECT_STACK,
    F01_GARBAGE_STACK,
    MIN_COMFYUI,
    MIN_KITCHEN,
    MIN_TORCH_CUDA_MAJOR,
    parse_version,
    version_text,
)
from .graph import nodes_of, upstream_of_inputs, well_formed
from .model_files import FOLDER_TABLE_ROUTES, folder_name, folder_table, how_to_get, served_folders
from .problem import FAIL, PASS, WARN, Check
from .rules_files import model_inputs
from .rules_lints import SAMPLER_NODES, is_refine, sigmas_of
from .schemas import core_document, core_since, providing_pack, unknown_node_advice

GUARD_NODE = "H3KitLatentGuard"  # with a 'reference', its correlation check stops a garbage refine (F01)
MINIMUM = version_text(MIN_COMFYUI)
Disabled = Mapping[str, Sequence[str]]


def native_h3_nodes() -> frozenset[str]:
    """The core MiniMax-H3 node ids (from the pinned schemas): a host that serves one has native H3."""
    return frozenset(name for name, info in core_document()["nodes"].items()
                     if "MiniMaxH3" in name and info.get("pack", "core") == "core")


def refine_guard_state(graph: dict | None) -> tuple[list[str], list[str]]:
    """(refine sampler ids, those whose output an H3KitLatentGuard with a 'reference' checks): the F01 guard
    correlates the refine output with the latent it started from and stops the run on a garbage refine."""
    if not isinstance(graph, dict):
        return [], []
    shaped = well_formed(graph)
    refines = [sid for sid, s in nodes_of(shaped, *SAMPLER_NODES) if is_refine(shaped, s, sigmas_of(shaped, s)[2])]
    guarded = set()
    for _, guard in nodes_of(shaped, GUARD_NODE):
        if "reference" in guard.get("inputs", {}):
            guarded |= set(upstream_of_inputs(shaped, guard, ("latent",)))
    return refines, [sid for sid in refines if sid in guarded]


def f01_stack_position(version: str | None, kitchen: str | None) -> str:
    """Where a native-H3 host stands against the field report's two data points (facts.F01_*_STACK)."""
    (good_ui, good_kit), (bad_ui, bad_kit) = F01_CORRECT_STACK, F01_GARBAGE_STACK
    comfy, kit = parse_version(version) if version else None, parse_version(kitchen) if kitchen else None
    if comfy and comfy >= good_ui and (kit is None or kit >= good_kit):
        return "correct"
    if comfy and comfy <= bad_ui and kit is not None and kit <= bad_kit:
        return "garbage"
    return "untested"


F01_EVIDENCE = (f"the field report's two data points for the two-stage refine (F01): correct on ComfyUI "
                f"{version_text(F01_CORRECT_STACK[0])} + comfy-kitchen {version_text(F01_CORRECT_STACK[1])}, black or "
                f"noise frames with status 'success' on {version_text(F01_GARBAGE_STACK[0])} + "
                f"{version_text(F01_GARBAGE_STACK[1])}")
GUARD_FIX = (f"put {GUARD_NODE} after the refine sampler with 'reference' = the latent the refine starts from "
             "(LTXVLatentUpsampler's output) and mode 'error', as the shipped two-stage graphs do")


def comfyui_version_check(version: str | None, graph: dict | None, node_ids: Iterable[str] | None = None,
                          kitchen: str | None = None) -> Check:
    """F01 decided from evidence, not a version number: the one rule doctor, validate --server, run, the
    H3KitPreflight node and the editor's route apply. A host's capability is read from its node list (`node_ids`, or
    the running ComfyUI's registry): forks number differently (0.12.1 has LTX-2 AV, no native H3). A host that
    serves native H3 is never FAILed for its version: the check states where its stack stands against the two
    data points (`kitchen`: its comfy-kitchen version where known, inside ComfyUI) and whether the workflow's
    refine is guarded by H3KitLatentGuard's correlation check, which stops a garbage refine at run time.
    `node_ids` None: the node list was not read (the check then cannot tell whether the host serves native H3)."""
    ids = set(node_ids) if node_ids is not None else None
    shown = version or "(no version reported)"
    if ids is not None and not ids & native_h3_nodes():
        lacking = sorted({n.get("class_type") for n in graph.values() if isinstance(n, dict)
                          and isinstance(n.get("class_type"), str) and core_since(n["class_type"])
                          and n["class_type"] not in ids}) if isinstance(graph, dict) else []
        if lacking:  # WARN: each of these FAILs under 'nodes' with the same update
            needed = max((core_since(ct) or "0" for ct in lacking), key=parse_version)
            return Check(WARN, "comfyui version", f"ComfyUI {shown} lacks core nodes this workflow needs "
                         f"({', '.join(lacking)}; read from its node list): this ComfyUI is older than the workflow "
                         f"(ComfyUI {needed} serves them)", f"update ComfyUI to {needed} or later")
        return Check(PASS, "comfyui version", f"{shown}: no native MiniMax-H3 here (read from its node list), so the "
                     "F01 stack does not apply; graphs without H3 nodes (LTX, H3Kit's handoff) run")
    stack = f"ComfyUI {shown}" + (f" with comfy-kitchen {kitchen}" if kitchen else "")
    served = "serves native MiniMax-H3" if ids is not None else "(node list not read)"
    position = f01_stack_position(version, kitchen)
    where = {"correct": "this stack is at or past the correct one",
             "garbage": "this is the stack that produced garbage",
             "untested": "this stack is covered by neither"}[position]
    text = f"{stack} {served}; {F01_EVIDENCE}; {where}"
    refines, guarded = refine_guard_state(graph)
    if graph is None:
        if position == "garbage":
            return Check(WARN, "comfyui version", text, _update_fix())
        return Check(PASS, "comfyui version", f"{text}. A two-stage graph is safe here with {GUARD_NODE} checking "
                     "its refine (the shipped ones do; pass --workflow to check yours)")
    if not refines:
        return Check(PASS, "comfyui version", f"{text}; this workflow has no refine stage, so F01 does not apply")
    unguarded = [sid for sid in refines if sid not in guarded]
    if not unguarded:
        guard = f"{GUARD_NODE} checks the refine output of node(s) {', '.join(guarded)} and stops a garbage refine"
        if position == "garbage":
            return Check(WARN, "comfyui version", f"{text}; {guard}, so expect this run to stop there",
                         _update_fix())
        return Check(PASS, "comfyui version", f"{text}; {guard}")
    if position == "correct":
        return Check(PASS, "comfyui version", f"{text}; refine node(s) {', '.join(unguarded)} run without "
                     f"{GUARD_NODE} (recommended anyway)")
    return Check(WARN, "comfyui version", f"{text}; nothing in this workflow checks the output of refine node(s) "
                 f"{', '.join(unguarded)}, so a garbage refine would render with status 'success'", GUARD_FIX,
                 node_id=unguarded[0])


def _update_fix() -> str:
    return (f"update ComfyUI to >= {MINIMUM} together with comfy-kitchen {version_text(MIN_KITCHEN)} and Spectrum "
            "4783a22 (pip install -r requirements.txt, never with --upgrade); keep H3KitLatentGuard after the refine")


def server_torch_check(torch_version: str, devices: Sequence[Any] | None = None) -> Check:
    """F12 on the server; only where it renders on a CUDA GPU (`devices` from /system_stats, None: unknown)."""
    major = cuda_major_from_torch_tag(torch_version)
    if not renders_on_cuda(devices):  # the rule the editor's preflight applies on the server itself
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
        check_time("looking for the workflow's node types")
        pack = pack_of(ct) if pack_of is not None else providing_pack(ct, disabled)
        message, fix = unknown_node_advice(ct, pack, have)
        checks.append(Check(FAIL, "nodes", f"node {', '.join(ids)}: {message} (F35)", fix, node_id=ids[0]))
    return checks


def server_model_list(server_schemas: dict, fetch: Callable[[str], Any], ct: str, name: str, folder: str) -> list[str] | None:
    """The file names the server offers for a loader input: its /object_info combo, else GET /models/<folder>
    (`fetch`: the server's JSON answer for a route, None when it cannot be read)."""
    info = server_schemas.get(ct, {}).get("input", {})
    spec = {**info.get("required", {}), **info.get("optional", {})}.get(name)
    if spec:
        head = spec[0]
        options = head if isinstance(head, list) else (spec[1].get("options") if len(spec) > 1 and isinstance(spec[1], dict) else None)
        if isinstance(options, list):
            return [str(o) for o in options]
    listed = fetch(f"/models/{folder}")
    return [str(x) for x in listed] if isinstance(listed, list) else None


def server_folder_table(fetch: Callable[[str], Any]) -> dict[str, list[str]]:
    """The server's model folders by key ({} when it serves no folder table)."""
    return next((table for route in FOLDER_TABLE_ROUTES if (table := folder_table(fetch(route)))), {})


def model_file_checks(graph: dict, server_schemas: dict, fetch: Callable[[str], Any]) -> list[Check]:
    checks = []
    table: dict[str, list[str]] | None = None  # the server's folders: asked once, when a file is missing
    for nid, ct, name, folder, filename in model_inputs(graph, server_schemas):
        check_time("looking for the workflow's model files")
        files = server_model_list(server_schemas, fetch, ct, name, folder)
        if files is None:
            checks.append(Check(WARN, "model files", f"cannot list the server's '{folder}' folder to find '{filename}'",
                                f"check that models/{folder_name(folder)}/{filename} exists on the server"))
        elif filename not in files:
            table = server_folder_table(fetch) if table is None else table
            into = next(iter(served_folders(table, folder)), None)
            listed = f"it has {len(files)} there: {', '.join(files)}" if files else "that folder is empty"
            checks.append(Check(FAIL, "model files", f"node {nid} ({ct}) {name} = '{filename}' is not in the "
                                f"server's models/{folder_name(folder)} ({listed})",
                                how_to_get(filename, folder, into), node_id=nid, input=name))
    if not checks:
        checks.append(Check(PASS, "model files", "every model file the workflow names is on the server"))
    return checks


def host_checks(server: str, stats: Any, object_info: dict, graph: dict | None, fetch: Callable[[str], Any],
                disabled: Disabled | None = None, pack_of: Callable[[str], str | None] | None = None) -> list[Check]:
    """doctor --server's checks of one host, from its answers: /system_stats (`stats`), /object_info, and `fetch`
    for further routes (None when one cannot be read). adapters/server_probe.py asks the server."""
    graph = None if graph is None else well_formed(graph)  # malformed nodes are the workflow checks' to report
    system = stats.get("system", {}) if isinstance(stats, dict) else {}
    system = system if isinstance(system, dict) else {}
    devices = stats.get("devices", []) if isinstance(stats, dict) else []
    names = ", ".join(str(d.get("name")) for d in devices if isinstance(d, dict)) if isinstance(devices, list) else ""
    checks = [Check(PASS, "server", f"{server} answers; devices: {names or 'none reported'}"),
              comfyui_version_check(reported_version(stats), graph, object_info),
              server_torch_check(_text(system.get("pytorch_version")) or "",
                                 devices if isinstance(devices, list) else None)]
    if graph is not None:
        checks += missing_node_checks(graph, object_info, disabled, pack_of)
        checks += model_file_checks(graph, object_info, fetch)
    return checks


def reported_version(stats: Any) -> str | None:
    """The ComfyUI version a /system_stats answer reports, or None."""
    system = stats.get("system", {}) if isinstance(stats, dict) else {}
    return _text(system.get("comfyui_version")) if isinstance(system, dict) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
