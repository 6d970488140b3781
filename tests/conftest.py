from __future__ import annotations

import pytest
from comfyui_host import ComfyUIServer, configured_hosts
from hypothesis import settings

# the tier-(d) fixtures (host x frontend, Chromium, an editor page), shared by every browser test module
pytest_plugins = ["browser_fixtures"]

_HOSTS, _NO_HOST_REASON = configured_hosts()


@pytest.fixture(scope="session", params=_HOSTS or [None], ids=[h.name for h in _HOSTS] or ["no-host"])
def comfyui_server(request):
    """A real ComfyUI with H3Kit linked in (tier b), once per host in COMFYUI_DIRS / COMFYUI_DIR.
    Skipped, with the reason, when no host is configured; tests skip per capability with `server.require`."""
    if request.param is None:
        pytest.skip(_NO_HOST_REASON)
    server = ComfyUIServer(request.param)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.cleanup()


@pytest.fixture(autouse=True)
def crash_logs_in_a_temp_folder(monkeypatch, tmp_path_factory):
    """Crash logs (adapters/crash_log.py) of tests go to a temp folder, never the user's own log folder."""
    monkeypatch.setenv("H3KIT_LOG_DIR", str(tmp_path_factory.mktemp("crash-logs")))


def pytest_report_header(config):
    if not _HOSTS:
        return f"h3kit tier (b): skipped - {_NO_HOST_REASON}"
    return "h3kit tier (b): " + ", ".join(f"{h.name} ({h.launch}, {h.python})" for h in _HOSTS)


# Fuzz tier (hypothesis): "ci" is the default, short and reproducible (<= 60 s for all tests/test_fuzz_*.py on
# a 2-core machine); `pytest --hypothesis-profile=long tests/test_fuzz_*.py` explores far more inputs.
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, print_blob=True)
settings.register_profile("long", max_examples=20_000, deadline=None, print_blob=True)
settings.load_profile("ci")
