"""A resource's history through the admin API: its authors named, and its pages."""

from __future__ import annotations

import httpx

from tests.admin_support import API, assert_problem, bearer, create_resource, mint_token


def versions_path(slug: str, rid: int) -> str:
    return f"{API}/tenants/{slug}/resources/{rid}/versions"


async def test_history_names_each_author_by_token_name_admin_system_job_and_oauth_subject(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    rid = (await create_resource(client, tenant, uri="test://authored", text="v1")).json()["id"]
    editor = await mint_token(client, tenant, admin=True, name="Ada's laptop")
    unnamed = await mint_token(client, tenant, admin=True)
    for token, text in ((editor, "v2"), (unnamed, "v3")):
        changed = await client.patch(
            f"{API}/tenants/{tenant}/resources/{rid}", json={"text": text}, headers=bearer(token["token"])
        )
        assert changed.status_code == 200, changed.text
    # Versions written by an import and by an OAuth client, as they are recorded.
    for number, label in ((4, "system:import"), (5, "jwt:auth0|ada")):
        await db.execute(
            "INSERT INTO resource_versions (tenant_id, resource_id, version, uri, snapshot, text, changed_by)"
            " SELECT tenant_id, resource_id, $2, uri, snapshot, text, $3 FROM resource_versions"
            " WHERE resource_id = $1 AND version = 3",
            rid,
            number,
            label,
        )

    items = (await client.get(versions_path(tenant, rid))).json()["items"]
    assert [(v["version"], v["changedBy"], v["author"]) for v in items] == [
        (5, "jwt:auth0|ada", {"kind": "jwt", "name": "auth0|ada", "subject": "auth0|ada"}),
        (4, "system:import", {"kind": "system", "name": "import", "subject": "import"}),
        (
            3,
            f"token:{unnamed['id']}",
            {"kind": "token", "name": f"token #{unnamed['id']}", "tokenId": unnamed["id"], "revoked": False},
        ),
        (
            2,
            f"token:{editor['id']}",
            {"kind": "token", "name": "Ada's laptop", "tokenId": editor["id"], "revoked": False},
        ),
        (1, "platform-admin", {"kind": "platform", "name": "platform admin"}),
    ]


async def test_a_token_revoked_since_keeps_its_name_and_one_gone_is_a_deleted_token(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    rid = (await create_resource(client, tenant, uri="test://revoked", text="v1")).json()["id"]
    kept = await mint_token(client, tenant, admin=True, name="old ci")
    gone = await mint_token(client, tenant, admin=True, name="vanished")
    for token, text in ((kept, "v2"), (gone, "v3")):
        changed = await client.patch(
            f"{API}/tenants/{tenant}/resources/{rid}", json={"text": text}, headers=bearer(token["token"])
        )
        assert changed.status_code == 200, changed.text
    assert (await client.delete(f"{API}/tenants/{tenant}/tokens/{kept['id']}")).status_code == 204
    await db.execute("DELETE FROM tokens WHERE id = $1", gone["id"])

    authors = {
        v["version"]: v["author"] for v in (await client.get(versions_path(tenant, rid))).json()["items"]
    }
    assert authors[2] == {"kind": "token", "name": "old ci", "tokenId": kept["id"], "revoked": True}
    assert authors[3] == {"kind": "token", "name": f"deleted token #{gone['id']}", "tokenId": gone["id"]}
    one = (await client.get(f"{versions_path(tenant, rid)}/2")).json()
    assert (one["text"], one["author"]) == ("v2", authors[2])  # one version names its author alike


async def test_history_pages_newest_first_with_a_cursor_without_repeating_or_losing_versions(
    client: httpx.AsyncClient, tenant: str
) -> None:
    rid = (await create_resource(client, tenant, uri="test://long", text="0")).json()["id"]
    for n in range(1, 7):
        assert (
            await client.patch(f"{API}/tenants/{tenant}/resources/{rid}", json={"text": str(n)})
        ).status_code == 200
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        body = (await client.get(versions_path(tenant, rid), params=params)).json()
        seen += [v["version"] for v in body["items"]]
        pages += 1
        cursor = body.get("nextCursor")
        if not cursor:
            break
    assert seen == [7, 6, 5, 4, 3, 2, 1] and pages == 3


async def test_a_history_cursor_of_another_resource_or_damaged_is_422_problem(
    client: httpx.AsyncClient, tenant: str
) -> None:
    first = (await create_resource(client, tenant, uri="test://a", text="0")).json()["id"]
    second = (await create_resource(client, tenant, uri="test://b", text="0")).json()["id"]
    for rid in (first, second):
        assert (
            await client.patch(f"{API}/tenants/{tenant}/resources/{rid}", json={"text": "1"})
        ).status_code == 200
    cursor = (await client.get(versions_path(tenant, first), params={"limit": 1})).json()["nextCursor"]
    assert_problem(await client.get(versions_path(tenant, second), params={"cursor": cursor}), 422)
    assert_problem(await client.get(versions_path(tenant, first), params={"cursor": cursor + "x"}), 422)
    assert_problem(await client.get(versions_path(tenant, first), params={"limit": 0}), 422)
    assert [v["version"] for v in (await client.get(versions_path(tenant, first))).json()["items"]] == [2, 1]
