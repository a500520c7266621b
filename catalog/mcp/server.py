"""The SDK ``Server`` catalog serves both eras with: its handlers, its middleware, honest capabilities."""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any, Protocol

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError

from catalog.core.catalog import Catalog
from catalog.core.errors import database_unavailable
from catalog.events.hub import EventHub
from catalog.mcp import handlers, tools
from catalog.mcp.context import (
    DISCOVER_TTL_MS,
    SERVER_NAME,
    SERVER_VERSION,
    UNAVAILABLE_STATE_KEY,
    Ctx,
    principal_of,
)
from catalog.mcp.listen import ListenStreams
from catalog.mcp.sdk_private import sdk_tracing_middleware_index
from catalog.mcp.sessions.transport import SessionTransport
from catalog.observability import mcp as observability

logger = logging.getLogger("catalog.mcp")

REQUEST_STATE_TTL_S = 600
UNAVAILABLE_MESSAGE = "Service unavailable: the database cannot be reached or is too slow; retry later"

INSTRUCTIONS = (
    "A catalogue of resources. List with resources/list, read with resources/read, expand "
    "resources/templates/list entries (completion/complete suggests argument values)."
)
TOOLS_INSTRUCTIONS = (
    " The read-only tools search_resources, list_resources and read_resource answer the same."
)


class ServerHost(Protocol):
    @property
    def catalog(self) -> Catalog: ...

    @property
    def hub(self) -> EventHub | None: ...


class CatalogServer(Server[Any]):
    """Capabilities follow what is really served.

    PITFALL: 2025 sessions are opened without init options, so the default ``NotificationOptions()``
    (``listChanged`` false) would apply; overriding ``create_initialization_options`` is the only
    hook. ``get_capabilities`` turns both resource bits off while no event hub can feed them (the
    SDK sets them whenever listen is served), and says the tools' list never changes.
    """

    def __init__(self, host: ServerHost, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._host = host

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(resources_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> types.ServerCapabilities:
        caps = super().get_capabilities(
            notification_options, experimental_capabilities, extensions, protocol_version=protocol_version
        )
        if caps.resources is not None and self._host.hub is None:
            caps.resources = types.ResourcesCapability(subscribe=False, list_changed=False)
        if caps.tools is not None:
            # The tools never change while a process runs, and a listen drops ``toolsListChanged``
            # (``catalog.mcp.listen``): the SDK's 2026-07-28 derivation would promise it.
            caps.tools = types.ToolsCapability(list_changed=False)
        return caps


def request_state_key(signing_key: bytes) -> bytes:
    """A 32-byte key for request-state sealing, derived from (and separate from) the cursor key."""
    return hmac.new(signing_key, b"catalog request state v1", hashlib.sha256).digest()


def unavailable_error() -> MCPError:
    """A database failure inside a handler: ``-32603``, retryable (sent with HTTP 503 and
    ``Retry-After`` when the answer is one JSON response: ``catalog.mcp.asgi``)."""
    return MCPError(types.INTERNAL_ERROR, UNAVAILABLE_MESSAGE, data={"retryable": True})


async def database_errors(ctx: Ctx, call_next: CallNext) -> HandlerResult:
    """Outermost middleware: a database failure in any handler is a clean ``-32603`` naming the
    cause (instead of the SDK's generic "Internal server error" and a traceback in the log), noted
    in the request's scope so the edge gives it the status of every other such answer (503)."""
    try:
        return await call_next(ctx)
    except MCPError:
        raise
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        logger.warning("mcp %s: database unavailable: %r", ctx.method, exc)
        if ctx.request is not None:
            ctx.request.scope.setdefault("state", {})[UNAVAILABLE_STATE_KEY] = True
        raise unavailable_error() from None


def build_server(
    host: ServerHost,
    *,
    signing_key: bytes,
    listen: ListenStreams,
    sessions: SessionTransport,
    serve_tools: bool = True,
) -> CatalogServer:
    """The one SDK server both eras are served with. ``serve_tools`` (``CATALOG_MCP_TOOLS``) adds
    the read-only tools (``catalog.mcp.tools``); without their handlers the SDK advertises no
    ``tools`` capability and answers ``tools/*`` with ``-32601``."""
    tool_handlers: dict[str, Any] = {}
    if serve_tools:
        tool_handlers = {
            "on_list_tools": tools.list_tools(host),
            "on_call_tool": tools.call_tool(host),
            "get_tool_input_schema": tools.input_schema,
        }
    server = CatalogServer(
        host,
        SERVER_NAME,
        version=SERVER_VERSION,
        title="Catalog",
        instructions=INSTRUCTIONS + (TOOLS_INSTRUCTIONS if serve_tools else ""),
        cache_hints={
            "server/discover": CacheHint(ttl_ms=DISCOVER_TTL_MS, scope="public"),
            "resources/list": CacheHint(ttl_ms=0, scope="private"),
            "resources/templates/list": CacheHint(ttl_ms=0, scope="private"),
            "resources/read": CacheHint(ttl_ms=0, scope="private"),
            # The same tools for every caller, as static as server/discover (CACHE-1).
            "tools/list": CacheHint(ttl_ms=DISCOVER_TTL_MS, scope="public"),
        },
        on_list_resources=handlers.list_resources(host),
        on_list_resource_templates=handlers.list_templates(host),
        on_read_resource=handlers.read_resource(host),
        on_completion=handlers.complete(host),
        on_subscribe_resource=sessions.on_subscribe,
        on_unsubscribe_resource=sessions.on_unsubscribe,
        on_subscriptions_listen=listen,
        **tool_handlers,
    )
    server.middleware.insert(0, database_errors)
    observability.install(server, sdk_tracing_middleware_index(server.middleware))
    server.middleware.append(
        RequestStateBoundary(
            RequestStateSecurity(
                keys=[request_state_key(signing_key)],
                ttl=REQUEST_STATE_TTL_S,
                bind_principal=lambda ctx: principal_of(ctx).identity,
            ),
            default_audience=SERVER_NAME,
        )
    )
    return server
