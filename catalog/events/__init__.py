"""Live changes: one LISTEN connection per process feeding a hub of per-tenant subscriptions.

``events_lifespan`` is an app lifespan hook (``app.state.lifespan_hooks``): it creates the hub and
the listener, sets ``catalog.event_hub``, ``catalog.event_listener``, ``catalog.credential_watch``
(``catalog.events.credentials``), with read replicas the listener barrier
(``catalog.events.barrier``), and the ``events`` readiness probe, and on exit closes every subscription and the LISTEN connection. It closes every
subscription as soon as the app's shutdown signal (``stopping``) is set, which the server sets
before it waits for open connections, so long-lived streams do not hold shutdown up.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import anyio

from catalog.core.tokens import live_tokens
from catalog.events.barrier import ListenerBarrier
from catalog.events.credentials import CREDENTIALS_CHANNEL, CredentialHold, CredentialWatch
from catalog.events.hub import ALL_TENANTS, ChangeEvent, CloseReason, EventHub, Subscription
from catalog.events.listener import ChangeListener, listener_dsn

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog

__all__ = [
    "ALL_TENANTS",
    "ChangeEvent",
    "ChangeListener",
    "CloseReason",
    "CredentialHold",
    "CredentialWatch",
    "EventHub",
    "Subscription",
    "events_lifespan",
    "listener_dsn",
]

logger = logging.getLogger("catalog.events")


@contextlib.asynccontextmanager
async def events_lifespan(catalog: Catalog, stopping: anyio.Event) -> AsyncGenerator[ChangeListener, None]:
    hub = EventHub()
    listener = ChangeListener(listener_dsn(catalog.settings.listen_url()), hub)
    catalog.event_hub = hub
    catalog.event_listener = listener
    catalog.readiness_probes["events"] = listener.status
    credentials = CredentialWatch(lambda token_ids: live_tokens(catalog, token_ids))
    catalog.credential_watch = credentials
    replicas, barrier = catalog.read_replicas, None
    if replicas is not None:
        # No read a notification prompts is older than the change it told of (catalog.core.replicas),
        # whichever host delivered the notification (catalog.events.barrier).
        listener.add_change_observer(replicas.changed)
        barrier = ListenerBarrier(listener)
        await barrier.start()
        replicas.barrier = barrier.wait
    await listener.add_channel(CREDENTIALS_CHANNEL, credentials.on_payload)
    listener.add_state_listener(lambda state: credentials.on_reconnected() if state.connected else None)
    if not await listener.start(wait=5.0):
        logger.warning("event listener: not listening yet (%s); continuing", listener.status())

    async def close_when_stopping() -> None:
        await stopping.wait()
        hub.close_all()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(close_when_stopping)
            try:
                yield listener
            finally:
                tasks.cancel_scope.cancel()
    finally:
        hub.close_all()
        if replicas is not None and barrier is not None:
            replicas.barrier = None
            await barrier.stop()
        await listener.stop()
