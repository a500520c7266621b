"""Errors the core raises; each surface maps them to its own wire form (problem JSON, JSON-RPC)."""

from __future__ import annotations

from dataclasses import dataclass

# What a database failure can be, and the one classification of "the database cannot serve now"
# (a 503 and a retry, not a bug; and of those, "every pooled connection is busy"), kept with the
# driver and the SQL they inspect and offered here, where the surfaces take the core's errors from.
from catalog.db.engine import DATABASE_EXCEPTION_TYPES as DATABASE_EXCEPTION_TYPES
from catalog.db.engine import database_unavailable as database_unavailable
from catalog.db.engine import pool_exhausted as pool_exhausted


@dataclass(frozen=True)
class FieldError:
    """One invalid input: ``pointer`` is a JSON Pointer into the request body (RFC 6901)."""

    pointer: str
    detail: str


class CatalogError(Exception):
    status: int = 400
    title: str = "Bad request"

    def __init__(self, detail: str, *, errors: list[FieldError] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or []

    def one_line(self) -> str:
        """``detail (pointer: detail; ...)``: for a CLI line or an import's report."""
        details = "; ".join(f"{e.pointer}: {e.detail}" for e in self.errors)
        return f"{self.detail} ({details})" if details else self.detail


class InvalidInput(CatalogError):
    status = 422
    title = "Invalid input"


class NotFound(CatalogError):
    status = 404
    title = "Not found"


class Conflict(CatalogError):
    status = 409
    title = "Conflict"


class PreconditionFailed(CatalogError):
    status = 412
    title = "Precondition failed"


class TooLarge(CatalogError):
    status = 413
    title = "Content too large"


class Forbidden(CatalogError):
    status = 403
    title = "Forbidden"


class InsufficientScope(Forbidden):
    """A valid credential that lacks ``scope`` (RFC 6750 ``insufficient_scope``): holding that
    scope would allow the request."""

    def __init__(self, detail: str, *, scope: str) -> None:
        super().__init__(detail)
        self.scope = scope


class Unauthenticated(CatalogError):
    """No usable credential. ``error`` is the RFC 6750 error code for the challenge: None when the
    request carried no credential this server supports (none at all, another scheme, a token in the
    URL), ``invalid_token`` for one that does not authenticate (both 401), ``invalid_request`` for a
    malformed request, which is 400 (RFC 6750 section 3.1, AUTH-10)."""

    status = 401
    title = "Unauthorized"

    def __init__(
        self, detail: str, *, errors: list[FieldError] | None = None, error: str | None = "invalid_token"
    ) -> None:
        super().__init__(detail, errors=errors)
        self.error = error
        if error == "invalid_request":
            self.status, self.title = 400, "Bad request"


class Unavailable(CatalogError):
    status = 503
    title = "Service unavailable"
