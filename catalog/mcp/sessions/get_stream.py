"""The GET stream of a 2025-11-25 session: the server-initiated messages of the session.

The process holding it produces them itself from the events every process receives
(``list_changed`` for every session, and ``updated`` for the session's ``resources/subscribe``
URIs, which are stored with the session and reloaded when any process changes them). One stream per
session: a newer one, on any process, ends the older, so each message is sent once. An open stream
keeps its session alive.
"""

from __future__ import annotations

import contextlib
import secrets

import anyio
from mcp.server.streamable_http import check_accept_headers
from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from catalog.core import sessions as store
from catalog.core.principal import Principal
from catalog.core.sessions import SessionRecord
from catalog.core.watching import Delivery, open_watch
from catalog.events.credentials import CredentialHold
from catalog.mcp.context import PRINCIPAL_STATE_KEY
from catalog.mcp.listen import as_subscribed
from catalog.mcp.sessions.base import SESSION_ID_HEADER, SessionHost, SessionIdent, sse_headers
from catalog.mcp.streams import CLIENT_GONE_ERRORS, Ending, SseStream
from catalog.mcp.wire import error_response, sse_frame


class _GetStream:
    """One open GET stream of a session in this process, written by the shared
    :class:`~catalog.mcp.streams.SseStream`."""

    def __init__(self, record: SessionRecord, hold: CredentialHold | None) -> None:
        self.record = record
        self.token = secrets.token_hex(8)
        self.sse = SseStream(hold)
        self.stale = True  # its subscriptions must be (re)loaded before the next decision

    def end(self) -> None:
        self.sse.end(Ending.CLOSED)


class GetStreams:
    """The GET streams this process holds, one per session."""

    def __init__(self, host: SessionHost, *, idle_seconds: float) -> None:
        self.host = host
        self.idle_seconds = idle_seconds
        self._streams: dict[SessionIdent, _GetStream] = {}

    # -- what notices and the lifecycle do to them -----------------------------------------------

    def end(self, ident: SessionIdent) -> None:
        """The session ended: so does its stream here."""
        stream = self._streams.get(ident)
        if stream is not None:
            stream.end()

    def end_unless(self, ident: SessionIdent, token: str | None) -> None:
        """A stream of the session opened elsewhere (``token``): this older one ends."""
        stream = self._streams.get(ident)
        if stream is not None and stream.token != token:
            stream.end()

    def mark_stale(self, ident: SessionIdent) -> None:
        """The session's subscriptions changed: its stream reloads them before its next decision."""
        stream = self._streams.get(ident)
        if stream is not None:
            stream.stale = True

    def mark_all_stale(self) -> None:
        for stream in self._streams.values():
            stream.stale = True

    def close(self) -> None:
        """End every GET stream (the process is stopping)."""
        for stream in list(self._streams.values()):
            stream.end()

    # -- a stream ---------------------------------------------------------------------------------

    async def serve(self, record: SessionRecord, scope: Scope, receive: Receive, send: Send) -> None:
        _, has_sse = check_accept_headers(Request(scope))
        if not has_sse:
            message = "Not Acceptable: Client must accept text/event-stream"
            await error_response(406, INVALID_REQUEST, message)(scope, receive, send)
            return
        catalog = self.host.catalog
        principal: Principal = scope["state"][PRINCIPAL_STATE_KEY]
        ident = (record.tenant_id, record.key)
        credentials = catalog.credential_watch
        with credentials.hold(principal) if credentials is not None else contextlib.nullcontext() as hold:
            stream = _GetStream(record, hold)  # a revoked or expired credential ends it (2025 has
            previous = self._streams.get(ident)  # no error to send there: the stream just ends)
            if previous is not None:
                previous.end()
            self._streams[ident] = stream
            try:
                await store.announce_stream(catalog, record.tenant_id, record.key, stream.token)
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": sse_headers(Headers(scope=scope)[SESSION_ID_HEADER]),
                    }
                )
                await send({"type": "http.response.body", "body": b"", "more_body": True})
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._touch, stream)
                    tasks.start_soon(self._deliver, stream, principal)
                    await stream.sse.run(receive, send)
                    tasks.cancel_scope.cancel()
                with contextlib.suppress(*CLIENT_GONE_ERRORS):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                if self._streams.get(ident) is stream:
                    del self._streams[ident]

    async def _touch(self, stream: _GetStream) -> None:
        """An open stream keeps its session alive; the stream ends if the session is gone."""
        while True:
            await anyio.sleep(min(max(self.idle_seconds / 3, 1.0), 60.0))
            if not await store.touch_session(self.host.catalog, stream.record.tenant_id, stream.record.key):
                stream.end()
                return

    async def _deliver(self, stream: _GetStream, principal: Principal) -> None:
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
                if not delivery.empty:
                    stream.sse.queue(_session_frames(delivery, subscriptions))
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
