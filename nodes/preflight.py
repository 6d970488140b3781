"""H3KitPreflight: `python -m h3kit doctor` inside a graph, so a run that would fail silently says so first.

Drop it anywhere in a workflow (no wires needed). It has no linked inputs, so ComfyUI runs it before any
loader or sampler, and it checks the graph it sits in (or a pasted API-format workflow): the workflow
lints (F15, F16, F19, F20, F23, F27), safetensors headers of the model files (F13/F14) and, optionally,
this ComfyUI's version (F01), torch CUDA build (F12), comfy-kitchen, GPU/bf16 and SageAttention (F28).
"""

from __future__ import annotations

from typing import Any

from ..adapters.bounded_json import JSONLimitError
from ..adapters.model_folders import host_files
from ..adapters.server_routes import check_item
from ..adapters.workflow_file import parse_graph_json
from ..checks import environment, schemas, server
from ..checks.problem import FAIL, WARN, Check
from ..checks.workflow import preflight_checks
from .common import H3KitInputError, Report, category

NODE_ID = "H3KitPreflight"


def host_node_ids() -> set[str] | None:
    from ..adapters.host import host_loaded, host_module

    return set(host_module("nodes").NODE_CLASS_MAPPINGS) if host_loaded("nodes") else None


def parse_workflow(text: str) -> dict:
    try:
        graph = parse_graph_json(text, "the pasted workflow")
    except JSONLimitError as exc:
        raise H3KitInputError(NODE_ID, "workflow_json", text, str(exc),
                              "paste an API-format workflow (Export (API)), or leave it empty to check this graph") from exc
    if not isinstance(graph, dict) or not graph:
        raise H3KitInputError(NODE_ID, "workflow_json", text, "not an API-format graph (a JSON object of nodes)",
                              "paste an API-format workflow (Export (API)), or leave it empty to check this graph")
    return graph


def pack_schemas() -> dict:
    """The pinned ComfyUI schemas with this pack's own nodes (checks/ never imports nodes/: we pass them)."""
    from . import NODE_CLASS_MAPPINGS

    return schemas.offline_schemas(NODE_CLASS_MAPPINGS)


def graph_checks(graph: dict, pasted: bool) -> list[Check]:
    """ComfyUI validated its own prompt against this host's schemas (schema_check off); a pasted one is
    checked against the pinned schemas, plus this host's node list and model folders."""
    from . import DISABLED_NODES, pack_of

    _, checks = preflight_checks(graph, pack_schemas(), host_files(), host_node_ids(), DISABLED_NODES,
                                 schema_check=pasted, pack_of=pack_of, ignore=NODE_ID)
    return checks


def environment_checks(graph: dict) -> list[Check]:
    from ..adapters.host import comfyui_version, render_devices, running_host_node_ids

    version = comfyui_version()
    checks = environment.local_checks(version, render_devices())
    if version is not None:
        checks.append(server.comfyui_version_check(version, graph, running_host_node_ids(),
                                                   environment.kitchen_version()))
    return checks


class H3KitPreflight:
    DISPLAY_NAME = "H3Kit Preflight (doctor)"
    CATEGORY = category("Diagnostics")
    DESCRIPTION = (
        "Checks the workflow it sits in before anything heavy runs: refine first sigma (F23), effect-marker "
        "placement (F15), sampler/LoRA family (F27), sizes and frame grids (F19, F20), Spectrum warmup (F16), "
        "safetensors headers of the model files (F13), and this ComfyUI's version, torch CUDA build, kitchen, "
        "GPU and SageAttention. Needs no wires; ComfyUI runs it first. strict stops the run on any FAIL."
    )
    FUNCTION = "execute"
    RETURN_TYPES = ("STRING",)
    RETURN_NAMES = ("report",)
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls) -> dict:
        return {
            "required": {
                "strict": ("BOOLEAN", {"default": False, "tooltip":
                           "On: stop the run with an error when any check FAILs (warnings never stop it). "
                           "Off: only report."}),
                "check_environment": ("BOOLEAN", {"default": True, "tooltip":
                                      "Also check this ComfyUI's version (F01), torch CUDA build (F12), comfy-kitchen, "
                                      "GPU/bf16 and SageAttention vs the GPU (F28)."}),
            },
            "optional": {
                "workflow_json": ("STRING", {"default": "", "multiline": True, "tooltip":
                                  "Leave empty to check the graph this node sits in. Or paste an API-format workflow "
                                  "(Export (API)) to check that one, including missing nodes and model files."}),
            },
            "hidden": {"prompt": "PROMPT", "unique_id": "UNIQUE_ID"},
        }

    @classmethod
    def IS_CHANGED(cls, **kwargs: Any) -> float:
        # The graph around it is a hidden input ComfyUI does not hash: always re-check, it is cheap.
        return float("nan")

    def execute(self, strict: bool = False, check_environment: bool = True, workflow_json: str = "",
                prompt: dict | None = None, unique_id: Any = None) -> dict:
        pasted = bool(workflow_json and workflow_json.strip())
        if pasted:
            graph = parse_workflow(workflow_json)
        elif isinstance(prompt, dict):
            graph = prompt
        else:
            raise H3KitInputError(NODE_ID, "workflow_json", workflow_json, "empty, and ComfyUI passed no graph",
                                  "paste an API-format workflow to check")
        checks = (environment_checks(graph) if check_environment else []) + graph_checks(graph, pasted)
        failed = [c for c in checks if c.status == FAIL]
        report = Report(NODE_ID)
        report.set(source="workflow_json" if pasted else "this graph", nodes=len(graph),
                   fail=len(failed), warn=sum(c.status == WARN for c in checks),
                   checks=[check_item(c) for c in checks])  # as the editor's route lists them
        for check in checks:
            if check.status in (WARN, FAIL):
                report.warn(f"{check.status} {check.name}: {check.detail}")
        if strict and failed:
            raise H3KitInputError(NODE_ID, "strict", True, f"{len(failed)} preflight check(s) failed: " +
                                  " | ".join(f"{c.detail} (fix: {c.fix})" for c in failed),
                                  "fix the listed problems, or turn strict off to run anyway")
        text = report.json()
        summary = "\n".join(c.line() for c in checks)
        return {"ui": {"text": [summary]}, "result": (text,)}


NODES = [H3KitPreflight]
