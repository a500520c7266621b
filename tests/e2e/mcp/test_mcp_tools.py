"""The read-only tools (``CATALOG_MCP_TOOLS``, ``catalog.mcp.tools``) through the official SDK client
over real HTTP against ``catalog serve --workers 2`` as a process, in both eras (2026-07-28
stateless, 2025-11-25 sessions): what ``tools/list`` offers, search, one level of the tree and flat
pages with cursors, reads (text, blob, directory, template, consent), the one visibility rule
(a hidden URI is answered as a missing one), the edge's rate limit, and ``off``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import httpx2
import mcp_types as types
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers

from catalog.demo import _png_1x1
from catalog.events.listener import listener_dsn
from catalog.mcp.fast import names_fast_method
from tests.e2e.test_sessions_anywhere import node_clients  # noqa: F401  (a fixture: the TS SDK installed)
from tests.mcp_helpers import (
    BULK,
    ERAS,
    HIDDEN,
    MODERN,
    Fixture,
    accepting,
    answering,
    envelope,
    mcp_settings,
    modern_headers,
    module_database,
    seed,
)
from tests.processes import Served, catalog_env, serving, started

asynchronous = pytest.mark.asyncio(loop_scope="session")

ADMIN_TOKEN = "cat_tools-admin-token"
SECRET = "tools-secret-key-0123456789abcdef"
GATED = "file:///project/docs/internal-notes.md"
GATED_TEXT = "# Internal notes\n\nThe greeting should become configurable.\n"
MISSING = "file:///project/docs/no-such-file.md"
TOOL_NAMES = {"search_resources", "list_resources", "read_resource"}


@dataclass
class Server:
    served: Served
    fixture: Fixture
    dsn: str

    def client(self, mode: str = MODERN, token: str | None = None, **kwargs: Any) -> Client:
        headers = {"Authorization": f"Bearer {self.fixture.tokens[token]}"} if token else {}
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        return Client(
            streamable_http_client(self.served.mcp_url, http_client=http), mode=mode, cache=None, **kwargs
        )


def serve_env(url: str, home: Path, **extra: str) -> dict[str, str]:
    return catalog_env(
        CATALOG_DATABASE_URL=url,
        CATALOG_HOME=str(home),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_SECRET_KEY=SECRET,
        CATALOG_PUBLIC_TENANT="demo",
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
        **extra,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Server]:
    """``catalog serve --workers 2`` over the seeded demo catalogue (``tests.mcp_helpers.seed``)."""
    async with module_database(postgres_server, template_database) as url:
        home = Path(tmp_path_factory.mktemp("tools"))
        fixture = await seed(mcp_settings(url, home))
        with serving("--workers", "2", env=serve_env(url, home / "home")) as served:
            await asyncio.to_thread(started, served, 2)
            yield Server(served, fixture, listener_dsn(url))


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def uris_of(result: types.CallToolResult) -> list[str]:
    return [entry["uri"] for entry in structured(result)["resources"]]


def links_of(result: types.CallToolResult) -> list[str]:
    return [str(item.uri) for item in result.content if isinstance(item, types.ResourceLink)]


def error_text(result: types.CallToolResult) -> str:
    assert result.is_error and result.structured_content is None
    [item] = result.content
    assert isinstance(item, types.TextContent)
    return item.text


async def tool(
    server: Server, name: str, arguments: dict[str, Any], mode: str = MODERN, **kwargs: Any
) -> Any:
    async with server.client(mode, **kwargs) as client:
        return await client.call_tool(name, arguments)


# -- tools/list ------------------------------------------------------------------------------------


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_tools_list_offers_three_read_only_tools_with_output_schemas(srv: Server, mode: str) -> None:
    async with srv.client("auto" if mode == MODERN else mode) as client:  # auto: server/discover
        assert client.protocol_version == (MODERN if mode == MODERN else "2025-11-25")
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is False  # they never change
        listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOL_NAMES and listed.next_cursor is None
    for listed_tool in listed.tools:
        assert listed_tool.annotations is not None
        hints = listed_tool.annotations
        assert (hints.read_only_hint, hints.idempotent_hint, hints.open_world_hint) == (True, True, False)
        assert listed_tool.input_schema["type"] == "object"
        assert listed_tool.output_schema is not None and listed_tool.output_schema["type"] == "object"
    search = next(t for t in listed.tools if t.name == "search_resources")
    assert search.input_schema["required"] == ["query"]


@asynchronous
async def test_tools_list_result_carries_ttl_and_scope_cache_1(srv: Server) -> None:
    """CACHE-1: a 2026-07-28 ``tools/list`` result carries ``ttlMs`` and ``cacheScope``."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": envelope()}}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(srv.served.mcp_url, json=body, headers=modern_headers("tools/list"))
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["ttlMs"] > 0 and result["cacheScope"] == "public"  # the same tools for every caller


def test_the_fast_path_leaves_tools_to_the_sdk() -> None:
    """The fast path answers only the methods it names; every ``tools/*`` request goes to the SDK."""
    for method in ("tools/list", "tools/call"):
        scope = {"type": "http", "method": "POST", "headers": Headers(modern_headers(method, "x")).raw}
        assert not names_fast_method(scope)


@asynchronous
async def test_an_unknown_tool_is_32602(srv: Server) -> None:
    async with srv.client() as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("write_resource", {"uri": "test://x"})
    assert err.value.code == -32602 and "Unknown tool" in err.value.error.message


# -- search ------------------------------------------------------------------------------------------


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_search_ranks_metadata_matches_before_text_matches(srv: Server, mode: str) -> None:
    result = await tool(srv, "search_resources", {"query": "greeting"}, mode)
    # app.py's title is "Greeting logic"; the internal notes only say "greeting" in their text.
    assert uris_of(result) == ["file:///project/src/app.py", GATED]
    assert links_of(result) == uris_of(result)  # resource_link items for the same resources
    first = structured(result)["resources"][0]
    assert first["name"] == "app.py" and first["title"] == "Greeting logic"
    assert first["mimeType"] == "text/x-python" and first["size"] > 0
    assert "nextCursor" not in structured(result)


@asynchronous
async def test_search_matches_text_content_and_honours_filters(srv: Server) -> None:
    assert uris_of(await tool(srv, "search_resources", {"query": "configurable"})) == [GATED]
    tagged = await tool(srv, "search_resources", {"query": "py", "tag": "code"})
    assert uris_of(tagged) == ["file:///project/src/app.py", "file:///project/src/main.py"]
    typed = await tool(srv, "search_resources", {"query": "static", "mimeType": "image/*"})
    assert uris_of(typed) == ["test://static-binary"]
    under = await tool(srv, "search_resources", {"query": "md", "uriPrefix": "file:///project/docs/"})
    assert uris_of(under) == ["file:///project/docs/guide.md", GATED]
    assert uris_of(await tool(srv, "search_resources", {"query": "zebra-nowhere"})) == []


@asynchronous
async def test_search_pages_with_a_cursor_bound_to_its_arguments_pag_1(srv: Server) -> None:
    seen: list[str] = []
    cursor: str | None = None
    async with srv.client() as client:
        for _ in range(5):
            args: dict[str, Any] = {"query": "bulk-"}
            if cursor:
                args["cursor"] = cursor
            page = structured(await client.call_tool("search_resources", args))
            seen += [entry["uri"] for entry in page["resources"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert seen == [f"test://bulk/{i:04d}" for i in range(BULK)]
        first = structured(await client.call_tool("search_resources", {"query": "bulk-"}))
        # The cursor names its query: another query's call refuses it, as does a damaged one.
        other = await client.call_tool("search_resources", {"query": "item", "cursor": first["nextCursor"]})
        damaged = await client.call_tool("search_resources", {"query": "bulk-", "cursor": "nonsense"})
    assert error_text(other).startswith("Invalid cursor") and error_text(damaged) == error_text(other)


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"query": ""},
        {"query": "a\x00b"},
        {"query": "x", "mimeType": "not a type"},
        {"query": "x", "limit": 5},
    ],
)
@asynchronous
async def test_bad_search_arguments_are_a_tool_error_the_model_can_read(
    srv: Server, arguments: dict[str, Any]
) -> None:
    result = await tool(srv, "search_resources", arguments)
    assert error_text(result).startswith("Invalid arguments: ")


@asynchronous
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_resource", {}),
        ("read_resource", {"uri": 5}),
        ("read_resource", {"uri": "test://static-text", "purpose": "x"}),
        ("list_resources", {"recursive": "deep"}),
        ("list_resources", {"uriPrefix": "not a uri"}),
        ("list_resources", {"cursor": "x" * 9000}),
    ],
)
async def test_bad_arguments_of_any_tool_are_a_tool_error(
    srv: Server, name: str, arguments: dict[str, Any]
) -> None:
    assert error_text(await tool(srv, name, arguments)).startswith("Invalid arguments: ")


# -- list --------------------------------------------------------------------------------------------


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_list_opens_one_level_of_the_tree(srv: Server, mode: str) -> None:
    root = structured(await tool(srv, "list_resources", {}, mode))
    assert root["folders"] == ["file:///", "test://bulk/"]
    assert [e["uri"] for e in root["resources"]] == [
        "test://bulk",
        "test://static-binary",
        "test://static-text",
        "test://watched-resource",
    ]
    project = structured(await tool(srv, "list_resources", {"uriPrefix": "file:///project/"}, mode))
    assert project["folders"] == ["file:///project/docs/", "file:///project/src/"]
    # A directory resource is a resource of its parent's level; what is under it, a folder.
    assert [e["uri"] for e in project["resources"]] == [
        "file:///project/README.md",
        "file:///project/docs",
        "file:///project/src",
    ]


@asynchronous
async def test_list_recursive_is_a_flat_page_with_a_cursor(srv: Server) -> None:
    seen: list[str] = []
    pages = 0
    args: dict[str, Any] = {"uriPrefix": "test://bulk/", "recursive": True}
    async with srv.client("legacy") as client:
        while True:
            page = structured(await client.call_tool("list_resources", args))
            pages += 1
            assert page["folders"] == []
            seen += [entry["uri"] for entry in page["resources"]]
            if "nextCursor" not in page:
                break
            args = {**args, "cursor": page["nextCursor"]}
    assert seen == [f"test://bulk/{i:04d}" for i in range(BULK)] and pages == 3


@asynchronous
async def test_a_tree_page_cursor_continues_the_folder(srv: Server) -> None:
    async with srv.client() as client:
        first = structured(await client.call_tool("list_resources", {"uriPrefix": "test://bulk/"}))
        second = structured(
            await client.call_tool(
                "list_resources", {"uriPrefix": "test://bulk/", "cursor": first["nextCursor"]}
            )
        )
        # A cursor of the flat listing is not one of the tree's.
        flat = structured(
            await client.call_tool("list_resources", {"uriPrefix": "test://bulk/", "recursive": True})
        )
        mixed = await client.call_tool(
            "list_resources", {"uriPrefix": "test://bulk/", "cursor": flat["nextCursor"]}
        )
    assert [e["uri"] for e in first["resources"]][:2] == ["test://bulk/0000", "test://bulk/0001"]
    assert len(first["resources"]) == 100 and second["resources"][0]["uri"] == "test://bulk/0100"
    assert error_text(mixed).startswith("Invalid cursor")


# -- read --------------------------------------------------------------------------------------------


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_read_text_blob_directory_and_template(srv: Server, mode: str) -> None:
    async with srv.client(mode) as client:
        text = await client.call_tool("read_resource", {"uri": "test://static-text"})
        blob = await client.call_tool("read_resource", {"uri": "test://static-binary"})
        directory = await client.call_tool("read_resource", {"uri": "file:///project/src"})
        rendered = await client.call_tool("read_resource", {"uri": "test://template/42/data"})
    [item] = text.content
    assert isinstance(item, types.EmbeddedResource) and isinstance(item.resource, types.TextResourceContents)
    assert item.resource.text == "This is the content of the static text resource."
    assert structured(text) == {
        "uri": "test://static-text",
        "contents": [
            {
                "uri": "test://static-text",
                "mimeType": "text/plain",
                "text": "This is the content of the static text resource.",
            }
        ],
        "truncated": False,
    }
    [blob_item] = structured(blob)["contents"]
    assert base64.b64decode(blob_item["blob"]) == _png_1x1() and blob_item["mimeType"] == "image/png"
    assert [c["uri"] for c in structured(directory)["contents"]] == [
        "file:///project/src/app.py",
        "file:///project/src/main.py",
    ]
    [rendered_item] = structured(rendered)["contents"]
    assert "42" in rendered_item["text"]


@asynchronous
async def test_a_hidden_uri_is_answered_as_a_missing_one(srv: Server) -> None:
    """The one visibility rule: anonymous callers cannot see HIDDEN (tag ``staff``); the answer is
    the missing URI's, word for word (with the URI it was given)."""
    hidden = await tool(srv, "read_resource", {"uri": HIDDEN})
    missing = await tool(srv, "read_resource", {"uri": MISSING})
    assert error_text(hidden) == f"Resource not found: {HIDDEN}"
    assert error_text(missing) == f"Resource not found: {MISSING}"
    seen = await tool(srv, "read_resource", {"uri": HIDDEN}, token="staff")
    assert structured(seen)["contents"][0]["text"] == "hidden notes"
    # Nor does it show in a search or a listing.
    assert HIDDEN not in uris_of(await tool(srv, "search_resources", {"query": "notes"}))
    assert (
        "file:///private/"
        not in structured(await tool(srv, "list_resources", {"uriPrefix": "file:///"}))["folders"]
    )
    assert HIDDEN in uris_of(await tool(srv, "search_resources", {"query": "notes"}, token="staff"))


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_a_scope_sees_only_its_grants(srv: Server, mode: str) -> None:
    """The ``src`` token's one grant is the prefix ``file:///project/src``."""
    found = await tool(srv, "search_resources", {"query": "py"}, mode, token="src")
    assert uris_of(found) == ["file:///project/src/app.py", "file:///project/src/main.py"]
    assert uris_of(await tool(srv, "search_resources", {"query": "guide"}, mode, token="src")) == []
    root = structured(await tool(srv, "list_resources", {}, mode, token="src"))
    assert root == {"resources": [], "folders": ["file:///"]}
    flat = await tool(srv, "list_resources", {"recursive": True}, mode, token="src")
    assert uris_of(flat) == [
        "file:///project/src",
        "file:///project/src/app.py",
        "file:///project/src/main.py",
    ]
    refused = await tool(srv, "read_resource", {"uri": "test://static-text"}, mode, token="src")
    assert error_text(refused) == "Resource not found: test://static-text"
    nothing = await tool(srv, "list_resources", {"recursive": True}, mode, token="none")
    assert structured(nothing) == {"resources": [], "folders": []}


@asynchronous
async def test_an_invalid_uri_is_a_tool_error(srv: Server) -> None:
    result = await tool(srv, "read_resource", {"uri": "file:///project/../etc/passwd"})
    assert error_text(result).startswith("Invalid resource URI")


# -- consent -----------------------------------------------------------------------------------------


async def consent_audit(srv: Server) -> list[tuple[str, str]]:
    conn = await asyncpg.connect(srv.dsn)
    try:
        rows = await conn.fetch(
            "SELECT uri, detail->>'purpose' AS purpose FROM audit_log WHERE action = 'resource.consent' ORDER BY id"
        )
    finally:
        await conn.close()
    return [(r["uri"], r["purpose"]) for r in rows]


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_a_consent_gated_read_asks_first_and_audits_the_purpose_mrtr_1(srv: Server, mode: str) -> None:
    """As ``resources/read``: an ``InputRequiredResult`` at 2026-07-28 (MRTR-2 allows it on
    ``tools/call``), a server-initiated elicitation in a 2025-11-25 session; then the contents, and
    the accepted purpose in the audit log."""
    purpose = f"tool read in {mode}"
    result = await tool(srv, "read_resource", {"uri": GATED}, mode, elicitation_callback=accepting(purpose))
    assert structured(result)["contents"] == [{"uri": GATED, "mimeType": "text/markdown", "text": GATED_TEXT}]
    assert (GATED, purpose) in await consent_audit(srv)


@asynchronous
@pytest.mark.parametrize("mode", ERAS)
async def test_a_declined_consent_reads_nothing_and_audits_nothing(srv: Server, mode: str) -> None:
    before = await consent_audit(srv)
    result = await tool(srv, "read_resource", {"uri": GATED}, mode, elicitation_callback=answering("decline"))
    assert error_text(result) == "Consent declined; nothing was read"
    assert await consent_audit(srv) == before


@asynchronous
async def test_a_client_that_cannot_be_asked_gets_the_capability_error_meta_3(srv: Server) -> None:
    async with srv.client() as client:  # no elicitation callback: the capability is not declared
        with pytest.raises(MCPError) as err:
            await client.call_tool("read_resource", {"uri": GATED})
    assert err.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


# -- the edge: rate limits; and off ---------------------------------------------------------------


def tools_call(name: str, arguments: dict[str, Any], id: int = 1) -> tuple[dict[str, Any], dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"_meta": envelope(), "name": name, "arguments": arguments},
    }
    return body, modern_headers("tools/call", name)


@asynchronous
async def test_tool_calls_spend_the_callers_rate_comp_6(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    async with module_database(postgres_server, template_database) as url:
        await seed(mcp_settings(url, tmp_path))
        env = serve_env(url, tmp_path / "home", CATALOG_RATE_LIMIT_BURST="3")
        env["CATALOG_RATE_LIMIT_PER_MINUTE"] = "0.0001"  # no refill while the test runs
        with serving(env=env) as served:
            await asyncio.to_thread(started, served)
            body, headers = tools_call("read_resource", {"uri": "test://static-text"})
            async with httpx.AsyncClient(timeout=30) as http:
                answers = [await http.post(served.mcp_url, json=body, headers=headers) for _ in range(5)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert answers[0].json()["result"]["structuredContent"]["contents"][0]["uri"] == "test://static-text"
    assert int(answers[-1].headers["retry-after"]) >= 1


@asynchronous
async def test_off_serves_no_tools_and_advertises_none(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    async with module_database(postgres_server, template_database) as url:
        fixture = await seed(mcp_settings(url, tmp_path))
        with serving(env=serve_env(url, tmp_path / "home", CATALOG_MCP_TOOLS="off")) as served:
            await asyncio.to_thread(started, served)
            server = Server(served, fixture, "")
            for mode in ("auto", "legacy"):
                async with server.client(mode) as client:
                    assert client.server_capabilities.tools is None
                    assert client.server_capabilities.resources is not None
                    with pytest.raises(MCPError) as err:
                        await client.list_tools()
                    assert err.value.code == -32601
            body, headers = tools_call("read_resource", {"uri": "test://static-text"})
            async with httpx.AsyncClient(timeout=30) as http:
                response = await http.post(served.mcp_url, json=body, headers=headers)
    assert response.status_code == 404 and response.json()["error"]["code"] == -32601


def test_a_bad_tools_setting_ends_serve_with_one_line_naming_it(database_url: str, tmp_path: Path) -> None:
    from tests.conftest import free_port
    from tests.processes import run_catalog

    env = catalog_env(
        CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"), CATALOG_MCP_TOOLS="maybe"
    )
    result = run_catalog("serve", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "catalog: CATALOG_MCP_TOOLS: Input should be 'on' or 'off'"
    ), lines


def test_summary_text_names_folders_and_cursor() -> None:
    """The text item of a page says what the structured content says besides the links."""
    from catalog.mcp.tools import _page

    answer = _page([], "abc", folders=["file:///x/"])
    assert json.loads(answer["content"][-1]["text"]) == {
        "resources": 0,
        "folders": ["file:///x/"],
        "nextCursor": "abc",
    }


def test_the_typescript_sdk_lists_and_calls_the_tools(srv: Server, node_clients: Path) -> None:  # noqa: F811
    """The TypeScript SDK client (1.x, a 2025-11-25 session), which checks each result's
    ``structuredContent`` against the tool's ``outputSchema``: ``tests/ts/tools.mjs``."""
    node = shutil.which("node")
    assert node
    ran = subprocess.run(
        [node, str(node_clients.parent / "tools.mjs"), srv.served.mcp_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    steps = {}
    for line in ran.stdout.splitlines():
        record = json.loads(line)
        assert "failed" not in record, record["failed"]
        steps[record.get("step", "done")] = record
    assert ran.returncode == 0, ran.stderr
    assert steps["capabilities"]["tools"] == {"listChanged": False}
    assert {t["name"] for t in steps["tools/list"]["tools"]} == TOOL_NAMES
    assert all(t["output"] and t["annotations"]["readOnlyHint"] for t in steps["tools/list"]["tools"])
    assert steps["search_resources"]["uris"] == ["file:///project/src/app.py", GATED]
    assert steps["search_resources"]["links"] == steps["search_resources"]["uris"]
    assert steps["list_resources"]["folders"] == ["file:///project/docs/", "file:///project/src/"]
    assert steps["read_resource"]["text"] == "This is the content of the static text resource."
    assert steps["consent"]["text"] == GATED_TEXT
    assert steps["missing"] == {
        "step": "missing",
        "isError": True,
        "text": "Resource not found: file:///nowhere",
    }
