"""H3Kit's checks: one home for every rule and fact, imported by the nodes and the CLI alike.

facts.py (numbers, grids, the sigma grammar, exit codes) · geometry.py (handoff crop/audio arithmetic) · problem.py (Problem / Check vocabulary) ·
graph.py (reading API graphs, the one Primitive resolver) · validator.py (what /prompt would reject) ·
rules*.py (pipeline rules, F-number lints, file rules) · workflow.py, environment.py, server.py (doctor's
checks) · graph_edit.py, expect.py, media.py (run's graph edits and output verdicts) · schemas.py.
Pure Python: nothing here imports torch, ComfyUI or anything of the pack outside checks/; files, the host and
the decoder reach it as data or callables from adapters/ and kernels/ (tests/test_facts.py enforces it).
"""
