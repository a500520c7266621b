"""The platform admin's audit log: tenant creations and deletions, and the trails of deleted tenants."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from catalog.admin.deps import MAX_ID, CatalogDep, Cursor, LimitDep, PlatformAdminDep
from catalog.core import audit
from catalog.core.schemas.audit import PlatformAuditEntryOut
from catalog.core.schemas.base import Page

router = APIRouter(prefix="/audit", tags=["activity"])


@router.get("", response_model=Page[PlatformAuditEntryOut], response_model_exclude_none=True)
async def list_platform_audit(
    catalog: CatalogDep,
    principal: PlatformAdminDep,
    limit: LimitDep,
    cursor: Cursor = None,
    tenant_id: Annotated[
        int | None, Query(alias="tenantId", ge=1, le=MAX_ID, description="only this tenant's entries")
    ] = None,
) -> Page[PlatformAuditEntryOut]:
    """The platform log, newest first (platform admin only): every tenant created and deleted, and a
    deleted tenant's whole audit trail, copied here just before the deletion. A live tenant's trail
    is at ``/tenants/{slug}/audit``."""
    entries, next_cursor = await audit.list_platform_audit(
        catalog, principal, tenant_id=tenant_id, cursor=cursor, limit=limit
    )
    return Page[PlatformAuditEntryOut](items=entries, next_cursor=next_cursor)
