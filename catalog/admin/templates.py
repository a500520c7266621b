"""Resource templates: RFC 6570 URI templates with metadata and an optional rendered body."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from catalog.admin.deps import AdminTenantDep, CatalogDep, Cursor, ItemId, LimitDep, PrincipalDep
from catalog.core import templates as core
from catalog.core.schemas.base import Page
from catalog.core.schemas.templates import (
    TemplateIn,
    TemplateOut,
    TemplatePatch,
    TemplatePreviewIn,
    TemplatePreviewOut,
)

router = APIRouter(prefix="/tenants/{slug}/templates", tags=["templates"])

_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such tenant or template"},
    422: {"description": "invalid input"},
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TemplateOut,
    response_model_exclude_none=True,
    responses={409: {"description": "the same uriTemplate exists"}, **_RESPONSES},
)
async def create_template(
    body: TemplateIn, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep, response: Response
) -> TemplateOut:
    """Create a template; ``uriTemplate`` must be RFC 6570 and ``text`` may use its variables as
    ``{var}`` placeholders (escaped for the mime type when rendered)."""
    record = await core.create_template(catalog, principal, tenant, body)
    response.headers["Location"] = f"/admin/v1/tenants/{tenant.slug}/templates/{record.id}"
    return record.to_out()


@router.post(
    "/preview", response_model=TemplatePreviewOut, response_model_exclude_none=True, responses=_RESPONSES
)
async def preview_template(body: TemplatePreviewIn, tenant: AdminTenantDep) -> TemplatePreviewOut:
    """Render a template for sample arguments without storing anything: the URI it expands to and
    the body as ``resources/read`` would answer it (escaped for the mime type)."""
    return core.preview(body)


@router.get("", response_model=Page[TemplateOut], response_model_exclude_none=True)
async def list_templates(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    principal: PrincipalDep,
    limit: LimitDep,
    cursor: Cursor = None,
) -> Page[TemplateOut]:
    """Templates ordered by ``uriTemplate`` (byte order), a keyset page at a time."""
    records, next_cursor = await core.list_templates(catalog, principal, tenant, cursor=cursor, limit=limit)
    return Page[TemplateOut](items=[r.to_out() for r in records], next_cursor=next_cursor)


@router.get("/{id}", response_model=TemplateOut, response_model_exclude_none=True, responses=_RESPONSES)
async def get_template(id: ItemId, tenant: AdminTenantDep, catalog: CatalogDep) -> TemplateOut:
    return (await core.get_template(catalog, tenant, id)).to_out()


@router.patch("/{id}", response_model=TemplateOut, response_model_exclude_none=True, responses=_RESPONSES)
async def patch_template(
    id: ItemId, body: TemplatePatch, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> TemplateOut:
    """Change only the fields present; ``null`` clears an optional one."""
    return (await core.patch_template(catalog, principal, tenant, id, body)).to_out()


@router.delete("/{id}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, responses=_RESPONSES)
async def delete_template(
    id: ItemId, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> Response:
    await core.delete_template(catalog, principal, tenant, id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
