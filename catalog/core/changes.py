"""The change feed: every create, update and delete of a resource, template or grant, in order.

The rows are written by the database's own triggers in the transaction of the change (see the
migrations), so the feed is complete whatever process or SQL session made the change. A reader
polls with ``after=<the last seq it has seen>``. ``seq`` numbers this tenant's changes only (a
sequence per tenant, migration 0004), in the order they committed (migration 0011: numbered at
commit, under a per-tenant lock held until the commit is visible), one by one without gaps. So a
reader that has seen N has seen every change up to N: ``after=N`` misses nothing, now or later.

The streams of this process that follow one tenant share one reader (:class:`ChangeFanout`): one
feed query per wake-up for the tenant, however many streams follow it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Literal

from sqlalchemy import func, select

from catalog.core.catalog import Catalog
from catalog.core.schemas.audit import ChangeOut, ChangesPage
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import change_feed

logger = logging.getLogger("catalog.changes")

MAX_PAGE = 1000
DEFAULT_PAGE = 100
POLL_S = 1.0  # without a live event hub (none in this process), a shared reader reads this often
# Changes a follower may have waiting in the shared reader's batches; beyond, it is dropped from
# them and reads on its own from where it is (a slow client must not hold the batches in memory).
FOLLOWER_BACKLOG = 10 * MAX_PAGE


async def list_changes(
    catalog: Catalog, tenant: Tenant, *, after: int = 0, limit: int = DEFAULT_PAGE
) -> ChangesPage:
    """The tenant's changes with ``seq > after``, oldest first, at most ``limit`` (capped)."""
    limit = max(1, min(limit, MAX_PAGE))
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        rows = (
            await conn.execute(
                select(change_feed)
                .where(change_feed.c.tenant_id == tenant.id, change_feed.c.seq > after)
                .order_by(change_feed.c.seq)
                .limit(limit + 1)
            )
        ).all()
    items = [ChangeOut(seq=row.seq, kind=row.kind, uri=row.uri, op=row.op, at=row.at) for row in rows[:limit]]
    last_seq = items[-1].seq if items else after
    return ChangesPage(
        items=items, next_cursor=str(last_seq) if len(rows) > limit else None, last_seq=last_seq
    )


async def recent_changes(catalog: Catalog, tenant: Tenant, *, count: int) -> ChangesPage:
    """The tenant's last ``count`` changes (capped), oldest first: where a view of the feed starts
    when it wants what happened lately rather than everything since the beginning."""
    count = max(1, min(count, MAX_PAGE))
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        rows = (
            await conn.execute(
                select(change_feed)
                .where(change_feed.c.tenant_id == tenant.id)
                .order_by(change_feed.c.seq.desc())
                .limit(count)
            )
        ).all()
    items = [
        ChangeOut(seq=row.seq, kind=row.kind, uri=row.uri, op=row.op, at=row.at) for row in reversed(rows)
    ]
    return ChangesPage(items=items, last_seq=items[-1].seq if items else 0)


async def latest_seq(catalog: Catalog, tenant: Tenant) -> int:
    """The seq of the tenant's latest change (0 before the first): where a live view starts."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        found = await conn.execute(
            select(func.coalesce(func.max(change_feed.c.seq), 0)).where(change_feed.c.tenant_id == tenant.id)
        )
        return int(found.scalar_one())


IDLE: Literal["idle"] = "idle"
BEHIND: Literal["behind"] = "behind"


class _Follower:
    """One stream's queue of the shared reader's batches."""

    __slots__ = ("backlog", "batches", "behind", "ended", "waiter")

    def __init__(self) -> None:
        self.batches: deque[list[ChangeOut]] = deque()
        self.backlog = 0
        self.behind = False
        self.ended = False
        self.waiter: asyncio.Future[None] | None = None

    def push(self, batch: list[ChangeOut]) -> None:
        if self.behind:
            return
        self.backlog += len(batch)
        if self.backlog > FOLLOWER_BACKLOG:
            self.behind = True
            self.batches.clear()
        else:
            self.batches.append(batch)
        self._wake()

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def next(
        self, ended: asyncio.Future[Any], idle: float
    ) -> list[ChangeOut] | Literal["idle", "behind"] | None:
        """The next batch; IDLE after ``idle`` seconds without one; BEHIND if dropped from the
        batches; None once the reader or ``ended`` ended it."""
        if not self.batches and not self.behind and not self.ended and not ended.done():
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait({self.waiter, ended}, timeout=idle, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self.waiter.cancel()
                self.waiter = None
        if ended.done():
            return None
        if self.batches:
            batch = self.batches.popleft()
            self.backlog -= len(batch)
            return batch
        if self.behind:
            return BEHIND
        if self.ended:
            return None
        return IDLE


class _TenantReader:
    """The one reader of a tenant's feed for every follower of it in this process: woken by the
    tenant's events (or every POLL_S without a hub), it reads what came after ``head`` and hands the
    batch to each follower. It stops when its last follower leaves."""

    def __init__(self, fanout: ChangeFanout, tenant: Tenant, head: int) -> None:
        self.fanout = fanout
        self.tenant = tenant
        self.head = head  # every change up to here has been handed to the followers attached then
        self.followers: set[_Follower] = set()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"catalog-changes-{self.tenant.id}")

    async def _run(self) -> None:
        catalog = self.fanout.catalog
        hub = catalog.event_hub
        # Subscribed before the first read, so nothing falls between the two.
        subscription = hub.subscribe(self.tenant.id) if hub is not None else None
        try:
            # A first follower's position may lie past the feed's end (a client's Last-Event-ID):
            # the reader starts no later than the end, or it would hand out nothing up to there.
            self.head = min(self.head, await latest_seq(catalog, self.tenant))
            while True:
                while True:
                    page = await list_changes(catalog, self.tenant, after=self.head, limit=MAX_PAGE)
                    self.fanout.shared_reads += 1
                    if page.items:
                        self.head = page.last_seq
                        for follower in list(self.followers):
                            follower.push(page.items)
                    if page.next_cursor is None:
                        break
                if subscription is None:
                    await asyncio.sleep(POLL_S)
                    continue
                if await subscription.next_batch() is None:
                    if not subscription.slow or hub is None:
                        return  # the hub shut down: so do the streams
                    subscription = hub.subscribe(self.tenant.id)  # dropped as slow: read anyway
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("change feed reader of tenant %s failed; its streams end", self.tenant.slug)
        finally:
            if subscription is not None:
                subscription.close()
            if self.fanout._readers.get(self.tenant.id) is self:
                del self.fanout._readers[self.tenant.id]
            for follower in self.followers:
                follower.end()

    def detach(self, follower: _Follower) -> None:
        self.followers.discard(follower)
        if not self.followers and self.task is not None:
            self.task.cancel()
            if self.fanout._readers.get(self.tenant.id) is self:
                del self.fanout._readers[self.tenant.id]


class ChangeFanout:
    """The change-feed followers of one process, one shared reader per tenant that has any."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._readers: dict[int, _TenantReader] = {}
        self.shared_reads = 0  # feed queries of the shared readers
        self.own_reads = 0  # feed queries of followers catching up to their reader

    def _attach(self, tenant: Tenant, after: int, follower: _Follower) -> _TenantReader:
        reader = self._readers.get(tenant.id)
        if reader is None:
            reader = self._readers[tenant.id] = _TenantReader(self, tenant, after)
            reader.start()
        reader.followers.add(follower)
        return reader

    async def follow(
        self, tenant: Tenant, *, after: int, ended: asyncio.Future[Any], idle: float
    ) -> AsyncIterator[ChangeOut | None]:
        """The tenant's changes after ``after``, oldest first, then each new one as the shared
        reader reads it; None after ``idle`` seconds without one (the caller keeps its connection
        alive). Ends when ``ended`` is done (whatever its result) or the reader stops (shutdown,
        database failure)."""
        while True:
            follower = _Follower()
            reader = self._attach(tenant, after, follower)
            try:
                # Behind the shared reader (an older Last-Event-ID, or dropped as slow): catch up
                # with queries of its own to where the reader was when it attached; the reader's
                # batches from there on wait in its queue.
                bound = reader.head
                while after < bound:
                    page = await list_changes(self.catalog, tenant, after=after, limit=MAX_PAGE)
                    self.own_reads += 1
                    for change in page.items:
                        yield change
                    after = page.last_seq
                    if page.next_cursor is None:
                        break
                while True:
                    batch = await follower.next(ended, idle)
                    if batch is None:
                        return
                    if batch == BEHIND:
                        break
                    if batch == IDLE:
                        yield None
                        continue
                    for change in batch:
                        if change.seq > after:  # a batch the catch-up already read
                            yield change
                            after = change.seq
            finally:
                reader.detach(follower)
