"""A ``uriPrefix`` grant ending in ``/`` covers the directory resource it names, over MCP: a token
whose scope holds only ``file:///imp/api/`` lists, reads and is notified about ``file:///imp/api``
(the ``inode/directory`` resource a directory import stores for the folder) and what is under it,
never ``file:///imp/apix`` nor ``file:///imp/ap``. Under ``CATALOG_MCP_FAST_PATH=off`` and
``shadow`` too (CI runs this module both ways)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError

from catalog.core.grants import create_grant
from catalog.core.resources import upsert_many, upsert_resource
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tokens import create_token
from tests.mcp_helpers import (
    ERAS,
    MODERN,
    SYSTEM,
    Served,
    acting_catalog,
    all_pages,
    mcp_settings,
    module_database,
    served,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

DIRECTORY = "file:///imp/api"
UNDER = ["file:///imp/api/sub", "file:///imp/api/sub/y.md", "file:///imp/api/x.md"]
BESIDE = ["file:///imp/ap", "file:///imp/api-v2", "file:///imp/api.md", "file:///imp/apix"]
WAIT = 10  # seconds a notification may take


def _body(uri: str) -> ResourceIn:
    directory = uri in (DIRECTORY, "file:///imp/api/sub")
    fields: dict[str, Any] = {"mimeType": "inode/directory"} if directory else {"text": f"at {uri}"}
    return ResourceIn.model_validate({"uri": uri, "name": uri.rsplit("/", 1)[-1], **fields})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    """The demo catalogue plus an imported folder ``file:///imp/api`` beside look-alike URIs, and
    the token ``api`` whose one scope holds the grant ``file:///imp/api/``."""
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            async with acting_catalog(s) as catalog:
                tenant = s.fixture.tenant
                await upsert_many(
                    catalog, SYSTEM, tenant, [_body(uri) for uri in [DIRECTORY, *UNDER, *BESIDE]]
                )
                await create_grant(
                    catalog,
                    SYSTEM,
                    tenant,
                    GrantIn.model_validate({"scope": "api", "uriPrefix": "file:///imp/api/"}),
                )
                created = await create_token(
                    catalog, SYSTEM, tenant, TokenIn.model_validate({"scopes": ["api"]})
                )
                s.fixture.tokens["api"] = created.token
            yield s


@pytest.mark.parametrize("mode", ERAS)
async def test_a_slash_prefix_grant_lists_and_reads_its_directory_and_nothing_beside_it(
    srv: Served, mode: str
) -> None:
    """The list (every page) is the directory and what is under it; the directory reads as its
    visible descendants; the look-alikes ``…/apix``, ``…/ap``, ``…/api-v2``, ``…/api.md`` are not
    found, as a missing URI is."""
    async with srv.client(mode, token="api") as client:
        items, _ = await all_pages(client)
        assert [r.uri for r in items] == [DIRECTORY, *UNDER]
        read = await client.read_resource(DIRECTORY)
        assert sorted(content.uri for content in read.contents) == [
            "file:///imp/api/sub/y.md",
            "file:///imp/api/x.md",
        ]
        for uri in UNDER[1:]:
            assert (await client.read_resource(uri)).contents[0].text == f"at {uri}"  # type: ignore[union-attr]
        for outside in BESIDE:
            with pytest.raises(MCPError) as err:
                await client.read_resource(outside)
            assert err.value.code == (-32602 if mode == MODERN else -32002)
            assert err.value.error.data == {"uri": outside}


async def test_the_tree_tool_shows_the_directory_of_a_slash_prefix_grant(srv: Served) -> None:
    """``list_resources`` at ``file:///imp/`` shows the directory resource and its folder, nothing
    else of that level; ``read_resource`` of ``…/apix`` is the not-found error."""
    async with srv.client(token="api") as client:
        page = await client.call_tool("list_resources", {"uriPrefix": "file:///imp/"})
        assert isinstance(page.structured_content, dict)
        assert [r["uri"] for r in page.structured_content["resources"]] == [DIRECTORY]
        assert page.structured_content["folders"] == ["file:///imp/api/"]
        refused = await client.call_tool("read_resource", {"uri": "file:///imp/apix"})
        assert refused.is_error
        assert "file:///imp/apix" in json.dumps([block.model_dump() for block in refused.content])
        shown = await client.call_tool("read_resource", {"uri": DIRECTORY})
        assert not shown.is_error


async def test_a_subscription_to_the_directory_fires_for_it_and_not_for_a_look_alike(srv: Served) -> None:
    """Event fan-out decides by the same rule: subscribed to ``file:///imp/api`` and
    ``file:///imp/apix``, the token is told of the directory's change only."""
    async with (
        srv.client(token="api") as client,
        client.listen(resource_subscriptions=[DIRECTORY, "file:///imp/apix"]) as sub,
        acting_catalog(srv) as catalog,
    ):
        tenant = srv.fixture.tenant
        await upsert_resource(
            catalog,
            SYSTEM,
            tenant,
            ResourceIn.model_validate({"uri": "file:///imp/apix", "name": "x", "text": "2"}),
        )
        await upsert_resource(
            catalog,
            SYSTEM,
            tenant,
            ResourceIn.model_validate(
                {"uri": DIRECTORY, "name": "api", "mimeType": "inode/directory", "title": "API"}
            ),
        )
        with anyio.fail_after(WAIT):
            async for event in sub:
                assert event == ResourceUpdated(uri=DIRECTORY)
                break
