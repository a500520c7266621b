"""Grants through the admin API: exactly one selector, list, delete."""

from __future__ import annotations

import httpx

from .test_admin_support import (  # noqa: F401  (fixtures)
    API,
    app,
    assert_problem,
    client,
    db,
    tenant,
)


def grants(slug: str, suffix: str = "") -> str:
    return f"{API}/tenants/{slug}/grants{suffix}"


async def test_create_one_grant_per_selector_and_list_them(client: httpx.AsyncClient, tenant: str) -> None:
    bodies = [
        {"scope": "reader", "uri": "test://one"},
        {"scope": "reader", "uriPrefix": "File:///Project/"},
        {"scope": "public", "tag": "shared"},
    ]
    created = []
    for body in bodies:
        response = await client.post(grants(tenant), json=body)
        assert response.status_code == 201
        created.append(response.json())
    assert created[1]["uriPrefix"] == "file:///Project/"  # canonical form
    assert all(isinstance(g["id"], int) and g["createdAt"] for g in created)
    listed = (await client.get(grants(tenant))).json()["items"]
    assert listed == created


async def test_a_grant_needs_exactly_one_selector(client: httpx.AsyncClient, tenant: str) -> None:
    for body in [
        {"scope": "s"},
        {"scope": "s", "uri": "test://a", "tag": "t"},
        {"scope": "s", "uri": "test://a", "uriPrefix": "test://"},
    ]:
        problem = assert_problem(await client.post(grants(tenant), json=body), 422)
        assert "exactly one of uri, uriPrefix, tag" in problem["errors"][0]["detail"]
    assert_problem(await client.post(grants(tenant), json={"scope": "has space", "tag": "t"}), 422, "/scope")
    assert_problem(await client.post(grants(tenant), json={"scope": "s", "uri": "nope"}), 422, "/uri")
    assert_problem(
        await client.post(grants(tenant), json={"scope": "s", "uriPrefix": "file:///a/../"}),
        422,
        "/uriPrefix",
    )


async def test_same_grant_twice_is_409(client: httpx.AsyncClient, tenant: str) -> None:
    body = {"scope": "s", "tag": "t"}
    assert (await client.post(grants(tenant), json=body)).status_code == 201
    assert_problem(await client.post(grants(tenant), json=body), 409)


async def test_delete_grant_then_404(client: httpx.AsyncClient, tenant: str, db) -> None:
    gid = (await client.post(grants(tenant), json={"scope": "s", "uriPrefix": "test://"})).json()["id"]
    assert (await client.delete(grants(tenant, f"/{gid}"))).status_code == 204
    assert (await client.get(grants(tenant))).json()["items"] == []
    assert_problem(await client.delete(grants(tenant, f"/{gid}")), 404)
    assert_problem(await client.delete(grants(tenant, "/abc")), 422, "#/path/id")
    ops = [r["op"] for r in await db.fetch("SELECT op FROM change_feed WHERE kind = 'grant' ORDER BY seq")]
    assert ops == ["created", "deleted"]
