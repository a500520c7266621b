"""Backup and restore of a whole tenant: one self-describing stream of JSON lines (gzip on disk).

**What a backup holds.** Everything of the tenant: blobs (their bytes, in base64 chunks), templates,
grants, tokens (metadata only: never a hash, so nothing in a backup authenticates), and resources in
their current state followed by their whole version history (content of every version included).
Tags live in the resource, template and grant lines (the tag index is rebuilt by the database). Not
held: the audit log and the change feed (the restored tenant's audit log starts with one
``tenant.restore`` entry; its feed starts empty and clients resynchronise as after any gap).

**Format 1** (one JSON object a line, in this order; ``catalog backup`` gzips it):

- ``{"kind": "catalog-backup", "format": 1, "createdAt", "schema", "tenant": {slug, name, createdAt}}``
- per blob, by sha256: ``{"kind": "blob", "sha256", "size", "mimeType", "createdAt"}`` then
  ``ceil(size / 256 KiB)`` lines ``{"kind": "chunk", "data": <base64>}``
- ``{"kind": "template", "id", "version", "createdAt", "updatedAt", "template": <admin-API body>}``
- ``{"kind": "grant", "id", "createdAt", "grant": <admin-API body>}``
- ``{"kind": "token", "id", "createdAt", "revokedAt", "token": {name, scopes, admin, expiresAt}}``
- ``{"kind": "resource", "id", "version", "createdAt", "updatedAt", "contentChangedAt",
  "resource": <admin-API body with text or blobSha256>}``, by URI
- ``{"kind": "version", "resourceUri", "version", "uri", "snapshot", "text" | "blobSha256",
  "changedBy", "changedAt"}``, by the resource's URI, then version
- ``{"kind": "end", "counts": {...}}``: without it (a truncated file) a restore fails.

Why lines and not an archive: both ends stream without ever seeking or knowing a size up front
(a tar member needs its size in its header, so a JSONL member would be spooled to disk first), a
reader needs nothing but a line splitter, every line is checked by the admin API's own models on
the way back, and ``zcat FILE | jq`` shows it. Base64 costs a third more for blobs, which gzip
partly wins back; blob bytes are checked against their sha256 on restore.

**Memory.** Blobs are read in 256 KiB chunks; everything else streams from server-side cursors a
few rows at a time, inside one read-only REPEATABLE READ transaction (a consistent snapshot).
Restore writes in batches bounded by count and bytes. Neither side ever holds more than a batch,
or one blob (a blob is stored in one statement), whatever the size of the tenant. A restore reads
each line with a bounded ``readline`` (:func:`catalog.core.jsonlines.max_line_bytes`) and scans its
nesting before parsing it, so a hostile file (one endless line in a gzip bomb, deep nesting, a
number of thousands of digits) is refused by line number at a bounded cost, and every line is
validated by the admin API's models (a version's snapshot as a resource body) before it is written.

**Restore** creates the new tenant and writes rows as they were -- ids are new; versions,
timestamps, history (``changedBy`` as recorded) are kept -- through batched inserts of its own:
a restore reproduces history instead of making new history, so it does not go through the
upsert path. The database's triggers still write the change feed and the tag index. Tokens come
back revoked (at restore time, or when they were revoked) with a fresh random hash that no one is
ever shown: the inventory of who had access, none of the access. On any error the half-restored
tenant is deleted again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import tempfile
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Annotated, Any

from pydantic import Field, ValidationError, model_validator
from sqlalchemy import bindparam, func, insert, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import DateTime, Integer, Text

from catalog.core.audit import AuditEntry, record_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import CatalogError, InvalidInput
from catalog.core.jsonlines import BadJson, max_line_bytes, parse_json, read_line, too_long
from catalog.core.principal import Principal
from catalog.core.resources import METADATA_FIELDS as RESOURCE_FIELDS
from catalog.core.resources import record_from_row
from catalog.core.resources.service import text_size
from catalog.core.schemas.base import AwareDatetime, MimeType, Model, ShortText, Uri, column_values
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceFields, ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.templates import METADATA_FIELDS as TEMPLATE_FIELDS
from catalog.core.templates import template_from_row
from catalog.core.tenants import Tenant, create_tenant, delete_tenant
from catalog.core.tokens import generate_token, hash_token
from catalog.core.uri_templates.parsing import InvalidTemplate, parse_template
from catalog.db.engine import TenantScope, bind_scope, transaction
from catalog.db.models import blobs, grants, resource_versions, resources, templates, tokens

FORMAT = 1
CHUNK = 256 * 1024  # blob bytes per chunk line (before base64)
STREAM_ROWS = 50  # rows a server-side cursor fetches at once (a row may hold a large text)
BLOB_PAGE = 1000
BATCH_ROWS = 500  # rows restored per transaction ...
BATCH_BYTES = 8 * 1024 * 1024  # ... or fewer, when their content reaches this size
SECTIONS = ("blob", "template", "grant", "token", "resource", "version")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class BackupCounts:
    blobs: int = 0
    blob_bytes: int = 0
    templates: int = 0
    grants: int = 0
    tokens: int = 0
    resources: int = 0
    versions: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "blobs": self.blobs,
            "blobBytes": self.blob_bytes,
            "templates": self.templates,
            "grants": self.grants,
            "tokens": self.tokens,
            "resources": self.resources,
            "versions": self.versions,
        }

    def __str__(self) -> str:
        return (
            f"{self.resources} resources ({self.versions} versions), {self.blobs} blobs"
            f" ({self.blob_bytes} bytes), {self.templates} templates, {self.grants} grants,"
            f" {self.tokens} tokens"
        )


# -- writing a backup -------------------------------------------------------------------------------


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
                "createdAt": _iso(datetime.now(UTC)),
                "schema": head_revision(),
                "tenant": {"slug": tenant.slug, "name": tenant.name, "createdAt": _iso(tenant.created_at)},
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
                "createdAt": _iso(blob.created_at),
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
        "createdAt": _iso(record.created_at),
        "updatedAt": _iso(record.updated_at),
        "template": body,
    }


def _grant_line(row: Any) -> dict[str, Any]:
    selector = {"uri": row.uri, "uriPrefix": row.uri_prefix, "tag": row.tag}
    body = {"scope": row.scope, **{k: v for k, v in selector.items() if v is not None}}
    return {"kind": "grant", "id": row.id, "createdAt": _iso(row.created_at), "grant": body}


def _token_line(row: Any) -> dict[str, Any]:
    # Never the hash: a backup must not carry anything that authenticates.
    body = {
        "name": row.name,
        "scopes": list(row.scopes),
        "admin": row.is_admin,
        "expiresAt": _iso(row.expires_at),
    }
    return {
        "kind": "token",
        "id": row.id,
        "createdAt": _iso(row.created_at),
        "revokedAt": _iso(row.revoked_at),
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
        "createdAt": _iso(record.created_at),
        "updatedAt": _iso(record.updated_at),
        "contentChangedAt": _iso(record.content_changed_at),
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
    line.update(changedBy=row.changed_by, changedAt=_iso(row.changed_at))
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


def encode_line(line: dict[str, Any]) -> bytes:
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


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


# -- reading one back ------------------------------------------------------------------------------


class BadBackup(InvalidInput):
    """The file is not a catalog backup this version can read, or it is damaged."""


class _Damaged(BadBackup):
    """The bytes cannot be read back (a corrupt or truncated gzip)."""


# Numbers as the columns hold them (integer versions, bigint ids): a larger one is refused by the
# line's model, not by PostgreSQL in the middle of a restore.
_Version = Annotated[int, Field(ge=1, le=2**31 - 1)]
_RowId = Annotated[int, Field(ge=1, le=2**63 - 1)]
_Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _HeaderTenant(Model):
    slug: Annotated[str, Field(max_length=63)] | None = None
    name: ShortText | None = None
    created_at: AwareDatetime | None = None


class _Header(Model):
    format: int
    created_at: AwareDatetime | None = None
    schema_revision: Annotated[str, Field(max_length=64)] | None = Field(default=None, alias="schema")
    tenant: _HeaderTenant = Field(default_factory=_HeaderTenant)


class _BlobLine(Model):
    sha256: _Sha256
    size: Annotated[int, Field(ge=0, le=2**63 - 1)]
    mime_type: MimeType | None = None
    created_at: AwareDatetime


class _TemplateLine(Model):
    id: _RowId
    version: _Version
    created_at: AwareDatetime
    updated_at: AwareDatetime
    template: TemplateIn


class _GrantLine(Model):
    id: _RowId
    created_at: AwareDatetime
    grant: GrantIn


class _TokenLine(Model):
    id: _RowId
    created_at: AwareDatetime
    revoked_at: AwareDatetime | None = None
    token: TokenIn  # the admin API's own rules for what a token holds


class _ResourceLine(Model):
    id: _RowId
    version: _Version
    created_at: AwareDatetime
    updated_at: AwareDatetime
    content_changed_at: AwareDatetime
    resource: ResourceIn


class _VersionLine(Model):
    resource_uri: Uri
    version: _Version
    uri: Uri
    snapshot: dict[str, Any]
    text: str | None = None
    blob_sha256: _Sha256 | None = None
    changed_by: ShortText
    changed_at: AwareDatetime

    @model_validator(mode="after")
    def _snapshot(self) -> _VersionLine:
        """A version's metadata by the rules of a resource body (the history is what a write of
        it would have kept), naming the version's own URI; its size, when given, a size."""
        fields = {k: v for k, v in self.snapshot.items() if k != "size"}
        size = self.snapshot.get("size")
        if size is not None and (
            not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 2**63
        ):
            raise ValueError("snapshot/size must be a byte count")
        try:
            described = ResourceFields.model_validate(fields)
        except ValidationError as exc:
            from catalog.core.transfer import validation_reason

            raise ValueError(f"snapshot: {validation_reason(exc)}") from None
        if described.uri != self.uri:
            raise ValueError("snapshot/uri differs from the version's uri")
        if self.text is not None and self.blob_sha256 is not None:
            raise ValueError("give at most one of text, blobSha256")
        return self


@dataclass
class _Reader:
    """The lines of a backup stream, parsed, with where each came from (for error messages).

    A line is read with a bounded ``readline`` (``limit``): a line without end, in a decompression
    bomb, costs at most ``limit`` bytes before it is refused."""

    stream: IO[bytes]
    name: str
    limit: int
    number: int = 0
    pending: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any] | None:
        self.number += 1
        try:
            raw = read_line(self.stream, self.limit)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise _Damaged(f"{self.name}:{self.number}: the file is damaged ({exc})") from None
        if raw is None:
            raise self.bad(too_long(self.limit))
        if not raw:
            self.number -= 1
            return None
        try:
            line = parse_json(raw)
        except BadJson as exc:
            raise self.bad(f"not a JSON line ({exc})") from None
        if not isinstance(line, dict) or not isinstance(line.get("kind"), str):
            raise self.bad("a line must be a JSON object with a 'kind'")
        return line

    def peek(self) -> dict[str, Any] | None:
        if self.pending is None:
            self.pending = self._read()
        return self.pending

    def next(self) -> dict[str, Any] | None:
        line = self.peek()
        self.pending = None
        return line

    def bad(self, reason: str) -> BadBackup:
        return BadBackup(f"{self.name}:{self.number}: {reason}")

    def parse(self, model: type[Model], line: dict[str, Any]) -> Any:
        try:
            return model.model_validate({k: v for k, v in line.items() if k != "kind"})
        except ValidationError as exc:
            from catalog.core.transfer import validation_reason

            raise self.bad(f"invalid {line['kind']}: {validation_reason(exc)}") from None

    def text_fits(self, text: str | None, limit: int) -> None:
        """A text content within CATALOG_MAX_BLOB_BYTES, the limit of every write."""
        if text is not None:
            try:
                text_size(text, limit)
            except CatalogError as exc:
                raise self.bad(exc.one_line()) from None


@dataclass
class RestoreReport:
    tenant: Tenant
    counts: BackupCounts = field(default_factory=BackupCounts)
    source: dict[str, Any] = field(default_factory=dict)  # the backed-up tenant: slug, name, createdAt


async def restore_backup(
    catalog: Catalog,
    principal: Principal,
    slug: str,
    stream: IO[bytes],
    *,
    name: str = "<backup>",
    on_progress: Callable[[], None] = lambda: None,
) -> RestoreReport:
    """Rebuild the tenant of the backup in ``stream`` as a new tenant ``slug``.

    The header is checked before the tenant is created (a wrong file changes nothing); after that,
    any failure deletes the new tenant again, so there is never a half-restored one.
    """
    reader = _Reader(stream, name, max_line_bytes(catalog.settings.max_blob_bytes))
    try:
        line = reader.next()
    except _Damaged:
        raise
    except BadBackup:  # binary or other JSON: the same answer, this is no backup
        line = None
    if line is None or line.get("kind") != "catalog-backup":
        raise reader.bad("not a catalog backup (no catalog-backup header)")
    if line.get("format") != FORMAT:
        raise reader.bad(f"backup format {line.get('format')!r} is not one this catalog reads ({FORMAT})")
    header: _Header = reader.parse(_Header, line)
    source = header.tenant.dump()
    tenant = await create_tenant(catalog, slug, header.tenant.name, by=principal)
    report = RestoreReport(tenant, source=source)
    try:
        await _restore(catalog, tenant, reader, report.counts, on_progress)
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            detail = {
                "from": header.tenant.slug,
                "backupCreatedAt": _iso(header.created_at),
                **report.counts.as_json(),
            }
            entry = AuditEntry(
                action="tenant.restore", target_kind="tenant", target_id=tenant.id, detail=detail
            )
            await record_audit(conn, tenant.id, principal, entry)
    except BaseException:
        await delete_tenant(catalog, tenant.slug, by=principal)
        raise
    return report


async def _restore(
    catalog: Catalog, tenant: Tenant, reader: _Reader, counts: BackupCounts, on_progress: Callable[[], None]
) -> None:
    section = 0
    batch = _Batch()
    limit = catalog.settings.max_blob_bytes
    while True:
        line = reader.next()
        if line is None:
            raise reader.bad("the backup ends before its 'end' line: the file is truncated")
        kind = line["kind"]
        on_progress()
        if kind == "end":
            await batch.flush(catalog, tenant, counts)
            expected = line.get("counts")
            if expected != counts.as_json():
                raise reader.bad(f"the backup announces {expected} but holds {counts.as_json()}")
            if reader.peek() is not None:
                raise reader.bad("lines after the 'end' line")
            return
        if kind not in SECTIONS:
            raise reader.bad(f"unknown line kind {kind!r}")
        order = SECTIONS.index(kind)
        if order < section:
            raise reader.bad(f"a {kind} line after the {SECTIONS[section]} lines: out of order")
        if order > section:
            await batch.flush(catalog, tenant, counts)
            section = order
        if kind == "blob":
            await _restore_blob(catalog, tenant, reader, line, counts, on_progress)
        else:
            item = reader.parse(_MODELS[kind], line)
            reader.text_fits(item.resource.text if kind == "resource" else getattr(item, "text", None), limit)
            batch.add(kind, item)
            if batch.full:
                await batch.flush(catalog, tenant, counts)


_MODELS: dict[str, type[Model]] = {
    "template": _TemplateLine,
    "grant": _GrantLine,
    "token": _TokenLine,
    "resource": _ResourceLine,
    "version": _VersionLine,
}


async def _restore_blob(
    catalog: Catalog,
    tenant: Tenant,
    reader: _Reader,
    line: dict[str, Any],
    counts: BackupCounts,
    on_progress: Callable[[], None],
) -> None:
    blob: _BlobLine = reader.parse(_BlobLine, line)
    sha, size, mime, created_at = blob.sha256, blob.size, blob.mime_type, blob.created_at
    if size > catalog.settings.max_blob_bytes:
        raise reader.bad(f"invalid blob: {size} bytes, over the limit of CATALOG_MAX_BLOB_BYTES")
    digest = hashlib.sha256()
    with tempfile.SpooledTemporaryFile(max_size=CHUNK * 4) as spool:
        received = 0
        while received < size:
            chunk = reader.next()
            if chunk is None or chunk["kind"] != "chunk" or not isinstance(chunk.get("data"), str):
                raise reader.bad(f"blob {sha} ends after {received} of its {size} bytes")
            on_progress()
            try:
                data = base64.b64decode(chunk["data"], validate=True)
            except (binascii.Error, ValueError):
                raise reader.bad("a chunk's data is not base64") from None
            received += len(data)
            if received > size:  # more than announced: refused before it is held
                raise reader.bad(f"blob {sha}: the bytes do not match its size and sha256")
            digest.update(data)
            spool.write(data)
        if received != size or digest.hexdigest() != sha:
            raise reader.bad(f"blob {sha}: the bytes do not match its size and sha256")
        spool.seek(0)
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            await conn.execute(
                insert(blobs).values(
                    tenant_id=tenant.id,
                    sha256=sha,
                    size=size,
                    mime_type=mime,
                    data=spool.read(),
                    created_at=created_at,
                )
            )
    counts.blobs += 1
    counts.blob_bytes += size


@dataclass
class _Batch:
    kind: str | None = None
    items: list[Any] = field(default_factory=list)
    size: int = 0

    @property
    def full(self) -> bool:
        return len(self.items) >= BATCH_ROWS or self.size >= BATCH_BYTES

    def add(self, kind: str, item: Any) -> None:
        self.kind = kind
        self.items.append(item)
        content = getattr(getattr(item, "resource", item), "text", None)
        self.size += len(content) if isinstance(content, str) else 0

    async def flush(self, catalog: Catalog, tenant: Tenant, counts: BackupCounts) -> None:
        if not self.items:
            return
        kind, items = self.kind, self.items
        self.kind, self.items, self.size = None, [], 0
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            written = await _WRITERS[kind](conn, tenant, items)  # type: ignore[index]
        setattr(counts, f"{kind}s", getattr(counts, f"{kind}s") + written)


async def _write_templates(conn: AsyncConnection, tenant: Tenant, items: list[_TemplateLine]) -> int:
    rows = []
    for item in items:
        try:
            parsed = parse_template(item.template.uri_template)
        except InvalidTemplate as exc:
            raise BadBackup(f"template {item.template.uri_template!r}: {exc.reason}") from None
        rows.append(
            {
                "tenant_id": tenant.id,
                "uri_template": parsed.template,
                "literal_prefix": parsed.literal_prefix,
                **column_values(item.template, TEMPLATE_FIELDS),
                "version": item.version,
                "created_at": item.created_at,
                "updated_at": item.updated_at,
            }
        )
    await conn.execute(insert(templates), rows)
    return len(rows)


async def _write_grants(conn: AsyncConnection, tenant: Tenant, items: list[_GrantLine]) -> int:
    rows = [
        {
            "tenant_id": tenant.id,
            "scope": item.grant.scope,
            "uri": item.grant.uri,
            "uri_prefix": item.grant.uri_prefix,
            "tag": item.grant.tag,
            "created_at": item.created_at,
        }
        for item in items
    ]
    await conn.execute(insert(grants), rows)
    return len(rows)


async def _write_tokens(conn: AsyncConnection, tenant: Tenant, items: list[_TokenLine]) -> int:
    now = datetime.now(UTC)
    rows = [
        {
            "tenant_id": tenant.id,
            "name": item.token.name,
            # A secret nobody is ever shown: the restored token can never authenticate.
            "token_hash": hash_token(generate_token()),
            "scopes": sorted(set(item.token.scopes)),
            "is_admin": item.token.admin,
            "expires_at": item.token.expires_at,
            "revoked_at": item.revoked_at or now,
            "created_at": item.created_at,
        }
        for item in items
    ]
    await conn.execute(insert(tokens), rows)
    return len(rows)


async def _write_resources(conn: AsyncConnection, tenant: Tenant, items: list[_ResourceLine]) -> int:
    shas = sorted({item.resource.blob_sha256 for item in items if item.resource.blob_sha256})
    sizes: dict[str, int] = {}
    if shas:
        found = await conn.execute(
            select(blobs.c.sha256, blobs.c.size).where(
                blobs.c.tenant_id == tenant.id, blobs.c.sha256.in_(shas)
            )
        )
        sizes = {row.sha256: row.size for row in found}
    rows = []
    for item in items:
        body = item.resource
        if body.blob is not None:
            raise BadBackup(f"resource {body.uri}: a backup names blobs by blobSha256, not inline")
        if body.blob_sha256 is not None and body.blob_sha256 not in sizes:
            raise BadBackup(f"resource {body.uri}: blob {body.blob_sha256} is not in the backup")
        size = len(body.text.encode()) if body.text is not None else sizes.get(body.blob_sha256 or "")
        rows.append(
            {
                "tenant_id": tenant.id,
                **column_values(body, RESOURCE_FIELDS),
                "text": body.text,
                "blob_sha256": body.blob_sha256,
                "size": size,
                "version": item.version,
                "created_at": item.created_at,
                "updated_at": item.updated_at,
                "content_changed_at": item.content_changed_at,
            }
        )
    await conn.execute(insert(resources), rows)
    return len(rows)


# Versions name their resource by URI; the new resource ids are looked up in the same statement.
_INSERT_VERSIONS = text(
    "INSERT INTO resource_versions"
    " (tenant_id, resource_id, version, uri, snapshot, text, blob_sha256, changed_by, changed_at)"
    " SELECT r.tenant_id, r.id, v.version, v.uri, v.snapshot::jsonb, v.text, v.blob_sha256,"
    " v.changed_by, v.changed_at"
    " FROM unnest(:resource_uri, :version, :uri, :snapshot, :text, :blob_sha256, :changed_by, :changed_at)"
    " AS v(resource_uri, version, uri, snapshot, text, blob_sha256, changed_by, changed_at)"
    " JOIN resources r ON r.tenant_id = :tenant_id AND r.uri = v.resource_uri"
).bindparams(
    *(
        bindparam(name, type_=ARRAY(kind))
        for name, kind in (
            ("resource_uri", Text()),
            ("version", Integer()),
            ("uri", Text()),
            ("snapshot", Text()),
            ("text", Text()),
            ("blob_sha256", Text()),
            ("changed_by", Text()),
            ("changed_at", DateTime(timezone=True)),
        )
    )
)


async def _write_versions(conn: AsyncConnection, tenant: Tenant, items: list[_VersionLine]) -> int:
    result = await conn.execute(
        _INSERT_VERSIONS,
        {
            "tenant_id": tenant.id,
            "resource_uri": [item.resource_uri for item in items],
            "version": [item.version for item in items],
            "uri": [item.uri for item in items],
            "snapshot": [json.dumps(item.snapshot) for item in items],
            "text": [item.text for item in items],
            "blob_sha256": [item.blob_sha256 for item in items],
            "changed_by": [item.changed_by for item in items],
            "changed_at": [item.changed_at for item in items],
        },
    )
    if result.rowcount != len(items):
        raise BadBackup("a version names a resource URI that is not in the backup")
    return len(items)


_WRITERS: dict[str, Callable[[AsyncConnection, Tenant, list[Any]], Any]] = {
    "template": _write_templates,
    "grant": _write_grants,
    "token": _write_tokens,
    "resource": _write_resources,
    "version": _write_versions,
}
