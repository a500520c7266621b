"""Restoring a backup as a new tenant: every line read bounded and checked, rows written as they
were in batches, the tenant deleted again on any failure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from pydantic import ValidationError
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.audit import AuditEntry, record_audit
from catalog.core.backup.format import (
    CHUNK,
    FORMAT,
    SECTIONS,
    BackupCounts,
    BadBackup,
    BlobLine,
    Damaged,
    GrantLine,
    HeaderLine,
    ResourceLine,
    TemplateLine,
    TokenLine,
    VersionLine,
    iso,
)
from catalog.core.catalog import Catalog
from catalog.core.errors import CatalogError
from catalog.core.jsonlines import BadJson, max_line_bytes, parse_json, read_line, too_long
from catalog.core.principal import Principal
from catalog.core.resources import METADATA_FIELDS as RESOURCE_FIELDS
from catalog.core.resources.writer import PastVersion, restore_versions
from catalog.core.resources.writes import text_size
from catalog.core.schemas.base import Model, column_values
from catalog.core.templates import METADATA_FIELDS as TEMPLATE_FIELDS
from catalog.core.tenants import Tenant, create_tenant, delete_tenant
from catalog.core.tokens import generate_token, hash_token
from catalog.core.uri_templates.parsing import InvalidTemplate, parse_template
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import blobs, grants, resources, templates, tokens

BATCH_ROWS = 500  # rows restored per transaction ...
BATCH_BYTES = 8 * 1024 * 1024  # ... or fewer, when their content reaches this size


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
            raise Damaged(f"{self.name}:{self.number}: the file is damaged ({exc})") from None
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
            from catalog.core.transfer.items import validation_reason

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
    except Damaged:
        raise
    except BadBackup:  # binary or other JSON: the same answer, this is no backup
        line = None
    if line is None or line.get("kind") != "catalog-backup":
        raise reader.bad("not a catalog backup (no catalog-backup header)")
    if line.get("format") != FORMAT:
        raise reader.bad(f"backup format {line.get('format')!r} is not one this catalog reads ({FORMAT})")
    header: HeaderLine = reader.parse(HeaderLine, line)
    source = header.tenant.dump()
    tenant = await create_tenant(catalog, slug, header.tenant.name, by=principal)
    report = RestoreReport(tenant, source=source)
    try:
        await _restore(catalog, tenant, reader, report.counts, on_progress)
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            detail = {
                "from": header.tenant.slug,
                "backupCreatedAt": iso(header.created_at),
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
    "template": TemplateLine,
    "grant": GrantLine,
    "token": TokenLine,
    "resource": ResourceLine,
    "version": VersionLine,
}


async def _restore_blob(
    catalog: Catalog,
    tenant: Tenant,
    reader: _Reader,
    line: dict[str, Any],
    counts: BackupCounts,
    on_progress: Callable[[], None],
) -> None:
    blob: BlobLine = reader.parse(BlobLine, line)
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


async def _write_templates(conn: AsyncConnection, tenant: Tenant, items: list[TemplateLine]) -> int:
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


async def _write_grants(conn: AsyncConnection, tenant: Tenant, items: list[GrantLine]) -> int:
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


async def _write_tokens(conn: AsyncConnection, tenant: Tenant, items: list[TokenLine]) -> int:
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


async def _write_resources(conn: AsyncConnection, tenant: Tenant, items: list[ResourceLine]) -> int:
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


async def _write_versions(conn: AsyncConnection, tenant: Tenant, items: list[VersionLine]) -> int:
    # Through the owner of the version row: the same columns every write's versions fill.
    written = await restore_versions(
        conn,
        tenant.id,
        [
            PastVersion(
                resource_uri=item.resource_uri,
                version=item.version,
                uri=item.uri,
                snapshot=item.snapshot,
                text=item.text,
                blob_sha256=item.blob_sha256,
                changed_by=item.changed_by,
                changed_at=item.changed_at,
            )
            for item in items
        ],
    )
    if written != len(items):
        raise BadBackup("a version names a resource URI that is not in the backup")
    return len(items)


_WRITERS: dict[str, Callable[[AsyncConnection, Tenant, list[Any]], Any]] = {
    "template": _write_templates,
    "grant": _write_grants,
    "token": _write_tokens,
    "resource": _write_resources,
    "version": _write_versions,
}
