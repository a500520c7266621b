"""A ``uriPrefix`` grant ending in ``/`` also covers the one URI that is the prefix without its
``/`` (the directory resource a directory import stores for a folder), by one rule: the grant
loader ``catalog_scope_grants`` (migration 0018) yields that URI beside the prefix, and every
executor of visibility agrees on it (``Visibility.allows``, the SQLAlchemy predicate, the page
function, the one-statement read, the template predicate)."""

from __future__ import annotations

import asyncpg
from sqlalchemy import select

from catalog.core.catalog import Catalog
from catalog.core.direct.listing import visible_page
from catalog.core.principal import Principal
from catalog.core.reading import RESOURCE_LISTING
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources, templates

ROOT = "file:///srv"
STORED = [
    f"{ROOT}/ap",
    f"{ROOT}/api",  # the directory resource of the folder api/
    f"{ROOT}/api-v2",
    f"{ROOT}/api.md",
    f"{ROOT}/api/x.md",
    f"{ROOT}/api/sub",
    f"{ROOT}/api/sub/y.md",
    f"{ROOT}/apix",
    f"{ROOT}/other",
]
_LOADED = "SELECT uris, prefixes, tags FROM catalog_scope_grants($1, $2)"
_READ = "SELECT resource_uri FROM catalog_plain_read(NULL, $1, $2, false, $3, $4, $5, $6, $7, $8)"


async def _tenant_with(db: asyncpg.Connection, grants: list[tuple[str, str]]) -> int:
    """A tenant storing :data:`STORED` (the directories as ``inode/directory``) and these
    ``(scope, uriPrefix)`` grants."""
    tenant: int = await db.fetchval("INSERT INTO tenants (slug, name) VALUES ('d', 'D') RETURNING id")
    await db.executemany(
        "INSERT INTO resources (tenant_id, uri, name, mime_type) VALUES ($1, $2, 'r', $3)",
        [
            (tenant, uri, "inode/directory" if uri.endswith(("/api", "/sub")) else "text/markdown")
            for uri in STORED
        ],
    )
    await db.executemany(
        "INSERT INTO grants (tenant_id, scope, uri_prefix) VALUES ($1, $2, $3)",
        [(tenant, scope, prefix) for scope, prefix in grants],
    )
    return tenant


def _token(tenant: int, *scopes: str) -> Principal:
    return Principal(kind="token", tenant_id=tenant, tenant_slug="d", scopes=frozenset(scopes))


async def test_the_loader_yields_the_directory_uri_of_each_prefix_ending_in_a_slash(
    db: asyncpg.Connection,
) -> None:
    """``file:///srv/api/`` brings ``file:///srv/api`` among the URIs; a prefix not ending in ``/``
    brings nothing, nor does a prefix of one ``/``; the prefixes themselves are unchanged."""
    tenant = await _tenant_with(
        db, [("dir", f"{ROOT}/api/"), ("plain", f"{ROOT}/ap"), ("slash", "/"), ("hash", f"{ROOT}/a#")]
    )
    row = await db.fetchrow(_LOADED, tenant, ["dir"])
    assert tuple(row) == ([f"{ROOT}/api"], [f"{ROOT}/api/"], None)
    other = await db.fetchrow(_LOADED, tenant, ["plain", "slash", "hash"])
    assert other["uris"] is None
    assert sorted(other["prefixes"]) == sorted([f"{ROOT}/ap", "/", f"{ROOT}/a#"])


async def test_every_executor_shows_the_directory_of_a_slash_prefix_and_nothing_beside_it(
    catalog: Catalog, db: asyncpg.Connection
) -> None:
    """A token whose scope holds only ``file:///srv/api/`` sees ``file:///srv/api`` and what is
    under it, not ``…/apix``, ``…/ap``, ``…/api-v2`` nor ``…/api.md``: the same answer from
    ``Visibility.allows``, the SQL predicate, every page of ``catalog_visible_page`` and
    ``catalog_plain_read`` with the selectors Python compiled."""
    tenant = await _tenant_with(db, [("dir", f"{ROOT}/api/")])
    expected = [f"{ROOT}/api", f"{ROOT}/api/sub", f"{ROOT}/api/sub/y.md", f"{ROOT}/api/x.md"]
    async with transaction(catalog.engine, TenantScope.tenant(tenant)) as conn:
        visibility = await load_visibility(conn, _token(tenant, "dir"), tenant)
        selected = (
            await conn.execute(
                select(resources.c.uri)
                .where(visibility.resources_clause(resources))
                .order_by(resources.c.uri)
            )
        ).scalars()
        assert list(selected) == expected
    assert sorted(uri for uri in STORED if visibility.allows(uri)) == expected
    assert await _walked(catalog, visibility) == expected
    selectors = (visibility.everything, *visibility.page_selectors())
    read = [uri for uri in STORED if await db.fetchval(_READ, tenant, ["dir"], uri, *selectors) is not None]
    assert sorted(read) == expected


async def test_a_prefix_not_ending_in_a_slash_covers_no_extra_uri(
    catalog: Catalog, db: asyncpg.Connection
) -> None:
    """``file:///srv/api`` (no ``/``) stays a plain string prefix: it covers ``…/api``, ``…/api-v2``,
    ``…/api.md``, ``…/apix`` and ``…/api/…`` by the prefix alone, and nothing shorter such as
    ``…/ap``."""
    tenant = await _tenant_with(db, [("plain", f"{ROOT}/api")])
    async with transaction(catalog.engine, TenantScope.tenant(tenant)) as conn:
        visibility = await load_visibility(conn, _token(tenant, "plain"), tenant)
    assert visibility.uris == frozenset()
    assert [uri for uri in STORED if visibility.allows(uri)] == [
        uri for uri in STORED if uri.startswith(f"{ROOT}/api")
    ]


async def test_a_template_named_by_the_directory_uri_is_visible_by_the_same_rule(
    catalog: Catalog, db: asyncpg.Connection
) -> None:
    """The URI a slash prefix yields is an exact-URI selector for templates too: the template
    ``file:///srv/api`` (no variable) is visible to ``file:///srv/api/``, ``file:///srv/apix{x}`` is
    not, in ``allows_template`` and the SQL predicate alike."""
    tenant = await _tenant_with(db, [("dir", f"{ROOT}/api/")])
    await db.executemany(
        "INSERT INTO templates (tenant_id, uri_template, literal_prefix, name) VALUES ($1, $2, $3, 't')",
        [(tenant, f"{ROOT}/api", f"{ROOT}/api"), (tenant, f"{ROOT}/apix{{x}}", f"{ROOT}/apix")],
    )
    async with transaction(catalog.engine, TenantScope.tenant(tenant)) as conn:
        visibility = await load_visibility(conn, _token(tenant, "dir"), tenant)
        shown = (
            await conn.execute(select(templates.c.uri_template).where(visibility.templates_clause(templates)))
        ).scalars()
        assert list(shown) == [f"{ROOT}/api"]
    assert visibility.allows_template(f"{ROOT}/api")
    assert not visibility.allows_template(f"{ROOT}/apix{{x}}")


async def _walked(catalog: Catalog, visibility: Visibility) -> list[str]:
    """Every URI of the page function's listing, two at a time, following the cursors."""
    walked: list[str] = []
    cursor: str | None = None
    for _ in range(20):
        entries, cursor = await visible_page(
            catalog, visibility, listing=RESOURCE_LISTING, cursor=cursor, limit=2
        )
        walked += [entry.uri for entry in entries]
        if cursor is None:
            return walked
    raise AssertionError("the listing did not end")
