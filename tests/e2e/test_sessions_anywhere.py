"""2025-11-25 sessions on any worker of any host, as the clients agents use today run them (COMPAT-7).

Real `catalog serve` processes on one PostgreSQL, no sticky routing, and a new TCP connection for
every HTTP request, so each step of a session may land anywhere:

* ``--workers 2``: the official Python SDK client (legacy mode) and the TypeScript SDK client 1.x
  (``tests/ts/legacy_session.mjs``, run with Node) open sessions until every step has been served
  by both workers: ``initialize``, the listings, a read, completion, ``resources/subscribe`` (whose
  update must arrive on the GET stream, wherever that is held), a consent read whose
  ``elicitation/create`` answer is a separate POST (accepted and declined), and DELETE. For the
  Python client each step is mapped to the worker that served it (the server side of each
  connection, through /proc); the TypeScript client's steps are checked by their results.
* Two `catalog serve` processes on different ports sharing the database, with clients that send
  their requests to them in turn: the session opened on one host, its GET stream held by one, its
  subscription stored through the other, the consent answer posted to the other host than the read
  that waits for it.

Events are awaited with timeouts, never with sleeps.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import shutil
import subprocess
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
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
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import make_url

from catalog.mcp.context import CONSENT_DECLINED
from tests.conftest import through_pooler_env
from tests.mcp_helpers import LegacyInbox, module_database
from tests.processes import Served, catalog_env, serving, started, worker_of

pytestmark = [
    pytest.mark.process,
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

ADMIN_TOKEN = "cat_sessions-anywhere-admin-token"
SECRET = "sessions-anywhere-secret-0123456789abcdef"
WATCHED = "test://watched-resource"
GATED = "file:///project/docs/internal-notes.md"
SOURCE_TEMPLATE = "file:///project/src/{name}"
# Sessions opened at most until every step has been seen on both workers. Which worker accepts a
# connection is the kernel's choice and follows load (a worker busy with a GET stream accepts less),
# so a step can land on one worker many times in a row; the loop ends as soon as all are covered.
MAX_SESSIONS = 40
WAIT = 15.0
TS_DIR = Path(__file__).resolve().parents[1] / "ts"

# What a legacy session does, in order; each must be served by each worker at least once.
STEPS = (
    "initialize",
    "notifications/initialized",
    "GET",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "completion/complete",
    "resources/subscribe",
    "answer",  # the client's answer to the server's elicitation/create, a POST of its own
    "DELETE",
)


def serve_env(database_url: str, home: Path, **extra: str) -> dict[str, str]:
    return catalog_env(
        **through_pooler_env(database_url),
        CATALOG_HOME=str(home),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_SECRET_KEY=SECRET,
        **extra,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def database(postgres_server: Any, template_database: str) -> AsyncIterator[str]:
    async with module_database(postgres_server, template_database) as url:
        yield url


@pytest.fixture(scope="module")
def two_workers(database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    env = serve_env(database, tmp_path_factory.mktemp("workers"))
    with serving("--workers", "2", "--demo", env=env) as served:
        yield started(served, 2)


@pytest.fixture(scope="module")
def two_hosts(
    database: str, two_workers: Served, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, Served]]:
    """Two single-worker hosts on the database the demo was seeded into (by ``two_workers``)."""
    env = serve_env(database, tmp_path_factory.mktemp("hosts"), CATALOG_PUBLIC_TENANT="demo")
    with serving(env=env) as first, serving(env=env) as second:
        yield started(first), started(second)


@pytest.fixture(scope="module")
def node_clients() -> Path:
    """The TypeScript SDK client's dependencies, installed once from tests/ts/package-lock.json."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "Node.js (node and npm) is needed for the TypeScript SDK client tests"
    lock = (TS_DIR / "package-lock.json").read_bytes()
    marker = TS_DIR / "node_modules" / ".catalog-lock"
    if not marker.exists() or marker.read_bytes() != lock:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TS_DIR, check=True, capture_output=True)
        marker.write_bytes(lock)
    return TS_DIR / "legacy_session.mjs"


# -- the Python SDK client ----------------------------------------------------------------------------


def step_of(request: httpx2.Request) -> str:
    if request.method != "POST":
        return request.method
    body = json.loads(request.content)
    return body.get("method") or "answer"


@dataclass
class Coverage:
    """Which server (worker pid, or host port) served each step, and whether a session's steps that
    depend on each other were ever served apart: the consent answer by another server than the read
    waiting for it, a subscription stored by another server than the one holding the GET stream."""

    served_by: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    apart: set[str] = field(default_factory=set)
    _last: dict[str, int] = field(default_factory=dict)

    def record(self, step: str, server: int) -> None:
        self.served_by[step].add(server)
        self._last[step] = server
        if step == "answer" and self._last.get("resources/read") not in (None, server):
            self.apart.add("answer")
        if step == "resources/subscribe" and self._last.get("GET") not in (None, server):
            self.apart.add("resources/subscribe")

    def missing(self, servers: int) -> list[str]:
        steps = [step for step in STEPS if len(self.served_by[step]) < servers]
        return steps + [
            f"{step} apart" for step in ("answer", "resources/subscribe") if step not in self.apart
        ]


def worker_hook(served: Served, coverage: Coverage) -> Any:
    async def record(response: httpx2.Response) -> None:
        port = response.extensions["network_stream"].get_extra_info("client_addr")[1]
        coverage.record(step_of(response.request), worker_of(served, port))

    return record


class InTurn(httpx2.AsyncBaseTransport):
    """Sends each request to the next host in turn (new connection each time) and records it."""

    def __init__(self, ports: list[int], coverage: Coverage, *, start: int = 0) -> None:
        self.ports = ports
        self.coverage = coverage
        self.turn = start
        self.inner = httpx2.AsyncHTTPTransport(limits=httpx2.Limits(max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self.ports[self.turn % len(self.ports)]
        self.turn += 1
        request.url = request.url.copy_with(port=port)
        self.coverage.record(step_of(request), port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Answers:
    """The elicitation callback, answering what the test says."""

    def __init__(self) -> None:
        self.action = "accept"
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        if self.action == "accept":
            return types.ElicitResult(action="accept", content={"accept": True, "purpose": "python test"})
        return types.ElicitResult(action=self.action)  # type: ignore[arg-type]


async def change_watched(base_url: str, n: int) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as admin:
        response = await admin.put(
            "/admin/v1/tenants/demo/resources",
            params={"uri": WATCHED},
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            json={"name": "watched-resource", "mimeType": "text/plain", "text": f"version {n}"},
        )
        assert response.status_code == 200, response.text


async def python_session(http: httpx2.AsyncClient, url: str, admin_url: str) -> None:
    """One whole legacy session; asserts what each step answers."""
    inbox = LegacyInbox()
    answers = Answers()
    transport = streamable_http_client(url, http_client=http)
    async with Client(
        transport, mode="legacy", cache=None, message_handler=inbox, elicitation_callback=answers
    ) as client:
        listed = await client.list_resources()
        assert {WATCHED, GATED} <= {r.uri for r in listed.resources}
        read = await client.read_resource("test://static-text")
        assert read.contents[0].text == "This is the content of the static text resource."  # type: ignore[union-attr]
        templates = await client.list_resource_templates()
        assert SOURCE_TEMPLATE in {t.uri_template for t in templates.resource_templates}
        completion = await client.complete(
            types.ResourceTemplateReference(type="ref/resource", uri=SOURCE_TEMPLATE),
            {"name": "name", "value": "ma"},
        )
        assert completion.completion.values == ["main.py"]
        await client.subscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]
        # The GET stream opens on its own after initialize: change the resource until it reports.
        for n in range(20):
            await change_watched(admin_url, n)
            try:
                if await inbox.next_update(within=1.0) == ResourceUpdated(uri=WATCHED):
                    break
            except TimeoutError:
                continue
        else:
            pytest.fail("the subscription's update never arrived on the GET stream")

        answers.action = "accept"
        accepted = await client.read_resource(GATED)
        assert "internal" in accepted.contents[0].text.lower()  # type: ignore[union-attr]
        answers.action = "decline"
        with pytest.raises(MCPError) as declined:
            await client.read_resource(GATED)
        assert declined.value.code == CONSENT_DECLINED
        assert answers.asked == ["These notes are internal. Say why you need them."] * 2


async def test_python_sdk_sessions_on_two_workers_every_step_served_by_both(two_workers: Served) -> None:
    """COMPAT-7 (docs/requirements.toml)."""
    coverage = Coverage()
    sessions = 0
    while coverage.missing(2) and sessions < MAX_SESSIONS:
        sessions += 1
        http = httpx2.AsyncClient(
            timeout=30,
            limits=httpx2.Limits(max_keepalive_connections=0),
            event_hooks={"response": [worker_hook(two_workers, coverage)]},
        )
        async with http:
            await python_session(http, two_workers.mcp_url, two_workers.base_url)
    assert coverage.missing(2) == [], f"after {sessions} sessions: {dict(coverage.served_by)}"


async def test_python_sdk_session_alternating_between_two_hosts(two_hosts: tuple[Served, Served]) -> None:
    """META-8 (docs/requirements.toml)."""
    first, second = two_hosts
    coverage = Coverage()
    for start in range(2):  # two sessions, each step of the second on the other host than in the first
        http = httpx2.AsyncClient(
            timeout=30, transport=InTurn([first.port, second.port], coverage, start=start)
        )
        async with http:
            await python_session(http, first.mcp_url, first.base_url)
    assert coverage.missing(2) == [], dict(coverage.served_by)


# -- the TypeScript SDK client ------------------------------------------------------------------------


async def typescript_session(script: Path, urls: list[str], admin_url: str) -> list[dict[str, Any]]:
    """Run one TypeScript SDK session; change the watched resource until the script has its update."""
    process = await asyncio.create_subprocess_exec(
        "node", str(script), *urls, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    records: list[dict[str, Any]] = []
    changes = 0
    try:
        while True:
            try:
                line = await asyncio.wait_for(process.stdout.readline(), 1.0 if records_wait(records) else 60)
            except TimeoutError:
                if records_wait(records):
                    changes += 1
                    assert changes < 30, records
                    await change_watched(admin_url, changes)
                    continue
                raise
            if not line:
                break
            records.append(json.loads(line))
            if records_wait(records):
                await change_watched(admin_url, changes)
        code = await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
    stderr = (await process.stderr.read()).decode() if process.stderr else ""
    assert code == 0 and records and records[-1].get("done"), f"{records}\n{stderr}"
    return records


def records_wait(records: list[dict[str, Any]]) -> bool:
    """Whether the script is waiting for the watched resource to change."""
    return bool(records) and records[-1].get("waiting") == "update"


def check_typescript_steps(records: list[dict[str, Any]]) -> None:
    by_step = {r["step"]: r for r in records if "step" in r}
    assert by_step["initialize"] == {"step": "initialize", "sessionId": True, "version": "2025-11-25"}
    assert {WATCHED, GATED} <= set(by_step["resources/list"]["uris"])
    assert by_step["resources/read"]["text"] == "This is the content of the static text resource."
    assert SOURCE_TEMPLATE in by_step["resources/templates/list"]["templates"]
    assert by_step["completion/complete"]["values"] == ["main.py"]
    assert WATCHED in by_step["notifications/resources/updated"]["uris"]
    assert "internal" in by_step["consent-accepted"]["text"].lower()
    assert by_step["consent-declined"]["code"] == CONSENT_DECLINED
    assert by_step["DELETE"] == {"step": "DELETE", "sessionId": None}


async def test_typescript_sdk_sessions_on_two_workers(two_workers: Served, node_clients: Path) -> None:
    for _ in range(4):
        records = await typescript_session(node_clients, [two_workers.mcp_url], two_workers.base_url)
        check_typescript_steps(records)


async def test_typescript_sdk_session_alternating_between_two_hosts(
    two_hosts: tuple[Served, Served], node_clients: Path
) -> None:
    first, second = two_hosts
    records = await typescript_session(node_clients, [first.mcp_url, second.mcp_url], first.base_url)
    check_typescript_steps(records)
    requests = records[-1]["requests"]
    served_by: dict[str, set[int]] = defaultdict(set)
    for request in requests:
        served_by[request["step"]].add(request["port"])
    # Consecutive requests went to different hosts; the answer to the consent form was posted to
    # the other host than the read that waited for it.
    assert {first.port, second.port} == {r["port"] for r in requests}
    read_then_answer = [
        (a["port"], b["port"]) for a, b in itertools.pairwise(requests) if b["step"] == "answer"
    ]
    assert read_then_answer and all(a != b for a, b in read_then_answer), requests


# -- the session's life, over raw HTTP ----------------------------------------------------------------

LEGACY_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """``initialize`` + ``notifications/initialized``; the headers every later request carries."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    response = await http.post(url, json=init, headers=LEGACY_HEADERS)
    assert response.status_code == 200, response.text
    headers = {
        **LEGACY_HEADERS,
        "Mcp-Session-Id": response.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    notified = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert notified.status_code == 202
    return headers


async def list_status(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> int:
    response = await http.post(
        url, json={"jsonrpc": "2.0", "id": 2, "method": "resources/list"}, headers=headers
    )
    return response.status_code


async def stream_ends(url: str, headers: dict[str, str], opened: asyncio.Event) -> str:
    """Hold the session's GET stream until the server ends it; what it sent."""
    async with httpx.AsyncClient(timeout=WAIT) as http, http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream"
        opened.set()
        return "".join([chunk async for chunk in response.aiter_text()])


async def holding_stream(url: str, headers: dict[str, str]) -> asyncio.Task[str]:
    opened = asyncio.Event()
    held = asyncio.create_task(stream_ends(url, headers, opened))
    await asyncio.wait_for(opened.wait(), WAIT)
    return held


async def test_delete_on_one_host_ends_the_session_and_its_stream_on_the_other(
    two_hosts: tuple[Served, Served],
) -> None:
    """COMPAT-7 (docs/requirements.toml)."""
    first, second = two_hosts
    async with httpx.AsyncClient(timeout=WAIT) as http:
        headers = await open_session(http, first.mcp_url)
        assert await list_status(http, second.mcp_url, headers) == 200
        held = await holding_stream(second.mcp_url, headers)
        assert (await http.delete(first.mcp_url, headers=headers)).status_code == 200
        await asyncio.wait_for(held, WAIT)  # the stream on the other host ended
        assert await list_status(http, second.mcp_url, headers) == 404
        assert await list_status(http, first.mcp_url, headers) == 404
        assert (await http.delete(second.mcp_url, headers=headers)).status_code == 404


async def test_a_newer_get_stream_on_another_host_ends_the_older_one(
    two_hosts: tuple[Served, Served],
) -> None:
    """Each server-initiated message of a session goes on one stream only (2025-11-25 transport)."""
    first, second = two_hosts
    async with httpx.AsyncClient(timeout=WAIT) as http:
        headers = await open_session(http, first.mcp_url)
        older = await holding_stream(first.mcp_url, headers)
        newer = await holding_stream(second.mcp_url, headers)
        await asyncio.wait_for(older, WAIT)
        assert not newer.done()
        assert (await http.delete(second.mcp_url, headers=headers)).status_code == 200
        await asyncio.wait_for(newer, WAIT)


@pytest.fixture(scope="module")
def short_idle(
    database: str, two_workers: Served, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    env = serve_env(
        database,
        tmp_path_factory.mktemp("idle"),
        CATALOG_PUBLIC_TENANT="demo",
        CATALOG_SESSION_IDLE_SECONDS="2",
    )
    with serving(env=env) as served:
        yield started(served)


async def session_row_exists(database: str, session_id: str) -> bool:
    dsn = make_url(database).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT set_config('catalog.all_tenants', 'on', false)")
        key = hashlib.sha256(session_id.encode()).digest()
        return await conn.fetchval("SELECT EXISTS (SELECT 1 FROM mcp_sessions WHERE id_hash = $1)", key)
    finally:
        await conn.close()


async def until(condition: Any, within: float = WAIT, every: float = 0.25) -> None:
    """Wait until ``await condition()`` is true, checking every ``every`` seconds, at most ``within``."""
    async with asyncio.timeout(within):
        for _ in itertools.count():
            if await condition():
                return
            await asyncio.sleep(every)


async def test_an_idle_session_expires_and_its_rows_are_swept(short_idle: Served, database: str) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        headers = await open_session(http, short_idle.mcp_url)
        assert await list_status(http, short_idle.mcp_url, headers) == 200
        session_id = headers["Mcp-Session-Id"]
        assert await session_row_exists(database, session_id)

        async def swept() -> bool:
            return not await session_row_exists(database, session_id)

        # Left unused (nothing is sent meanwhile: a request would keep it alive), it is swept from
        # the table once the idle time has passed, and refused from then on.
        await until(swept)
        assert await list_status(http, short_idle.mcp_url, headers) == 404


async def test_an_open_get_stream_keeps_its_session_alive(short_idle: Served) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        headers = await open_session(http, short_idle.mcp_url)
        held = await holding_stream(short_idle.mcp_url, headers)
        # Three idle periods with only the stream open: the session is still there.
        done, _ = await asyncio.wait([held], timeout=6)
        assert not done
        assert await list_status(http, short_idle.mcp_url, headers) == 200
        assert (await http.delete(short_idle.mcp_url, headers=headers)).status_code == 200
        await asyncio.wait_for(held, WAIT)
