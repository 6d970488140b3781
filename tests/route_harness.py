"""The editor route (POST /h3kit/preflight) on a real aiohttp server, registered on a stand-in PromptServer with
an offline host (every pinned core node and every H3Kit node, no model folders): shared by the route's bound
tests and its fuzz tier."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

from aiohttp import web
from h3kit.adapters import server_routes
from h3kit.scripts.schemas import offline_schemas, providing_pack

API_DIR = Path(__file__).resolve().parent.parent / "workflows" / "api"
ROUTE = "/h3kit/preflight"
SCHEMAS = offline_schemas()


PACK = server_routes.PackNodes({}, providing_pack)  # what __init__.py hands in (here: no disabled node)


def offline_host(graph: dict, pack: server_routes.PackNodes) -> server_routes.HostView:
    return server_routes.HostView(SCHEMAS, set(SCHEMAS), disabled=pack.disabled, pack_of=pack.pack_of)


def routes(monkeypatch) -> web.RouteTableDef:
    """The pack's routes, registered as ComfyUI would, answering from the offline host."""
    table = web.RouteTableDef()
    fake_server = types.ModuleType("server")
    fake_server.PromptServer = types.SimpleNamespace(instance=types.SimpleNamespace(routes=table))
    monkeypatch.setitem(sys.modules, "server", fake_server)
    monkeypatch.setattr(server_routes, "comfyui_host", offline_host)
    assert server_routes.register_routes("H3Kit", PACK) is True
    return table


def app(table: web.RouteTableDef) -> web.Application:
    application = web.Application(client_max_size=100 * 2**20)  # ComfyUI's own default upload limit
    application.add_routes(table)
    return application


def shipped(name: str) -> dict:
    return json.loads((API_DIR / f"{name}.json").read_text(encoding="utf-8"))


def big_graph(nodes: int, base: str = "h3kit_handoff_demo") -> dict:
    """`nodes` nodes: copies of a shipped graph, ids renumbered, links kept inside each copy."""
    template = shipped(base)
    graph: dict = {}
    copy = 0
    while len(graph) < nodes:
        rename = {nid: f"{copy}_{nid}" for nid in template}
        for nid, node in template.items():
            if len(graph) == nodes:
                break
            inputs = {k: ([rename.get(str(v[0]), str(v[0])), v[1]] if isinstance(v, list) and len(v) == 2 else v)
                      for k, v in node["inputs"].items()}
            graph[rename[nid]] = {**node, "inputs": inputs}
        copy += 1
    return graph
