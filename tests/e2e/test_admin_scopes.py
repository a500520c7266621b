"""The admin API's bearer challenges (AUTH-3, AUTH-7, AUTH-8, AUTH-10): 401 names the protected
resource metadata, a valid token without the admin flag is 403 ``insufficient_scope`` naming the
admin scope, a token in the query string is refused. Opaque tokens and JWTs alike."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from catalog.settings import Settings
from tests.admin_support import ADMIN_TOKEN, API, assert_problem, bearer, mint_token
from tests.e2e.test_oauth import AUDIENCE, ISSUER, Issuer

# The admin API's own metadata (RFC 9728, path-inserted), on the origin of AUDIENCE.
PRM = "https://catalog.test/.well-known/oauth-protected-resource/admin/v1"
INSUFFICIENT = (
    f'Bearer realm="catalog", error="insufficient_scope", scope="catalog:admin", resource_metadata="{PRM}"'
)


def challenge(error: str) -> str:
    return f'Bearer realm="catalog", error="{error}", scope="catalog:admin", resource_metadata="{PRM}"'


@pytest.fixture
def issuer(tmp_path: Path) -> Issuer:
    return Issuer(tmp_path)


@pytest.fixture
def settings(database_url: str, tmp_path: Path, issuer: Issuer, request: pytest.FixtureRequest) -> Settings:
    """The admin-test settings with an OAuth issuer configured (overrides conftest's); a test may
    change fields by parametrizing this fixture indirectly with a dict."""
    values = {
        "database_url": database_url,
        "home": tmp_path / "home",
        "admin_token": ADMIN_TOKEN,
        "secret_key": "test-secret-key-0123456789abcdef",
        "public_tenant": None,
        "oauth_issuer": ISSUER,
        "oauth_audience": AUDIENCE,
        "oauth_jwks": str(issuer.jwks_path),
        "rate_limit_per_minute": 0,
    }
    return Settings(**{**values, **getattr(request, "param", {})})


# Every route a tenant admin may call, read and write (a body that would be valid for an admin).
TENANT_ROUTES = [
    ("GET", "/tenants", None),
    ("GET", "/tenants/{slug}/resources", None),
    ("POST", "/tenants/{slug}/resources", {"uri": "test://x", "name": "x", "text": "x"}),
    ("GET", "/tenants/{slug}/templates", None),
    ("GET", "/tenants/{slug}/grants", None),
    ("POST", "/tenants/{slug}/grants", {"scope": "s", "tag": "t"}),
    ("GET", "/tenants/{slug}/tokens", None),
    ("POST", "/tenants/{slug}/tokens", {"scopes": ["s"], "admin": True}),
    ("GET", "/tenants/{slug}/audit", None),
    ("GET", "/tenants/{slug}/changes", None),
]


async def _call(http: httpx.AsyncClient, method: str, path: str, body: object, slug: str, token: str):
    return await http.request(method, API + path.format(slug=slug), json=body, headers=bearer(token))


async def test_no_token_is_401_naming_the_metadata_without_an_error_code(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    """AUTH-3 (docs/requirements.toml)."""
    for method, path, body in TENANT_ROUTES:
        response = await anon.request(method, API + path.format(slug=tenant), json=body)
        problem = assert_problem(response, 401)
        # No error code (nothing was wrong with a credential), the scope to ask for (AUTH-4).
        assert response.headers["www-authenticate"] == (
            f'Bearer realm="catalog", scope="catalog:admin", resource_metadata="{PRM}"'
        )
        assert "bearer token" in problem["detail"]


async def test_the_challenge_names_metadata_that_is_served_auth_2_auth_4(anon: httpx.AsyncClient) -> None:
    """AUTH-1, AUTH-13 (docs/requirements.toml)."""
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        metadata = await anon.get(path)
        assert metadata.status_code == 200
        assert metadata.json()["resource"] == AUDIENCE
        assert metadata.json()["authorization_servers"] == [ISSUER]
    admin = await anon.get(PRM.removeprefix("https://catalog.test"))
    assert admin.json() == {
        "resource": "https://catalog.test/admin/v1",
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "resource_name": "catalog admin API",
        "scopes_supported": ["catalog:admin"],
    }


@pytest.mark.parametrize(
    "settings", [{"oauth_issuer": None, "oauth_audience": None, "oauth_jwks": None}], indirect=True
)
async def test_without_oauth_no_metadata_is_advertised_anywhere_auth_2(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    """Without an authorization server there is nowhere to send a client: the challenge names no
    metadata and none is served (a client sent looking for one ends in a misleading error)."""
    response = await anon.get(f"{API}/tenants/{tenant}/resources")
    assert_problem(response, 401)
    assert response.headers["www-authenticate"] == 'Bearer realm="catalog"'
    for path in ("", "/mcp", "/admin/v1"):
        assert (await anon.get(f"/.well-known/oauth-protected-resource{path}")).status_code == 404


async def test_a_refused_token_is_401_invalid_token(
    anon: httpx.AsyncClient, tenant: str, issuer: Issuer
) -> None:
    foreign_audience = issuer.token(tenant=tenant, scope="catalog:admin", aud="https://elsewhere.test/mcp")
    for token in ("cat_not-a-token", foreign_audience, issuer.token(tenant="no-such-tenant")):
        response = await anon.get(f"{API}/tenants/{tenant}/resources", headers=bearer(token))
        assert_problem(response, 401)
        assert response.headers["www-authenticate"] == challenge("invalid_token")


async def test_a_malformed_authorization_header_is_400_invalid_request_auth_10(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    """AUTH-10, RFC 6750 section 3.1: ``invalid_request`` is a 400; a scheme this server does not
    support is no credential at all: 401 with a challenge and no error code."""
    for header in ("Bearer", "Bearer   ", "Bearer a b", "bearer cat_x extra"):
        response = await anon.get(f"{API}/tenants/{tenant}/resources", headers={"Authorization": header})
        problem = assert_problem(response, 400)
        assert problem["title"] == "Bad request" and "'Bearer <token>'" in problem["detail"]
        assert response.headers["www-authenticate"] == challenge("invalid_request")
    for header in ("Basic dXNlcjpwYXNz", "Digest username=x", ""):
        response = await anon.get(f"{API}/tenants/{tenant}/resources", headers={"Authorization": header})
        problem = assert_problem(response, 401)
        assert "only 'Authorization: Bearer <token>'" in problem["detail"]
        assert response.headers["www-authenticate"] == (
            f'Bearer realm="catalog", scope="catalog:admin", resource_metadata="{PRM}"'
        )


async def test_a_token_in_the_query_string_is_refused_even_with_a_valid_header(
    anon: httpx.AsyncClient, tenant: str
) -> None:
    """AUTH-7: a token in the URL is a method this server does not support: alone, 401 without an
    error code; beside a header (two methods at once), 400 ``invalid_request`` (RFC 6750 3.1)."""
    path = f"{API}/tenants/{tenant}/resources"
    response = await anon.get(path, params={"access_token": ADMIN_TOKEN})
    assert "Authorization header" in assert_problem(response, 401)["detail"]
    assert response.headers["www-authenticate"] == (
        f'Bearer realm="catalog", scope="catalog:admin", resource_metadata="{PRM}"'
    )
    response = await anon.get(path, params={"access_token": ADMIN_TOKEN}, headers=bearer(ADMIN_TOKEN))
    assert "Authorization header" in assert_problem(response, 400)["detail"]
    assert response.headers["www-authenticate"] == challenge("invalid_request")


async def test_opaque_token_without_admin_flag_is_403_insufficient_scope_on_every_route(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    """AUTH-8 (docs/requirements.toml)."""
    token = (await mint_token(client, tenant, scopes=["read", "write"]))["token"]
    # Its own tenant, another existing tenant and one that does not exist: the same answer.
    assert (await client.post(f"{API}/tenants", json={"slug": "other"})).status_code == 201
    for slug in (tenant, "other", "no-such-tenant"):
        for method, path, body in TENANT_ROUTES:
            response = await _call(anon, method, path, body, slug, token)
            problem = assert_problem(response, 403)
            assert response.headers["www-authenticate"] == INSUFFICIENT, (method, path)
            assert "catalog:admin" in problem["detail"]
    # Nothing was written by the refused POSTs.
    listed = await client.get(f"{API}/tenants/{tenant}/resources")
    assert listed.json()["items"] == []


async def test_jwt_without_the_admin_scope_is_403_insufficient_scope(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str, issuer: Issuer
) -> None:
    """AUTH-8 (docs/requirements.toml)."""
    for claims in ({"scope": "read write"}, {"scp": ["read"]}, {}):
        token = issuer.token(tenant=tenant, **claims)
        for method, path, body in TENANT_ROUTES:
            response = await _call(anon, method, path, body, tenant, token)
            assert_problem(response, 403)
            assert response.headers["www-authenticate"] == INSUFFICIENT


async def test_jwt_with_the_admin_scope_administers_its_tenant_only(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str, issuer: Issuer
) -> None:
    assert (await client.post(f"{API}/tenants", json={"slug": "other"})).status_code == 201
    token = issuer.token(tenant=tenant, scope="read catalog:admin")
    created = await _call(anon, "POST", "/tenants/{slug}/resources", TENANT_ROUTES[2][2], tenant, token)
    assert created.status_code == 201, created.text
    listed = await _call(anon, "GET", "/tenants", None, tenant, token)
    assert [t["slug"] for t in listed.json()["items"]] == [tenant]
    # Admin of acme, not of other: a plain 403 without a challenge (no scope would help).
    for slug in ("other", "no-such-tenant"):
        response = await _call(anon, "GET", "/tenants/{slug}/resources", None, slug, token)
        assert_problem(response, 403)
        assert "www-authenticate" not in response.headers


async def test_tenant_admin_gets_a_plain_403_on_platform_routes(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    token = (await mint_token(client, tenant, admin=True))["token"]
    for method, path, body in [("POST", "/tenants", {"slug": "new"}), ("DELETE", f"/tenants/{tenant}", None)]:
        response = await anon.request(method, API + path, json=body, headers=bearer(token))
        assert_problem(response, 403)
        assert "www-authenticate" not in response.headers
    assert [t["slug"] for t in (await client.get(f"{API}/tenants")).json()["items"]] == [tenant]


@pytest.mark.parametrize("settings", [{"oauth_admin_scope": "catalog:curate"}], indirect=True)
async def test_the_challenge_names_the_configured_admin_scope(
    anon: httpx.AsyncClient, client: httpx.AsyncClient, tenant: str, issuer: Issuer
) -> None:
    for token in ((await mint_token(client, tenant, scopes=["read"]))["token"], issuer.token(tenant=tenant)):
        response = await anon.get(f"{API}/tenants/{tenant}/grants", headers=bearer(token))
        assert_problem(response, 403)
        assert response.headers["www-authenticate"] == (
            f'Bearer realm="catalog", error="insufficient_scope", scope="catalog:curate", resource_metadata="{PRM}"'
        )
    # ... and that scope, not the default one, is what makes a JWT an admin.
    assert (
        await anon.get(
            f"{API}/tenants/{tenant}/grants",
            headers=bearer(issuer.token(tenant=tenant, scope="catalog:admin")),
        )
    ).status_code == 403
    curator = issuer.token(tenant=tenant, scope="catalog:curate")
    assert (await anon.get(f"{API}/tenants/{tenant}/grants", headers=bearer(curator))).status_code == 200
