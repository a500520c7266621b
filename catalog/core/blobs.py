"""Blobs: binary content, content-addressed by sha256 per tenant, kept apart from resource rows.

Uploads are streamed: hashed and size-checked chunk by chunk into a spooled temporary file (memory
for small bodies, disk past 1 MiB), so ``CATALOG_MAX_BLOB_BYTES`` is enforced before anything is
stored and the body is held in memory once at most. Downloads read the bytes in chunks with
``substring()`` over uncompressed out-of-line storage, so they stream too.

These functions are the store's whole interface; an S3-compatible store can stand behind them.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.audit import AuditEntry, record_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import TooLarge
from catalog.core.principal import Principal
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import blobs

CHUNK = 256 * 1024
_SPOOL_IN_MEMORY = 1024 * 1024


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int
    mime_type: str | None


def too_large(limit: int) -> TooLarge:
    return TooLarge(f"the blob is larger than the limit of {limit} bytes (CATALOG_MAX_BLOB_BYTES)")


async def _insert(
    conn: AsyncConnection, tenant_id: int, digest: str, data: bytes, mime_type: str | None
) -> tuple[StoredBlob, bool]:
    """Store the bytes unless the tenant has them already; the blob, and whether it is new."""
    inserted = (
        await conn.execute(
            pg_insert(blobs)
            .values(tenant_id=tenant_id, sha256=digest, size=len(data), mime_type=mime_type, data=data)
            .on_conflict_do_nothing(index_elements=["tenant_id", "sha256"])
            .returning(blobs.c.sha256)
        )
    ).first()
    found = await find_blob(conn, tenant_id, digest)
    assert found is not None
    return found, inserted is not None


async def put_bytes(
    catalog: Catalog, conn: AsyncConnection, tenant_id: int, data: bytes, mime_type: str | None
) -> StoredBlob:
    """Store bytes already in memory (a base64 blob in a resource body), inside the caller's
    transaction. Not audited apart: the resource's own audit row covers its content (its digest
    names the blob)."""
    limit = catalog.settings.max_blob_bytes
    if len(data) > limit:
        raise too_large(limit)
    stored, _ = await _insert(conn, tenant_id, hashlib.sha256(data).hexdigest(), data, mime_type)
    return stored


async def put_stream(
    catalog: Catalog,
    tenant_id: int,
    chunks: AsyncIterable[bytes],
    mime_type: str | None,
    *,
    by: Principal,
) -> tuple[StoredBlob, bool]:
    """Store an uploaded body, audited as ``blob.create`` by ``by``; returns the blob and whether it
    was new. Nothing is stored on error."""
    limit = catalog.settings.max_blob_bytes
    digest = hashlib.sha256()
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY) as spool:
        async for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            digest.update(chunk)
            spool.write(chunk)
        sha = digest.hexdigest()
        async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
            existing = await find_blob(conn, tenant_id, sha)
            if existing is not None:
                return existing, False
            spool.seek(0)
            stored, created = await _insert(conn, tenant_id, sha, spool.read(), mime_type)
            if created:
                # An upload is a write of its own: audited (its digest is its sha256).
                await record_audit(
                    conn,
                    tenant_id,
                    by,
                    AuditEntry(
                        action="blob.create",
                        target_kind="blob",
                        after=stored.sha256,
                        detail={"sha256": stored.sha256, "size": stored.size, "mimeType": stored.mime_type},
                    ),
                )
            else:
                return stored, False  # a concurrent upload of the same bytes won
    return stored, True


async def find_blob(conn: AsyncConnection, tenant_id: int, sha256: str) -> StoredBlob | None:
    row = (
        await conn.execute(
            select(blobs.c.sha256, blobs.c.size, blobs.c.mime_type).where(
                blobs.c.tenant_id == tenant_id, blobs.c.sha256 == sha256
            )
        )
    ).one_or_none()
    return StoredBlob(row.sha256, row.size, row.mime_type) if row else None


async def read_bytes(conn: AsyncConnection, tenant_id: int, sha256: str) -> bytes:
    data = (
        await conn.execute(
            select(blobs.c.data).where(blobs.c.tenant_id == tenant_id, blobs.c.sha256 == sha256)
        )
    ).scalar_one()
    return bytes(data)


async def stream_bytes(catalog: Catalog, tenant_id: int, blob: StoredBlob) -> AsyncIterator[bytes]:
    """The blob's bytes in chunks, each read on its own (short) transaction."""
    for offset in range(0, blob.size, CHUNK):
        async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
            chunk = (
                await conn.execute(
                    select(func.substring(blobs.c.data, offset + 1, CHUNK)).where(
                        blobs.c.tenant_id == tenant_id, blobs.c.sha256 == blob.sha256
                    )
                )
            ).scalar_one()
        yield bytes(chunk)


async def get_blob(catalog: Catalog, tenant_id: int, sha256: str) -> StoredBlob | None:
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        return await find_blob(conn, tenant_id, sha256)
