"""MCP reads on PostgreSQL streaming replicas (``CATALOG_READ_DATABASE_URL``).

What runs where: ``resources/list``, ``resources/read`` (without a consent purpose, which writes
an audit entry), ``resources/templates/list`` and completion run on a replica, on both executors
(:func:`on_replica` hands the operation a :class:`Catalog` whose engine is the replica's: the
SQLAlchemy transactions and the bare driver's statements both take it from there). Everything else
stays on the primary: writes, the LISTEN connection, migrations, the admin API and every token
lookup (a revocation must never be outlived by replication lag: the fast path authenticates on
the primary first, then reads with the principal on the replica).

Which replica: round robin over those that are up, not lagging beyond ``CATALOG_READ_MAX_LAG_MS``
and, when the read must not be older than a notification this process delivered for the tenant
(:meth:`ReadReplicas.changed`), whose replay position is past that notification's WAL position.
With ``serve --workers N`` the same holds for a notification any worker of the host delivered: each
publishes its notified positions in a table they share (:mod:`catalog.core.replica_positions`) and
reads all of theirs before it chooses. Across hosts, a read may follow a notification another
host delivered: before a replica is used, :attr:`ReadReplicas.barrier` (the listener barrier,
:mod:`catalog.events.barrier`) makes sure this process's listener has received every notification
committed before the read arrived, so the rule above covers it too.
Otherwise, and when a replica refuses or fails (skipped for :data:`DOWN_FOR_S`, with a log line
and ``catalog_read_replica_skips_total``), the read runs on the primary: nothing fails for it.

Lag is measured without a clock on the replica: a refresh (at most every :data:`REFRESH_S`, in the
background) samples the primary's ``pg_current_wal_lsn()`` and each replica's
``pg_last_wal_replay_lsn()``; a replica's lag is the age of the oldest primary sample it has not
replayed yet (0 when it has replayed them all).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from catalog.core.catalog import Catalog
from catalog.core.errors import database_unavailable, pool_exhausted
from catalog.core.replica_positions import SharedPositions, slot_of
from catalog.observability import metrics

logger = logging.getLogger("catalog.replicas")

T = TypeVar("T")

DOWN_FOR_S = 5.0  # a replica that refused is not tried again for this long
REFRESH_S = 0.5  # positions and lag sampled at most this often
_SAMPLES = 256  # primary positions kept for the lag estimate


def parse_lsn(value: str | None) -> int | None:
    """A ``pg_lsn`` text (``16/B374D848``) as the integer PostgreSQL orders it by."""
    if value is None:
        return None
    high, _, low = value.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass(eq=False)
class Replica:
    """One replica: its catalogue view (the engine on it) and what is known of it."""

    name: str  # host:port, for log lines (never a metric label)
    reader: Catalog
    down_until: float = 0.0
    replayed: int | None = None  # pg_last_wal_replay_lsn() at the last look
    lag_ms: float = 0.0

    @property
    def engine(self) -> AsyncEngine:
        return self.reader.engine

    def mark_down(self, exc: BaseException) -> None:
        if self.down_until <= time.monotonic():
            logger.warning("read replica %s skipped for %.0fs: %r", self.name, DOWN_FOR_S, exc)
        self.down_until = time.monotonic() + DOWN_FOR_S
        metrics.READ_REPLICA_SKIPS.labels("down").inc()


@dataclass(eq=False)
class ReadReplicas:
    """The replicas of a process, and the WAL positions reads must not be older than."""

    primary: AsyncEngine
    replicas: list[Replica]
    max_lag_ms: float
    _turn: itertools.count = field(default_factory=itertools.count)
    # tenant id -> the WAL position after the newest change this process notified for that tenant;
    # ``_floor``: the same for a change of every tenant (a gap). Changes whose position is still
    # being asked for (``_stamping``) or not yet (``_pending``): their tenants read on the primary.
    _notified: dict[int, int] = field(default_factory=dict)
    _floor: int = 0
    _pending: set[int] = field(default_factory=set)
    _pending_all: bool = False
    _stamping: set[int] = field(default_factory=set)
    _stamping_all: bool = False
    _stamping_task: asyncio.Task[None] | None = None
    _samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=_SAMPLES))
    _refreshed: float = 0.0
    _refreshing: asyncio.Task[None] | None = None
    # The positions every worker of this host notified (None: one process, or the table unusable).
    shared: SharedPositions | None = None
    _inherited: list[int] = field(default_factory=list)  # shared slots a dead predecessor left pending
    # Proves this process's listener current before a replica is used (catalog.events.barrier; set
    # by the events lifespan): True once every notification committed before the call has reached
    # :meth:`changed`, False when that is not known in time. None: no listener, no barrier.
    barrier: Callable[[], Awaitable[bool]] | None = None

    def __post_init__(self) -> None:
        if self.shared is not None:
            self._inherited = self.shared.inherited()

    def changed(self, tenant_id: int | None) -> None:
        """A change of ``tenant_id`` (None: of any tenant, as after a gap) was notified and is about
        to reach its streams. Until the primary's WAL position after it is known, reads of that
        tenant run on the primary; then on a replica only once it has replayed that position.

        Called before the event is published, so no read it prompts can come first. One position
        query at a time answers every change notified before it began (its insert position is at or
        after their commits: a notification is sent once its transaction committed).

        The shared table is marked too, before the event is published, so that a read the event
        prompts through another worker waits for the same position."""
        if tenant_id is None:
            self._pending_all = True
        else:
            self._pending.add(tenant_id)
        if self.shared is not None:
            self.shared.mark_pending(tenant_id)
        self._start_stamping()

    def _start_stamping(self) -> None:
        if self._stamping_task is None or self._stamping_task.done():
            self._stamping_task = asyncio.get_running_loop().create_task(self._stamp())

    async def _stamp(self) -> None:
        while self._pending or self._pending_all or self._inherited:
            self._stamping, self._stamping_all = self._pending, self._pending_all
            self._pending, self._pending_all = set(), False
            try:
                async with self.primary.connect() as conn:
                    value = (await conn.execute(text("SELECT pg_current_wal_insert_lsn()::text"))).scalar()
                position = parse_lsn(value) or 0
            except Exception as exc:
                # Unknown yet: those changes stay pending (their reads on the primary) and are retried.
                logger.warning("read replicas: the primary's WAL position is unknown: %r", exc)
                self._pending |= self._stamping
                self._pending_all = self._pending_all or self._stamping_all
                self._stamping, self._stamping_all = set(), False
                await asyncio.sleep(DOWN_FOR_S / 10)
                continue
            for tenant_id in self._stamping:
                if position > self._notified.get(tenant_id, 0):
                    self._notified[tenant_id] = position
            if self._stamping_all:
                self._floor = max(self._floor, position)
            if self.shared is not None:
                self._publish(position)
            self._stamping, self._stamping_all = set(), False

    def _publish(self, position: int) -> None:
        """Publish ``position`` in this worker's row for the changes just stamped (and the slots a
        dead predecessor left pending); a slot stays pending while a change notified there since
        is still waiting for its own position."""
        assert self.shared is not None
        still = {slot_of(tenant_id) for tenant_id in self._pending}
        if self._pending_all:
            still.add(slot_of(None))
        slots = {slot_of(tenant_id) for tenant_id in self._stamping} | set(self._inherited)
        if self._stamping_all:
            slots.add(slot_of(None))
        self._inherited = []
        for slot in slots:
            self.shared.publish(slot, position, still_pending=slot in still)

    def required(self, tenant_id: int | None) -> int | None:
        """The WAL position a replica must have replayed to serve ``tenant_id``; None while a
        notified change's position is not known yet (the primary serves then)."""
        if self._pending_all or self._stamping_all:
            return None
        if tenant_id is None:
            return self._floor
        if tenant_id in self._pending or tenant_id in self._stamping:
            return None
        return max(self._floor, self._notified.get(tenant_id, 0))

    def required_here(self, tenant_id: int | None) -> int | None:
        """:meth:`required`, and what every worker of this host notified (:attr:`shared`)."""
        local = self.required(tenant_id)
        if local is None or self.shared is None:
            return local
        shared = self.shared.required(tenant_id)
        return None if shared is None else max(local, shared)

    async def choose(self, tenant_id: int | None) -> Replica | None:
        """A replica to read ``tenant_id``'s rows on, or None for the primary.

        With a :attr:`barrier` (any read may follow a notification another host delivered), a
        replica that fits is taken only once the barrier has proved this process's listener current
        up to the read's arrival; the rule is then applied again with what that brought in."""
        self._refresh_soon()
        required = self.required_here(tenant_id)
        if required is None:
            metrics.READ_REPLICA_SKIPS.labels("behind").inc()
            return None
        replica = await self._pick(required)
        if replica is None or self.barrier is None:
            return replica
        if not await self.barrier():
            metrics.READ_REPLICA_SKIPS.labels("barrier").inc()
            return None
        proven = self.required_here(tenant_id)
        if proven is None:
            metrics.READ_REPLICA_SKIPS.labels("behind").inc()
            return None
        return replica if proven <= required else await self._pick(proven)

    async def _pick(self, required: int) -> Replica | None:
        """The next replica in turn that is up, not lagging and has replayed ``required``."""
        now = time.monotonic()
        count = len(self.replicas)
        start = next(self._turn)
        for offset in range(count):
            replica = self.replicas[(start + offset) % count]
            if replica.down_until > now:
                metrics.READ_REPLICA_SKIPS.labels("down").inc()
                continue
            if self.max_lag_ms and replica.lag_ms > self.max_lag_ms:
                metrics.READ_REPLICA_SKIPS.labels("lagging").inc()
                continue
            # Known behind: look again once (it may well have caught up since the last refresh).
            if (
                required
                and not self._replayed(replica, required)
                and not (await self._look(replica) and self._replayed(replica, required))
            ):
                metrics.READ_REPLICA_SKIPS.labels("behind").inc()
                continue
            return replica
        return None

    @staticmethod
    def _replayed(replica: Replica, position: int) -> bool:
        return replica.replayed is not None and replica.replayed >= position

    async def _look(self, replica: Replica) -> bool:
        """Read ``replica``'s replay position now; False (and the replica marked down) on failure."""
        try:
            async with replica.engine.connect() as conn:
                value = (await conn.execute(text("SELECT pg_last_wal_replay_lsn()::text"))).scalar()
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            replica.mark_down(exc)
            return False
        replica.replayed = parse_lsn(value)
        return True

    def _refresh_soon(self) -> None:
        if time.monotonic() - self._refreshed < REFRESH_S:
            return
        if self._refreshing is not None and not self._refreshing.done():
            return
        self._refreshed = time.monotonic()
        self._refreshing = asyncio.get_running_loop().create_task(self.refresh())

    async def refresh(self) -> None:
        """Sample the primary's position and every replica's replay position and lag."""
        try:
            async with self.primary.connect() as conn:
                current = (await conn.execute(text("SELECT pg_current_wal_lsn()::text"))).scalar()
        except Exception as exc:
            logger.debug("read replicas: primary position unknown: %r", exc)
        else:
            position = parse_lsn(current)
            if position is not None:
                self._samples.append((time.monotonic(), position))
        for replica in self.replicas:
            if replica.down_until > time.monotonic():
                continue
            try:
                if await self._look(replica):
                    replica.lag_ms = self._lag_ms(replica.replayed)
            except Exception:  # never let a background refresh fail loudly; the next one retries
                logger.exception("read replica %s: refresh failed", replica.name)

    def _lag_ms(self, replayed: int | None) -> float:
        if replayed is None:
            # Not a standby (pg_last_wal_replay_lsn() is NULL on a primary): its position cannot be
            # compared, so it counts as far behind.
            return float("inf")
        for sampled_at, position in self._samples:
            if position > replayed:
                return (time.monotonic() - sampled_at) * 1000.0
        return 0.0

    async def dispose(self) -> None:
        for task in (self._refreshing, self._stamping_task):
            if task is not None:
                task.cancel()
        for replica in self.replicas:
            await replica.engine.dispose()
        if self.shared is not None:
            self.shared.close()
            self.shared = None


async def on_replica(
    catalog: Catalog, read: Callable[[Catalog], Awaitable[T]], *, tenant_id: int | None = None
) -> T:
    """``read`` on a replica's catalogue view, else (none configured, none fit, the one chosen
    failed for being unavailable) on ``catalog`` itself, the primary. ``read`` must only read."""
    replicas = catalog.read_replicas
    if replicas is None:
        return await read(catalog)
    replica = await replicas.choose(tenant_id)
    if replica is not None:
        try:
            result = await read(replica.reader)
        except Exception as exc:
            if not database_unavailable(exc):
                raise
            if not pool_exhausted(exc):  # a busy pool is not a replica down: only this read moves
                replica.mark_down(exc)
        else:
            metrics.READ_REPLICA_READS.labels("replica").inc()
            return result
    metrics.READ_REPLICA_READS.labels("primary").inc()
    return await read(catalog)
