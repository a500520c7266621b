"""completion/complete for resource-template arguments (COMP-1..6), both eras."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_many
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.templates import create_template
from catalog.core.tenants import find_tenant
from catalog.db.engine import create_engine
from tests.mcp_helpers import ERAS, Served, mcp_settings, module_database, served

pytestmark = pytest.mark.asyncio(loop_scope="session")

SRC = types.ResourceTemplateReference(type="ref/resource", uri="file:///project/src/{name}")
TREE = types.ResourceTemplateReference(type="ref/resource", uri="test://tree/{dir}/{file}")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            await _more(settings)
            yield s


async def _more(settings: Any) -> None:
    """A two-variable template with 150 files in dir ``big`` and two in ``small``."""
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    catalog = Catalog(engine=engine, settings=settings)
    system = Principal.system("tests")
    try:
        tenant = await find_tenant(catalog, "demo")
        assert tenant is not None
        await create_template(
            catalog, system, tenant, TemplateIn.model_validate({"uriTemplate": TREE.uri, "name": "tree"})
        )
        bodies = [{"uri": f"test://tree/big/f{i:03d}", "name": f"f{i}", "text": "x"} for i in range(150)]
        bodies += [{"uri": f"test://tree/small/{n}", "name": n, "text": "x"} for n in ("alpha", "beta")]
        bodies.append({"uri": "test://tree/small/deeper/x", "name": "x", "text": "does not match {file}"})
        await upsert_many(catalog, system, tenant, [ResourceIn.model_validate(b) for b in bodies])
    finally:
        await engine.dispose()


@pytest.mark.parametrize("mode", ERAS)
async def test_values_come_from_visible_stored_uris_matching_the_template_comp_2_comp_3(
    srv: Served, mode: str
) -> None:
    """COMP-4 (docs/requirements.toml)."""
    async with srv.client(mode) as client:
        everything = await client.complete(SRC, {"name": "name", "value": ""})
        prefixed = await client.complete(SRC, {"name": "name", "value": "ma"})
    assert everything.completion.values == ["app.py", "main.py"]
    assert (everything.completion.total, everything.completion.has_more) == (2, False)
    assert prefixed.completion.values == ["main.py"] and prefixed.completion.total == 1


async def test_context_arguments_narrow_the_values(srv: Served) -> None:
    """COMP-2 (docs/requirements.toml)."""
    async with srv.client() as client:
        small = await client.complete(TREE, {"name": "file", "value": ""}, context_arguments={"dir": "small"})
        dirs = await client.complete(TREE, {"name": "dir", "value": "s"})
    assert small.completion.values == ["alpha", "beta"]  # not "deeper/x": {file} matches one segment
    assert dirs.completion.values == ["small"]


async def test_at_most_100_values_with_total_and_has_more_comp_3(srv: Served) -> None:
    """COMP-4 (docs/requirements.toml)."""
    async with srv.client() as client:
        result = await client.complete(TREE, {"name": "file", "value": "f"}, context_arguments={"dir": "big"})
    assert len(result.completion.values) == 100
    assert result.completion.values[:2] == ["f000", "f001"]
    assert (result.completion.total, result.completion.has_more) == (150, True)


async def test_completion_never_suggests_hidden_uris_comp_6(srv: Served) -> None:
    """AUTH-12 (docs/requirements.toml)."""
    async with srv.client(token="src") as client:
        visible = await client.complete(SRC, {"name": "name", "value": ""})
        assert visible.completion.values == ["app.py", "main.py"]
        with pytest.raises(MCPError) as err:  # the template itself is not visible to this token
            await client.complete(TREE, {"name": "dir", "value": ""})
        assert err.value.code == -32602 and err.value.error.data == {"uri": TREE.uri}
    async with srv.client(token="none") as client:
        with pytest.raises(MCPError) as err:
            await client.complete(SRC, {"name": "name", "value": ""})
        assert err.value.code == -32602


@pytest.mark.parametrize("mode", ERAS)
async def test_unknown_template_argument_or_prompt_ref_is_32602_comp_5(srv: Served, mode: str) -> None:
    async with srv.client(mode) as client:
        for ref, argument in (
            (types.ResourceTemplateReference(type="ref/resource", uri="test://nope/{x}"), "x"),
            (SRC, "not_a_variable"),
            (types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"), "arg1"),
        ):
            with pytest.raises(MCPError) as err:
                await client.complete(ref, {"name": argument, "value": ""})
            assert err.value.code == -32602
