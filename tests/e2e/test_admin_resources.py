"""Resources through the admin API: create, upsert, read, patch, delete, history, listings."""

from __future__ import annotations

import asyncio
import hashlib
import itertools

import httpx

from tests.admin_support import API, assert_problem, b64, create_resource


def path(slug: str, suffix: str = "") -> str:
    return f"{API}/tenants/{slug}/resources{suffix}"


# -- create ---------------------------------------------------------------------------------------


async def test_create_with_text_computes_size_and_answers_etag(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """RES-9 (docs/requirements.toml)."""
    response = await client.post(
        path(tenant),
        json={
            "uri": "file:///docs/./readme.md",
            "name": "readme",
            "text": "héllo",
            "mimeType": "text/markdown",
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert body["uri"] == "file:///docs/readme.md"  # normalised
    assert body["size"] == len("héllo".encode()) == 6
    assert body["version"] == 1 and body["tags"] == []
    assert body["annotations"]["lastModified"] == body["createdAt"]
    assert "text" not in body
    assert response.headers["etag"] == f'"{body["id"]}.1"'
    assert response.headers["location"] == path(tenant, f"/{body['id']}")


async def test_create_with_base64_blob_stores_the_bytes_apart(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    data = bytes(range(256))
    body = (
        await create_resource(client, tenant, uri="test://bin", blob=b64(data), mimeType="image/png")
    ).json()
    assert body["size"] == 256
    assert body["blobSha256"] == hashlib.sha256(data).hexdigest()
    stored = await db.fetchrow(
        "SELECT size, data, mime_type FROM blobs WHERE sha256 = $1", body["blobSha256"]
    )
    assert (stored["size"], bytes(stored["data"]), stored["mime_type"]) == (256, data, "image/png")
    read = await client.get(path(tenant, f"/{body['id']}"), params={"include": "content"})
    assert read.json()["blob"] == b64(data)


async def test_create_with_blob_sha256_of_an_uploaded_blob(client: httpx.AsyncClient, tenant: str) -> None:
    uploaded = await client.post(
        f"{API}/tenants/{tenant}/blobs", content=b"PDF bytes", headers={"Content-Type": "application/pdf"}
    )
    sha = uploaded.json()["sha256"]
    body = (await create_resource(client, tenant, uri="test://doc.pdf", blobSha256=sha)).json()
    assert body["blobSha256"] == sha and body["size"] == len(b"PDF bytes")


async def test_unknown_blob_sha256_is_422(client: httpx.AsyncClient, tenant: str, db) -> None:
    response = await client.post(path(tenant), json={"uri": "test://x", "name": "x", "blobSha256": "a" * 64})
    assert_problem(response, 422, "/blobSha256")
    assert await db.fetchval("SELECT count(*) FROM resources") == 0


async def test_text_and_blob_never_both(client: httpx.AsyncClient, tenant: str) -> None:
    """RES-12 (docs/requirements.toml)."""
    for content in ({"text": "a", "blob": b64(b"a")}, {"text": "a", "blobSha256": "0" * 64}):
        response = await client.post(path(tenant), json={"uri": "test://x", "name": "x", **content})
        problem = assert_problem(response, 422)
        assert "at most one of text, blob, blobSha256" in problem["errors"][0]["detail"]


async def test_directory_has_no_content(client: httpx.AsyncClient, tenant: str) -> None:
    """RES-21 (docs/requirements.toml)."""
    response = await client.post(
        path(tenant), json={"uri": "file:///d", "name": "d", "mimeType": "inode/directory", "text": "x"}
    )
    assert_problem(response, 422)
    ok = await create_resource(client, tenant, uri="file:///d", mimeType="inode/directory")
    assert ok.json()["mimeType"] == "inode/directory" and "size" not in ok.json()


async def test_invalid_uris_are_422_at_uri(client: httpx.AsyncClient, tenant: str) -> None:
    """RES-22 (docs/requirements.toml)."""
    for uri in [
        "no-scheme",
        "test://a\x01b",
        "test://a b",
        "test://" + "a" * 2050,
        "file:///a/../etc/passwd",
        "file:///a/%2e%2E/b",
        "",
    ]:
        response = await client.post(path(tenant), json={"uri": uri, "name": "x"})
        assert_problem(response, 422, "/uri")


async def test_invalid_metadata_is_422_with_field_pointers(client: httpx.AsyncClient, tenant: str) -> None:
    """RES-8, RES-26, RES-27 (docs/requirements.toml)."""
    cases = {
        "/annotations/audience/0": {"annotations": {"audience": ["robot"]}},
        "/annotations/priority": {"annotations": {"priority": 1.5}},
        "/annotations/lastModified": {"annotations": {"lastModified": "yesterday"}},
        "/icons/0/src": {"icons": [{"src": "http://insecure.example/icon.png"}]},
        "/icons/0/mimeType": {"icons": [{"src": "https://x.example/i.png", "mimeType": "png"}]},
        "/mimeType": {"mimeType": "text"},
        "/tags/0": {"tags": ["bad\ntag"]},
        "/size": {"size": 3},  # size is computed, never taken from input
        "/name": {"name": ""},
        "/blob": {"blob": "not base64!"},
        "/text": {"text": "nul\x00"},
    }
    for pointer, extra in cases.items():
        response = await client.post(path(tenant), json={"uri": "test://x", "name": "x", **extra})
        assert_problem(response, 422, pointer)
    naive = {"annotations": {"lastModified": "2025-01-12T15:00:58"}}
    assert_problem(
        await client.post(path(tenant), json={"uri": "test://x", "name": "x", **naive}),
        422,
        "/annotations/lastModified",
    )


async def test_valid_metadata_round_trips(client: httpx.AsyncClient, tenant: str) -> None:
    """RES-27 (docs/requirements.toml)."""
    body = {
        "uri": "test://full",
        "name": "full",
        "title": "Full",
        "description": "all fields",
        "mimeType": "text/plain; charset=utf-8",
        "icons": [{"src": "data:image/png;base64,iVBORw0KGgo=", "sizes": ["48x48"], "theme": "dark"}],
        "annotations": {"audience": ["user"], "priority": 0.5, "lastModified": "2025-01-12T15:00:58Z"},
        "tags": ["b", "a", "a"],
        "consentMessage": "ask first",
        "_meta": {"k": [1, {"x": None}]},
        "text": "t",
    }
    out = (await create_resource(client, tenant, **body)).json()
    for key in ("title", "description", "mimeType", "icons", "consentMessage", "_meta"):
        assert out[key] == body[key], key
    assert out["tags"] == ["a", "b"]
    assert out["annotations"] == {
        "audience": ["user"],
        "priority": 0.5,
        "lastModified": "2025-01-12T15:00:58Z",
    }


async def test_duplicate_uri_is_409(client: httpx.AsyncClient, tenant: str) -> None:
    await create_resource(client, tenant, uri="test://dup", text="1")
    response = await client.post(path(tenant), json={"uri": "TEST://dup", "name": "again"})
    assert_problem(response, 409, "/uri")


# -- upsert ---------------------------------------------------------------------------------------


async def test_put_creates_201_then_replaces_200_and_same_body_keeps_version(
    client: httpx.AsyncClient, tenant: str
) -> None:
    body = {"name": "p", "text": "one", "title": "T"}
    created = await client.put(path(tenant), params={"uri": "test://p"}, json=body)
    assert created.status_code == 201 and created.json()["version"] == 1
    assert created.json()["uri"] == "test://p"
    replaced = await client.put(path(tenant), params={"uri": "test://p"}, json={"name": "p", "text": "two"})
    assert replaced.status_code == 200
    out = replaced.json()
    assert out["version"] == 2 and out["size"] == 3 and "title" not in out  # wholly replaced
    assert replaced.headers["etag"] == f'"{out["id"]}.2"'
    again = await client.put(
        path(tenant), params={"uri": "test://p"}, json={"uri": "test://p", "name": "p", "text": "two"}
    )
    assert again.status_code == 200 and again.json()["version"] == 2


async def test_put_body_uri_must_match_query(client: httpx.AsyncClient, tenant: str) -> None:
    response = await client.put(
        path(tenant), params={"uri": "test://a"}, json={"uri": "test://b", "name": "b"}
    )
    assert_problem(response, 422, "/uri")
    assert_problem(
        await client.put(path(tenant), params={"uri": "nope"}, json={"name": "x"}), 422, "#/query/uri"
    )
    assert_problem(await client.put(path(tenant), json={"name": "x"}), 422, "#/query/uri")


async def test_put_honours_if_match(client: httpx.AsyncClient, tenant: str) -> None:
    stale = await client.put(
        path(tenant), params={"uri": "test://c"}, json={"name": "c"}, headers={"If-Match": '"1.1"'}
    )
    assert_problem(stale, 412)  # does not exist yet
    first = await client.put(path(tenant), params={"uri": "test://c"}, json={"name": "c"})
    etag = first.headers["etag"]
    ok = await client.put(
        path(tenant), params={"uri": "test://c"}, json={"name": "c2"}, headers={"If-Match": etag}
    )
    assert ok.status_code == 200
    late = await client.put(
        path(tenant), params={"uri": "test://c"}, json={"name": "c3"}, headers={"If-Match": etag}
    )
    assert_problem(late, 412)
    assert (await client.get(path(tenant, f"/{first.json()['id']}"))).json()["name"] == "c2"


# -- read -----------------------------------------------------------------------------------------


async def test_get_answers_etag_and_content_on_request(client: httpx.AsyncClient, tenant: str) -> None:
    rid = (await create_resource(client, tenant, uri="test://r", text="body")).json()["id"]
    plain = await client.get(path(tenant, f"/{rid}"))
    assert plain.status_code == 200 and "text" not in plain.json()
    assert plain.headers["etag"] == f'"{rid}.1"'
    full = await client.get(path(tenant, f"/{rid}"), params={"include": "content"})
    assert full.json()["text"] == "body"
    cached = await client.get(path(tenant, f"/{rid}"), headers={"If-None-Match": f'"{rid}.1"'})
    assert cached.status_code == 304 and cached.headers["etag"] == f'"{rid}.1"'
    assert_problem(
        await client.get(path(tenant, f"/{rid}"), params={"include": "everything"}), 422, "#/query/include"
    )


async def test_unknown_ids_are_404_and_malformed_ids_422(client: httpx.AsyncClient, tenant: str) -> None:
    assert_problem(await client.get(path(tenant, "/12345")), 404)
    assert_problem(await client.patch(path(tenant, "/12345"), json={"name": "x"}), 404)
    assert_problem(await client.delete(path(tenant, "/12345")), 404)
    assert_problem(await client.get(path(tenant, "/12345/versions")), 404)
    for bad in ["abc", "0", "-1", str(2**63), "9" * 400, "1.5"]:
        assert_problem(await client.get(path(tenant, f"/{bad}")), 422, "#/path/id")
        assert_problem(await client.patch(path(tenant, f"/{bad}"), json={}), 422, "#/path/id")
        assert_problem(await client.delete(path(tenant, f"/{bad}")), 422, "#/path/id")


# -- patch ----------------------------------------------------------------------------------------


async def test_patch_changes_only_the_fields_given(client: httpx.AsyncClient, tenant: str) -> None:
    created = (
        await create_resource(client, tenant, uri="test://q", text="abc", title="T", tags=["x"])
    ).json()
    response = await client.patch(path(tenant, f"/{created['id']}"), json={"title": None, "description": "D"})
    out = response.json()
    assert response.status_code == 200
    assert out["version"] == 2 and "title" not in out and out["description"] == "D"
    assert out["tags"] == ["x"] and out["size"] == 3  # untouched
    assert response.headers["etag"] == f'"{created["id"]}.2"'
    content = await client.patch(path(tenant, f"/{created['id']}"), json={"blob": b64(b"12345")})
    assert content.json()["size"] == 5 and content.json()["blobSha256"]
    assert_problem(await client.patch(path(tenant, f"/{created['id']}"), json={"name": None}), 422)
    noop = await client.patch(path(tenant, f"/{created['id']}"), json={})
    assert noop.json()["version"] == 3


async def test_patch_with_stale_if_match_is_412_and_changes_nothing(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    created = await create_resource(client, tenant, uri="test://s", text="v1")
    rid, etag = created.json()["id"], created.headers["etag"]
    assert (
        await client.patch(path(tenant, f"/{rid}"), json={"text": "v2"}, headers={"If-Match": etag})
    ).status_code == 200
    audit_before = await db.fetchval("SELECT count(*) FROM audit_log")
    feed_before = await db.fetchval("SELECT count(*) FROM change_feed")
    stale = await client.patch(path(tenant, f"/{rid}"), json={"text": "v3"}, headers={"If-Match": etag})
    assert_problem(stale, 412)
    row = await db.fetchrow("SELECT version, text FROM resources WHERE id = $1", rid)
    assert (row["version"], row["text"]) == (2, "v2")
    assert await db.fetchval("SELECT count(*) FROM audit_log") == audit_before
    assert await db.fetchval("SELECT count(*) FROM change_feed") == feed_before
    assert await db.fetchval("SELECT count(*) FROM resource_versions WHERE resource_id = $1", rid) == 2


async def test_two_concurrent_patches_with_the_same_if_match_exactly_one_wins(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    created = await create_resource(client, tenant, uri="test://race", text="start")
    rid, etag = created.json()["id"], created.headers["etag"]
    first, second = await asyncio.gather(
        client.patch(path(tenant, f"/{rid}"), json={"text": "A"}, headers={"If-Match": etag}),
        client.patch(path(tenant, f"/{rid}"), json={"text": "B"}, headers={"If-Match": etag}),
    )
    assert sorted([first.status_code, second.status_code]) == [200, 412]
    winner = first if first.status_code == 200 else second
    loser = second if winner is first else first
    assert_problem(loser, 412)
    row = await db.fetchrow("SELECT version, text FROM resources WHERE id = $1", rid)
    assert row["version"] == 2
    assert row["text"] == ("A" if winner is first else "B")


async def test_patch_to_a_taken_uri_is_409_and_changes_nothing(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    await create_resource(client, tenant, uri="test://one", text="1")
    rid = (await create_resource(client, tenant, uri="test://two", text="2")).json()["id"]
    assert_problem(
        await client.patch(path(tenant, f"/{rid}"), json={"uri": "test://one", "text": "x"}), 409, "/uri"
    )
    row = await db.fetchrow("SELECT uri, text, version FROM resources WHERE id = $1", rid)
    assert tuple(row) == ("test://two", "2", 1)


# -- delete ---------------------------------------------------------------------------------------


async def test_delete_is_204_then_404(client: httpx.AsyncClient, tenant: str) -> None:
    created = await create_resource(client, tenant, uri="test://gone", text="x")
    rid = created.json()["id"]
    assert_problem(await client.delete(path(tenant, f"/{rid}"), headers={"If-Match": '"0.0"'}), 412)
    response = await client.delete(path(tenant, f"/{rid}"), headers={"If-Match": created.headers["etag"]})
    assert response.status_code == 204 and response.content == b""
    assert_problem(await client.get(path(tenant, f"/{rid}")), 404)
    assert_problem(await client.delete(path(tenant, f"/{rid}")), 404)


# -- one transaction per change -------------------------------------------------------------------


async def test_every_change_bumps_version_keeps_history_and_writes_audit_and_feed(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    rid = (await create_resource(client, tenant, uri="test://h", text="one")).json()["id"]
    await client.patch(path(tenant, f"/{rid}"), json={"text": "two"})
    await client.put(path(tenant), params={"uri": "test://h"}, json={"name": "h", "text": "three"})
    await client.patch(path(tenant, f"/{rid}"), json={"uri": "test://moved"})

    versions = await db.fetch(
        "SELECT version, uri, text, changed_by FROM resource_versions WHERE resource_id = $1 ORDER BY version",
        rid,
    )
    assert [(v["version"], v["uri"], v["text"]) for v in versions] == [
        (1, "test://h", "one"),
        (2, "test://h", "two"),
        (3, "test://h", "three"),
        (4, "test://moved", "three"),
    ]
    assert {v["changed_by"] for v in versions} == {"platform-admin"}

    history = (await client.get(path(tenant, f"/{rid}/versions"))).json()["items"]
    assert [h["version"] for h in history] == [4, 3, 2, 1]
    assert history[1]["textSha256"] == hashlib.sha256(b"three").hexdigest()
    assert history[0]["resource"]["uri"] == "test://moved" and history[0]["changedBy"] == "platform-admin"

    audit = await db.fetch(
        "SELECT action, principal, before_digest, after_digest FROM audit_log WHERE target_id = $1 ORDER BY id",
        rid,
    )
    assert [a["action"] for a in audit] == ["resource.create"] + ["resource.update"] * 3
    assert audit[0]["before_digest"] is None and audit[0]["after_digest"]
    for earlier, later in itertools.pairwise(audit):
        assert later["before_digest"] == earlier["after_digest"] != later["after_digest"]

    await client.delete(path(tenant, f"/{rid}"))
    feed = await db.fetch("SELECT kind, uri, op FROM change_feed ORDER BY seq")
    assert [(f["uri"], f["op"]) for f in feed] == [
        ("test://h", "created"),
        ("test://h", "updated"),
        ("test://h", "updated"),
        ("test://h", "deleted"),
        ("test://moved", "created"),
        ("test://moved", "deleted"),
    ]
    last = await db.fetchrow("SELECT action, after_digest FROM audit_log ORDER BY id DESC LIMIT 1")
    assert (last["action"], last["after_digest"]) == ("resource.delete", None)


# -- listings -------------------------------------------------------------------------------------


async def test_listing_pages_in_uri_byte_order_with_a_cursor(client: httpx.AsyncClient, tenant: str) -> None:
    uris = ["test://h/b", "test://h/a", "test://h/B", "test://h/a/1", "test://h/c", "test://h/~"]
    for uri in uris:
        await create_resource(client, tenant, uri=uri)
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(path(tenant), params=params)).json()
        assert len(page["items"]) <= 2
        seen += [item["uri"] for item in page["items"]]
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert seen == sorted(uris, key=str.encode)


async def test_listing_limit_is_capped_at_1000(client: httpx.AsyncClient, tenant: str, db) -> None:
    tenant_id = await db.fetchval("SELECT id FROM tenants WHERE slug = $1", tenant)
    await db.execute(
        "INSERT INTO resources (tenant_id, uri, name) SELECT $1, 'test://n/' || lpad(i::text, 5, '0'), 'n'"
        " FROM generate_series(1, 1001) AS i",
        tenant_id,
    )
    page = (await client.get(path(tenant), params={"limit": 10**30})).json()
    assert len(page["items"]) == 1000 and page["nextCursor"]
    rest = (await client.get(path(tenant), params={"limit": 5000, "cursor": page["nextCursor"]})).json()
    assert [item["uri"] for item in rest["items"]] == ["test://n/01001"] and "nextCursor" not in rest
    default = (await client.get(path(tenant))).json()
    assert len(default["items"]) == 100
    for bad in ("0", "-3", "ten"):
        assert_problem(await client.get(path(tenant), params={"limit": bad}), 422, "#/query/limit")


async def test_listing_filters_by_prefix_tag_and_substring(client: httpx.AsyncClient, tenant: str) -> None:
    await create_resource(client, tenant, uri="file:///project/a.py", tags=["code"], title="Alpha Module")
    await create_resource(
        client, tenant, uri="file:///project/docs/b.md", tags=["docs"], description="50% done_x"
    )
    await create_resource(client, tenant, uri="file:///other/c.py", tags=["code"])

    async def uris(**params: str) -> list[str]:
        response = await client.get(path(tenant), params=params)
        assert response.status_code == 200, response.text
        return [item["uri"] for item in response.json()["items"]]

    assert await uris(uriPrefix="file:///project/") == ["file:///project/a.py", "file:///project/docs/b.md"]
    assert await uris(tag="code") == ["file:///other/c.py", "file:///project/a.py"]
    assert await uris(tag="code", uriPrefix="file:///project") == ["file:///project/a.py"]
    assert await uris(q="alpha") == ["file:///project/a.py"]  # case-insensitive, title
    assert await uris(q="50%") == ["file:///project/docs/b.md"]  # LIKE wildcards are literal
    assert await uris(q="0%_d") == []
    assert await uris(q="c.py") == ["file:///other/c.py"]
    assert_problem(await client.get(path(tenant), params={"q": "a\x00"}), 422, "#/query/q")
    assert_problem(
        await client.get(path(tenant), params={"uriPrefix": "no scheme"}), 422, "#/query/uriPrefix"
    )


async def test_a_damaged_or_foreign_cursor_is_422(client: httpx.AsyncClient, tenant: str) -> None:
    for uri in ("test://1", "test://2"):
        await create_resource(client, tenant, uri=uri)
    cursor = (await client.get(path(tenant), params={"limit": 1})).json()["nextCursor"]
    assert_problem(await client.get(path(tenant), params={"cursor": cursor + "x"}), 422)
    assert_problem(await client.get(path(tenant), params={"cursor": "garbage"}), 422)
    # A cursor belongs to its listing: other filters are another listing.
    assert_problem(await client.get(path(tenant), params={"cursor": cursor, "tag": "t"}), 422)
    ok = await client.get(path(tenant), params={"cursor": cursor, "limit": 1})
    assert [item["uri"] for item in ok.json()["items"]] == ["test://2"]
