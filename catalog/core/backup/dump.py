"""Writing a tenant's backup: every line, in order, from one consistent snapshot."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import IO, Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.backup.format import CHUNK, FORMAT, BackupCounts, encode_line, iso
from catalog.core.catalog import Catalog
from catalog.core.resources import record_from_row
from catalog.core.templates import template_from_row
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, bind_scope, transaction
from catalog.db.models import blobs, grants, resource_versions, resources, templates, tokens

STREAM_ROWS = 50  # rows a server-side cursor fetches at once (a row may hold a large text)
BLOB_PAGE = 1000


async def backup_lines(
    catalog: Catalog, tenant: Tenant, counts: BackupCounts | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Every line of the tenant's backup, in order, from one consistent snapshot."""
    from catalog.db.migrate import head_revision

    counts = counts if counts is not None else BackupCounts()
    async with catalog.engine.connect() as raw:
        conn = await raw.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        async with conn.begin():
            await bind_scope(conn, TenantScope.tenant(tenant.id))
            # One snapshot for the whole tenant: a long read, whose statements must not be cut off
            # by the app's statement timeout (each FETCH is short, the first may have to sort).
            await conn.execute(text("SET LOCAL statement_timeout = 0"))
            yield {
                "kind": "catalog-backup",
                "format": FORMAT,
                "createdAt": iso(datetime.now(UTC)),
                "schema": head_revision(),
                "tenant": {"slug": tenant.slug, "name": tenant.name, "createdAt": iso(tenant.created_at)},
            }
            async for line in _blob_lines(conn, tenant, counts):
                yield line
            async for row in _stream(conn, select(templates).order_by(templates.c.uri_template), tenant):
                counts.templates += 1
                yield _template_line(row)
            async for row in _stream(conn, select(grants).order_by(grants.c.id), tenant):
                counts.grants += 1
                yield _grant_line(row)
            async for row in _stream(conn, select(tokens).order_by(tokens.c.id), tenant):
                counts.tokens += 1
                yield _token_line(row)
            async for row in _stream(conn, select(resources).order_by(resources.c.uri), tenant):
                counts.resources += 1
                yield _resource_line(row)
            history = (
                select(resource_versions, resources.c.uri.label("resource_uri"))
                .join(
                    resources,
                    (resources.c.tenant_id == resource_versions.c.tenant_id)
                    & (resources.c.id == resource_versions.c.resource_id),
                )
                .order_by(resources.c.uri, resource_versions.c.version)
            )
            async for row in _stream(conn, history, tenant, table=resource_versions):
                counts.versions += 1
                yield _version_line(row)
            yield {"kind": "end", "counts": counts.as_json()}


async def _stream(
    conn: AsyncConnection, query: Any, tenant: Tenant, *, table: Any = None
) -> AsyncIterator[Any]:
    """Rows of ``query`` (on the tenant) through a server-side cursor, a few at a time."""
    table = table if table is not None else query.get_final_froms()[0]
    result = await conn.stream(
        query.where(table.c.tenant_id == tenant.id).execution_options(yield_per=STREAM_ROWS)
    )
    async for row in result:
        yield row


async def _blob_lines(
    conn: AsyncConnection, tenant: Tenant, counts: BackupCounts
) -> AsyncIterator[dict[str, Any]]:
    after = ""
    while True:
        page = (
            await conn.execute(
                select(blobs.c.sha256, blobs.c.size, blobs.c.mime_type, blobs.c.created_at)
                .where(blobs.c.tenant_id == tenant.id, blobs.c.sha256 > after)
                .order_by(blobs.c.sha256)
                .limit(BLOB_PAGE)
            )
        ).all()
        for blob in page:
            counts.blobs += 1
            counts.blob_bytes += blob.size
            yield {
                "kind": "blob",
                "sha256": blob.sha256,
                "size": blob.size,
                "mimeType": blob.mime_type,
                "createdAt": iso(blob.created_at),
            }
            for offset in range(0, blob.size, CHUNK):
                chunk = (
                    await conn.execute(
                        select(func.substring(blobs.c.data, offset + 1, CHUNK)).where(
                            blobs.c.tenant_id == tenant.id, blobs.c.sha256 == blob.sha256
                        )
                    )
                ).scalar_one()
                yield {"kind": "chunk", "data": base64.b64encode(bytes(chunk)).decode("ascii")}
        if len(page) < BLOB_PAGE:
            return
        after = page[-1].sha256


def _template_line(row: Any) -> dict[str, Any]:
    record = template_from_row(row)
    body = record.to_out().model_dump(by_alias=True, exclude_none=True, mode="json")
    for stamp in ("id", "version", "createdAt", "updatedAt"):
        body.pop(stamp)
    return {
        "kind": "template",
        "id": record.id,
        "version": record.version,
        "createdAt": iso(record.created_at),
        "updatedAt": iso(record.updated_at),
        "template": body,
    }


def _grant_line(row: Any) -> dict[str, Any]:
    selector = {"uri": row.uri, "uriPrefix": row.uri_prefix, "tag": row.tag}
    body = {"scope": row.scope, **{k: v for k, v in selector.items() if v is not None}}
    return {"kind": "grant", "id": row.id, "createdAt": iso(row.created_at), "grant": body}


def _token_line(row: Any) -> dict[str, Any]:
    # Never the hash: a backup must not carry anything that authenticates.
    body = {
        "name": row.name,
        "scopes": list(row.scopes),
        "admin": row.is_admin,
        "expiresAt": iso(row.expires_at),
    }
    return {
        "kind": "token",
        "id": row.id,
        "createdAt": iso(row.created_at),
        "revokedAt": iso(row.revoked_at),
        "token": body,
    }


def _resource_line(row: Any) -> dict[str, Any]:
    record = record_from_row(row)
    body = record.snapshot()
    body.pop("size", None)  # computed again on restore, never trusted from a file
    if record.blob_sha256 is not None:
        body["blobSha256"] = record.blob_sha256
    elif record.text is not None:
        body["text"] = record.text
    return {
        "kind": "resource",
        "id": record.id,
        "version": record.version,
        "createdAt": iso(record.created_at),
        "updatedAt": iso(record.updated_at),
        "contentChangedAt": iso(record.content_changed_at),
        "resource": body,
    }


def _version_line(row: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "kind": "version",
        "resourceUri": row.resource_uri,
        "version": row.version,
        "uri": row.uri,
        "snapshot": row.snapshot,
    }
    if row.blob_sha256 is not None:
        line["blobSha256"] = row.blob_sha256
    elif row.text is not None:
        line["text"] = row.text
    line.update(changedBy=row.changed_by, changedAt=iso(row.changed_at))
    return line


async def backup_size(catalog: Catalog, tenant: Tenant) -> int:
    """How many rows a backup of the tenant writes (blob chunks aside): a progress bar's total."""
    from catalog.core.tenants import tenant_counts

    held = sum((await tenant_counts(catalog, tenant)).values())
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        versions = (
            await conn.execute(
                select(func.count())
                .select_from(resource_versions)
                .where(resource_versions.c.tenant_id == tenant.id)
            )
        ).scalar_one()
    return held + versions


async def write_backup(
    catalog: Catalog,
    tenant: Tenant,
    out: IO[bytes],
    *,
    on_progress: Callable[[str], None] = lambda kind: None,
) -> BackupCounts:
    """Write the tenant's backup to ``out`` (format 1, uncompressed: the caller chooses gzip)."""
    counts = BackupCounts()
    async for line in backup_lines(catalog, tenant, counts):
        out.write(encode_line(line))
        on_progress(line["kind"])
    return counts
