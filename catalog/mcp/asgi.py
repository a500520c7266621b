"""The ASGI app at ``/mcp``: who is asking, how many streams it holds, then each request to its era.

Host, Origin, the request rate and the body were checked for every route by the app's edge
(``catalog.auth.edge``). Here: the principal from the bearer token (``catalog.auth.authenticate``)
or, with no token, the public tenant (``CATALOG_PUBLIC_TENANT``); otherwise 401 with a challenge. A
credential not bound to a tenant (the platform admin token) gets 403: the agent surface browses
exactly one tenant. A stream (``subscriptions/listen``, a 2025 GET) takes a slot of the process's
stream quotas (``catalog.auth.quotas``) for as long as it is open; without one it is refused with
429 and ``Retry-After`` before anything is streamed, never an empty 200.

Then the era, by the SDK's own rule (a ``MCP-Protocol-Version`` header that is not a handshake
version is a 2026-07-28 request): 2026-07-28 requests go to the SDK's public session manager in its
stateless JSON mode (``subscriptions/listen`` is always a stream), everything else to the 2025-11-25
session transport (``catalog.mcp.sessions``), whose state is in PostgreSQL.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

import mcp_types as types
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from catalog.auth import anonymous_principal, authenticate, authenticate_caller, request_credentials
from catalog.auth.challenges import bearer_challenge
from catalog.auth.quotas import StreamQuotas, authentication_succeeded
from catalog.auth.refusals import RATE_LIMITED, RequestId, refusal, request_id_of
from catalog.core.catalog import Catalog
from catalog.core.errors import Unauthenticated, Unavailable, database_unavailable, pool_exhausted
from catalog.core.principal import Principal
from catalog.core.tokens import is_opaque_token
from catalog.mcp.context import MCP_PATH, PRINCIPAL_STATE_KEY, UNAVAILABLE_STATE_KEY
from catalog.mcp.fast import (
    answer_fast,
    fast_request,
    names_fast_method,
    received_body,
    replaying,
)
from catalog.mcp.fast_listen import FastListens
from catalog.mcp.listen import refused_filter
from catalog.mcp.server import UNAVAILABLE_MESSAGE
from catalog.mcp.sessions.transport import SessionTransport
from catalog.mcp.shadow import Captured, compare, sdk_failed, shadow_scope
from catalog.observability import tracing
from catalog.observability.context import note_principal
from catalog.observability.metrics import REFUSALS, stream_open
from catalog.settings import Settings

logger = logging.getLogger("catalog.mcp")

PRINCIPAL_CACHE_SECONDS = 10.0
STREAM_RETRY_AFTER_S = 5
UNAVAILABLE_RETRY_AFTER_S = 1
BUSY_MESSAGE = "Service unavailable: every database connection of this server is busy; retry later"


class EdgeHost(Protocol):
    settings: Settings
    sessions: SessionTransport
    streams: StreamQuotas
    fast_listens: FastListens

    @property
    def fast_listens_open(self) -> bool: ...

    @property
    def running_catalog(self) -> Catalog | None: ...

    @property
    def manager_2026(self) -> StreamableHTTPSessionManager | None: ...

    @property
    def server_info(self) -> dict[str, Any]: ...


def is_2026_request(scope: Scope) -> bool:
    """The SDK's own era rule: a version header that is not a handshake version is a 2026-07-28 request
    (an unknown one is refused by the SDK with -32022)."""
    version = Headers(scope=scope).get(MCP_PROTOCOL_VERSION_HEADER)
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


def is_short_2026_request(scope: Scope) -> bool:
    """A 2026-07-28 POST answered with one JSON response: anything but ``subscriptions/listen`` (the
    ``Mcp-Method`` header must name the body's method, HTTP-8, or the SDK refuses the request)."""
    if scope.get("method") != "POST" or not is_2026_request(scope):
        return False
    return Headers(scope=scope).get(MCP_METHOD_HEADER) != "subscriptions/listen"


def is_stream_request(scope: Scope) -> bool:
    """A request whose answer is a long-lived stream: a 2026-07-28 listen, a 2025 session's GET."""
    if scope.get("method") == "GET":
        return not is_2026_request(scope)
    return is_2026_request(scope) and Headers(scope=scope).get(MCP_METHOD_HEADER) == "subscriptions/listen"


def unavailable_response(busy: bool = False, request_id: RequestId | None = None) -> Response:
    """A database failure before the response began: HTTP 503 with ``Retry-After`` and a retryable
    ``-32603`` repeating the request's id (ERR-3; ``busy``: every pooled connection in use, see
    ``catalog.db.engine.pool_exhausted``). The same bytes as a handler's such answer
    (``catalog.mcp.server.unavailable_error``), which the edge sends with this status too."""
    return refusal(
        MCP_PATH,
        503,
        "Service unavailable",
        BUSY_MESSAGE if busy else UNAVAILABLE_MESSAGE,
        code=types.INTERNAL_ERROR,
        data={"retryable": True},
        headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)},
        request_id=request_id,
    )


def as_unavailable(start: Message) -> Message:
    """A handler's ``-32603`` for an unavailable database sent as one JSON response: its start with
    the status and ``Retry-After`` of :func:`unavailable_response`."""
    headers = [(name, value) for name, value in start.get("headers", []) if name.lower() != b"retry-after"]
    headers.append((b"retry-after", str(UNAVAILABLE_RETRY_AFTER_S).encode()))
    return {**start, "status": 503, "headers": headers}


def _is_json(start: Message) -> bool:
    return any(
        name.lower() == b"content-type" and value.split(b";")[0].strip() == b"application/json"
        for name, value in start.get("headers", [])
    )


def _id_of(body: bytes | None) -> RequestId | None:
    return request_id_of(body) if body else None


class _Sending:
    """``send`` for the fast path, noting whether its response began."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        self.started = True
        await self._send(message)

    def to_the_sdk(self, exc: Exception, method: str) -> bool:
        """Whether the fast path's failure ``exc`` leaves the request to the SDK: any fault met
        before the response began (RES-19) but the database being unavailable (the edge's 503 on
        either path). The SDK answers it as every error of this path is answered: the same
        ``-32603`` with the request's id and the same status as a request sent there."""
        if self.started or database_unavailable(exc):
            return False
        logger.warning("mcp %s: the fast path failed, the SDK answers: %r", method, exc)
        return True


class McpEdge:
    def __init__(self, host: EdgeHost) -> None:
        self.host = host
        self._anonymous: tuple[float, Principal | None] | None = None

    def _challenge(self, scope: Scope, status: int, error: str | None, detail: str) -> JSONResponse:
        value = bearer_challenge(self.host.settings, scope, error=error)
        body = {"error": error or "unauthorized", "error_description": detail}
        return JSONResponse(body, status_code=status, headers={"WWW-Authenticate": value})

    async def _anonymous_principal(self, catalog: Catalog) -> Principal | None:
        cached = self._anonymous
        now = time.monotonic()
        if cached is not None and now - cached[0] < PRINCIPAL_CACHE_SECONDS:
            return cached[1]
        principal = await anonymous_principal(catalog)
        self._anonymous = (now, principal)
        return principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        catalog = self.host.running_catalog
        if scope["type"] != "http" or catalog is None:
            await JSONResponse({"error": "starting"}, status_code=503)(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                # One status for one condition: a handler that met an unavailable database answers
                # as the edge does before dispatch, 503 (a stream already begun keeps its 200).
                if scope.get("state", {}).get(UNAVAILABLE_STATE_KEY) and _is_json(message):
                    message = as_unavailable(message)
            await send(message)

        body: bytes | None = None
        try:
            if scope.get("method") == "POST":
                # The app's edge has read and bounded the body already: taking it here costs
                # nothing, and every error answered before dispatch can repeat its id (ERR-3).
                body = await received_body(receive)
                if body is None:
                    return  # the client went away before its request was complete
                receive = replaying(body, receive)
            if is_short_2026_request(scope):
                # Answered inline, so the token lookup and the handler's transactions share one
                # pooled connection instead of checking out one each; taken before anything runs,
                # so an exhausted pool is this 503, not a JSON-RPC error inside a 200.
                async with catalog.request_connection(eager=True):
                    mode = self.host.settings.mcp_fast_path
                    if body is not None and mode != "off" and names_fast_method(scope):
                        if mode == "shadow":
                            if await self._shadowed(catalog, scope, body, receive, watched_send):
                                return
                        elif await self._fast(catalog, scope, body, watched_send):
                            return
                    await self._authenticated(catalog, scope, receive, watched_send, body)
                return
            if is_stream_request(scope):
                # A stream holds no pooled connection, but setting it up takes one: an exhausted
                # pool is this 503 now rather than an error on a stream that has already begun.
                async with catalog.engine.connect():
                    pass
            await self._authenticated(catalog, scope, receive, watched_send, body)
        except Exception as exc:
            # Whatever needed the database before the response began (the pool exhausted, the
            # database down) is 503 with Retry-After; once a response or stream has started, its
            # status is sent and the failure is the transport's to report.
            if started or not database_unavailable(exc):
                raise
            logger.warning("mcp: database unavailable: %r", exc)
            await unavailable_response(pool_exhausted(exc), _id_of(body))(scope, receive, send)

    async def _shadowed(
        self, catalog: Catalog, scope: Scope, body: bytes, receive: Receive, send: Send
    ) -> bool:
        """``CATALOG_MCP_FAST_PATH=shadow`` (``catalog.mcp.shadow``): answer on the fast path, run
        the same request on the SDK path without sending its answer, compare the two, then send the
        fast path's answer (so a difference is logged and counted before its client reads on)."""
        fast = Captured()
        if not await self._fast(catalog, scope, body, fast):
            return False  # nothing was sent: the SDK path answers
        method = Headers(scope=scope).get(MCP_METHOD_HEADER) or ""  # the body's (HTTP-8)
        sdk = Captured()
        try:
            with tracing.untraced():  # the request's trace shows the answer sent, once
                await self._authenticated(catalog, shadow_scope(scope), receive, sdk, body)
        except Exception as exc:
            sdk_failed(method, exc)
        else:
            compare(method, fast, sdk)
        await fast.send_to(send)
        return True

    async def _fast(self, catalog: Catalog, scope: Scope, body: bytes, send: Send) -> bool:
        """Answer a fast read or list page (``catalog.mcp.fast``); False when the request must
        take the full path (nothing was sent then)."""
        request = fast_request(scope, body)
        if request is None:
            return False
        authorization = Headers(scope=scope).get("authorization")
        principal: Principal | None = None
        try:
            token = request_credentials(authorization, scope.get("query_string") or b"")
            if token is None:
                principal = await self._anonymous_principal(catalog)
            elif not is_opaque_token(token) or tracing.tracer() is not None:
                # A JWT or the platform token; or, while tracing, any token: known before the
                # method's span starts, every span below it carries the principal as on the SDK path.
                principal = await authenticate(catalog, authorization)
                token = None
        except (Unauthenticated, Unavailable):
            return False  # the full path tells the caller why
        if token is None and (principal is None or principal.tenant_id is None):
            return False
        if principal is not None:
            note_principal(scope, principal)  # before the method's span, which carries it
        sending = _Sending(send)
        try:
            answered = await answer_fast(
                scope,
                sending,
                catalog,
                request,
                token=token,
                principal=principal,
                server_info=self.host.server_info,
            )
        except Exception as exc:
            if not sending.to_the_sdk(exc, request.method):
                raise
            return False
        if answered is None:
            return False
        if token is not None or (principal is not None and principal.kind != "anonymous"):
            authentication_succeeded(scope)  # the credential is known good (catalog.auth.quotas)
        scope.setdefault("state", {})[PRINCIPAL_STATE_KEY] = answered
        return True

    async def _authenticated(
        self, catalog: Catalog, scope: Scope, receive: Receive, send: Send, body: bytes | None
    ) -> None:
        try:
            principal = await authenticate_caller(catalog, scope)
            if principal is None:
                principal = await self._anonymous_principal(catalog)
        except Unauthenticated as exc:
            await self._challenge(scope, exc.status, exc.error, exc.detail)(scope, receive, send)
            return
        except Unavailable as exc:  # the issuer's key set, not the database (catalog.auth.jwt)
            await refusal(
                MCP_PATH,
                503,
                exc.title,
                exc.detail,
                code=types.INTERNAL_ERROR,
                data={"retryable": True},
                headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)},
                request_id=_id_of(body),
            )(scope, receive, send)
            return
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            logger.warning("mcp: database unavailable while authenticating: %r", exc)
            await unavailable_response(pool_exhausted(exc), _id_of(body))(scope, receive, send)
            return
        if principal is None:
            detail = "this endpoint needs a bearer token"
            await self._challenge(scope, 401, None, detail)(scope, receive, send)
            return
        if principal.tenant_id is None:
            detail = "this credential is not bound to a tenant; use a tenant token on /mcp"
            await self._challenge(scope, 403, "insufficient_scope", detail)(scope, receive, send)
            return
        scope.setdefault("state", {})[PRINCIPAL_STATE_KEY] = principal
        note_principal(scope, principal)
        if not is_stream_request(scope):
            await self._dispatch(scope, receive, send)
            return
        with self.host.streams.slot(principal) as refused:
            if refused is not None:
                REFUSALS.labels("mcp", "streams").inc()
                await refusal(
                    MCP_PATH,
                    429,
                    "Too many streams",
                    f"Too many open streams: {refused}",
                    code=RATE_LIMITED,
                    headers={"Retry-After": str(STREAM_RETRY_AFTER_S)},
                    request_id=_id_of(body),
                )(scope, receive, send)
                return
            with stream_open(is_2026_request(scope)):
                if (
                    body is not None
                    and is_2026_request(scope)
                    and self.host.fast_listens_open
                    # A stream is not shadowed (catalog.mcp.shadow): only ``off`` sends it to the SDK.
                    and self.host.settings.mcp_fast_path != "off"
                ):
                    request = fast_request(scope, body)
                    if (
                        request is not None
                        and request.notifications is not None
                        # A refused filter's -32602 is the SDK handler's to send: one author.
                        and refused_filter(request.notifications) is None
                    ):
                        await receive()  # the body, replayed: what the stream reads next is the disconnect
                        sending = _Sending(send)
                        try:
                            await self.host.fast_listens.serve(
                                scope, receive, sending, principal, request.request_id, request.notifications
                            )
                            return
                        except Exception as exc:
                            if not sending.to_the_sdk(exc, request.method):
                                raise
                        receive = replaying(body, receive)
                await self._dispatch(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.host.manager_2026
        if is_2026_request(scope) and manager is not None:
            await manager.handle_request(scope, receive, send)
        else:
            await self.host.sessions.handle(scope, receive, send)
