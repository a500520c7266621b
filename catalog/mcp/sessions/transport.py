"""The HTTP side of the 2025-11-25 sessions: ``POST`` (``initialize``, a request, a notification,
an answer), ``GET`` (the session's stream, :mod:`.get_stream`) and ``DELETE``; each request of a
session served on its own with the SDK's public kernel (``serve_one`` over a ``Connection`` rebuilt
from the stored ``initialize`` parameters), its answer on an SSE stream of its own."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data, progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, jsonrpc_message_adapter
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from catalog.auth.quotas import retry_after
from catalog.auth.refusals import MCP_PATH, RATE_LIMITED, refusal
from catalog.core import sessions as store
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.sessions import Notice, SessionRecord
from catalog.core.watching import honoured_uris
from catalog.mcp.context import PRINCIPAL_STATE_KEY, Ctx
from catalog.mcp.revisions import for_revision
from catalog.mcp.sessions.back_channel import NO_CHANNEL, Answers, RequestChannel
from catalog.mcp.sessions.base import (
    SESSION_ID_HEADER,
    SESSION_STATE_KEY,
    RequestIdent,
    SessionHost,
    logger,
    session_of,
    sse_headers,
)
from catalog.mcp.sessions.get_stream import GetStreams
from catalog.mcp.sessions.lifecycle import SessionLifecycle
from catalog.mcp.streams import wait_for_disconnect
from catalog.mcp.wire import dumps, error_message, error_response, sse_frame
from catalog.observability.metrics import REFUSALS, SESSION_REFUSALS


class SessionTransport:
    """The 2025-11-25 transport of one app process (see :mod:`catalog.mcp.sessions`)."""

    def __init__(self, host: SessionHost, *, idle_seconds: float) -> None:
        self.host = host
        self.idle_seconds = idle_seconds
        self._running: dict[RequestIdent, anyio.CancelScope] = {}
        self.answers = Answers(host)
        self.streams = GetStreams(host, idle_seconds=idle_seconds)
        self.lifecycle = SessionLifecycle(
            host, idle_seconds=idle_seconds, streams=self.streams, answers=self.answers, running=self._running
        )

    def run(self, catalog: Catalog, stopping: anyio.Event) -> contextlib.AbstractAsyncContextManager[None]:
        """The lifespan hook (:meth:`SessionLifecycle.run`)."""
        return self.lifecycle.run(catalog, stopping)

    def close(self) -> None:
        """End every GET stream and wake every waiting read (the process is stopping)."""
        self.lifecycle.close()

    # -- HTTP -------------------------------------------------------------------------------------

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        if method == "POST":
            await self._post(scope, receive, send)
        elif method in ("GET", "DELETE"):
            record = await self._resume(scope, receive, send)
            if record is None:
                return
            if method == "GET":
                await self.streams.serve(record, scope, receive, send)
            else:
                await store.end_session(self.host.catalog, record.tenant_id, record.key)
                await Response(status_code=200)(scope, receive, send)
        else:
            await error_response(
                405, INVALID_REQUEST, "Method Not Allowed", headers={"Allow": "GET, POST, DELETE"}
            )(scope, receive, send)

    async def _resume(
        self, scope: Scope, receive: Receive, send: Send, request_id: Any = None
    ) -> SessionRecord | None:
        """The request's session, or None once the client has been told why there is none (the
        refusal repeats ``request_id``, the id of a request POSTed, ERR-3)."""
        session_id = Headers(scope=scope).get(SESSION_ID_HEADER)
        if not session_id:
            await error_response(400, INVALID_REQUEST, "Bad Request: Missing session ID", id=request_id)(
                scope, receive, send
            )
            return None
        principal: Principal = scope["state"][PRINCIPAL_STATE_KEY]
        record = await store.resume_session(self.host.catalog, principal, session_id, self.idle_seconds)
        if record is None:
            # Unknown, ended, expired, or opened with another credential: all the same to the client.
            await error_response(404, INVALID_REQUEST, "Session not found", id=request_id)(
                scope, receive, send
            )
            return None
        scope["state"][SESSION_STATE_KEY] = record
        return record

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):
            message = "Not Acceptable: Client must accept both application/json and text/event-stream"
            await error_response(406, INVALID_REQUEST, message)(scope, receive, send)
            return
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            message = "Unsupported Media Type: Content-Type must be application/json"
            await error_response(415, INVALID_REQUEST, message)(scope, receive, send)
            return
        body = await request.body()
        try:
            message = jsonrpc_message_adapter.validate_json(body, by_name=False)
        except ValidationError as exc:
            parse_error = any(error["type"] == "json_invalid" for error in exc.errors())
            if parse_error:
                await error_response(400, PARSE_ERROR, "Parse error")(scope, receive, send)
            else:
                text = "Invalid Request: the body must be one JSON-RPC request, notification or response"
                await error_response(400, INVALID_REQUEST, text)(scope, receive, send)
            return
        if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
            await self._initialize(message, request, scope, receive, send)
            return
        request_id = message.id if isinstance(message, types.JSONRPCRequest) else None
        record = await self._resume(scope, receive, send, request_id)
        if record is None:
            return
        if isinstance(message, types.JSONRPCRequest):
            await self._serve(record, message, request, scope, receive, send)
        elif isinstance(message, types.JSONRPCNotification):
            if message.method == "notifications/cancelled":
                await self._cancel(record, (message.params or {}).get("requestId"))
            await Response(status_code=202)(scope, receive, send)
        else:
            await self.answers.deliver(record, message, scope, receive, send)

    # -- initialize -------------------------------------------------------------------------------

    async def _initialize(
        self, message: types.JSONRPCRequest, request: Request, scope: Scope, receive: Receive, send: Send
    ) -> None:
        principal: Principal = scope["state"][PRINCIPAL_STATE_KEY]
        connection = Connection(NO_CHANNEL, protocol_version=LATEST_HANDSHAKE_VERSION)
        frames, unread = anyio.create_memory_object_stream[bytes](1)  # initialize sends nothing else
        try:
            with frames, unread:
                result = await serve_one(
                    self.host.server,
                    self._channel(None, frames, message, request),
                    message.method,
                    message.params,
                    connection=connection,
                    lifespan_state=self.lifecycle.lifespan_state,
                )
        except Exception as exc:
            error = _error_data(exc)
            body = error_message(error.code, error.message, id=message.id, data=error.data)
            await Response(dumps(body), status_code=400, media_type="application/json")(scope, receive, send)
            return
        assert connection.client_params is not None  # committed by the kernel on success
        params = connection.client_params.model_dump(mode="json", by_alias=True, exclude_none=True)
        version = connection.protocol_version
        client = scope.get("client")
        try:
            session_id = await store.open_session(
                self.host.catalog, principal, version, params, address=client[0] if client else None
            )
        except store.UnstorableClientParams as exc:
            SESSION_REFUSALS.labels("params").inc()
            data = {"limit": store.CLIENT_PARAMS_MAX_BYTES}
            body = error_message(INVALID_PARAMS, str(exc), id=message.id, data=data)
            await Response(dumps(body), status_code=400, media_type="application/json")(scope, receive, send)
            return
        except store.TooManySessions as exc:
            SESSION_REFUSALS.labels(exc.limit).inc()
            REFUSALS.labels("mcp", "sessions").inc()
            await refusal(
                MCP_PATH,
                429,
                "Too many sessions",
                str(exc),
                code=RATE_LIMITED,
                data={"limit": exc.limit, "allowed": exc.allowed},
                headers={"Retry-After": retry_after(exc.retry_after)},
                request_id=message.id,
            )(scope, receive, send)
            return
        result = for_revision(version, message.method, result)
        frame = sse_frame({"jsonrpc": "2.0", "id": message.id, "result": result})
        await _send_sse(send, [frame], session_id)

    # -- a request of a session -------------------------------------------------------------------

    def _channel(
        self,
        record: SessionRecord | None,
        frames: MemoryObjectSendStream[bytes],
        message: types.JSONRPCRequest,
        request: Request,
    ) -> RequestChannel:
        return RequestChannel(
            answers=self.answers,
            record=record,
            frames=frames,
            transport=TransportContext(
                kind="streamable-http", can_send_request=record is not None, headers=request.headers
            ),
            request_id=message.id,
            message_metadata=ServerMessageMetadata(request_context=request),
            progress_token=progress_token_from_params(message.params),
        )

    def _connection(self, record: SessionRecord, session_id: str) -> Connection:
        params = types.InitializeRequestParams.model_validate(record.client_params, by_name=False)
        connection = Connection(
            NO_CHANNEL, protocol_version=record.protocol_version, session_id=session_id, client_params=params
        )
        connection.initialized.set()
        return connection

    async def _serve(
        self,
        record: SessionRecord,
        message: types.JSONRPCRequest,
        request: Request,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        session_id = request.headers[SESSION_ID_HEADER]
        frames_in, frames_out = anyio.create_memory_object_stream[bytes](16)
        channel = self._channel(record, frames_in, message, request)
        connection = self._connection(record, session_id)
        running = (record.tenant_id, record.key, str(message.id))

        async def run(cancel: anyio.CancelScope) -> None:
            async with frames_in:
                answer: dict[str, Any] | None = None
                with cancel:
                    self._running[running] = cancel
                    try:
                        result = await serve_one(
                            self.host.server,
                            channel,
                            message.method,
                            message.params,
                            connection=connection,
                            lifespan_state=self.lifecycle.lifespan_state,
                        )
                        result = for_revision(record.protocol_version, message.method, result)
                        answer = {"jsonrpc": "2.0", "id": message.id, "result": result}
                    except Exception as exc:
                        error = _error_data(exc)
                        answer = error_message(error.code, error.message, id=message.id, data=error.data)
                    finally:
                        self._running.pop(running, None)
                if answer is not None:  # None: cancelled (the client left, or cancelled it): no answer
                    await frames_in.send(sse_frame(answer))

        async with frames_out, anyio.create_task_group() as tasks:
            cancel = anyio.CancelScope()
            tasks.start_soon(run, cancel)
            tasks.start_soon(_cancel_on_disconnect, receive, cancel)
            await send({"type": "http.response.start", "status": 200, "headers": sse_headers(session_id)})
            async for frame in frames_out:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tasks.cancel_scope.cancel()

    async def _cancel(self, record: SessionRecord, request_id: Any) -> None:
        """``notifications/cancelled``: stop that request of the session, on whichever process runs it."""
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return
        running = self._running.get((record.tenant_id, record.key, str(request_id)))
        if running is not None:
            running.cancel()
            return
        await store.notify_session(
            self.host.catalog, Notice(record.tenant_id, record.key, "cancel", str(request_id))
        )

    # -- resources/subscribe and unsubscribe (handlers) ---------------------------------------------

    async def on_subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        """Stored with the session: the GET stream, wherever it is held, fires for it from now on."""
        record = session_of(ctx)
        canonical = honoured_uris([params.uri]).get(params.uri)
        if canonical is None:
            raise MCPError(INVALID_PARAMS, "Invalid resource URI", data={"uri": params.uri})
        if record is not None:
            await store.set_subscription(
                self.host.catalog, record.tenant_id, record.key, params.uri, canonical
            )
        return types.EmptyResult()  # exactly {} on the wire (strict peers reject extra keys)

    async def on_unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        record = session_of(ctx)
        if record is not None:
            await store.set_subscription(self.host.catalog, record.tenant_id, record.key, params.uri, None)
        return types.EmptyResult()


def _error_data(exc: BaseException) -> types.ErrorData:
    error = handler_exception_to_error_data(exc)
    if error is not None:
        return error
    logger.error("2025-11-25 request failed", exc_info=exc)
    return types.ErrorData(code=INTERNAL_ERROR, message="Internal server error")


async def _send_sse(send: Send, frames: list[bytes], session_id: str) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": sse_headers(session_id)})
    await send({"type": "http.response.body", "body": b"".join(frames), "more_body": False})


async def _cancel_on_disconnect(receive: Receive, cancel: anyio.CancelScope) -> None:
    await wait_for_disconnect(receive)
    cancel.cancel()
