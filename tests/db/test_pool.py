"""Connection pooling at scale: behind PgBouncer, and when the pool runs out.

With ``CATALOG_TEST_POOLER_URL`` set (a PgBouncer in transaction mode in front of the test server,
``scripts/pgbouncer.sh``; ``.ci/run`` runs this module, the MCP and the event modules that way) every
catalog here runs its queries through the pooler and its LISTEN connection straight to PostgreSQL
(``tests.conftest.through_pooler``); without it, straight to PostgreSQL, and the tests that are
about the pooler itself are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.engine import make_url

from catalog.bootstrap import open_catalog
from catalog.db.engine import database_unavailable, pool_exhausted, transaction
from catalog.db.scope import APP_ROLE, TenantScope
from catalog.events.listener import listener_dsn
from catalog.settings import Settings
from tests.conftest import free_port, through_pooler_env
from tests.db.support import wait_for_a_lock_wait
from tests.mcp_helpers import LEGACY, envelope, modern_headers, sse_messages
from tests.processes import catalog_env, run_catalog, serving, started

pytestmark = pytest.mark.process

ADMIN_TOKEN = "cat_pool-test-platform-admin-token"
SECRET = "pool-test-secret-0123456789abcdef"
WAIT_S = 1.0  # CATALOG_POOL_WAIT_SECONDS of the overload test
WATCHED = "test://watched-resource"  # a demo resource the test locks
POOLER = os.environ.get("CATALOG_TEST_POOLER_URL")


def serve_env(database_url: str, home: Path, **extra: str) -> dict[str, str]:
    return catalog_env(
        **through_pooler_env(database_url),
        CATALOG_HOME=str(home),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_SECRET_KEY=SECRET,
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
        **extra,
    )


# -- every transaction carries what a session would -------------------------------------------------


async def test_every_transaction_carries_its_role_timeout_and_scope_and_leaves_none_behind(
    settings: Settings,
) -> None:
    """Behind a transaction pooler consecutive transactions may run on different server sessions,
    so the role, the statement timeout and the tenant scope are set in each one, transaction-locally:
    a transaction bound to a tenant sees them, the next one (bound to nothing) sees no scope."""
    settings = settings.model_copy(update={"statement_timeout_ms": 4321, "pool_size": 1})
    probe = text(
        "SELECT current_user, session_user, current_setting('statement_timeout'),"
        " coalesce(current_setting('catalog.tenant_id', true), '')"
    )
    async with open_catalog(settings) as catalog:
        async with transaction(catalog.engine, TenantScope.tenant(7)) as conn:
            role, login, timeout, tenant = (await conn.execute(probe)).one()
        superuser = login == "postgres"  # the test servers' login (the role switch applies to it)
        assert (role, timeout, tenant) == (APP_ROLE if superuser else login, "4321ms", "7")
        for _ in range(3):
            async with catalog.engine.connect() as conn:
                role, _, timeout, tenant = (await conn.execute(probe)).one()
            assert (role, timeout, tenant) == (APP_ROLE if superuser else login, "4321ms", "")


async def test_concurrent_transactions_each_see_only_their_own_scope(settings: Settings) -> None:
    """Many transactions at once, more than the pooler has server connections (20 in
    scripts/pgbouncer.sh), so server sessions pass from one client to the next between
    transactions: each sees its own tenant and the app role in every statement, never another's."""
    settings = settings.model_copy(update={"pool_size": 25})
    probe = text("SELECT current_user, current_setting('catalog.tenant_id', true)")
    async with open_catalog(settings) as catalog:
        async with catalog.engine.connect() as conn:
            login = (await conn.execute(text("SELECT session_user"))).scalar()
        role = APP_ROLE if login == "postgres" else login

        async def scoped(tenant_id: int) -> list[tuple[str, str]]:
            seen = []
            for _ in range(3):
                async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
                    seen.append(tuple((await conn.execute(probe)).one()))
                    await asyncio.sleep(0)  # let the others run between the statements
                    seen.append(tuple((await conn.execute(probe)).one()))
            return seen

        results = await asyncio.gather(*(scoped(tenant_id) for tenant_id in range(1, 101)))
    for tenant_id, seen in enumerate(results, start=1):
        assert seen == [(role, str(tenant_id))] * 6


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # LISTEN through a transaction pooler would lose notifications without an error.
        ({"CATALOG_DATABASE_POOLER": "pgbouncer"}, "catalog: CATALOG_LISTEN_DATABASE_URL: required with"),
        (
            {"CATALOG_DATABASE_POOLER": "pgpool"},
            "catalog: CATALOG_DATABASE_POOLER: Input should be 'none' or",
        ),
        ({"CATALOG_LISTEN_DATABASE_URL": "mysql://x/y"}, "catalog: CATALOG_LISTEN_DATABASE_URL: Value error"),
        (
            {"CATALOG_POOL_SIZE": "0"},
            "catalog: CATALOG_POOL_SIZE: Input should be greater than or equal to 1",
        ),
        (
            {"CATALOG_POOL_WAIT_SECONDS": "0"},
            "catalog: CATALOG_POOL_WAIT_SECONDS: Input should be greater than 0",
        ),
    ],
)
def test_a_bad_pool_setting_is_refused_with_one_line_naming_it(
    overrides: dict[str, str], expected: str, database_url: str, tmp_path: Path
) -> None:
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"), **overrides)
    result = run_catalog("serve", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]


@pytest.mark.skipif(
    not POOLER, reason="needs CATALOG_TEST_POOLER_URL (a PgBouncer; see scripts/pgbouncer.sh)"
)
def test_behind_a_pooler_only_the_listen_connection_goes_straight_to_postgres(
    database_url: str, tmp_path: Path
) -> None:
    """The served catalog's connections: one to PostgreSQL itself (its LISTEN connection, the
    ``catalog-listener`` backend), every other one to the pooler; and events still arrive."""
    assert POOLER is not None
    server_port = make_url(database_url).port or 5432
    pooler_port = make_url(POOLER).port or 6432
    with serving(env=serve_env(database_url, tmp_path / "home")) as served:
        started(served)
        ready = httpx.get(f"{served.base_url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["checks"]["events"] == "ok"
        connections = psutil.Process(served.process.pid).net_connections("tcp")
        to_server = {c.laddr.port for c in connections if c.raddr and c.raddr.port == server_port}
        to_pooler = {c.laddr.port for c in connections if c.raddr and c.raddr.port == pooler_port}

        async def listener_ports() -> set[int]:
            conn = await asyncpg.connect(listener_dsn(database_url))
            try:
                rows = await conn.fetch(
                    "SELECT client_port FROM pg_stat_activity"
                    " WHERE datname = current_database() AND application_name = 'catalog-listener'"
                )
            finally:
                await conn.close()
            return {row["client_port"] for row in rows}

        assert to_server == asyncio.run(listener_ports()) and len(to_server) == 1
        assert to_pooler  # the pool's connections (readyz just used one)


@pytest.mark.skipif(
    not POOLER, reason="needs CATALOG_TEST_POOLER_URL (a PgBouncer; see scripts/pgbouncer.sh)"
)
def test_migrations_and_commands_run_through_the_pooler_again_and_again(
    empty_database_url: str, tmp_path: Path
) -> None:
    """Alembic, the schema check and a CLI command through the pooler, several times over: a named
    prepared statement left on a server session by one run would collide with the next run's."""
    env = catalog_env(**through_pooler_env(empty_database_url), CATALOG_HOME=str(tmp_path / "home"))
    for argv, expected in [
        (("migrate",), "upgraded from an empty schema to"),
        (("migrate", "downgrade", "0003", "--yes"), "downgraded from"),
        (("migrate",), "upgraded from 0003 to"),
        (("migrate",), "already at head"),
        (("tenant", "create", "acme"), "created tenant acme"),
        (("tenant", "list"), "acme"),
    ]:
        result = run_catalog(*argv, env=env)
        assert result.returncode == 0 and expected in result.stdout + result.stderr, result.stderr


# -- overload: an exhausted pool is 503 with Retry-After --------------------------------------------


@contextlib.asynccontextmanager
async def row_locked(database_url: str, uri: str) -> AsyncIterator[asyncpg.Connection]:
    """Hold a lock on the resource row at ``uri`` (from the test's own connection) until exit."""
    conn = await asyncpg.connect(listener_dsn(database_url))
    try:
        locking = conn.transaction()
        await locking.start()
        locked = await conn.fetch("SELECT id FROM resources WHERE uri = $1 FOR UPDATE", uri)
        assert len(locked) == 1
        try:
            yield conn
        finally:
            await locking.rollback()
    finally:
        await conn.close()


def assert_busy_503(response: httpx.Response, elapsed: float) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1
    # It waited for a connection, as long as configured, and not (much) longer.
    assert WAIT_S * 0.9 <= elapsed < WAIT_S + 5, elapsed


async def timed(request: Any) -> tuple[httpx.Response, float]:
    begun = time.monotonic()
    response = await request
    return response, time.monotonic() - begun


async def test_an_exhausted_pool_answers_503_with_retry_after_on_both_surfaces_and_recovers(
    database_url: str, tmp_path: Path
) -> None:
    """With a pool of one connection, held by a write that waits for a row the test has locked,
    the next requests wait ``CATALOG_POOL_WAIT_SECONDS`` and get 503 with ``Retry-After``: the
    admin API as problem JSON, ``/mcp`` as HTTP 503 with a retryable ``-32603`` whether the
    connection is first needed to authenticate (a token), before dispatch (a 2026-07-28 request)
    or by the 2025-11-25 session transport (an anonymous session's request), and before a stream
    (a listen, a session's GET) begins. Never a 500; once the lock is gone the held write completes
    and every surface answers again."""
    env = serve_env(
        database_url,
        tmp_path / "home",
        CATALOG_POOL_SIZE="1",
        CATALOG_POOL_WAIT_SECONDS=str(WAIT_S),
        CATALOG_STATEMENT_TIMEOUT_MS="60000",  # the held write must outlast the test, not time out
    )
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    legacy = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    with serving("--demo", env=env) as served:
        started(served)
        async with httpx.AsyncClient(base_url=served.base_url, timeout=60) as http:
            minted = await http.post(
                "/admin/v1/tenants/demo/tokens", json={"scopes": ["public"]}, headers=admin
            )
            assert minted.status_code == 201, minted.text
            token = {"Authorization": f"Bearer {minted.json()['token']}"}
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
            opened = await http.post("/mcp", json=init, headers=legacy)  # anonymous: the public tenant
            session = {
                **legacy,
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "MCP-Protocol-Version": LEGACY,
            }
            listing = {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}
            modern = {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "resources/list",
                "params": {"_meta": envelope()},
            }
            write = {"name": "watched-resource", "mimeType": "text/plain", "text": "written under load"}

            async with row_locked(database_url, WATCHED) as lock:
                held = asyncio.create_task(
                    http.put(
                        "/admin/v1/tenants/demo/resources", params={"uri": WATCHED}, json=write, headers=admin
                    )
                )
                await wait_for_a_lock_wait(lock)  # the pool's one connection is now held

                response, elapsed = await timed(http.get("/admin/v1/tenants/demo/resources", headers=admin))
                assert_busy_503(response, elapsed)
                assert response.headers["content-type"] == "application/problem+json"
                problem = response.json()
                assert problem["status"] == 503 and "busy" in problem["detail"]

                listen = {
                    "jsonrpc": "2.0",
                    "id": 4,
                    "method": "subscriptions/listen",
                    "params": {"_meta": envelope(), "notifications": {"resourcesListChanged": True}},
                }
                for request in (
                    http.post("/mcp", json=modern, headers={**modern_headers("resources/list"), **token}),
                    http.post("/mcp", json=modern, headers=modern_headers("resources/list")),
                    http.post("/mcp", json=listing, headers=session),
                    http.post(
                        "/mcp",
                        json=listen,
                        headers=modern_headers("subscriptions/listen"),
                        timeout=WAIT_S + 10,
                    ),
                    http.get("/mcp", headers=session, timeout=WAIT_S + 10),
                ):
                    response, elapsed = await timed(request)
                    assert_busy_503(response, elapsed)
                    error = response.json()["error"]
                    assert error["code"] == -32603 and error["data"] == {"retryable": True}
                    assert "busy" in error["message"]
                assert not held.done()

            written = await asyncio.wait_for(held, 30)
            assert written.status_code == 200, written.text
            assert (await http.get("/admin/v1/tenants/demo/resources", headers=admin)).status_code == 200
            answered = await http.post(
                "/mcp", json=modern, headers={**modern_headers("resources/list"), **token}
            )
            assert answered.status_code == 200 and WATCHED in {
                r["uri"] for r in answered.json()["result"]["resources"]
            }
            answered = await http.post("/mcp", json=listing, headers=session)
            assert answered.status_code == 200
            assert WATCHED in {r["uri"] for r in sse_messages(answered.text)[0]["result"]["resources"]}
    assert "Traceback" not in served.printed()


def test_an_exhausted_pool_is_told_apart_from_a_database_that_is_down() -> None:
    """``pool_exhausted`` (the "busy" 503) is the pool's checkout timeout, however it was wrapped
    (raised from another error, or inside a task group with nothing but such failures); a database
    that is down or slow is unavailable but not "busy"; anything else is neither."""
    checkout = sa_exc.TimeoutError("QueuePool limit of size 1 overflow 0 reached")
    try:
        raise RuntimeError("handler failed") from checkout
    except RuntimeError as exc:
        wrapped = exc
    grouped = ExceptionGroup("task group", [checkout, sa_exc.TimeoutError("again")])
    mixed = ExceptionGroup("task group", [checkout, ValueError("a bug")])
    for exc in (checkout, wrapped, grouped):
        assert pool_exhausted(exc) and database_unavailable(exc)
    down = ConnectionRefusedError(111, "Connection refused")
    assert database_unavailable(down) and not pool_exhausted(down)
    assert not database_unavailable(mixed) and not pool_exhausted(mixed)
    assert not database_unavailable(ValueError("a bug")) and not pool_exhausted(ValueError("a bug"))
