"""Every private part of the ``mcp`` SDK (pinned ``==2.3.0``) that catalog relies on, in one place.

Each use is read directly (never with a ``getattr`` default), so an SDK that renamed one fails
loudly, and tests/db/test_sdk_private.py fails first: it checks every name below against the installed
SDK and proves the fast path is taken on a real listen stream.

* ``ServerSession._request_outbound``: the per-request ``DispatchContext``. For a 2026-07-28 request
  on the SDK's single-exchange HTTP entry it is ``_SingleExchangeDispatchContext``, whose ``sink``
  is the memory stream of bytes the SDK writes to the HTTP response of a streaming request
  (``subscriptions/listen``). Listen streams put their SSE frames there directly: one update fans
  out to thousands of streams, and the SDK's per-notification path (two model dumps and a
  ``json.dumps`` per stream) would serialise the same notification once per stream.
* ``mcp.server._otel.OpenTelemetryMiddleware``: the SDK's span per MCP method; catalog's observer
  (``catalog.observability.mcp``) goes just inside it, to put tenant and principal on that span.
"""

from __future__ import annotations

from typing import Any

from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.context import ServerRequestContext

PRIVATE_NAMES = (
    ("mcp.server.session", "ServerSession", "_request_outbound"),
    ("mcp.server._streamable_http_modern", "_SingleExchangeDispatchContext", "sink"),
    ("mcp.server._otel", "OpenTelemetryMiddleware", "__call__"),
)


def listen_sink(ctx: ServerRequestContext[Any, Any]) -> MemoryObjectSendStream[bytes]:
    """The byte stream a 2026-07-28 listen's SSE response is written from."""
    outbound = ctx.session._request_outbound  # pyright: ignore[reportPrivateUsage]
    # ``sink`` is an attribute of the private subclass (``_SingleExchangeDispatchContext``), not of
    # the ``DispatchContext`` the session declares; what it is, is checked below.
    sink = outbound.sink  # pyright: ignore[reportAttributeAccessIssue]
    if not isinstance(sink, MemoryObjectSendStream):
        raise RuntimeError(f"the SDK gave this listen no SSE sink ({type(outbound).__name__})")
    return sink


def has_listen_sink(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this listen came on the SDK's single-exchange HTTP entry (it has an SSE sink); on a
    duplex transport (stdio) its notifications go out as the SDK's typed notifications instead."""
    from mcp.server._streamable_http_modern import (  # pyright: ignore[reportPrivateUsage]
        _SingleExchangeDispatchContext,
    )

    outbound = ctx.session._request_outbound  # pyright: ignore[reportPrivateUsage]
    return isinstance(outbound, _SingleExchangeDispatchContext)


def sdk_tracing_middleware_index(middleware: list[Any]) -> int:
    """Where the SDK's own OpenTelemetry middleware (on by default, it opens the MCP method's span)
    sits in a server's middleware list; -1 if absent."""
    from mcp.server._otel import OpenTelemetryMiddleware  # pyright: ignore[reportPrivateUsage]

    return next((i for i, entry in enumerate(middleware) if isinstance(entry, OpenTelemetryMiddleware)), -1)
