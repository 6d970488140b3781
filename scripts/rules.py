"""Pipeline rules `validate` applies after the schema checks. Each rule: (graph, schemas) -> [Problem]."""

from __future__ import annotations

RULES: list = []
