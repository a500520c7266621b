"""MCP over stdin/stdout for one local client (``catalog stdio``), with the server HTTP serves.

The server is :func:`catalog.mcp.server.build_server`'s, handlers, middleware and all (whatever it
registers, stdio serves too); what differs is what HTTP gives a request and stdio cannot:

* **The principal**: one per process, from the token it was started with; the SDK's stdio loop is
  driven with it in the lifespan state, where ``catalog.mcp.context.principal_of`` finds it.
* **2026-07-28 ``subscriptions/listen``**: the same handler (``catalog.mcp.listen``); with no SSE
  response to write, it sends its notifications through the SDK's session, tied to the listen.
* **2025-11-25 ``resources/subscribe``**: HTTP keeps a session's subscriptions in PostgreSQL for
  whichever process holds its GET stream; a stdio connection is its own session and stream, so its
  subscriptions live here (:class:`SessionFeed`) and its notifications (``list_changed``, and
  ``updated`` for subscribed URIs) are written to the pipe once the client has initialized.

Changes come from the process's event hub (``catalog.events``: LISTEN/NOTIFY), so a change made
through any process's admin API, or by SQL, reaches the stdio client.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.server.runner import serve_dual_era_loop
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.watching import Delivery, Watch, honoured_uris, open_watch
from catalog.mcp.context import PRINCIPAL_STATE_KEY, Ctx, tenant_of
from catalog.mcp.listen import ListenStreams, as_subscribed
from catalog.mcp.server import CatalogServer, build_server
from catalog.mcp.sessions.transport import SessionTransport

logger = logging.getLogger("catalog.mcp.stdio")

Item = SessionMessage | Exception


class SessionFeed:
    """A 2025-11-25 stdio session's server-initiated notifications: ``list_changed`` for every
    change the principal may see, ``updated`` for its ``resources/subscribe`` URIs."""

    def __init__(self, catalog: Catalog, principal: Principal) -> None:
        self._catalog = catalog
        self._principal = principal
        self.subscriptions: dict[str, str] = {}  # as the client sent it -> canonical
        self._watch: Watch | None = None
        self._stale = True
        self.initialized = anyio.Event()  # the client sent notifications/initialized
        self.stateless = False  # the client's first request was not initialize: 2026-07-28

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        canonical = honoured_uris([params.uri]).get(params.uri)
        if canonical is None:
            raise MCPError(types.INVALID_PARAMS, "Invalid resource URI", data={"uri": params.uri})
        self.subscriptions[params.uri] = canonical
        self._stale = True
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        if self.subscriptions.pop(params.uri, None) is not None:
            self._stale = True
        return types.EmptyResult()

    async def run(self, hub: Any, write_stream: Any) -> None:
        """Until the hub closes: each batch of events decided for this session, written to the
        pipe once the client has initialized (before that, nothing may be sent unasked). The hub
        subscription is opened first, so nothing after the handshake is lost."""
        async with hub.subscribe(tenant_of(self._principal)) as events:
            await self.initialized.wait()
            if self.stateless:
                return  # 2026-07-28: only listens are told of changes
            async for batch in events:
                if self._stale or self._watch is None:
                    self._stale = False
                    self._watch = await open_watch(
                        self._catalog, self._principal, list_changed=True, uris=self.subscriptions.values()
                    )
                delivery = await self._watch.decide(batch)
                for message in session_notifications(as_subscribed(delivery, self.subscriptions)):
                    try:
                        await write_stream.send(SessionMessage(message))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return  # the client is gone


def session_notifications(delivery: Delivery) -> list[types.JSONRPCNotification]:
    """A delivery as 2025 notifications (no ``subscriptionId``: there is no listen to name)."""
    messages: list[types.JSONRPCNotification] = []
    if delivery.list_changed:
        messages.append(
            types.JSONRPCNotification(jsonrpc="2.0", method="notifications/resources/list_changed")
        )
    messages.extend(
        types.JSONRPCNotification(
            jsonrpc="2.0", method="notifications/resources/updated", params={"uri": uri}
        )
        for uri in delivery.updated
    )
    return messages


class StdioHost:
    """What the server's handlers are given (``ServerHost``, ``ListenHost``, ``SessionHost``): the
    catalogue and its hub, for one principal's connection."""

    def __init__(self, catalog: Catalog, principal: Principal) -> None:
        self._catalog = catalog
        self.principal = principal
        self.listen = ListenStreams(self)
        # build_server takes the session transport's subscribe handlers; a stdio connection's own
        # replace them below (its session is not in PostgreSQL).
        sessions = SessionTransport(self, idle_seconds=catalog.settings.session_idle_seconds)
        self.server: CatalogServer = build_server(
            self, signing_key=catalog.signing_key, listen=self.listen, sessions=sessions
        )
        self.server_info = self.server.server_info_stamp
        self.feed = SessionFeed(catalog, principal)
        self.server.add_request_handler(
            "resources/subscribe", types.SubscribeRequestParams, self.feed.subscribe
        )
        self.server.add_request_handler(
            "resources/unsubscribe", types.UnsubscribeRequestParams, self.feed.unsubscribe
        )

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    @property
    def hub(self) -> Any:
        return self._catalog.event_hub

    async def serve(self, read_stream: Any, write_stream: Any) -> None:
        """Serve the client on these streams until it closes its end (or the hub stops)."""
        observed_send, observed_receive = anyio.create_memory_object_stream[Item](0)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._observe, read_stream, observed_send, write_stream)
            if self.hub is not None:
                tasks.start_soon(self.feed.run, self.hub, write_stream)
            await self._serve_loop(observed_receive, write_stream)
            self.listen.close()
            tasks.cancel_scope.cancel()

    async def _serve_loop(self, read_stream: Any, write_stream: Any) -> None:
        """The SDK's loop: the era is the one its first request opens (and then fixed)."""
        await serve_dual_era_loop(
            self.server,
            read_stream,
            write_stream,
            lifespan_state={PRINCIPAL_STATE_KEY: self.principal},
            init_options=self.server.create_initialization_options(),
        )

    async def _answer_probe(self, probe: SessionMessage, write_stream: Any) -> None:
        """A ``server/discover`` sent before the era is chosen (a dual-era client's probe, COMPAT-10),
        answered by a 2026-07-28 loop of its own, so that an ``initialize`` after it still opens a
        2025-11-25 session (the SDK fixes the era on the first request a loop sees)."""
        probe_send, probe_receive = anyio.create_memory_object_stream[Item](1)
        answer_send, answer_receive = anyio.create_memory_object_stream[SessionMessage](16)
        async with anyio.create_task_group() as tasks, answer_receive:
            tasks.start_soon(self._serve_loop, probe_receive, answer_send)
            # Its input stays open until the answer is out: the loop cancels what is in flight at EOF.
            async with probe_send:
                await probe_send.send(probe)
                async for answer in answer_receive:
                    await write_stream.send(answer)
                    if isinstance(answer.message, types.JSONRPCResponse | types.JSONRPCError):
                        break

    async def _observe(self, source: Any, sink: MemoryObjectSendStream[Item], write_stream: Any) -> None:
        """Relay the client's messages to the SDK's loop, noting which era the connection is (its
        first request other than a discover probe, as the SDK decides) and the 2025 handshake's end
        (from then on the session's notifications may be sent)."""
        first = True
        async with sink:
            async for item in source:
                message = item.message if isinstance(item, SessionMessage) else None
                if (
                    first
                    and isinstance(message, types.JSONRPCRequest)
                    and message.method == "server/discover"
                ):
                    assert isinstance(item, SessionMessage)
                    await self._answer_probe(item, write_stream)
                    continue
                if first and isinstance(message, types.JSONRPCRequest):
                    first = False
                    if message.method != "initialize":
                        self.feed.stateless = True
                        self.feed.initialized.set()  # nothing to wait for: the feed ends
                elif (
                    isinstance(message, types.JSONRPCNotification)
                    and message.method == "notifications/initialized"
                ):
                    self.feed.initialized.set()
                await sink.send(item)


async def serve_stdio(catalog: Catalog, principal: Principal, streams: Any) -> None:
    """Serve ``principal`` on ``streams`` (what ``mcp.server.stdio.stdio_server`` yields)."""
    read_stream, write_stream = streams
    await StdioHost(catalog, principal).serve(read_stream, write_stream)
