"""``GET /metrics`` and installing observability into the app (one call from ``create_app``).

Who may read ``/metrics`` is ``CATALOG_METRICS_ACCESS``: ``admin`` (default) takes the platform
admin credential, answering 401/403 as the admin API does; ``open`` serves anyone who reaches the
port (a scrape on a private network, or behind a proxy that guards it).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, Response

from catalog.admin.deps import PlatformAdminDep
from catalog.core.errors import database_unavailable
from catalog.core.sessions import count_open_sessions
from catalog.observability import metrics, tracing
from catalog.observability.middleware import ObservabilityMiddleware, RouteTemplates

logger = logging.getLogger("catalog.observability")

METRICS_PATH = "/metrics"
# FastAPI's own telemetry (on whenever an OpenTelemetry provider is set) would trace, meter and log
# every request a second time, with the raw path and query (URIs) as attributes: catalog's replaces it.
FASTAPI_TELEMETRY: dict[str, Any] = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "auto_configure": False,
}


def install(app: FastAPI) -> None:
    """After every other middleware (so this one is outermost) and route."""
    tracing.configure_from_environment()
    endpoint = _open_metrics if app.state.settings.metrics_access == "open" else _admin_metrics
    app.add_api_route(METRICS_PATH, endpoint, methods=["GET"], include_in_schema=False)
    app.add_middleware(ObservabilityMiddleware, templates=RouteTemplates(app))


async def _admin_metrics(request: Request, principal: PlatformAdminDep) -> Response:
    return await _metrics(request)


async def _open_metrics(request: Request) -> Response:
    return await _metrics(request)


async def _metrics(request: Request) -> Response:
    body, media_type = metrics.exposition(await _shared_values(request))
    return Response(body, media_type=media_type, headers={"Cache-Control": "no-store"})


async def _shared_values(request: Request) -> list[Any]:
    """Values every worker would read alike, from PostgreSQL: read at scrape time, not summed."""
    from prometheus_client.core import GaugeMetricFamily

    catalog = request.app.state.catalog
    try:
        sessions = await count_open_sessions(catalog, catalog.settings.session_idle_seconds)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        logger.warning("metrics: database unavailable, open sessions not reported: %r", exc)
        return []
    family = GaugeMetricFamily(
        "catalog_mcp_sessions_open", "2025-11-25 sessions a client can still resume (all workers, all hosts)"
    )
    family.add_metric([], sessions)
    return [family]
