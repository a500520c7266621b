"""Resources: the one way to write them, and the one way to list them.

Every write runs in one transaction that changes the row, appends the new version to the history
and writes an audit row; the database's own triggers add the change-feed row and the NOTIFY. So a
change is either wholly there (content, version, audit, feed, event) or not at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, func, insert, literal, select, update
from sqlalchemy import delete as sql_delete
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core import blobs as blob_store
from catalog.core.audit import record_audit
from catalog.core.cursors import decode_cursor, encode_cursor
from catalog.core.errors import Conflict, FieldError, InvalidInput, NotFound, PreconditionFailed, TooLarge
from catalog.core.principal import Principal
from catalog.core.schemas import DIRECTORY_MIME_TYPE, ResourceIn, ResourceOut, ResourcePatch, column_values
from catalog.core.service import Catalog
from catalog.core.tenants import Tenant
from catalog.core.uris import uri_prefix_upper_bound
from catalog.core.visibility import Visibility, load_visibility
from catalog.db.bulk import insert_rows
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import audit_log, resource_versions, resources

MAX_PAGE = 1000
_ROWS_PER_STATEMENT = 1000  # keeps a bulk statement under PostgreSQL's 32767 parameters
DEFAULT_PAGE = 100

# Must stay identical to the expression of index ix_resources_search_trgm (migration 0001).
RESOURCE_SEARCH_TEXT = func.lower(
    resources.c.uri
    + literal(" ")
    + resources.c.name
    + literal(" ")
    + func.coalesce(resources.c.title, "")
    + literal(" ")
    + func.coalesce(resources.c.description, "")
)

# Columns a listing reads: never the content.
LISTING_COLUMNS = tuple(c for c in resources.c if c.name != "text")

METADATA_FIELDS = (
    "uri",
    "name",
    "title",
    "description",
    "mime_type",
    "icons",
    "annotations",
    "tags",
    "consent_message",
    "meta",
)


@dataclass(frozen=True)
class ResourceRecord:
    id: int
    tenant_id: int
    uri: str
    name: str
    title: str | None
    description: str | None
    mime_type: str | None
    size: int | None
    icons: list[dict[str, Any]] | None
    annotations: dict[str, Any] | None
    tags: tuple[str, ...]
    consent_message: str | None
    meta: dict[str, Any] | None
    blob_sha256: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    content_changed_at: datetime
    text: str | None = field(default=None, repr=False)

    @property
    def etag(self) -> str:
        return f'"{self.id}.{self.version}"'

    @property
    def is_directory(self) -> bool:
        return self.mime_type == DIRECTORY_MIME_TYPE

    def effective_annotations(self) -> dict[str, Any]:
        """Annotations as served: ``lastModified`` defaults to the last content change."""
        annotations = dict(self.annotations or {})
        annotations.setdefault("lastModified", _iso(self.content_changed_at))
        return annotations

    def snapshot(self) -> dict[str, Any]:
        """Metadata in admin-API form (camelCase), as kept in the version history."""
        data = {
            "uri": self.uri,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "mimeType": self.mime_type,
            "size": self.size,
            "icons": self.icons,
            "annotations": self.annotations,
            "tags": list(self.tags),
            "consentMessage": self.consent_message,
            "_meta": self.meta,
        }
        return {k: v for k, v in data.items() if v is not None}

    def to_out(self, *, include_content: bool = False, blob: bytes | None = None) -> ResourceOut:
        import base64

        out = ResourceOut.model_validate(
            {
                **self.snapshot(),
                "annotations": self.effective_annotations(),
                "id": self.id,
                "version": self.version,
                "createdAt": self.created_at,
                "updatedAt": self.updated_at,
                "blobSha256": self.blob_sha256,
            }
        )
        if include_content:
            out.text = self.text
            if blob is not None:
                out.blob = base64.b64encode(blob).decode()
        return out


def _iso(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def record_from_row(row: Row[Any]) -> ResourceRecord:
    mapping = row._mapping
    return ResourceRecord(
        id=mapping["id"],
        tenant_id=mapping["tenant_id"],
        uri=mapping["uri"],
        name=mapping["name"],
        title=mapping["title"],
        description=mapping["description"],
        mime_type=mapping["mime_type"],
        size=mapping["size"],
        icons=mapping["icons"],
        annotations=mapping["annotations"],
        tags=tuple(mapping["tags"] or ()),
        consent_message=mapping["consent_message"],
        meta=mapping["meta"],
        blob_sha256=mapping["blob_sha256"],
        version=mapping["version"],
        created_at=mapping["created_at"],
        updated_at=mapping["updated_at"],
        content_changed_at=mapping["content_changed_at"],
        text=mapping.get("text"),
    )


def _digest(record: ResourceRecord | None) -> str | None:
    if record is None:
        return None
    content = hashlib.sha256((record.text or "").encode()).hexdigest() if record.text is not None else None
    body = json.dumps(
        {"meta": record.snapshot(), "text": content, "blob": record.blob_sha256},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(body.encode()).hexdigest()


# -- writing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Content:
    """Resolved content for a write: which columns to set, and the size to record."""

    text: str | None
    blob_sha256: str | None
    size: int | None


async def _resolve_content(
    catalog: Catalog,
    conn: AsyncConnection,
    tenant_id: int,
    body: ResourceIn | ResourcePatch,
    current: ResourceRecord | None = None,
) -> _Content | None:
    """The content the body names, or None when it names none."""
    if body.text is not None:
        size = len(body.text.encode())
        limit = catalog.settings.max_blob_bytes
        if size > limit:
            # One limit for content of either kind: text is content as much as a blob is.
            raise TooLarge(
                f"the text is larger than the limit of {limit} bytes (CATALOG_MAX_BLOB_BYTES)",
                errors=[FieldError("/text", f"{size} bytes of UTF-8; at most {limit}")],
            )
        return _Content(text=body.text, blob_sha256=None, size=size)
    if body.blob is not None:
        data = body.blob_bytes() if isinstance(body, ResourceIn) else _b64decode(body.blob)
        if current is not None and current.blob_sha256 == hashlib.sha256(data).hexdigest():
            return _Content(text=None, blob_sha256=current.blob_sha256, size=len(data))  # stored already
        stored = await blob_store.put_bytes(catalog, conn, tenant_id, data, body.mime_type)
        return _Content(text=None, blob_sha256=stored.sha256, size=stored.size)
    if body.blob_sha256 is not None:
        stored = await blob_store.find_blob(conn, tenant_id, body.blob_sha256)
        if stored is None:
            raise InvalidInput(
                "no such blob in this tenant",
                errors=[FieldError("/blobSha256", "upload the bytes to /blobs first")],
            )
        return _Content(text=None, blob_sha256=stored.sha256, size=stored.size)
    return None


def _b64decode(value: str) -> bytes:
    import base64

    return base64.b64decode(value, validate=True)


def _version_row(record: ResourceRecord, principal: Principal) -> dict[str, Any]:
    return {
        "tenant_id": record.tenant_id,
        "resource_id": record.id,
        "version": record.version,
        "uri": record.uri,
        "snapshot": record.snapshot(),
        "text": record.text,
        "blob_sha256": record.blob_sha256,
        "changed_by": principal.label,
    }


async def _append_version(conn: AsyncConnection, record: ResourceRecord, principal: Principal) -> None:
    await conn.execute(insert(resource_versions).values(_version_row(record, principal)))


async def _lock(
    conn: AsyncConnection, tenant_id: int, *, resource_id: int | None = None, uri: str | None = None
):
    query = select(resources).where(resources.c.tenant_id == tenant_id).with_for_update()
    query = (
        query.where(resources.c.id == resource_id)
        if resource_id is not None
        else query.where(resources.c.uri == uri)
    )
    row = (await conn.execute(query)).one_or_none()
    return record_from_row(row) if row else None


def _conflict(uri: str) -> Conflict:
    return Conflict(
        f"a resource with URI {uri!r} exists already", errors=[FieldError("/uri", "already in use")]
    )


async def _insert(
    catalog: Catalog, conn: AsyncConnection, principal: Principal, tenant: Tenant, body: ResourceIn
) -> ResourceRecord:
    statement = (
        pg_insert(resources)
        .values(await _insert_values(catalog, conn, tenant, body))
        .on_conflict_do_nothing(index_elements=["tenant_id", "uri"])
        .returning(*resources.c)
    )
    row = (await conn.execute(statement)).one_or_none()
    if row is None:
        raise _conflict(body.uri)
    record = record_from_row(row)
    await _created(conn, principal, tenant, [record])
    return record


async def _insert_values(
    catalog: Catalog, conn: AsyncConnection, tenant: Tenant, body: ResourceIn
) -> dict[str, Any]:
    content = await _resolve_content(catalog, conn, tenant.id, body) or _Content(None, None, None)
    return {
        "tenant_id": tenant.id,
        **column_values(body, METADATA_FIELDS),
        "text": content.text,
        "blob_sha256": content.blob_sha256,
        "size": content.size,
    }


async def _created(
    conn: AsyncConnection, principal: Principal, tenant: Tenant, records: Sequence[ResourceRecord]
) -> None:
    """The first version and the audit row (as ``record_audit`` writes it) of new resources."""
    if not records:
        return
    versions = [_version_row(r, principal) for r in records]
    audits = [
        {
            "tenant_id": tenant.id,
            "principal": principal.label,
            "action": "resource.create",
            "target_kind": "resource",
            "target_id": r.id,
            "uri": r.uri,
            "before_digest": None,
            "after_digest": _digest(r),
            "detail": None,
        }
        for r in records
    ]
    await insert_rows(conn, resource_versions, versions)
    await insert_rows(conn, audit_log, audits)


async def _update(
    catalog: Catalog,
    conn: AsyncConnection,
    principal: Principal,
    tenant: Tenant,
    current: ResourceRecord,
    body: ResourceIn | ResourcePatch,
    fields: Sequence[str],
    *,
    replace_content: bool,
) -> ResourceRecord:
    values = column_values(body, fields)
    content = await _resolve_content(catalog, conn, tenant.id, body, current)
    if content is None and replace_content:
        content = _Content(None, None, None)
    content_changed = content is not None and (content.text, content.blob_sha256) != (
        current.text,
        current.blob_sha256,
    )
    if content is not None:
        values.update(text=content.text, blob_sha256=content.blob_sha256, size=content.size)
    new_mime = values.get("mime_type", current.mime_type)
    has_content = (values.get("text", current.text) is not None) or (
        values.get("blob_sha256", current.blob_sha256) is not None
    )
    if new_mime == DIRECTORY_MIME_TYPE and has_content:
        raise InvalidInput(
            "an inode/directory resource has no content",
            errors=[FieldError("/mimeType", "directory with content")],
        )
    unchanged = all(_same(getattr(current, k), v) for k, v in values.items())
    if unchanged:
        return current
    if "uri" in values and values["uri"] != current.uri:
        taken = await conn.execute(
            select(resources.c.id).where(resources.c.tenant_id == tenant.id, resources.c.uri == values["uri"])
        )
        if taken.first() is not None:
            raise _conflict(values["uri"])
    statement = (
        update(resources)
        .where(resources.c.tenant_id == tenant.id, resources.c.id == current.id)
        .values(
            **values,
            version=resources.c.version + 1,
            updated_at=func.now(),
            **({"content_changed_at": func.now()} if content_changed else {}),
        )
        .returning(*resources.c)
    )
    record = record_from_row((await conn.execute(statement)).one())
    await _append_version(conn, record, principal)
    await record_audit(
        conn,
        tenant.id,
        principal,
        "resource.update",
        "resource",
        record.id,
        record.uri,
        _digest(current),
        _digest(record),
    )
    return record


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, tuple):
        old = list(old)
    return old == new


def _check_precondition(current: ResourceRecord, if_match: str | None) -> None:
    if if_match is None:
        return
    candidates = {tag.strip() for tag in if_match.split(",")}
    if "*" in candidates:
        return
    weak = {tag[2:] if tag.startswith("W/") else tag for tag in candidates}
    if current.etag not in weak:
        raise PreconditionFailed(f"the resource is at {current.etag}, not {if_match}")


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
        return await _upsert(catalog, conn, principal, tenant, body, if_match=if_match)


async def _upsert(
    catalog: Catalog,
    conn: AsyncConnection,
    principal: Principal,
    tenant: Tenant,
    body: ResourceIn,
    *,
    if_match: str | None = None,
) -> tuple[ResourceRecord, bool]:
    current = await _lock(conn, tenant.id, uri=body.uri)
    if current is None:
        if if_match not in (None, "*"):
            raise PreconditionFailed("the resource does not exist")
        try:
            return await _insert(catalog, conn, principal, tenant, body), True
        except Conflict:
            # A concurrent creator won the race for the URI (the insert waited for it and did
            # nothing): replace what it wrote, as the later writer.
            current = await _lock(conn, tenant.id, uri=body.uri)
            assert current is not None
    _check_precondition(current, if_match)
    record = await _update(
        catalog, conn, principal, tenant, current, body, METADATA_FIELDS, replace_content=True
    )
    return record, False


async def upsert_many(
    catalog: Catalog, principal: Principal, tenant: Tenant, bodies: Sequence[ResourceIn]
) -> tuple[int, int, int]:
    """Upsert a batch in one transaction (for imports); returns (created, updated, unchanged).

    The same writes as :func:`upsert_resource` body by body, in fewer round trips: one query locks
    the batch's existing rows, the new URIs are inserted (with their versions and audit rows) a few
    statements for the whole batch, and only bodies that change an existing row are written one by
    one. Several bodies for one URI apply in order, the last one winning.
    """
    created = updated = unchanged = 0
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        uris = sorted({body.uri for body in bodies})
        current: dict[str, ResourceRecord] = {}
        for start in range(0, len(uris), _ROWS_PER_STATEMENT):
            rows = await conn.execute(
                select(resources)
                .where(
                    resources.c.tenant_id == tenant.id,
                    resources.c.uri.in_(uris[start : start + _ROWS_PER_STATEMENT]),
                )
                .order_by(resources.c.uri)
                .with_for_update()
            )
            current.update((row.uri, record_from_row(row)) for row in rows)
        fresh: dict[str, ResourceIn] = {}
        later: list[ResourceIn] = []
        for body in bodies:
            if body.uri in current or body.uri in fresh:
                later.append(body)
            else:
                fresh[body.uri] = body
        inserted: list[ResourceRecord] = []
        pending = list(fresh.values())
        if pending:
            values = [await _insert_values(catalog, conn, tenant, body) for body in pending]
            rows = await insert_rows(
                conn, resources, values, skip_conflicts_on=("tenant_id", "uri"), returning=True
            )
            inserted.extend(record_from_row(row) for row in rows)
        await _created(conn, principal, tenant, inserted)
        created += len(inserted)
        current.update((record.uri, record) for record in inserted)
        # A URI a concurrent writer created since the lock query: replace it, before later bodies.
        raced = [body for body in pending if body.uri not in current]
        for body in [*raced, *later]:
            before = current.get(body.uri) or await _lock(conn, tenant.id, uri=body.uri)
            assert before is not None
            after = await _update(
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
        current = await _lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        _check_precondition(current, if_match)
        return await _update(catalog, conn, principal, tenant, current, body, fields, replace_content=False)


async def delete_resource(
    catalog: Catalog, principal: Principal, tenant: Tenant, resource_id: int, *, if_match: str | None = None
) -> None:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await _lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        _check_precondition(current, if_match)
        await conn.execute(
            sql_delete(resources).where(resources.c.tenant_id == tenant.id, resources.c.id == resource_id)
        )
        await record_audit(
            conn,
            tenant.id,
            principal,
            "resource.delete",
            "resource",
            current.id,
            current.uri,
            _digest(current),
            None,
        )


# -- reading --------------------------------------------------------------------------------------


async def get_resource(
    catalog: Catalog, tenant: Tenant, resource_id: int, *, include_content: bool = False
) -> tuple[ResourceRecord, bytes | None]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        columns = list(resources.c) if include_content else list(LISTING_COLUMNS)
        row = (
            await conn.execute(
                select(*columns).where(resources.c.tenant_id == tenant.id, resources.c.id == resource_id)
            )
        ).one_or_none()
        if row is None:
            raise NotFound(f"no resource {resource_id}")
        record = record_from_row(row)
        blob = None
        if include_content and record.blob_sha256:
            blob = await blob_store.read_bytes(conn, tenant.id, record.blob_sha256)
    return record, blob


@dataclass(frozen=True)
class ListingFilter:
    uri_prefix: str | None = None
    tag: str | None = None
    query: str | None = None

    @property
    def key(self) -> str:
        return json.dumps([self.uri_prefix, self.tag, self.query])


def listing_clause(visibility: Visibility, filters: ListingFilter = ListingFilter()):
    """The rows a listing may show: the visibility rule, then the caller's filters."""
    clauses = [visibility.resources_clause(resources)]
    if filters.uri_prefix:
        clauses.append(resources.c.uri >= filters.uri_prefix)
        upper = uri_prefix_upper_bound(filters.uri_prefix)
        if upper is not None:
            clauses.append(resources.c.uri < upper)
    if filters.tag:
        clauses.append(resources.c.tags.contains([filters.tag]))
    if filters.query:
        needle = filters.query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        clauses.append(RESOURCE_SEARCH_TEXT.like(f"%{needle}%", escape="\\"))
    return and_(*clauses)


async def list_page(
    catalog: Catalog,
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    listing: str,
    cursor: str | None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = ListingFilter(),
) -> tuple[list[ResourceRecord], str | None]:
    """One keyset page of visible resources in URI byte order, and the cursor to the next page."""
    bound = f"{listing}:{filters.key}"
    after: str | None = None
    if cursor:
        position = decode_cursor(
            catalog.signing_key, cursor, listing=bound, fingerprint=visibility.fingerprint
        )
        after = str(position.after)
    if visibility.nothing:
        return [], None
    page_uris = (
        visibility.sparse_page_uris(after=after, limit=limit + 1) if filters == ListingFilter() else None
    )
    if page_uris is not None:
        query = select(*LISTING_COLUMNS).where(
            resources.c.tenant_id == visibility.tenant_id, resources.c.uri.in_(page_uris)
        )
    else:
        query = select(*LISTING_COLUMNS).where(listing_clause(visibility, filters))
        if after is not None:
            query = query.where(resources.c.uri > after)
    rows = (await conn.execute(query.order_by(resources.c.uri).limit(limit + 1))).all()
    records = [record_from_row(row) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = cursor_after(catalog, visibility, records[-1].uri, listing=listing, filters=filters)
    return records, next_cursor


def cursor_after(
    catalog: Catalog,
    visibility: Visibility,
    uri: str,
    *,
    listing: str,
    filters: ListingFilter = ListingFilter(),
) -> str:
    """The cursor of the page that starts after ``uri`` in this listing, for this caller."""
    return encode_cursor(
        catalog.signing_key, after=uri, listing=f"{listing}:{filters.key}", fingerprint=visibility.fingerprint
    )


async def list_resources(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    listing: str,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = ListingFilter(),
) -> tuple[list[ResourceRecord], str | None]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, principal, tenant.id)
        return await list_page(
            catalog, conn, visibility, listing=listing, cursor=cursor, limit=limit, filters=filters
        )


async def list_versions(catalog: Catalog, tenant: Tenant, resource_id: int) -> list[Row[Any]]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        exists = await conn.execute(
            select(resources.c.id).where(resources.c.tenant_id == tenant.id, resources.c.id == resource_id)
        )
        if exists.first() is None:
            raise NotFound(f"no resource {resource_id}")
        return list(
            (
                await conn.execute(
                    select(resource_versions)
                    .where(
                        resource_versions.c.tenant_id == tenant.id,
                        resource_versions.c.resource_id == resource_id,
                    )
                    .order_by(resource_versions.c.version.desc())
                )
            ).all()
        )
