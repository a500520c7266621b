"""A resource's history: its versions, one of them, and restoring one as a new version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row

from catalog.core.authors import authors_of
from catalog.core.catalog import Catalog
from catalog.core.cursors import InvalidCursor, decode_cursor, encode_cursor
from catalog.core.errors import NotFound
from catalog.core.principal import Author, Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.paging import DEFAULT_PAGE, MAX_PAGE
from catalog.core.resources.record import METADATA_FIELDS, ResourceRecord
from catalog.core.resources.writes import check_precondition, update_row
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import Tenant
from catalog.core.visibility import principal_fingerprint
from catalog.db.engine import TenantScope, transaction


@dataclass(frozen=True)
class VersionEntry:
    """One version of a history page, with its author named."""

    row: Row[Any]
    author: Author


async def list_versions(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    resource_id: int,
    *,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
) -> tuple[list[VersionEntry], str | None]:
    """One page of the resource's history, newest version first (keyset on the version number),
    each author named (:func:`~catalog.core.authors.authors_of`), and the signed cursor to the next page."""
    limit = max(1, min(limit, MAX_PAGE))
    listing = f"admin.versions:{resource_id}"
    fingerprint = principal_fingerprint(principal, tenant.id)
    before = None
    if cursor:
        position = decode_cursor(catalog.signing_key, cursor, listing=listing, fingerprint=fingerprint)
        if not isinstance(position.after, int):
            raise InvalidCursor()
        before = position.after
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        if not await rows.exists(conn, tenant.id, resource_id):
            raise NotFound(f"no resource {resource_id}")
        found = await rows.versions(conn, tenant.id, resource_id, before=before, limit=limit + 1)
        authors = await authors_of(conn, tenant.id, (row.changed_by for row in found[:limit]))
    entries = [VersionEntry(row, authors[row.changed_by]) for row in found[:limit]]
    next_cursor = None
    if len(found) > limit:
        next_cursor = encode_cursor(
            catalog.signing_key, after=entries[-1].row.version, listing=listing, fingerprint=fingerprint
        )
    return entries, next_cursor


async def get_version(catalog: Catalog, tenant: Tenant, resource_id: int, version: int) -> VersionEntry:
    """One version with its content, its author named."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        row = await rows.version(conn, tenant.id, resource_id, version)
        if row is None:
            if not await rows.exists(conn, tenant.id, resource_id):
                raise NotFound(f"no resource {resource_id}")
            raise NotFound(f"resource {resource_id} has no version {version}")
        authors = await authors_of(conn, tenant.id, [row.changed_by])
    return VersionEntry(row, authors[row.changed_by])


async def restore_version(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    resource_id: int,
    version: int,
    *,
    if_match: str | None = None,
) -> ResourceRecord:
    """Make version ``version`` the current state again (metadata and content) as a new version:
    history is never rewritten. One write like any other (version row, audit ``resource.restore``,
    change-feed row and event by trigger); restoring what is already current changes nothing."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        old = await rows.version(conn, tenant.id, resource_id, version)
        if old is None:
            raise NotFound(f"resource {resource_id} has no version {version}")
        check_precondition(current, if_match)
        snapshot = {k: v for k, v in old.snapshot.items() if k != "size"}
        if old.text is not None:
            snapshot["text"] = old.text
        elif old.blob_sha256 is not None:
            snapshot["blobSha256"] = old.blob_sha256
        body = ResourceIn.model_validate(snapshot)
        return await update_row(
            catalog,
            conn,
            principal,
            tenant,
            current,
            body,
            METADATA_FIELDS,
            replace_content=True,
            action="resource.restore",
            detail={"version": version},
        )
