"""Plain ``subscriptions/listen`` streams: SSE frames written straight to each connection.

Through the SDK a listen stream is a request that never ends: its stateless request machinery (a
task group of three tasks, a memory stream, the dispatch context and the request's models) plus
the handler's own task group, hub subscription and watch, all held for as long as the stream is
open: about 66 KiB of a worker's memory per idle stream, and one decision and one trip through
the SDK's writer per stream per delivery (the fan-out goal: 10,000 streams, under 32 KiB each).

A plainly valid listen (``catalog.mcp.fast.fast_request``) is served here instead:

* Streams that would be told exactly the same things share one :class:`ListenGroup`: the same
  principal (so the same grants), the same honoured filter and the same URIs as the client spelt
  them. A group holds the one hub subscription and the one :class:`~catalog.core.watching.Watch`
  (the same visibility rule, decided once per delivery, not once per stream).
* A delivery's frames are rendered once per group with a hole where each stream's
  ``_meta.subscriptionId`` goes (:func:`delivery_templates`); the group fills each stream's hole
  and queues the frames on it, never awaiting a client.
* Each stream (:class:`FastStream`, written by the shared :class:`~catalog.mcp.streams.SseStream`)
  is the connection's own task writing what is queued, a keep-alive comment after 15 s of silence
  (the SDK's interval), and its end: the listen's result
  when the server stops (SUB-10), the credential's error when it is revoked or expires, nothing
  when the client went away (one more task waits for that). A stream whose client reads too
  slowly to keep up ends as the SDK path's stream does when the hub drops a slow consumer.

The bytes are the SDK path's (``tests/e2e/mcp/test_fast_listen.py`` compares the two streams frame for
frame); everything else about a listen (quotas, authentication, the ack's terms) has one author,
shared with the SDK path in ``catalog.mcp.listen``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from starlette.types import Receive, Scope, Send

from catalog.core.principal import Principal
from catalog.core.watching import Delivery, Watch, open_watch
from catalog.events.credentials import CredentialHold
from catalog.events.hub import Subscription
from catalog.mcp.context import CREDENTIAL_ENDED, tenant_of
from catalog.mcp.fast import LISTEN
from catalog.mcp.listen import (
    ListenHost,
    as_subscribed,
    credential_ended,
    delivery_notifications,
    listen_terms,
)
from catalog.mcp.results import SERVER_INFO_KEY
from catalog.mcp.streams import Ending, SseStream
from catalog.mcp.wire import SSE_HEADERS, dumps, error_message, sse_frame
from catalog.observability import metrics
from catalog.observability.context import note_mcp

logger = logging.getLogger("catalog.mcp")

# The hole for a stream's subscription id in a rendered frame: a control character is always
# escaped in JSON, and no canonical URI holds one, so its encoding appears nowhere else in a frame.
_SID = "\x00subscriptionId\x00"
_SID_JSON = dumps(_SID).encode()

GroupKey = tuple[Principal, bool, tuple[tuple[str, str], ...]]
FrameTemplate = tuple[bytes, bytes]  # a frame around the hole for the subscription id


_ERROR_CODES = {
    Ending.REVOKED: CREDENTIAL_ENDED,
    Ending.EXPIRED: CREDENTIAL_ENDED,
    Ending.FAILED: types.INTERNAL_ERROR,
}


def delivery_templates(delivery: Delivery) -> tuple[FrameTemplate, ...]:
    """The SSE frames of ``delivery`` (``listen.delivery_notifications``), each split at the
    subscription id's place."""
    templates: list[FrameTemplate] = []
    for notification in delivery_notifications(delivery, {SUBSCRIPTION_ID_META_KEY: _SID}):
        before, after = sse_frame(notification).split(_SID_JSON)
        templates.append((before, after))
    return tuple(templates)


def acknowledgement_frame(honoured: types.SubscriptionFilter, meta: dict[str, Any]) -> bytes:
    """``notifications/subscriptions/acknowledged`` as the SDK path sends it."""
    notifications = honoured.model_dump(mode="json", by_alias=True, exclude_none=True)
    return sse_frame(
        {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": meta, "notifications": notifications},
        }
    )


def final_frame(
    ending: Ending, request_id: str | int, meta: dict[str, Any], server_info: dict[str, Any]
) -> bytes:
    """The listen's response that ends its stream: its result (SUB-10), or an error."""
    if ending is Ending.CLOSED:
        result = {"_meta": {**meta, SERVER_INFO_KEY: server_info}, "resultType": "complete"}
        return sse_frame({"jsonrpc": "2.0", "id": request_id, "result": result})
    if ending is Ending.FAILED:
        return sse_frame(error_message(types.INTERNAL_ERROR, "Internal error", id=request_id))
    error = credential_ended(ending.value)
    return sse_frame(error_message(error.code, error.message, id=request_id, data=error.data))


class FastStream(SseStream):
    """One fast listen's connection (:class:`~catalog.mcp.streams.SseStream`): its group's frames
    with this stream's subscription id filled in."""

    __slots__ = ("_sid",)

    def __init__(self, request_id: str | int, hold: CredentialHold | None = None) -> None:
        super().__init__(hold)
        self._sid = dumps(request_id).encode()

    def push(self, templates: tuple[FrameTemplate, ...]) -> None:
        """Queue a delivery's frames (never waits: a group serves every stream from one loop)."""
        if self.ending is None:
            self.queue(self._sid.join(template) for template in templates)


class ListenGroup:
    """The streams one principal opened with the same terms: one subscription, one watch."""

    def __init__(self, key: GroupKey, subscription: Subscription) -> None:
        self.key = key
        self.subscription = subscription  # registered already
        self.streams: dict[FastStream, None] = {}
        self.ready: asyncio.Future[Watch] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    async def run(
        self, host: ListenHost, uris: dict[str, str], on_end: Callable[[ListenGroup], None]
    ) -> None:
        principal, list_changed, _ = self.key
        ending = Ending.CLOSED
        try:
            try:
                watch = await open_watch(
                    host.catalog, principal, list_changed=list_changed, uris=uris.values()
                )
            except asyncio.CancelledError:
                self.ready.cancel()
                raise
            except Exception as exc:
                self.ready.set_exception(exc)
                self.ready.exception()  # retrieved here: each stream waiting for it raises it
                return
            self.ready.set_result(watch)
            async for batch in self.subscription:
                delivery = await watch.decide(batch)
                if delivery.empty:
                    continue
                templates = delivery_templates(as_subscribed(delivery, uris))
                for stream in list(self.streams):
                    stream.push(templates)
        except Exception:
            logger.exception("listen: a group of %d streams failed", len(self.streams))
            ending = Ending.FAILED
        finally:
            self.subscription.close()
            on_end(self)
            for stream in self.streams:
                stream.end(ending)


class FastListens:
    """The fast listen streams of one endpoint, grouped by what they are told."""

    def __init__(self, host: ListenHost) -> None:
        self._host = host
        self._groups: dict[GroupKey, ListenGroup] = {}
        self._streams = 0

    def __len__(self) -> int:
        return self._streams

    @property
    def groups(self) -> int:
        return len(self._groups)

    def _join(self, key: GroupKey, uris: dict[str, str], stream: FastStream) -> ListenGroup:
        group = self._groups.get(key)
        if group is None:
            hub = self._host.hub
            if hub is None:  # the edge asked ``fast_listens_open`` first
                raise RuntimeError("a fast listen without an event hub")
            group = self._groups[key] = ListenGroup(key, hub.subscribe(tenant_of(key[0])))
            group.task = asyncio.get_running_loop().create_task(group.run(self._host, uris, self._forget))
        group.streams[stream] = None
        self._streams += 1
        return group

    def _leave(self, group: ListenGroup, stream: FastStream) -> None:
        del group.streams[stream]
        self._streams -= 1
        if not group.streams and group.task is not None:
            group.task.cancel()  # its end forgets it
            self._forget(group)

    def _forget(self, group: ListenGroup) -> None:
        if self._groups.get(group.key) is group:
            del self._groups[group.key]

    async def serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        request_id: str | int,
        requested: types.SubscriptionFilter,
    ) -> None:
        """Serve one listen to its end (the edge holds its stream slot meanwhile)."""
        started = time.perf_counter()
        uris, honoured = listen_terms(requested, live=True)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: request_id}
        key: GroupKey = (principal, bool(honoured.resources_list_changed), tuple(uris.items()))
        credentials = self._host.catalog.credential_watch
        ending = Ending.GONE
        with credentials.hold(principal) if credentials is not None else contextlib.nullcontext() as hold:
            stream = FastStream(request_id, hold)
            group = self._join(key, uris, stream)
            try:
                await asyncio.shield(group.ready)  # the watch, before the ack (as the SDK path)
                # Counted once it is answered here: a watch that failed leaves the listen to the SDK.
                metrics.MCP_PLAIN_ANSWERS.labels(LISTEN).inc()
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                await send(
                    {
                        "type": "http.response.body",
                        "body": acknowledgement_frame(honoured, meta),
                        "more_body": True,
                    }
                )
                ending = await stream.run(receive, send)
            finally:
                self._leave(group, stream)
        code = _ERROR_CODES.get(ending)
        if ending is not Ending.GONE:
            body = final_frame(ending, request_id, meta, self._host.server_info)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        note_mcp(scope, LISTEN, "2026", code)
        metrics.MCP_REQUESTS.labels(LISTEN, "2026", "result" if code is None else str(code)).inc()
        metrics.MCP_DURATION.labels(LISTEN, "2026").observe(time.perf_counter() - started)

    def close(self) -> None:
        """End every fast stream with the listen's result (SUB-10)."""
        for group in list(self._groups.values()):
            for stream in group.streams:
                stream.end(Ending.CLOSED)
