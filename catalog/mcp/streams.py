"""The one writer of the SSE streams catalog writes itself: queue, keep-alive, credential, end.

Three streams are written here: the fast path's ``subscriptions/listen``
(``catalog.mcp.fast_listen``), the SDK path's (``catalog.mcp.listen``) and the GET stream of a
2025-11-25 session (``catalog.mcp.sessions.get_stream``). What differs between them stays with them: the first bytes
(the listen's ack; the GET stream's empty first chunk), how a delivery becomes frames, and what the
end writes (the listen's result or error; the GET stream's bare end, as 2025 has no error to send).
What they share is here, in :class:`SseStream`:

* frames are queued by whoever decides deliveries, never awaiting a client; a stream that holds
  more than :data:`MAX_BACKLOG` frames unsent is a slow consumer and ends (``Ending.CLOSED``), as
  when the hub drops a slow subscription;
* a keep-alive comment (``wire.SSE_KEEPALIVE``) after :data:`PING_INTERVAL_S` of silence, so
  proxies do not time an idle stream out;
* the credential the stream was opened with (``catalog.events.credentials.CredentialHold``) ends
  it when revoked or expired;
* the client going away ends it (``Ending.GONE``: nothing more is written).

A listen the SDK serves (``catalog.mcp.listen``) runs the same loop over the SDK's response sink,
without keep-alives of its own: the SDK's writer beneath sends those.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections.abc import Iterable

import anyio
from starlette.types import Message, Receive, Send

from catalog.events.credentials import CredentialHold
from catalog.mcp.wire import SSE_KEEPALIVE
from catalog.observability import metrics

PING_INTERVAL_S = 15.0  # the SDK's own keep-alive interval for a committed SSE response
MAX_BACKLOG = 1024  # frames a stream may hold unsent: a client that falls this far behind is slow
# A write to a connection the client has closed: the stream is over, as when the disconnect is read.
CLIENT_GONE_ERRORS = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)


class Ending(enum.Enum):
    CLOSED = "closed"  # the server stops, the hub dropped the stream, or it fell behind
    REVOKED = "revoked"  # the credential was revoked
    EXPIRED = "expired"  # the credential expired
    FAILED = "failed"  # the stream's deliveries could not be decided: an internal error
    GONE = "gone"  # the client went away: nothing more is written


async def wait_for_disconnect(receive: Receive) -> None:
    message: Message = {}
    while message.get("type") != "http.disconnect":
        message = await receive()


class SseStream:
    """One SSE connection's writer: frames queued by others, written by the connection's own task.

    A delivery costs a stream one wake-up of its task: no timer per delivery. One alarm per
    stream, re-armed when it fires, stands for both the keep-alive (due after
    :data:`PING_INTERVAL_S` of silence) and the credential's expiry.
    """

    __slots__ = (
        "_alarm",
        "_hold",
        "_keep_alive",
        "_pending",
        "_ping_due",
        "_running",
        "_wake",
        "_written",
        "ending",
    )

    def __init__(self, hold: CredentialHold | None = None, *, keep_alive: bool = True) -> None:
        self._hold = hold
        self._keep_alive = keep_alive  # False where the writer beneath keeps the stream alive itself
        self._pending: list[bytes] = []
        self._wake: asyncio.Future[None] | None = None
        self._alarm: asyncio.TimerHandle | None = None
        self._written = 0.0  # the loop's time of the last write
        self._ping_due = False
        self._running = False  # between run's start and its end: when the alarm may be armed
        self.ending: Ending | None = None
        if hold is not None:
            hold.on_change = self.credential_changed

    def queue(self, frames: Iterable[bytes]) -> None:
        """Queue a delivery's frames (never waits: one loop may serve many streams)."""
        if self.ending is not None:
            return
        pending = self._pending
        pending.extend(frames)
        if len(pending) > MAX_BACKLOG:
            metrics.EVENTS_DROPPED.labels("slow_consumer").inc(len(pending))
            pending.clear()
            self.end(Ending.CLOSED)
            return
        self.wake()

    def end(self, ending: Ending) -> None:
        if self.ending is None:
            self.ending = ending
            self.wake()

    def wake(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def credential_changed(self) -> None:
        """The credential ended or its expiry moved: look again now."""
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        if self._running:
            self._ring()

    def _ring(self) -> None:
        """The alarm: a keep-alive is due, or the credential has expired; then the next alarm."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        hold = self._hold
        if hold is not None:
            if hold.reason is None and hold.seconds_left() <= 0:
                hold.end("expired")  # every stream holding it is woken
            if hold.reason is not None:
                self.end(Ending.REVOKED if hold.reason == "revoked" else Ending.EXPIRED)
                return
        due = math.inf
        if self._keep_alive:
            if now - self._written >= PING_INTERVAL_S:
                self._ping_due = True
                self.wake()
            due = now + PING_INTERVAL_S if self._ping_due else self._written + PING_INTERVAL_S
        if hold is not None:
            due = min(due, now + hold.seconds_left())
        if due != math.inf:
            self._alarm = loop.call_at(due, self._ring)

    async def run(self, receive: Receive, send: Send) -> Ending:
        """Write queued frames and keep-alives until the stream ends; how it ended. The caller has
        started the response and writes its end."""
        loop = asyncio.get_running_loop()
        gone = loop.create_task(wait_for_disconnect(receive))
        gone.add_done_callback(lambda _: self.end(Ending.GONE))
        self._written = loop.time()
        self._running = True
        self._ring()
        try:
            while self.ending is None:
                if self._pending:
                    frames, self._pending = self._pending, []
                    body = b"".join(frames)
                elif self._ping_due:
                    self._ping_due = False
                    body = SSE_KEEPALIVE
                else:
                    wake = self._wake = loop.create_future()
                    try:
                        await wake
                    finally:
                        self._wake = None
                    continue
                try:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                except CLIENT_GONE_ERRORS:
                    self.end(Ending.GONE)
                    break
                self._written = loop.time()
            assert self.ending is not None
            return self.ending  # what is still queued is dropped, as a cancelled handler's
        finally:
            self._running = False
            gone.cancel()
            if self._alarm is not None:
                self._alarm.cancel()
                self._alarm = None
