"""resources/list, resources/templates/list, resources/read through the official SDK client over real
HTTP, in both eras (RES, PAG, CACHE, META, COMPAT), and the visibility rule on every one of them."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from catalog.core.reading import DIRECTORY_MAX_ITEMS
from catalog.demo import _png_1x1
from tests.mcp_helpers import (
    BULK,
    ERAS,
    HIDDEN,
    MODERN,
    Served,
    all_pages,
    mcp_settings,
    module_database,
    served,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

DEMO_URIS = {
    "test://static-text",
    "test://static-binary",
    "test://watched-resource",
    "file:///project",
    "file:///project/README.md",
    "file:///project/src",
    "file:///project/src/main.py",
    "file:///project/src/app.py",
    "file:///project/docs",
    "file:///project/docs/guide.md",
    "file:///project/docs/internal-notes.md",
    "test://bulk",
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


def not_found_code(mode: str) -> int:
    return -32602 if mode == MODERN else -32002


# -- listing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_list_pages_everything_visible_in_uri_order_pag_1_pag_2(srv: Served, mode: str) -> None:
    """RES-4, PAG-3 (docs/requirements.toml)."""
    async with srv.client(mode) as client:
        items, pages = await all_pages(client)
    uris = [r.uri for r in items]
    assert uris == sorted(uris, key=lambda u: u.encode())  # byte order
    assert len(uris) == len(set(uris)) == len(DEMO_URIS) + BULK
    assert set(uris) >= DEMO_URIS and HIDDEN not in uris
    assert [len(p.resources) for p in pages] == [100, 100, 62]
    assert all(p.next_cursor for p in pages[:-1]) and pages[-1].next_cursor is None


async def test_list_pages_carry_a_constant_private_scope_even_for_anonymous_callers_cache_1_cache_6_cache_7(
    srv: Served,
) -> None:
    """One /mcp serves every tenant: the same URL answers another tenant's token differently, so no
    answer is ``public`` (CACHE-6), not even the public tenant's anonymous one.
    Also PAG-7, CACHE-4 (docs/requirements.toml)."""
    async with srv.client() as client:
        _, pages = await all_pages(client)
    assert {(p.ttl_ms, p.cache_scope) for p in pages} == {(10_000, "private")}


async def test_list_for_token_is_private_and_includes_tag_granted_resource_cache_6(srv: Served) -> None:
    """RES-7, AUTH-11 (docs/requirements.toml)."""
    async with srv.client(token="staff") as client:
        items, pages = await all_pages(client)
    assert {p.cache_scope for p in pages} == {"private"}
    assert HIDDEN in {r.uri for r in items}


async def test_resource_metadata_is_served_exactly_as_stored_meta(srv: Served) -> None:
    """RES-8, RES-9, RES-26, META-7 (docs/requirements.toml)."""
    async with srv.client() as client:
        items, _ = await all_pages(client)
    readme = next(r for r in items if r.uri == "file:///project/README.md")
    assert readme.name == "README.md" and readme.title == "Project README"
    assert readme.mime_type == "text/markdown"
    assert readme.annotations is not None
    assert readme.annotations.audience == ["user", "assistant"] and readme.annotations.priority == 0.9
    assert readme.annotations.last_modified  # defaults to the last content change
    text = "# Example project\n\nA tiny service used to show catalog's resources.\n"
    assert readme.size == len(text.encode())
    binary = next(r for r in items if r.uri == "test://static-binary")
    assert binary.size == len(_png_1x1()) and binary.mime_type == "image/png"


async def test_cursor_is_bound_to_visibility_and_tampering_is_rejected_pag_5(srv: Served) -> None:
    async with srv.client() as anon:
        cursor = (await anon.list_resources()).next_cursor
        assert cursor
        for bad in ("garbage", cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB"), cursor + "x", ""):
            if bad == "":
                continue
            with pytest.raises(MCPError) as err:
                await anon.list_resources(cursor=bad)
            assert err.value.code == -32602
        with pytest.raises(MCPError) as err:  # a resources cursor is not a templates cursor
            await anon.list_resource_templates(cursor=cursor)
        assert err.value.code == -32602
    async with srv.client(token="staff") as staff:  # another caller's cursor
        with pytest.raises(MCPError) as err:
            await staff.list_resources(cursor=cursor)
        assert err.value.code == -32602


async def test_cursor_continues_on_another_connection_pag_6(srv: Served) -> None:
    """CACHE-9, META-8 (docs/requirements.toml)."""
    async with srv.client() as first:
        page1 = await first.list_resources()
    async with srv.client() as second:
        page2 = await second.list_resources(cursor=page1.next_cursor)
    assert page2.resources[0].uri > page1.resources[-1].uri


@pytest.mark.parametrize("mode", ERAS)
async def test_templates_list_with_hints_res_13(srv: Served, mode: str) -> None:
    async with srv.client(mode) as client:
        items, pages = await all_pages(client, "templates")
    assert {t.uri_template for t in items} == {"file:///project/src/{name}", "test://template/{id}/data"}
    data = next(t for t in items if t.uri_template == "test://template/{id}/data")
    assert data.name == "template-data" and data.mime_type == "application/json"
    if mode == MODERN:
        assert (pages[0].ttl_ms, pages[0].cache_scope) == (60_000, "private")


# -- reading ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_read_text_and_blob_with_right_mime_and_size_res_9_res_12(srv: Served, mode: str) -> None:
    """RES-10 (docs/requirements.toml)."""
    async with srv.client(mode) as client:
        text = await client.read_resource("test://static-text")
        blob = await client.read_resource("test://static-binary")
    [item] = text.contents
    assert isinstance(item, types.TextResourceContents)
    assert item.text == "This is the content of the static text resource." and item.mime_type == "text/plain"
    assert item.uri == "test://static-text"
    [bin_item] = blob.contents
    assert isinstance(bin_item, types.BlobResourceContents) and bin_item.mime_type == "image/png"
    assert base64.b64decode(bin_item.blob) == _png_1x1()
    if mode == MODERN:
        assert (text.ttl_ms, text.cache_scope) == (10_000, "private")


@pytest.mark.parametrize("mode", ERAS)
async def test_read_directory_returns_visible_descendants_without_consent_gated_ones_res_11(
    srv: Served, mode: str
) -> None:
    """RES-21 (docs/requirements.toml)."""
    async with srv.client(mode) as client:
        result = await client.read_resource("file:///project")
    uris = [c.uri for c in result.contents]
    assert uris == [
        "file:///project/README.md",
        "file:///project/docs/guide.md",
        "file:///project/src/app.py",
        "file:///project/src/main.py",
    ]
    assert all(isinstance(c, types.TextResourceContents) and c.text for c in result.contents)


async def test_read_directory_is_bounded_to_100_items_in_uri_order(srv: Served) -> None:
    """RES-11 (docs/requirements.toml)."""
    async with srv.client() as client:
        result = await client.read_resource("test://bulk")
    assert len(result.contents) == DIRECTORY_MAX_ITEMS
    assert [c.uri for c in result.contents] == [f"test://bulk/{i:04d}" for i in range(DIRECTORY_MAX_ITEMS)]


@pytest.mark.parametrize("mode", ERAS)
async def test_read_template_expansion_renders_body_res_15(srv: Served, mode: str) -> None:
    """RES-14 (docs/requirements.toml)."""
    async with srv.client(mode) as client:
        result = await client.read_resource("test://template/123/data")
    [item] = result.contents
    assert isinstance(item, types.TextResourceContents) and item.mime_type == "application/json"
    assert json.loads(item.text) == {"id": "123", "templateTest": True, "data": "Data for ID: 123"}


@pytest.mark.parametrize("mode", ERAS)
async def test_read_template_value_is_json_escaped(srv: Served, mode: str) -> None:
    async with srv.client(mode) as client:
        result = await client.read_resource("test://template/a%22b/data")
    assert json.loads(result.contents[0].text)["id"] == 'a"b'  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ERAS)
async def test_missing_hidden_and_bodiless_template_uris_are_not_found_res_17_err_1(
    srv: Served, mode: str
) -> None:
    """RES-18, COMPAT-6 (docs/requirements.toml)."""
    async with srv.client(mode) as client:
        for uri in (
            "test://nonexistent-resource-for-conformance-testing",
            HIDDEN,  # exists, invisible to anonymous callers: the same error
            "file:///project/src/other.py",  # matches a template without a body
        ):
            with pytest.raises(MCPError) as err:
                await client.read_resource(uri)
            assert err.value.code == not_found_code(mode)
            assert err.value.error.message == "Resource not found"
            assert err.value.error.data == {"uri": uri}


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    "uri",
    [
        "file:///project/../private/notes.txt",
        "file:///project/%2e%2e/private/notes.txt",
        "file:///project/..%2fprivate/notes.txt",
        "file:///project/%2E./private/notes.txt",
        "file:///project/.%2e%2Fprivate%2fnotes.txt",
        "file:///project/%252e%252e/private/notes.txt",
        "file:///project/src/..\\..\\private",
        "file:///project/\x00",
        "::",
        "file:///" + "a" * 2100,
    ],
)
async def test_traversal_and_malformed_uris_never_return_content_res_23_res_24(
    srv: Served, mode: str, uri: str
) -> None:
    async with srv.client(mode, token="admin") as client:  # even an admin, who may see the target
        with pytest.raises(MCPError) as err:
            await client.read_resource(uri)
    assert err.value.code in (-32602, -32002)
    assert err.value.error.data == {"uri": uri}


# -- visibility: a prefix grant sees only its subtree, on every surface ---------------------------


@pytest.mark.parametrize("mode", ERAS)
async def test_prefix_grant_sees_only_its_subtree_in_list_read_and_templates_res_25(
    srv: Served, mode: str
) -> None:
    """RES-7, CACHE-5, AUTH-9, AUTH-11, AUTH-12 (docs/requirements.toml)."""
    async with srv.client(mode, token="src") as client:
        items, pages = await all_pages(client)
        assert [r.uri for r in items] == [
            "file:///project/src",
            "file:///project/src/app.py",
            "file:///project/src/main.py",
        ]
        if mode == MODERN:
            assert pages[0].cache_scope == "private"
        templates, _ = await all_pages(client, "templates")
        assert [t.uri_template for t in templates] == ["file:///project/src/{name}"]
        main = await client.read_resource("file:///project/src/main.py")
        assert "greet" in main.contents[0].text  # type: ignore[union-attr]
        for outside in ("test://static-text", "file:///project/README.md", "test://template/1/data", HIDDEN):
            with pytest.raises(MCPError) as err:
                await client.read_resource(outside)
            assert err.value.code == not_found_code(mode) and err.value.error.data == {"uri": outside}


async def test_token_without_grants_sees_nothing(srv: Served) -> None:
    """RES-5, CACHE-5 (docs/requirements.toml)."""
    async with srv.client(token="none") as client:
        page = await client.list_resources()
        assert page.resources == [] and page.next_cursor is None
        with pytest.raises(MCPError) as err:
            await client.read_resource("test://static-text")
        assert err.value.code == -32602


async def test_tenants_are_walled_other_tenant_admin_reads_its_own_resource(srv: Served) -> None:
    async with srv.client(token="other-admin") as client:
        items, _ = await all_pages(client)
        assert [r.uri for r in items] == ["test://static-text"]
        result = await client.read_resource("test://static-text")
        assert result.contents[0].text == "other tenant"  # type: ignore[union-attr]
        with pytest.raises(MCPError):
            await client.read_resource("file:///project/README.md")


async def test_same_credentials_same_list_after_other_requests_res_6(srv: Served) -> None:
    """CACHE-9 (docs/requirements.toml)."""
    async with srv.client() as one:
        first, _ = await all_pages(one)
    async with srv.client() as two:
        await two.read_resource("test://static-text")
        second, _ = await all_pages(two)
    assert [r.uri for r in first] == [r.uri for r in second]


# -- discovery -------------------------------------------------------------------------------------


async def test_discover_advertises_what_is_served_disc_1_res_3(srv: Served) -> None:
    """RES-1, RES-2, META-10, DISC-4, COMP-1, COMPAT-4 (docs/requirements.toml)."""
    async with srv.client("auto") as client:
        assert client.protocol_version == MODERN
        caps = client.server_capabilities
        assert (
            caps.resources is not None
            and caps.resources.subscribe is True
            and caps.resources.list_changed is True
        )
        assert caps.completions is not None
        # The read-only tools are on by default (tests/e2e/mcp/test_mcp_tools.py); their list never changes.
        assert caps.tools is not None and caps.tools.list_changed is False
        assert caps.prompts is None and caps.logging is None
        assert client.server_info is not None and client.server_info.name == "catalog"


async def test_legacy_initialize_echoes_version_and_capabilities_compat_2_compat_4(srv: Served) -> None:
    """DISC-4 (docs/requirements.toml)."""
    async with srv.client("legacy") as client:
        assert client.protocol_version == "2025-11-25"
        caps = client.server_capabilities
        assert (
            caps.resources is not None
            and caps.resources.subscribe is True
            and caps.resources.list_changed is True
        )
        assert caps.completions is not None and caps.tools is not None
