"""The MCP method of each request: counted, timed, named in the request's log line and span.

An SDK server middleware, placed just inside the SDK's own OpenTelemetry middleware (so the current
span is the MCP method's, which gets the tenant and principal). It sees both eras' messages: a
2026-07-28 request and each message of a 2025-11-25 session.
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import ValidationError
from starlette.types import Scope

from catalog.mcp.context import SHADOW_STATE_KEY, Ctx, is_2026
from catalog.observability import metrics, tracing
from catalog.observability.context import note_mcp, record_of


async def observe_mcp(ctx: Ctx, call_next: CallNext) -> HandlerResult:
    started = time.perf_counter()
    code: int | None = None
    try:
        return await call_next(ctx)
    except MCPError as exc:
        code = exc.error.code
        raise
    except ValidationError:
        code = INVALID_PARAMS  # what the SDK answers for parameters that do not validate
        raise
    except Exception:
        code = INTERNAL_ERROR
        raise
    finally:
        scope = ctx.request.scope if ctx.request is not None else None
        if not _shadow_run(scope):
            _observe(ctx, scope, code, started)


def _shadow_run(scope: Scope | None) -> bool:
    """The SDK's second run of a request the fast path answered (``CATALOG_MCP_FAST_PATH=shadow``,
    ``catalog.mcp.shadow``): already counted, timed and named once."""
    return scope is not None and bool(scope.get("state", {}).get(SHADOW_STATE_KEY))


def _observe(ctx: Ctx, scope: Scope | None, code: int | None, started: float) -> None:
    method = metrics.method_label(ctx.method)
    era = "2026" if is_2026(ctx) else "2025"
    metrics.MCP_REQUESTS.labels(method, era, "result" if code is None else str(code)).inc()
    metrics.MCP_DURATION.labels(method, era).observe(time.perf_counter() - started)
    note_mcp(scope, method, era, code)
    if tracing.tracer() is not None:
        _annotate_span(scope)


def _annotate_span(scope: Scope | None) -> None:
    from opentelemetry.trace import get_current_span

    record = record_of(scope)
    if record is not None:
        tracing.set_request_attributes(get_current_span(), record)


def install(server: Any, sdk_tracing_index: int) -> None:
    """Observe ``server``'s MCP methods, inside the SDK's tracing middleware at ``sdk_tracing_index``."""
    server.middleware.insert(sdk_tracing_index + 1, observe_mcp)
