"""What an operator sets for MCP listings and caching: ``CATALOG_READ_TTL_MS``,
``CATALOG_LIST_TTL_MS``, ``CATALOG_TEMPLATES_TTL_MS`` (the results' ``ttlMs``, CACHE-1) and
``CATALOG_PAGE_SIZE`` (entries per ``resources/list`` and ``resources/templates/list`` page), held
to the same answers on the fast path, the SDK's handlers, and both at once (``shadow``: any
difference fails the test, ``tests/conftest.py``); a bad value ends ``catalog serve`` with one line."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import pytest_asyncio

from catalog.core.resources import upsert_many
from catalog.core.schemas.resources import ResourceIn
from tests.admin_support import ADMIN, API, assert_problem
from tests.conftest import free_port
from tests.mcp_helpers import (
    SYSTEM,
    Served,
    acting_catalog,
    all_pages,
    mcp_settings,
    module_database,
    served,
)
from tests.processes import catalog_env, run_catalog

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.process]

MODES = ["on", "off", "shadow"]  # CATALOG_MCP_FAST_PATH: each executor, and both compared
EXTRA = 2100  # resources under test://many/, so a page of 1000 is full twice


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, Path(tmp_path_factory.mktemp("home")))) as s,
    ):
        async with acting_catalog(s) as catalog:
            bodies = [
                {"uri": f"test://many/{i:05d}", "name": f"many-{i}", "mimeType": "text/plain", "text": str(i)}
                for i in range(EXTRA)
            ]
            await upsert_many(
                catalog, SYSTEM, s.fixture.tenant, [ResourceIn.model_validate(body) for body in bodies]
            )
        yield s


@pytest.fixture
def setting(srv: Served) -> Iterator[Any]:
    """Set the served app's settings for one test (read per request by both executors)."""
    settings = srv.app.state.settings
    kept = settings.model_dump()

    def set_values(**values: Any) -> None:
        for name, value in values.items():
            setattr(settings, name, value)

    yield set_values
    for name, value in kept.items():
        setattr(settings, name, value)


@pytest.mark.parametrize("mode", MODES)
async def test_ttls_are_the_operators_on_every_path_cache_1(srv: Served, setting: Any, mode: str) -> None:
    setting(mcp_fast_path=mode, read_ttl_ms=0, list_ttl_ms=1234, templates_ttl_ms=5)
    async with srv.client(token="staff") as client:
        read = await client.read_resource("test://static-text")
        page = await client.list_resources()
        templates = await client.list_resource_templates()
    assert (read.ttl_ms, page.ttl_ms, templates.ttl_ms) == (0, 1234, 5)
    assert {read.cache_scope, page.cache_scope, templates.cache_scope} == {"private"}


async def test_the_defaults_are_todays_ttls_cache_1(srv: Served) -> None:
    async with srv.client(token="staff") as client:
        read = await client.read_resource("test://static-text")
        page = await client.list_resources()
        templates = await client.list_resource_templates()
    assert (read.ttl_ms, page.ttl_ms, templates.ttl_ms) == (10_000, 10_000, 60_000)


@pytest.mark.parametrize("mode", MODES)
async def test_a_page_of_1000_and_a_cursor_walk_over_every_resource_pag_1_pag_2(
    srv: Served, setting: Any, mode: str
) -> None:
    setting(mcp_fast_path=mode, page_size=1000)
    async with srv.client(token="staff") as client:
        items, pages = await all_pages(client)
    uris = [str(item.uri) for item in items]
    assert [len(page.resources) for page in pages[:2]] == [1000, 1000]
    assert len(pages) == (len(uris) + 999) // 1000 and 0 < len(pages[-1].resources) <= 1000
    assert uris == sorted(uris, key=lambda uri: uri.encode())  # keyset order, no repeats
    assert len(set(uris)) == len(uris)
    assert {f"test://many/{i:05d}" for i in range(EXTRA)} <= set(uris)


@pytest.mark.parametrize("mode", MODES)
async def test_the_default_page_size_is_100(srv: Served, setting: Any, mode: str) -> None:
    setting(mcp_fast_path=mode)
    async with srv.client(token="staff") as client:
        first = await client.list_resources()
    assert len(first.resources) == 100 and first.next_cursor is not None


async def test_template_pages_follow_the_page_size_too(srv: Served, setting: Any) -> None:
    setting(page_size=1)
    async with srv.client(token="staff") as client:
        items, pages = await all_pages(client, "templates")
    assert len(items) >= 2 and [len(page.resource_templates) for page in pages] == [1] * len(items)
    uris = [item.uri_template for item in items]
    assert uris == sorted(uris, key=lambda uri: uri.encode())


async def test_a_cursor_from_one_page_size_goes_on_under_another(srv: Served, setting: Any) -> None:
    """A cursor names the last URI of its page, not an offset: a changed page size goes on after it."""
    setting(page_size=7)
    async with srv.client(token="staff") as client:
        first = await client.list_resources()
        setting(page_size=3)
        second = await client.list_resources(cursor=first.next_cursor)
    assert len(second.resources) == 3
    assert str(second.resources[0].uri).encode() > str(first.resources[-1].uri).encode()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CATALOG_READ_TTL_MS", "-1"),
        ("CATALOG_LIST_TTL_MS", "1.5"),
        ("CATALOG_TEMPLATES_TTL_MS", "soon"),
        ("CATALOG_PAGE_SIZE", "0"),
        ("CATALOG_PAGE_SIZE", "1001"),
        ("CATALOG_PAGE_SIZE", "ten"),
    ],
)
async def test_a_bad_value_ends_serve_with_one_line_naming_it(tmp_path: Path, name: str, value: str) -> None:
    env = catalog_env(CATALOG_HOME=str(tmp_path), **{name: value})
    args = ("serve", "--port", str(free_port()))
    done = await anyio.to_thread.run_sync(lambda: run_catalog(*args, env=env, timeout=60))
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith(f"catalog: {name}: ")


# -- a curator's own ttlMs on a resource (migration 0017) --------------------------------------------

OWN = "test://own-ttl"


def admin(srv: Served) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=srv.base_url, headers=ADMIN, timeout=30)


@pytest.mark.parametrize("mode", MODES)
async def test_a_resources_own_ttl_is_what_its_reads_carry_cache_1(
    srv: Served, setting: Any, mode: str
) -> None:
    setting(mcp_fast_path=mode, read_ttl_ms=10_000)
    async with admin(srv) as http:
        put = await http.put(
            f"{API}/tenants/demo/resources",
            params={"uri": OWN},
            json={"name": "own", "mimeType": "text/plain", "text": "kept briefly", "ttlMs": 2500},
        )
        assert put.status_code in (200, 201), put.text
        assert put.json()["ttlMs"] == 2500
        async with srv.client(token="staff") as client:
            own = await client.read_resource(OWN)
            other = await client.read_resource("test://static-text")
            patched = await http.patch(f"{API}/tenants/demo/resources/{put.json()['id']}", json={"ttlMs": 0})
            assert patched.status_code == 200 and patched.json()["ttlMs"] == 0
            never = await client.read_resource(OWN)
            cleared = await http.patch(
                f"{API}/tenants/demo/resources/{put.json()['id']}", json={"ttlMs": None}
            )
            assert cleared.status_code == 200 and "ttlMs" not in cleared.json()
            default = await client.read_resource(OWN)
    assert (own.ttl_ms, other.ttl_ms, never.ttl_ms, default.ttl_ms) == (2500, 10_000, 0, 10_000)


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True, 2**31])
async def test_a_bad_ttl_is_a_problem_naming_the_field(srv: Served, bad: Any) -> None:
    async with admin(srv) as http:
        response = await http.post(
            f"{API}/tenants/demo/resources", json={"uri": "test://bad-ttl", "name": "bad", "ttlMs": bad}
        )
    assert_problem(response, 422, "/ttlMs")
