"""The fixtures of the tests that run commands against tests/fake_comfy.py's server: one home, imported by each
module that needs them (assigned as module attributes, where pytest finds them), `fast_polling` applied module-wide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_comfy import GRAPH, FakeComfy
from h3kit.adapters import comfy_jobs


@pytest.fixture
def server():
    fake = FakeComfy()
    yield fake
    fake.close()


@pytest.fixture
def fast_polling(monkeypatch):
    """The job follower polls every 20 ms (not its real interval), so a test of a held job is quick."""
    monkeypatch.setattr(comfy_jobs, "POLL_INTERVAL_S", 0.02)


@pytest.fixture
def workflow(tmp_path) -> Path:
    """The fake server's graph as an API workflow file."""
    path = tmp_path / "wf.json"
    path.write_text(json.dumps(GRAPH))
    return path
