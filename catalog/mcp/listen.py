"""``subscriptions/listen`` (2026-07-28): one long-lived stream of change notifications per request.

Modelled on the SDK's ``ListenHandler``, with what catalog needs besides: the ack names exactly what
is honoured (SUB-3: ``resourcesListChanged`` and ``resourceSubscriptions``; tools and prompts are
dropped), every notification carries ``_meta.subscriptionId`` (the listen's request id), only URIs
visible to the stream's principal fire (``catalog.core.watching``), a subscribed ``inode/directory``
fires for its descendants, and the events come from the process's hub (``catalog.events``), so a
change made by any process, host or SQL session reaches every stream. The stream ends with the
listen's result (SUB-10) when the server stops.
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from starlette.types import Message

from catalog.core.catalog import Catalog
from catalog.core.watching import Delivery, SubscriptionsRefused, Watch, open_watch, subscription_uris
from catalog.events.hub import EventHub
from catalog.mcp.context import CREDENTIAL_ENDED, Ctx, principal_of, tenant_of
from catalog.mcp.sdk_private import has_listen_sink, listen_sink
from catalog.mcp.streams import Ending, SseStream
from catalog.mcp.wire import sse_frame


class ListenHost(Protocol):
    @property
    def catalog(self) -> Catalog: ...

    @property
    def hub(self) -> EventHub | None: ...

    @property
    def server_info(self) -> dict[str, Any]: ...


def listen_terms(
    requested: types.SubscriptionFilter, *, live: bool
) -> tuple[dict[str, str], types.SubscriptionFilter]:
    """What a listen is honoured (SUB-3): the requested URIs (as sent -> canonical) and the filter
    its ack names; nothing without a live event hub. A filter naming an invalid URI or too many is
    refused (:func:`refused_filter`)."""
    uris = subscription_uris(requested.resource_subscriptions or ()) if live else {}
    honoured = types.SubscriptionFilter(
        resources_list_changed=True if (live and requested.resources_list_changed) else None,
        resource_subscriptions=list(uris) if (live and requested.resource_subscriptions) else None,
    )
    return uris, honoured


def refused_filter(requested: types.SubscriptionFilter) -> MCPError | None:
    """The ``-32602`` a listen with this filter is refused with, before anything is streamed (its
    ``resourceSubscriptions`` past the limit or naming an invalid URI); None when it may open."""
    try:
        subscription_uris(requested.resource_subscriptions or ())
    except SubscriptionsRefused as refused:
        return MCPError(types.INVALID_PARAMS, refused.detail, data=refused.data)
    return None


def as_subscribed(delivery: Delivery, subscriptions: Mapping[str, str]) -> Delivery:
    """The delivery with each updated URI the client subscribed to named as the client spelt it
    (``subscriptions``: as sent -> canonical). Matching is on canonical URIs, but clients match
    notifications by string against what they sent (and what the ack echoed): one spelling in both.
    Other URIs (a subscribed directory's descendants) keep their canonical form."""
    spellings: dict[str, list[str]] = {}
    for sent, canonical in subscriptions.items():
        spellings.setdefault(canonical, []).append(sent)
    updated = tuple(spelt for uri in delivery.updated for spelt in spellings.get(uri, [uri]))
    return delivery if updated == delivery.updated else Delivery(delivery.list_changed, updated)


def delivery_notifications(delivery: Delivery, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The notifications one stream is sent for a delivery, ``meta`` (its subscriptionId) on each."""
    notifications: list[dict[str, Any]] = []
    if delivery.list_changed:
        notifications.append(
            {"jsonrpc": "2.0", "method": "notifications/resources/list_changed", "params": {"_meta": meta}}
        )
    notifications.extend(
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri, "_meta": meta}}
        for uri in delivery.updated
    )
    return notifications


class SharedFrames:
    """SSE frames of listen deliveries, serialised once for every stream that is sent the same.

    One update fans out to hundreds of streams per worker. Streams differ only by
    ``_meta.subscriptionId`` (their request id, often the same value), so frames are keyed by the
    delivery and that id; the last few are kept.
    """

    def __init__(self, remember: int = 256) -> None:
        self._remember = remember
        self._frames: OrderedDict[tuple[Delivery, str], tuple[bytes, ...]] = OrderedDict()

    def frames(self, delivery: Delivery, meta: dict[str, Any]) -> tuple[bytes, ...]:
        key = (delivery, json.dumps(meta[SUBSCRIPTION_ID_META_KEY]))
        frames = self._frames.get(key)
        if frames is None:
            frames = self._frames[key] = tuple(sse_frame(n) for n in delivery_notifications(delivery, meta))
            while len(self._frames) > self._remember:
                self._frames.popitem(last=False)
        return frames


class ListenStreams:
    """The ``subscriptions/listen`` handler of one endpoint, and the streams it holds open."""

    def __init__(self, host: ListenHost) -> None:
        self._host = host
        self._scopes: set[anyio.CancelScope] = set()
        self._frames = SharedFrames()
        self.frames_sent = 0  # through the fast path (tests/db/test_sdk_private.py)
        self.closed = False

    def __len__(self) -> int:
        return len(self._scopes)

    async def __call__(
        self, ctx: Ctx, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        sid = ctx.request_id
        if sid is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen needs a request id")
        principal = principal_of(ctx)
        hub = self._host.hub
        refused = refused_filter(params.notifications)
        if refused is not None:
            raise refused
        uris, honoured = listen_terms(params.notifications, live=hub is not None)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: sid}  # same JSON type as the request id
        duplex = not has_listen_sink(ctx)  # stdio: no SSE response, notifications on the pipe
        sink = None if duplex else listen_sink(ctx)

        async def write(message: Message) -> None:
            assert sink is not None
            await sink.send(message["body"])

        credentials = self._host.catalog.credential_watch
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        try:
            with credentials.hold(principal) if credentials is not None else contextlib.nullcontext() as hold:
                with scope:
                    if self.closed:
                        scope.cancel()
                    subscription = hub.subscribe(tenant_of(principal)) if hub is not None else None
                    async with contextlib.AsyncExitStack() as stack:
                        if subscription is not None:
                            await stack.enter_async_context(subscription)  # before the ack: nothing lost
                        watch = await open_watch(
                            self._host.catalog,
                            principal,
                            list_changed=bool(honoured.resources_list_changed),
                            uris=uris.values(),
                        )
                        await ctx.session.send_notification(
                            types.SubscriptionsAcknowledgedNotification(
                                params=types.SubscriptionsAcknowledgedNotificationParams(
                                    notifications=honoured, _meta=meta
                                )
                            ),
                            related_request_id=sid,
                        )
                        if duplex:
                            await self._notify(ctx, sid, subscription, watch, uris, meta, hold)
                        else:
                            await self._stream(hold, subscription, watch, uris, meta, write)
                return self._ended(hold, meta)
        finally:
            self._scopes.discard(scope)

    async def _stream(
        self,
        hold: Any,
        subscription: Any,
        watch: Watch,
        uris: dict[str, str],
        meta: dict[str, Any],
        write: Any,
    ) -> None:
        """A listen on the SDK's HTTP entry: SSE frames written to its response. The SDK's writer
        beneath sends the keep-alives, and cancels this handler when the client goes: the stream
        waits for no disconnect."""
        stream = SseStream(hold, keep_alive=False)
        async with anyio.create_task_group() as tasks:
            if subscription is not None:
                tasks.start_soon(self._feed, stream, subscription, watch, uris, meta)
            await stream.run(_no_disconnect, write)
            tasks.cancel_scope.cancel()

    @staticmethod
    def _ended(hold: Any, meta: dict[str, Any]) -> types.SubscriptionsListenResult:
        """The listen's response: its graceful result (SUB-10), or the error of its credential's end."""
        if hold is not None and hold.reason is not None:
            raise credential_ended(hold.reason)
        return types.SubscriptionsListenResult(_meta=meta)

    async def _notify(
        self,
        ctx: Ctx,
        sid: Any,
        subscription: Any,
        watch: Watch,
        uris: dict[str, str],
        meta: dict[str, Any],
        hold: Any,
    ) -> None:
        """A listen on a duplex transport (stdio): each delivery's notifications sent through the
        SDK's session, tied to the listen's request, until the hub closes the subscription, the
        credential ends or the client cancels the listen."""
        async with anyio.create_task_group() as tasks:
            if hold is not None:

                async def end_with_credential() -> None:
                    await hold.ended()
                    tasks.cancel_scope.cancel()

                tasks.start_soon(end_with_credential)
            if subscription is None:
                await anyio.sleep_forever()
                return
            async for batch in subscription:
                delivery = as_subscribed(await watch.decide(batch), uris)
                for message in delivery_notifications(delivery, meta):
                    del message["jsonrpc"]
                    notification = types.server_notification_adapter.validate_python(message)
                    await ctx.session.send_notification(notification, related_request_id=sid)
            tasks.cancel_scope.cancel()

    async def _feed(
        self, stream: SseStream, subscription: Any, watch: Watch, uris: dict[str, str], meta: dict[str, Any]
    ) -> None:
        """Queue each delivery's frames on ``stream``; the hub closing the subscription (shutdown,
        or this stream too slow) ends it gracefully."""
        async for batch in subscription:
            delivery = await watch.decide(batch)
            if stream.ending is None:
                frames = self._frames.frames(as_subscribed(delivery, uris), meta)
                stream.queue(frames)
                self.frames_sent += len(frames)
        stream.end(Ending.CLOSED)

    def close(self) -> None:
        """End every stream gracefully: each handler leaves its loop and returns its result."""
        self.closed = True
        for scope in list(self._scopes):
            scope.cancel()


def credential_ended(reason: str) -> MCPError:
    """How a listen ends when its credential does: the listen's response is this error, not its
    graceful result, so the client knows to authenticate again rather than to re-listen as before."""
    return MCPError(
        CREDENTIAL_ENDED,
        f"The credential this stream was opened with was {reason}; the stream has ended",
        data={"reason": reason},
    )


async def _no_disconnect() -> Message:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")
