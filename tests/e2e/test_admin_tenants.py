"""Tenants: create, list, delete with all their data in one transaction."""

from __future__ import annotations

import httpx

from catalog.db.models import TENANT_TABLES
from tests.admin_support import API, assert_problem, b64, create_resource, mint_token


async def test_create_tenant_answers_201_with_slug_name_and_time(client: httpx.AsyncClient) -> None:
    response = await client.post(f"{API}/tenants", json={"slug": "acme-2", "name": "Acme Two"})
    assert response.status_code == 201
    body = response.json()
    assert body["slug"] == "acme-2" and body["name"] == "Acme Two" and body["createdAt"].endswith("Z")
    assert response.headers["location"] == f"{API}/tenants/acme-2"
    unnamed = await client.post(f"{API}/tenants", json={"slug": "plain"})
    assert unnamed.json()["name"] == "plain"


async def test_duplicate_slug_is_409(client: httpx.AsyncClient, tenant: str) -> None:
    assert_problem(await client.post(f"{API}/tenants", json={"slug": tenant}), 409, "/slug")


async def test_invalid_slug_is_422_pointing_at_slug(client: httpx.AsyncClient) -> None:
    for slug in ["", "UPPER", "-lead", "a" * 64, "sp ace", "ü"]:
        assert_problem(await client.post(f"{API}/tenants", json={"slug": slug}), 422, "/slug")
    assert_problem(await client.post(f"{API}/tenants", json={"slug": "ok", "extra": 1}), 422, "/extra")


async def test_list_tenants_in_slug_order(client: httpx.AsyncClient) -> None:
    for slug in ("zeta", "alpha"):
        await client.post(f"{API}/tenants", json={"slug": slug})
    body = (await client.get(f"{API}/tenants")).json()
    assert [t["slug"] for t in body["items"]] == ["alpha", "zeta"]
    assert "nextCursor" not in body


async def test_deleting_a_tenant_removes_every_row_of_it_and_nothing_else(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    await client.post(f"{API}/tenants", json={"slug": "keep"})
    for slug in (tenant, "keep"):
        text = (await create_resource(client, slug, uri="test://text", text="t", tags=["kept"])).json()
        await create_resource(client, slug, uri="test://blob", blob=b64(b"\x00\x01"))
        patched = await client.patch(f"{API}/tenants/{slug}/resources/{text['id']}", json={"title": "v2"})
        assert patched.json()["version"] == 2
        await client.post(
            f"{API}/tenants/{slug}/templates", json={"uriTemplate": "test://t/{x}", "name": "t"}
        )
        await client.post(f"{API}/tenants/{slug}/grants", json={"scope": "s", "uriPrefix": "test://"})
        await mint_token(client, slug, scopes=["s"])
    doomed = await db.fetchval("SELECT id FROM tenants WHERE slug = $1", tenant)
    kept = await db.fetchval("SELECT id FROM tenants WHERE slug = 'keep'")
    for tenant_id in (doomed, kept):  # a 2025-11-25 session, waiting for a client's answer
        await db.execute(
            "INSERT INTO mcp_sessions (tenant_id, id_hash, principal, protocol_version, client_params)"
            " VALUES ($1, '\\x01', 'p', '2025-11-25', '{}')",
            tenant_id,
        )
        await db.execute(
            "INSERT INTO mcp_session_requests (tenant_id, session_hash, request_id) VALUES ($1, '\\x01', 'r')",
            tenant_id,
        )
    for table in TENANT_TABLES:
        assert await db.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", doomed) > 0, table

    response = await client.delete(f"{API}/tenants/{tenant}")
    assert response.status_code == 204 and response.content == b""

    for table in TENANT_TABLES:
        assert await db.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", doomed) == 0, table
        assert await db.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", kept) > 0, table
    assert await db.fetchval("SELECT count(*) FROM tenants WHERE slug = $1", tenant) == 0
    assert_problem(await client.get(f"{API}/tenants/{tenant}/resources"), 404)


async def test_deleting_an_unknown_tenant_is_404(client: httpx.AsyncClient) -> None:
    assert_problem(await client.delete(f"{API}/tenants/nobody"), 404)
    assert_problem(await client.delete(f"{API}/tenants/NOT%20A%20SLUG%00"), 404)


async def test_routes_of_an_unknown_tenant_are_404(client: httpx.AsyncClient) -> None:
    for path in ["resources", "blobs/" + "0" * 64, "templates", "grants", "tokens", "audit", "changes"]:
        assert_problem(await client.get(f"{API}/tenants/ghost/{path}"), 404)
