"""The edge every request passes, whatever its route: one ASGI middleware in front of the whole app.

In order, before any route, parser or authentication runs:

1. **Host and Origin** (DNS rebinding, HTTP-2): ``Host`` must be one of ``CATALOG_ALLOWED_HOSTS`` (an
   entry without a port allows any port), else 421; an ``Origin``, when sent, one of
   ``CATALOG_ALLOWED_ORIGINS``, else 403 (an entry without a port allows the default port and the
   port of the request's own ``Host``, not any: see :func:`origin_allowed`). The refusal names the
   setting. Every route: the admin API, the metadata and the probes too, so nothing built from
   ``Host`` (the canonical resource URI, a challenge's metadata URL) ever comes from a name the
   operator did not list. One exception: ``/healthz`` and ``/readyz`` also answer a loopback
   ``Host`` (:data:`catalog.settings.LOOPBACK_HOSTS`, any port), as the image's health check and a probe on the
   host send it; such a ``Host`` is never a rebound name, and the probes build nothing from it.
2. **Request rate** (``catalog.auth.quotas.RateLimiter``): per caller (its bearer credential, else
   its address), 429 with ``Retry-After``; health probes are exempt. A failed authentication is
   charged to the address as well (``quotas.authentication_failed``): once an address has spent
   that budget, a credential from it that has not authenticated here before is refused before it
   costs a database lookup (see ``quotas.Caller.admit``).
3. **Body size and JSON depth**. ``/mcp``: :data:`MAX_MCP_BODY_BYTES` (the SDK's own 4 MiB default,
   so nothing the SDK would take is refused). Other JSON bodies: the base64 form of
   ``CATALOG_MAX_BLOB_BYTES`` plus :data:`JSON_OVERHEAD_BYTES`. Streamed uploads (the routes the
   app names) are bounded by their route instead. Too large -> 413, judged on ``Content-Length`` at
   once and on the bytes actually received otherwise; nested deeper than :data:`MAX_JSON_DEPTH`
   (checked by a scan, before any parser could recurse) -> 400.

Refusals are in the surface's own format (``catalog.auth.refusals``): a JSON-RPC error on ``/mcp``
(``-32600`` too large, ``-32700`` too deep, ``-31003`` rate limited), problem JSON elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog.auth.quotas import CALLER_SCOPE_KEY, Caller, KnownCredentials, RateLimiter, retry_after
from catalog.auth.refusals import (
    PARSE_ERROR,
    RATE_LIMITED,
    RequestId,
    bounded_body,
    is_mcp_path,
    refusal,
    request_id_of,
)
from catalog.core.jsonlines import MAX_JSON_DEPTH, json_depth_exceeds
from catalog.observability.metrics import REFUSALS
from catalog.settings import LOOPBACK_HOSTS

MAX_MCP_BODY_BYTES = 4 * 1024 * 1024
JSON_OVERHEAD_BYTES = 1024 * 1024

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
PROBE_PATHS = frozenset({"/healthz", "/readyz"})  # never rate limited: load balancers poll them


def max_admin_json_bytes(max_blob_bytes: int) -> int:
    return 4 * -(-max_blob_bytes // 3) + JSON_OVERHEAD_BYTES


def allowed(value: str, entries: list[str]) -> bool:
    """Whether a Host (or Origin) value is listed: as given, or with any port for an entry that
    names none (``127.0.0.1`` allows ``127.0.0.1:8000``; ``host:*`` says so explicitly)."""
    if value in entries:
        return True
    base, sep, port = value.rpartition(":")
    return bool(sep) and port.isdigit() and (base in entries or f"{base}:*" in entries)


def origin_allowed(origin: str, entries: list[str], host: str) -> bool:
    """Whether a page of ``origin`` may call this server: listed as given; with any port for a
    ``scheme://name:*`` entry; and for an entry naming no port, with the port of the request's own
    ``Host`` only, i.e. a page this server served itself (``http://localhost`` lets
    ``http://localhost:8000`` call ``localhost:8000``). Not any port: another port on the same
    host is another origin, and can be hostile (a development server on ``localhost:5173`` is not
    the catalog on ``localhost:8000``); the loopback defaults stay safe without naming the port."""
    if origin in entries:
        return True
    base, sep, port = origin.rpartition(":")
    if not (sep and port.isdigit()):
        return False
    if f"{base}:*" in entries:
        return True
    if base not in entries:
        return False
    return f"{base.partition('://')[2]}:{port}".lower() == host.lower()


def caller_key(scope: Scope, headers: Headers) -> str:
    """Whose budget a request spends: its bearer credential (hashed), else its address."""
    credential = credential_key(headers)
    return credential if credential is not None else "address:" + client_address(scope)


def credential_key(headers: Headers) -> str | None:
    authorization = headers.get("authorization")
    if authorization:
        return "credential:" + hashlib.sha256(authorization.encode()).hexdigest()[:24]
    return None


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


class EdgeGuard:
    """Wrap the app: Host/Origin, request rate, body size and depth (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: list[str],
        allowed_origins: list[str],
        max_blob_bytes: int,
        rate_limiter: RateLimiter,
        streamed_upload: Callable[[str], bool] = lambda path: False,
    ) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self.allowed_origins = allowed_origins
        self.max_admin_bytes = max_admin_json_bytes(max_blob_bytes)
        self.rate_limiter = rate_limiter
        self.known = KnownCredentials()
        self.streamed_upload = streamed_upload

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        if not allowed(host, self.allowed_hosts) and not (
            path in PROBE_PATHS and allowed(host, LOOPBACK_HOSTS)
        ):
            detail = (
                f"Host {host[:200]!r} is not one this server answers to: list it in CATALOG_ALLOWED_HOSTS"
                " (comma-separated; an entry without a port allows any port)"
            )
            await refusal(path, 421, "Misdirected request", detail)(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.allowed_origins, host):
            detail = (
                f"Origin {origin[:200]!r} may not call this server: list it in CATALOG_ALLOWED_ORIGINS"
                " (comma-separated; an entry without a port allows only this server's own port,"
                " 'scheme://name:*' any port)"
            )
            await refusal(path, 403, "Forbidden", detail)(scope, receive, send)
            return
        if path not in PROBE_PATHS:
            caller = Caller(self.rate_limiter, self.known, client_address(scope), credential_key(headers))
            scope[CALLER_SCOPE_KEY] = caller  # authentication reports back to it (quotas.Caller)
            wait = caller.admit()
            if wait:
                REFUSALS.labels("mcp" if is_mcp_path(path) else "admin", "requests").inc()
                detail = (
                    "too many requests from this caller; retry after the number of seconds in Retry-After"
                )
                await self._rate_limited(path, wait, scope, receive, send)
                return
        if scope["method"] not in _BODY_METHODS or self.streamed_upload(path):
            await self.app(scope, receive, send)  # no body, or one its route streams and bounds
            return
        await self._bounded(path, scope, receive, send)

    async def _rate_limited(self, path: str, wait: float, scope: Scope, receive: Receive, send: Send) -> None:
        """429 with Retry-After. On ``/mcp`` the answer repeats the request's id (ERR-3), read from
        a body no larger than the one the request could have sent anyway; a larger one is not read
        (``id: null``, the connection closed)."""
        detail = "too many requests from this caller; retry after the number of seconds in Retry-After"
        headers_out = {"Retry-After": retry_after(wait)}
        request_id: RequestId | None = None
        complete = True
        if is_mcp_path(path) and scope["method"] == "POST":
            declared = _content_length(scope)
            body = None
            if declared is None or declared <= MAX_MCP_BODY_BYTES:
                body = await bounded_body(receive, MAX_MCP_BODY_BYTES)
            complete = body is not None
            if body is not None:
                request_id = request_id_of(body)
        response = refusal(
            path,
            429,
            "Too many requests",
            detail,
            code=RATE_LIMITED,
            headers=headers_out,
            request_id=request_id,
        )
        await (response if complete else _closing(response))(scope, receive, send)

    async def _bounded(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        limit = MAX_MCP_BODY_BYTES if is_mcp_path(path) else self.max_admin_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(path, limit, scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away before its body arrived: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(path, limit, scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if json_depth_exceeds(body):
            detail = f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels"
            response = refusal(path, 400, "Bad request", detail, code=PARSE_ERROR)
            await _closing(response)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # afterwards: disconnects, as the app would have seen them

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(path: str, limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    detail = f"the request body is larger than the limit of {limit} bytes"
    await _closing(refusal(path, 413, "Content too large", detail))(scope, receive, send)


def _closing(response: Response) -> Response:
    """The body was not (all) read: the connection cannot be reused."""
    response.headers["connection"] = "close"
    return response
