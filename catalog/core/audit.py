"""The audit log: who changed what, when; written inside the transaction of the change itself."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.principal import Principal
from catalog.db.models import audit_log


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
