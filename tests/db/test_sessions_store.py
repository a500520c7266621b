"""2025-11-25 session state in PostgreSQL (``catalog.core.sessions``): what resuming a session
requires, and that a session's rows belong to its tenant (row-level security)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio

from catalog.core import sessions
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.tenants import create_tenant
from catalog.db.engine import create_engine
from catalog.settings import Settings

PARAMS = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


@pytest_asyncio.fixture
async def catalog(settings: Settings) -> AsyncIterator[Catalog]:
    engine = create_engine(settings.async_database_url(), pool_size=2, max_overflow=0)
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


def token(tenant_id: int, token_id: int, *scopes: str) -> Principal:
    return Principal(
        kind="token", tenant_id=tenant_id, tenant_slug="t", scopes=frozenset(scopes), token_id=token_id
    )


async def test_a_session_resumes_only_for_its_credential_and_within_the_idle_time(catalog: Catalog) -> None:
    tenant = await create_tenant(catalog, "acme")
    owner = token(tenant.id, 1, "read")
    session_id = await sessions.open_session(catalog, owner, "2025-11-25", PARAMS)
    record = await sessions.resume_session(catalog, owner, session_id, idle_seconds=60)
    assert record is not None and record.protocol_version == "2025-11-25" and record.client_params == PARAMS
    assert record.key == sessions.session_key(session_id) and record.subscriptions == {}
    # Another credential, even of the same tenant with the same scopes, does not find it.
    assert await sessions.resume_session(catalog, token(tenant.id, 2, "read"), session_id, 60) is None
    assert await sessions.resume_session(catalog, owner, session_id + "x", 60) is None
    # Unused for longer than the idle time: gone at once, before any sweep.
    assert await sessions.resume_session(catalog, owner, session_id, idle_seconds=1e-6) is None


async def test_subscriptions_change_atomically_and_ending_removes_everything(
    catalog: Catalog, database_url: str
) -> None:
    tenant = await create_tenant(catalog, "acme")
    owner = token(tenant.id, 1)
    session_id = await sessions.open_session(catalog, owner, "2025-11-25", PARAMS)
    key = sessions.session_key(session_id)
    await sessions.set_subscription(catalog, tenant.id, key, "TEST://a", "test://a")
    await sessions.set_subscription(catalog, tenant.id, key, "test://b", "test://b")
    await sessions.set_subscription(catalog, tenant.id, key, "test://b", None)
    assert await sessions.session_subscriptions(catalog, tenant.id, key) == {"TEST://a": "test://a"}
    await sessions.expect_answer(catalog, tenant.id, key, "r1")
    assert await sessions.take_answer(catalog, tenant.id, key, "r1") is None  # not answered yet
    assert await sessions.deliver_answer(catalog, tenant.id, key, "r1", {"id": "r1", "result": {}})
    assert not await sessions.deliver_answer(catalog, tenant.id, key, "r1", {"id": "r1", "result": {}})
    assert not await sessions.deliver_answer(catalog, tenant.id, key, "nope", {"id": "nope", "result": {}})
    assert await sessions.take_answer(catalog, tenant.id, key, "r1") == {"id": "r1", "result": {}}
    await sessions.expect_answer(catalog, tenant.id, key, "r2")
    assert await sessions.end_session(catalog, tenant.id, key)
    assert not await sessions.end_session(catalog, tenant.id, key)
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        await conn.execute("SELECT set_config('catalog.all_tenants', 'on', false)")
        assert await conn.fetchval("SELECT count(*) FROM mcp_sessions") == 0
        assert await conn.fetchval("SELECT count(*) FROM mcp_session_requests") == 0
    finally:
        await conn.close()


async def test_another_tenants_scope_cannot_see_a_session(catalog: Catalog) -> None:
    acme = await create_tenant(catalog, "acme")
    other = await create_tenant(catalog, "other")
    session_id = await sessions.open_session(catalog, token(acme.id, 1), "2025-11-25", PARAMS)
    key = sessions.session_key(session_id)
    # The same key asked for under the other tenant's scope: row-level security hides it.
    assert await sessions.session_subscriptions(catalog, other.id, key) is None
    assert not await sessions.end_session(catalog, other.id, key)
    assert await sessions.session_subscriptions(catalog, acme.id, key) == {}
