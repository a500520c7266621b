"""Grants through the admin API: exactly one selector, list, delete."""

from __future__ import annotations

import httpx

from tests.admin_support import API, assert_problem
from tests.mcp_helpers import envelope, modern_headers


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


# -- what a uriPrefix is -------------------------------------------------------------------------------


async def test_a_prefix_that_does_not_end_at_a_boundary_is_granted_with_a_warning(
    client: httpx.AsyncClient, tenant: str
) -> None:
    response = await client.post(grants(tenant), json={"scope": "s", "uriPrefix": "file:///a"})
    assert response.status_code == 201
    [warning] = response.json()["warnings"]
    assert "plain string prefix" in warning and "file:///a" in warning and "'/'" in warning
    # The grant itself is stored and listed as given; listings carry no warnings.
    listed = (await client.get(grants(tenant))).json()["items"]
    assert [g["uriPrefix"] for g in listed] == ["file:///a"] and "warnings" not in listed[0]


async def test_a_prefix_ending_at_a_boundary_has_no_warning(client: httpx.AsyncClient, tenant: str) -> None:
    for prefix in ("file:///a/", "test://x?", "test://x#", "urn:isbn:", "test://q?a=", "test://q?a=1&"):
        response = await client.post(grants(tenant), json={"scope": "s", "uriPrefix": prefix})
        assert response.status_code == 201, response.text
        assert "warnings" not in response.json(), prefix


async def test_a_prefix_is_a_plain_string_prefix_exactly_as_documented(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """``file:///a`` covers ``file:///ab`` too: what the README and the API docs now say."""
    for uri in ("file:///a/x", "file:///ab", "file:///b"):
        await client.post(f"{API}/tenants/{tenant}/resources", json={"uri": uri, "name": "x"})
    await client.post(grants(tenant), json={"scope": "s", "uriPrefix": "file:///a"})
    token = (await client.post(f"{API}/tenants/{tenant}/tokens", json={"scopes": ["s"]})).json()["token"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
    headers = {**modern_headers("resources/list"), "Authorization": f"Bearer {token}"}
    listed = (await client.post("/mcp", json=body, headers=headers)).json()["result"]["resources"]
    assert [r["uri"] for r in listed] == ["file:///a/x", "file:///ab"]
    schema = (await client.get("/openapi.json")).json()["components"]["schemas"]["GrantIn"]
    description = schema["properties"]["uriPrefix"]["description"]
    assert "string prefix" in description and "file:///ab" in description


async def test_a_slash_prefix_covers_its_directory_uri_in_the_scope_preview(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """``file:///imp/api/`` covers the directory resource ``file:///imp/api`` (what a directory
    import stores for the folder) and what is under it, not ``file:///imp/apix`` nor
    ``file:///imp/ap``; the grant earns no warning."""
    await client.post(
        f"{API}/tenants/{tenant}/resources",
        json={"uri": "file:///imp/api", "name": "api", "mimeType": "inode/directory"},
    )
    for uri in ("file:///imp/api/x.md", "file:///imp/apix", "file:///imp/ap", "file:///imp/api.md"):
        await client.post(f"{API}/tenants/{tenant}/resources", json={"uri": uri, "name": "x", "text": "x"})
    created = await client.post(grants(tenant), json={"scope": "api", "uriPrefix": "file:///imp/api/"})
    assert created.status_code == 201 and "warnings" not in created.json()
    preview = (await client.get(grants(tenant, "/preview"), params={"scope": "api"})).json()
    assert preview["count"] == 2
    assert [i["uri"] for i in preview["items"]] == ["file:///imp/api", "file:///imp/api/x.md"]
