"""``catalog token list``'s read on one bare connection (catalog/core/direct/token_list.py) lists
exactly what the core lists, tenant by tenant, and row-level security walls it to its tenant as it
walls the engine's transactions; what it cannot answer is None (the full command answers)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

import pytest

from catalog.bootstrap import schema_head
from catalog.core.catalog import Catalog
from catalog.core.direct import token_list
from catalog.core.plain_sql import Tenant, TokenRecord
from catalog.core.principal import Principal
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tenants import create_tenant
from catalog.core.tokens import create_token, delete_token, list_token_records
from catalog.db.engine import transaction
from catalog.db.scope import TenantScope
from catalog.environment import plain_database_url
from tests.conftest import free_port

BY = Principal.system("test")


def connect_args(database_url: str) -> dict[str, str | int]:
    plain = plain_database_url(database_url)
    assert plain is not None, database_url
    return plain.connect_args()


async def two_tenants(catalog: Catalog) -> tuple[Tenant, Tenant]:
    """acme: three tokens (one revoked, one expiring, one named); globex: two."""
    acme, globex = await create_tenant(catalog, "acme"), await create_tenant(catalog, "globex")
    soon = datetime.now(UTC) + timedelta(days=1)
    first = await create_token(catalog, BY, acme, TokenIn(scopes=["read", "write"], name="agent one"))
    await create_token(catalog, BY, acme, TokenIn(admin=True, expires_at=soon))
    await create_token(catalog, BY, acme, TokenIn())
    await delete_token(catalog, BY, acme, first.id)
    for scope in ("a", "b"):
        await create_token(catalog, BY, globex, TokenIn(scopes=[scope]))
    return acme, globex


async def test_the_bare_driver_read_lists_exactly_what_the_core_lists_for_each_tenant(
    catalog: Catalog, database_url: str
) -> None:
    acme, globex = await two_tenants(catalog)
    for tenant, count in ((acme, 3), (globex, 2)):
        direct = await token_list.tenant_tokens(connect_args(database_url), 15_000, tenant.slug)
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            core = await list_token_records(conn, tenant.id)
        assert direct == core
        assert len(core) == count and {record.tenant_id for record in core} == {tenant.id}
    listed = await token_list.tenant_tokens(connect_args(database_url), 15_000, "acme")
    assert listed is not None and [r.id for r in listed] == sorted(r.id for r in listed)
    revoked, expiring, plain = listed
    assert (revoked.name, revoked.scopes, revoked.revoked_at is not None) == (
        "agent one",
        ("read", "write"),
        True,
    )
    assert (expiring.is_admin, expiring.expires_at is not None, plain.scopes) == (True, True, ())


async def test_the_bare_driver_read_is_walled_to_its_tenant_even_without_its_filter(
    catalog: Catalog, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme, _ = await two_tenants(catalog)
    columns = ", ".join(field.name for field in fields(TokenRecord))
    # Deliberately no tenant filter: the app role and the tenant's scope alone keep globex out.
    monkeypatch.setattr(
        token_list, "TENANT_TOKENS", f"SELECT {columns} FROM tokens WHERE $1::bigint IS NOT NULL ORDER BY id"
    )
    direct = await token_list.tenant_tokens(connect_args(database_url), 15_000, "acme")
    assert direct is not None and len(direct) == 3
    assert {record.tenant_id for record in direct} == {acme.id}


async def test_what_the_bare_driver_read_cannot_answer_is_none(catalog: Catalog, database_url: str) -> None:
    await two_tenants(catalog)
    assert await token_list.tenant_tokens(connect_args(database_url), 15_000, "nope") is None
    closed = {**connect_args(database_url), "host": "127.0.0.1", "port": free_port("127.0.0.1")}
    assert await token_list.tenant_tokens(closed, 15_000, "acme") is None


async def test_a_read_bound_to_a_revision_answers_only_at_that_revision(
    catalog: Catalog, database_url: str
) -> None:
    await two_tenants(catalog)
    at_head = await token_list.tenant_tokens(
        connect_args(database_url), 15_000, "acme", at_revision=schema_head()
    )
    elsewhere = await token_list.tenant_tokens(connect_args(database_url), 15_000, "acme", at_revision="0001")
    assert at_head is not None and len(at_head) == 3
    assert elsewhere is None  # the full command would migrate first
