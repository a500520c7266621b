"""``GET /metrics``: one consistent view over ``catalog serve --workers 2``, who may
read it (``CATALOG_METRICS_ACCESS``), MCP requests by method, era and outcome, stream and event
metrics, and labels that never carry a URI or a secret.

The multi-worker test runs the real CLI in a subprocess; the others an in-process server over real
HTTP (official SDK clients for MCP), reading the text format with ``prometheus_client``'s parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from catalog.auth.challenges import PRM_PATH
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.db.engine import create_engine
from tests.mcp_helpers import LEGACY, MODERN, Served, mcp_settings, module_database, served
from tests.processes import catalog_env, my_ports, serving, started, stop, worker_of, worker_processes

pytestmark = pytest.mark.process

on_session_loop = pytest.mark.asyncio(loop_scope="session")

ADMIN = "cat_test-platform-admin-token"
READ = "test://static-text"
MISSING = "test://no-such/resource-named-in-no-label"
WATCHED = "test://watched-resource"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(base_url: str, token: str | None = ADMIN) -> Samples:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{base_url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return parse(response.text)


# -- several workers, one view ----------------------------------------------------------------------


def test_requests_answered_by_either_worker_are_counted_in_one_view(
    database_url: str, tmp_path: Path
) -> None:
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"), CATALOG_ADMIN_TOKEN=ADMIN
    )
    with serving("--workers", "2", env=env) as served_process:
        started(served_process, workers=2)
        workers = {process.pid for process in worker_processes(served_process)}
        assert len(workers) == 2
        answered: dict[int, int] = {}
        sent = 0
        while set(answered) != workers:  # a new connection each time: the kernel picks the worker
            assert sent < 400, f"one worker never answered: {answered}"
            with httpx.Client(base_url=served_process.base_url, timeout=30) as client:
                assert client.get("/healthz").status_code == 200
                [port] = my_ports(served_process)
                worker = worker_of(served_process, port)
            answered[worker] = answered.get(worker, 0) + 1
            sent += 1
        views: dict[int, Samples] = {}
        tries = 0
        while set(views) != workers:  # the same numbers, whichever worker answers /metrics
            assert (tries := tries + 1) < 400
            with httpx.Client(base_url=served_process.base_url, timeout=30) as client:
                response = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
                [port] = my_ports(served_process)
                views.setdefault(worker_of(served_process, port), parse(response.text))
        for view in views.values():
            assert (
                value(view, "catalog_http_requests_total", route="/healthz", method="GET", status="200")
                == sent
            )
            assert (
                value(view, "catalog_http_request_duration_seconds_count", route="/healthz", method="GET")
                == sent
            )
            assert ("catalog_db_pool_connections_in_use", ()) in view  # a livesum gauge: every worker's
            assert ("catalog_mcp_sessions_open", ()) in view


@on_session_loop
async def test_a_replaced_workers_live_gauges_leave_the_view_and_its_counters_stay(
    database_url: str, tmp_path: Path
) -> None:
    """``mark_process_dead``: a worker killed outright with a listen stream open stops counting as
    holding it once the supervisor has replaced it; what it answered is still counted."""
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"), CATALOG_ADMIN_TOKEN=ADMIN
    )
    with serving("--workers", "2", "--demo", env=env) as served_process:
        started(served_process, workers=2)
        http = httpx2.AsyncClient(
            timeout=30, limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1)
        )
        client = Client(
            streamable_http_client(served_process.mcp_url, http_client=http), mode=MODERN, cache=None
        )
        stack = contextlib.AsyncExitStack()
        try:
            await stack.enter_async_context(client)
            await stack.enter_async_context(client.listen(resource_subscriptions=[WATCHED]))
            [port] = my_ports(served_process)
            holder = worker_of(served_process, port)
            before = await asyncio.to_thread(scrape, served_process.base_url)
            assert value(before, "catalog_mcp_streams_open", kind="listen") == 1
            answered = value(
                before, "catalog_http_requests_total", route="/metrics", method="GET", status="200"
            )
            os.kill(holder, signal.SIGKILL)
            served_process.wait_for(f"worker process [{holder}] ended")
            started(served_process)  # its replacement
        finally:
            with contextlib.suppress(Exception):  # the stream died with its worker
                await stack.aclose()
        after = await asyncio.to_thread(scrape, served_process.base_url)
        assert value(after, "catalog_mcp_streams_open", kind="listen") == 0
        assert (
            value(after, "catalog_http_requests_total", route="/metrics", method="GET", status="200")
            >= answered
        )
        assert stop(served_process) == 0


# -- an in-process server ---------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


async def get(url: str, **headers: str) -> httpx.Response:
    return await asyncio.to_thread(httpx.get, url, headers=headers, timeout=30)


@on_session_loop
async def test_metrics_takes_the_platform_admin_credential_by_default(srv: Served) -> None:
    anonymous = await get(f"{srv.base_url}/metrics")
    assert anonymous.status_code == 401 and "WWW-Authenticate" in anonymous.headers
    assert anonymous.headers["content-type"] == "application/problem+json"
    tenant_admin = await get(f"{srv.base_url}/metrics", Authorization=f"Bearer {srv.token('admin')}")
    assert tenant_admin.status_code == 403
    platform = await get(f"{srv.base_url}/metrics", Authorization=f"Bearer {ADMIN}")
    assert platform.status_code == 200 and "catalog_http_requests_total" in platform.text


@on_session_loop
async def test_open_metrics_serve_anyone_who_reaches_the_port(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path, metrics_access="open")) as open_srv,
    ):
        response = await get(f"{open_srv.base_url}/metrics")
    assert response.status_code == 200 and "catalog_mcp_sessions_open" in response.text


@on_session_loop
async def test_mcp_requests_are_counted_by_method_era_and_outcome(srv: Served) -> None:
    before = await asyncio.to_thread(scrape, srv.base_url)
    for mode in (MODERN, LEGACY):
        async with srv.client(mode if mode == MODERN else "legacy", token="staff") as client:
            await client.read_resource(READ)
            with pytest.raises(MCPError):
                await client.read_resource(MISSING)
    after = await asyncio.to_thread(scrape, srv.base_url)

    def delta(**labels: str) -> float:
        name = "catalog_mcp_requests_total"
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta(method="resources/read", era="2026", outcome="result") == 1
    assert delta(method="resources/read", era="2026", outcome="-32602") == 1
    assert delta(method="resources/read", era="2025", outcome="result") == 1
    assert delta(method="resources/read", era="2025", outcome="-32002") == 1
    assert delta(method="initialize", era="2025", outcome="result") == 1


@on_session_loop
async def test_listen_streams_and_events_are_counted(srv: Served) -> None:
    before = await asyncio.to_thread(scrape, srv.base_url)
    async with srv.client(token="staff") as client, client.listen(resource_subscriptions=[WATCHED]) as sub:
        during = await asyncio.to_thread(scrape, srv.base_url)
        assert value(during, "catalog_mcp_streams_open", kind="listen") == 1 + value(
            before, "catalog_mcp_streams_open", kind="listen"
        )
        settings = srv.app.state.settings
        engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
        try:  # a curator's write, from an engine of its own (the server runs on another loop)
            body = {"uri": WATCHED, "name": "watched", "mimeType": "text/plain", "text": "changed"}
            await upsert_resource(
                Catalog(engine=engine, settings=settings),
                Principal.system("tests"),
                srv.fixture.tenant,
                ResourceIn.model_validate(body),
            )
        finally:
            await engine.dispose()
        async with asyncio.timeout(15):
            async for notification in sub:
                if getattr(notification, "uri", None) == WATCHED:
                    break
    after = await asyncio.to_thread(scrape, srv.base_url)
    for name in ("catalog_events_received_total", "catalog_events_delivered_total"):
        assert value(after, name) > value(before, name), name
    delays = "catalog_event_delivery_delay_seconds_count"
    assert value(after, delays) > value(before, delays)


@on_session_loop
async def test_labels_hold_route_templates_and_never_a_uri_or_a_secret(srv: Served) -> None:
    slug = srv.fixture.tenant.slug
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for path in (f"/admin/v1/tenants/{slug}/resources", "/admin/v1/tenants/no-such-tenant", "/no/such/route"):
        await asyncio.to_thread(httpx.get, f"{srv.base_url}{path}", headers=admin, timeout=30)
    async with srv.client(token="staff") as client:
        with pytest.raises(MCPError):
            await client.read_resource(MISSING)
    text = (await get(f"{srv.base_url}/metrics", **admin)).text
    labels = {
        (key, label)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        for key, label in sample.labels.items()
    }
    routes = {label for key, label in labels if key == "route"}
    templates = {getattr(route, "path", None) for route in srv.app.router.routes} | {"unmatched"}
    templates |= set(srv.app.openapi()["paths"])  # the admin API's, as documented
    # The registry is the test process's: apps of earlier tests served the protected-resource
    # metadata (only with OAuth on), whose routes are templates too.
    templates |= {PRM_PATH, f"{PRM_PATH}/mcp", f"{PRM_PATH}/admin/v1"}
    assert routes <= templates and "/admin/v1/tenants/{slug}/resources" in routes and "unmatched" in routes
    secrets = [ADMIN, *srv.fixture.tokens.values()]
    for key, label in labels:
        assert "://" not in label and "no-such" not in label, (key, label)
        assert not any(secret in label for secret in secrets), key
    assert not any(secret in text for secret in secrets)


@on_session_loop
async def test_rate_limit_refusals_are_counted_by_surface(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    settings = mcp_settings(
        "", tmp_path, metrics_access="open", rate_limit_per_minute=1, rate_limit_burst=1
    )  # one request per caller, then 429
    async with module_database(postgres_server, template_database) as url:
        settings = settings.model_copy(update={"database_url": url})
        async with served(settings) as limited:
            # Each scrape as a caller of its own (open metrics read no credential; the limit is per caller).
            before = await asyncio.to_thread(scrape, limited.base_url, "scraper-1")
            admin = {"Authorization": f"Bearer {ADMIN}"}
            statuses = [
                (await get(f"{limited.base_url}/admin/v1/tenants", **admin)).status_code for _ in range(2)
            ]
            assert statuses == [200, 429]
            after = await asyncio.to_thread(scrape, limited.base_url, "scraper-2")

    def refused(surface: str) -> float:
        name = "catalog_rate_limited_total"
        return value(after, name, surface=surface, limit="requests") - value(
            before, name, surface=surface, limit="requests"
        )

    assert (refused("admin"), refused("mcp")) == (1, 0)
    assert (
        value(after, "catalog_http_requests_total", route="/admin/v1/tenants", method="GET", status="429")
        >= 1
    )
