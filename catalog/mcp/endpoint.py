"""The MCP endpoint at /mcp, installed into the one app, and its RFC 9728 metadata.

``install(app)`` builds the :class:`McpEndpoint`, mounts its edge as a route (all methods: POST for
both eras, GET/DELETE for 2025-11-25 sessions; never ``mount()``, which would redirect ``/mcp`` to
``/mcp/``), serves the protected-resource metadata at ``/.well-known/oauth-protected-resource`` and
``/.well-known/oauth-protected-resource/mcp``, and registers the endpoint's lifespan hook.

Module map of the package: ``context`` (what a handler knows about its request), ``handlers`` (thin
translations to ``catalog.core``), ``tools`` (the read-only tools,
``CATALOG_MCP_TOOLS``), ``listen`` (2026-07-28 ``subscriptions/listen`` through the SDK),
``fast`` and ``fast_listen`` (plainly valid requests and listens answered without it: the fast
path, ``CATALOG_MCP_FAST_PATH``), ``results`` (the result fields both paths send), ``shadow`` (the
fast path's answers compared with the SDK's, ``CATALOG_MCP_FAST_PATH=shadow``), ``sessions``
(2025-11-25 sessions in PostgreSQL), ``server`` (the SDK ``Server`` and its middleware), ``asgi``
(the edge and the routing by era), ``wire`` (SSE frames, JSON-RPC error bodies), ``sdk_private``
(every private SDK name catalog uses).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.routing import Route

from catalog.auth.challenges import ADMIN_RESOURCE, MCP_RESOURCE, PRM_PATH, protected_resource_metadata
from catalog.auth.quotas import StreamLimits, StreamQuotas
from catalog.core.catalog import Catalog
from catalog.events.hub import EventHub
from catalog.mcp.asgi import McpEdge
from catalog.mcp.context import MCP_PATH
from catalog.mcp.fast_listen import FastListens
from catalog.mcp.listen import ListenStreams
from catalog.mcp.server import build_server
from catalog.mcp.sessions.transport import SessionTransport
from catalog.settings import Settings


class McpEndpoint:
    """The MCP endpoint of one app: the SDK server, both eras' transports, the streams they hold.

    Built when the app is created (the route must exist before startup); :meth:`run` is the
    lifespan hook that receives the ``Catalog`` and the app's shutdown signal.
    """

    path = MCP_PATH

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._catalog: Catalog | None = None
        self.manager_2026: StreamableHTTPSessionManager | None = None
        self.listen = ListenStreams(self)
        self.fast_listens = FastListens(self)
        self.sessions = SessionTransport(self, idle_seconds=settings.session_idle_seconds)
        self.server = build_server(
            self,
            signing_key=settings.signing_key(),
            listen=self.listen,
            sessions=self.sessions,
            serve_tools=settings.mcp_tools == "on",
        )
        # What the SDK stamps on every 2026-07-28 result; the fast read path stamps the same.
        self.server_info = self.server.server_info_stamp
        self.streams = StreamQuotas(
            StreamLimits(
                per_credential=settings.max_streams_per_credential,
                per_tenant=settings.max_streams_per_tenant,
                anonymous=settings.max_anonymous_streams,
                per_process=settings.max_streams,
            )
        )
        self.asgi_app = McpEdge(self)

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            raise RuntimeError("the MCP endpoint is not running (the app lifespan has not started)")
        return self._catalog

    @property
    def running_catalog(self) -> Catalog | None:
        return self._catalog

    @property
    def hub(self) -> EventHub | None:
        """The catalog's event hub, once the events module runs."""
        return self._catalog.event_hub if self._catalog is not None else None

    @property
    def fast_listens_open(self) -> bool:
        """Whether a fast listen may start here: the events run and the streams are not closing
        (otherwise the SDK path answers it, as it always has)."""
        return self.hub is not None and not self.listen.closed

    def close_streams(self) -> None:
        """End every listen stream, on either path, with its result (SUB-10)."""
        self.listen.close()
        self.fast_listens.close()

    @contextlib.asynccontextmanager
    async def run(self, catalog: Catalog, stopping: anyio.Event) -> AsyncIterator[None]:
        """The lifespan hook: both eras' transports; streams end when the app starts to stop."""
        self._catalog = catalog
        self.listen.closed = False
        # The SDK's public manager, in its stateless JSON mode: only 2026-07-28 requests reach it.
        # Host/Origin were checked for every route by the app's edge (catalog.auth.edge).
        manager = StreamableHTTPSessionManager(app=self.server, json_response=True, stateless=True)
        async with manager.run(), self.sessions.run(catalog, stopping), anyio.create_task_group() as tasks:
            self.manager_2026 = manager
            tasks.start_soon(self._close_when, stopping)
            try:
                yield
            finally:
                self.close_streams()
                self.manager_2026 = None
                tasks.cancel_scope.cancel()
        self._catalog = None

    async def _close_when(self, stopping: anyio.Event) -> None:
        await stopping.wait()
        self.close_streams()


def install(app: FastAPI) -> McpEndpoint:
    endpoint = McpEndpoint(app.state.settings)
    app.state.mcp = endpoint
    app.router.routes.append(Route(MCP_PATH, endpoint=endpoint.asgi_app))
    app.state.lifespan_hooks.append(endpoint.run)

    if app.state.settings.oauth_enabled:  # without an authorization server there is nothing to say
        for path, resource in (
            (PRM_PATH, MCP_RESOURCE),
            (PRM_PATH + MCP_RESOURCE, MCP_RESOURCE),
            (PRM_PATH + ADMIN_RESOURCE, ADMIN_RESOURCE),
        ):
            app.add_api_route(path, _metadata_route(resource), methods=["GET"], include_in_schema=False)
    return endpoint


def _metadata_route(resource: str) -> Any:
    async def metadata(request: Request) -> JSONResponse:
        body = protected_resource_metadata(request.app.state.settings, request.scope, resource)
        return JSONResponse(body, headers={"Cache-Control": "public, max-age=300"})

    return metadata
