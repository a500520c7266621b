"""The audit log: who changed what, when; written inside the transaction of the change itself."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.cursors import InvalidCursor, decode_cursor, encode_cursor
from catalog.core.principal import Principal
from catalog.core.schemas import AuditEntryOut
from catalog.core.service import Catalog
from catalog.core.tenants import Tenant
from catalog.core.visibility import principal_fingerprint
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import audit_log

MAX_PAGE = 1000
DEFAULT_PAGE = 100


async def record_audit(
    conn: AsyncConnection,
    tenant_id: int,
    principal: Principal,
    action: str,
    target_kind: str,
    target_id: int | None,
    uri: str | None,
    before_digest: str | None,
    after_digest: str | None,
    detail: dict[str, Any] | None = None,
) -> None:
    await conn.execute(
        insert(audit_log).values(
            tenant_id=tenant_id,
            principal=principal.label,
            action=action,
            target_kind=target_kind,
            target_id=target_id,
            uri=uri,
            before_digest=before_digest,
            after_digest=after_digest,
            detail=detail,
        )
    )


async def audit_page(
    conn: AsyncConnection, tenant_id: int, *, before_id: int | None, limit: int
) -> list[Any]:
    """Newest first, keyset on id."""
    query = select(audit_log).where(audit_log.c.tenant_id == tenant_id)
    if before_id is not None:
        query = query.where(audit_log.c.id < before_id)
    return list((await conn.execute(query.order_by(audit_log.c.id.desc()).limit(limit + 1))).all())


def audit_entry_out(row: Any) -> AuditEntryOut:
    return AuditEntryOut(
        id=row.id,
        at=row.at,
        principal=row.principal,
        action=row.action,
        target_kind=row.target_kind,
        target_id=row.target_id,
        uri=row.uri,
        before_digest=row.before_digest,
        after_digest=row.after_digest,
        detail=row.detail,
    )


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
    entries = [audit_entry_out(row) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        next_cursor = encode_cursor(
            catalog.signing_key, after=entries[-1].id, listing=listing, fingerprint=fingerprint
        )
    return entries, next_cursor
