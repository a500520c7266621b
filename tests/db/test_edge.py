"""The edge every request passes (``catalog.auth.edge``, ``catalog.auth.quotas``): Host and Origin on
every route (HTTP-2), request rates per caller with 429 and ``Retry-After`` (COMP-6), and stream
quotas that refuse with 429 instead of an empty 200."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from catalog.auth.quotas import RateLimiter, StreamLimits, StreamQuotas
from catalog.auth.refusals import RATE_LIMITED
from catalog.core.principal import Principal
from tests.mcp_helpers import MODERN, Served, envelope, mcp_settings, modern_headers, module_database, served

asynchronous = pytest.mark.asyncio(loop_scope="session")

ROUTES = (
    "/admin/v1/tenants",
    "/.well-known/oauth-protected-resource",
    "/readyz",
    "/healthz",
    "/docs",
    "/openapi.json",
)


@pytest_asyncio.fixture(loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(
            url,
            tmp_path,
            rate_limit_per_minute=60,
            rate_limit_burst=5,
            max_streams_per_credential=2,
            max_anonymous_streams=1,
            max_streams_per_tenant=3,
        )
        async with served(settings) as s:
            yield s


@pytest_asyncio.fixture(loop_scope="session")
async def unrefilled(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    """A burst of 5 and next to no refill: how many requests pass never depends on how long the
    test took (at 60 a minute, a slow run refilled a request mid-test)."""
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, tmp_path, rate_limit_per_minute=0.0001, rate_limit_burst=5)
        async with served(settings) as s:
            yield s


# -- Host and Origin ----------------------------------------------------------------------------------


@asynchronous
async def test_an_unlisted_host_is_421_on_every_route_and_names_the_setting_http_2(srv: Served) -> None:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as http:
        for route in (*ROUTES, "/mcp"):
            response = await http.get(route, headers={"Host": "evil.example"})
            assert response.status_code == 421, route
            text = response.json()["detail"] if route != "/mcp" else response.json()["error"]["message"]
            assert "CATALOG_ALLOWED_HOSTS" in text and "evil.example" in text
            assert "evil.example" not in response.headers.get("www-authenticate", "")
        problem = (await http.get("/admin/v1/tenants", headers={"Host": "evil.example"})).json()
        assert problem["status"] == 421 and problem["title"] == "Misdirected request"


@asynchronous
async def test_an_unlisted_origin_is_403_on_every_route(srv: Served) -> None:
    """HTTP-2 (docs/requirements.toml)."""
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as http:
        for route in (*ROUTES, "/mcp"):
            response = await http.get(route, headers={"Origin": "https://evil.example"})
            assert response.status_code == 403, route
        port = srv.base_url.rsplit(":", 1)[1]
        # A loopback entry without a port: this server's own port only (tests/db/test_auth_edges.py).
        assert (await http.get("/healthz", headers={"Origin": f"http://127.0.0.1:{port}"})).status_code == 200
        assert (await http.get("/healthz", headers={"Origin": "http://localhost:5173"})).status_code == 403


@asynchronous
async def test_metadata_never_echoes_an_unlisted_host(srv: Served) -> None:
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as http:
        response = await http.get(
            "/.well-known/oauth-protected-resource/mcp", headers={"Host": "evil.example"}
        )
        assert response.status_code == 421 and "resource" not in response.text


# -- request rates ------------------------------------------------------------------------------------


@asynchronous
async def test_a_caller_over_its_rate_gets_429_with_retry_after_on_both_surfaces(unrefilled: Served) -> None:
    """COMP-6 (docs/requirements.toml)."""
    srv = unrefilled
    admin = {"Authorization": "Bearer cat_test-platform-admin-token"}
    async with httpx.AsyncClient(base_url=srv.base_url, timeout=10) as http:
        statuses = [(await http.get("/admin/v1/tenants", headers=admin)).status_code for _ in range(8)]
        assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}
        refused = await http.get("/admin/v1/tenants", headers=admin)
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["status"] == 429 and int(refused.headers["retry-after"]) >= 1
        # Another caller has its own budget; probes are never limited.
        staff = {"Authorization": f"Bearer {srv.token('staff')}"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "resources/list", "params": {"_meta": envelope()}}
        answers = [
            await http.post("/mcp", json=body, headers={**modern_headers("resources/list"), **staff})
            for _ in range(8)
        ]
        assert [a.status_code for a in answers[:5]] == [200] * 5
        limited = answers[-1]
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"]["code"] == RATE_LIMITED and limited.json()["id"] == 1  # ERR-3
        probes = [(await http.get("/healthz")).status_code for _ in range(10)]
        assert probes == [200] * 10


def test_a_process_takes_its_share_of_the_rate_and_refills_over_time() -> None:
    one, half = RateLimiter(60, 10), RateLimiter(60, 10, share=2)
    assert sum(one.take("k", now=0) == 0 for _ in range(20)) == 10
    assert sum(half.take("k", now=0) == 0 for _ in range(20)) == 5
    assert half.take("k", now=0) == pytest.approx(2.0)  # 0.5 requests per second: 2 s to the next
    assert half.take("k", now=2.0) == 0
    assert RateLimiter(0, 1).take("k") == 0  # 0 turns the limit off


# -- stream quotas ------------------------------------------------------------------------------------


def listen_body() -> dict[str, Any]:
    params = {"_meta": envelope(), "notifications": {"resourcesListChanged": True}}
    return {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params}


@asynchronous
async def test_a_refused_listen_is_429_never_an_empty_200_and_a_freed_slot_is_reused(srv: Served) -> None:
    """SUB-11, HTTP-11 (docs/requirements.toml)."""
    token = srv.token("src")
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    client = Client(streamable_http_client(srv.mcp_url, http_client=http), mode=MODERN, cache=None)
    headers = {**modern_headers("subscriptions/listen"), "Authorization": f"Bearer {token}"}
    async with client, client.listen(resources_list_changed=True), client.listen(resources_list_changed=True):
        async with httpx.AsyncClient(timeout=10) as raw:
            refused = await raw.post(srv.mcp_url, json=listen_body(), headers=headers)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == RATE_LIMITED
        assert "this credential" in refused.json()["error"]["message"]
    # Both streams closed: the credential may open one again.
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    client = Client(streamable_http_client(srv.mcp_url, http_client=http), mode=MODERN, cache=None)
    async with client, client.listen(resources_list_changed=True) as again:
        assert again.honored.resources_list_changed is True


@asynchronous
async def test_anonymous_callers_share_one_small_budget_and_a_2025_get_counts(srv: Served) -> None:
    async with (
        srv.client() as anonymous,
        anonymous.listen(resources_list_changed=True),
        httpx.AsyncClient(timeout=10) as raw,
    ):
        refused = await raw.post(
            srv.mcp_url, json=listen_body(), headers=modern_headers("subscriptions/listen")
        )
        assert refused.status_code == 429 and "anonymous" in refused.json()["error"]["message"]
        legacy = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        }
        opened = await raw.post(srv.mcp_url, json=init, headers=legacy)
        session = {
            **legacy,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        with anyio.fail_after(10):
            stream = await raw.get(srv.mcp_url, headers=session)
        assert stream.status_code == 429


def test_quotas_count_per_credential_per_tenant_and_in_all() -> None:
    quotas = StreamQuotas(StreamLimits(per_credential=2, per_tenant=3, anonymous=1, per_process=4))
    a = Principal(kind="token", tenant_id=1, token_id=1)
    b = Principal(kind="token", tenant_id=1, token_id=2)
    c = Principal(kind="token", tenant_id=2, token_id=3)
    with quotas.slot(a) as one, quotas.slot(a) as two, quotas.slot(a) as three:
        assert (one, two) == (None, None) and three is not None and "credential" in three
        with quotas.slot(b) as four, quotas.slot(b) as five:
            assert four is None and five is not None and "tenant" in five
            with quotas.slot(c) as six, quotas.slot(c) as seven:
                assert six is None and seven is not None and "as many streams" in seven
    assert quotas.open == 0 and quotas.refusal(a) is None
