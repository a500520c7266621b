"""The in-process fan-out of change events to subscriptions (listen streams, 2025 sessions).

One ``EventHub`` per process, fed by the LISTEN connection (``catalog.events.listener``). Each
subscription belongs to one tenant and only ever sees that tenant's events, plus gap markers.

Delivery is by batches: ``async for batch in subscription`` yields the events that arrived since
the previous batch, coalesced:

* duplicates collapse: two events with the same (kind, uri, op class) in one batch become one (the
  later wins); op classes are ``membership`` (created, deleted) and ``content`` (updated);
* a burst collapses: once more than ``max_batch`` distinct events are pending, they are replaced by
  one gap marker (``kind="gap", op="overflow"``) that absorbs the rest of the burst. A consumer that
  wakes to find ``burst_threshold`` or more events waits ``linger`` seconds for the burst to finish
  first, so an import of 100k rows reaches a consumer as one marker, not as hundreds of batches;
* a gap marker means "anything of this tenant may have changed": send ``list_changed`` and treat every
  subscribed URI as possibly updated. A gap in a batch is always the batch's only event, and carries
  the subscription's own ``tenant_id`` (also for a gap published to ALL_TENANTS after a reconnect).

Memory per subscription is bounded by ``max_batch`` whatever the consumer does. A consumer that
holds undelivered events for longer than ``max_lag`` seconds when another event arrives cannot keep
up; it is closed (``close_reason == "slow_consumer"``) and its iteration ends.

Not thread-safe: ``publish`` and everything else run on the event loop's thread.
"""

# Subscription and EventHub are one unit: each calls the other's underscored parts.
# pyright: reportPrivateUsage=false

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import TracebackType

from catalog.observability import metrics

logger = logging.getLogger("catalog.events")

ALL_TENANTS = 0  # tenant_id of an event for every tenant (tenant ids start at 1)
GAP = "gap"

_OP_CLASS = {"created": "membership", "deleted": "membership", "updated": "content"}


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change: ``kind`` is resource, template, grant, tenant or gap; ``op`` created, updated or
    deleted (for a gap: why — reconnected, overflow, unresolved).

    ``tags_before``/``tags_after``: a resource's or template's tags before and after the change,
    None where the row did not exist; both None when not known. Watchers decide visibility through
    tag grants from them (``catalog.core.watching``). Not part of an event's identity."""

    tenant_id: int
    kind: str
    uri: str | None
    op: str
    seq: int | None = None
    tags_before: tuple[str, ...] | None = field(default=None, compare=False)
    tags_after: tuple[str, ...] | None = field(default=None, compare=False)

    def after(self, later: ChangeEvent) -> ChangeEvent:
        """``later`` standing for both: it wins, but keeps the state from before this one (so a
        watcher still sees what changed across the two, e.g. a tag added, then the content)."""
        if self.tags_before is None and self.tags_after is None:  # not known before: not known
            if later.tags_before is None and later.tags_after is None:
                return later
            return replace(later, tags_before=None, tags_after=None)
        return replace(later, tags_before=self.tags_before)

    @property
    def is_gap(self) -> bool:
        return self.kind == GAP


class CloseReason(enum.StrEnum):
    UNSUBSCRIBED = "unsubscribed"  # the consumer closed it (left the ``async with``)
    SLOW_CONSUMER = "slow_consumer"  # it did not take its events within max_lag
    SHUTDOWN = "shutdown"  # the hub closed (process shutting down)


class Subscription:
    """One consumer's view of one tenant's events. Made by ``EventHub.subscribe``.

    Registered from creation (so nothing is missed between subscribing and iterating); use it as an
    async context manager, or call ``close()``, so it leaves the hub.
    """

    __slots__ = ("_gap", "_hub", "_pending", "_since", "_waiter", "close_reason", "tenant_id")

    def __init__(self, hub: EventHub, tenant_id: int) -> None:
        self._hub = hub
        self.tenant_id = tenant_id
        # None, one event, or (two or more) a dict keyed by (kind, uri, op class)
        self._pending: ChangeEvent | dict[tuple[str, str | None, str], ChangeEvent] | None = None
        self._gap: ChangeEvent | None = None
        self._since = 0.0  # clock() when the oldest undelivered event arrived
        self._waiter: asyncio.Future[None] | None = None
        self.close_reason: CloseReason | None = None

    # -- consumer side -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.close_reason is not None

    @property
    def slow(self) -> bool:
        return self.close_reason is CloseReason.SLOW_CONSUMER

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> list[ChangeEvent]:
        # One coroutine and one future per batch, nothing else: with thousands of streams the
        # garbage collector's pauses, not the hub, dominate the tail latency.
        while True:
            if self.close_reason is not None:
                raise StopAsyncIteration
            pending = self._pending
            hub = self._hub
            if (
                self._gap is None
                and isinstance(pending, dict)
                and len(pending) >= hub.burst_threshold
                and hub.linger
            ):
                # A burst: let it finish (or overflow into one marker). Not woken by events;
                # close() takes effect when the linger ends.
                await asyncio.sleep(hub.linger)
                if self.close_reason is not None:
                    raise StopAsyncIteration
            batch = self.take_nowait()
            if batch:
                return batch
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def next_batch(self) -> list[ChangeEvent] | None:
        """The next non-empty batch, waiting for one; None once the subscription is closed."""
        try:
            return await self.__anext__()
        except StopAsyncIteration:
            return None

    def take_nowait(self) -> list[ChangeEvent]:
        """What is pending now (possibly nothing), without waiting."""
        if self._gap is not None:
            batch = [self._gap]
        elif self._pending is None:
            return []
        elif isinstance(self._pending, dict):
            batch = list(self._pending.values())
        else:
            batch = [self._pending]
        self._gap = None
        self._pending = None
        metrics.EVENTS_DELIVERED.inc(len(batch))
        metrics.EVENT_DELIVERY_DELAY.observe(self._hub._now() - self._since)
        return batch

    def close(self, reason: CloseReason = CloseReason.UNSUBSCRIBED) -> None:
        """Leave the hub; a consumer waiting in ``async for`` stops. Idempotent."""
        if self.close_reason is not None:
            return
        self.close_reason = reason
        if reason is CloseReason.SLOW_CONSUMER:
            pending = self._pending
            lost = 0 if pending is None else len(pending) if isinstance(pending, dict) else 1
            metrics.EVENTS_DROPPED.labels("slow_consumer").inc(lost + (self._gap is not None))
            logger.warning(
                "event hub: a consumer of tenant %s held events longer than %ss; its stream ends",
                self.tenant_id,
                self._hub.max_lag,
            )
        self._pending = None
        self._gap = None
        self._hub._remove(self)
        self._wake()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = self.close_reason.value if self.close_reason else "open"
        return f"<Subscription tenant={self.tenant_id} {state}>"

    # -- hub side ------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _push(self, event: ChangeEvent, now: float) -> None:
        hub = self._hub
        pending = self._pending
        if self._gap is not None or pending is not None:
            if now - self._since > hub.max_lag:
                self.close(CloseReason.SLOW_CONSUMER)
                return
            if self._gap is not None:
                metrics.EVENTS_DROPPED.labels("overflow").inc()
                return  # the pending marker already covers it
        else:
            self._since = now
        if event.kind == GAP:
            self._set_gap(event.op, event.seq)
            return
        if pending is None:  # the common case: one event, held as itself
            self._pending = event
            self._wake()
            return
        key = (event.kind, event.uri, _OP_CLASS.get(event.op, event.op))
        if isinstance(pending, ChangeEvent):
            first = (pending.kind, pending.uri, _OP_CLASS.get(pending.op, pending.op))
            if first == key:
                self._pending = pending.after(event)  # the later event wins
                metrics.EVENTS_COALESCED.inc()
                return
            pending = self._pending = {first: pending}
        earlier = pending.pop(key, None)  # the later event wins, and takes the later place
        if earlier is None:
            pending[key] = event
        else:
            pending[key] = earlier.after(event)
            metrics.EVENTS_COALESCED.inc()
        if len(pending) > hub.max_batch:
            metrics.EVENTS_DROPPED.labels("overflow").inc(len(pending))
            metrics.FEED_GAPS.labels("overflow").inc()
            self._set_gap("overflow", None)

    def _set_gap(self, reason: str, seq: int | None) -> None:
        self._pending = None
        self._gap = ChangeEvent(self.tenant_id, GAP, None, reason, seq)
        self._wake()


class EventHub:
    """Fans change events out to per-tenant subscriptions; see the module docstring for the rules."""

    def __init__(
        self,
        *,
        max_batch: int = 256,
        burst_threshold: int = 32,
        linger: float = 0.05,
        max_lag: float = 10.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.max_batch = max_batch
        self.burst_threshold = burst_threshold
        self.linger = linger
        self.max_lag = max_lag
        self._clock = clock
        self._by_tenant: dict[int, dict[Subscription, None]] = {}
        self._count = 0
        self.closed = False
        self.published = 0  # events published (for benchmarks and diagnostics)
        self.dropped_slow = 0  # subscriptions closed as slow consumers

    def __len__(self) -> int:
        return self._count

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def subscribe(self, tenant_id: int) -> Subscription:
        """A subscription to ``tenant_id``'s events, registered at once. After ``close_all`` it is
        born closed (reason shutdown), so a late stream ends at once."""
        if tenant_id == ALL_TENANTS:
            raise ValueError("subscribe to one tenant")
        subscription = Subscription(self, tenant_id)
        if self.closed:
            subscription.close_reason = CloseReason.SHUTDOWN
            return subscription
        self._by_tenant.setdefault(tenant_id, {})[subscription] = None
        self._count += 1
        return subscription

    def subscriptions(self, tenant_id: int | None = None) -> list[Subscription]:
        if tenant_id is None:
            return [sub for subs in self._by_tenant.values() for sub in subs]
        return list(self._by_tenant.get(tenant_id, ()))

    def publish(self, event: ChangeEvent) -> None:
        """Hand ``event`` to its tenant's subscriptions (to all of them for a gap with tenant
        ALL_TENANTS). Synchronous and never blocks: called from the listener's callback."""
        if self.closed:
            return
        self.published += 1
        if event.kind == GAP and self._count:  # a gap nobody is told of (the first start) is none
            metrics.FEED_GAPS.labels(event.op).inc()
        if event.tenant_id == ALL_TENANTS:
            if event.kind != GAP:
                return
            targets = [sub for subs in self._by_tenant.values() for sub in subs]
        else:
            subs = self._by_tenant.get(event.tenant_id)
            if not subs:
                return
            targets = list(subs)  # a slow consumer leaves the dict while we go round
        now = self._now()
        for sub in targets:
            sub._push(event, now)

    def publish_gap(self, reason: str = "reconnected", seq: int | None = None) -> None:
        """Tell every subscription of every tenant that it may have missed changes."""
        self.publish(ChangeEvent(ALL_TENANTS, GAP, None, reason, seq))

    def close_all(self) -> None:
        """End every subscription's iteration (reason shutdown); later subscriptions are born
        closed. Idempotent; safe to call from ``loop.call_soon_threadsafe``."""
        self.closed = True
        for sub in self.subscriptions():
            sub.close(CloseReason.SHUTDOWN)

    def _remove(self, sub: Subscription) -> None:
        subs = self._by_tenant.get(sub.tenant_id)
        if subs is not None and subs.pop(sub, False) is None:
            self._count -= 1
            if not subs:
                del self._by_tenant[sub.tenant_id]
        if sub.close_reason is CloseReason.SLOW_CONSUMER:
            self.dropped_slow += 1
