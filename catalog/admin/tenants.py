"""Tenants: create, list, delete (with all their data)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from catalog.admin.deps import AnyAdminDep, CatalogDep, PlatformAdminDep
from catalog.core import tenants as core
from catalog.core.schemas.base import Page
from catalog.core.schemas.tenants import TenantIn, TenantOut

router = APIRouter(prefix="/tenants", tags=["tenants"])


def _out(tenant: core.Tenant) -> TenantOut:
    return TenantOut.model_validate(tenant, from_attributes=True)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=TenantOut, response_model_exclude_none=True
)
async def create_tenant(
    body: TenantIn, catalog: CatalogDep, principal: PlatformAdminDep, response: Response
) -> TenantOut:
    """Create a tenant (platform admin only). ``name`` defaults to the slug; a taken slug is 409."""
    tenant = await core.create_tenant(catalog, body.slug, body.name, by=principal)
    response.headers["Location"] = f"/admin/v1/tenants/{tenant.slug}"
    return _out(tenant)


@router.get("", response_model=Page[TenantOut], response_model_exclude_none=True)
async def list_tenants(catalog: CatalogDep, principal: AnyAdminDep) -> Page[TenantOut]:
    """All tenants for the platform admin; a tenant admin token sees only its own tenant."""
    return Page[TenantOut](items=[_out(t) for t in await core.list_tenants(catalog, principal)])


@router.delete("/{slug}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
async def delete_tenant(slug: str, catalog: CatalogDep, principal: PlatformAdminDep) -> Response:
    """Delete a tenant and every row of it (resources, history, blobs, grants, tokens, audit, feed),
    in one transaction. Platform admin only. Its audit trail is kept in the platform audit log
    (``GET /admin/v1/audit``), followed by a ``tenant.delete`` entry."""
    await core.delete_tenant(catalog, slug, by=principal)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
