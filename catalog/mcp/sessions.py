"""2025-11-25 Streamable HTTP sessions (COMPAT-7), served by any worker of any host.

The SDK's session manager keeps a session in the memory of the process that opened it, so the next
request of the session, which the kernel or a load balancer may hand to another worker, finds no
session ("Session not found"). Here a session lives in PostgreSQL (``catalog.core.sessions``) and
every request is served on its own, by whichever process receives it, with the SDK's public kernel
(``serve_one`` over a ``Connection`` rebuilt from the stored ``initialize`` parameters):

* ``POST`` ``initialize`` opens a session (``Mcp-Session-Id`` in the answer), keeping a bounded part
  of its parameters (``-32602`` if even that is over the cap), unless the caller or its tenant
  holds its cap of live sessions (429, ``Retry-After``, ``-31003``: see ``catalog.core.sessions``);
  any other request resumes it (one statement that checks the credential and the idle time and
  touches it) and is answered on an SSE stream of its own, which also carries what the handler
  sends the client meanwhile. A notification or a response is ``202``. A client's answer to a
  server-initiated request (the consent form's ``elicitation/create``) is stored and announced on
  the ``catalog_sessions`` NOTIFY channel, so the process whose read waits for it, wherever it
  runs, continues.
* ``GET`` opens the session's stream for server-initiated messages. The process holding it produces
  them itself from the events every process receives (``list_changed`` for every session, and
  ``updated`` for the session's ``resources/subscribe`` URIs, which are stored with the session and
  reloaded when any process changes them). One stream per session: a newer one, on any process,
  ends the older, so each message is sent once. An open stream keeps its session alive.
* ``DELETE`` ends the session everywhere: its rows go and every process ends its streams and waits.
  A session unused for ``CATALOG_SESSION_IDLE_SECONDS`` is gone at once and swept later.

2026-07-28 requests never come here: they are stateless (``catalog.mcp.asgi`` routes by era).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data, progress_token_from_params
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, jsonrpc_message_adapter
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from catalog.auth.quotas import retry_after
from catalog.auth.refusals import MCP_PATH, RATE_LIMITED, refusal
from catalog.core import sessions as store
from catalog.core.principal import Principal
from catalog.core.service import Catalog
from catalog.core.sessions import SESSIONS_CHANNEL, Notice, SessionRecord
from catalog.core.watching import Delivery, honoured_uris, open_watch
from catalog.events.credentials import CredentialHold
from catalog.mcp.context import PRINCIPAL_STATE_KEY, Ctx
from catalog.mcp.listen import as_subscribed
from catalog.mcp.revisions import for_revision
from catalog.mcp.wire import SSE_HEADERS, SSE_KEEPALIVE, dumps, error_message, error_response, sse_frame
from catalog.observability.metrics import REFUSALS, SESSION_REFUSALS

logger = logging.getLogger("catalog.mcp.sessions")

SESSION_ID_HEADER = "mcp-session-id"
SESSION_STATE_KEY = "catalog_session"  # the resumed SessionRecord, beside the principal

ANSWER_TIMEOUT_S = 600.0  # a consent form waits this long for the person behind the client
ANSWER_POLL_S = 5.0  # besides NOTIFY, a waiting read looks for its answer this often
KEEPALIVE_S = 15.0  # an idle GET stream sends a comment this often (proxies drop silent streams)


class SessionHost(Protocol):
    """What the transport needs from the endpoint that mounts it."""

    server: Server[Any]

    @property
    def catalog(self) -> Catalog: ...

    @property
    def hub(self) -> Any: ...  # catalog.events.hub.EventHub | None


class SessionEnded(MCPError):
    def __init__(self) -> None:
        super().__init__(INVALID_REQUEST, "The session ended while this request was waiting for the client")


def session_of(ctx: Ctx) -> SessionRecord | None:
    """The 2025 session of the request a handler serves (None outside one)."""
    request = ctx.request
    return request.scope.get("state", {}).get(SESSION_STATE_KEY) if request is not None else None


class _NoStandaloneChannel:
    """The session ``Connection``'s own channel. Server-initiated messages of a session go on its GET
    stream, which the process holding it writes from the event hub; handlers never use this."""

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        logger.debug("dropped %s: 2025 session notifications go on the GET stream", method)


_NO_CHANNEL = _NoStandaloneChannel()


@dataclass
class _RequestChannel:
    """The ``DispatchContext`` of one request of a session: what the handler sends the client while
    serving it (notifications, progress, an ``elicitation/create``) goes on the request's own SSE
    stream, before its response."""

    sessions: LegacySessions
    record: SessionRecord | None
    frames: MemoryObjectSendStream[bytes]
    transport: TransportContext
    request_id: types.RequestId
    message_metadata: MessageMetadata
    progress_token: types.ProgressToken | None = None
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)

    @property
    def can_send_request(self) -> bool:
        return self.record is not None

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if self.record is None:
            raise NoBackChannelError(method)
        timeout = (opts or {}).get("timeout", ANSWER_TIMEOUT_S)
        return await self.sessions.ask(self.record, self.frames, method, params, timeout)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.frames.send(sse_frame(message))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


class _GetStream:
    """One open GET stream of a session in this process."""

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.token = secrets.token_hex(8)
        self.ended = anyio.Event()
        self.stale = True  # its subscriptions must be (re)loaded before the next decision

    def end(self) -> None:
        self.ended.set()


SessionIdent = tuple[int, bytes]  # (tenant id, session key)


class LegacySessions:
    """The 2025-11-25 transport of one app process (see the module docstring)."""

    def __init__(self, host: SessionHost, *, idle_seconds: float) -> None:
        self.host = host
        self.idle_seconds = idle_seconds
        self._lifespan_state: Any = None
        self._streams: dict[SessionIdent, _GetStream] = {}
        self._waiters: dict[tuple[int, bytes, str], anyio.Event] = {}
        self._running: dict[tuple[int, bytes, str], anyio.CancelScope] = {}
        self._task_group: anyio.abc.TaskGroup | None = None

    # -- lifespan ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def run(self, catalog: Catalog, stopping: anyio.Event) -> AsyncIterator[None]:
        listener = catalog.event_listener
        if listener is not None:
            await listener.add_channel(SESSIONS_CHANNEL, self._on_notice)
            listener.add_state_listener(self._on_listener_state)
        async with self.host.server.lifespan(self.host.server) as state, anyio.create_task_group() as tasks:
            self._lifespan_state = state
            self._task_group = tasks
            tasks.start_soon(self._sweep_forever, catalog)
            tasks.start_soon(self._end_streams_when, stopping)
            try:
                yield
            finally:
                self.close()
                self._task_group = None
                tasks.cancel_scope.cancel()

    async def _end_streams_when(self, stopping: anyio.Event) -> None:
        await stopping.wait()
        self.close()

    def close(self) -> None:
        """End every GET stream and wake every waiting read (the process is stopping)."""
        for stream in list(self._streams.values()):
            stream.end()
        for scope in list(self._running.values()):
            scope.cancel()

    async def _sweep_forever(self, catalog: Catalog) -> None:
        interval = min(max(self.idle_seconds / 4, 1.0), 60.0)
        while True:
            await anyio.sleep(interval)
            try:
                swept = await store.sweep_sessions(catalog, self.idle_seconds)
            except Exception as exc:
                logger.warning("2025-11-25 sessions: could not sweep idle sessions: %r", exc)
                continue
            if swept:
                logger.info("2025-11-25 sessions: %d idle sessions removed", swept)

    # -- notices from every process ---------------------------------------------------------------

    def _on_notice(self, payload: str) -> None:
        try:
            notice = Notice.parse(payload)
        except ValueError as exc:
            logger.warning("2025-11-25 sessions: %s", exc)
            return
        ident = (notice.tenant_id, notice.key)
        stream = self._streams.get(ident)
        if notice.what == "ended":
            if stream is not None:
                stream.end()
            for (tenant, key, _request), waiter in list(self._waiters.items()):
                if (tenant, key) == ident:
                    waiter.set()
        elif notice.what == "subscriptions" and stream is not None:
            stream.stale = True
        elif notice.what == "stream" and stream is not None and stream.token != notice.detail:
            stream.end()  # a newer GET stream of this session opened elsewhere
        elif notice.what == "answer" and notice.detail is not None:
            waiter = self._waiters.get((notice.tenant_id, notice.key, notice.detail))
            if waiter is not None:
                waiter.set()
        elif notice.what == "cancel" and notice.detail is not None:
            running = self._running.get((notice.tenant_id, notice.key, notice.detail))
            if running is not None:
                running.cancel()

    def _on_listener_state(self, listener: Any) -> None:
        """Notices sent while the LISTEN connection was down are lost: after it is back, waiting
        reads look for their answers and GET streams reload their subscriptions."""
        if not listener.connected:
            return
        for waiter in self._waiters.values():
            waiter.set()
        for stream in self._streams.values():
            stream.stale = True

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
                await self._get_stream(record, scope, receive, send)
            else:
                await store.end_session(self.host.catalog, record.tenant_id, record.key)
                await Response(status_code=200)(scope, receive, send)
        else:
            await error_response(
                405, INVALID_REQUEST, "Method Not Allowed", headers={"Allow": "GET, POST, DELETE"}
            )(scope, receive, send)

    async def _resume(self, scope: Scope, receive: Receive, send: Send) -> SessionRecord | None:
        """The request's session, or None once the client has been told why there is none."""
        session_id = Headers(scope=scope).get(SESSION_ID_HEADER)
        if not session_id:
            await error_response(400, INVALID_REQUEST, "Bad Request: Missing session ID")(
                scope, receive, send
            )
            return None
        principal: Principal = scope["state"][PRINCIPAL_STATE_KEY]
        record = await store.resume_session(self.host.catalog, principal, session_id, self.idle_seconds)
        if record is None:
            # Unknown, ended, expired, or opened with another credential: all the same to the client.
            await error_response(404, INVALID_REQUEST, "Session not found")(scope, receive, send)
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
        record = await self._resume(scope, receive, send)
        if record is None:
            return
        if isinstance(message, types.JSONRPCRequest):
            await self._serve(record, message, request, scope, receive, send)
        elif isinstance(message, types.JSONRPCNotification):
            if message.method == "notifications/cancelled":
                await self._cancel(record, (message.params or {}).get("requestId"))
            await Response(status_code=202)(scope, receive, send)
        else:
            await self._answer(record, message, scope, receive, send)

    # -- initialize -------------------------------------------------------------------------------

    async def _initialize(
        self, message: types.JSONRPCRequest, request: Request, scope: Scope, receive: Receive, send: Send
    ) -> None:
        principal: Principal = scope["state"][PRINCIPAL_STATE_KEY]
        connection = Connection(_NO_CHANNEL, protocol_version=LATEST_HANDSHAKE_VERSION)
        frames, unread = anyio.create_memory_object_stream[bytes](1)  # initialize sends nothing else
        try:
            with frames, unread:
                result = await serve_one(
                    self.host.server,
                    self._channel(None, frames, message, request),
                    message.method,
                    message.params,
                    connection=connection,
                    lifespan_state=self._lifespan_state,
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
    ) -> _RequestChannel:
        return _RequestChannel(
            sessions=self,
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
            _NO_CHANNEL, protocol_version=record.protocol_version, session_id=session_id, client_params=params
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
                            lifespan_state=self._lifespan_state,
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
            await send({"type": "http.response.start", "status": 200, "headers": _sse_headers(session_id)})
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

    # -- server-initiated requests and their answers ----------------------------------------------

    async def ask(
        self,
        record: SessionRecord,
        frames: MemoryObjectSendStream[bytes],
        method: str,
        params: Mapping[str, Any] | None,
        within: float,
    ) -> dict[str, Any]:
        """Send the client a request on this request's stream and wait for its answer, which may
        reach any process (``_answer``)."""
        catalog = self.host.catalog
        request_id = f"catalog-{secrets.token_urlsafe(12)}"  # unique in the session, on any process
        waiting = (record.tenant_id, record.key, request_id)
        await store.expect_answer(catalog, record.tenant_id, record.key, request_id)
        wake = self._waiters[waiting] = anyio.Event()
        answer: dict[str, Any] | None = None
        try:
            outgoing: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
            if params is not None:
                outgoing["params"] = dict(params)
            await frames.send(sse_frame(outgoing))
            with anyio.fail_after(within):
                while answer is None:
                    with anyio.move_on_after(ANSWER_POLL_S):
                        await wake.wait()
                    wake = self._waiters[waiting] = anyio.Event()
                    answer = await store.take_answer(catalog, record.tenant_id, record.key, request_id)
                    if answer is None and not await store.session_exists(
                        catalog, record.tenant_id, record.key
                    ):
                        raise SessionEnded()
        except TimeoutError:
            raise MCPError(INTERNAL_ERROR, f"The client did not answer {method} in time") from None
        finally:
            self._waiters.pop(waiting, None)
            if answer is None:
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await store.forget_request(catalog, record.tenant_id, record.key, request_id)
        if "error" in answer:
            error = types.ErrorData.model_validate(answer["error"])
            raise MCPError.from_error_data(error)
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    async def _answer(
        self,
        record: SessionRecord,
        message: types.JSONRPCResponse | types.JSONRPCError,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """The client's answer to a server-initiated request: stored and announced, 202."""
        body = message.model_dump(mode="json", by_alias=True, exclude_none=True)
        request_id = str(message.id) if message.id is not None else ""
        delivered = bool(request_id) and await store.deliver_answer(
            self.host.catalog, record.tenant_id, record.key, request_id, body
        )
        if not delivered:
            text = "Invalid Request: no request of this session is waiting for this answer"
            await error_response(400, INVALID_REQUEST, text)(scope, receive, send)
            return
        await Response(status_code=202)(scope, receive, send)

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

    # -- the GET stream ---------------------------------------------------------------------------

    async def _get_stream(self, record: SessionRecord, scope: Scope, receive: Receive, send: Send) -> None:
        _, has_sse = check_accept_headers(Request(scope))
        if not has_sse:
            message = "Not Acceptable: Client must accept text/event-stream"
            await error_response(406, INVALID_REQUEST, message)(scope, receive, send)
            return
        catalog = self.host.catalog
        principal: Principal = scope["state"][PRINCIPAL_STATE_KEY]
        ident = (record.tenant_id, record.key)
        stream = _GetStream(record)
        previous = self._streams.get(ident)
        if previous is not None:
            previous.end()
        self._streams[ident] = stream
        try:
            await store.announce_stream(catalog, record.tenant_id, record.key, stream.token)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": _sse_headers(Headers(scope=scope)[SESSION_ID_HEADER]),
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": True})
            credentials = catalog.credential_watch
            with credentials.hold(principal) if credentials is not None else contextlib.nullcontext() as hold:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_end_on_disconnect, receive, stream)
                    tasks.start_soon(self._keep_alive, stream, send)
                    tasks.start_soon(self._touch, stream)
                    tasks.start_soon(self._deliver, stream, principal, send)
                    if hold is not None:  # a revoked or expired credential ends the stream (2025
                        tasks.start_soon(_end_when_ended, hold, stream)  # has no error to send here)
                    await stream.ended.wait()
                    tasks.cancel_scope.cancel()
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if self._streams.get(ident) is stream:
                del self._streams[ident]

    async def _keep_alive(self, stream: _GetStream, send: Send) -> None:
        """An idle stream must not look dead to proxies: a comment every ``KEEPALIVE_S``."""
        while True:
            await anyio.sleep(KEEPALIVE_S)
            await _send_or_end(send, SSE_KEEPALIVE, stream)

    async def _touch(self, stream: _GetStream) -> None:
        """An open stream keeps its session alive; the stream ends if the session is gone."""
        while True:
            await anyio.sleep(min(max(self.idle_seconds / 3, 1.0), 60.0))
            if not await store.touch_session(self.host.catalog, stream.record.tenant_id, stream.record.key):
                stream.end()
                return

    async def _deliver(self, stream: _GetStream, principal: Principal, send: Send) -> None:
        hub = self.host.hub
        if hub is None:
            return
        catalog = self.host.catalog
        record = stream.record
        subscriptions: dict[str, str] = {}
        async with hub.subscribe(record.tenant_id) as events:
            watch = None
            async for batch in events:
                if stream.stale or watch is None:
                    stream.stale = False
                    current = await store.session_subscriptions(catalog, record.tenant_id, record.key)
                    if current is None:
                        stream.end()
                        return
                    subscriptions = current
                    watch = await open_watch(
                        catalog, principal, list_changed=True, uris=subscriptions.values()
                    )
                delivery = await watch.decide(batch)
                for frame in _session_frames(delivery, subscriptions):
                    await _send_or_end(send, frame, stream)
        stream.end()  # the hub closed the subscription (shutdown, or too slow)


def _session_frames(delivery: Delivery, subscriptions: dict[str, str]) -> list[bytes]:
    """A delivery as 2025 notifications (no ``subscriptionId``), each subscribed URI named as the
    client spelt it when subscribing."""
    delivery = as_subscribed(delivery, subscriptions)
    frames: list[bytes] = []
    if delivery.list_changed:
        frames.append(sse_frame({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}))
    for uri in delivery.updated:
        message = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}
        frames.append(sse_frame(message))
    return frames


def _error_data(exc: BaseException) -> types.ErrorData:
    error = handler_exception_to_error_data(exc)
    if error is not None:
        return error
    logger.error("2025-11-25 request failed", exc_info=exc)
    return types.ErrorData(code=INTERNAL_ERROR, message="Internal server error")


def _sse_headers(session_id: str) -> list[tuple[bytes, bytes]]:
    return [*SSE_HEADERS, (SESSION_ID_HEADER.encode(), session_id.encode())]


async def _send_sse(send: Send, frames: list[bytes], session_id: str) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": _sse_headers(session_id)})
    await send({"type": "http.response.body", "body": b"".join(frames), "more_body": False})


async def _send_or_end(send: Send, body: bytes, stream: _GetStream) -> None:
    try:
        await send({"type": "http.response.body", "body": body, "more_body": True})
    except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        stream.end()


async def _wait_for_disconnect(receive: Receive) -> None:
    message: Message = {}
    while message.get("type") != "http.disconnect":
        message = await receive()


async def _cancel_on_disconnect(receive: Receive, cancel: anyio.CancelScope) -> None:
    await _wait_for_disconnect(receive)
    cancel.cancel()


async def _end_when_ended(hold: CredentialHold, stream: _GetStream) -> None:
    await hold.ended()
    stream.end()


async def _end_on_disconnect(receive: Receive, stream: _GetStream) -> None:
    await _wait_for_disconnect(receive)
    stream.end()


__all__ = ["SESSION_ID_HEADER", "LegacySessions", "SessionEnded", "session_of"]
