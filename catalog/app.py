"""The one ASGI app: admin REST API, MCP endpoint, health probes."""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from catalog.admin.blobs import is_streamed_upload
from catalog.auth.edge import EdgeGuard
from catalog.auth.quotas import RateLimiter
from catalog.bootstrap import database_checks, open_catalog
from catalog.core.catalog import Catalog
from catalog.events import events_lifespan
from catalog.observability.endpoint import FASTAPI_TELEMETRY
from catalog.observability.endpoint import install as install_observability
from catalog.runtime import shutdown_hook
from catalog.settings import ConfigError, Settings, get_settings

logger = logging.getLogger("catalog")


class CatalogApp(FastAPI):
    """FastAPI, with ``/mcp`` served next to the router instead of behind it.

    Every MCP request would otherwise pass FastAPI's own layers (error, telemetry, body-limit,
    exception and exit-stack middleware) and the router's match against every admin and console
    route before it reaches the last route, ``/mcp``; that was a fifth of the CPU of a read. The
    MCP endpoint gets the app's own middleware (observability outermost, then the edge guard, the
    same instances' configuration, so one rate limit), then its ASGI app, and nothing else.
    """

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        endpoint = getattr(self.state, "mcp", None)
        if endpoint is None:
            return stack
        route = next(r for r in self.router.routes if getattr(r, "path", None) == endpoint.path)
        front: ASGIApp = endpoint.asgi_app
        for cls, args, kwargs in reversed(self.user_middleware):
            front = cls(front, *args, **kwargs)
        return PathDispatch(endpoint.path, route, front, stack)


class PathDispatch:
    """``app`` for requests to exactly ``path`` (``route`` named in the scope as the router
    would), ``default`` for everything else (other paths, the lifespan)."""

    def __init__(self, path: str, route: object, app: ASGIApp, default: ASGIApp) -> None:
        self.path = path
        self.route = route
        self.app = app
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == self.path:
            scope["route"] = self.route
            await self.app(scope, receive, send)
        else:
            await self.default(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    if settings.database_url is None:
        raise ConfigError(
            "the app needs CATALOG_DATABASE_URL; `catalog serve` provides it for the embedded server"
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Python finds its temporary directory the first time it is asked by writing and removing a
        # probe file there: ask now, so the first spooled upload does not pay for it and a worker
        # killed mid-probe cannot leave the probe behind in the operator's TMPDIR.
        tempfile.gettempdir()
        async with open_catalog(settings) as catalog:
            app.state.catalog = catalog
            # The one shutdown signal: set when the server begins to stop (before it waits for
            # open connections), so the hub and the MCP endpoint end their streams.
            stopping = anyio.Event()
            with shutdown_hook(stopping.set):
                async with contextlib.AsyncExitStack() as stack:
                    for hook in app.state.lifespan_hooks:
                        await stack.enter_async_context(hook(catalog, stopping))
                    stack.callback(stopping.set)  # unwound first: streams end before their hooks
                    yield

    app = CatalogApp(
        title="catalog",
        summary="A PostgreSQL-backed, multi-tenant catalogue of MCP resources",
        version="0.1.0",
        lifespan=lifespan,
        # Served by catalog.console from vendored assets: FastAPI's own pages load them from a CDN.
        docs_url=None,
        redoc_url=None,
        telemetry=FASTAPI_TELEMETRY,  # type: ignore[arg-type]
    )
    app.state.settings = settings
    # Each hook is ``hook(catalog, stopping)``, an async context manager; first in, last out: the
    # hub outlives the streams it feeds.
    app.state.lifespan_hooks = [events_lifespan]

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        catalog: Catalog = app.state.catalog
        checks = await database_checks(catalog)
        for name, probe in catalog.readiness_probes.items():
            checks[name] = probe()
        ready = all(value == "ok" for value in checks.values())
        return JSONResponse(
            {"status": "ready" if ready else "not ready", "checks": checks}, 200 if ready else 503
        )

    _include_surfaces(app)
    # Host/Origin, request rate, body size and JSON depth, for every route, before any of it runs.
    app.add_middleware(
        EdgeGuard,
        allowed_hosts=settings.allowed_hosts,
        allowed_origins=settings.allowed_origins,
        max_blob_bytes=settings.max_blob_bytes,
        rate_limiter=RateLimiter(
            settings.rate_limit_per_minute, settings.rate_limit_burst, share=settings.workers
        ),
        streamed_upload=is_streamed_upload,
    )
    install_observability(app)  # last: its middleware is the outermost (it sees the edge's refusals)
    return app


def _include_surfaces(app: FastAPI) -> None:
    """Mount the admin API, the MCP endpoint and the console (each module knows its own routes)."""
    from catalog import console
    from catalog.admin import endpoints as admin_endpoints
    from catalog.mcp import endpoint as mcp_endpoint

    admin_endpoints.install(app)
    mcp_endpoint.install(app)
    console.install(app)
