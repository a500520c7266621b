"""Every executor of the visibility rule gives the same answer (RES-7, RES-25,
AUTH-11, AUTH-12): on random grants, principals and resources of a tenant, the resources visible
by the grants themselves are exactly those that

- ``Visibility.allows`` admits (event fan-out, the fast read's last check),
- the SQLAlchemy predicate ``Visibility.resources_clause`` selects (every listing and read of the
  full path), on the grants ``load_visibility`` loaded (``catalog_scope_grants``),
- the page function lists, page after small page (``direct.listing.visible_page`` over
  ``catalog_visible_page``),
- the fast read sends content for (``catalog_plain_read`` with the selectors Python compiled, the
  grants it loaded itself).

Grants are URIs, prefixes (covering one another, the empty-path ``test://`` covering all, edge
characters such as ``/`` and ``0`` that bound a prefix's range, U+10FFFF; a prefix ending in ``/``
also covering the URI without that ``/``) and tags over three
scopes; principals are a tenant admin, a scoped token, a token without scopes and another tenant's
token. One tenant per example, inserted in a few statements.
"""

from __future__ import annotations

import itertools
from typing import Any

import asyncpg
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from catalog.core.catalog import Catalog
from catalog.core.direct.listing import visible_page
from catalog.core.principal import Principal
from catalog.core.reading import RESOURCE_LISTING
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources

SCOPES = ["a", "b", "c"]
TAGS = ["t1", "t2", "t3"]
# "/" and "0" are neighbours ("0" is the first character past a prefix ending in "/"), "." sorts
# before both, "~" is the last printable ASCII, U+10FFFF the last code point (no upper bound).
PATH = st.text(alphabet=["/", "0", ".", "~", "a", "é", "\U0010ffff"], max_size=4)
# The directory URIs of the sampled slash prefixes ("test://a" of "test://a/") come up often.
URIS = st.one_of(st.builds(lambda path: "test://" + path, PATH), st.sampled_from(["test://a", "test:/"]))
RESOURCES = st.dictionaries(URIS, st.frozensets(st.sampled_from(TAGS), max_size=2), max_size=10)
SELECTORS = st.one_of(
    st.tuples(st.just("uri"), URIS),
    st.tuples(st.just("uri_prefix"), st.builds(lambda path: "test://" + path, PATH)),
    st.tuples(st.just("uri_prefix"), st.sampled_from(["test:", "test://", "test://a/", "test://a"])),
    st.tuples(st.just("tag"), st.sampled_from(TAGS)),
)
GRANTS = st.lists(st.tuples(st.sampled_from(SCOPES), SELECTORS), max_size=6, unique=True)
STANDINGS = st.one_of(
    st.just(("admin", frozenset[str]())),
    st.tuples(st.just("scoped"), st.frozensets(st.sampled_from([*SCOPES, "unused"]), min_size=1)),
    st.just(("no scopes", frozenset[str]())),
    st.tuples(st.just("other tenant"), st.frozensets(st.sampled_from(SCOPES), min_size=1)),
)
SLUGS = itertools.count()


def visible_by_the_grants(
    standing: str, scopes: frozenset[str], grants: list[tuple[str, tuple[str, str]]], found: dict[str, Any]
) -> set[str]:
    """The rule as the README states it, written out: an admin sees everything; another tenant's
    principal and one without scopes nothing; anyone else what a grant of one of its scopes names
    (a prefix ending in ``/`` also names the URI that is the prefix without it)."""
    if standing == "admin":
        return set(found)
    if standing != "scoped":
        return set()
    held = [selector for scope, selector in grants if scope in scopes]
    return {
        uri
        for uri, tags in found.items()
        if any(
            (kind == "uri" and uri == value)
            or (kind == "uri_prefix" and (uri.startswith(value) or (value[-1:] == "/" and uri == value[:-1])))
            or (kind == "tag" and value in tags)
            for kind, value in held
        )
    }


async def paged(catalog: Catalog, visibility: Visibility, limit: int) -> list[str]:
    """Every URI of the listing, ``limit`` at a time, following the cursors."""
    walked: list[str] = []
    cursor: str | None = None
    for _ in range(50):
        entries, cursor = await visible_page(
            catalog, visibility, listing=RESOURCE_LISTING, cursor=cursor, limit=limit
        )
        walked += [entry.uri for entry in entries]
        if cursor is None:
            return walked
    raise AssertionError("the listing did not end")


_READ = "SELECT resource_uri FROM catalog_plain_read(NULL, $1, $2, $3, $4, $5, $6, $7, $8, $9)"


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    found=RESOURCES,
    grants=GRANTS,
    standing=STANDINGS,
    limit=st.integers(min_value=1, max_value=4),
)
# The directory URI of a slash prefix, beside what the prefix covers and what it must not.
@example(
    found={
        "test://a": frozenset(),
        "test://a/0": frozenset(),
        "test://ab": frozenset(),
        "test://": frozenset(),
    },
    grants=[("a", ("uri_prefix", "test://a/"))],
    standing=("scoped", frozenset({"a"})),
    limit=1,
)
async def test_allows_the_sql_predicate_the_page_function_and_the_fast_read_agree_with_the_grants(
    catalog: Catalog,
    db: asyncpg.Connection,
    found: dict[str, frozenset[str]],
    grants: list[tuple[str, tuple[str, str]]],
    standing: tuple[str, frozenset[str]],
    limit: int,
) -> None:
    """RES-25, AUTH-12 (docs/requirements.toml)."""
    n = next(SLUGS)
    tenant = await db.fetchval("INSERT INTO tenants (slug, name) VALUES ($1, 'T') RETURNING id", f"v{n}")
    elsewhere = await db.fetchval("INSERT INTO tenants (slug, name) VALUES ($1, 'O') RETURNING id", f"o{n}")
    await db.executemany(
        "INSERT INTO resources (tenant_id, uri, name, tags) VALUES ($1, $2, 'r', $3)",
        [(tenant, uri, sorted(tags)) for uri, tags in found.items()],
    )
    await db.executemany(
        "INSERT INTO grants (tenant_id, scope, uri, uri_prefix, tag) VALUES ($1, $2, $3, $4, $5)",
        [
            (
                tenant,
                scope,
                value if kind == "uri" else None,
                value if kind == "uri_prefix" else None,
                value if kind == "tag" else None,
            )
            for scope, (kind, value) in grants
        ],
    )
    kind, scopes = standing
    principal = Principal(
        kind="token",
        tenant_id=elsewhere if kind == "other tenant" else tenant,
        tenant_slug="t",
        scopes=scopes,
        is_admin=kind == "admin",
    )
    expected = visible_by_the_grants(kind, scopes, grants, found)

    async with transaction(catalog.engine, TenantScope.tenant(tenant)) as conn:
        visibility = await load_visibility(conn, principal, tenant)
        selected = (
            await conn.execute(select(resources.c.uri).where(visibility.resources_clause(resources)))
        ).all()
    assert {uri for uri, tags in found.items() if visibility.allows(uri, tags)} == expected
    assert {row.uri for row in selected} == expected
    assert await paged(catalog, visibility, limit) == sorted(expected, key=lambda uri: uri.encode())

    if principal.tenant_id == tenant:
        selectors = (visibility.everything, *visibility.page_selectors())
        standing_arguments = (tenant, sorted(scopes), principal.is_admin)
        read = {
            uri for uri in found if await db.fetchval(_READ, *standing_arguments, uri, *selectors) is not None
        }
        assert read == expected
