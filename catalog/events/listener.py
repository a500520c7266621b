"""The process's one LISTEN connection: NOTIFY payloads from the triggers become hub events.

A dedicated asyncpg connection (not from the SQLAlchemy pool) listens on ``catalog_changes``. It is
watched two ways: asyncpg's termination listener (the socket closed: backend terminated, server
restarted) and a keepalive query every ``keepalive_interval`` seconds that must answer within
``keepalive_timeout`` (a silent network). When it dies the listener reconnects with capped, jittered
exponential backoff; after every reconnection it publishes one gap to every subscription of every
tenant, because whatever committed while nobody listened was never announced.

A reconnection always counts as a gap, even when ``max(seq)`` in the feed did not move: a tenant's
changes are numbered at commit (migration 0011), but a notification sent while we were away is lost
whatever its number, and the feed's ``max(seq)`` is taken over all tenants. ``last_seq`` (highest
seen) and the feed's ``max(seq)`` at the reconnection are kept for diagnostics and travel as the gap's ``seq``.

A statement that changed many resources (an import) sends one ``bulk`` notification naming the
range of feed seqs it wrote (migration 0006). Up to ``BULK_EXPAND`` changes are read back from the
feed in one query and published one by one, as if each had been notified; a larger range is
published as one gap of its tenant (``op="bulk"``): subscribers re-read what they watch, which is
what the hub would make of that many events anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy.engine import URL, make_url

from catalog.db.engine import NOTIFY_CHANNEL
from catalog.events.hub import GAP, ChangeEvent, EventHub
from catalog.observability import metrics

logger = logging.getLogger("catalog.events")

APPLICATION_NAME = "catalog-listener"
BULK = "bulk"
BULK_EXPAND = 256  # a bulk range up to this many changes is published change by change


def listener_dsn(url: str | URL) -> str:
    """A plain ``postgresql://`` DSN for asyncpg from any SQLAlchemy URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def parse_payload(payload: str) -> ChangeEvent:
    """A trigger's payload ``{"t", "k", "u", "o", "s", "b"?, "a"?}`` as an event (``b``/``a``: the
    row's tags before and after); ValueError if malformed."""
    try:
        data = json.loads(payload)
        tenant, kind, uri, op, seq = data["t"], data["k"], data.get("u"), data["o"], data.get("s")
        before, after = _tags(data.get("b")), _tags(data.get("a"))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"malformed change payload: {payload[:200]!r}") from exc
    if (
        type(tenant) is not int
        or tenant <= 0
        or not isinstance(kind, str)
        or not isinstance(op, str)
        or not (uri is None or isinstance(uri, str))
        or not (seq is None or type(seq) is int)
    ):
        raise ValueError(f"malformed change payload: {payload[:200]!r}")
    return ChangeEvent(tenant, kind, uri, op, seq, before, after)


def parse_bulk(payload: str) -> tuple[int, int, int]:
    """A bulk payload's ``(first seq, last seq, count)``; ValueError if malformed."""
    try:
        data = json.loads(payload)
        first, last, count = data["f"], data["s"], data["n"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"malformed bulk payload: {payload[:200]!r}") from exc
    if not all(type(value) is int for value in (first, last, count)) or first > last or count < 1:
        raise ValueError(f"malformed bulk payload: {payload[:200]!r}")
    return first, last, count


def _tags(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise ValueError("tags must be a list of strings")
    return tuple(value)


class ChangeListener:
    """Feeds ``hub`` from PostgreSQL; ``start()``, then ``stop()``. ``status()`` is the readiness probe."""

    def __init__(
        self,
        dsn: str,
        hub: EventHub,
        *,
        application_name: str = APPLICATION_NAME,
        keepalive_interval: float = 2.0,
        keepalive_timeout: float = 2.0,
        connect_timeout: float = 5.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
    ) -> None:
        self._dsn = dsn
        self.hub = hub
        self.application_name = application_name
        self.keepalive_interval = keepalive_interval
        self.keepalive_timeout = keepalive_timeout
        self.connect_timeout = connect_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max

        self.connected = False
        self.last_seq: int | None = None  # highest seq seen in a notification or the feed
        self.connections = 0  # successful connections so far (reconnections = connections - 1)
        self._conn: asyncpg.Connection | None = None
        self._lock = asyncio.Lock()  # one query at a time on the connection
        self._task: asyncio.Task[None] | None = None
        self._resolving: set[asyncio.Task[None]] = set()
        self._down_since: datetime | None = None
        self._attempts = 0
        self._last_error: str | None = None
        self._stopped = False
        self._state_listeners: list[Callable[[ChangeListener], None]] = []
        self._change_observers: list[Callable[[int | None], None]] = []
        self._channels: dict[str, Callable[[str], None]] = {}  # other channels: name -> on payload
        self._connected_waiters: list[asyncio.Future[None]] = []

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, wait: float | None = 5.0) -> bool:
        """Start listening in the background; wait up to ``wait`` seconds for the first LISTEN.
        Returns whether it is listening (if not, it keeps trying and ``status()`` says why)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="catalog-listener")
        if wait is None or self.connected:
            return self.connected
        waiter = asyncio.get_running_loop().create_future()
        self._connected_waiters.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, wait)
        return self.connected

    async def stop(self) -> None:
        """Stop listening and close the connection (promptly: no graceful wait beyond a second)."""
        self._stopped = True
        tasks = [t for t in (self._task, *self._resolving) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._discard_connection()
        self._set_state(connected=False)

    # -- state ---------------------------------------------------------------------------------

    def status(self) -> str:
        """The readiness probe: "ok", or what is wrong."""
        if self.connected:
            return "ok"
        if self._stopped:
            return "stopped"
        if self._down_since is None:
            return "starting"
        since = self._down_since.isoformat(timespec="seconds").replace("+00:00", "Z")
        detail = f"reconnecting since {since} ({self._attempts} attempts"
        if self._last_error:
            detail += f"; last error: {self._last_error}"
        return detail + ")"

    def add_state_listener(self, callback: Callable[[ChangeListener], None]) -> None:
        """``callback(listener)`` runs synchronously on every change of ``connected``."""
        self._state_listeners.append(callback)

    def add_change_observer(self, callback: Callable[[int | None], None]) -> None:
        """``callback(tenant_id)`` for every change notified, before it is published; after every
        reconnection ``callback(None)`` (whatever was missed may have been any tenant's)."""
        self._change_observers.append(callback)

    async def add_channel(self, channel: str, on_payload: Callable[[str], None]) -> None:
        """Also LISTEN on ``channel``, now and after every reconnection; ``on_payload(payload)`` runs
        on the event loop for each notification. What was sent while the connection was down is
        lost, as on the change feed: consumers re-check their state on reconnection
        (``add_state_listener``)."""
        self._channels[channel] = on_payload
        conn = self._conn
        if conn is not None and not conn.is_closed():
            async with self._lock:
                await conn.add_listener(channel, self._on_channel)

    async def notify(self, channel: str, payload: str) -> None:
        """``pg_notify(channel, payload)`` on this connection (committed at once): delivered to every
        listener of ``channel`` after every notification committed before it, this one included
        (the listener barrier's echo, :mod:`catalog.events.barrier`). ConnectionError when not
        listening."""
        conn = self._conn
        if conn is None or conn.is_closed() or not self.connected:
            raise ConnectionError("the event listener is not connected")
        async with self._lock:
            await conn.execute("SELECT pg_notify($1, $2)", channel, payload, timeout=self.keepalive_timeout)

    @property
    def backend_pid(self) -> int | None:
        conn = self._conn
        return conn.get_server_pid() if conn is not None and self.connected else None

    def _set_state(self, *, connected: bool) -> None:
        if connected == self.connected:
            return
        self.connected = connected
        if connected:
            self._down_since = None
            self._attempts = 0
            self._last_error = None
            waiters, self._connected_waiters = self._connected_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        elif self._down_since is None and not self._stopped:
            self._down_since = datetime.now(UTC)
        for callback in list(self._state_listeners):
            try:
                callback(self)
            except Exception:
                logger.exception("event listener: a state listener failed")

    # -- the connection loop -------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while not self._stopped:
            lost = asyncio.get_running_loop().create_future()
            try:
                max_seq = await self._connect(lost)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._attempts += 1
                self._last_error = _describe(exc)
                if self._down_since is None:
                    self._down_since = datetime.now(UTC)
                delay = self._backoff(failures)
                failures += 1
                logger.warning(
                    "event listener: cannot connect (%s); retrying in %.2fs", self._last_error, delay
                )
                await self._discard_connection()
                await asyncio.sleep(delay)
                continue
            failures = 0
            self.connections += 1
            self._set_state(connected=True)
            if self.connections > 1:
                metrics.LISTENER_RECONNECTS.inc()
                logger.info(
                    "event listener: reconnected (feed at seq %s, last seen %s); announcing a gap",
                    max_seq,
                    self.last_seq,
                )
            if max_seq is not None and (self.last_seq is None or max_seq > self.last_seq):
                self.last_seq = max_seq
            # After LISTEN is in place: anything committed later is announced, anything before is
            # covered by the gap. Harmless at first start (no subscriptions yet, or nothing stale).
            for observer in self._change_observers:
                observer(None)
            self.hub.publish_gap("reconnected", max_seq)
            await self._watch(lost)
            self._set_state(connected=False)
            await self._discard_connection()
            if not self._stopped:
                # The first retry comes quickly (a terminated backend, a restart); later ones back off.
                await asyncio.sleep(self._backoff(0))

    async def _connect(self, lost: asyncio.Future[None]) -> int | None:
        conn = await asyncpg.connect(
            self._dsn,
            # asyncpg leaves `timeout` unannotated (pyright infers int from its default, 60); it
            # takes seconds as a float (asyncio.wait_for).
            timeout=self.connect_timeout,  # pyright: ignore[reportArgumentType]
            command_timeout=self.keepalive_timeout + self.connect_timeout,
            server_settings={"application_name": self.application_name},
        )
        self._conn = conn

        def on_terminated(_: object) -> None:
            if not lost.done():
                lost.set_result(None)
            if conn is self._conn:
                self._set_state(connected=False)

        conn.add_termination_listener(on_terminated)
        # The feed is behind row-level security; this connection reads it for every tenant.
        await conn.execute("SELECT set_config('catalog.all_tenants', 'on', false)")
        await conn.add_listener(NOTIFY_CHANNEL, self._on_notify)
        for channel in list(self._channels):
            await conn.add_listener(channel, self._on_channel)
        try:
            return await conn.fetchval("SELECT max(seq) FROM change_feed")
        except asyncpg.UndefinedTableError:
            return None  # not migrated yet; /readyz reports the schema

    async def _watch(self, lost: asyncio.Future[None]) -> None:
        """Return when the connection is dead: closed under us, or silent to a keepalive."""
        while not lost.done():
            await asyncio.wait([lost], timeout=self.keepalive_interval)
            if lost.done():
                return
            conn = self._conn
            if conn is None or conn.is_closed():
                return
            try:
                async with self._lock:
                    await conn.fetchval("SELECT 1", timeout=self.keepalive_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._last_error = f"keepalive failed: {_describe(exc)}"
                logger.warning("event listener: %s; reconnecting", self._last_error)
                return

    async def _discard_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None or conn.is_closed():
            return
        try:
            await asyncio.wait_for(conn.close(), timeout=1.0)
        except (Exception, asyncio.CancelledError):
            conn.terminate()

    def _backoff(self, failures: int) -> float:
        ceiling = min(self.backoff_max, self.backoff_initial * (2**failures))
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # "equal jitter"

    # -- notifications -------------------------------------------------------------------------

    def _on_channel(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        on_payload = self._channels.get(channel)
        if on_payload is None:
            return
        try:
            on_payload(payload)
        except Exception:
            logger.exception("event listener: the consumer of channel %s failed", channel)

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            event = parse_payload(payload)
        except ValueError as exc:
            metrics.EVENTS_DROPPED.labels("malformed").inc()
            logger.warning("event listener: %s", exc)
            return
        metrics.EVENTS_RECEIVED.inc()
        for observer in self._change_observers:
            observer(event.tenant_id)  # before the event reaches any stream (the read replicas')
        if event.seq is not None and (self.last_seq is None or event.seq > self.last_seq):
            self.last_seq = event.seq
        if event.op == BULK:
            try:
                first, last, count = parse_bulk(payload)
            except ValueError as exc:
                logger.warning("event listener: %s", exc)
                self.hub.publish(ChangeEvent(event.tenant_id, GAP, None, BULK, event.seq))
                return
            if count > BULK_EXPAND:
                self.hub.publish(ChangeEvent(event.tenant_id, GAP, None, BULK, last))
                return
            self._spawn(self._expand(event, first, last))
            return
        if event.uri is None and event.seq is not None:
            # The URI (or the tags) too long for the payload, or no URI (a tag grant): the feed says.
            self._spawn(self._resolve(event))
            return
        self.hub.publish(event)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._resolving.add(task)
        task.add_done_callback(self._resolving.discard)

    async def _expand(self, event: ChangeEvent, first: int, last: int) -> None:
        """A bulk range's changes from the feed, published one by one in seq order. The range may
        hold another transaction's changes of the tenant too (numbers are taken, not reserved):
        those are real, committed changes, announced once more."""
        rows = None
        conn = self._conn
        try:
            if conn is not None:
                async with self._lock:
                    rows = await conn.fetch(
                        "SELECT seq, uri, op, tags_before, tags_after FROM change_feed"
                        " WHERE tenant_id = $1 AND kind = $2 AND seq BETWEEN $3 AND $4 ORDER BY seq",
                        event.tenant_id,
                        event.kind,
                        first,
                        last,
                        timeout=self.keepalive_timeout,
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("event listener: cannot read seqs %s-%s from the feed: %s", first, last, exc)
        if rows is None:
            self.hub.publish(ChangeEvent(event.tenant_id, GAP, None, "unresolved", last))
            return
        for row in rows:
            self.hub.publish(
                ChangeEvent(
                    event.tenant_id,
                    event.kind,
                    row["uri"],
                    row["op"],
                    row["seq"],
                    _tags(row["tags_before"]),
                    _tags(row["tags_after"]),
                )
            )

    async def _resolve(self, event: ChangeEvent) -> None:
        row = None
        conn = self._conn
        try:
            if conn is not None:
                async with self._lock:
                    row = await conn.fetchrow(
                        "SELECT uri, tags_before, tags_after FROM change_feed WHERE tenant_id = $1 AND seq = $2",
                        event.tenant_id,
                        event.seq,
                        timeout=self.keepalive_timeout,
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("event listener: cannot read seq %s from the feed: %s", event.seq, exc)
        if row is None:
            # Gone (tenant deleted) or unreadable: the tenant's streams must not stay stale.
            self.hub.publish(ChangeEvent(event.tenant_id, "gap", None, "unresolved", event.seq))
        else:
            # A NULL uri in the feed is a change that names no URI (a tag grant): the event as it
            # came, not a gap (a gap would tell every stream that every subscribed URI changed).
            self.hub.publish(
                ChangeEvent(
                    event.tenant_id,
                    event.kind,
                    row["uri"],
                    event.op,
                    event.seq,
                    _tags(row["tags_before"]),
                    _tags(row["tags_after"]),
                )
            )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
