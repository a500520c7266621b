"""The audit log: who changed what, when; written inside the transaction of the change itself.

Every write records one :class:`AuditEntry` (a value object: action, target, digests before and
after, detail): resources, templates, grants, tokens and blobs in their tenant's log, consents to
gated reads too; tenant creations and deletions in the platform log. Digests are of the target's
snapshot (:func:`digest`; a blob's is its sha256), so a reader can tell which state a change
started from and which it left.

The platform log (``platform_audit_log``, readable in the platform scope only) also receives a
tenant's whole trail just before the tenant is deleted (a trigger, migration 0004), so the trail
outlives the tenant as the platform admin's record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.authors import authors_of
from catalog.core.catalog import Catalog
from catalog.core.cursors import InvalidCursor, decode_cursor, encode_cursor
from catalog.core.principal import Author, Principal
from catalog.core.schemas.audit import AuditEntryOut, AuthorOut, PlatformAuditEntryOut
from catalog.core.visibility import principal_fingerprint
from catalog.db.bulk import insert_rows
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import audit_log, platform_audit_log

if TYPE_CHECKING:
    from catalog.core.tenants import Tenant

EntryOut = TypeVar("EntryOut", bound=AuditEntryOut)

MAX_PAGE = 1000
DEFAULT_PAGE = 100


def digest(snapshot: Mapping[str, Any] | None) -> str | None:
    """sha256 of an entity's snapshot as canonical JSON (sorted keys); None for "no such thing"."""
    if snapshot is None:
        return None
    body = json.dumps(snapshot, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class AuditEntry:
    """One change: ``action`` (``resource.create``, ``grant.delete``, ...) on the target of
    ``target_kind``/``target_id`` (and ``uri`` where it has one), with the target's digests
    ``before`` and ``after`` the change (None where it did not exist) and an optional ``detail``."""

    action: str
    target_kind: str
    target_id: int | None = None
    uri: str | None = None
    before: str | None = None
    after: str | None = None
    detail: dict[str, Any] | None = None

    def row(self, tenant_id: int, principal: Principal) -> dict[str, Any]:
        return {
            "tenant_id": tenant_id,
            "principal": principal.label,
            "action": self.action,
            "target_kind": self.target_kind,
            "target_id": self.target_id,
            "uri": self.uri,
            "before_digest": self.before,
            "after_digest": self.after,
            "detail": self.detail,
        }


async def record_audit(
    conn: AsyncConnection, tenant_id: int, principal: Principal, entry: AuditEntry
) -> None:
    await conn.execute(insert(audit_log).values(entry.row(tenant_id, principal)))


async def record_platform_audit(
    conn: AsyncConnection, tenant_id: int, tenant_slug: str, principal: Principal, entry: AuditEntry
) -> None:
    """An entry of the platform log (in a platform-scoped transaction): tenant creation, deletion."""
    await conn.execute(
        insert(platform_audit_log).values(**entry.row(tenant_id, principal), tenant_slug=tenant_slug)
    )


async def record_audits(
    conn: AsyncConnection, tenant_id: int, principal: Principal, entries: Sequence[AuditEntry]
) -> None:
    """Many entries in one statement (an import's batch)."""
    await insert_rows(conn, audit_log, [entry.row(tenant_id, principal) for entry in entries])


async def audit_page(
    conn: AsyncConnection, tenant_id: int, *, before_id: int | None, limit: int
) -> list[Any]:
    """Newest first, keyset on id."""
    query = select(audit_log).where(audit_log.c.tenant_id == tenant_id)
    if before_id is not None:
        query = query.where(audit_log.c.id < before_id)
    return list((await conn.execute(query.order_by(audit_log.c.id.desc()).limit(limit + 1))).all())


def audit_entry_out(row: Any, author: Author, shape: type[EntryOut]) -> EntryOut:
    """One entry as the admin API gives it, its principal named."""
    entry = shape.model_validate(row, from_attributes=True)
    return entry.model_copy(update={"author": AuthorOut.model_validate(author, from_attributes=True)})


async def list_audit(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    *,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
) -> tuple[list[AuditEntryOut], str | None]:
    """One page of the tenant's audit log, newest first, and the signed cursor to the next page."""
    limit = max(1, min(limit, MAX_PAGE))
    listing = "admin.audit"
    fingerprint = principal_fingerprint(principal, tenant.id)
    before_id = None
    if cursor:
        position = decode_cursor(catalog.signing_key, cursor, listing=listing, fingerprint=fingerprint)
        if not isinstance(position.after, int):
            raise InvalidCursor()
        before_id = position.after
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        rows = await audit_page(conn, tenant.id, before_id=before_id, limit=limit)
        authors = await authors_of(conn, tenant.id, (row.principal for row in rows[:limit]))
    entries = [audit_entry_out(row, authors[row.principal], AuditEntryOut) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor(
            catalog.signing_key, after=entries[-1].id, listing=listing, fingerprint=fingerprint
        )
    return entries, next_cursor


async def list_platform_audit(
    catalog: Catalog,
    principal: Principal,
    *,
    tenant_id: int | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_PAGE,
) -> tuple[list[PlatformAuditEntryOut], str | None]:
    """One page of the platform log (newest first; ``tenant_id`` narrows it to one tenant, live or
    deleted), and the signed cursor to the next page. For the platform admin only."""
    limit = max(1, min(limit, MAX_PAGE))
    listing = f"admin.platform-audit:{tenant_id}"
    fingerprint = principal_fingerprint(principal, 0)
    query = select(platform_audit_log)
    if tenant_id is not None:
        query = query.where(platform_audit_log.c.tenant_id == tenant_id)
    if cursor:
        position = decode_cursor(catalog.signing_key, cursor, listing=listing, fingerprint=fingerprint)
        if not isinstance(position.after, int):
            raise InvalidCursor()
        query = query.where(platform_audit_log.c.id < position.after)
    async with transaction(catalog.engine, TenantScope.platform()) as conn:
        rows = (await conn.execute(query.order_by(platform_audit_log.c.id.desc()).limit(limit + 1))).all()
        authors = await authors_of(conn, None, (row.principal for row in rows[:limit]))
    entries = [audit_entry_out(row, authors[row.principal], PlatformAuditEntryOut) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor(
            catalog.signing_key, after=entries[-1].id, listing=listing, fingerprint=fingerprint
        )
    return entries, next_cursor
