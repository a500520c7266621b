"""Tenant tokens: minted (shown once), listed (never shown again), revoked."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from catalog.admin.deps import AdminTenantDep, CatalogDep, ItemId, PrincipalDep
from catalog.core import tokens as core
from catalog.core.schemas.base import Page
from catalog.core.schemas.tokens import TokenCreated, TokenIn, TokenOut

router = APIRouter(prefix="/tenants/{slug}/tokens", tags=["tokens"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenCreated,
    response_model_exclude_none=True,
    responses={422: {"description": "invalid input (e.g. an expiry in the past)"}},
)
async def create_token(
    body: TokenIn, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> TokenCreated:
    """Mint a bearer token for the tenant; ``token`` is in this response only (stored as a hash)."""
    return await core.create_token(catalog, principal, tenant, body)


@router.get("", response_model=Page[TokenOut], response_model_exclude_none=True)
async def list_tokens(tenant: AdminTenantDep, catalog: CatalogDep) -> Page[TokenOut]:
    """The tenant's tokens (live, expired and revoked), without the secrets."""
    return Page[TokenOut](items=await core.list_tokens(catalog, tenant))


@router.delete(
    "/{id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses={404: {"description": "no such live token"}},
)
async def revoke_token(
    id: ItemId, tenant: AdminTenantDep, catalog: CatalogDep, principal: PrincipalDep
) -> Response:
    """Revoke the token: refused from the next request on, on every worker."""
    await core.delete_token(catalog, principal, tenant, id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
