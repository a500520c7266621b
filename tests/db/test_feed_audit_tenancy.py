"""The audit trail and the change feed hold to their tenant without a per-row foreign key (0020):
an insert naming a missing tenant is refused, a row's tenant never changes, a tenant's delete
removes its rows whatever session deletes it, and a delete racing a writer leaves no row behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from catalog.events.listener import listener_dsn
from tests.db.support import make_tenant, wait_for_a_lock_wait

pytestmark = pytest.mark.asyncio

_AUDIT = (
    "INSERT INTO audit_log (tenant_id, principal, action, target_kind, uri)"
    " VALUES ($1, 'token:1', 'resource.create', 'resource', $2)"
)
_FEED = "SELECT catalog_emit_change($1, 'grant', $2, 'created')"


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(listener_dsn(database_url))
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(listener_dsn(database_url))
    try:
        yield connection
    finally:
        await connection.close()


async def _rows(conn: asyncpg.Connection, table: str, tenant: int) -> int:
    return await conn.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant)


async def test_feed_and_audit_have_no_foreign_key_to_tenants(conn: asyncpg.Connection) -> None:
    keys = await conn.fetch(
        "SELECT conrelid::regclass::text AS tbl FROM pg_constraint"
        " WHERE contype = 'f' AND confrelid = 'tenants'::regclass ORDER BY 1"
    )
    assert {row["tbl"] for row in keys} & {"audit_log", "change_feed"} == set()
    assert "resources" in {row["tbl"] for row in keys}  # the query finds keys at all


async def test_a_feed_or_audit_row_naming_a_missing_tenant_is_refused_and_nothing_is_written(
    conn: asyncpg.Connection,
) -> None:
    acme = await make_tenant(conn, "acme")
    missing = acme + 1000
    with pytest.raises(asyncpg.ForeignKeyViolationError, match=f"change_feed names tenant {missing}"):
        await conn.execute(_FEED, missing, "test://x")
    with pytest.raises(asyncpg.ForeignKeyViolationError, match=f"audit_log names tenant {missing}"):
        await conn.execute(_AUDIT, missing, "test://x")
    # One statement of many rows, one of them foreign: the whole statement is refused.
    with pytest.raises(asyncpg.ForeignKeyViolationError, match=f"names tenant {missing}"):
        await conn.execute(
            "INSERT INTO audit_log (tenant_id, principal, action, target_kind)"
            " SELECT t, 'token:1', 'resource.create', 'resource' FROM unnest($1::bigint[]) AS t",
            [acme, missing, acme],
        )
    for table in ("audit_log", "change_feed"):
        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0
    await conn.execute(_AUDIT, acme, "test://x")
    assert await _rows(conn, "audit_log", acme) == 1


async def test_a_feed_or_audit_row_keeps_itsmake_tenant(conn: asyncpg.Connection) -> None:
    acme, globex = await make_tenant(conn, "acme"), await make_tenant(conn, "globex")
    await conn.execute(_AUDIT, acme, "test://a")
    await conn.execute(_FEED, acme, "test://a")
    for table in ("audit_log", "change_feed"):
        with pytest.raises(asyncpg.ForeignKeyViolationError, match=f"{table} keeps its tenant"):
            await conn.execute(f"UPDATE {table} SET tenant_id = $1 WHERE tenant_id = $2", globex, acme)
        assert (await _rows(conn, table, acme), await _rows(conn, table, globex)) == (1, 0)


async def test_deleting_a_tenant_from_any_scope_removes_its_feed_and_audit_rows_only(
    conn: asyncpg.Connection,
) -> None:
    acme, globex = await make_tenant(conn, "acme"), await make_tenant(conn, "globex")
    for tenant in (acme, globex):
        await conn.execute(
            "INSERT INTO resources (tenant_id, uri, name) VALUES ($1, 'test://a', 'a')", tenant
        )  # a feed row by the resource trigger
        await conn.execute(_AUDIT, tenant, "test://a")
        await conn.execute(_FEED, tenant, "test://g")
    # As the app's role, bound to the other tenant: row security hides acme's rows from this session,
    # and the delete still takes them.
    async with conn.transaction():
        await conn.execute("SET LOCAL ROLE catalog_app")
        await conn.execute("SELECT set_config('catalog.tenant_id', $1, true)", str(globex))
        assert await _rows(conn, "audit_log", acme) == 0
        await conn.execute("DELETE FROM tenants WHERE id = $1", acme)
    for table in ("audit_log", "change_feed", "resources"):
        assert await _rows(conn, table, acme) == 0
    assert (await _rows(conn, "audit_log", globex), await _rows(conn, "change_feed", globex)) == (1, 2)


async def test_a_tenant_delete_waits_for_a_writer_of_its_feed_and_then_removes_its_rows(
    conn: asyncpg.Connection, other: asyncpg.Connection
) -> None:
    acme = await make_tenant(conn, "acme")
    writing = conn.transaction()
    await writing.start()
    await conn.execute(_FEED, acme, "test://late")
    await conn.execute(_AUDIT, acme, "test://late")
    deleting = asyncio.create_task(other.execute("DELETE FROM tenants WHERE id = $1", acme))
    try:
        await wait_for_a_lock_wait(conn)
        assert not deleting.done()
        await writing.commit()
        await asyncio.wait_for(deleting, timeout=30)
    finally:
        if not deleting.done():
            deleting.cancel()
    for table in ("audit_log", "change_feed"):
        assert await _rows(conn, table, acme) == 0


async def test_a_writer_waits_for_a_pending_tenant_delete_and_is_then_refused(
    conn: asyncpg.Connection, other: asyncpg.Connection
) -> None:
    acme = await make_tenant(conn, "acme")
    deleting = other.transaction()
    await deleting.start()
    await other.execute("DELETE FROM tenants WHERE id = $1", acme)
    writing = asyncio.create_task(conn.execute(_FEED, acme, "test://late"))
    try:
        await wait_for_a_lock_wait(other)
        assert not writing.done()
        await deleting.commit()
        with pytest.raises(asyncpg.ForeignKeyViolationError, match=f"names tenant {acme}"):
            await asyncio.wait_for(writing, timeout=30)
    finally:
        if not writing.done():
            writing.cancel()
    assert await _rows(conn, "change_feed", acme) == 0
