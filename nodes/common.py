"""Shared vocabulary of every H3Kit node: errors that name the fix, and JSON reports (the logger: adapters/log.py).

Nothing here imports ComfyUI or touches CUDA, so every node module stays importable anywhere.
"""

from __future__ import annotations

import json
from typing import Any

from ..adapters.log import LOG, log_once
from ..checks.problem import printable

CATEGORY_ROOT = "H3Kit"


class H3KitInputError(ValueError):
    """A user-fixable input problem. The message names node, input, value and the fix, each escaped (a quoted
    name cannot start a line of ComfyUI's console); `problem` is one line, or a list of lines shown one per line."""

    def __init__(self, node: str, input_name: str, value: Any, problem: str | list[str], fix: str):
        self.node, self.input_name, self.value = node, input_name, value
        problem = printable(problem) if isinstance(problem, str) else "\n".join(map(printable, problem))
        self.problem, self.fix = problem, printable(fix)
        shown = _short_repr(value)
        super().__init__(f"{node}: input '{printable(input_name, 200)}' = {shown}: {problem}. Fix: {self.fix}")


def _short_repr(value: Any, limit: int = 120) -> str:
    return printable(repr(value), limit)


class Report:
    """Collects what a node did, warned about and fell back from; rendered as the node's report output."""

    def __init__(self, node: str):
        self.node = node
        self.facts: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.fallbacks: list[str] = []

    def set(self, **facts: Any) -> Report:
        self.facts.update(facts)
        return self

    def warn(self, message: str) -> None:
        message = printable(message)  # it may quote a file name or a prompt: one line in the report and the log
        self.warnings.append(message)
        LOG.warning("%s: %s", self.node, message)

    def fallback(self, key: str, message: str) -> None:
        """A degraded path was taken: always in the report, logged once per process per key."""
        message = printable(message)
        self.fallbacks.append(message)
        log_once(f"{self.node}:{key}", f"{self.node}: {message}")

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, **self.facts, "warnings": self.warnings, "fallbacks": self.fallbacks}

    def json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=False, default=str, allow_nan=True)


def category(area: str) -> str:
    return f"{CATEGORY_ROOT}/{area}"


def install_sampling_summary(patched: Any, key: str, wrapper: Any, report: Report) -> None:
    """Add an OUTER_SAMPLE wrapper (a per-sampling count summary) to a cloned patcher; a host without wrappers
    is a reported fallback (the node itself still works)."""
    from ..adapters.host import HostUnavailable, host_module

    try:
        wrappers = host_module("comfy.patcher_extension").WrappersMP
        patched.add_wrapper_with_key(wrappers.OUTER_SAMPLE, key, wrapper)
    except (HostUnavailable, AttributeError) as exc:
        report.fallback("no_wrapper", f"no per-sampling count summary in the log ({type(exc).__name__}: {exc}); "
                                      "the node still works")


INFERENCE_REBIND_KEY = "h3kit_inference_rebind"


def install_inference_rebind(model: Any, node: str, report: Report) -> Any:
    """A clone of `model` whose every load re-marks parameters a move outside inference mode left without a version
    counter (adapters/inference_tensors.py: ComfyUI's "Unload Models" under the legacy model patcher, then a partial
    load of LTX-2 AV). Weights and results are unchanged; a model that is no ComfyUI ModelPatcher is returned as is,
    a host without load callbacks is a reported fallback."""
    from ..adapters.host import HostUnavailable, host_module

    if not (hasattr(model, "clone") and hasattr(model, "add_callback_with_key")):
        report.set(inference_rebind="not installed: the model has no clone()/add_callback_with_key (not a ComfyUI "
                                    "ModelPatcher)")
        return model
    try:
        on_load = host_module("comfy.patcher_extension").CallbacksMP.ON_LOAD
    except (HostUnavailable, AttributeError) as exc:
        report.fallback("no_load_callback", f"no load callback on this ComfyUI ({type(exc).__name__}: {exc}): "
                                            "parameters are not re-marked after 'Unload Models'; use 'Free model and "
                                            "node cache' instead if a partially loaded LTX-2 block stops with "
                                            "'Inference tensors do not track version counter'")
        return model
    patched = model.clone()
    if hasattr(patched, "remove_callbacks_with_key"):
        patched.remove_callbacks_with_key(on_load, INFERENCE_REBIND_KEY)

    def rebind_on_load(patcher: Any, *_args: Any) -> None:
        from ..adapters.inference_tensors import rebind_as_inference

        done = rebind_as_inference(patcher.model)
        family = type(patcher.model).__name__
        if done.rebound:
            log_once(f"{node}:inference_rebind", f"{node}: {len(done.rebound)} parameters of {family} had been moved "
                     f"outside inference mode (ComfyUI's 'Unload Models' between prompts), e.g. {done.rebound[0]}; "
                     "re-marked as inference tensors over the same memory (no copy, values unchanged), so a partially "
                     "loaded block does not stop with 'Inference tensors do not track version counter'")
        if done.skipped:
            log_once(f"{node}:inference_rebind_skipped", f"{node}: {len(done.skipped)} parameters of {family} have "
                     f"no version counter and cannot be re-marked in place: {', '.join(done.skipped[:4])}. If sampling "
                     "stops with 'Inference tensors do not track version counter', use 'Free model and node cache' "
                     "instead of 'Unload Models'")
    patched.add_callback_with_key(on_load, INFERENCE_REBIND_KEY, rebind_on_load)
    report.set(inference_rebind="on every load of this model")
    return patched
