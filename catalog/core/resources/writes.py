"""The resource domain's write rules: create, upsert, patch and delete, one transaction each.

Every write runs in one transaction that changes the row, appends the new version to the history
and writes an audit row; the database's own triggers add the change-feed row and the NOTIFY. So a
change is either wholly there (content, version, audit, feed, event) or not at all.

The rules: content is at most one of text, a base64 blob or an uploaded blob's sha256, bounded by
``CATALOG_MAX_BLOB_BYTES`` either way; a directory has none; a URI is unique in its tenant (409); an
``If-Match`` precondition must name the current ETag (412); a body that changes nothing is not a
write (no version, no audit row, no event). The rows are written by the
writer's one statement (:mod:`catalog.core.resources.writer`); look-ups are the repository's.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core import blobs as blob_store
from catalog.core.audit import AuditEntry, record_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import Conflict, FieldError, InvalidInput, NotFound, PreconditionFailed, TooLarge
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.record import METADATA_FIELDS, ResourceRecord
from catalog.core.resources.writer import WRITTEN, Key, apply_rows, staged_row
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE, column_values
from catalog.core.schemas.resources import ResourceIn, ResourcePatch
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction

# -- content --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Content:
    """Resolved content for a write: which columns to set, and the size to record."""

    text: str | None
    blob_sha256: str | None
    size: int | None


NO_CONTENT = _Content(None, None, None)


def no_such_blob() -> InvalidInput:
    return InvalidInput(
        "no such blob in this tenant", errors=[FieldError("/blobSha256", "upload the bytes to /blobs first")]
    )


def text_size(text: str, limit: int) -> int:
    """The size of a text content in bytes of UTF-8; TooLarge above ``limit``."""
    size = len(text.encode())
    if size > limit:
        # One limit for content of either kind: text is content as much as a blob is.
        raise TooLarge(
            f"the text is larger than the limit of {limit} bytes (CATALOG_MAX_BLOB_BYTES)",
            errors=[FieldError("/text", f"{size} bytes of UTF-8; at most {limit}")],
        )
    return size


async def _resolve_content(
    catalog: Catalog,
    conn: AsyncConnection,
    tenant_id: int,
    body: ResourceIn | ResourcePatch,
    current: ResourceRecord | None = None,
) -> _Content | None:
    """The content the body names, or None when it names none."""
    if body.text is not None:
        size = text_size(body.text, catalog.settings.max_blob_bytes)
        return _Content(text=body.text, blob_sha256=None, size=size)
    if body.blob is not None:
        data = base64.b64decode(body.blob, validate=True)
        if current is not None and current.blob_sha256 == hashlib.sha256(data).hexdigest():
            return _Content(text=None, blob_sha256=current.blob_sha256, size=len(data))  # stored already
        stored = await blob_store.put_bytes(catalog, conn, tenant_id, data, body.mime_type)
        return _Content(text=None, blob_sha256=stored.sha256, size=stored.size)
    if body.blob_sha256 is not None:
        stored = await blob_store.find_blob(conn, tenant_id, body.blob_sha256)
        if stored is None:
            raise no_such_blob()
        return _Content(text=None, blob_sha256=stored.sha256, size=stored.size)
    return None


def check_directory(mime_type: str | None, text: str | None, blob_sha256: str | None) -> None:
    if mime_type == DIRECTORY_MIME_TYPE and (text is not None or blob_sha256 is not None):
        raise InvalidInput(
            "an inode/directory resource has no content",
            errors=[FieldError("/mimeType", "directory with content")],
        )


def check_precondition(current: ResourceRecord, if_match: str | None) -> None:
    if if_match is None:
        return
    candidates = {tag.strip() for tag in if_match.split(",")}
    if "*" in candidates:
        return
    weak = {tag[2:] if tag.startswith("W/") else tag for tag in candidates}
    if current.etag not in weak:
        raise PreconditionFailed(f"the resource is at {current.etag}, not {if_match}")


def _conflict(uri: str) -> Conflict:
    return Conflict(
        f"a resource with URI {uri!r} exists already", errors=[FieldError("/uri", "already in use")]
    )


# -- writing --------------------------------------------------------------------------------------


async def _insert_values(
    catalog: Catalog, conn: AsyncConnection, tenant: Tenant, body: ResourceIn
) -> dict[str, Any]:
    content = await _resolve_content(catalog, conn, tenant.id, body) or NO_CONTENT
    return {
        **column_values(body, METADATA_FIELDS),
        "text": content.text,
        "blob_sha256": content.blob_sha256,
        "size": content.size,
    }


async def _insert(
    catalog: Catalog, conn: AsyncConnection, principal: Principal, tenant: Tenant, body: ResourceIn
) -> ResourceRecord:
    row = staged_row(await _insert_values(catalog, conn, tenant, body))
    written = await apply_rows(conn, tenant.id, principal.label, [row], key=Key.NEW)
    if not written:
        raise _conflict(body.uri)
    return written[0]


async def update_row(
    catalog: Catalog,
    conn: AsyncConnection,
    principal: Principal,
    tenant: Tenant,
    current: ResourceRecord,
    body: ResourceIn | ResourcePatch,
    fields: Sequence[str],
    *,
    replace_content: bool,
    action: str = "resource.update",
    detail: dict[str, Any] | None = None,
) -> ResourceRecord:
    values = column_values(body, fields)
    content = await _resolve_content(catalog, conn, tenant.id, body, current)
    if content is None and replace_content:
        content = NO_CONTENT
    if content is not None:
        values.update(text=content.text, blob_sha256=content.blob_sha256, size=content.size)
    check_directory(
        values.get("mime_type", current.mime_type),
        values.get("text", current.text),
        values.get("blob_sha256", current.blob_sha256),
    )
    if (
        "uri" in values
        and values["uri"] != current.uri
        and await rows.uri_taken(conn, tenant.id, values["uri"])
    ):
        raise _conflict(values["uri"])
    # The whole row as it becomes: the writer's no-op test compares it with the current one.
    row = staged_row({name: values.get(name, getattr(current, name)) for name in WRITTEN}, replaces=current)
    written = await apply_rows(
        conn, tenant.id, principal.label, [row], key=Key.ID, action=action, detail=detail
    )
    return written[0] if written else current


async def create_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, body: ResourceIn
) -> ResourceRecord:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        return await _insert(catalog, conn, principal, tenant, body)


async def upsert_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, body: ResourceIn, *, if_match: str | None = None
) -> tuple[ResourceRecord, bool]:
    """Create or wholly replace the resource at ``body.uri``; returns it and whether it was created."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, uri=body.uri)
        if current is None:
            if if_match not in (None, "*"):
                raise PreconditionFailed("the resource does not exist")
            try:
                return await _insert(catalog, conn, principal, tenant, body), True
            except Conflict:
                # A concurrent creator won the race for the URI (the insert waited for it and did
                # nothing): replace what it wrote, as the later writer.
                current = await rows.lock(conn, tenant.id, uri=body.uri)
                assert current is not None
        check_precondition(current, if_match)
        record = await update_row(
            catalog, conn, principal, tenant, current, body, METADATA_FIELDS, replace_content=True
        )
        return record, False


async def upsert_many(
    catalog: Catalog, principal: Principal, tenant: Tenant, bodies: Sequence[ResourceIn]
) -> tuple[int, int, int]:
    """Upsert a batch in one transaction (for imports); returns (created, updated, unchanged).

    The same writes as :func:`upsert_resource` body by body, in fewer round trips: one query locks
    the batch's existing rows, one statement of the writer inserts the new URIs (with their
    versions and audit rows), and only bodies that change an existing row are written one by one.
    Several bodies for one URI apply in order, the last one winning.
    """
    created = updated = unchanged = 0
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock_uris(conn, tenant.id, [body.uri for body in bodies])
        fresh: dict[str, ResourceIn] = {}
        later: list[ResourceIn] = []
        for body in bodies:
            if body.uri in current or body.uri in fresh:
                later.append(body)
            else:
                fresh[body.uri] = body
        pending = list(fresh.values())
        staged = [staged_row(await _insert_values(catalog, conn, tenant, body)) for body in pending]
        inserted = await apply_rows(conn, tenant.id, principal.label, staged, key=Key.NEW)
        created += len(inserted)
        current.update((record.uri, record) for record in inserted)
        # A URI a concurrent writer created since the lock query: replace it, before later bodies.
        raced = [body for body in pending if body.uri not in current]
        for body in [*raced, *later]:
            before = current.get(body.uri) or await rows.lock(conn, tenant.id, uri=body.uri)
            assert before is not None
            after = await update_row(
                catalog, conn, principal, tenant, before, body, METADATA_FIELDS, replace_content=True
            )
            current[body.uri] = after
            if after.version == before.version:
                unchanged += 1
            else:
                updated += 1
    return created, updated, unchanged


async def patch_resource(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    resource_id: int,
    body: ResourcePatch,
    *,
    if_match: str | None = None,
) -> ResourceRecord:
    fields = [name for name in METADATA_FIELDS if name in body.model_fields_set]
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        check_precondition(current, if_match)
        return await update_row(
            catalog, conn, principal, tenant, current, body, fields, replace_content=False
        )


async def delete_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, resource_id: int, *, if_match: str | None = None
) -> None:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        check_precondition(current, if_match)
        await delete_locked(conn, principal, tenant, current)


async def delete_locked(
    conn: AsyncConnection, principal: Principal, tenant: Tenant, current: ResourceRecord
) -> None:
    """Delete a row locked in this transaction, and audit it (one deletion, alone or in a batch)."""
    await rows.delete_row(conn, tenant.id, current.id)
    await record_audit(
        conn,
        tenant.id,
        principal,
        AuditEntry(
            action="resource.delete",
            target_kind="resource",
            target_id=current.id,
            uri=current.uri,
            before=current.digest(),
        ),
    )
