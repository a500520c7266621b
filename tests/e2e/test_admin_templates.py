"""Resource templates through the admin API: CRUD with RFC 6570 and body validation."""

from __future__ import annotations

import httpx

from tests.admin_support import API, assert_problem


def templates(slug: str, suffix: str = "") -> str:
    return f"{API}/tenants/{slug}/templates{suffix}"


async def test_create_get_list_patch_delete(client: httpx.AsyncClient, tenant: str, db) -> None:
    body = {
        "uriTemplate": "test://template/{id}/data",
        "name": "data",
        "mimeType": "application/json",
        "text": '{"id": "{id}"}',
        "tags": ["t"],
    }
    created = await client.post(templates(tenant), json=body)
    assert created.status_code == 201
    out = created.json()
    tid = out["id"]
    assert {k: out[k] for k in body} == body and out["version"] == 1
    assert created.headers["location"] == templates(tenant, f"/{tid}")
    assert (await client.get(templates(tenant, f"/{tid}"))).json() == out

    await client.post(templates(tenant), json={"uriTemplate": "test://a/{x}", "name": "a"})
    listed = (await client.get(templates(tenant))).json()
    assert [t["uriTemplate"] for t in listed["items"]] == ["test://a/{x}", "test://template/{id}/data"]
    first = (await client.get(templates(tenant), params={"limit": 1})).json()
    second = (await client.get(templates(tenant), params={"limit": 1, "cursor": first["nextCursor"]})).json()
    assert [t["uriTemplate"] for t in first["items"] + second["items"]] == [
        "test://a/{x}",
        "test://template/{id}/data",
    ]

    patched = await client.patch(templates(tenant, f"/{tid}"), json={"title": "Data", "text": None})
    assert patched.status_code == 200
    assert (
        patched.json()["title"] == "Data" and "text" not in patched.json() and patched.json()["version"] == 2
    )

    assert (await client.delete(templates(tenant, f"/{tid}"))).status_code == 204
    assert_problem(await client.get(templates(tenant, f"/{tid}")), 404)
    actions = [
        r["action"]
        for r in await db.fetch("SELECT action FROM audit_log WHERE target_id = $1 ORDER BY id", tid)
    ]
    assert actions == ["template.create", "template.update", "template.delete"]
    feed = await db.fetch(
        "SELECT op FROM change_feed WHERE kind = 'template' AND uri = $1 ORDER BY seq", body["uriTemplate"]
    )
    assert [f["op"] for f in feed] == ["created", "updated", "deleted"]


async def test_invalid_uri_template_is_422(client: httpx.AsyncClient, tenant: str) -> None:
    for bad in ["test://{unclosed", "no-scheme/{x}", "test://{x}{x", "test://a\x01/{x}", "test://{a b}"]:
        response = await client.post(templates(tenant), json={"uriTemplate": bad, "name": "n"})
        assert_problem(response, 422, "/uriTemplate")


async def test_body_with_an_unknown_placeholder_is_422(client: httpx.AsyncClient, tenant: str) -> None:
    response = await client.post(
        templates(tenant), json={"uriTemplate": "test://a/{x}", "name": "a", "text": "hello {y}"}
    )
    problem = assert_problem(response, 422, "/text")
    assert "{y}" in problem["errors"][0]["detail"]
    tid = (await client.post(templates(tenant), json={"uriTemplate": "test://a/{x}", "name": "a"})).json()[
        "id"
    ]
    assert_problem(await client.patch(templates(tenant, f"/{tid}"), json={"text": "{z}"}), 422, "/text")
    # Changing the template so the body's variable disappears is refused too.
    await client.patch(templates(tenant, f"/{tid}"), json={"text": "{x}"})
    assert_problem(
        await client.patch(templates(tenant, f"/{tid}"), json={"uriTemplate": "test://b/{w}"}), 422, "/text"
    )


async def test_duplicate_template_is_409(client: httpx.AsyncClient, tenant: str) -> None:
    body = {"uriTemplate": "test://d/{x}", "name": "d"}
    assert (await client.post(templates(tenant), json=body)).status_code == 201
    assert_problem(await client.post(templates(tenant), json=body), 409, "/uriTemplate")
    other = (await client.post(templates(tenant), json={"uriTemplate": "test://e/{x}", "name": "e"})).json()
    assert_problem(
        await client.patch(templates(tenant, f"/{other['id']}"), json={"uriTemplate": "test://d/{x}"}), 409
    )


async def test_unknown_template_ids(client: httpx.AsyncClient, tenant: str) -> None:
    for method in ("GET", "DELETE"):
        assert_problem(await client.request(method, templates(tenant, "/777")), 404)
    assert_problem(await client.patch(templates(tenant, "/777"), json={"name": "x"}), 404)
    assert_problem(await client.get(templates(tenant, f"/{2**64}")), 422, "#/path/id")
    assert_problem(await client.patch(templates(tenant, "/1"), json={"name": None}), 422)
