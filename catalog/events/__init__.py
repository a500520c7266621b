"""Live changes: one LISTEN connection per process feeding a hub of per-tenant subscriptions.

``events_lifespan`` is an app lifespan hook (``app.state.lifespan_hooks``): it creates the hub and
the listener, sets ``catalog.event_hub`` and the ``events`` readiness probe, and on exit closes every
subscription and the LISTEN connection. It also closes every subscription as soon as the process
gets SIGTERM/SIGINT, before uvicorn starts waiting for open connections to finish, so long-lived
streams do not hold shutdown up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from catalog.events.hub import ALL_TENANTS, ChangeEvent, CloseReason, EventHub, Subscription
from catalog.events.listener import ChangeListener, listener_dsn

if TYPE_CHECKING:
    from catalog.core.service import Catalog

__all__ = [
    "ALL_TENANTS",
    "ChangeEvent",
    "ChangeListener",
    "CloseReason",
    "EventHub",
    "Subscription",
    "close_on_signals",
    "events_lifespan",
    "listener_dsn",
]

logger = logging.getLogger("catalog.events")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.asynccontextmanager
async def events_lifespan(catalog: Catalog) -> AsyncIterator[ChangeListener]:
    hub = EventHub()
    listener = ChangeListener(listener_dsn(catalog.settings.async_database_url()), hub)
    catalog.event_hub = hub
    catalog.readiness_probes["events"] = listener.status
    if not await listener.start(wait=5.0):
        logger.warning("event listener: not listening yet (%s); continuing", listener.status())
    restore = close_on_signals(hub)
    try:
        yield listener
    finally:
        restore()
        hub.close_all()
        await listener.stop()


def close_on_signals(hub: EventHub) -> Callable[[], None]:
    """Chain SIGTERM/SIGINT so they first close every subscription (then do what they did before).

    Signal handlers can only be set from the main thread; elsewhere (tests serving from a thread)
    this does nothing. Returns a function restoring the previous handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(hub.close_all)
        before = previous.get(signum)
        if callable(before):
            before(signum, frame)
        elif before == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    for signum in _SIGNALS:
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, handler)

    def restore() -> None:
        for signum, before in previous.items():
            if signal.getsignal(signum) is handler:
                signal.signal(signum, before if before is not None else signal.SIG_DFL)

    return restore
