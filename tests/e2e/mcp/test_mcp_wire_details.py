"""What exactly goes on the wire, per client: one spelling of a subscribed URI in the ack and in its
notifications, and each handshake revision only the fields it defines (COMPAT-5; 2024-11-05 and
2025-03-26 sessions used to receive ``title``, ``lastModified`` and the ``completions`` capability)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import pytest_asyncio

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.db.engine import create_engine
from catalog.mcp.revisions import for_revision
from tests.mcp_helpers import Served, mcp_settings, module_database, served, sse_messages

asynchronous = pytest.mark.asyncio(loop_scope="session")

SPELLINGS = ("TEST://watched-resource", "test://watched%2Dresource", "test://watched-resource")


@pytest_asyncio.fixture(loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path)) as s,
    ):
        yield s


async def touch_watched(srv: Served, text: str) -> None:
    settings = srv.app.state.settings
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    try:
        body = {
            "uri": "test://watched-resource",
            "name": "watched-resource",
            "mimeType": "text/plain",
            "text": text,
        }
        catalog = Catalog(engine=engine, settings=settings)
        await upsert_resource(
            catalog, Principal.system("tests"), srv.fixture.tenant, ResourceIn.model_validate(body)
        )
    finally:
        await engine.dispose()


@asynchronous
async def test_notifications_name_a_subscribed_uri_as_the_client_spelt_it_and_the_ack_echoed_it(
    srv: Served,
) -> None:
    for spelt in SPELLINGS:
        async with srv.client() as client, client.listen(resource_subscriptions=[spelt]) as sub:
            assert sub.honored.resource_subscriptions == [spelt]
            await touch_watched(srv, f"for {spelt}")
            with anyio.fail_after(10):
                event = await anext(aiter(sub))
            assert event.uri == spelt  # the SDK itself matches by string: it would drop any other


async def legacy_session(srv: Served, version: str) -> tuple[dict[str, Any], dict[str, str]]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "old", "version": "0"},
        },
    }
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(srv.mcp_url, json=init, headers=headers)
    [message] = sse_messages(response.text)
    return message["result"], {
        **headers,
        "Mcp-Session-Id": response.headers["mcp-session-id"],
        "MCP-Protocol-Version": version,
    }


async def call(
    srv: Served, headers: dict[str, str], method: str, params: dict[str, Any] | None = None
) -> Any:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 2, "method": method}
    if params is not None:
        body["params"] = params
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(srv.mcp_url, json=body, headers=headers)
    return sse_messages(response.text)[0]["result"]


@asynchronous
@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26"])
async def test_an_old_revision_session_gets_only_the_fields_its_revision_defines_compat_5(
    srv: Served, version: str
) -> None:
    initialized, headers = await legacy_session(srv, version)
    assert initialized["protocolVersion"] == version
    assert set(initialized["serverInfo"]) == {"name", "version"}  # no title before 2025-06-18
    assert ("completions" in initialized["capabilities"]) is (version >= "2025-03-26")
    listed = await call(srv, headers, "resources/list")
    everything = json.dumps(listed)
    assert '"title"' not in everything and '"lastModified"' not in everything and '"icons"' not in everything
    assert {"uri", "name"} <= set(listed["resources"][0])
    templates = await call(srv, headers, "resources/templates/list")
    assert all("title" not in t for t in templates["resourceTemplates"])


@asynchronous
async def test_a_2025_11_25_session_keeps_every_field(srv: Served) -> None:
    initialized, headers = await legacy_session(srv, "2025-11-25")
    assert initialized["serverInfo"]["title"] == "Catalog" and "completions" in initialized["capabilities"]
    listed = await call(srv, headers, "resources/list")
    assert any("title" in r for r in listed["resources"])


def test_the_revision_sieve_by_field() -> None:
    resource = {
        "uri": "a://b",
        "name": "b",
        "title": "B",
        "icons": [{"src": "data:,"}],
        "_meta": {"x": 1},
        "annotations": {"audience": ["user"], "lastModified": "2026-01-01T00:00:00Z"},
    }
    result = {"resources": [resource], "nextCursor": "c"}
    assert for_revision("2025-03-26", "resources/list", result) == {
        "resources": [{"uri": "a://b", "name": "b", "annotations": {"audience": ["user"]}}],
        "nextCursor": "c",
    }
    assert for_revision("2025-06-18", "resources/list", result)["resources"][0] == {
        "uri": "a://b",
        "name": "b",
        "title": "B",
        "_meta": {"x": 1},
        "annotations": {"audience": ["user"], "lastModified": "2026-01-01T00:00:00Z"},
    }
    assert for_revision("2025-11-25", "resources/list", result) is result
