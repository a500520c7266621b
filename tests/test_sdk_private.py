"""The private parts of the ``mcp`` SDK that catalog uses (``catalog.mcp.sdk_private``): each still
exists in the installed SDK, and the listen fast path is really taken. An SDK upgrade that renames
one fails here, not silently in a benchmark."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from mcp.client.subscriptions import ResourceUpdated

from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas import ResourceIn
from catalog.core.service import Catalog
from catalog.db.engine import create_engine
from catalog.mcp.sdk_private import PRIVATE_NAMES
from tests.mcp_helpers import Served, mcp_settings, module_database, served

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
    listen = srv.app.state.mcp.listen
    before = listen.frames_sent
    async with srv.client() as client, client.listen(resource_subscriptions=[WATCHED]) as sub:
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
        with anyio.fail_after(10):
            event = await anext(aiter(sub))
    assert event == ResourceUpdated(uri=WATCHED)
    assert listen.frames_sent == before + 1  # written to the SDK's response sink, not re-serialised
