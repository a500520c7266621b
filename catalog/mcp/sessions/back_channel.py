"""What a handler of a 2025-11-25 session sends the client while it serves a request, and the
client's answers to server-initiated requests (the consent form's ``elicitation/create``).

A request's notifications, progress and server-initiated requests go on that request's own SSE
stream, before its response (:class:`RequestChannel`). The client's answer may reach any process:
it is stored and announced on the ``catalog_sessions`` NOTIFY channel, so the process whose read
waits for it, wherever it runs, continues (:class:`Answers`).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import MessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from catalog.core import sessions as store
from catalog.core.sessions import SessionRecord
from catalog.mcp.sessions.base import RequestIdent, SessionHost, SessionIdent, logger
from catalog.mcp.wire import error_response, sse_frame

ANSWER_TIMEOUT_S = 600.0  # a consent form waits this long for the person behind the client
ANSWER_POLL_S = 5.0  # besides NOTIFY, a waiting read looks for its answer this often


class SessionEnded(MCPError):
    def __init__(self) -> None:
        super().__init__(INVALID_REQUEST, "The session ended while this request was waiting for the client")


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


NO_CHANNEL = _NoStandaloneChannel()


class Answers:
    """The server-initiated requests of this process's session requests, waiting for answers."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host
        self._waiters: dict[RequestIdent, anyio.Event] = {}

    def wake(self, waiting: RequestIdent) -> None:
        """An answer to ``waiting`` was announced: its read looks for it."""
        waiter = self._waiters.get(waiting)
        if waiter is not None:
            waiter.set()

    def wake_session(self, ident: SessionIdent) -> None:
        """The session ended: its waiting reads find no answer and no session."""
        for (tenant, key, _request), waiter in list(self._waiters.items()):
            if (tenant, key) == ident:
                waiter.set()

    def wake_all(self) -> None:
        """Notices may have been lost: every waiting read looks for its answer."""
        for waiter in self._waiters.values():
            waiter.set()

    async def ask(
        self,
        record: SessionRecord,
        frames: MemoryObjectSendStream[bytes],
        method: str,
        params: Mapping[str, Any] | None,
        within: float,
    ) -> dict[str, Any]:
        """Send the client a request on this request's stream and wait for its answer, which may
        reach any process (:meth:`deliver`)."""
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
        # Only an answer leaves the loop: fail_after raises (its context manager swallows nothing).
        assert answer is not None
        if "error" in answer:
            error = types.ErrorData.model_validate(answer["error"])
            raise MCPError.from_error_data(error)
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    async def deliver(
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


@dataclass
class RequestChannel:
    """The ``DispatchContext`` of one request of a session: what the handler sends the client while
    serving it (notifications, progress, an ``elicitation/create``) goes on the request's own SSE
    stream, before its response."""

    answers: Answers
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
        return await self.answers.ask(self.record, self.frames, method, params, timeout)

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
