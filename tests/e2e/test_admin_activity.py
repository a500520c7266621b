"""The audit log and the change feed through the admin API."""

from __future__ import annotations

import httpx

from tests.admin_support import API, assert_problem, bearer, create_resource, mint_token


async def test_audit_is_newest_first_with_who_what_and_digests(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    rid = (await create_resource(client, tenant, uri="test://a", text="1")).json()["id"]
    token = await mint_token(client, tenant, admin=True)
    await anon.patch(
        f"{API}/tenants/{tenant}/resources/{rid}", json={"text": "2"}, headers=bearer(token["token"])
    )
    items = (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"]
    assert [(i["action"], i["principal"]) for i in items] == [
        ("resource.update", f"token:{token['id']}"),
        ("token.create", "platform-admin"),
        ("resource.create", "platform-admin"),
    ]
    update, _, create = items
    assert update["uri"] == "test://a" and update["targetKind"] == "resource" and update["targetId"] == rid
    assert update["beforeDigest"] == create["afterDigest"] and update["afterDigest"] != update["beforeDigest"]
    assert "beforeDigest" not in create
    assert items[1]["detail"] == {"scopes": [], "admin": True}
    assert all(i["at"].endswith("Z") for i in items)


async def test_audit_names_who_by_token_name_and_keeps_the_recorded_label(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str, db
) -> None:
    named = await mint_token(client, tenant, admin=True, name="Ada's laptop")
    gone = await mint_token(client, tenant, admin=True, name="vanished")
    for token, uri in ((named, "test://by-ada"), (gone, "test://by-gone")):
        made = await anon.post(
            f"{API}/tenants/{tenant}/resources",
            json={"uri": uri, "name": "n", "text": "t"},
            headers=bearer(token["token"]),
        )
        assert made.status_code == 201, made.text
    await db.execute("DELETE FROM tokens WHERE id = $1", gone["id"])
    items = (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"]
    assert [(i["principal"], i["author"]) for i in items] == [
        (
            f"token:{gone['id']}",
            {"kind": "token", "name": f"deleted token #{gone['id']}", "tokenId": gone["id"]},
        ),
        (
            f"token:{named['id']}",
            {"kind": "token", "name": "Ada's laptop", "tokenId": named["id"], "revoked": False},
        ),
        ("platform-admin", {"kind": "platform", "name": "platform admin"}),
        ("platform-admin", {"kind": "platform", "name": "platform admin"}),
    ]


async def test_audit_pages_with_a_signed_cursor(client: httpx.AsyncClient, tenant: str) -> None:
    for n in range(5):
        await create_resource(client, tenant, uri=f"test://r/{n}")
    seen, cursor = [], None
    while True:
        page = (
            await client.get(
                f"{API}/tenants/{tenant}/audit", params={"limit": 2, **({"cursor": cursor} if cursor else {})}
            )
        ).json()
        seen += [i["uri"] for i in page["items"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert seen == [f"test://r/{n}" for n in reversed(range(5))]
    assert_problem(await client.get(f"{API}/tenants/{tenant}/audit", params={"cursor": "forged.cursor"}), 422)


async def test_change_feed_after_seq(client: httpx.AsyncClient, tenant: str) -> None:
    feed = f"{API}/tenants/{tenant}/changes"
    empty = (await client.get(feed)).json()
    assert empty == {"items": [], "lastSeq": 0}
    rid = (await create_resource(client, tenant, uri="test://f", text="1")).json()["id"]
    await client.patch(f"{API}/tenants/{tenant}/resources/{rid}", json={"text": "2"})
    await client.post(f"{API}/tenants/{tenant}/grants", json={"scope": "s", "tag": "t"})
    await client.delete(f"{API}/tenants/{tenant}/resources/{rid}")

    everything = (await client.get(feed)).json()
    assert [(c["kind"], c.get("uri"), c["op"]) for c in everything["items"]] == [
        ("resource", "test://f", "created"),
        ("resource", "test://f", "updated"),
        ("grant", None, "created"),
        ("resource", "test://f", "deleted"),
    ]
    seqs = [c["seq"] for c in everything["items"]]
    assert seqs == sorted(seqs) and everything["lastSeq"] == seqs[-1] and "nextCursor" not in everything

    first = (await client.get(feed, params={"limit": 3})).json()
    assert [c["seq"] for c in first["items"]] == seqs[:3] and first["nextCursor"] == str(seqs[2])
    rest = (await client.get(feed, params={"after": first["nextCursor"]})).json()
    assert [c["seq"] for c in rest["items"]] == seqs[3:]
    caught_up = (await client.get(feed, params={"after": rest["lastSeq"]})).json()
    assert caught_up == {"items": [], "lastSeq": rest["lastSeq"]}
    for bad in ("-1", "x", str(2**63)):
        assert_problem(await client.get(feed, params={"after": bad}), 422, "#/query/after")


async def test_change_feed_is_per_tenant(client: httpx.AsyncClient, tenant: str) -> None:
    await client.post(f"{API}/tenants", json={"slug": "other"})
    await create_resource(client, "other", uri="test://theirs")
    await create_resource(client, tenant, uri="test://ours")
    items = (await client.get(f"{API}/tenants/{tenant}/changes")).json()["items"]
    assert [c["uri"] for c in items] == ["test://ours"]


async def test_a_tenants_change_feed_numbers_only_its_own_changes(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """Another tenant's writes leave no gap in this tenant's seq, and ?after=
    works as before."""
    await client.post(f"{API}/tenants", json={"slug": "busy"})
    for n in range(3):
        await create_resource(client, tenant, uri=f"test://ours/{n}")
        for m in range(5):
            await create_resource(client, "busy", uri=f"test://theirs/{n}/{m}")
    feed = f"{API}/tenants/{tenant}/changes"
    items = (await client.get(feed)).json()["items"]
    assert [c["seq"] for c in items] == [1, 2, 3]
    assert [c["uri"] for c in (await client.get(feed, params={"after": 1})).json()["items"]] == [
        "test://ours/1",
        "test://ours/2",
    ]
    assert [
        c["seq"]
        for c in (await client.get(f"{API}/tenants/busy/changes", params={"limit": 1000})).json()["items"]
    ] == list(range(1, 16))


# -- a complete audit log -----------------------------------------------------------------------------


async def test_every_write_is_audited_with_digests_before_and_after(
    client: httpx.AsyncClient, tenant: str
) -> None:
    base = f"{API}/tenants/{tenant}"
    uploaded = (
        await client.post(f"{base}/blobs", content=b"bytes", headers={"Content-Type": "image/png"})
    ).json()
    again = await client.post(f"{base}/blobs", content=b"bytes")  # deduplicated: nothing written
    assert again.status_code == 200
    template = (
        await client.post(f"{base}/templates", json={"uriTemplate": "test://t/{id}", "name": "t"})
    ).json()
    await client.patch(f"{base}/templates/{template['id']}", json={"title": "T"})
    await client.delete(f"{base}/templates/{template['id']}")
    grant = (await client.post(f"{base}/grants", json={"scope": "s", "tag": "x"})).json()
    await client.delete(f"{base}/grants/{grant['id']}")
    token = await mint_token(client, tenant, scopes=["s"])
    await client.delete(f"{base}/tokens/{token['id']}")
    inline = await create_resource(client, tenant, uri="test://inline", blob="aW5saW5l")  # b"inline"

    items = list(reversed((await client.get(f"{base}/audit")).json()["items"]))
    assert [i["action"] for i in items] == [
        "blob.create",
        "template.create",
        "template.update",
        "template.delete",
        "grant.create",
        "grant.delete",
        "token.create",
        "token.revoke",
        "resource.create",  # its inline blob is part of it: one write, one row (the digest covers it)
    ]
    blob, t_create, t_update, t_delete, g_create, g_delete, k_create, k_revoke, resource = items
    assert blob["afterDigest"] == uploaded["sha256"] and "beforeDigest" not in blob
    assert blob["detail"] == {"sha256": uploaded["sha256"], "size": 5, "mimeType": "image/png"}
    assert resource["targetId"] == inline.json()["id"] and resource["afterDigest"]
    # Each change starts from the state the previous one left, and ends in a different one.
    assert "beforeDigest" not in t_create and t_update["beforeDigest"] == t_create["afterDigest"]
    assert t_update["afterDigest"] != t_update["beforeDigest"] == t_create["afterDigest"]
    assert t_delete["beforeDigest"] == t_update["afterDigest"] and "afterDigest" not in t_delete
    assert g_delete["beforeDigest"] == g_create["afterDigest"] and "afterDigest" not in g_delete
    assert "beforeDigest" not in k_create and k_revoke["beforeDigest"] == k_create["afterDigest"]
    assert k_revoke["afterDigest"] not in (None, k_create["afterDigest"])


async def test_tenant_creation_and_deletion_are_in_the_platform_log_with_the_deleted_trail(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    tenant_id = (await client.get(f"{API}/audit")).json()["items"][0]["tenantId"]
    await create_resource(client, tenant, uri="test://a", text="1")
    admin = await mint_token(client, tenant, admin=True)
    # Only the platform admin reads the platform log.
    assert_problem(await anon.get(f"{API}/audit", headers=bearer(admin["token"])), 403)
    assert_problem(await anon.get(f"{API}/audit"), 401)
    trail = (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"]

    assert (await client.delete(f"{API}/tenants/{tenant}")).status_code == 204
    kept = (await client.get(f"{API}/audit", params={"tenantId": tenant_id})).json()["items"]
    assert [(i["action"], i["principal"]) for i in kept] == [
        ("tenant.delete", "platform-admin"),
        ("token.create", "platform-admin"),
        ("resource.create", "platform-admin"),
        ("tenant.create", "platform-admin"),
    ]
    assert {i["tenantSlug"] for i in kept} == {tenant} and {i["tenantId"] for i in kept} == {tenant_id}
    archived = kept[1:3]
    for field in ("action", "at", "uri", "targetId", "afterDigest", "detail"):
        assert [i.get(field) for i in archived] == [i.get(field) for i in trail], field
    assert kept[0]["beforeDigest"] == kept[-1]["afterDigest"]

    # The slug is free again; the new tenant's log starts empty, the old trail stays the platform's.
    await client.post(f"{API}/tenants", json={"slug": tenant})
    assert (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"] == []
    everything = (await client.get(f"{API}/audit", params={"limit": 2})).json()
    assert [i["action"] for i in everything["items"]] == ["tenant.create", "tenant.delete"]
    rest = (await client.get(f"{API}/audit", params={"cursor": everything["nextCursor"]})).json()["items"]
    assert [i["action"] for i in rest] == ["token.create", "resource.create", "tenant.create"]


async def test_the_platform_log_names_a_deleted_tenants_token_as_a_deleted_token(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, tenant: str
) -> None:
    tenant_id = (await client.get(f"{API}/audit")).json()["items"][0]["tenantId"]
    writer = await mint_token(client, tenant, admin=True, name="nightly sync")
    made = await anon.post(
        f"{API}/tenants/{tenant}/resources",
        json={"uri": "test://synced", "name": "n", "text": "t"},
        headers=bearer(writer["token"]),
    )
    assert made.status_code == 201, made.text
    assert (await client.delete(f"{API}/tenants/{tenant}")).status_code == 204
    kept = (await client.get(f"{API}/audit", params={"tenantId": tenant_id})).json()["items"]
    assert [(i["action"], i["author"]["name"]) for i in kept] == [
        ("tenant.delete", "platform admin"),
        ("resource.create", f"deleted token #{writer['id']}"),  # its tokens went with the tenant
        ("token.create", "platform admin"),
        ("tenant.create", "platform admin"),
    ]
    assert kept[1]["principal"] == f"token:{writer['id']}"
