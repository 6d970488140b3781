"""One graph, one verdict: the function every entry point reaches its verdict through.

`doctor` (offline and `--server`), `validate` (offline and `--server`), `run` (before it queues), the editor's
preflight route and the H3KitPreflight node all call `judge(graph, schemas)`; the pack's `/prompt` hook applies its
first step (`checks.host_layout.adapt_graph`) and leaves the rest to the host's own validation. `schemas` is what the
host serves at /object_info (offline: the pinned core schemas with the pack's own nodes), so its input layouts,
combo options and node list are the host's capabilities here. The steps, in the order every entry point now sees:

1. the graph moved to the host's input layout (SaveVideo's three layouts): each move a `Change`, reported as an
   INFO "adapted" line, never a FAIL; the adapted graph is what gets queued;
2. the adapted graph validated as ComfyUI's /prompt validates it (checks.validator.validate_graph);
3. every graph rule (checks.rules.RULES; with the host's model files, the safetensors header rules) on it, an
   error on a node no output depends on made a warning as ComfyUI never runs it (checks.validator.scope_to_run),
   and one message per node input (checks.validator.supersede).

Before issue 30 the CLI validated the graph as written while `run` and the editor validated it adapted: on
ComfyUI 0.33.0 `doctor --server` and `validate --server` FAILed every shipped video graph over SaveVideo's
`format.codec` that `run` and the editor queued (and the host ran) after moving it to `codec`.

Pure: nothing of ours outside checks/, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from .deadline import check_time
from .graph import well_formed
from .host_layout import Change, adapt_graph
from .problem import FAIL, INFO, Check, Problem, has_errors
from .rules import RULES
from .rules_files import ModelFiles, safetensors_lint
from .schemas import providing_pack
from .validator import PackLookup, looks_like_ui_format, run_scope, scope_to_run, supersede, validate_graph

OK, ADAPTED, REFUSED = "OK", "ADAPTED", "FAIL"  # the verdict, the same word from every entry point
ADAPTED_CHECK = "adapted"  # the name of the INFO line of each change


@dataclass
class Verdict:
    """What the pack says about one graph on one host."""

    graph: Any  # the graph to queue: the input moved to the host's input layout (the input itself when unchanged)
    changes: list[Change] = field(default_factory=list)
    schema_problems: list[Problem] = field(default_factory=list)  # what the host's /prompt would refuse or warn about
    rule_problems: list[Problem] = field(default_factory=list)  # the pack's graph rules

    @property
    def problems(self) -> list[Problem]:
        """One message per node input: a rule that judged an input with the whole graph in view replaces the
        schema's narrower message on it."""
        return supersede(self.schema_problems, self.rule_problems)

    @property
    def status(self) -> str:
        """FAIL when a problem is an error, else ADAPTED when anything was moved, else OK."""
        if has_errors(self.problems):
            return REFUSED
        return ADAPTED if self.changes else OK

    def change_checks(self) -> list[Check]:
        """One INFO line per moved input: what the queued graph differs in from the one given."""
        return [Check(INFO, ADAPTED_CHECK, change.text(), node_id=change.node_id, input=change.new_key)
                for change in self.changes]


def judge(graph: Any, schemas: dict, pack_of: PackLookup = providing_pack, known_ids: Collection[str] = (),
          files: ModelFiles | None = None, schema_check: bool = True) -> Verdict:
    """The verdict on `graph` for the host whose /object_info entries are `schemas`.

    `pack_of`: who provides a node the host lacks; `known_ids`: more node ids a misspelt class_type may have meant;
    `files`: the host's model files, for the safetensors header rules (None: not checked); `schema_check` False
    where the host already validated this very graph in its own layout (the H3KitPreflight node's own prompt,
    judged with the pinned schemas: neither moved nor validated again, only the rules apply)."""
    if schema_check:
        adaptation = adapt_graph(graph, schemas)
        adapted, changes = adaptation.graph, adaptation.changes
        schema_problems = validate_graph(adapted, schemas, pack_of, set(known_ids))
    else:
        adapted, changes, schema_problems = graph, [], []
    if looks_like_ui_format(adapted) or not isinstance(adapted, dict) or not adapted:
        return Verdict(adapted, changes, schema_problems)
    rules = [*RULES, *([safetensors_lint(files)] if files is not None else [])]
    shaped = well_formed(adapted)  # malformed nodes were reported by validate_graph; rules see the rest
    # a rule's error on a node no output depends on is a warning: ComfyUI never runs that node
    found: list[Problem] = []
    for rule in rules:
        check_time("checking the pipeline rules")
        found += rule(shaped, schemas)
    rule_problems = scope_to_run(run_scope(shaped, schemas), found)
    return Verdict(adapted, changes, schema_problems, rule_problems)


def verdict_of(checks: Iterable[Check]) -> str:
    """The verdict word of an entry point's lines (doctor's, the editor route's), which add the checks of the host's
    nodes, model files and environment to the graph's: FAIL when a line FAILs, else ADAPTED when an input was moved
    to the host's layout, else OK."""
    statuses = {(c.status, c.name) for c in checks}
    if any(status == FAIL for status, _ in statuses):
        return REFUSED
    return ADAPTED if (INFO, ADAPTED_CHECK) in statuses else OK
