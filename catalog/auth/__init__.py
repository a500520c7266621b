"""Who is calling: bearer tokens (and the anonymous public tenant) turned into a ``Principal``.

One function for every surface; the admin API and the MCP endpoint differ only in what they do
with a missing token (the MCP endpoint may fall back to the public tenant).
"""

from __future__ import annotations

import hmac

from catalog.auth.jwt import looks_like_jwt
from catalog.core.errors import Unauthenticated
from catalog.core.principal import Principal
from catalog.core.service import Catalog
from catalog.core.tenants import find_tenant
from catalog.core.tokens import principal_for_token
from catalog.db.engine import self_scoped_driver


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header; None when there is no header."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'", error="invalid_request")
    return token


async def authenticate(catalog: Catalog, authorization: str | None) -> Principal | None:
    """The principal of a request's credentials; None when it carries none."""
    token = bearer_token(authorization)
    if token is None:
        return None
    if hmac.compare_digest(token.encode(), catalog.platform_admin_token.encode()):
        return Principal.platform_admin()
    verifier = catalog.jwt_verifier
    if verifier is not None and looks_like_jwt(token):
        claims = await verifier.claims(token)
        slug = claims.get(verifier.tenant_claim)
        tenant = await find_tenant(catalog, slug) if isinstance(slug, str) else None
        if tenant is None:
            raise Unauthenticated(
                f"the token's {verifier.tenant_claim!r} claim names no tenant of this catalogue"
            )
        return verifier.principal(claims, tenant.id, tenant.slug)
    async with self_scoped_driver(catalog.engine) as driver:
        principal = await principal_for_token(driver, token)
    if principal is None:
        raise Unauthenticated("the token is invalid, expired or revoked")
    return principal


async def anonymous_principal(catalog: Catalog) -> Principal | None:
    """The principal of an anonymous MCP caller: the public tenant's ``public`` scope, if configured."""
    slug = catalog.settings.public_tenant
    if not slug:
        return None
    tenant = await find_tenant(catalog, slug)
    return Principal.anonymous(tenant.id, tenant.slug) if tenant else None
