"""What a refused caller is told about how to authenticate: ``WWW-Authenticate`` challenges and the
RFC 9728 protected-resource metadata, for both surfaces, built in one place.

The metadata (and a challenge's ``resource_metadata``) is advertised only when it can help a client:
when OAuth is configured (``CATALOG_OAUTH_*``), there is an authorization server to name (AUTH-2).
Without it, tokens are minted by the catalogue itself (CLI, admin API), a client has nowhere to
obtain one, and a challenge says only what was wrong with the request (a client sent to look for
an authorization server would end in a misleading "registration rejected").

Everything built from the request's ``Host`` uses a name the edge has already checked against
``CATALOG_ALLOWED_HOSTS`` (``catalog.auth.edge``); with OAuth the canonical resource is the
configured audience, never the request.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import Scope

from catalog.settings import Settings

PRM_PATH = "/.well-known/oauth-protected-resource"
MCP_RESOURCE = "/mcp"
ADMIN_RESOURCE = "/admin/v1"


def request_origin(request: Scope) -> str:
    """``scheme://host[:port]`` as the client addressed this server (``Host`` checked by the edge)."""
    host = Headers(scope=request).get("host")
    if not host:
        server = request.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{request.get('scheme', 'http')}://{host}"


def canonical_url(url: str) -> str:
    """A URL compared the way RFC 3986 allows: scheme and host in any case, no trailing slash
    (AUTH-13: an audience of ``HTTPS://Catalog.example/mcp/`` names ``https://catalog.example/mcp``).
    The whole URI: a query or fragment stays, so ``…/mcp?x`` or ``…/mcp#x`` names another resource."""
    parts = urlsplit(url.strip())
    canonical = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
    if parts.query:
        canonical += "?" + parts.query
    if parts.fragment:
        canonical += "#" + parts.fragment
    return canonical


def oauth_resource_uri(audience: str, resource: str) -> str:
    """The canonical URI of ``resource`` when OAuth is configured: the audience itself for ``/mcp``,
    the same origin for the admin API."""
    canonical = canonical_url(audience)
    if resource == MCP_RESOURCE:
        return canonical
    parts = urlsplit(canonical)
    return f"{parts.scheme}://{parts.netloc}{resource}"


def accepted_audiences(audience: str, resource: str) -> frozenset[str]:
    """The token audiences ``resource`` accepts (canonical): the URI its metadata advertises (what a
    client following it asks the authorization server for, RFC 8707), and on the admin API also
    the ``/mcp`` audience (an agent's token holding the admin scope). ``/mcp`` accepts only its own."""
    own = oauth_resource_uri(audience, resource)
    return frozenset({own, canonical_url(audience)} if resource == ADMIN_RESOURCE else {own})


def resource_uri(settings: Settings, request: Scope, resource: str = MCP_RESOURCE) -> str:
    """The canonical URI of a protected resource of this server."""
    if settings.oauth_audience:
        return oauth_resource_uri(settings.oauth_audience, resource)
    return request_origin(request) + resource


def metadata_url(settings: Settings, request: Scope, resource: str = MCP_RESOURCE) -> str:
    parts = urlsplit(resource_uri(settings, request, resource))
    return f"{parts.scheme}://{parts.netloc}{PRM_PATH}{parts.path}"


def advertised_scopes(settings: Settings, resource: str) -> list[str]:
    """The scopes a client may ask the authorization server for, for this resource (AUTH-4)."""
    if resource == ADMIN_RESOURCE:
        return [settings.oauth_admin_scope]
    return list(settings.oauth_scopes)


def protected_resource_metadata(settings: Settings, request: Scope, resource: str) -> dict[str, Any] | None:
    """RFC 9728 metadata of ``resource``, or None when OAuth is not configured (nothing to say)."""
    if not settings.oauth_enabled:
        return None
    body: dict[str, Any] = {
        "resource": resource_uri(settings, request, resource),
        "authorization_servers": [settings.oauth_issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "catalog" if resource == MCP_RESOURCE else "catalog admin API",
    }
    scopes = advertised_scopes(settings, resource)
    if scopes:
        body["scopes_supported"] = scopes
    return body


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bearer_challenge(
    settings: Settings,
    request: Scope,
    *,
    error: str | None = None,
    description: str | None = None,
    scopes: list[str] | None = None,
    resource: str = MCP_RESOURCE,
) -> str:
    """A ``WWW-Authenticate`` value (RFC 6750 section 3): the error (none when no credential was
    sent), the scopes that would do (``insufficient_scope``, or what to ask for), and, with OAuth,
    where the metadata is (RFC 9728 section 5.1)."""
    parts = [f"realm={_quoted('catalog')}"]
    if error:
        parts.append(f"error={_quoted(error)}")
    if description:
        parts.append(f"error_description={_quoted(description[:200])}")
    named = (
        scopes
        if scopes is not None
        else (advertised_scopes(settings, resource) if settings.oauth_enabled else [])
    )
    if named:
        parts.append(f"scope={_quoted(' '.join(named))}")
    if settings.oauth_enabled:
        parts.append(f"resource_metadata={_quoted(metadata_url(settings, request, resource))}")
    return "Bearer " + ", ".join(parts)
