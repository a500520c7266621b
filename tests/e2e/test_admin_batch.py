"""Several resources at once: ``POST /admin/v1/tenants/{slug}/resources/batch`` (delete, tag,
grant), one transaction each, all or nothing, audited item by item, confined to the tenant."""

from __future__ import annotations

import httpx

from tests.admin_support import API, assert_problem, bearer, create_resource, mint_token


def batch_path(slug: str) -> str:
    return f"{API}/tenants/{slug}/resources/batch"


async def make(client: httpx.AsyncClient, slug: str, *names: str, **body: object) -> list[int]:
    made = []
    for name in names:
        response = await create_resource(client, slug, uri=f"file:///b/{name}", text=name, **body)
        made.append(int(response.json()["id"]))
    return made


async def uris(client: httpx.AsyncClient, slug: str) -> list[str]:
    items = (await client.get(f"{API}/tenants/{slug}/resources", params={"limit": 100})).json()["items"]
    return [item["uri"] for item in items]


async def test_a_batch_delete_removes_every_resource_and_audits_each(
    client: httpx.AsyncClient, tenant: str
) -> None:
    a, b, c = await make(client, tenant, "a", "b", "c")
    response = await client.post(batch_path(tenant), json={"action": "delete", "ids": [c, a, c]})
    assert response.status_code == 200, response.text
    assert response.json() == {"action": "delete", "ids": [c, a], "changed": 2}
    assert await uris(client, tenant) == ["file:///b/b"]
    for gone in (a, c):
        assert (await client.get(f"{API}/tenants/{tenant}/resources/{gone}")).status_code == 404
    audit = (await client.get(f"{API}/tenants/{tenant}/audit", params={"limit": 2})).json()["items"]
    assert sorted((e["action"], e["uri"]) for e in audit) == [
        ("resource.delete", "file:///b/a"),
        ("resource.delete", "file:///b/c"),
    ]
    feed = (await client.get(f"{API}/tenants/{tenant}/changes", params={"after": 0})).json()["items"]
    # In the order given, each once.
    assert [(e["op"], e["uri"]) for e in feed if e["op"] == "deleted"] == [
        ("deleted", "file:///b/c"),
        ("deleted", "file:///b/a"),
    ]
    assert b  # untouched, still listed above


async def test_a_batch_tag_adds_the_tag_once_and_leaves_tagged_resources_alone(
    client: httpx.AsyncClient, tenant: str
) -> None:
    (plain,) = await make(client, tenant, "plain")
    (tagged,) = await make(client, tenant, "tagged", tags=["keep", "review"])
    response = await client.post(
        batch_path(tenant), json={"action": "tag", "tag": "review", "ids": [plain, tagged]}
    )
    assert response.json() == {"action": "tag", "ids": [plain, tagged], "changed": 1}
    first = (await client.get(f"{API}/tenants/{tenant}/resources/{plain}")).json()
    second = (await client.get(f"{API}/tenants/{tenant}/resources/{tagged}")).json()
    assert (first["tags"], first["version"]) == (["review"], 2)
    assert (second["tags"], second["version"]) == (["keep", "review"], 1)
    audit = (await client.get(f"{API}/tenants/{tenant}/audit", params={"limit": 1})).json()["items"][0]
    assert (audit["action"], audit["uri"]) == ("resource.update", "file:///b/plain")


async def test_a_batch_grant_gives_the_scope_each_uri_and_keeps_an_existing_grant(
    client: httpx.AsyncClient, tenant: str
) -> None:
    one, two, _ = await make(client, tenant, "one", "two", "three")
    existing = await client.post(
        f"{API}/tenants/{tenant}/grants", json={"scope": "agents", "uri": "file:///b/one"}
    )
    assert existing.status_code == 201
    response = await client.post(
        batch_path(tenant), json={"action": "grant", "scope": "agents", "ids": [one, two]}
    )
    assert response.json() == {"action": "grant", "ids": [one, two], "changed": 1}
    grants = (await client.get(f"{API}/tenants/{tenant}/grants")).json()["items"]
    assert sorted((g["scope"], g.get("uri")) for g in grants) == [
        ("agents", "file:///b/one"),
        ("agents", "file:///b/two"),
    ]
    preview = (await client.get(f"{API}/tenants/{tenant}/grants/preview", params={"scope": "agents"})).json()
    assert [i["uri"] for i in preview["items"]] == ["file:///b/one", "file:///b/two"]


async def test_an_unknown_id_refuses_the_whole_batch_naming_it_and_changes_nothing(
    client: httpx.AsyncClient, tenant: str
) -> None:
    a, b = await make(client, tenant, "a", "b")
    before = (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"]
    for body in (
        {"action": "delete", "ids": [a, 999_999, b]},
        {"action": "tag", "tag": "x", "ids": [a, b, 999_999]},
        {"action": "grant", "scope": "s", "ids": [999_999, a]},
    ):
        response = await client.post(batch_path(tenant), json=body)
        pointer = f"/ids/{body['ids'].index(999_999)}"  # type: ignore[union-attr]
        problem = assert_problem(response, 422, pointer)
        assert [e["pointer"] for e in problem["errors"]] == [pointer]
        assert "999999" in problem["errors"][0]["detail"]
    assert await uris(client, tenant) == ["file:///b/a", "file:///b/b"]
    for rid in (a, b):
        assert (await client.get(f"{API}/tenants/{tenant}/resources/{rid}")).json()["tags"] == []
    assert (await client.get(f"{API}/tenants/{tenant}/grants")).json()["items"] == []
    assert (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"] == before


async def test_a_resource_that_cannot_take_the_tag_refuses_the_batch_before_any_is_tagged(
    client: httpx.AsyncClient, tenant: str
) -> None:
    (fresh,) = await make(client, tenant, "fresh")
    (full,) = await make(client, tenant, "full", tags=[f"t{i}" for i in range(64)])
    response = await client.post(
        batch_path(tenant), json={"action": "tag", "tag": "new", "ids": [fresh, full]}
    )
    assert_problem(response, 422, "/ids/1")
    stored = (await client.get(f"{API}/tenants/{tenant}/resources/{fresh}")).json()
    assert (stored["tags"], stored["version"]) == ([], 1)


async def test_a_tenant_admin_cannot_act_on_another_tenants_ids(
    client: httpx.AsyncClient, tenant: str
) -> None:
    other = "other-batch"
    assert (await client.post(f"{API}/tenants", json={"slug": other})).status_code == 201
    (mine,) = await make(client, tenant, "mine")
    (theirs,) = await make(client, other, "theirs")
    token = (await mint_token(client, tenant, admin=True))["token"]
    headers = bearer(token)
    # Their id through my tenant's route: not a resource of mine, refused by name, nothing done.
    response = await client.post(
        batch_path(tenant), json={"action": "delete", "ids": [mine, theirs]}, headers=headers
    )
    assert_problem(response, 422, "/ids/1")
    # Through their tenant's route: not my tenant at all.
    response = await client.post(
        batch_path(other), json={"action": "delete", "ids": [theirs]}, headers=headers
    )
    assert_problem(response, 403)
    response = await client.post(
        batch_path(tenant), json={"action": "tag", "tag": "x", "ids": [theirs]}, headers=headers
    )
    assert_problem(response, 422, "/ids/0")
    assert await uris(client, tenant) == ["file:///b/mine"]
    assert await uris(client, other) == ["file:///b/theirs"]
    stored = (await client.get(f"{API}/tenants/{other}/resources/{theirs}")).json()
    assert (stored["tags"], stored["version"]) == ([], 1)
    # My own ids through my route work with the same token.
    response = await client.post(
        batch_path(tenant), json={"action": "delete", "ids": [mine]}, headers=headers
    )
    assert response.json() == {"action": "delete", "ids": [mine], "changed": 1}


async def test_malformed_batches_are_422_at_the_field(client: httpx.AsyncClient, tenant: str) -> None:
    (rid,) = await make(client, tenant, "a")
    cases = [
        ({"action": "delete", "ids": []}, "/ids"),
        ({"action": "delete", "ids": list(range(1, 502))}, "/ids"),
        ({"action": "delete", "ids": [0]}, "/ids/0"),
        ({"action": "delete", "ids": [2**63]}, "/ids/0"),
        ({"action": "delete", "ids": ["x"]}, "/ids/0"),
        ({"action": "rename", "ids": [rid]}, "/action"),
        ({"action": "tag", "ids": [rid]}, "/tag"),
        ({"action": "tag", "tag": "", "ids": [rid]}, "/tag"),
        ({"action": "grant", "ids": [rid]}, "/scope"),
        ({"action": "grant", "scope": "has space", "ids": [rid]}, "/scope"),
        ({"action": "delete", "tag": "x", "ids": [rid]}, "/tag"),
        ({"action": "delete", "ids": [rid], "extra": 1}, "/extra"),
    ]
    for body, pointer in cases:
        assert_problem(await client.post(batch_path(tenant), json=body), 422, pointer)
    assert await uris(client, tenant) == ["file:///b/a"]
