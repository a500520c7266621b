"""The MCP endpoint at /mcp (installed into the one app), and its RFC 9728 metadata.

``install(app)`` builds the :class:`~catalog.mcp.adapter.McpEndpoint`, mounts it as a route (all
methods: POST for both eras, GET/DELETE for 2025-11-25 sessions; never ``mount()``, which would
redirect ``/mcp`` to ``/mcp/``), serves the protected-resource metadata at
``/.well-known/oauth-protected-resource`` and ``/.well-known/oauth-protected-resource/mcp``, and
registers the endpoint's lifespan hook.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Route

from catalog.mcp.adapter import MCP_PATH, PRM_PATH, McpEndpoint, protected_resource_metadata


def install(app: FastAPI) -> McpEndpoint:
    endpoint = McpEndpoint(app.state.settings)
    app.state.mcp = endpoint
    app.router.routes.append(Route(MCP_PATH, endpoint=endpoint.asgi_app))
    app.state.lifespan_hooks.append(endpoint.run)

    async def metadata(request: Request) -> JSONResponse:
        body = protected_resource_metadata(app.state.settings, request.scope)
        return JSONResponse(body, headers={"Cache-Control": "public, max-age=300"})

    for path in (PRM_PATH, PRM_PATH + MCP_PATH):
        app.add_api_route(path, metadata, methods=["GET"], include_in_schema=False)
    return endpoint
