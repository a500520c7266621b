"""MCP reads on a real PostgreSQL streaming standby (``CATALOG_READ_DATABASE_URL``).

``catalog serve`` runs as a process with ``CATALOG_DATABASE_URL`` on the primary and
``CATALOG_READ_DATABASE_URL`` on the standby of ``tests/replication.py``; the official SDK client
talks to it over HTTP. Proved here: reads, listings, template listings, completions and the
read-only tools reach the standby (its ``pg_stat_activity`` and catalog's own metric say so) with
the primary's answers; a token revoked on the primary is refused at once while the standby's replay is paused; a stream
notified of an update reads the new content (from the primary, the standby being behind) and reads
return to the standby once it has caught up; with ``serve --workers 2``, a notification one worker
delivered holds reads through the other worker, whose own listener has not received it (a proxy,
``tests/notify_proxy.py``, holds it back), to the same rule; with two ``serve`` processes (two
hosts, nothing shared), a notification one delivered holds reads through the other, whose listener
is held back, by that one's listener barrier; a stopped standby, or one of a list never up, costs no
request; a standby lagging beyond ``CATALOG_READ_MAX_LAG_MS`` is skipped; a bad setting ends
``serve`` with one line naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import httpx2
import mcp_types as types
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.templates import create_template
from catalog.core.tenants import create_tenant, find_tenant
from catalog.core.tokens import create_token, hash_token
from catalog.db.engine import create_engine
from catalog.settings import Settings
from tests.conftest import free_port
from tests.mcp_helpers import envelope, modern_headers
from tests.notify_proxy import NotifyProxy, notify_proxy
from tests.processes import (
    Served,
    catalog_env,
    my_ports,
    run_catalog,
    serving,
    started,
    worker_of,
    worker_processes,
)
from tests.replication import Replication, replication, wait_until

__all__ = ["replication"]  # the session fixture, used by this module's fixtures

SYSTEM = Principal.system("tests")
ADMIN_TOKEN = "cat_replica-test-platform-admin"
WATCHED = "file:///docs/watched"
WAIT = 30.0


async def _seed(url: str, home: Path) -> dict[str, str]:
    """Tenant ``replicas`` with a few resources and a template, and two tokens (all-seeing)."""
    settings = Settings(database_url=url, home=home, secret_key="replica-test-secret-key-0123456789")
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    catalog = Catalog(engine=engine, settings=settings)
    try:
        tenant = await create_tenant(catalog, "replicas", "Replicas")
        for name in ("alpha", "beta", "watched"):
            resource = {"uri": f"file:///docs/{name}", "name": name, "mimeType": "text/plain", "text": name}
            await upsert_resource(catalog, SYSTEM, tenant, ResourceIn.model_validate(resource))
        template = {"uriTemplate": "file:///docs/{name}", "name": "docs", "text": "{name}"}
        await create_template(catalog, SYSTEM, tenant, TemplateIn.model_validate(template))
        tokens = {}
        for name in ("reader", "revoked"):
            created = await create_token(catalog, SYSTEM, tenant, TokenIn.model_validate({"admin": True}))
            tokens[name] = created.token
        return tokens
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
async def tokens(replication: Replication, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return await _seed(replication.primary.url, tmp_path_factory.mktemp("seed"))


@pytest.fixture(scope="module")
def served(
    replication: Replication, tokens: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    env = catalog_env(
        CATALOG_DATABASE_URL=replication.primary.url,
        CATALOG_READ_DATABASE_URL=replication.standby.url,
        CATALOG_HOME=str(tmp_path_factory.mktemp("home")),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_SECRET_KEY="replica-test-secret-key-0123456789",
        CATALOG_METRICS_ACCESS="open",
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
        CATALOG_LOG_FORMAT="text",
    )
    with serving(env=env) as server:
        yield started(server)


def client(served: Served, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return Client(streamable_http_client(served.mcp_url, http_client=http), mode="2026-07-28", cache=None)


def metric(served: Served, name: str, **labels: str) -> float:
    """One sample of ``/metrics`` (0 when not yet counted)."""
    text = httpx.get(f"{served.base_url}/metrics", timeout=10).text
    wanted = "".join(f'(?=[^}}]*{key}="{value}")' for key, value in labels.items())
    braces = rf"\{{{wanted}[^}}]*\}}"
    pattern = rf"^{name}(?:_total)?{braces if labels else f'(?:{braces})?'} (\S+)$"
    total = 0.0
    for match in re.finditer(pattern, text, re.MULTILINE):
        total += float(match.group(1))
    return total


async def fetch(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def replay_paused(replication: Replication) -> AsyncIterator[None]:
    await fetch(replication.standby.url, "SELECT pg_wal_replay_pause()")
    try:
        yield
    finally:
        await fetch(replication.standby.url, "SELECT pg_wal_replay_resume()")


async def caught_up(replication: Replication) -> bool:
    (primary,) = await fetch(replication.primary.url, "SELECT pg_current_wal_lsn() AS lsn")
    (standby,) = await fetch(replication.standby.url, "SELECT pg_last_wal_replay_lsn() AS lsn")
    return standby["lsn"] >= primary["lsn"]


async def poll(condition: Any, what: str) -> None:
    """Wait until ``await condition()`` is true (polled, at most :data:`WAIT` seconds)."""
    try:
        async with asyncio.timeout(WAIT):
            for _ in itertools.count():
                if await condition():
                    return
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"{what}: not within {WAIT}s")


def text_of(result: types.ReadResourceResult) -> str:
    (content,) = result.contents
    assert isinstance(content, types.TextResourceContents)
    return content.text


async def test_reads_listings_and_completions_run_on_the_replica(
    served: Served, tokens: dict[str, str], replication: Replication
) -> None:
    await poll(lambda: caught_up(replication), "the standby caught up with the seeding")
    before = metric(served, "catalog_read_replica_reads", target="replica")
    async with client(served, tokens["reader"]) as mcp:
        listed = await mcp.list_resources()
        assert sorted(str(r.uri) for r in listed.resources) == [
            "file:///docs/alpha",
            "file:///docs/beta",
            WATCHED,
        ]
        assert text_of(await mcp.read_resource("file:///docs/alpha")) == "alpha"
        templates = await mcp.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == ["file:///docs/{name}"]
        completed = await mcp.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="file:///docs/{name}"),
            {"name": "name", "value": ""},
        )
        assert completed.completion.values == ["alpha", "beta", "watched"]
    # Four reads, each answered on the standby (a fast-path miss answered by the SDK path counts twice).
    assert metric(served, "catalog_read_replica_reads", target="replica") - before >= 4
    assert metric(served, "catalog_read_replica_reads", target="primary") == 0
    backends = await fetch(
        replication.standby.url,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'catalog'",
    )
    assert backends[0]["n"] >= 1  # the read pool's connections are the standby's


async def test_the_read_only_tools_run_on_the_replica(
    served: Served, tokens: dict[str, str], replication: Replication
) -> None:
    await poll(lambda: caught_up(replication), "the standby caught up")
    before = metric(served, "catalog_read_replica_reads", target="replica")
    async with client(served, tokens["reader"]) as mcp:
        searched = await mcp.call_tool("search_resources", {"query": "alpha"})
        assert isinstance(searched.structured_content, dict)
        assert [e["uri"] for e in searched.structured_content["resources"]] == ["file:///docs/alpha"]
        listed = await mcp.call_tool("list_resources", {"uriPrefix": "file:///docs/", "recursive": True})
        assert isinstance(listed.structured_content, dict)
        assert len(listed.structured_content["resources"]) == 3
        read = await mcp.call_tool("read_resource", {"uri": "file:///docs/beta"})
        assert not read.is_error
    assert metric(served, "catalog_read_replica_reads", target="replica") - before >= 3
    assert metric(served, "catalog_read_replica_reads", target="primary") == 0


async def test_a_revoked_token_is_refused_at_once_while_replay_is_paused(
    served: Served, tokens: dict[str, str], replication: Replication
) -> None:
    async with client(served, tokens["revoked"]) as mcp:
        assert text_of(await mcp.read_resource("file:///docs/beta")) == "beta"
    async with replay_paused(replication):
        await fetch(
            replication.primary.url,
            "UPDATE tokens SET revoked_at = now() WHERE token_hash = $1",
            hash_token(tokens["revoked"]),
        )
        (standby,) = await fetch(
            replication.standby.url, "SELECT count(*) FILTER (WHERE revoked_at IS NOT NULL) AS n FROM tokens"
        )
        assert standby["n"] == 0  # the standby has not seen the revocation
        async with client(served, tokens["revoked"]) as mcp:
            with pytest.raises(MCPError):
                await mcp.read_resource("file:///docs/beta")
        # What the SDK client was told, on the wire: 401 with the token refused.
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "resources/read",
            "params": {"_meta": envelope(), "uri": "file:///docs/beta"},
        }
        headers = modern_headers("resources/read", "file:///docs/beta")
        headers["Authorization"] = f"Bearer {tokens['revoked']}"
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(served.mcp_url, json=body, headers=headers)
        assert refused.status_code == 401, refused.text
        assert "revoked" in refused.headers.get("www-authenticate", "") + refused.text
    await poll(lambda: caught_up(replication), "the standby caught up after the pause")


async def test_a_notified_update_is_read_new_while_the_replica_is_behind(
    served: Served, tokens: dict[str, str], replication: Replication, tmp_path: Path
) -> None:
    settings = Settings(database_url=replication.primary.url, home=tmp_path)
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    catalog = Catalog(engine=engine, settings=settings)
    try:
        tenant = await find_tenant(catalog, "replicas")
        assert tenant is not None
        async with (
            client(served, tokens["reader"]) as listener,
            client(served, tokens["reader"]) as mcp,
            listener.listen(resource_subscriptions=[WATCHED]) as stream,
        ):
            async with replay_paused(replication):
                resource = {"uri": WATCHED, "name": "watched", "mimeType": "text/plain", "text": "new"}
                await upsert_resource(catalog, SYSTEM, tenant, ResourceIn.model_validate(resource))
                event = await _next_update(stream)
                assert str(event.uri) == WATCHED
                on_primary = metric(served, "catalog_read_replica_reads", target="primary")
                behind = metric(served, "catalog_read_replica_skips", reason="behind")
                assert text_of(await mcp.read_resource(WATCHED)) == "new"
                assert metric(served, "catalog_read_replica_reads", target="primary") > on_primary
                # Passed over for being behind the notified change (not for lag: it is seconds old).
                assert metric(served, "catalog_read_replica_skips", reason="behind") > behind
                (standby,) = await fetch(
                    replication.standby.url, "SELECT text FROM resources WHERE uri = $1", WATCHED
                )
                assert standby["text"] == "watched"  # the replica still had the old content
            await poll(lambda: caught_up(replication), "the standby caught up after the pause")
            on_replica = metric(served, "catalog_read_replica_reads", target="replica")
            assert text_of(await mcp.read_resource(WATCHED)) == "new"
            assert metric(served, "catalog_read_replica_reads", target="replica") > on_replica
    finally:
        await engine.dispose()


async def _next_update(stream: Any) -> ResourceUpdated:
    async with asyncio.timeout(WAIT):
        async for event in stream:
            if isinstance(event, ResourceUpdated):
                return event
    raise AssertionError("the stream ended before the update")


async def test_a_stopped_replica_costs_no_failed_request(
    served: Served, tokens: dict[str, str], replication: Replication
) -> None:
    replication.standby.stop()
    try:
        on_primary = metric(served, "catalog_read_replica_reads", target="primary")
        async with client(served, tokens["reader"]) as mcp:
            for _ in range(3):
                assert text_of(await mcp.read_resource("file:///docs/alpha")) == "alpha"
                assert len((await mcp.list_resources()).resources) == 3
        assert metric(served, "catalog_read_replica_reads", target="primary") - on_primary >= 6
        assert metric(served, "catalog_read_replica_skips", reason="down") >= 1
        assert "read replica" in served.printed() and "skipped" in served.printed()
    finally:
        replication.standby.start()
    wait_until(replication.standby.running, what="the standby restarted")


async def test_a_replica_lagging_beyond_the_limit_is_skipped(
    tokens: dict[str, str], replication: Replication, tmp_path: Path
) -> None:
    settings = Settings(database_url=replication.primary.url, home=tmp_path)
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    catalog = Catalog(engine=engine, settings=settings)
    env = catalog_env(
        CATALOG_DATABASE_URL=replication.primary.url,
        CATALOG_READ_DATABASE_URL=replication.standby.url,
        CATALOG_READ_MAX_LAG_MS="300",
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_METRICS_ACCESS="open",
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
    )
    try:
        # Another tenant's change: no stream of tenant "replicas" is told of it, so only the lag
        # keeps that tenant's reads off the standby.
        elsewhere = await find_tenant(catalog, "elsewhere") or await create_tenant(catalog, "elsewhere", "E")
        with serving(env=env) as server:
            lagging = started(server)
            await poll(lambda: caught_up(replication), "the standby caught up")
            async with client(lagging, tokens["reader"]) as mcp:

                async def read_on(target: str) -> bool:
                    before = metric(lagging, "catalog_read_replica_reads", target=target)
                    assert text_of(await mcp.read_resource("file:///docs/alpha")) == "alpha"
                    return metric(lagging, "catalog_read_replica_reads", target=target) > before

                await poll(lambda: read_on("replica"), "a read on the standby")
                async with replay_paused(replication):
                    resource = {"uri": "file:///elsewhere", "name": "e", "text": "moved on"}
                    await upsert_resource(catalog, SYSTEM, elsewhere, ResourceIn.model_validate(resource))
                    await poll(lambda: read_on("primary"), "a read on the primary while the standby lags")
                    assert metric(lagging, "catalog_read_replica_skips", reason="lagging") >= 1
                await poll(lambda: caught_up(replication), "the standby caught up after the pause")
                await poll(lambda: read_on("replica"), "reads back on the standby")
    finally:
        await engine.dispose()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"CATALOG_READ_DATABASE_URL": "postgresql://replica-a/db, mysql://root@replica-b/db"},
            "catalog: CATALOG_READ_DATABASE_URL: Value error, must be a postgresql URL",
        ),
        (
            {"CATALOG_READ_DATABASE_URL": "not a url"},
            "catalog: CATALOG_READ_DATABASE_URL: Value error, not a database URL",
        ),
        (
            {"CATALOG_READ_MAX_LAG_MS": "-1"},
            "catalog: CATALOG_READ_MAX_LAG_MS: Input should be greater than or equal to 0",
        ),
    ],
)
def test_a_bad_read_replica_setting_ends_serve_with_one_line_naming_it(
    overrides: dict[str, str], expected: str, tmp_path: Path
) -> None:
    env = catalog_env(**{"CATALOG_HOME": str(tmp_path / "home"), **overrides})
    result = run_catalog("serve", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]


async def test_a_list_of_replicas_with_one_never_up_serves_every_read(
    tokens: dict[str, str], replication: Replication, tmp_path: Path
) -> None:
    closed = free_port()  # nothing listens there
    nowhere = f"postgresql://postgres@127.0.0.1:{closed}/postgres"
    env = catalog_env(
        CATALOG_DATABASE_URL=replication.primary.url,
        CATALOG_READ_DATABASE_URL=f"{nowhere}, {replication.standby.url}",
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_METRICS_ACCESS="open",
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
        CATALOG_LOG_FORMAT="text",
    )
    await poll(lambda: caught_up(replication), "the standby caught up")
    with serving(env=env) as server:
        listed = started(server)  # a replica down at start-up does not hold serving back
        async with client(listed, tokens["reader"]) as mcp:
            for _ in range(4):
                assert text_of(await mcp.read_resource("file:///docs/beta")) == "beta"
        assert metric(listed, "catalog_read_replica_reads", target="replica") >= 3
        assert metric(listed, "catalog_read_replica_skips", reason="down") >= 1
        assert f"read replica 127.0.0.1:{closed} skipped" in listed.printed()


# -- serve --workers 2: a notification delivered by one worker holds reads through the other ------


def pinned_client(served: Served, token: str) -> Client:
    """A client on one kept-alive connection, so the worker serving it is knowable."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
        limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1),
    )
    return Client(streamable_http_client(served.mcp_url, http_client=http), mode="2026-07-28", cache=None)


def listener_ports(served: Served, proxy: NotifyProxy) -> dict[int, int]:
    """Each worker's pid -> the local port of its LISTEN connection through ``proxy``."""
    ports = {}
    for worker in worker_processes(served):
        for conn in worker.net_connections("tcp"):
            if conn.raddr and conn.raddr.port == proxy.port and conn.status == psutil.CONN_ESTABLISHED:
                ports[worker.pid] = conn.laddr.port
    return ports


async def test_a_notification_one_worker_delivered_holds_reads_through_the_other_worker(
    tokens: dict[str, str], replication: Replication, tmp_path: Path
) -> None:
    """``serve --workers 2``: a stream held on worker A is told of an update while the standby's
    replay is paused and worker B's LISTEN connection has not received the NOTIFY (a proxy holds it
    back); a read through B's socket gets the new content, from the primary, because A published the
    change in the table the workers share. After replay resumes, B's reads reach the standby again.

    ``CATALOG_READ_MAX_LAG_MS=0``: the lag bound is off, so only the notification rule keeps B's
    reads off the paused standby (with per-process positions alone, B would read the old text)."""
    settings = Settings(database_url=replication.primary.url, home=tmp_path)
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    catalog = Catalog(engine=engine, settings=settings)
    tenant = await find_tenant(catalog, "replicas")
    assert tenant is not None
    try:
        with notify_proxy("127.0.0.1", replication.primary.port) as proxy:
            env = catalog_env(
                CATALOG_DATABASE_URL=replication.primary.url,
                CATALOG_LISTEN_DATABASE_URL=(
                    f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?sslmode=disable"
                ),
                CATALOG_READ_DATABASE_URL=replication.standby.url,
                CATALOG_READ_MAX_LAG_MS="0",
                CATALOG_HOME=str(tmp_path / "home"),
                CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
                CATALOG_SECRET_KEY="replica-test-secret-key-0123456789",
                CATALOG_METRICS_ACCESS="open",
                CATALOG_RATE_LIMIT_PER_MINUTE="0",
                CATALOG_LOG_FORMAT="text",
            )
            with serving("--workers", "2", env=env) as server:
                two = await asyncio.to_thread(started, server, 2)

                async def both_listening() -> bool:
                    return len(listener_ports(two, proxy)) == 2

                await poll(both_listening, "both workers' LISTEN connections through the proxy")
                listeners = listener_ports(two, proxy)
                async with contextlib.AsyncExitStack() as stack:
                    before = my_ports(two)
                    listening = await stack.enter_async_context(pinned_client(two, tokens["reader"]))
                    stream = await stack.enter_async_context(
                        listening.listen(resource_subscriptions=[WATCHED])
                    )
                    (stream_port,) = my_ports(two) - before
                    worker_a = worker_of(two, stream_port)
                    (worker_b,) = set(listeners) - {worker_a}
                    reader = await _client_on(two, worker_b, tokens["reader"], stack)
                    await poll(lambda: caught_up(replication), "the standby caught up")

                    told = f"told by worker {worker_a}"
                    proxy.hold(listeners[worker_b])
                    async with replay_paused(replication):
                        resource = {"uri": WATCHED, "name": "watched", "mimeType": "text/plain", "text": told}
                        await upsert_resource(catalog, SYSTEM, tenant, ResourceIn.model_validate(resource))
                        assert str((await _next_update(stream)).uri) == WATCHED  # delivered by A

                        async def held_from_b() -> bool:
                            return proxy.held(listeners[worker_b]) >= 1

                        await poll(held_from_b, "worker B's notification held back")
                        on_primary = metric(two, "catalog_read_replica_reads", target="primary")
                        behind = metric(two, "catalog_read_replica_skips", reason="behind")
                        assert text_of(await reader.read_resource(WATCHED)) == told
                        assert metric(two, "catalog_read_replica_reads", target="primary") > on_primary
                        assert metric(two, "catalog_read_replica_skips", reason="behind") > behind
                        assert proxy.held(listeners[worker_b]) >= 1  # B still had not been told itself
                        (standby,) = await fetch(
                            replication.standby.url, "SELECT text FROM resources WHERE uri = $1", WATCHED
                        )
                        assert standby["text"] != told  # the standby was behind the change
                        proxy.release(listeners[worker_b])
                    await poll(lambda: caught_up(replication), "the standby caught up after the pause")

                    async def read_on_replica() -> bool:
                        before = metric(two, "catalog_read_replica_reads", target="replica")
                        assert text_of(await reader.read_resource(WATCHED)) == told
                        return metric(two, "catalog_read_replica_reads", target="replica") > before

                    await poll(read_on_replica, "worker B's reads back on the standby")
    finally:
        await engine.dispose()


async def _client_on(served: Served, worker: int, token: str, stack: contextlib.AsyncExitStack) -> Client:
    """A connected client whose one connection ``worker`` serves (new connections are spread over
    the workers' sockets by the kernel: open them until one lands there)."""
    for _ in range(32):
        before = my_ports(served)
        mcp = await stack.enter_async_context(pinned_client(served, token))
        assert text_of(await mcp.read_resource("file:///docs/alpha")) == "alpha"
        (port,) = my_ports(served) - before
        if worker_of(served, port) == worker:
            return mcp
    pytest.fail(f"no connection reached worker {worker} in 32 tries")


# -- two hosts: the listener barrier holds the rule across separate `serve` processes -------------


async def test_a_notification_another_host_delivered_holds_reads_through_this_host(
    tokens: dict[str, str], replication: Replication, tmp_path: Path
) -> None:
    """Two ``catalog serve`` processes on one primary and standby, as two hosts (no table shared):
    a stream on host A is told of an update while host B's LISTEN connection is held back from every
    notification (a proxy) and the standby's replay is paused. A read through B then gets the new
    content from the primary: B's listener barrier (a NOTIFY echoed to its own listener, held back
    too) is not answered within its bound, so B does not trust its replica. Once B's listener is
    released and the standby has caught up, B's reads pass the barrier and reach the standby again.

    ``CATALOG_READ_MAX_LAG_MS=0`` on both: only the notification rule keeps B off the paused standby
    (without the barrier, B would read the old text from it)."""
    settings = Settings(database_url=replication.primary.url, home=tmp_path)
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    catalog = Catalog(engine=engine, settings=settings)
    tenant = await find_tenant(catalog, "replicas")
    assert tenant is not None
    common = {
        "CATALOG_DATABASE_URL": replication.primary.url,
        "CATALOG_READ_DATABASE_URL": replication.standby.url,
        "CATALOG_READ_MAX_LAG_MS": "0",
        "CATALOG_ADMIN_TOKEN": ADMIN_TOKEN,
        "CATALOG_SECRET_KEY": "replica-test-secret-key-0123456789",
        "CATALOG_METRICS_ACCESS": "open",
        "CATALOG_RATE_LIMIT_PER_MINUTE": "0",
        "CATALOG_LOG_FORMAT": "text",
    }
    try:
        with (
            notify_proxy("127.0.0.1", replication.primary.port) as proxy,
            serving(env=catalog_env(**common, CATALOG_HOME=str(tmp_path / "a"))) as server_a,
            serving(
                env=catalog_env(
                    **common,
                    CATALOG_HOME=str(tmp_path / "b"),
                    CATALOG_LISTEN_DATABASE_URL=(
                        f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres?sslmode=disable"
                    ),
                )
            ) as server_b,
        ):
            host_a, host_b = started(server_a), started(server_b)

            async def b_listening() -> bool:
                return len(proxy.client_ports()) == 1

            await poll(b_listening, "host B's LISTEN connection through the proxy")
            (b_listener,) = proxy.client_ports()
            await poll(lambda: caught_up(replication), "the standby caught up")
            async with (
                client(host_a, tokens["reader"]) as listening,
                listening.listen(resource_subscriptions=[WATCHED]) as stream,
                client(host_b, tokens["reader"]) as reader,
            ):

                async def b_reads_on_replica() -> bool:
                    before = metric(host_b, "catalog_read_replica_reads", target="replica")
                    text_of(await reader.read_resource(WATCHED))
                    return metric(host_b, "catalog_read_replica_reads", target="replica") > before

                await poll(b_reads_on_replica, "host B's reads on the standby before the change")

                told = "told by host A"
                proxy.hold(b_listener)
                async with replay_paused(replication):
                    resource = {"uri": WATCHED, "name": "watched", "mimeType": "text/plain", "text": told}
                    await upsert_resource(catalog, SYSTEM, tenant, ResourceIn.model_validate(resource))
                    assert str((await _next_update(stream)).uri) == WATCHED  # delivered by A

                    async def held_from_b() -> bool:
                        return proxy.held(b_listener) >= 1

                    await poll(held_from_b, "host B's notification held back")
                    on_primary = metric(host_b, "catalog_read_replica_reads", target="primary")
                    barrier = metric(host_b, "catalog_read_replica_skips", reason="barrier")
                    assert text_of(await reader.read_resource(WATCHED)) == told
                    assert metric(host_b, "catalog_read_replica_reads", target="primary") == on_primary + 1
                    assert metric(host_b, "catalog_read_replica_skips", reason="barrier") == barrier + 1
                    # B's listener was told of neither the change nor its own barrier's echo.
                    assert proxy.held(b_listener) >= 2
                    (standby,) = await fetch(
                        replication.standby.url, "SELECT text FROM resources WHERE uri = $1", WATCHED
                    )
                    assert standby["text"] != told  # the standby was behind the change
                    proxy.release(b_listener)
                await poll(lambda: caught_up(replication), "the standby caught up after the pause")

                async def b_reads_new_on_replica() -> bool:
                    rounds = metric(host_b, "catalog_read_barrier_rounds")
                    before = metric(host_b, "catalog_read_replica_reads", target="replica")
                    assert text_of(await reader.read_resource(WATCHED)) == told
                    return (
                        metric(host_b, "catalog_read_replica_reads", target="replica") == before + 1
                        and metric(host_b, "catalog_read_barrier_rounds") > rounds
                    )

                await poll(b_reads_new_on_replica, "host B's reads back on the standby, past its barrier")
    finally:
        await engine.dispose()
