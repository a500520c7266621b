"""The admin API routes the console relies on: whoami, MIME filter, the URI tree, full-text search,
version history (get, restore), template and grant previews, and the change stream (SSE)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from catalog.app import create_app
from catalog.settings import Settings
from tests.admin_support import ADMIN, API, assert_problem, bearer, create_resource, mint_token
from tests.conftest import run_live_server


def res(slug: str, suffix: str = "") -> str:
    return f"{API}/tenants/{slug}/resources{suffix}"


async def walk(client: httpx.AsyncClient, url: str, **params: Any) -> list[dict[str, Any]]:
    """Every item of a listing, page by page through nextCursor."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = await client.get(url, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["items"]
        cursor = page.get("nextCursor")
        if not cursor:
            return items


# -- whoami ---------------------------------------------------------------------------------------


async def test_whoami_names_the_platform_admin(client: httpx.AsyncClient) -> None:
    response = await client.get(f"{API}/whoami")
    assert response.status_code == 200
    assert response.json() == {"kind": "platform", "principal": "platform-admin", "admin": True, "scopes": []}


async def test_whoami_names_a_tenant_admin_and_its_tenant(client: httpx.AsyncClient, tenant: str) -> None:
    token = await mint_token(client, tenant, admin=True, scopes=["curators"])
    response = await client.get(f"{API}/whoami", headers=bearer(token["token"]))
    body = response.json()
    assert (body["kind"], body["tenant"], body["scopes"]) == ("tenant", tenant, ["curators"])
    assert body["principal"] == f"token:{token['id']}"


async def test_whoami_refuses_a_reader_token(client: httpx.AsyncClient, tenant: str) -> None:
    token = await mint_token(client, tenant, scopes=["readers"])
    response = await client.get(f"{API}/whoami", headers=bearer(token["token"]))
    assert_problem(response, 403)


async def test_whoami_without_a_token_is_401(app: Any) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as anon:
        assert_problem(await anon.get(f"{API}/whoami"), 401)


# -- listing filters ------------------------------------------------------------------------------


async def test_mime_type_filter_matches_exactly_or_by_family(client: httpx.AsyncClient, tenant: str) -> None:
    for uri, mime in [
        ("file:///a.png", "image/png"),
        ("file:///b.jpg", "image/jpeg"),
        ("file:///c.md", "text/markdown"),
    ]:
        await create_resource(client, tenant, uri=uri, mimeType=mime, text="x")
    exact = await walk(client, res(tenant), mimeType="image/png")
    family = await walk(client, res(tenant), mimeType="image/*")
    assert [r["uri"] for r in exact] == ["file:///a.png"]
    assert [r["uri"] for r in family] == ["file:///a.png", "file:///b.jpg"]


async def test_malformed_mime_filter_is_a_problem(client: httpx.AsyncClient, tenant: str) -> None:
    assert_problem(await client.get(res(tenant), params={"mimeType": "image"}), 422)


# -- the URI tree ---------------------------------------------------------------------------------


async def seed_tree(client: httpx.AsyncClient, slug: str) -> None:
    uris = [
        "file:///project/README.md",
        "file:///project/src/a.py",
        "file:///project/src/b.py",
        "file:///project/src/deep/c.py",
        "file:///project/tests/t.py",
        "file:///zeta.txt",
        "https://example.com/page",
        "test://static-text",
    ]
    for uri in uris:
        await create_resource(client, slug, uri=uri, text=f"content of {uri}", mimeType="text/plain")


async def test_tree_root_shows_one_folder_per_scheme_and_authority(
    client: httpx.AsyncClient, tenant: str
) -> None:
    await seed_tree(client, tenant)
    items = await walk(client, f"{API}/tenants/{tenant}/tree")
    assert [(i["kind"], i["name"]) for i in items] == [
        ("folder", "file:///"),
        ("folder", "https://example.com/"),
        ("resource", "test://static-text"),
    ]


async def test_tree_folder_lists_subfolders_and_files_in_uri_order(
    client: httpx.AsyncClient, tenant: str
) -> None:
    await seed_tree(client, tenant)
    items = await walk(client, f"{API}/tenants/{tenant}/tree", prefix="file:///project/")
    assert [(i["kind"], i["name"]) for i in items] == [
        ("resource", "README.md"),
        ("folder", "src/"),
        ("folder", "tests/"),
    ]
    assert items[1]["prefix"] == "file:///project/src/"
    assert items[0]["resource"]["uri"] == "file:///project/README.md"


async def test_tree_pages_by_keyset_without_repeating_or_losing_entries(
    client: httpx.AsyncClient, tenant: str
) -> None:
    await seed_tree(client, tenant)
    one_by_one = await walk(client, f"{API}/tenants/{tenant}/tree", prefix="file:///project/src/", limit=1)
    assert [i["name"] for i in one_by_one] == ["a.py", "b.py", "deep/"]


async def test_tree_skips_large_folders_with_few_reads(
    client: httpx.AsyncClient, tenant: str, db: asyncpg.Connection
) -> None:
    tenant_id = await db.fetchval("SELECT id FROM tenants WHERE slug = $1", tenant)
    await db.execute(
        """INSERT INTO resources (tenant_id, uri, name) SELECT $1, 'file:///big/' || lpad(g::text, 6, '0'), 'n'
           FROM generate_series(1, 3000) AS g""",
        tenant_id,
    )
    await create_resource(client, tenant, uri="file:///c/last", text="x")
    items = await walk(client, f"{API}/tenants/{tenant}/tree", prefix="file:///", limit=1)
    assert [i["name"] for i in items] == ["big/", "c/"]


async def test_tree_honours_the_mime_filter(client: httpx.AsyncClient, tenant: str) -> None:
    await seed_tree(client, tenant)
    await create_resource(client, tenant, uri="file:///img/x.png", blob="iVBORw0KGgo=", mimeType="image/png")
    items = await walk(client, f"{API}/tenants/{tenant}/tree", prefix="file:///", mimeType="image/*")
    assert [i["name"] for i in items] == ["img/"]


async def test_tree_cursor_of_another_folder_is_refused(client: httpx.AsyncClient, tenant: str) -> None:
    await seed_tree(client, tenant)
    page = (
        await client.get(f"{API}/tenants/{tenant}/tree", params={"prefix": "file:///project/", "limit": 1})
    ).json()
    other = await client.get(
        f"{API}/tenants/{tenant}/tree",
        params={"prefix": "file:///project/src/", "cursor": page["nextCursor"]},
    )
    assert_problem(other, 422)


# -- search ---------------------------------------------------------------------------------------


async def test_search_matches_text_content_after_metadata_matches(
    client: httpx.AsyncClient, tenant: str
) -> None:
    await create_resource(
        client, tenant, uri="file:///z/notes.txt", name="notes", text="the quarterly budget review"
    )
    await create_resource(client, tenant, uri="file:///a/other.txt", name="other", text="nothing here")
    await create_resource(client, tenant, uri="file:///m/budget.txt", name="budget", text="numbers")
    items = await walk(client, res(tenant), q="budget")
    # The name match ranks first, then the match in the text.
    assert [r["uri"] for r in items] == ["file:///m/budget.txt", "file:///z/notes.txt"]


async def test_search_pages_across_both_tiers_without_repeats(client: httpx.AsyncClient, tenant: str) -> None:
    for i in range(3):
        await create_resource(client, tenant, uri=f"file:///meta/alpha{i}", name=f"alpha{i}", text="x")
        await create_resource(
            client, tenant, uri=f"file:///body/{i}", name=f"n{i}", text="it says alpha here"
        )
    items = await walk(client, res(tenant), q="alpha", limit=2)
    assert [r["uri"] for r in items] == [
        "file:///meta/alpha0",
        "file:///meta/alpha1",
        "file:///meta/alpha2",
        "file:///body/0",
        "file:///body/1",
        "file:///body/2",
    ]


async def test_search_respects_the_other_filters(client: httpx.AsyncClient, tenant: str) -> None:
    await create_resource(client, tenant, uri="file:///a/x", name="x", text="gamma", tags=["keep"])
    await create_resource(client, tenant, uri="file:///b/y", name="y", text="gamma")
    items = await walk(client, res(tenant), q="gamma", tag="keep")
    assert [r["uri"] for r in items] == ["file:///a/x"]


@pytest.mark.parametrize("rare", [0, 1, 5000])
async def test_search_answers_alike_through_its_candidates_or_the_scan(
    client: httpx.AsyncClient, tenant: str, rare: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search narrows each tier to the ids the indexes found when they are few (``RARE_MATCHES``),
    and scans in URI order otherwise: the pages are the same either way, across both tiers."""
    from catalog.core.resources import search

    monkeypatch.setattr(search, "RARE_MATCHES", rare)
    for i in range(3):
        await create_resource(client, tenant, uri=f"file:///meta/delta{i}", name=f"delta{i}", text="x")
        await create_resource(client, tenant, uri=f"file:///body/{i}", name=f"n{i}", text="a delta here")
    await create_resource(client, tenant, uri="file:///none", name="none", text="nothing")
    items = await walk(client, res(tenant), q="delta", limit=2)
    assert [r["uri"] for r in items] == [
        *(f"file:///meta/delta{i}" for i in range(3)),
        *(f"file:///body/{i}" for i in range(3)),
    ]


async def test_search_candidates_stay_within_the_transactions_tenant(
    client: httpx.AsyncClient, tenant: str, db: asyncpg.Connection
) -> None:
    """``catalog_search_candidates`` (migration 0007) runs on the owner's rights so that its indexes
    serve under the RLS wall; it answers only for a tenant the calling transaction may see."""
    await create_resource(client, tenant, uri="file:///a/x", name="x", text="secret words")
    assert (await client.post(f"{API}/tenants", json={"slug": "other"})).status_code == 201
    await create_resource(client, "other", uri="file:///b/y", name="y", text="secret words")
    ids = {
        row["slug"]: row["id"]
        for row in await db.fetch("SELECT slug, id FROM tenants WHERE slug = ANY($1)", [tenant, "other"])
    }
    role = await db.fetchval("SELECT rolname FROM pg_roles WHERE rolname = 'catalog_app'")
    call = "SELECT count(*) FROM catalog_search_candidates($1, NULL, 'secret', 100)"
    async with db.transaction():
        if role:
            await db.execute("SET LOCAL ROLE catalog_app")
        await db.execute("SELECT set_config('catalog.tenant_id', $1, true)", str(ids[tenant]))
        assert await db.fetchval(call, ids[tenant]) == 1
        assert await db.fetchval(call, ids["other"]) == 0  # another tenant: nothing, not an error
        await db.execute("SELECT set_config('catalog.tenant_id', '', true)")
        assert await db.fetchval(call, ids[tenant]) == 0  # no scope: nothing
    if role:
        # Only the app role (and the owner) may call it.
        probe = f"catalog_search_probe_{uuid.uuid4().hex[:8]}"
        await db.execute(f"CREATE ROLE {probe} NOLOGIN")
        try:
            async with db.transaction():
                await db.execute(f"SET LOCAL ROLE {probe}")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await db.fetchval(call, ids[tenant])
        finally:
            await db.execute(f"DROP ROLE {probe}")


async def test_text_search_expression_matches_its_index(
    client: httpx.AsyncClient, tenant: str, db: asyncpg.Connection
) -> None:
    """The query's expression is the index's (as a superuser, outside the RLS wall: under the app
    role PostgreSQL does not use it, since ``@@`` is not leakproof; see BENCHMARKS.md, Open)."""
    await db.execute("SET enable_seqscan = off")
    plan = await db.fetch(
        "EXPLAIN SELECT uri FROM resources WHERE text IS NOT NULL AND "
        "catalog_resource_text_vector(text) @@ plainto_tsquery('simple', 'budget')"
    )
    assert "ix_resources_text_search" in "\n".join(r[0] for r in plan)


# -- versions -------------------------------------------------------------------------------------


async def three_versions(client: httpx.AsyncClient, slug: str) -> tuple[int, str]:
    created = await create_resource(client, slug, uri="file:///v.txt", name="v", text="one")
    rid = created.json()["id"]
    etag = created.headers["ETag"]
    for text in ("two", "three"):
        response = await client.patch(res(slug, f"/{rid}"), json={"text": text}, headers={"If-Match": etag})
        etag = response.headers["ETag"]
    return rid, etag


async def test_get_version_n_returns_its_text(client: httpx.AsyncClient, tenant: str) -> None:
    rid, _ = await three_versions(client, tenant)
    response = await client.get(res(tenant, f"/{rid}/versions/1"))
    assert response.status_code == 200
    assert (response.json()["version"], response.json()["text"]) == (1, "one")


async def test_unknown_version_is_404(client: httpx.AsyncClient, tenant: str) -> None:
    rid, _ = await three_versions(client, tenant)
    assert_problem(await client.get(res(tenant, f"/{rid}/versions/9")), 404)
    assert_problem(await client.get(res(tenant, f"/{rid}/versions/0")), 422)


async def test_restore_makes_an_old_version_current_as_a_new_one(
    client: httpx.AsyncClient, tenant: str, db: asyncpg.Connection
) -> None:
    rid, etag = await three_versions(client, tenant)
    response = await client.post(res(tenant, f"/{rid}/versions/1/restore"), headers={"If-Match": etag})
    assert response.status_code == 200, response.text
    assert response.json()["version"] == 4
    current = (await client.get(res(tenant, f"/{rid}"), params={"include": "content"})).json()
    assert current["text"] == "one"
    history = (await client.get(res(tenant, f"/{rid}/versions"))).json()["items"]
    assert [v["version"] for v in history] == [4, 3, 2, 1]
    audit = (await client.get(f"{API}/tenants/{tenant}/audit")).json()["items"][0]
    assert (audit["action"], audit["detail"]) == ("resource.restore", {"version": 1})
    ops = await db.fetch("SELECT op FROM change_feed WHERE uri = 'file:///v.txt' ORDER BY seq")
    assert [r["op"] for r in ops][-1] == "updated" and len(ops) == 4


async def test_restore_with_a_stale_etag_is_412_and_changes_nothing(
    client: httpx.AsyncClient, tenant: str
) -> None:
    rid, _ = await three_versions(client, tenant)
    response = await client.post(res(tenant, f"/{rid}/versions/1/restore"), headers={"If-Match": '"stale"'})
    assert_problem(response, 412)
    current = (await client.get(res(tenant, f"/{rid}"), params={"include": "content"})).json()
    assert (current["version"], current["text"]) == (3, "three")


# -- previews -------------------------------------------------------------------------------------


async def test_template_preview_renders_escaped_without_storing(
    client: httpx.AsyncClient, tenant: str
) -> None:
    response = await client.post(
        f"{API}/tenants/{tenant}/templates/preview",
        json={
            "uriTemplate": "test://user/{id}",
            "mimeType": "application/json",
            "text": '{"id": "{id}"}',
            "arguments": {"id": 'a"b'},
        },
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"uri": "test://user/a%22b", "variables": ["id"], "text": '{"id": "a\\"b"}'}
    listed = (await client.get(f"{API}/tenants/{tenant}/templates")).json()["items"]
    assert listed == []


async def test_template_preview_names_an_unknown_placeholder(client: httpx.AsyncClient, tenant: str) -> None:
    response = await client.post(
        f"{API}/tenants/{tenant}/templates/preview", json={"uriTemplate": "x://{a}", "text": "{b}"}
    )
    problem = assert_problem(response, 422)
    assert problem["errors"][0]["pointer"] == "/text"


async def test_grant_preview_counts_what_a_scope_sees(client: httpx.AsyncClient, tenant: str) -> None:
    await seed_tree(client, tenant)
    url = f"{API}/tenants/{tenant}/grants"
    assert (await client.get(f"{url}/preview", params={"scope": "agents"})).json() == {
        "scope": "agents",
        "count": 0,
        "items": [],
    }
    await client.post(url, json={"scope": "agents", "uriPrefix": "file:///project/src/"})
    await client.post(url, json={"scope": "agents", "uri": "test://static-text"})
    preview = (await client.get(f"{url}/preview", params={"scope": "agents"})).json()
    assert preview["count"] == 4
    assert [i["uri"] for i in preview["items"]] == [
        "file:///project/src/a.py",
        "file:///project/src/b.py",
        "file:///project/src/deep/c.py",
        "test://static-text",
    ]


async def test_grant_preview_needs_a_scope(client: httpx.AsyncClient, tenant: str) -> None:
    assert_problem(await client.get(f"{API}/tenants/{tenant}/grants/preview"), 422)


async def test_changes_tail_answers_the_latest_changes_oldest_first(
    client: httpx.AsyncClient, tenant: str
) -> None:
    for i in range(5):
        await create_resource(client, tenant, uri=f"file:///t/{i}", text="x")
    page = (await client.get(f"{API}/tenants/{tenant}/changes", params={"tail": 2})).json()
    assert [c["uri"] for c in page["items"]] == ["file:///t/3", "file:///t/4"]
    assert page["lastSeq"] == page["items"][-1]["seq"] and "nextCursor" not in page
    both = await client.get(f"{API}/tenants/{tenant}/changes", params={"tail": 2, "after": 1})
    assert_problem(both, 422, "/tail")


# -- the change stream ----------------------------------------------------------------------------


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in event:
                yield event
            event = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            event[field] = value.removeprefix(" ")


@pytest.fixture
async def live(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The platform admin's client of the app served over real HTTP (the in-process transport
    buffers a whole response, so it cannot show a stream)."""
    with run_live_server(create_app(settings)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as client:
            assert (await client.post(f"{API}/tenants", json={"slug": "acme"})).status_code == 201
            yield client


async def test_stream_resumes_after_last_event_id_and_then_goes_live(live: httpx.AsyncClient) -> None:
    client, tenant = live, "acme"
    for i in range(3):
        await create_resource(client, tenant, uri=f"file:///s/{i}", text="x")
    feed = (await client.get(f"{API}/tenants/{tenant}/changes")).json()["items"]
    first = feed[0]["seq"]
    seen: list[tuple[int, str]] = []
    async with client.stream(
        "GET", f"{API}/tenants/{tenant}/changes/stream", headers={"Last-Event-ID": str(first)}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events(response)

        async def take(n: int) -> None:
            for _ in range(n):
                event = await anext(events)
                data = json.loads(event["data"])
                assert int(event["id"]) == data["seq"] and event["event"] == "change"
                seen.append((data["seq"], data["uri"]))

        await asyncio.wait_for(take(2), 10)
        await create_resource(client, tenant, uri="file:///s/live", text="x")
        await asyncio.wait_for(take(1), 10)
    assert [uri for _, uri in seen] == ["file:///s/1", "file:///s/2", "file:///s/live"]
    assert [seq for seq, _ in seen] == [first + 1, first + 2, first + 3]


async def test_stream_is_scoped_to_the_tenant(client: httpx.AsyncClient, tenant: str) -> None:
    other = await client.post(f"{API}/tenants", json={"slug": "other"})
    assert other.status_code == 201
    token = await mint_token(client, tenant, admin=True)
    response = await client.get(f"{API}/tenants/other/changes/stream", headers=bearer(token["token"]))
    assert_problem(response, 403)


async def test_stream_refuses_a_malformed_last_event_id(client: httpx.AsyncClient, tenant: str) -> None:
    response = await client.get(f"{API}/tenants/{tenant}/changes/stream", headers={"Last-Event-ID": "abc"})
    assert_problem(response, 422)


async def test_stream_ends_when_its_token_is_revoked(live: httpx.AsyncClient) -> None:
    """Like an MCP listen stream, the change stream holds its credential (AUTH: revocation)."""
    token = (await live.post(f"{API}/tenants/acme/tokens", json={"admin": True})).json()
    async with live.stream(
        "GET", f"{API}/tenants/acme/changes/stream", headers=bearer(token["token"])
    ) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        assert (await asyncio.wait_for(anext(lines), 10)).startswith("retry:")
        revoked = await live.delete(f"{API}/tenants/acme/tokens/{token['id']}")
        assert revoked.status_code == 204

        async def drain() -> list[str]:
            return [line async for line in lines]

        rest = await asyncio.wait_for(drain(), 10)  # the server ends the stream
    assert not any(line.startswith("data:") for line in rest)
