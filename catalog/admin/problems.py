"""RFC 9457 problem details for every admin API error, including FastAPI's own validation errors."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from catalog.auth.challenges import ADMIN_RESOURCE
from catalog.auth.challenges import bearer_challenge as bearer_challenge_for
from catalog.core.errors import (
    DATABASE_EXCEPTION_TYPES,
    CatalogError,
    FieldError,
    InsufficientScope,
    Unauthenticated,
    database_unavailable,
    pool_exhausted,
)

logger = logging.getLogger("catalog.admin")

PROBLEM_TYPE_BASE = "https://catalog.invalid/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"


class ProblemResponse(JSONResponse):
    media_type = PROBLEM_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        # ASCII-escaped: a problem may quote the client's input, which can hold unpaired surrogates
        # that have no UTF-8 form (they are sent back as \\uXXXX escapes, not refused with a 500).
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def problem_response(
    status: int,
    title: str,
    detail: str,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + title.lower().replace(" ", "-"),
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = [{"pointer": e.pointer, "detail": e.detail} for e in errors]
    return ProblemResponse(body, status_code=status, headers=headers)


def pointer_for(location: tuple[int | str, ...] | list[int | str]) -> str:
    """A JSON Pointer (RFC 6901) for a pydantic error location, dropping FastAPI's 'body' root."""
    parts = list(location)
    if parts and parts[0] in ("body", "query", "path", "header"):
        kind = parts.pop(0)
        if kind != "body":
            return f"#/{kind}/" + "/".join(str(p) for p in parts)
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts) if parts else ""


def field_errors(errors: list[dict[str, Any]] | Any) -> list[FieldError]:
    found = []
    for error in errors:
        message = str(error.get("msg", "invalid"))
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        ctx = error.get("ctx") or {}
        if error.get("type") == "json_invalid":
            # FastAPI puts the character offset in the location; it is not a pointer into the body.
            found.append(FieldError("", f"malformed JSON: {ctx.get('error', message)}"))
            continue
        pointer = pointer_for(error.get("loc", ()))
        if isinstance(ctx.get("pointer"), str):
            # A model-level check that knows which member inside the model is at fault.
            pointer += ctx["pointer"]
        found.append(FieldError(pointer, message))
    return found


# What a database failure can surface as (each handler then asks ``database_unavailable``).
UNAVAILABLE_EXCEPTION_TYPES: tuple[type[Exception], ...] = (
    *DATABASE_EXCEPTION_TYPES,
    OSError,
    TimeoutError,
)

_HTTP_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    413: "Content too large",
    415: "Unsupported media type",
    503: "Service unavailable",
}


def bearer_challenge(request: Request, exc: CatalogError) -> str | None:
    """The ``WWW-Authenticate`` value for an auth error (``catalog.auth.challenges``): 401 names the
    error (none when no credential was sent); 403 ``insufficient_scope`` names the scope that would
    be enough. Other 403s (another tenant, platform-only routes) get no challenge: no token this API
    could be given would change the answer."""
    settings = request.app.state.settings
    if isinstance(exc, Unauthenticated):
        return bearer_challenge_for(settings, request.scope, error=exc.error, resource=ADMIN_RESOURCE)
    if isinstance(exc, InsufficientScope):
        return bearer_challenge_for(
            settings, request.scope, error="insufficient_scope", scopes=[exc.scope], resource=ADMIN_RESOURCE
        )
    return None


def install_problem_handlers(app: FastAPI) -> None:
    @app.exception_handler(CatalogError)
    async def _catalog_error(request: Request, exc: CatalogError) -> JSONResponse:
        challenge = bearer_challenge(request, exc)
        headers = {"WWW-Authenticate": challenge} if challenge else {}
        if exc.status == 503:  # a dependency (the issuer's key set) is unavailable for now
            headers["Retry-After"] = "1"
        return problem_response(exc.status, exc.title, exc.detail, exc.errors, headers or None)

    async def _database_error(request: Request, exc: Exception) -> JSONResponse:
        # The database down, restarting or too slow (statement_timeout) is 503 with Retry-After,
        # never a 500; anything else is a bug and goes on to be one.
        if not database_unavailable(exc):
            raise exc
        logger.warning("admin %s %s: database unavailable: %r", request.method, request.url.path, exc)
        detail = "the database is unavailable or too slow right now; retry later"
        if pool_exhausted(exc):
            detail = "every database connection of this server is busy; retry later"
        return problem_response(503, "Service unavailable", detail, headers={"Retry-After": "1"})

    for kind in UNAVAILABLE_EXCEPTION_TYPES:
        app.add_exception_handler(kind, _database_error)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return problem_response(422, "Invalid input", "the request is not valid", field_errors(exc.errors()))

    @app.exception_handler(ValidationError)
    async def _model_error(request: Request, exc: ValidationError) -> JSONResponse:
        return problem_response(422, "Invalid input", "the request is not valid", field_errors(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        title = _HTTP_TITLES.get(exc.status_code, "Error")
        return problem_response(
            exc.status_code, title, str(exc.detail), headers=getattr(exc, "headers", None)
        )
