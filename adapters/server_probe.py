"""Ask a running ComfyUI what doctor, `run` and `validate --server` judge: /system_stats, /object_info and the
model lists, through the one client (comfy_client.py). The verdicts are checks/server.py's (pure); the CPU work on
what the server sent runs under the client's deadline (checks/deadline.py), as the network part does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..checks.graph import well_formed
from ..checks.problem import FAIL, PASS, WARN, Check
from ..checks.schemas import server_schemas
from ..checks.server import Disabled, comfyui_version_check, host_checks, reported_version
from .comfy_client import BadResponse, ComfyClient, ComfyError, TimedOut


def read_schemas(client: ComfyClient, route: str = "/object_info") -> dict[str, dict]:
    """The server's node schemas (all, or the one node of `route` = /object_info/<type>), each entry checked
    (checks.schemas.server_schemas) before anything is built from it."""
    info = client.object_info() if route == "/object_info" else client.get_json(route)
    if not isinstance(info, dict):
        raise BadResponse(f"{client.server}{route} is not a JSON object")
    with client.deadline.applied():  # the checks of a hostile schema end at the caller's --timeout too
        return server_schemas(info)


def answer_or_none(client: ComfyClient) -> Callable[[str], Any]:
    """GET a route's JSON; None when the server cannot answer it (the check then says it could not look)."""
    def fetch(route: str) -> Any:
        try:
            return client.get_json(route)
        except ComfyError:
            return None
    return fetch


def server_checks(client: ComfyClient, graph: dict | None, disabled: Disabled | None = None,
                  pack_of: Callable[[str], str | None] | None = None) -> tuple[list[Check], dict | None, int]:
    """(checks, the server's /object_info or None, exit code of the connection: 0, or 3/4/1 from the client)."""
    try:
        stats = client.get_json("/system_stats")
    except ComfyError as exc:
        return [Check(FAIL, "server", str(exc), "start ComfyUI or pass the right --server URL")], None, exc.exit_code
    try:
        object_info = read_schemas(client)
    except ComfyError as exc:
        return [Check(PASS, "server", f"{client.server} answers /system_stats"),
                Check(FAIL, "server", str(exc), "check the server log")], None, exc.exit_code
    try:
        with client.deadline.applied():
            return host_checks(client.server, stats, object_info, graph, answer_or_none(client), disabled,
                               pack_of), object_info, 0
    except TimedOut as exc:
        return [Check(PASS, "server", f"{client.server} answers /system_stats and /object_info"),
                Check(FAIL, "server", str(exc), "raise --timeout, or check what the server's /object_info holds")], \
            object_info, exc.exit_code


def server_version_check(client: ComfyClient, graph: dict | None, object_info: dict) -> Check:
    """The F01 line for `run` and `validate --server` (doctor's comes from server_checks): the same rule."""
    try:
        stats = client.get_json("/system_stats")
    except ComfyError as exc:
        return Check(WARN, "comfyui version", f"cannot read the server's version ({exc})", "check the server log")
    return comfyui_version_check(reported_version(stats), None if graph is None else well_formed(graph), object_info)
