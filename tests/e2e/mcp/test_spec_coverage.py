"""Requirements of the 2026-07-28 checklist that no other test proved on its own (docs/requirements.toml
names the test of each): the envelope of every result, discovery's cache scope, answers that ignore
clientInfo, stable cursors, both eras at once, what a listen stream may carry, and a request without a
version header. Raw HTTP (tests/mcp_helpers.py) where the wire is the point, the SDK client elsewhere."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from catalog.app import create_app
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from tests.mcp_helpers import (
    LEGACY,
    MODERN,
    SYSTEM,
    RawListen,
    Served,
    acting_catalog,
    envelope,
    mcp_settings,
    modern_headers,
    module_database,
    serve,
    served,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

WATCHED = "test://watched-resource"
GATED = "file:///project/docs/internal-notes.md"  # the demo's consent-gated resource
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
CACHEABLE = {"server/discover", "resources/list", "resources/templates/list", "resources/read"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


async def post(
    srv: Served,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    meta: dict[str, Any] | None = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    id: Any = 1,
) -> httpx.Response:
    """One modern POST on a connection of its own (nothing asked before it on that connection)."""
    body_params = {"_meta": meta if meta is not None else envelope(), **(params or {})}
    h = modern_headers(method, body_params.get("uri") if method == "resources/read" else None)
    if token is not None:
        h["Authorization"] = f"Bearer {srv.token(token)}"
    h.update(headers or {})
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": body_params}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(srv.mcp_url, json=body, headers=h)


async def write(srv: Served, uri: str, text: str) -> None:
    """A curator's write through the core, as any process would make it."""
    async with acting_catalog(srv) as catalog:
        body = {"uri": uri, "name": uri.rsplit("/", 1)[-1], "mimeType": "text/plain", "text": text}
        await upsert_resource(catalog, SYSTEM, srv.fixture.tenant, ResourceIn.model_validate(body))


def complete_ref(uri: str, name: str, value: str = "") -> dict[str, Any]:
    return {"ref": {"type": "ref/resource", "uri": uri}, "argument": {"name": name, "value": value}}


# -- what every result carries -----------------------------------------------------------------------


async def test_every_modern_result_is_complete_with_server_info_and_cache_hints(srv: Served) -> None:
    """META-4, META-6, MRTR-2, MRTR-13, CACHE-1, CACHE-2, DISC-1, DISC-3, RES-1, RES-10, COMP-1,
    COMP-3: each method's first request on a fresh connection (no server/discover before it) is a
    complete result with ``serverInfo`` in its ``_meta``; the cacheable ones carry an integer
    ``ttlMs`` of at least 0 and a known ``cacheScope``, a completion none. A listing holding a
    consent-gated resource is still complete (only its read asks for input, and then
    ``input_required``, a known ``resultType``)."""
    requests: list[tuple[str, dict[str, Any] | None]] = [
        ("server/discover", None),
        ("resources/list", None),
        ("resources/templates/list", None),
        ("resources/read", {"uri": "test://static-text"}),
        ("resources/read", {"uri": "test://static-binary"}),
        ("resources/read", {"uri": "file:///project"}),
        ("completion/complete", complete_ref("file:///project/src/{name}", "name")),
    ]
    results: dict[str, dict[str, Any]] = {}
    for method, params in requests:
        response = await post(srv, method, params, token="admin")
        assert response.status_code == 200, (method, response.text)
        assert response.headers["content-type"].startswith("application/json")
        result = response.json()["result"]
        results.setdefault(method, result)
        assert result["resultType"] == "complete", (method, result)
        server_info = result["_meta"][SERVER_INFO]
        assert server_info["name"] == "catalog" and isinstance(server_info["version"], str)
        if method in CACHEABLE:
            ttl = result["ttlMs"]
            assert isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0, (method, ttl)
            assert result["cacheScope"] in ("public", "private"), method
        else:
            assert "ttlMs" not in result and "cacheScope" not in result, method
    assert GATED in {entry["uri"] for entry in results["resources/list"]["resources"]}
    discovered = results["server/discover"]
    assert MODERN in discovered["supportedVersions"]
    assert isinstance(discovered["capabilities"]["resources"], dict)
    assert discovered["capabilities"]["completions"] == {}
    assert results["completion/complete"]["completion"] == {
        "values": ["app.py", "main.py"],
        "hasMore": False,
        "total": 2,
    }
    gated = await post(
        srv,
        "resources/read",
        {"uri": GATED},
        meta=envelope(caps={"elicitation": {"form": {}}}),
        token="admin",
    )
    assert gated.status_code == 200 and gated.json()["result"]["resultType"] == "input_required"


async def test_discover_is_public_and_the_same_for_every_caller_cache_4(srv: Served) -> None:
    """CACHE-4, DISC-5: ``server/discover`` is the one ``public`` answer, and it is the same for
    every authorization context (anonymous, a scoped token, another tenant's admin); it lists
    2026-07-28 (2025-11-25 is reached through ``initialize``). The listings the same callers get are
    ``private``: they differ per caller."""
    answers = []
    for token in (None, "staff", "other-admin"):
        response = await post(srv, "server/discover", token=token)
        assert response.status_code == 200
        answers.append(response.json()["result"])
        listing = await post(srv, "resources/list", token=token)
        assert listing.json()["result"]["cacheScope"] == "private"
    assert answers[0]["cacheScope"] == "public"
    assert answers[0]["supportedVersions"] == [MODERN]
    assert answers[1] == answers[0] and answers[2] == answers[0]


async def test_client_info_changes_no_answer_meta_5(srv: Served) -> None:
    """META-5, CACHE-9, RES-6: the same request with no ``clientInfo``, an ordinary one, or one claiming to
    be something privileged gets the same answer, for a listing, a read and a refused read."""
    required = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    infos = [
        None,
        {"name": "raw-test", "version": "0"},
        {"name": "catalog-admin", "version": "99", "title": "Platform administrator"},
    ]
    for method, params in (
        ("resources/list", None),
        ("resources/read", {"uri": "test://static-text"}),
        ("resources/read", {"uri": "file:///private/notes.txt"}),
    ):
        answers = []
        for info in infos:
            meta = (
                dict(required) if info is None else {**required, "io.modelcontextprotocol/clientInfo": info}
            )
            response = await post(srv, method, params, meta=meta)
            answers.append((response.status_code, response.json()))
        assert answers[1] == answers[0] and answers[2] == answers[0], (method, params)


# -- pages -------------------------------------------------------------------------------------------


async def test_the_same_cursor_twice_gives_the_same_page_pag_4(srv: Served) -> None:
    """PAG-4: nothing changed, so a cursor asked for twice (on two connections) gives the same page,
    resource for resource, and the same next cursor."""
    async with srv.client() as client:
        cursor = (await client.list_resources()).next_cursor
        assert cursor
        once = await client.list_resources(cursor=cursor)
    async with srv.client() as client:
        again = await client.list_resources(cursor=cursor)
    assert once.resources and [r.model_dump() for r in once.resources] == [
        r.model_dump() for r in again.resources
    ]
    assert once.next_cursor == again.next_cursor


async def test_a_cursor_from_one_server_continues_on_another_pag_6(srv: Served) -> None:
    """PAG-6, META-8: a page's cursor from one server process, sent to another on the same database
    (with the same signing key, as every worker and host has), is the next page there, equal to the
    next page the first server gives."""
    first = (await post(srv, "resources/list")).json()["result"]
    cursor = first["nextCursor"]
    here = (await post(srv, "resources/list", {"cursor": cursor})).json()["result"]
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/list",
        "params": {"_meta": envelope(), "cursor": cursor},
    }
    with serve(create_app(srv.app.state.settings)) as (other_url, _, _):
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                f"{other_url}/mcp", json=body, headers=modern_headers("resources/list")
            )
    assert response.status_code == 200
    there = response.json()["result"]
    assert there["resources"][0]["uri"] > first["resources"][-1]["uri"]
    assert there["resources"] == here["resources"] and there["nextCursor"] == here["nextCursor"]


# -- both eras -----------------------------------------------------------------------------------------


async def test_both_eras_are_served_at_once_on_one_endpoint_compat_1(srv: Served) -> None:
    """COMPAT-1: a 2025-11-25 session and 2026-07-28 requests on the one /mcp at the same time, each
    answered in its own era (the legacy not-found code is -32002, the modern one -32602)."""
    async with srv.client("legacy") as legacy, srv.client(MODERN) as modern:
        assert (legacy.protocol_version, modern.protocol_version) == (LEGACY, MODERN)
        old, new = await asyncio.gather(
            legacy.read_resource("test://static-text"), modern.read_resource("test://static-text")
        )
        assert [c.text for c in old.contents] == [c.text for c in new.contents]  # type: ignore[union-attr]
        for client, code in ((legacy, -32002), (modern, -32602)):
            with pytest.raises(MCPError) as err:
                await client.read_resource("test://nonexistent-for-compat-1")
            assert err.value.code == code
        listed = await asyncio.gather(legacy.list_resources(), modern.list_resources())
        assert [r.uri for r in listed[0].resources] == [r.uri for r in listed[1].resources]


# -- listen streams ------------------------------------------------------------------------------------


def notifications_of(listen: RawListen) -> list[dict[str, Any]]:
    return [message for message in listen.messages if "method" in message]


async def test_listen_streams_carry_only_their_own_notifications_sub_8_sub_9_mrtr_12(srv: Served) -> None:
    """SUB-8, SUB-9, SUB-13, MRTR-12, HTTP-10, META-9, META-10: two listens of one caller at once,
    each with its own filter and id (a string and an integer): each is told only what it asked for,
    tagged with its own id; a read made meanwhile (with a progress token) is answered as one JSON
    object, with no progress and no change notification on it; no frame of either stream is a
    request (``method`` with an ``id``) or a request-scoped notification (progress, log message).
    The listen answer is an unbuffered event stream."""
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream(
            "POST",
            srv.mcp_url,
            json={
                "jsonrpc": "2.0",
                "id": 9,
                "method": "subscriptions/listen",
                "params": {"_meta": envelope(), "notifications": {"resourcesListChanged": True}},
            },
            headers={
                **modern_headers("subscriptions/listen"),
                "Authorization": f"Bearer {srv.token('admin')}",
            },
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"

    watcher = RawListen(srv, {"resourceSubscriptions": [WATCHED]}, id="listen-a", token="admin")
    lister = RawListen(srv, {"resourcesListChanged": True}, id=2, token="admin")
    async with watcher.opened(), lister.opened():
        assert (watcher.content_type, lister.content_type) == ("text/event-stream", "text/event-stream")
        acks = [await watcher.next(), await lister.next()]
        assert [ack["method"] for ack in acks] == ["notifications/subscriptions/acknowledged"] * 2
        assert acks[0]["params"]["notifications"] == {"resourceSubscriptions": [WATCHED]}
        assert acks[1]["params"]["notifications"] == {"resourcesListChanged": True}

        read = await post(
            srv,
            "resources/read",
            {"uri": WATCHED},
            meta={**envelope(), "progressToken": "read-progress"},
            token="admin",
        )
        assert read.status_code == 200 and read.headers["content-type"].startswith("application/json")
        assert set(read.json()) == {"jsonrpc", "id", "result"}

        await write(srv, WATCHED, "changed for SUB-8")
        assert (await watcher.next())["method"] == "notifications/resources/updated"
        await write(srv, "test://spec-coverage/new-for-sub-9", "a new resource: the list changed")
        while (await lister.next())["method"] != "notifications/resources/list_changed":
            pass
        await write(srv, WATCHED, "changed again: whatever the watcher was told comes before this")
        assert (await watcher.next())["method"] == "notifications/resources/updated"

    assert [m["method"] for m in notifications_of(watcher)] == [
        "notifications/subscriptions/acknowledged",
        "notifications/resources/updated",
        "notifications/resources/updated",
    ]
    assert all(m["params"]["uri"] == WATCHED for m in notifications_of(watcher)[1:])
    assert {m["method"] for m in notifications_of(lister)} == {
        "notifications/subscriptions/acknowledged",
        "notifications/resources/list_changed",
    }
    for listen, own_id in ((watcher, "listen-a"), (lister, 2)):
        for message in listen.messages:
            assert not ("method" in message and "id" in message), message  # never a request
            if "method" in message:
                tag = message["params"]["_meta"][SUBSCRIPTION_ID]
                assert tag == own_id and type(tag) is type(own_id), message


async def test_a_reopened_listen_hears_only_its_new_filter_sub_12(srv: Served) -> None:
    """SUB-12, SUB-11, HTTP-11: a listen closed by its client leaves nothing behind; a new listen
    with the same id but another filter is acknowledged with its new filter only, and a change to
    what the old one watched reaches nobody (the change after it is the new stream's first
    notification)."""
    old_uri, new_uri = "test://spec-coverage/old-filter", "test://spec-coverage/new-filter"
    await write(srv, old_uri, "one")
    await write(srv, new_uri, "one")
    first = RawListen(srv, {"resourceSubscriptions": [old_uri]}, id=1, token="admin")
    async with first.opened():
        assert (await first.next())["params"]["notifications"] == {"resourceSubscriptions": [old_uri]}
    second = RawListen(srv, {"resourceSubscriptions": [new_uri]}, id=1, token="admin")
    async with second.opened():
        ack = await second.next()
        assert ack["params"]["notifications"] == {"resourceSubscriptions": [new_uri]}
        await write(srv, old_uri, "two: the closed listen watched this")
        await write(srv, new_uri, "two")
        updated = await second.next()
    assert updated["method"] == "notifications/resources/updated"
    assert updated["params"]["uri"] == new_uri


# -- the version header ----------------------------------------------------------------------------------


async def test_a_request_without_a_protocol_version_header_is_the_2025_transports_http_9(srv: Served) -> None:
    """HTTP-9, ERR-3: a POST without ``MCP-Protocol-Version`` is taken as the pre-2026 transport
    (catalog serves 2025-11-25 sessions), which needs a session opened by ``initialize``: 400 with a
    JSON-RPC error repeating the request's id, never a modern answer, even with a complete 2026
    envelope in the body; with a session id that names no session, 404, the id repeated too."""
    headers = modern_headers("resources/list")
    del headers["MCP-Protocol-Version"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(srv.mcp_url, json=body, headers=headers)
        unknown = await http.post(
            srv.mcp_url,
            json={**body, "id": "seven"},
            headers={**headers, "Mcp-Session-Id": "no-such-session"},
        )
    assert response.status_code == 400
    assert json.loads(response.text) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32600, "message": "Bad Request: Missing session ID"},
    }
    assert unknown.status_code == 404
    assert json.loads(unknown.text) == {
        "jsonrpc": "2.0",
        "id": "seven",
        "error": {"code": -32600, "message": "Session not found"},
    }
