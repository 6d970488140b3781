"""The graph rules every checker applies after the schema checks (validate, doctor, run, H3KitPreflight).

Each rule: (graph, schemas) -> [Problem]. To add one: write it in the rules_*.py module of its topic and
append it to that module's list (or RULES here for a new module). File-reading rules: rules_files.py.
"""

from __future__ import annotations

from .rules_lints import GRAPH_LINTS
from .rules_pipeline import PIPELINE_RULES
from .rules_ref2va import REF2VA_RULES

# Two-stage grid/size/length/sigma rules (issue 3), Ref2VA wiring (issue 5), F-number lints shared with doctor.
RULES: list = [*PIPELINE_RULES, *REF2VA_RULES, *GRAPH_LINTS]
