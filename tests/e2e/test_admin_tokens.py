"""Tokens through the admin API: shown once, stored as a hash, listed, revoked."""

from __future__ import annotations

import hashlib

import httpx

from tests.admin_support import API, assert_problem, bearer


def tokens(slug: str, suffix: str = "") -> str:
    return f"{API}/tenants/{slug}/tokens{suffix}"


async def test_token_is_returned_once_and_stored_only_as_a_hash(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    response = await client.post(
        tokens(tenant),
        json={"scopes": ["b", "a"], "admin": True, "name": "ci", "expiresAt": "2999-01-01T00:00:00Z"},
    )
    assert response.status_code == 201
    minted = response.json()
    assert minted["token"].startswith("cat_") and len(minted["token"]) >= 40
    assert minted["scopes"] == ["a", "b"] and minted["admin"] is True and minted["name"] == "ci"
    assert minted["expiresAt"] == "2999-01-01T00:00:00Z"
    row = await db.fetchrow("SELECT token_hash FROM tokens WHERE id = $1", minted["id"])
    assert bytes(row["token_hash"]) == hashlib.sha256(minted["token"].encode()).digest()
    listed = (await client.get(tokens(tenant))).json()["items"]
    assert [t["id"] for t in listed] == [minted["id"]]
    assert "token" not in listed[0] and minted["token"] not in str(listed)


async def test_invalid_token_requests_are_422(client: httpx.AsyncClient, tenant: str) -> None:
    assert_problem(
        await client.post(tokens(tenant), json={"expiresAt": "2000-01-01T00:00:00Z"}), 422, "/expiresAt"
    )
    assert_problem(
        await client.post(tokens(tenant), json={"expiresAt": "2999-01-01T00:00:00"}), 422, "/expiresAt"
    )
    assert_problem(await client.post(tokens(tenant), json={"scopes": ["no spaces"]}), 422, "/scopes/0")
    assert_problem(await client.post(tokens(tenant), json={"admin": "maybe"}), 422, "/admin")


async def test_revoking_marks_the_token_and_refuses_it(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    minted = (await client.post(tokens(tenant), json={"admin": True})).json()
    assert (await anon.get(tokens(tenant), headers=bearer(minted["token"]))).status_code == 200
    assert (await client.delete(tokens(tenant, f"/{minted['id']}"))).status_code == 204
    listed = (await client.get(tokens(tenant))).json()["items"]
    assert listed[0]["revokedAt"]
    assert_problem(await anon.get(tokens(tenant), headers=bearer(minted["token"])), 401)
    assert_problem(await client.delete(tokens(tenant, f"/{minted['id']}")), 404)  # already revoked
    assert_problem(await client.delete(tokens(tenant, "/424242")), 404)


async def test_a_tenant_admin_token_can_mint_and_revoke_its_tenants_tokens(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    admin = (await client.post(tokens(tenant), json={"admin": True})).json()["token"]
    reader = await anon.post(tokens(tenant), json={"scopes": ["read"]}, headers=bearer(admin))
    assert reader.status_code == 201
    revoked = await anon.delete(tokens(tenant, f"/{reader.json()['id']}"), headers=bearer(admin))
    assert revoked.status_code == 204
