"""Pipeline rules `validate` applies after the schema checks. Each rule: (graph, schemas) -> [Problem]."""

from __future__ import annotations

from .lints import GRAPH_LINTS
from .rules_pipeline import PIPELINE_RULES
from .rules_ref2va import REF2VA_RULES

# Two-stage grid/size/length/sigma rules (issue 3), Ref2VA wiring (issue 5), F-number lints shared with doctor.
RULES: list = [*PIPELINE_RULES, *REF2VA_RULES, *GRAPH_LINTS]
