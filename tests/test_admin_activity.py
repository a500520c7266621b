"""The audit log and the change feed through the admin API."""

from __future__ import annotations

import httpx

from .test_admin_support import (  # noqa: F401  (fixtures)
    API,
    anon,
    app,
    assert_problem,
    bearer,
    client,
    create_resource,
    db,
    mint_token,
    tenant,
)


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
    """Issue 12 item 15: another tenant's writes leave no gap in this tenant's seq, and ?after=
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
