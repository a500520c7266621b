"""Who is calling: bearer tokens (and the anonymous public tenant) turned into a ``Principal``.

One function for every surface (:func:`authenticate_caller`, on :func:`authenticate_request`'s
rule); the admin API and the MCP endpoint
differ only in what they do with a missing token (the MCP endpoint may fall back to the public
tenant). What a refused caller is told is ``catalog.auth.challenges``'s; the checks every request
passes first (Host, Origin, rate, body) are ``catalog.auth.edge``'s.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl

from starlette.datastructures import Headers
from starlette.types import Scope

from catalog.auth.challenges import ADMIN_RESOURCE, MCP_RESOURCE
from catalog.auth.jwt import jwt_verifier, looks_like_jwt
from catalog.auth.quotas import authentication_failed, authentication_succeeded
from catalog.core.catalog import Catalog
from catalog.core.direct.tokens import token_principal
from catalog.core.errors import Unauthenticated
from catalog.core.principal import Principal
from catalog.core.tenants import find_tenant

TOKEN_IN_QUERY = "send the token in the Authorization header, never in the URL"


def request_credentials(authorization: str | None, query_string: bytes) -> str | None:
    """The bearer token a request carries (None without one), by one rule on every surface (RFC 6750
    section 3.1, AUTH-7, AUTH-10). A token in the query string is a method this server does not
    support (section 2.3: URLs end up in logs), whatever its spelling (``access%5Ftoken`` is
    ``access_token``; ``xaccess_token`` is not): alone, 401 without an error code; beside an
    ``Authorization`` header, two methods at once, 400 ``invalid_request``."""
    if query_string:
        names = {name for name, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)}
        if "access_token" in names:
            error = "invalid_request" if authorization is not None else None
            raise Unauthenticated(TOKEN_IN_QUERY, error=error)
    return bearer_token(authorization)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header; None when there is no header.

    Another scheme (``Basic``) is a method this server does not support: 401 with a challenge and
    no error code. ``Bearer`` without exactly one token after it is malformed: 400
    ``invalid_request``."""
    if authorization is None:
        return None
    parts = authorization.split()
    if not parts or parts[0].lower() != "bearer":
        raise Unauthenticated("this server accepts only 'Authorization: Bearer <token>'", error=None)
    if len(parts) != 2:
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'", error="invalid_request")
    return parts[1]


async def authenticate(
    catalog: Catalog, authorization: str | None, resource: str = MCP_RESOURCE
) -> Principal | None:
    """The principal of a request's credentials for ``resource`` (``/mcp`` or ``/admin/v1``: a JWT
    must name it as its audience); None when it carries none."""
    token = bearer_token(authorization)
    if token is None:
        return None
    if hmac.compare_digest(token.encode(), catalog.platform_admin_token.encode()):
        return Principal.platform_admin()
    verifier = jwt_verifier(catalog)
    if verifier is not None and looks_like_jwt(token):
        claims = await verifier.claims(token, resource)
        slug = claims.get(verifier.tenant_claim)
        tenant = await find_tenant(catalog, slug) if isinstance(slug, str) else None
        if tenant is None:
            raise Unauthenticated(
                f"the token's {verifier.tenant_claim!r} claim names no tenant of this catalogue"
            )
        return verifier.principal(claims, tenant.id, tenant.slug)
    principal = await token_principal(catalog, token)
    if principal is None:
        raise Unauthenticated("the token is invalid, expired or revoked")
    return principal


async def authenticate_request(
    catalog: Catalog, authorization: str | None, query_string: bytes, resource: str = MCP_RESOURCE
) -> Principal | None:
    """The principal of a request (both surfaces): its credentials by :func:`request_credentials`'s
    rule, resolved by :func:`authenticate`; None when it carries none."""
    request_credentials(authorization, query_string)
    return await authenticate(catalog, authorization, resource)


async def authenticate_caller(catalog: Catalog, scope: Scope) -> Principal | None:
    """:func:`authenticate_request` for an HTTP request, as both surfaces call it: a failure is
    charged to the caller's address, a success marks its credential known (``quotas.Caller``)."""
    authorization = Headers(scope=scope).get("authorization")
    path = scope.get("path", "")
    resource = (
        ADMIN_RESOURCE if path == ADMIN_RESOURCE or path.startswith(ADMIN_RESOURCE + "/") else MCP_RESOURCE
    )
    try:
        principal = await authenticate_request(
            catalog, authorization, scope.get("query_string") or b"", resource
        )
    except Unauthenticated:
        authentication_failed(scope)
        raise
    if principal is not None:
        authentication_succeeded(scope)
    return principal


async def anonymous_principal(catalog: Catalog) -> Principal | None:
    """The principal of an anonymous MCP caller: the public tenant's ``public`` scope, if configured."""
    slug = catalog.settings.public_tenant
    if not slug:
        return None
    tenant = await find_tenant(catalog, slug)
    return Principal.anonymous(tenant.id, tenant.slug) if tenant else None
