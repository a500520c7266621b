"""What one HTTP request has told observability about itself, wherever in the app it learned it.

The outer middleware (:mod:`catalog.observability.middleware`) creates a :class:`RequestRecord` per
request, keeps it in the ASGI scope and in a context variable; the places that learn who is asking
or which MCP method runs fill it in (:func:`note_principal`, :func:`note_mcp`), and the middleware
turns it into the request's log line, metrics and span attributes once the response is done.

The scope is the reliable carrier (a 2025 session's handler runs in another task, but its request
object holds the same scope); the context variable serves code without a scope at hand (log
records, spans started below the request, e.g. each SQL statement's).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from catalog.core.principal import Principal

SCOPE_KEY = "catalog.request"


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    tenant: str | None = None
    principal: str | None = None  # Principal.label: a token id or JWT subject, never a secret
    mcp_method: str | None = None
    era: str | None = None  # "2026" or "2025"
    rpc_code: int | None = None  # the JSON-RPC error code, when the MCP method failed


current_request: ContextVar[RequestRecord | None] = ContextVar("catalog_request", default=None)


def record_of(scope: Mapping[str, Any] | None) -> RequestRecord | None:
    return scope.get(SCOPE_KEY) if scope is not None else None


def note_principal(scope: Mapping[str, Any], principal: Principal) -> None:
    """Who is asking (called where each surface authenticates)."""
    record = scope.get(SCOPE_KEY)
    if record is not None:
        record.tenant = principal.tenant_slug
        record.principal = principal.label


def note_mcp(scope: Mapping[str, Any] | None, method: str, era: str, code: int | None) -> None:
    record = record_of(scope)
    if record is not None:
        record.mcp_method = method
        record.era = era
        record.rpc_code = code
