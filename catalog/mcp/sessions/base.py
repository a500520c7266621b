"""What the parts of the 2025-11-25 session transport share: the endpoint they serve, the session
header, the session a request resumed, and the HTTP details of their SSE answers."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from mcp.server.lowlevel.server import Server

from catalog.core.catalog import Catalog
from catalog.core.sessions import SessionRecord
from catalog.events.hub import EventHub
from catalog.mcp.context import Ctx
from catalog.mcp.wire import SSE_HEADERS

# One logger for the whole transport, named as when it was one module (log filters keep working).
logger = logging.getLogger("catalog.mcp.sessions")

SESSION_ID_HEADER = "mcp-session-id"
SESSION_STATE_KEY = "catalog_session"  # the resumed SessionRecord, beside the principal

SessionIdent = tuple[int, bytes]  # (tenant id, session key)
RequestIdent = tuple[int, bytes, str]  # (tenant id, session key, JSON-RPC request id)


class SessionHost(Protocol):
    """What the transport needs from the endpoint that mounts it."""

    @property
    def server(self) -> Server[Any]: ...

    @property
    def catalog(self) -> Catalog: ...

    @property
    def hub(self) -> EventHub | None: ...


def session_of(ctx: Ctx) -> SessionRecord | None:
    """The 2025 session of the request a handler serves (None outside one)."""
    request = ctx.request
    return request.scope.get("state", {}).get(SESSION_STATE_KEY) if request is not None else None


def sse_headers(session_id: str) -> list[tuple[bytes, bytes]]:
    return [*SSE_HEADERS, (SESSION_ID_HEADER.encode(), session_id.encode())]
