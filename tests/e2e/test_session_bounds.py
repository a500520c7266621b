"""What 2025-11-25 sessions may cost (COMPAT-7): a session keeps a bounded part of its
``initialize`` (``catalog.core.sessions.CLIENT_PARAMS_MAX_BYTES``), and live sessions are capped per
caller (a credential; an anonymous caller by its address) and per tenant
(``CATALOG_MAX_SESSIONS_PER_CALLER``/``_PER_TENANT``), counted in PostgreSQL so that the cap holds
across the workers of ``catalog serve --workers 2``. Beyond a cap ``initialize`` is 429 with
``Retry-After`` and a ``-31003`` JSON-RPC error repeating the request's id (ERR-3), and no row is
written; ending a session (DELETE) or letting it idle out frees its slot.

Sizes are asserted on the rows PostgreSQL holds; events are awaited, never slept for.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Iterator
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
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from catalog.core.sessions import CLIENT_PARAMS_MAX_BYTES
from catalog.mcp.sessions.base import SESSION_ID_HEADER
from tests.mcp_helpers import LEGACY, Served, mcp_settings, module_database, served
from tests.processes import Served as ServedProcess
from tests.processes import catalog_env, serving, started, worker_of

pytestmark = [
    pytest.mark.process,
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

ADMIN = "cat_test-platform-admin-token"
PER_CALLER = 3
PER_TENANT = 5
RATE_LIMITED = -31003
GATED = "file:///project/docs/internal-notes.md"  # a consent read: elicitation in a 2025 session
MIB = 1024 * 1024
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
PARAMS: dict[str, Any] = {
    "protocolVersion": LEGACY,
    "capabilities": {"elicitation": {"form": {}}},
    "clientInfo": {"name": "bounds-test", "version": "1.0", "title": "Bounds test"},
}


def huge(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` plus about 3.5 MiB a session has no use for: experimental capabilities, clientInfo's
    description and icons, keys no schema names, a ``_meta``."""
    return {
        **params,
        "capabilities": {**params["capabilities"], "experimental": {"vendor": {"blob": "e" * (2 * MIB)}}},
        "clientInfo": {
            **params["clientInfo"],
            "description": "d" * (MIB // 2),
            "icons": [{"src": f"https://icons.invalid/{i:05d}.png"} for i in range(5000)],
            "unknownKey": "u" * 1000,
        },
        "somethingElse": "s" * (MIB // 2),
        "_meta": {"vendor/trace": "m" * 100_000},
    }


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(
            url,
            Path(tmp_path_factory.mktemp("home")),
            max_sessions_per_caller=PER_CALLER,
            max_sessions_per_tenant=PER_TENANT,
        )
        async with served(settings) as s:
            yield s


async def query(database_url: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    """``statement`` on a connection that sees every tenant's rows."""
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT set_config('catalog.all_tenants', 'on', false)")
        return await conn.fetch(statement, *args)
    finally:
        await conn.close()


@pytest_asyncio.fixture(loop_scope="session")
async def fresh(srv: Served) -> Served:
    """The module's server with no session open (each test counts from zero)."""
    await query(srv.database_url, "DELETE FROM mcp_sessions")
    return srv


async def session_rows(srv: Served) -> list[asyncpg.Record]:
    return await query(
        srv.database_url,
        "SELECT id_hash, client_params, octet_length(client_params::text) AS text_bytes,"
        " pg_column_size(client_params) AS stored_bytes, pg_column_size(s.*) AS row_bytes"
        " FROM mcp_sessions s ORDER BY created_at",
    )


def initialize(
    srv: Served, params: dict[str, Any] | None = None, *, token: str | None = None, id: Any = 1
) -> httpx.Response:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {srv.token(token)}"
    body = {"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params or PARAMS}
    return httpx.post(srv.mcp_url, content=json.dumps(body), headers=headers, timeout=60)


def opened(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.headers[SESSION_ID_HEADER]


def in_session(srv: Served, session_id: str, method: str, *, id: Any) -> httpx.Response:
    headers = {**HEADERS, SESSION_ID_HEADER: session_id, "MCP-Protocol-Version": LEGACY}
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": {}}
    return httpx.post(srv.mcp_url, content=json.dumps(body), headers=headers, timeout=30)


def end(srv: Served, session_id: str) -> httpx.Response:
    return httpx.delete(srv.mcp_url, headers={SESSION_ID_HEADER: session_id}, timeout=30)


def key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()


def assert_refused(response: httpx.Response, limit: str, allowed: int, request_id: Any) -> None:
    """429 before anything is stored: Retry-After within the idle time, the rate-limited code, the
    request's id, and the setting named."""
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["Retry-After"]) <= 1800
    assert SESSION_ID_HEADER not in response.headers
    body = response.json()
    assert body["id"] == request_id and body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == RATE_LIMITED
    assert body["error"]["data"] == {"limit": limit, "allowed": allowed}
    assert f"CATALOG_MAX_SESSIONS_PER_{limit.upper()}" in body["error"]["message"]


# -- what a session keeps ------------------------------------------------------------------------------


async def test_a_huge_initialize_stores_only_what_the_session_needs_within_the_cap(fresh: Served) -> None:
    request = huge(PARAMS)
    assert len(json.dumps(request)) > 3 * MIB  # under the 4 MiB body limit the edge allows
    session_id = opened(initialize(fresh, request))
    [row] = await session_rows(fresh)
    assert row["id_hash"] == key(session_id)
    assert row["text_bytes"] <= CLIENT_PARAMS_MAX_BYTES and row["stored_bytes"] <= CLIENT_PARAMS_MAX_BYTES
    assert row["row_bytes"] <= CLIENT_PARAMS_MAX_BYTES + 512  # the other columns are a few fixed fields
    stored = json.loads(row["client_params"])
    caller = stored.pop("caller")
    assert stored == PARAMS  # version, the elicitation capability, clientInfo name/version/title
    assert len(caller) == 32 and "127.0.0.1" not in caller  # hashed, no address stored
    # The trimmed session serves requests.
    response = in_session(fresh, session_id, "resources/templates/list", id=2)
    assert response.status_code == 200
    [answer] = [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    assert answer["id"] == 2 and answer["result"]["resourceTemplates"]


class Inflating(httpx2.AsyncHTTPTransport):
    """Adds what :func:`huge` adds to the SDK client's ``initialize`` on its way out."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST":
            body = json.loads(request.content)
            if body.get("method") == "initialize":
                body["params"] = huge(body["params"])
                headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
                request = httpx2.Request(
                    "POST",
                    request.url,
                    headers=headers,
                    content=json.dumps(body).encode(),
                    extensions=request.extensions,
                )
        return await super().handle_async_request(request)


async def test_an_sdk_session_trimmed_to_the_cap_still_elicits_compat_11(fresh: Served) -> None:
    """The capability the server reads back (form elicitation, for a consent read) survives the trim."""
    asked: list[str] = []

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"accept": True, "purpose": "bounded"})

    http = httpx2.AsyncClient(
        transport=Inflating(), headers={"Authorization": f"Bearer {fresh.token('staff')}"}, timeout=60
    )
    transport = streamable_http_client(fresh.mcp_url, http_client=http)
    async with Client(transport, mode="legacy", cache=None, elicitation_callback=callback) as client:
        result = await client.read_resource(GATED)
        [row] = await session_rows(fresh)
    assert result.contents[0].text.startswith("# Internal notes")  # type: ignore[union-attr]
    assert asked == ["These notes are internal. Say why you need them."]
    assert row["text_bytes"] <= CLIENT_PARAMS_MAX_BYTES
    stored = json.loads(row["client_params"])
    assert stored["capabilities"]["elicitation"]["form"] == {}
    assert set(stored) == {"protocolVersion", "capabilities", "clientInfo", "caller"}
    assert set(stored["clientInfo"]) <= {"name", "version", "title"}


@pytest.mark.parametrize(
    "client_info",
    [
        {"name": "n" * CLIENT_PARAMS_MAX_BYTES, "version": "1"},  # what is kept is itself over the cap
        {"name": "nul\u0000name", "version": "1"},  # PostgreSQL's jsonb cannot hold a NUL
    ],
    ids=["over-the-cap", "nul"],
)
async def test_an_initialize_whose_kept_part_cannot_be_stored_is_32602_and_stores_nothing(
    fresh: Served, client_info: dict[str, str]
) -> None:
    response = initialize(fresh, {**PARAMS, "clientInfo": client_info}, id="too-big")
    assert response.status_code == 400 and SESSION_ID_HEADER not in response.headers
    body = response.json()
    assert body["id"] == "too-big" and body["error"]["code"] == -32602
    assert body["error"]["data"] == {"limit": CLIENT_PARAMS_MAX_BYTES}
    assert body["error"]["message"].startswith("Invalid params: ")
    assert await session_rows(fresh) == []


async def test_a_name_at_the_cap_less_the_rest_is_kept_whole(fresh: Served) -> None:
    base = len(json.dumps({**PARAMS, "caller": "c" * 32, "clientInfo": {**PARAMS["clientInfo"], "name": ""}}))
    name = "é" * ((CLIENT_PARAMS_MAX_BYTES - base) // 2)  # two bytes each in UTF-8
    opened(initialize(fresh, {**PARAMS, "clientInfo": {**PARAMS["clientInfo"], "name": name}}))
    [row] = await session_rows(fresh)
    assert json.loads(row["client_params"])["clientInfo"]["name"] == name
    assert CLIENT_PARAMS_MAX_BYTES - 1 <= row["text_bytes"] <= CLIENT_PARAMS_MAX_BYTES


# -- how many sessions -------------------------------------------------------------------------------


async def test_past_the_per_caller_cap_initialize_is_429_and_writes_no_row(fresh: Served) -> None:
    for i in range(PER_CALLER):
        opened(initialize(fresh, id=i))
    assert_refused(initialize(fresh, id="one-more"), "caller", PER_CALLER, "one-more")
    assert len(await session_rows(fresh)) == PER_CALLER
    # Another caller of the same tenant (a token) has slots of its own, up to the tenant's cap.
    for i in range(PER_TENANT - PER_CALLER):
        opened(initialize(fresh, token="staff", id=i))
    assert_refused(initialize(fresh, token="src", id=7), "tenant", PER_TENANT, 7)
    assert len(await session_rows(fresh)) == PER_TENANT
    # Another tenant's caps are its own.
    opened(initialize(fresh, token="other-admin"))
    assert len(await session_rows(fresh)) == PER_TENANT + 1


async def test_a_deleted_or_idle_expired_session_frees_its_slot(fresh: Served) -> None:
    sessions = [opened(initialize(fresh, id=i)) for i in range(PER_CALLER)]
    assert_refused(initialize(fresh, id="full"), "caller", PER_CALLER, "full")
    deleted = end(fresh, sessions[0])
    assert deleted.status_code == 200
    sessions[0] = opened(initialize(fresh))
    assert_refused(initialize(fresh, id="full again"), "caller", PER_CALLER, "full again")
    # Unused for longer than the idle time: gone for its client at once, and no longer counted,
    # whether or not the sweep has removed its row yet.
    await query(
        fresh.database_url,
        "UPDATE mcp_sessions SET last_seen_at = now() - interval '1 day' WHERE id_hash = $1",
        key(sessions[1]),
    )
    opened(initialize(fresh))
    live = await query(
        fresh.database_url, "SELECT count(*) FROM mcp_sessions WHERE last_seen_at > now() - interval '1 hour'"
    )
    assert live[0][0] == PER_CALLER


def scrape(srv: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{srv.base_url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


async def test_metrics_count_open_sessions_and_refusals_by_reason(fresh: Served) -> None:
    caller = ("catalog_mcp_sessions_refused_total", (("reason", "caller"),))
    params = ("catalog_mcp_sessions_refused_total", (("reason", "params"),))
    limited = ("catalog_rate_limited_total", (("limit", "sessions"), ("surface", "mcp")))
    before = scrape(fresh)
    assert before[("catalog_mcp_sessions_open", ())] == 0
    for i in range(PER_CALLER):
        opened(initialize(fresh, id=i))
    for i in range(2):
        assert initialize(fresh, id=i).status_code == 429
    assert initialize(fresh, {**PARAMS, "clientInfo": {"name": "x" * MIB, "version": "1"}}).status_code == 400
    after = scrape(fresh)
    assert after[("catalog_mcp_sessions_open", ())] == PER_CALLER
    assert after[caller] - before.get(caller, 0.0) == 2
    assert after[limited] - before.get(limited, 0.0) == 2
    assert after[params] - before.get(params, 0.0) == 1


# -- across the workers of one server ------------------------------------------------------------------


@pytest.fixture
def two_workers(database_url: str, tmp_path: Path) -> Iterator[ServedProcess]:
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_ADMIN_TOKEN=ADMIN,
        CATALOG_SECRET_KEY="session-bounds-secret-0123456789abcdef",
        CATALOG_MAX_SESSIONS_PER_CALLER=str(PER_CALLER),
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
    )
    with serving("--workers", "2", "--demo", env=env) as served_process:
        yield started(served_process, 2)


async def pinned(served_process: ServedProcess, attempts: int = 40) -> dict[int, httpx.AsyncClient]:
    """One single-connection client held by each worker (the kernel picks the worker of a new
    connection: new ones are opened until both have one)."""
    clients: dict[int, httpx.AsyncClient] = {}
    for _ in range(attempts):
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=1), timeout=30)
        response = await client.get(f"{served_process.base_url}/healthz")
        port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
        worker = worker_of(served_process, port)
        if worker in clients:
            await client.aclose()
        else:
            clients[worker] = client
        if len(clients) == 2:
            return clients
    for client in clients.values():
        await client.aclose()
    pytest.fail(f"no connection reached the second worker in {attempts} attempts")


async def post_initialize(client: httpx.AsyncClient, url: str, id: Any) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": id, "method": "initialize", "params": PARAMS}
    return await client.post(url, content=json.dumps(body), headers=HEADERS)


async def test_the_per_caller_cap_holds_across_two_workers(
    two_workers: ServedProcess, database_url: str
) -> None:
    url = two_workers.mcp_url
    first, second = (await pinned(two_workers)).values()
    try:
        sessions = [opened(await post_initialize(first, url, i)) for i in range(PER_CALLER)]
        # The other worker counts the sessions the first one opened.
        assert_refused(await post_initialize(second, url, "elsewhere"), "caller", PER_CALLER, "elsewhere")
        deleted = await second.delete(url, headers={SESSION_ID_HEADER: sessions[0]})
        assert deleted.status_code == 200
        opened(await post_initialize(second, url, "freed"))
        assert_refused(await post_initialize(first, url, "full"), "caller", PER_CALLER, "full")
    finally:
        await first.aclose()
        await second.aclose()
    await query(database_url, "DELETE FROM mcp_sessions")
    # Opened at once, each on a connection of its own (so on either worker): exactly the cap.
    async with httpx.AsyncClient(timeout=60) as burst:
        answers = await asyncio.gather(*(post_initialize(burst, url, i) for i in range(4 * PER_CALLER)))
    assert sorted(a.status_code for a in answers) == [200] * PER_CALLER + [429] * (3 * PER_CALLER)
    rows = await query(database_url, "SELECT count(*) FROM mcp_sessions")
    assert rows[0][0] == PER_CALLER
