"""Live changes across real `catalog serve` processes: SDK clients over real HTTP, real PostgreSQL.

* ``--workers 2``: listen streams land on both workers (each stream is mapped to the worker process
  holding its TCP connection, through /proc via psutil: nothing is exposed to clients for this); a
  change made through the admin API, pinned to one worker's connection, reaches every stream on
  both workers; a change written straight in SQL by another connection does too; nothing fires
  for an invisible URI or another tenant.
* PostgreSQL restarted under open streams (an embedded server of the test's own): every stream
  that asked for ``list_changed`` gets it after the listeners reconnect, subscribed URIs get
  ``updated`` (level-triggered: re-read), and later changes still arrive, on both workers and in a
  2025-11-25 session (subscribe/unsubscribe) served by a second, single-worker process.
* SIGTERM with open streams: the process exits promptly and every stream ends with the listen's
  graceful result (the SDK ends the iteration instead of raising ``SubscriptionLost``).

Events are awaited with timeouts, never with sleeps; "nothing else fired" is checked by order (the
next notification on a stream is the one a later change caused).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated, Subscription, SubscriptionLost

from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres
from catalog.events.listener import listener_dsn
from tests.mcp_helpers import MODERN, LegacyInbox, module_database
from tests.processes import Served, catalog_env, my_ports, serving, started, worker_of, worker_processes

pytestmark = [pytest.mark.process, pytest.mark.asyncio(loop_scope="session")]

WATCHED = "test://watched-resource"  # in the demo tenant, visible to anonymous callers
OTHER = "test://static-text"
ADMIN_TOKEN = "cat_live-workers-admin-token"
WAIT = 15  # seconds any expected notification may take (a reconnection included)
MIN_PER_WORKER = 2
MAX_STREAMS = 32


# -- processes and connections --------------------------------------------------------------------


def one_connection() -> httpx2.Limits:
    return httpx2.Limits(max_connections=1, max_keepalive_connections=1)


def sdk_client(served: Served, mode: str = MODERN, **kwargs: Any) -> Client:
    """An SDK client (cache off). A modern one uses a single connection, so the connection its
    listen stream holds is knowable; a 2025 session needs two (its GET stream and the POSTs)."""
    limits = one_connection() if mode == MODERN else httpx2.Limits()
    http = httpx2.AsyncClient(timeout=30, limits=limits)
    return Client(
        streamable_http_client(f"{served.base_url}/mcp", http_client=http), mode=mode, cache=None, **kwargs
    )


# -- listen streams ----------------------------------------------------------------------------------


@dataclass
class Stream:
    sub: Subscription
    worker: int
    list_changed: bool

    async def next(self, within: float = WAIT) -> Any:
        return await asyncio.wait_for(self.sub.__anext__(), within)

    async def end(self, within: float = WAIT) -> str:
        """How the stream ended: "graceful" (the listen's result) or "lost" (dropped)."""
        try:
            extra = await self.next(within)
        except StopAsyncIteration:
            return "graceful"
        except SubscriptionLost:
            return "lost"
        return f"unexpected {extra!r}"


@dataclass
class Streams:
    served: Served
    stack: contextlib.AsyncExitStack
    streams: list[Stream] = field(default_factory=list)

    async def open(self, *, list_changed: bool = True, uris: tuple[str, ...] = (WATCHED,)) -> Stream:
        before = my_ports(self.served)
        client = await self.stack.enter_async_context(sdk_client(self.served))
        sub = await self.stack.enter_async_context(
            client.listen(resources_list_changed=list_changed, resource_subscriptions=uris)
        )
        (port,) = my_ports(self.served) - before  # the one connection, now held by the stream
        stream = Stream(sub, worker_of(self.served, port), list_changed)
        self.streams.append(stream)
        return stream

    async def spread(self, **kwargs: Any) -> None:
        """Open streams until each worker holds at least MIN_PER_WORKER of them."""
        workers = {w.pid for w in worker_processes(self.served)}
        assert len(workers) == 2, workers
        while any(self.on(w) < MIN_PER_WORKER for w in workers):
            assert len(self.streams) < MAX_STREAMS, f"streams never spread: {self.by_worker()}"
            await self.open(**kwargs)

    def on(self, worker: int) -> int:
        return sum(1 for s in self.streams if s.worker == worker)

    def by_worker(self) -> dict[int, int]:
        return {w: self.on(w) for w in {s.worker for s in self.streams}}

    async def expect(self, *events: Any, streams: list[Stream] | None = None) -> None:
        """Each stream's next notifications are exactly ``events``, in order."""

        async def one(stream: Stream) -> list[Any]:
            return [await stream.next() for _ in events]

        targets = self.streams if streams is None else streams
        got = await asyncio.gather(*(one(s) for s in targets))
        for stream, seen in zip(targets, got, strict=True):
            assert seen == list(events), f"stream on worker {stream.worker}: {seen}"


@contextlib.asynccontextmanager
async def open_streams(served: Served) -> AsyncIterator[Streams]:
    async with contextlib.AsyncExitStack() as stack:
        yield Streams(served, stack)


@contextlib.asynccontextmanager
async def pinned_admin(served: Served) -> AsyncIterator[tuple[httpx.AsyncClient, int, int]]:
    """An admin API client on one kept-alive connection, its local port and the worker serving it."""
    before = my_ports(served)
    client = httpx.AsyncClient(
        base_url=served.base_url,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        timeout=30,
    )
    try:
        (await client.get("/healthz")).raise_for_status()
        (port,) = my_ports(served) - before
        yield client, port, worker_of(served, port)
    finally:
        await client.aclose()


# -- a two-worker server on a test database ---------------------------------------------------------


@dataclass
class Live:
    served: Served
    dsn: str


def serve_env(database_url: str, home: Path) -> dict[str, str]:
    return catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(home),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_SECRET_KEY="live-workers-secret-key-0123456789",
    )


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def live(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Live]:
    async with module_database(postgres_server, template_database) as url:
        env = serve_env(url, tmp_path_factory.mktemp("live") / "home")
        with serving("--workers", "2", "--demo", env=env) as served:
            await asyncio.to_thread(started, served, 2)
            yield Live(served, listener_dsn(url))


async def sql(dsn: str, statement: str, *args: Any) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


DEMO = "(SELECT id FROM tenants WHERE slug = 'demo')"


async def test_a_change_through_one_worker_reaches_streams_held_by_the_other(live: Live) -> None:
    served = live.served
    async with open_streams(served) as streams:
        await streams.spread()
        workers = sorted(streams.by_worker())
        assert len(workers) == 2 and all(streams.on(w) >= MIN_PER_WORKER for w in workers)
        # Whichever worker the kernel hands the admin connection to, the other one holds streams
        # too: every stream getting the change proves it crossed processes through PostgreSQL.
        async with pinned_admin(served) as (admin, port, writer):
            others = [s for s in streams.streams if s.worker != writer]
            assert others, "every stream is on the writing worker"
            for n in range(2):
                put = await admin.put(
                    "/admin/v1/tenants/demo/resources",
                    params={"uri": WATCHED},
                    json={"name": "watched-resource", "mimeType": "text/plain", "text": f"via {n}"},
                )
                assert put.status_code == 200, put.text
                assert port in my_ports(served)  # the write really went over the pinned connection
                await streams.expect(ResourceUpdated(uri=WATCHED))
                created = await admin.put(
                    "/admin/v1/tenants/demo/resources",
                    params={"uri": f"test://live/created-via-{n}"},
                    json={"name": "new", "text": "x"},
                )
                assert created.status_code == 201, created.text
                await streams.expect(ResourcesListChanged())


async def test_a_change_written_in_sql_reaches_every_stream_and_nothing_else_does(live: Live) -> None:
    served, dsn = live.served, live.dsn
    async with httpx.AsyncClient(base_url=served.base_url, timeout=30) as admin:
        made = await admin.post(
            "/admin/v1/tenants",
            json={"slug": "elsewhere", "name": "Elsewhere"},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        )
        assert made.status_code == 201, made.text
    async with open_streams(served) as streams:
        await streams.spread()
        # Invisible to the anonymous streams (outside the public grants), and another tenant's.
        await sql(dsn, f"INSERT INTO resources (tenant_id, uri, name) VALUES ({DEMO}, 'secret://x', 's')")
        await sql(
            dsn,
            "INSERT INTO resources (tenant_id, uri, name)"
            " VALUES ((SELECT id FROM tenants WHERE slug = 'elsewhere'), $1, 'o')",
            WATCHED,
        )
        await sql(
            dsn, f"UPDATE resources SET name = 'from sql' WHERE tenant_id = {DEMO} AND uri = $1", WATCHED
        )
        await streams.expect(ResourceUpdated(uri=WATCHED))  # first: nothing came for the two above
        await sql(dsn, f"INSERT INTO resources (tenant_id, uri, name) VALUES ({DEMO}, 'test://sql/new', 'n')")
        await streams.expect(ResourcesListChanged())
        await sql(dsn, f"DELETE FROM resources WHERE tenant_id = {DEMO} AND uri = 'test://sql/new'")
        await streams.expect(ResourcesListChanged())


async def test_sigterm_with_open_streams_ends_each_with_its_result(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    async with module_database(postgres_server, template_database) as url:
        with serving("--workers", "2", "--demo", env=serve_env(url, tmp_path / "home")) as served:
            await asyncio.to_thread(started, served, 2)
            async with open_streams(served) as streams:
                await streams.spread()
                began = time.monotonic()
                served.process.send_signal(signal.SIGTERM)
                ends = await asyncio.gather(*(s.end() for s in streams.streams))
                code = await asyncio.to_thread(served.process.wait, 30)
                took = time.monotonic() - began
            assert ends == ["graceful"] * len(streams.streams), streams.by_worker()
            assert code == 0
            assert took < 5, f"shutdown took {took:.1f}s"


# -- PostgreSQL restarted under open streams -------------------------------------------------------


@pytest.fixture
def embedded() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own, to restart. Not under tmp_path: its server runs as another
    user, and a concurrent pytest session resets /tmp/pytest-of-<user> to 0700 when it starts."""
    home = Path(tempfile.mkdtemp(prefix="catalog-live-pg-"))
    server = EmbeddedPostgres(home, extra_settings={"fsync": "off"})
    try:
        migrate.upgrade(server.start())
        yield server
    finally:
        server.release()
        shutil.rmtree(home, ignore_errors=True)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_postgres_restart_under_open_streams(embedded: EmbeddedPostgres, tmp_path: Path) -> None:
    single_env = serve_env(embedded.url(), tmp_path / "home-legacy")
    with serving("--workers", "2", "--demo", env=serve_env(embedded.url(), tmp_path / "home")) as served:
        await asyncio.to_thread(started, served, 2)  # the demo tenant is seeded by now
        with serving("--workers", "1", env={**single_env, "CATALOG_PUBLIC_TENANT": "demo"}) as single:
            await asyncio.to_thread(started, single, 1)
            await restart_under_streams(embedded, served, single)


async def restart_under_streams(embedded: EmbeddedPostgres, served: Served, single: Served) -> None:
    dsn = embedded.dsn()
    inbox = LegacyInbox()
    async with (
        sdk_client(single, "legacy", message_handler=inbox) as legacy,
        open_streams(served) as streams,
    ):
        await legacy.subscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]
        await legacy.subscribe_resource(OTHER)  # pyright: ignore[reportDeprecated]
        n = 0
        while True:  # the session's GET stream opens asynchronously after initialize
            n += 1
            await sql(
                dsn, f"UPDATE resources SET name = 'v{n}' WHERE tenant_id = {DEMO} AND uri = $1", WATCHED
            )
            with contextlib.suppress(TimeoutError):
                if await inbox.next_update(within=0.5) == ResourceUpdated(uri=WATCHED):
                    break
            assert n < 20, f"the 2025 session never got an update:\n{single.printed()}"
        await streams.spread()
        quiet = await streams.open(list_changed=False)  # asked only for its URI

        embedded.stop()
        embedded.start()

        gap = [ResourcesListChanged(), ResourceUpdated(uri=WATCHED)]
        listing = [s for s in streams.streams if s.list_changed]
        await streams.expect(*gap, streams=listing)
        await streams.expect(ResourceUpdated(uri=WATCHED), streams=[quiet])
        # The session was told to re-list and re-read both its URIs.
        after_gap = {await inbox.next() for _ in range(3)}
        assert after_gap == {
            ResourcesListChanged(),
            ResourceUpdated(uri=WATCHED),
            ResourceUpdated(uri=OTHER),
        }

        await sql(dsn, f"UPDATE resources SET name = 'after' WHERE tenant_id = {DEMO} AND uri = $1", WATCHED)
        await streams.expect(ResourceUpdated(uri=WATCHED))
        assert await inbox.next() == ResourceUpdated(uri=WATCHED)
        await sql(dsn, f"INSERT INTO resources (tenant_id, uri, name) VALUES ({DEMO}, 'test://after', 'a')")
        await streams.expect(ResourcesListChanged(), streams=listing)
        assert await inbox.next() == ResourcesListChanged()

        await legacy.unsubscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]
        await sql(
            dsn, f"UPDATE resources SET name = 'unheard' WHERE tenant_id = {DEMO} AND uri = $1", WATCHED
        )
        await sql(dsn, f"UPDATE resources SET name = 'heard' WHERE tenant_id = {DEMO} AND uri = $1", OTHER)
        assert await inbox.next() == ResourceUpdated(uri=OTHER)  # nothing for WATCHED first
