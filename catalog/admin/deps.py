"""Typed FastAPI dependencies: the catalog, the calling principal, the tenant it administers."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request

from catalog.auth import authenticate_caller
from catalog.core.catalog import Catalog
from catalog.core.errors import Forbidden, InsufficientScope, NotFound, Unauthenticated
from catalog.core.principal import Principal
from catalog.core.tenants import Tenant, find_tenant
from catalog.observability.context import note_principal


def get_catalog(request: Request) -> Catalog:
    return request.app.state.catalog


CatalogDep = Annotated[Catalog, Depends(get_catalog)]


async def get_principal(request: Request, catalog: CatalogDep) -> Principal:
    """The caller. 401 (with a ``WWW-Authenticate`` challenge naming the protected-resource
    metadata: see :mod:`catalog.admin.problems`) without a usable bearer token, or with a token in
    the query string (RFC 6750 section 2.3 is not supported: URLs end up in logs)."""
    principal = await authenticate_caller(catalog, request.scope)
    if principal is None:
        raise Unauthenticated("this API needs a bearer token", error=None)
    note_principal(request.scope, principal)
    return principal


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def require_platform_admin(principal: PrincipalDep) -> Principal:
    """Platform-only routes (creating, deleting tenants): a plain 403 for every other credential,
    without an ``insufficient_scope`` challenge, since no token scope grants this."""
    if not principal.is_platform_admin:
        raise Forbidden("only the platform admin may do this")
    return principal


PlatformAdminDep = Annotated[Principal, Depends(require_platform_admin)]


def _require_admin_flag(principal: Principal, catalog: Catalog) -> None:
    """A valid credential without the admin flag (an opaque token minted without ``admin``, a JWT
    without the admin scope) is 403 ``insufficient_scope`` naming that scope: holding it is what
    the admin API needs."""
    if not (principal.is_platform_admin or (principal.is_admin and principal.tenant_id is not None)):
        raise InsufficientScope(
            "the admin API needs an admin token (a tenant token minted with admin, or a JWT with "
            f"the {catalog.settings.oauth_admin_scope!r} scope)",
            scope=catalog.settings.oauth_admin_scope,
        )


async def require_some_admin(principal: PrincipalDep, catalog: CatalogDep) -> Principal:
    """The platform admin or a tenant admin token (which sees only its own tenant)."""
    _require_admin_flag(principal, catalog)
    return principal


AnyAdminDep = Annotated[Principal, Depends(require_some_admin)]


async def get_admin_tenant(
    principal: PrincipalDep,
    catalog: CatalogDep,
    slug: Annotated[str, Path(description="the tenant's slug", max_length=63)],
) -> Tenant:
    """The tenant named in the path, if the caller administers it (403 otherwise, 404 if unknown).

    A credential without the admin flag is ``insufficient_scope`` whatever the tenant; an admin
    token of another tenant is a plain 403 (no scope would help), whether that tenant exists or not.
    """
    _require_admin_flag(principal, catalog)
    if not principal.is_platform_admin and principal.tenant_slug != slug:
        # A tenant admin learns nothing about other tenants, not even whether they exist.
        raise Forbidden("this token does not administer that tenant")
    tenant = await find_tenant(catalog, slug)
    if tenant is None:
        raise NotFound(f"no tenant {slug!r}")
    if not principal.administers(tenant.id):
        raise Forbidden("this token is not an admin token of the tenant")
    return tenant


AdminTenantDep = Annotated[Tenant, Depends(get_admin_tenant)]


# -- shared parameter types -------------------------------------------------------------------------

MAX_ID = 2**63 - 1
MAX_LIMIT = 1000

# Ids are PostgreSQL bigints: anything outside 1..2^63-1 is refused as invalid input, never sent on.
ItemId = Annotated[int, Path(ge=1, le=MAX_ID, description="the item's id")]
Cursor = Annotated[
    str | None, Query(max_length=8192, description="nextCursor of the previous page (opaque, signed)")
]


def page_limit(
    limit: Annotated[int, Query(ge=1, description=f"page size; values above {MAX_LIMIT} are capped")] = 100,
) -> int:
    return min(limit, MAX_LIMIT)


LimitDep = Annotated[int, Depends(page_limit)]
