"""Tenants: the registry every other table hangs from."""

from __future__ import annotations

import re

from sqlalchemy import delete, insert, select
from sqlalchemy.exc import IntegrityError

from catalog.core.audit import AuditEntry, digest, record_platform_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import Conflict, FieldError, InvalidInput, NotFound
from catalog.core.plain_sql import TENANT_BY_SLUG, Tenant
from catalog.core.principal import Principal
from catalog.core.schemas.base import validated
from catalog.core.schemas.tenants import TenantIn
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import tenants
from catalog.db.rows import from_row

# Who did it, when a caller does not say (the demo seeding, older callers).
CATALOG = Principal.system("catalog")

SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def validate_slug(slug: str, pointer: str = "/slug") -> str:
    if not isinstance(slug, str) or not SLUG_PATTERN.fullmatch(slug):
        raise InvalidInput(
            "invalid tenant slug",
            errors=[
                FieldError(
                    pointer, "1-63 characters: lowercase letters, digits and '-', not starting with '-'"
                )
            ],
        )
    return slug


def _snapshot(slug: str, name: str) -> dict[str, str]:
    return {"slug": slug, "name": name}


async def create_tenant(
    catalog: Catalog, slug: str, name: str | None = None, *, by: Principal | None = None
) -> Tenant:
    """Create a tenant; the platform log records it, by ``by`` (default: the catalog itself)."""
    validate_slug(slug)
    # The admin API's model validated its body already; the CLI and other callers come here
    # directly, so the same model checks the name here (the free-text rule).
    validated(TenantIn, "invalid tenant", slug=slug, name=name)
    try:
        async with transaction(catalog.engine, TenantScope.platform()) as conn:
            row = (
                await conn.execute(insert(tenants).values(slug=slug, name=name or slug).returning(*tenants.c))
            ).one()
            await record_platform_audit(
                conn,
                row.id,
                row.slug,
                by or CATALOG,
                AuditEntry(
                    action="tenant.create",
                    target_kind="tenant",
                    target_id=row.id,
                    after=digest(_snapshot(row.slug, row.name)),
                ),
            )
    except IntegrityError:
        raise Conflict(
            f"tenant {slug!r} exists already", errors=[FieldError("/slug", "already taken")]
        ) from None
    return from_row(Tenant, row)


async def list_tenants(catalog: Catalog, principal: Principal) -> list[Tenant]:
    query = select(tenants).order_by(tenants.c.slug)
    if not principal.is_platform_admin:
        query = query.where(tenants.c.id == principal.tenant_id)
    async with catalog.engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return [from_row(Tenant, r) for r in rows]


async def find_tenant(catalog: Catalog, slug: str) -> Tenant | None:
    if not isinstance(slug, str) or not SLUG_PATTERN.fullmatch(slug):
        return None
    async with catalog.engine.connect() as conn:
        row = (await conn.exec_driver_sql(TENANT_BY_SLUG, (slug,))).one_or_none()
    return from_row(Tenant, row) if row else None


async def get_tenant(catalog: Catalog, slug: str) -> Tenant:
    tenant = await find_tenant(catalog, slug)
    if tenant is None:
        raise NotFound(f"no tenant {slug!r}")
    return tenant


async def delete_tenant(catalog: Catalog, slug: str, *, by: Principal | None = None) -> None:
    """Delete a tenant and all its data, in one transaction (foreign keys cascade). Its audit trail
    moves to the platform log first (a trigger), which then records the deletion itself."""
    if not isinstance(slug, str) or not SLUG_PATTERN.fullmatch(slug):
        raise NotFound(f"no tenant {slug!r}")
    async with transaction(catalog.engine, TenantScope.platform()) as conn:
        row = (
            await conn.execute(delete(tenants).where(tenants.c.slug == slug).returning(*tenants.c))
        ).one_or_none()
        if row is None:
            raise NotFound(f"no tenant {slug!r}")
        await record_platform_audit(
            conn,
            row.id,
            row.slug,
            by or CATALOG,
            AuditEntry(
                action="tenant.delete",
                target_kind="tenant",
                target_id=row.id,
                before=digest(_snapshot(row.slug, row.name)),
            ),
        )


async def tenant_counts(catalog: Catalog, tenant: Tenant) -> dict[str, int]:
    """What the tenant holds, by kind (what deleting it removes): for an operator's confirmation."""
    from sqlalchemy import func

    from catalog.db.models import blobs, grants, resources, templates, tokens

    tables = {
        "resources": resources,
        "blobs": blobs,
        "templates": templates,
        "grants": grants,
        "tokens": tokens,
    }
    counts = [
        select(func.count()).select_from(table).where(table.c.tenant_id == tenant.id).scalar_subquery()
        for table in tables.values()
    ]
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        found = (await conn.execute(select(*counts))).one()
    return dict(zip(tables, found, strict=True))
