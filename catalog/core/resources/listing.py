"""Listing resources: one resource, and keyset pages of the visible ones in URI byte order."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core import blobs as blob_store
from catalog.core.catalog import Catalog
from catalog.core.errors import NotFound
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.paging import DEFAULT_PAGE, page_of, page_start
from catalog.core.resources.record import ResourceRecord
from catalog.core.resources.repository import NO_FILTER, ListingFilter
from catalog.core.resources.search import Snippet, search_page, search_snippets
from catalog.core.tenants import Tenant
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.engine import TenantScope, transaction


async def get_resource(
    catalog: Catalog, tenant: Tenant, resource_id: int, *, include_content: bool = False
) -> tuple[ResourceRecord, bytes | None]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        record = await rows.fetch(conn, tenant.id, resource_id, include_content=include_content)
        if record is None:
            raise NotFound(f"no resource {resource_id}")
        blob = None
        if include_content and record.blob_sha256:
            blob = await blob_store.read_bytes(conn, tenant.id, record.blob_sha256)
    return record, blob


async def list_page(
    catalog: Catalog,
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    listing: str,
    cursor: str | None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = NO_FILTER,
) -> tuple[list[ResourceRecord], str | None]:
    """One keyset page of visible resources in URI byte order, and the cursor to the next page.

    A search (``filters.query``) is ranked in two tiers, each a keyset scan in URI order: first the
    resources whose uri, name, title or description contain the query, then those that match only
    by their text (every word of the query in it). The cursor names the tier and the last URI."""
    after = page_start(catalog, visibility, listing=listing, cursor=cursor, filters=filters)
    if visibility.nothing:
        return [], None
    if filters.query:
        return await search_page(
            catalog, conn, visibility, listing=listing, after=after, limit=limit, filters=filters
        )
    records = await rows.page_rows(conn, visibility, after=after, limit=limit + 1, filters=filters)
    return page_of(catalog, visibility, records, listing=listing, limit=limit, filters=filters)


async def list_resources(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    listing: str,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = NO_FILTER,
) -> tuple[list[ResourceRecord], str | None]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, principal, tenant.id)
        return await list_page(
            catalog, conn, visibility, listing=listing, cursor=cursor, limit=limit, filters=filters
        )


async def search_resources(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    listing: str,
    filters: ListingFilter,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
) -> tuple[list[ResourceRecord], dict[int, Snippet], str | None]:
    """A page of a search (:func:`list_page` with ``filters.query``), with a snippet of what
    matched for each resource found (by id), read in the same transaction."""
    query = filters.query
    if not query:
        raise ValueError("a search needs filters.query")
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, principal, tenant.id)
        records, next_cursor = await list_page(
            catalog, conn, visibility, listing=listing, cursor=cursor, limit=limit, filters=filters
        )
        snippets = await search_snippets(conn, tenant.id, records, query)
    return records, snippets, next_cursor
