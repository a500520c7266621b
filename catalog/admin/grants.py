"""Grants: which scope sees which part of the tenant's catalogue ({uri} | {uriPrefix} | {tag})."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from catalog.admin.deps import AdminTenantDep, CatalogDep, ItemId, PrincipalDep
from catalog.core import grants as core
from catalog.core.schemas.base import Page, Scope
from catalog.core.schemas.grants import GrantCreated, GrantIn, GrantOut, GrantPreviewOut

router = APIRouter(prefix="/tenants/{slug}/grants", tags=["grants"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=GrantCreated,
    response_model_exclude_none=True,
    responses={409: {"description": "the same grant exists"}, 422: {"description": "invalid input"}},
)
async def create_grant(
    body: GrantIn, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> GrantCreated:
    """Give ``scope`` sight of one resource (``uri``), of every URI starting with a string
    (``uriPrefix``: a plain string prefix, so ``file:///a`` also covers ``file:///ab``; end it with
    ``/`` for a subtree, which then covers the directory URI without that ``/`` too) or of a
    ``tag``: exactly one of the three. ``warnings`` in the answer names
    a prefix that does not end at a delimiter (``/``, ``#``, ``?``, ``:``, ``&``, ``=``, ``;``)."""
    return await core.create_grant(catalog, principal, tenant, body)


@router.get("", response_model=Page[GrantOut], response_model_exclude_none=True)
async def list_grants(tenant: AdminTenantDep, catalog: CatalogDep) -> Page[GrantOut]:
    return Page[GrantOut](items=await core.list_grants(catalog, tenant))


@router.delete(
    "/{id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={404: {"description": "no such grant"}},
)
async def delete_grant(
    id: ItemId, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> Response:
    await core.delete_grant(catalog, principal, tenant, id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/preview", response_model=GrantPreviewOut, response_model_exclude_none=True)
async def preview_scope(
    tenant: AdminTenantDep,
    catalog: CatalogDep,
    scope: Annotated[Scope, Query(description="the scope to look through")],
) -> GrantPreviewOut:
    """What a token holding only ``scope`` sees of this tenant, by the grants stored now: how many
    resources, and the first 100 in URI order."""
    return await core.preview_scope(catalog, tenant, scope)
