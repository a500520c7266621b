"""The listener barrier (``catalog.events.barrier``) on a real PostgreSQL: rounds are coalesced, an
echo is handled only after every change committed before its NOTIFY has reached the change
observers, a round not echoed in time answers False, and ``ReadReplicas.choose`` trusts a replica
only once the barrier says so.

The listener's connection goes through ``tests/notify_proxy.py``, which can hold back the
notifications it receives (as a listener that has not processed them yet) and release them in
order. No sleeps: every wait is on an event or polled state, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from catalog.core.catalog import Catalog
from catalog.core.replicas import ReadReplicas, Replica
from catalog.db.engine import create_engine
from catalog.events import ChangeListener, EventHub, listener_dsn
from catalog.events.barrier import ListenerBarrier
from catalog.observability import metrics
from catalog.settings import Settings
from tests.notify_proxy import NotifyProxy, notify_proxy

pytestmark = pytest.mark.process

WAIT = 10.0  # the longest any expected event may take (generous: CI machines stall)


@pytest.fixture
def dsn(database_url: str) -> str:
    return listener_dsn(database_url)


@pytest.fixture
def proxy(dsn: str) -> Iterator[NotifyProxy]:
    url = make_url(dsn)
    # The embedded test server listens on a Unix socket only: its directory is the query's host.
    socket_dir = url.query.get("host")
    host = url.host or (socket_dir if isinstance(socket_dir, str) else None) or "127.0.0.1"
    with notify_proxy(host, url.port or 5432) as running:
        yield running


@pytest.fixture
async def listener(dsn: str, proxy: NotifyProxy) -> AsyncIterator[ChangeListener]:
    proxied = make_url(dsn).set(host="127.0.0.1", port=proxy.port, query={"sslmode": "disable"})
    listener = ChangeListener(
        listener_dsn(proxied), EventHub(), application_name=f"catalog-barrier-{uuid.uuid4().hex[:8]}"
    )
    try:
        yield listener
    finally:
        await listener.stop()


@contextlib.asynccontextmanager
async def barrier_on(listener: ChangeListener, wait_s: float = WAIT) -> AsyncIterator[ListenerBarrier]:
    barrier = ListenerBarrier(listener, wait_s=wait_s)
    await barrier.start()
    assert await listener.start(wait=WAIT)
    try:
        yield barrier
    finally:
        await barrier.stop()


async def until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition()`` (state of the proxy's thread or the listener) for at most :data:`WAIT`."""
    try:
        async with asyncio.timeout(WAIT):
            for _ in itertools.count():
                if condition():
                    return
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"{what}: not within {WAIT}s")


def the_listeners_port(proxy: NotifyProxy) -> int:
    (port,) = proxy.client_ports()
    return port


async def make_tenant(dsn: str) -> tuple[asyncpg.Connection, int]:
    conn = await asyncpg.connect(dsn)
    slug = f"barrier-{uuid.uuid4().hex[:8]}"
    return conn, await conn.fetchval("INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id", slug)


async def test_reads_that_arrive_together_share_one_notify_round(listener: ChangeListener) -> None:
    async with barrier_on(listener) as barrier:
        answers = await asyncio.gather(*(barrier.wait() for _ in range(20)))
        assert answers == [True] * 20
        assert barrier.rounds == 1
        assert await barrier.wait() is True  # a read after that round's echo needs a round of its own
        assert barrier.rounds == 2


async def test_reads_arriving_while_a_round_is_in_flight_wait_for_the_next_one_round(
    listener: ChangeListener, proxy: NotifyProxy
) -> None:
    async with barrier_on(listener) as barrier:
        port = the_listeners_port(proxy)
        proxy.hold(port)
        first = [asyncio.create_task(barrier.wait()) for _ in range(5)]
        await until(lambda: proxy.held(port) == 1, "the first round's echo held back")
        later = [asyncio.create_task(barrier.wait()) for _ in range(5)]
        await asyncio.sleep(0)  # let the later reads join their round
        assert barrier.rounds == 1  # one round in flight: the later reads gather, nothing sent
        assert not any(task.done() for task in first + later)
        proxy.release(port)
        assert await asyncio.gather(*first) == [True] * 5
        assert await asyncio.gather(*later) == [True] * 5
        assert barrier.rounds == 2  # ten reads, two NOTIFYs


async def test_the_echo_is_handled_after_every_change_committed_before_its_notify(
    listener: ChangeListener, proxy: NotifyProxy, dsn: str
) -> None:
    seen: list[object] = []
    listener.add_change_observer(seen.append)
    async with barrier_on(listener) as barrier:
        conn, tenant = await make_tenant(dsn)
        try:
            port = the_listeners_port(proxy)
            await conn.execute(
                "INSERT INTO resources (tenant_id, uri, name) VALUES ($1, 'test://before', 'r')", tenant
            )
            await until(lambda: tenant in seen, "a change before the hold observed")
            seen.clear()
            proxy.hold(port)
            await conn.execute(
                "INSERT INTO resources (tenant_id, uri, name) VALUES ($1, 'test://barrier', 'r')", tenant
            )
            await until(lambda: proxy.held(port) == 1, "the change's notification held back")
            waiting = asyncio.create_task(barrier.wait())
            await until(lambda: proxy.held(port) == 2, "the barrier's echo held back behind it")
            assert seen == []  # the listener has been told of nothing yet: the read must wait
            waiting.add_done_callback(lambda _: seen.append("barrier passed"))
            proxy.release(port)
            assert await waiting is True
            assert seen == [tenant, "barrier passed"]
        finally:
            await conn.close()


async def test_a_round_not_echoed_in_time_is_false_and_later_reads_do_not_wait_for_it(
    listener: ChangeListener, proxy: NotifyProxy
) -> None:
    async with barrier_on(listener, wait_s=0.2) as barrier:
        port = the_listeners_port(proxy)
        proxy.hold(port)
        assert await barrier.wait() is False
        await until(lambda: barrier.overdue, "the round overdue")  # its bound runs from its NOTIFY
        # The round is overdue: a read now goes to the primary without sending or waiting.
        assert await asyncio.wait_for(barrier.wait(), WAIT) is False
        assert barrier.rounds == 1
        proxy.release(port)
        await until(lambda: not barrier.overdue, "the late echo handled")
        assert await barrier.wait() is True
        assert barrier.rounds == 2


async def test_without_a_connected_listener_the_barrier_is_false_and_sends_nothing(
    listener: ChangeListener,
) -> None:
    barrier = ListenerBarrier(listener)
    await barrier.start()  # the listener never started
    assert await barrier.wait() is False
    assert barrier.rounds == 0


# -- ReadReplicas.choose with a barrier --------------------------------------------------------


@pytest.fixture
async def replicas(settings: Settings) -> AsyncIterator[ReadReplicas]:
    """One "replica" on the test database itself (no standby here): lag limit off, so whether it
    is chosen depends on the notification rule and the barrier alone."""
    primary = create_engine(settings.async_database_url(), pool_size=1)
    reader = create_engine(settings.async_database_url(), pool_size=1)
    replica = Replica("test", Catalog(engine=reader, settings=settings))
    read_replicas = ReadReplicas(primary, [replica], 0.0)
    try:
        yield read_replicas
    finally:
        await read_replicas.dispose()
        await primary.dispose()


def skips(reason: str) -> float:
    return metrics.READ_REPLICA_SKIPS.labels(reason)._value.get()


def barrier_answering(answer: bool, asked: list[int]) -> Callable[[], Awaitable[bool]]:
    async def barrier() -> bool:
        asked.append(1)
        return answer

    return barrier


async def test_a_replica_is_chosen_only_once_the_barrier_passes(replicas: ReadReplicas) -> None:
    asked: list[int] = []
    replicas.barrier = barrier_answering(True, asked)
    assert await replicas.choose(7) is replicas.replicas[0]
    replicas.barrier = barrier_answering(False, asked)
    before = skips("barrier")
    assert await replicas.choose(7) is None
    assert skips("barrier") == before + 1
    assert len(asked) == 2


async def test_a_read_already_bound_for_the_primary_does_not_ask_the_barrier(replicas: ReadReplicas) -> None:
    asked: list[int] = []
    replicas.barrier = barrier_answering(True, asked)
    replicas.changed(7)  # its position not known yet: tenant 7 reads on the primary
    assert await replicas.choose(7) is None
    assert asked == []


async def test_a_change_the_barrier_brings_in_sends_the_read_to_the_primary(replicas: ReadReplicas) -> None:
    async def barrier() -> bool:
        replicas.changed(7)  # what the listener handled before the echo
        return True

    replicas.barrier = barrier
    before = skips("behind")
    assert await replicas.choose(7) is None
    assert skips("behind") == before + 1
