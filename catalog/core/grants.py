"""Grants: which scope sees which part of a tenant's catalogue."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.audit import AuditEntry, digest, record_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import Conflict, NotFound
from catalog.core.principal import Principal
from catalog.core.resources import listing_clause
from catalog.core.schemas.grants import GrantCreated, GrantIn, GrantOut, GrantPreviewItem, GrantPreviewOut
from catalog.core.tenants import Tenant
from catalog.core.visibility import load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import grants, resources

PREVIEW_ITEMS = 100


def grant_out(row: Row[Any]) -> GrantOut:
    return GrantOut.model_validate(row, from_attributes=True)


def _digest(row: Row[Any]) -> str | None:
    """The audit digest of a grant: its scope and selector."""
    return digest({"scope": row.scope, "uri": row.uri, "uriPrefix": row.uri_prefix, "tag": row.tag})


def _selector(row: Row[Any] | GrantIn) -> str:
    return row.uri or row.uri_prefix or f"tag:{row.tag}"


async def create_grant(catalog: Catalog, principal: Principal, tenant: Tenant, body: GrantIn) -> GrantCreated:
    """Store the grant; the answer carries ``warnings`` when it may cover more than meant."""
    try:
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            row = await insert_grant(conn, principal, tenant, body)
    except IntegrityError:
        raise Conflict("the same grant exists already") from None
    if row is None:
        raise Conflict("the same grant exists already")
    return GrantCreated.model_validate(row, from_attributes=True).model_copy(
        update={"warnings": body.warnings() or None}
    )


async def insert_grant(
    conn: AsyncConnection, principal: Principal, tenant: Tenant, body: GrantIn
) -> Row[Any] | None:
    """Store the grant and audit it, in the caller's transaction (one grant, alone or in a batch
    of resources); None, writing nothing, when the same grant exists already."""
    row = (
        await conn.execute(
            pg_insert(grants)
            .values(
                tenant_id=tenant.id,
                scope=body.scope,
                uri=body.uri,
                uri_prefix=body.uri_prefix,
                tag=body.tag,
            )
            .on_conflict_do_nothing()
            .returning(*grants.c)
        )
    ).one_or_none()
    if row is None:
        return None
    await record_audit(
        conn,
        tenant.id,
        principal,
        AuditEntry(
            action="grant.create",
            target_kind="grant",
            target_id=row.id,
            uri=_selector(row),
            after=_digest(row),
            detail={"scope": row.scope},
        ),
    )
    return row


async def list_grants(catalog: Catalog, tenant: Tenant) -> list[GrantOut]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        rows = (
            await conn.execute(select(grants).where(grants.c.tenant_id == tenant.id).order_by(grants.c.id))
        ).all()
    return [grant_out(row) for row in rows]


async def delete_grant(catalog: Catalog, principal: Principal, tenant: Tenant, grant_id: int) -> None:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        row = (
            await conn.execute(
                delete(grants)
                .where(grants.c.tenant_id == tenant.id, grants.c.id == grant_id)
                .returning(*grants.c)
            )
        ).one_or_none()
        if row is None:
            raise NotFound(f"no grant {grant_id}")
        await record_audit(
            conn,
            tenant.id,
            principal,
            AuditEntry(
                action="grant.delete",
                target_kind="grant",
                target_id=row.id,
                uri=_selector(row),
                before=_digest(row),
                detail={"scope": row.scope},
            ),
        )


async def preview_scope(catalog: Catalog, tenant: Tenant, scope: str) -> GrantPreviewOut:
    """What a (non-admin) token of ``tenant`` holding only ``scope`` sees: the count and the first
    resources, by the one visibility rule (the same predicate MCP listings use)."""
    viewer = Principal(kind="token", tenant_id=tenant.id, tenant_slug=tenant.slug, scopes=frozenset({scope}))
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        visibility = await load_visibility(conn, viewer, tenant.id)
        if visibility.nothing:
            return GrantPreviewOut(scope=scope, count=0, items=[])
        clause = listing_clause(visibility)
        count = (await conn.execute(select(func.count()).select_from(resources).where(clause))).scalar_one()
        rows = (
            await conn.execute(
                select(resources.c.id, resources.c.uri, resources.c.name)
                .where(clause)
                .order_by(resources.c.uri)
                .limit(PREVIEW_ITEMS)
            )
        ).all()
    items = [GrantPreviewItem(id=row.id, uri=row.uri, name=row.name) for row in rows]
    return GrantPreviewOut(scope=scope, count=count, items=items)
