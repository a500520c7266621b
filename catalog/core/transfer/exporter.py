"""``catalog export``: every visible resource as an admin-API body, in URI order, memory bounded."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import MAX_PAGE, ResourceRecord, list_page
from catalog.core.tenants import Tenant
from catalog.core.visibility import load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import blobs, resources

EXPORT_GROUP_BYTES = 32 * 1024 * 1024  # content bytes fetched per query while exporting


def export_object(record: ResourceRecord, *, text: str | None, blob: bytes | None) -> dict[str, Any]:
    """A resource as an admin-API body (``ResourceIn`` shape): stored metadata and inline content."""
    data = record.snapshot()
    data.pop("size", None)  # computed on the way in, never given
    if text is not None:
        data["text"] = text
    elif blob is not None:
        data["blob"] = base64.b64encode(blob).decode("ascii")
    return data


async def export_lines(
    catalog: Catalog, principal: Principal, tenant: Tenant
) -> AsyncIterator[dict[str, Any]]:
    """Every resource of ``tenant`` visible to ``principal``, in URI order, with its content.

    Each page is read in one transaction (listing and content agree); content is fetched a
    bounded group at a time, so memory stays flat however large the catalogue.
    """
    cursor: str | None = None
    while True:
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            visibility = await load_visibility(conn, principal, tenant.id)
            records, cursor = await list_page(
                catalog, conn, visibility, listing="export", cursor=cursor, limit=MAX_PAGE
            )
            start = 0
            while start < len(records):  # content in groups of bounded size, one query per kind
                end, group_bytes = start, 0
                while end < len(records) and (end == start or group_bytes < EXPORT_GROUP_BYTES):
                    group_bytes += records[end].size or 0
                    end += 1
                group = records[start:end]
                texts, data = await _contents(conn, tenant, group)
                for record in group:
                    yield export_object(
                        record,
                        text=texts.get(record.id),
                        blob=data.get(record.blob_sha256) if record.blob_sha256 else None,
                    )
                start = end
        if cursor is None:
            return


async def _contents(
    conn: AsyncConnection, tenant: Tenant, records: list[ResourceRecord]
) -> tuple[dict[int, str], dict[str, bytes]]:
    """The text (by resource id) and blob bytes (by sha256) of ``records``."""
    texts: dict[int, str] = {}
    text_ids = [r.id for r in records if r.blob_sha256 is None]
    if text_ids:
        rows = await conn.execute(
            select(resources.c.id, resources.c.text).where(
                resources.c.tenant_id == tenant.id, resources.c.id.in_(text_ids)
            )
        )
        texts = {row.id: row.text for row in rows if row.text is not None}
    data: dict[str, bytes] = {}
    shas = sorted({r.blob_sha256 for r in records if r.blob_sha256})
    if shas:
        rows = await conn.execute(
            select(blobs.c.sha256, blobs.c.data).where(
                blobs.c.tenant_id == tenant.id, blobs.c.sha256.in_(shas)
            )
        )
        data = {row.sha256: bytes(row.data) for row in rows}
    return texts, data
