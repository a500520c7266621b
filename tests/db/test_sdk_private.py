"""The private parts of the ``mcp`` SDK that catalog uses (``catalog.mcp.sdk_private``): each still
exists in the installed SDK, and the listen fast path is really taken. An SDK upgrade that renames
one fails here, not silently in a benchmark."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.db.engine import create_engine
from catalog.mcp.sdk_private import PRIVATE_NAMES
from tests.mcp_helpers import RawListen, Served, mcp_settings, module_database, served

pytestmark = pytest.mark.asyncio(loop_scope="session")

WATCHED = "test://watched-resource"


@pytest.mark.parametrize(("module", "owner", "name"), PRIVATE_NAMES)
async def test_every_private_sdk_name_catalog_uses_still_exists(module: str, owner: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), owner)
    fields = getattr(cls, "__dataclass_fields__", {})
    slots = getattr(cls, "__slots__", ())
    init_assigns = name in (cls.__init__.__code__.co_names if hasattr(cls.__init__, "__code__") else ())
    assert hasattr(cls, name) or name in fields or name in slots or init_assigns, f"{owner}.{name} is gone"


@pytest_asyncio.fixture(loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path)) as s,
    ):
        yield s


async def test_a_listen_delivery_takes_the_fast_path(srv: Served) -> None:
    """A listen the SDK serves (a progress token keeps it off ``catalog.mcp.fast_listen``) has its
    deliveries written to the SDK's response sink, not re-serialised by the SDK."""
    listen = srv.app.state.mcp.listen
    before = listen.frames_sent
    stream = RawListen(srv, {"resourceSubscriptions": [WATCHED]}, through_sdk=True)
    async with stream.opened():
        await stream.next()  # the ack
        body = {"uri": WATCHED, "name": "watched", "mimeType": "text/plain", "text": "changed"}
        settings = srv.app.state.settings
        engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
        try:  # a curator's write, from an engine of its own (the server runs on another loop)
            catalog = Catalog(engine=engine, settings=settings)
            await upsert_resource(
                catalog, Principal.system("tests"), srv.fixture.tenant, ResourceIn.model_validate(body)
            )
        finally:
            await engine.dispose()
        event = await stream.next()
    assert event["params"] == {"uri": WATCHED, "_meta": {"io.modelcontextprotocol/subscriptionId": 1}}
    assert listen.frames_sent == before + 1  # written to the SDK's response sink, not re-serialised
