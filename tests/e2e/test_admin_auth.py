"""Who may call the admin API: platform admin everywhere, tenant admin tokens on their own tenant."""

from __future__ import annotations

import httpx

from tests.admin_support import ADMIN_TOKEN, API, assert_problem, bearer, mint_token


async def test_no_token_is_401_with_www_authenticate(anon: httpx.AsyncClient, tenant: str) -> None:
    for method, path in [("GET", "/tenants"), ("POST", "/tenants"), ("GET", f"/tenants/{tenant}/resources")]:
        response = await anon.request(method, API + path, json={})
        assert_problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")


async def test_unknown_or_malformed_token_is_401(anon: httpx.AsyncClient, tenant: str) -> None:
    # Unknown or another scheme: 401; malformed Bearer: 400 invalid_request (RFC 6750 3.1, AUTH-10).
    for header, status in [
        ("Bearer cat_nope", 401),
        ("Basic dXNlcjpwYXNz", 401),
        ("Bearer", 400),
        ("Bearer a b", 400),
    ]:
        response = await anon.get(f"{API}/tenants/{tenant}/resources", headers={"Authorization": header})
        assert_problem(response, status)
        assert "www-authenticate" in response.headers


async def test_token_in_query_string_is_refused_even_when_valid(anon: httpx.AsyncClient, tenant: str) -> None:
    response = await anon.get(f"{API}/tenants", params={"access_token": ADMIN_TOKEN})
    problem = assert_problem(response, 401)
    assert "Authorization header" in problem["detail"]
    # ... even alongside a valid header: a URL holding a token is refused outright (two methods at
    # once: 400 invalid_request, RFC 6750 3.1).
    response = await anon.get(f"{API}/tenants", params={"access_token": "x"}, headers=bearer(ADMIN_TOKEN))
    assert_problem(response, 400)


async def test_tenant_admin_token_administers_its_own_tenant(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    token = (await mint_token(client, tenant, admin=True))["token"]
    created = await anon.post(
        f"{API}/tenants/{tenant}/resources",
        json={"uri": "test://mine", "name": "mine", "text": "hi"},
        headers=bearer(token),
    )
    assert created.status_code == 201
    listed = await anon.get(f"{API}/tenants/{tenant}/resources", headers=bearer(token))
    assert [item["uri"] for item in listed.json()["items"]] == ["test://mine"]
    grants = await anon.post(
        f"{API}/tenants/{tenant}/grants", json={"scope": "s", "tag": "t"}, headers=bearer(token)
    )
    assert grants.status_code == 201


async def test_tenant_admin_token_is_403_on_other_tenants_existing_or_not(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    assert (await client.post(f"{API}/tenants", json={"slug": "other"})).status_code == 201
    token = (await mint_token(client, tenant, admin=True))["token"]
    for slug in ("other", "does-not-exist"):
        response = await anon.get(f"{API}/tenants/{slug}/resources", headers=bearer(token))
        assert_problem(response, 403)  # the same answer: no learning which tenants exist


async def test_non_admin_tenant_token_is_403_everywhere(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    token = (await mint_token(client, tenant, admin=False, scopes=["read"]))["token"]
    for method, path in [
        ("GET", f"/tenants/{tenant}/resources"),
        ("POST", f"/tenants/{tenant}/tokens"),
        ("GET", f"/tenants/{tenant}/audit"),
        ("GET", "/tenants"),
    ]:
        response = await anon.request(method, API + path, json={}, headers=bearer(token))
        assert_problem(response, 403)


async def test_only_the_platform_admin_creates_and_deletes_tenants(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    token = (await mint_token(client, tenant, admin=True))["token"]
    assert_problem(await anon.post(f"{API}/tenants", json={"slug": "new"}, headers=bearer(token)), 403)
    assert_problem(await anon.delete(f"{API}/tenants/{tenant}", headers=bearer(token)), 403)
    assert (await client.get(f"{API}/tenants")).json()["items"][0]["slug"] == tenant


async def test_tenant_admin_lists_only_its_own_tenant(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    await client.post(f"{API}/tenants", json={"slug": "other"})
    token = (await mint_token(client, tenant, admin=True))["token"]
    response = await anon.get(f"{API}/tenants", headers=bearer(token))
    assert [t["slug"] for t in response.json()["items"]] == [tenant]
    everyone = await client.get(f"{API}/tenants")
    assert [t["slug"] for t in everyone.json()["items"]] == [tenant, "other"]


async def test_revoked_token_is_refused_on_the_next_request(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    minted = await mint_token(client, tenant, admin=True)
    path = f"{API}/tenants/{tenant}/resources"
    assert (await anon.get(path, headers=bearer(minted["token"]))).status_code == 200
    assert (await client.delete(f"{API}/tenants/{tenant}/tokens/{minted['id']}")).status_code == 204
    assert_problem(await anon.get(path, headers=bearer(minted["token"])), 401)


async def test_expired_token_is_refused_at_once(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str, db
) -> None:
    minted = await mint_token(client, tenant, admin=True, expiresAt="2999-01-01T00:00:00Z")
    path = f"{API}/tenants/{tenant}/resources"
    assert (await anon.get(path, headers=bearer(minted["token"]))).status_code == 200
    # Time passes (moved in the database, no sleeping): the expiry is now behind us.
    await db.execute("UPDATE tokens SET expires_at = now() - interval '1 second' WHERE id = $1", minted["id"])
    problem = assert_problem(await anon.get(path, headers=bearer(minted["token"])), 401)
    assert "expired" in problem["detail"]
