"""Tenant walls in depth: the app's own transactions are bound to a tenant for row-level security."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import func, select, text

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import create_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import create_tenant
from catalog.db.engine import TenantScope, create_engine, probe_app_role, transaction
from catalog.db.models import audit_log, change_feed, resource_versions, resources
from catalog.settings import Settings


@pytest.fixture
async def catalog(settings: Settings) -> AsyncIterator[Catalog]:
    url = settings.async_database_url()
    # Exactly as the app builds its engine: a superuser login switches to role catalog_app.
    engine = create_engine(url, app_role=await probe_app_role(url))
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


async def test_the_app_runs_as_a_role_bound_by_row_level_security(catalog: Catalog) -> None:
    async with catalog.engine.connect() as conn:
        role, bypass = (
            await conn.execute(
                text(
                    "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
                )
            )
        ).one()
    assert bypass is False, f"the app runs as {role}, which bypasses row-level security"


async def test_a_query_that_forgot_its_tenant_filter_sees_only_its_own_tenant(catalog: Catalog) -> None:
    admin = Principal.platform_admin()
    acme, globex = await create_tenant(catalog, "acme"), await create_tenant(catalog, "globex")
    for tenant in (acme, globex):
        await create_resource(
            catalog, admin, tenant, ResourceIn(uri=f"test://{tenant.slug}/doc", name="doc", text="x")
        )

    async with transaction(catalog.engine, TenantScope.tenant(acme.id)) as conn:
        # Deliberately no WHERE tenant_id = ...: the policy alone keeps globex out.
        uris = (await conn.execute(select(resources.c.uri))).scalars().all()
        counts = {
            table.name: (await conn.execute(select(func.count()).select_from(table))).scalar_one()
            for table in (resource_versions, audit_log, change_feed)
        }
    assert uris == ["test://acme/doc"]
    assert counts == {"resource_versions": 1, "audit_log": 1, "change_feed": 1}


async def test_a_transaction_bound_to_no_tenant_sees_no_tenant_rows(catalog: Catalog) -> None:
    acme = await create_tenant(catalog, "acme")
    await create_resource(catalog, Principal.platform_admin(), acme, ResourceIn(uri="test://a", name="a"))
    async with catalog.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(resources))).scalar_one() == 0


async def test_writing_into_another_tenant_is_refused_by_the_database(catalog: Catalog) -> None:
    from sqlalchemy.exc import DBAPIError

    acme, globex = await create_tenant(catalog, "acme"), await create_tenant(catalog, "globex")
    with pytest.raises(DBAPIError, match="row-level security"):
        async with transaction(catalog.engine, TenantScope.tenant(acme.id)) as conn:
            await conn.execute(resources.insert().values(tenant_id=globex.id, uri="test://sneaky", name="x"))
    async with transaction(catalog.engine, TenantScope.platform()) as conn:
        assert (await conn.execute(select(func.count()).select_from(resources))).scalar_one() == 0


async def _token(catalog: Catalog, tenant_slug: str) -> tuple[int, str]:
    from catalog.core.tokens import insert_token

    tenant = await create_tenant(catalog, tenant_slug)
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        token, _ = await insert_token(
            conn, tenant.id, scopes=["read"], is_admin=False, expires_at=None, name=None
        )
    return tenant.id, token


async def test_the_token_lookup_widens_the_scope_for_its_own_query_only(catalog: Catalog) -> None:
    """catalog_token_principal finds a token of any tenant and leaves the caller's scope unchanged."""
    from catalog.core.direct.tokens import principal_for_token
    from catalog.db.driver import self_scoped_driver
    from catalog.db.models import tokens

    acme_id, acme_token = await _token(catalog, "acme")
    globex_id, _ = await _token(catalog, "globex")

    async with self_scoped_driver(catalog.engine) as driver:
        principal = await principal_for_token(driver, acme_token)
        # The same connection, with no scope of its own, sees no token rows.
        assert await driver.fetchval("SELECT count(*) FROM tokens") == 0
    assert principal is not None and (principal.tenant_id, principal.scopes) == (acme_id, frozenset({"read"}))

    async with transaction(catalog.engine, TenantScope.tenant(globex_id)) as conn:
        driver = (await conn.get_raw_connection()).driver_connection
        # Inside globex's transaction: the function finds acme's token, then globex's scope is back.
        assert await principal_for_token(driver, acme_token) is not None
        seen = (await conn.execute(select(tokens.c.tenant_id))).scalars().all()
        setting = (await conn.execute(text("SELECT current_setting('catalog.all_tenants', true)"))).scalar()
    assert seen == [globex_id]
    assert setting == "off"


async def test_a_connection_the_server_closed_is_replaced_at_checkout(
    catalog: Catalog, settings: Settings
) -> None:
    """No pre-ping round trips: a terminated backend is noticed locally and never handed out."""
    import asyncio

    async with catalog.engine.connect() as conn:
        pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        driver = (await conn.get_raw_connection()).driver_connection
    closed = asyncio.Event()
    driver.add_termination_listener(lambda _connection: closed.set())
    assert catalog.engine.pool.checkedin() == 1  # type: ignore[attr-defined]

    superuser = create_engine(settings.async_database_url())  # the login itself, not catalog_app
    try:
        async with superuser.connect() as other:
            assert (await other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})).scalar()
    finally:
        await superuser.dispose()
    async with asyncio.timeout(10):
        await closed.wait()  # the server's goodbye reaches the idle pooled socket
    assert driver.is_closed()

    async with catalog.engine.connect() as conn:
        new_pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
    assert new_pid != pid
