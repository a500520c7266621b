"""Completion of a template's first segment by loose index scan: the same values as a full scan."""

from __future__ import annotations

import pytest

from catalog.core.catalog import Catalog
from catalog.core.direct import completion
from catalog.core.direct.completion import complete_argument
from catalog.core.grants import create_grant
from catalog.core.principal import Principal
from catalog.core.resources import upsert_many
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.templates import create_template
from catalog.core.tenants import Tenant, create_tenant
from catalog.db.engine import create_engine
from catalog.settings import Settings

SYSTEM = Principal.system("tests")
TEMPLATE = "test://tree/{dir}/{file}"

URIS = [
    "test://tree/a/x",
    "test://tree/a/y",
    # b's first URI does not match {file} (two segments), a later one does: b must still be offered
    "test://tree/b/deep/er",
    "test://tree/b/z",
    # c never matches
    "test://tree/c/deep/only",
    "test://tree/c",
    # a value that extends another one, and one past the separator's successor
    "test://tree/a0/x",
    "test://tree/a~/x",
    "test://tree/d%20e/x",
    "test://tree//empty-dir",
    "test://treex/a/x",  # outside the template's literal prefix
    "test://tree/hidden/x",
]


@pytest.fixture
async def catalog(settings: Settings):
    engine = create_engine(settings.async_database_url(), pool_size=2, max_overflow=0)
    yield Catalog(engine=engine, settings=settings)
    await engine.dispose()


async def tree_tenant(catalog: Catalog, uris: list[str] = URIS) -> Tenant:
    """A tenant holding ``TEMPLATE`` and ``uris`` (also tests/e2e/mcp/test_completion_round_trips.py's)."""
    tenant = await create_tenant(catalog, "tree", "Tree")
    await create_template(
        catalog,
        SYSTEM,
        tenant,
        TemplateIn.model_validate({"uriTemplate": TEMPLATE, "name": "t", "tags": ["tree"]}),
    )
    bodies = [ResourceIn.model_validate({"uri": uri, "name": uri, "text": "x"}) for uri in uris]
    await upsert_many(catalog, SYSTEM, tenant, bodies)
    return tenant


def _admin(tenant) -> Principal:
    return Principal(kind="token", tenant_id=tenant.id, tenant_slug=tenant.slug, is_admin=True, token_id=1)


async def _both(catalog: Catalog, principal: Principal, argument: str, partial: str, context=None):
    fast = await complete_argument(catalog, principal, TEMPLATE, argument, partial, context)
    saved = completion._first_segment_separator
    completion._first_segment_separator = lambda plan, argument: None  # the row-by-row scan
    try:
        slow = await complete_argument(catalog, principal, TEMPLATE, argument, partial, context)
    finally:
        completion._first_segment_separator = saved
    return fast, slow


async def test_first_segment_values_match_a_full_scan(catalog: Catalog) -> None:
    tenant = await tree_tenant(catalog)
    for partial in ("", "a", "b", "c", "d", "hid", "zz"):  # "zz": no candidate at all
        fast, slow = await _both(catalog, _admin(tenant), "dir", partial)
        assert fast == slow, partial
    fast, _ = await _both(catalog, _admin(tenant), "dir", "")
    assert fast.values == ["", "a", "a0", "a~", "b", "d e", "hidden"]
    assert (fast.total, fast.has_more) == (7, False)
    with_context, slow = await _both(catalog, _admin(tenant), "dir", "", {"file": "x"})
    assert with_context == slow and with_context.values == ["a", "a0", "a~", "d e", "hidden"]


async def test_first_segment_values_follow_visibility(catalog: Catalog) -> None:
    tenant = await tree_tenant(catalog)
    await create_grant(
        catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "uriPrefix": "test://tree/"})
    )
    await create_grant(
        catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "s", "uri": "test://tree/hidden/x"})
    )
    reader = Principal(
        kind="token", tenant_id=tenant.id, tenant_slug=tenant.slug, scopes=frozenset({"s"}), token_id=2
    )
    fast, slow = await _both(catalog, reader, "dir", "")
    assert fast == slow and "hidden" in fast.values
    narrow = Principal(
        kind="token", tenant_id=tenant.id, tenant_slug=tenant.slug, scopes=frozenset({"n"}), token_id=3
    )
    await create_grant(
        catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "n", "uriPrefix": "test://tree/a"})
    )
    await create_grant(catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "n", "tag": "tree"}))
    fast, slow = await _both(catalog, narrow, "dir", "")
    assert fast == slow and fast.values == ["a", "a0", "a~"]


async def test_the_loose_scan_is_bounded(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    tenant = await tree_tenant(catalog)
    monkeypatch.setattr(completion, "MAX_GROUPS", 3)
    result = await complete_argument(catalog, _admin(tenant), TEMPLATE, "dir", "")
    assert result.total is None and result.has_more
    assert result.values == ["", "a", "a0"]
