"""What an MCP handler knows about the request it serves: its era, its principal, the error and cache
shapes each era expects. Imported by every other module of the package; imports none of them."""

from __future__ import annotations

from typing import Any, Literal, cast

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from catalog.core.principal import Principal

SERVER_NAME = "catalog"
SERVER_VERSION = "0.1.0"
MCP_PATH = "/mcp"

DISCOVER_TTL_MS = 300_000

RESOURCE_NOT_FOUND_2025 = -32002  # 2025-11-25's recommendation; the SDK has no constant for it
CONSENT_DECLINED = -31001  # application-defined (outside -32768..-32000, ERR-2)
CREDENTIAL_ENDED = -31002  # a stream's credential was revoked or expired: the stream ends with it

# Where the edge (``catalog.mcp.asgi``) leaves the authenticated principal in the ASGI scope.
PRINCIPAL_STATE_KEY = "catalog_principal"
# Where a handler's middleware notes that it answered "the database is unavailable" (``-32603``,
# retryable), so the edge sends that answer with the status the edge's own such answers have (503).
UNAVAILABLE_STATE_KEY = "catalog_database_unavailable"
# Where the SDK path's second run of a request the fast path answered says it is one
# (``CATALOG_MCP_FAST_PATH=shadow``, ``catalog.mcp.shadow``): observed once, not twice.
SHADOW_STATE_KEY = "catalog_shadow"

Ctx = ServerRequestContext[Any, Any]

# A cacheable result's ``cacheScope`` (the SDK's field type).
CacheScope = Literal["public", "private"]


def is_2026(ctx: Ctx) -> bool:
    """Whether this request is of the 2026-07-28 era (its envelope's version), not of a 2025-11-25
    session (whichever handshake revision the session negotiated)."""
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def principal_of(ctx: Ctx) -> Principal:
    """The principal the edge put in the ASGI scope of the HTTP request carrying this message, or,
    on a transport without HTTP requests (stdio, ``catalog.mcp.stdio``), the one its connection was
    opened for, which that transport puts in the lifespan state it serves with."""
    request: Request | None = ctx.request
    principal: object
    if request is not None:
        principal = request.scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
    else:
        state: object = ctx.lifespan_context
        principal = (
            cast("dict[str, object]", state).get(PRINCIPAL_STATE_KEY) if isinstance(state, dict) else None
        )
    if not isinstance(principal, Principal):
        raise MCPError(types.INTERNAL_ERROR, "No authenticated principal for this request")
    return principal


def tenant_of(principal: Principal) -> int:
    """The tenant an MCP principal acts in: the edge admits only credentials bound to one (403)."""
    if principal.tenant_id is None:
        raise MCPError(types.INTERNAL_ERROR, "This credential is not bound to a tenant")
    return principal.tenant_id


def cache_scope(principal: Principal) -> CacheScope:
    """Always ``private`` (CACHE-6): ``public`` would say every caller of this URL gets this answer,
    and one ``/mcp`` serves every tenant, each token its own grants; even an anonymous answer (the
    public tenant's) differs from what another tenant's token is told at the same URL."""
    return "private"


def supports_form_elicitation(ctx: Ctx) -> bool:
    """Declared in this request's envelope (2026) or at ``initialize`` (2025); ``{}`` means form."""
    caps = ctx.session.client_capabilities
    if caps is None or caps.elicitation is None:
        return False
    return caps.elicitation.form is not None or caps.elicitation.url is None


def not_found(ctx: Ctx, uri: str) -> MCPError:
    """Missing and invisible alike: ``-32602`` at 2026-07-28 (SEP-2164), ``-32002`` in 2025 sessions."""
    code = INVALID_PARAMS if is_2026(ctx) else RESOURCE_NOT_FOUND_2025
    return MCPError(code, "Resource not found", data={"uri": uri})


def invalid_cursor() -> MCPError:
    return MCPError(INVALID_PARAMS, "Invalid cursor", data={"reason": "invalid_cursor"})
