"""The event layer: LISTEN connection, reconnection and gaps, the hub's fan-out and coalescing.

Real PostgreSQL throughout (changes are written in plain SQL, so the triggers announce them); no
sleeps: every wait is on an event, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from catalog.app import create_app
from catalog.core.catalog import Catalog
from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres
from catalog.db.engine import create_engine
from catalog.events import (
    ALL_TENANTS,
    ChangeEvent,
    ChangeListener,
    CloseReason,
    EventHub,
    Subscription,
    events_lifespan,
    listener_dsn,
)
from catalog.events.listener import parse_payload
from catalog.settings import Settings
from tests.db.support import make_tenant

pytestmark = pytest.mark.process

WAIT = 10.0  # seconds any single expected event may take (generous: CI machines stall)


async def next_batch(sub: Subscription, within: float = WAIT) -> list[ChangeEvent]:
    batch = await asyncio.wait_for(sub.next_batch(), within)
    assert batch is not None, f"subscription closed: {sub.close_reason}"
    return batch


async def add_resource(conn: asyncpg.Connection, tenant: int, uri: str) -> int:
    return await conn.fetchval(
        "INSERT INTO resources (tenant_id, uri, name) VALUES ($1, $2, 'r') RETURNING id", tenant, uri
    )


@contextlib.asynccontextmanager
async def running_listener(dsn: str, hub: EventHub, **options: object) -> AsyncIterator[ChangeListener]:
    options = {
        "application_name": f"catalog-listener-{uuid.uuid4().hex[:8]}",
        "keepalive_interval": 0.5,
        "keepalive_timeout": 1.0,
        "backoff_initial": 0.05,
        "backoff_max": 0.5,
        **options,
    }
    listener = ChangeListener(dsn, hub, **options)  # type: ignore[arg-type]
    assert await listener.start(wait=WAIT)
    try:
        yield listener
    finally:
        await listener.stop()


@pytest.fixture
def dsn(database_url: str) -> str:
    return listener_dsn(database_url)


@pytest.fixture
async def conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(dsn)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def hub() -> AsyncIterator[EventHub]:
    hub = EventHub()
    yield hub
    hub.close_all()


@pytest.fixture
async def listener(dsn: str, hub: EventHub) -> AsyncIterator[ChangeListener]:
    async with running_listener(dsn, hub) as listener:
        yield listener


# -- payloads ----------------------------------------------------------------------------------


def test_parse_payload() -> None:
    assert parse_payload('{"t": 3, "k": "resource", "u": "test://a", "o": "created", "s": 9}') == (
        ChangeEvent(3, "resource", "test://a", "created", 9)
    )
    assert parse_payload('{"t": 3, "k": "tenant", "u": null, "o": "deleted", "s": null}') == (
        ChangeEvent(3, "tenant", None, "deleted", None)
    )
    for bad in ("", "[]", '{"t": "3", "k": "r", "o": "c"}', '{"t": 0, "k": "r", "o": "c"}', '{"k": 1}'):
        with pytest.raises(ValueError):
            parse_payload(bad)


# -- through PostgreSQL ------------------------------------------------------------------------


async def test_sql_change_reaches_only_its_tenant(
    listener: ChangeListener, hub: EventHub, conn: asyncpg.Connection
) -> None:
    acme, globex = await make_tenant(conn, "acme"), await make_tenant(conn, "globex")
    async with hub.subscribe(acme) as at_acme, hub.subscribe(globex) as at_globex:
        await add_resource(conn, acme, "test://acme/a")
        seq = await conn.fetchval("SELECT max(seq) FROM change_feed WHERE tenant_id = $1", acme)
        assert await next_batch(at_acme) == [ChangeEvent(acme, "resource", "test://acme/a", "created", seq)]

        # Globex's first event is its own: acme's never reached it (delivery is in commit order).
        await add_resource(conn, globex, "test://globex/b")
        (event,) = await next_batch(at_globex)
        assert (event.tenant_id, event.uri) == (globex, "test://globex/b")
        assert at_acme.take_nowait() == []
    assert len(hub) == 0  # leaving the ``async with`` unsubscribes


async def test_every_kind_and_op(listener: ChangeListener, hub: EventHub, conn: asyncpg.Connection) -> None:
    tenant = await make_tenant(conn, "acme")
    async with hub.subscribe(tenant) as sub:

        async def expect(*events: tuple[str, str | None, str]) -> None:
            got: list[tuple[str, str | None, str]] = []
            while len(got) < len(events):
                got += [(e.kind, e.uri, e.op) for e in await next_batch(sub)]
            assert got == list(events)

        rid = await add_resource(conn, tenant, "test://a")
        await expect(("resource", "test://a", "created"))
        await conn.execute("UPDATE resources SET name = 'n' WHERE tenant_id = $1 AND id = $2", tenant, rid)
        await expect(("resource", "test://a", "updated"))
        await conn.execute(
            "UPDATE resources SET uri = 'test://b' WHERE tenant_id = $1 AND id = $2", tenant, rid
        )
        await expect(("resource", "test://a", "deleted"), ("resource", "test://b", "created"))
        await conn.execute("DELETE FROM resources WHERE tenant_id = $1", tenant)
        await expect(("resource", "test://b", "deleted"))
        await conn.execute(
            "INSERT INTO templates (tenant_id, uri_template, literal_prefix, name)"
            " VALUES ($1, 'test://t/{x}', 'test://t/', 't')",
            tenant,
        )
        await expect(("template", "test://t/{x}", "created"))
        await conn.execute(
            "INSERT INTO grants (tenant_id, scope, uri_prefix) VALUES ($1, 'reader', 'test://t/')", tenant
        )
        await expect(("grant", "test://t/", "created"))
        huge = "test://big/" + "x" * 5000  # too long for the payload: read back from the feed
        await add_resource(conn, tenant, huge)
        await expect(("resource", huge, "created"))
        await conn.execute("DELETE FROM tenants WHERE id = $1", tenant)
        await expect(("tenant", None, "deleted"))


async def test_a_bulk_insert_is_one_marker(
    listener: ChangeListener, hub: EventHub, conn: asyncpg.Connection
) -> None:
    acme, globex = await make_tenant(conn, "acme"), await make_tenant(conn, "globex")
    async with hub.subscribe(acme) as idle, hub.subscribe(acme) as active, hub.subscribe(globex) as sentinel:
        batches: list[list[ChangeEvent]] = []

        async def consume() -> None:
            async for batch in active:
                batches.append(batch)
                if batch[0].is_gap:
                    return

        consumer = asyncio.create_task(consume())
        await conn.execute(
            "INSERT INTO resources (tenant_id, uri, name)"
            " SELECT $1, 'test://bulk/' || i, 'r' FROM generate_series(1, 5000) AS i",
            acme,
        )
        await add_resource(conn, globex, "test://after")
        await next_batch(sentinel)  # every acme event has been published by now
        await asyncio.wait_for(consumer, WAIT)

        # One statement, one NOTIFY naming its range of the feed (migration 0006): too many changes
        # to publish one by one, so one marker for the tenant, carrying the last seq of the range.
        last = await conn.fetchval("SELECT max(seq) FROM change_feed WHERE tenant_id = $1", acme)
        marker = ChangeEvent(acme, "gap", None, "bulk", last)
        # A subscriber that was not reading: exactly that marker.
        assert idle.take_nowait() == [marker]
        # One that was reading: that marker alone, never 5000 events.
        assert batches == [[marker]] and active.take_nowait() == []


async def test_reconnects_after_its_backend_is_terminated(
    listener: ChangeListener, hub: EventHub, conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant(conn, "acme")
    probes: list[str] = []
    listener.add_state_listener(lambda lst: probes.append(lst.status()))
    async with hub.subscribe(tenant) as sub:
        assert listener.status() == "ok"
        killed = await conn.fetchval(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            listener.application_name,
        )
        assert killed
        (gap,) = await next_batch(sub)
        assert (gap.tenant_id, gap.kind, gap.op) == (tenant, "gap", "reconnected")
        assert probes[0].startswith("reconnecting since ") and probes[-1] == "ok"
        assert listener.status() == "ok" and listener.connections == 2

        await add_resource(conn, tenant, "test://later")
        assert [e.uri for e in await next_batch(sub)] == ["test://later"]


async def test_gap_reaches_every_tenant_tagged_with_its_own(
    listener: ChangeListener, hub: EventHub, conn: asyncpg.Connection
) -> None:
    tenants = [await make_tenant(conn, slug) for slug in ("acme", "globex", "initech")]
    subs = [hub.subscribe(tenant) for tenant in tenants]
    await conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        listener.application_name,
    )
    for tenant, sub in zip(tenants, subs, strict=True):
        assert await next_batch(sub) == [ChangeEvent(tenant, "gap", None, "reconnected", listener.last_seq)]
        sub.close()


async def test_survives_a_postgresql_restart(tmp_path: Path) -> None:
    embedded = EmbeddedPostgres(tmp_path / "pg", extra_settings={"fsync": "off"})
    url = await asyncio.to_thread(embedded.start)
    try:
        await asyncio.to_thread(migrate.upgrade, url)
        hub = EventHub()
        probes: list[str] = []
        async with running_listener(embedded.dsn(), hub) as listener:
            listener.add_state_listener(lambda lst: probes.append(lst.status()))
            writer = await asyncpg.connect(embedded.dsn())
            tenant = await make_tenant(writer, "acme")
            sub = hub.subscribe(tenant)
            await add_resource(writer, tenant, "test://before")
            assert [e.uri for e in await next_batch(sub)] == ["test://before"]
            await writer.close()

            await asyncio.to_thread(embedded.stop)
            await asyncio.to_thread(embedded.start)

            (gap,) = await next_batch(sub, within=30)
            assert (gap.kind, gap.op) == ("gap", "reconnected")
            assert any(p.startswith("reconnecting since ") for p in probes) and probes[-1] == "ok"
            writer = await asyncpg.connect(embedded.dsn())
            await add_resource(writer, tenant, "test://after")
            await writer.close()
            assert [e.uri for e in await next_batch(sub)] == ["test://after"]
        hub.close_all()
    finally:
        await asyncio.to_thread(embedded.stop)
        embedded.release()


async def test_listener_keeps_trying_while_the_server_is_away() -> None:
    hub = EventHub()
    listener = ChangeListener(
        "postgresql://postgres@127.0.0.1:1/nowhere", hub, backoff_initial=0.01, backoff_max=0.05
    )
    failures = asyncio.get_running_loop().create_future()
    original = listener._backoff

    def counting(n: int) -> float:
        if n >= 3 and not failures.done():
            failures.set_result(None)
        return original(n)

    listener._backoff = counting  # type: ignore[method-assign]
    assert not await listener.start(wait=0)
    await asyncio.wait_for(failures, WAIT)
    assert listener.status().startswith("reconnecting since ")
    assert "attempts" in listener.status()
    await asyncio.wait_for(listener.stop(), 2)
    assert listener.status() == "stopped"


# -- the wiring --------------------------------------------------------------------------------


async def test_lifespan_hook_installs_and_shuts_down_promptly(
    settings: Settings, conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant(conn, "acme")
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    catalog = Catalog(engine=engine, settings=settings)
    try:
        async with events_lifespan(catalog, anyio.Event()) as listener:
            assert catalog.event_hub is not None
            assert catalog.readiness_probes["events"]() == "ok"
            sub = catalog.event_hub.subscribe(tenant)
            await add_resource(conn, tenant, "test://a")
            assert [e.uri for e in await next_batch(sub)] == ["test://a"]
            waiting = asyncio.create_task(sub.next_batch())
            await asyncio.sleep(0)  # let it start waiting
        assert await asyncio.wait_for(waiting, 1) is None
        assert sub.close_reason is CloseReason.SHUTDOWN
        assert catalog.readiness_probes["events"]() == "stopped"
        assert listener.backend_pid is None
        late = catalog.event_hub.subscribe(tenant)  # a stream opened during shutdown ends at once
        assert await asyncio.wait_for(late.next_batch(), 1) is None
    finally:
        await engine.dispose()


async def test_readyz_reports_the_listener(settings: Settings) -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            response = await client.get("/readyz")
    assert response.json()["checks"]["events"] == "ok"


async def test_the_shutdown_signal_closes_every_subscription_first(settings: Settings) -> None:
    """The app's one shutdown signal (set by the server before it waits for open connections, see
    ``catalog.serving``) ends every subscription while the hub itself is still up."""
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    catalog = Catalog(engine=engine, settings=settings)
    stopping = anyio.Event()
    try:
        async with events_lifespan(catalog, stopping) as listener:
            assert catalog.event_hub is not None
            sub = catalog.event_hub.subscribe(1)
            waiting = asyncio.create_task(sub.next_batch())
            await asyncio.sleep(0)
            stopping.set()
            assert await asyncio.wait_for(waiting, 1) is None
            assert sub.close_reason is CloseReason.SHUTDOWN
            assert listener.connected  # the hub's streams ended first; the listener stops after
    finally:
        await engine.dispose()


# -- the hub on its own ------------------------------------------------------------------------


def resource(tenant: int, uri: str, op: str = "updated", seq: int | None = None) -> ChangeEvent:
    return ChangeEvent(tenant, "resource", uri, op, seq)


async def test_duplicates_within_a_batch_collapse(hub: EventHub) -> None:
    sub = hub.subscribe(1)
    hub.publish(resource(1, "test://a", seq=1))
    hub.publish(resource(1, "test://b", seq=2))
    hub.publish(resource(1, "test://a", seq=3))  # same (kind, uri, op class): the later wins
    hub.publish(resource(1, "test://a", "created", seq=4))  # another op class: kept
    hub.publish(resource(1, "test://a", "deleted", seq=5))  # same class as created: replaces it
    hub.publish(ChangeEvent(1, "template", "test://a", "updated", 6))  # another kind: kept
    assert await next_batch(sub) == [
        resource(1, "test://b", seq=2),
        resource(1, "test://a", seq=3),
        resource(1, "test://a", "deleted", seq=5),
        ChangeEvent(1, "template", "test://a", "updated", 6),
    ]
    hub.publish(resource(1, "test://a", seq=7))  # a new batch starts afresh
    assert await next_batch(sub) == [resource(1, "test://a", seq=7)]


async def test_tenants_are_kept_apart_and_gaps_reach_all(hub: EventHub) -> None:
    one, two = hub.subscribe(1), hub.subscribe(2)
    hub.publish(resource(1, "test://one"))
    hub.publish(resource(3, "test://nobody"))
    assert await next_batch(one) == [resource(1, "test://one")]
    assert two.take_nowait() == []
    hub.publish(ChangeEvent(2, "gap", None, "unresolved", 5))  # a gap for one tenant
    assert one.take_nowait() == [] and await next_batch(two) == [ChangeEvent(2, "gap", None, "unresolved", 5)]
    hub.publish(resource(1, "test://x"))
    hub.publish_gap("reconnected", 42)  # for everyone: absorbs what was pending
    hub.publish(resource(1, "test://y"))  # and what follows until it is taken
    assert await next_batch(one) == [ChangeEvent(1, "gap", None, "reconnected", 42)]
    assert await next_batch(two) == [ChangeEvent(2, "gap", None, "reconnected", 42)]
    hub.publish(ChangeEvent(ALL_TENANTS, "resource", "test://x", "created"))  # not a gap: ignored
    assert one.take_nowait() == [] and two.take_nowait() == []


async def test_overflow_collapses_to_one_marker(hub: EventHub) -> None:
    sub = hub.subscribe(1)
    for i in range(hub.max_batch):
        hub.publish(resource(1, f"test://{i}"))
    assert len(sub.take_nowait()) == hub.max_batch  # at the limit: still events
    for i in range(hub.max_batch + 1):
        hub.publish(resource(1, f"test://{i}"))
    assert sub.take_nowait() == [ChangeEvent(1, "gap", None, "overflow", None)]


async def test_a_burst_is_waited_out_once(hub: EventHub) -> None:
    sub = hub.subscribe(1)
    waiting = asyncio.create_task(sub.next_batch())
    await asyncio.sleep(0)
    for i in range(hub.burst_threshold * 2):  # a mid-size burst: delivered whole after the linger
        hub.publish(resource(1, f"test://{i}"))
    assert len(await asyncio.wait_for(waiting, WAIT) or []) == hub.burst_threshold * 2

    waiting = asyncio.create_task(sub.next_batch())
    await asyncio.sleep(0)
    for i in range(hub.burst_threshold):
        hub.publish(resource(1, f"test://a{i}"))
    await asyncio.sleep(0)  # the consumer wakes, sees a burst starting and lingers
    for i in range(hub.max_batch):  # the rest of the burst arrives meanwhile and overflows
        hub.publish(resource(1, f"test://b{i}"))
    assert await asyncio.wait_for(waiting, WAIT) == [ChangeEvent(1, "gap", None, "overflow", None)]
    assert sub.take_nowait() == []


async def test_a_slow_consumer_is_dropped_and_its_memory_bounded() -> None:
    now = [0.0]
    hub = EventHub(max_lag=5.0, clock=lambda: now[0])
    slow, keeping_up = hub.subscribe(1), hub.subscribe(1)
    waiting = asyncio.create_task(slow.next_batch())
    await asyncio.sleep(0)

    hub.publish(resource(1, "test://first"))  # wakes ``slow``'s waiter, which has not run yet
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for i in range(20_000):  # an endless stream it does not read: bounded by max_batch
            hub.publish(resource(1, f"test://{i}/" + "x" * 100))
            if i % 500 == 0:
                keeping_up.take_nowait()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert grown < 512 * 1024, f"subscription buffers grew by {grown} bytes"
    assert not slow.closed
    keeping_up.take_nowait()

    now[0] = 6.0  # it has held undelivered events for longer than max_lag
    hub.publish(resource(1, "test://last"))
    assert slow.slow and slow.close_reason is CloseReason.SLOW_CONSUMER
    assert await asyncio.wait_for(waiting, 1) is None  # its iteration ends
    assert [e async for e in slow] == []
    assert hub.dropped_slow == 1 and hub.subscriptions(1) == [keeping_up]
    assert not keeping_up.closed  # it took its batch within max_lag
    hub.close_all()


async def test_close_all_ends_every_iteration_promptly(hub: EventHub) -> None:
    subs = [hub.subscribe(tenant) for tenant in (1, 1, 2)]

    async def drain(sub: Subscription) -> list[list[ChangeEvent]]:
        return [batch async for batch in sub]

    tasks = [asyncio.create_task(drain(sub)) for sub in subs]
    await asyncio.sleep(0)
    hub.close_all()
    assert await asyncio.wait_for(asyncio.gather(*tasks), 1) == [[], [], []]
    assert all(sub.close_reason is CloseReason.SHUTDOWN for sub in subs) and len(hub) == 0
    hub.publish(resource(1, "test://after"))  # a closed hub ignores events


def test_dsn_conversion() -> None:
    url = make_url("postgresql+asyncpg://u:p%40ss@db:5433/catalog?ssl=require")
    assert listener_dsn(url) == "postgresql://u:p%40ss@db:5433/catalog?ssl=require"


# -- tags before and after ------------------------------------------------------------------------


def test_parse_payload_reads_the_tags_before_and_after() -> None:
    event = parse_payload(
        '{"t": 3, "k": "resource", "u": "test://a", "o": "updated", "s": 9, "b": [], "a": ["x"]}'
    )
    assert (event.tags_before, event.tags_after) == ((), ("x",))
    created = parse_payload(
        '{"t": 3, "k": "resource", "u": "test://a", "o": "created", "s": 9, "b": null, "a": []}'
    )
    assert (created.tags_before, created.tags_after) == (None, ())
    with pytest.raises(ValueError):
        parse_payload('{"t": 3, "k": "resource", "u": "test://a", "o": "created", "s": 9, "a": [1]}')


async def test_coalesced_events_keep_the_state_from_before_the_first(hub: EventHub) -> None:
    """A tag added, then the content changed, in one batch: the batch's one event still says the
    tag was not there before (a watcher with the tag grant must hear that the resource appeared)."""
    sub = hub.subscribe(1)
    hub.publish(ChangeEvent(1, "resource", "test://a", "updated", 1, (), ("x",)))
    hub.publish(ChangeEvent(1, "resource", "test://a", "updated", 2, ("x",), ("x",)))
    [event] = await next_batch(sub)
    assert (event.seq, event.tags_before, event.tags_after) == (2, (), ("x",))
    # Deleted (tagged) and created again (untagged) in one batch: visible before, hidden after.
    hub.publish(ChangeEvent(1, "resource", "test://b", "created", 3, None, ("x",)))
    hub.publish(ChangeEvent(1, "resource", "test://a", "deleted", 4, ("x",), None))
    hub.publish(ChangeEvent(1, "resource", "test://a", "created", 5, None, ()))
    batch = await next_batch(sub)
    assert [(e.uri, e.op, e.tags_before, e.tags_after) for e in batch] == [
        ("test://b", "created", None, ("x",)),
        ("test://a", "created", ("x",), ()),
    ]
    # An event whose tags are not known makes the merged one not known either.
    hub.publish(ChangeEvent(1, "resource", "test://c", "updated", 6))
    hub.publish(ChangeEvent(1, "resource", "test://c", "updated", 7, ("x",), ()))
    [event] = await next_batch(sub)
    assert (event.tags_before, event.tags_after) == (None, None)


async def test_tags_too_long_for_the_payload_are_read_from_the_feed(
    listener: ChangeListener, hub: EventHub, conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant(conn, "acme")
    tags = [f"{n:03d}" + "t" * 120 for n in range(64)]
    async with hub.subscribe(tenant) as sub:
        await conn.execute(
            "INSERT INTO resources (tenant_id, uri, name, tags) VALUES ($1, 'test://a', 'a', $2)",
            tenant,
            tags,
        )
        [event] = await next_batch(sub)
    assert (event.uri, event.op, event.tags_before, event.tags_after) == (
        "test://a",
        "created",
        None,
        tuple(tags),
    )
