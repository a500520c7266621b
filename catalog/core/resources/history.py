"""A resource's history: its versions, one of them, and restoring one as a new version."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row

from catalog.core.catalog import Catalog
from catalog.core.errors import NotFound
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.record import METADATA_FIELDS, ResourceRecord
from catalog.core.resources.writes import check_precondition, update_row
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction


async def list_versions(catalog: Catalog, tenant: Tenant, resource_id: int) -> list[Row[Any]]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        if not await rows.exists(conn, tenant.id, resource_id):
            raise NotFound(f"no resource {resource_id}")
        return await rows.versions(conn, tenant.id, resource_id)


async def get_version(catalog: Catalog, tenant: Tenant, resource_id: int, version: int) -> Row[Any]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        row = await rows.version(conn, tenant.id, resource_id, version)
        if row is None:
            if not await rows.exists(conn, tenant.id, resource_id):
                raise NotFound(f"no resource {resource_id}")
            raise NotFound(f"resource {resource_id} has no version {version}")
        return row


async def restore_version(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    resource_id: int,
    version: int,
    *,
    if_match: str | None = None,
) -> ResourceRecord:
    """Make version ``version`` the current state again (metadata and content) as a new version:
    history is never rewritten. One write like any other (version row, audit ``resource.restore``,
    change-feed row and event by trigger); restoring what is already current changes nothing."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        current = await rows.lock(conn, tenant.id, resource_id=resource_id)
        if current is None:
            raise NotFound(f"no resource {resource_id}")
        old = await rows.version(conn, tenant.id, resource_id, version)
        if old is None:
            raise NotFound(f"resource {resource_id} has no version {version}")
        check_precondition(current, if_match)
        snapshot = {k: v for k, v in old.snapshot.items() if k != "size"}
        if old.text is not None:
            snapshot["text"] = old.text
        elif old.blob_sha256 is not None:
            snapshot["blobSha256"] = old.blob_sha256
        body = ResourceIn.model_validate(snapshot)
        return await update_row(
            catalog,
            conn,
            principal,
            tenant,
            current,
            body,
            METADATA_FIELDS,
            replace_content=True,
            action="resource.restore",
            detail={"version": version},
        )
