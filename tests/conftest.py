from __future__ import annotations

import pytest
from comfyui_host import ComfyUIServer, comfyui_dir_or_reason, comfyui_python
from hypothesis import settings


@pytest.fixture(scope="session")
def comfyui_server():
    """A real ComfyUI with H3Kit linked in (tier b). Skipped, with the reason, when COMFYUI_DIR is unset."""
    comfyui_dir, reason = comfyui_dir_or_reason()
    if comfyui_dir is None:
        pytest.skip(reason)
    server = ComfyUIServer(comfyui_dir, comfyui_python())
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.cleanup()


def pytest_report_header(config):
    _, reason = comfyui_dir_or_reason()
    return f"h3kit tier (b): {'enabled' if not reason else 'skipped - ' + reason}"


# Fuzz tier (hypothesis): "ci" is the default, short and reproducible (<= 60 s for all tests/test_fuzz_*.py on
# a 2-core machine); `pytest --hypothesis-profile=long tests/test_fuzz_*.py` explores far more inputs.
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, print_blob=True)
settings.register_profile("long", max_examples=20_000, deadline=None, print_blob=True)
settings.load_profile("ci")
