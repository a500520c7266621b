"""What happened: the audit log (who changed what, when) and the change feed (what changed, in order)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from catalog.admin.deps import MAX_ID, AdminTenantDep, CatalogDep, Cursor, LimitDep, PrincipalDep
from catalog.core import audit, changes
from catalog.core.schemas import AuditEntryOut, ChangesPage, Page

router = APIRouter(prefix="/tenants/{slug}", tags=["activity"])


@router.get("/audit", response_model=Page[AuditEntryOut], response_model_exclude_none=True)
async def list_audit(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    limit: LimitDep,
    cursor: Cursor = None,
) -> Page[AuditEntryOut]:
    """The audit log, newest first: principal, action, target, before/after digests, time."""
    entries, next_cursor = await audit.list_audit(catalog, principal, tenant, cursor=cursor, limit=limit)
    return Page[AuditEntryOut](items=entries, next_cursor=next_cursor)


@router.get("/changes", response_model=ChangesPage, response_model_exclude_none=True)
async def list_changes(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    limit: LimitDep,
    after: Annotated[
        int, Query(ge=0, le=MAX_ID, description="the last seq seen (0: from the start of the feed)")
    ] = 0,
) -> ChangesPage:
    """The change feed, oldest first after ``after``. Poll again with ``after=lastSeq``;
    ``nextCursor`` is present when more changes are waiting right now."""
    return await changes.list_changes(catalog, tenant, after=after, limit=limit)
