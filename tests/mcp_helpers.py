"""Shared pieces of the MCP endpoint tests (tests/test_mcp_*.py): a served app with fixture data,
SDK clients in both eras, raw-HTTP helpers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from catalog.app import create_app
from catalog.core.catalog import Catalog
from catalog.core.grants import create_grant
from catalog.core.principal import Principal
from catalog.core.resources import upsert_many, upsert_resource
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.templates import create_template
from catalog.core.tenants import Tenant, create_tenant
from catalog.core.tokens import create_token
from catalog.db.engine import create_engine
from catalog.demo import seed_demo_catalog
from catalog.serving import CatalogServer
from catalog.settings import Settings
from tests.conftest import _admin, free_port, through_pooler

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ERAS = [MODERN, "legacy"]

HIDDEN = "file:///private/notes.txt"
BULK = 250  # resources under test://bulk/ (three pages of 100)
SYSTEM = Principal.system("tests")


@dataclass
class Fixture:
    """What the seeded catalogue holds besides the demo data."""

    tenant: Tenant
    tokens: dict[str, str] = field(default_factory=dict)  # name -> bearer token


async def seed(settings: Settings) -> Fixture:
    """The demo tenant plus: a hidden resource, 250 bulk resources, tokens with known grants, and a
    second tenant (whose data no demo token may see)."""
    engine = create_engine(
        settings.async_database_url(), pool_size=2, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    catalog = Catalog(engine=engine, settings=settings)
    try:
        tenant = await seed_demo_catalog(catalog)
        await upsert_resource(
            catalog,
            SYSTEM,
            tenant,
            ResourceIn.model_validate(
                {
                    "uri": HIDDEN,
                    "name": "notes.txt",
                    "mimeType": "text/plain",
                    "text": "hidden notes",
                    "tags": ["staff"],
                }
            ),
        )
        bulk = [
            ResourceIn.model_validate(
                {
                    "uri": f"test://bulk/{i:04d}",
                    "name": f"bulk-{i}",
                    "mimeType": "text/plain",
                    "text": f"item {i}",
                }
            )
            for i in range(BULK)
        ]
        bulk.append(
            ResourceIn.model_validate({"uri": "test://bulk", "name": "bulk", "mimeType": "inode/directory"})
        )
        await upsert_many(catalog, SYSTEM, tenant, bulk)
        await create_grant(
            catalog,
            SYSTEM,
            tenant,
            GrantIn.model_validate({"scope": "src", "uriPrefix": "file:///project/src"}),
        )
        await create_grant(
            catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "staff", "tag": "staff"})
        )
        fixture = Fixture(tenant)
        for name, body in {
            "src": {"scopes": ["src"]},
            "staff": {"scopes": ["public", "staff"]},
            "admin": {"scopes": [], "admin": True},
            "none": {"scopes": ["nothing"]},
        }.items():
            created = await create_token(catalog, SYSTEM, tenant, TokenIn.model_validate(body))
            fixture.tokens[name] = created.token
        other = await create_tenant(catalog, "other", "Other")
        await upsert_resource(
            catalog,
            SYSTEM,
            other,
            ResourceIn.model_validate({"uri": "test://static-text", "name": "other", "text": "other tenant"}),
        )
        await create_template(
            catalog,
            SYSTEM,
            other,
            TemplateIn.model_validate({"uriTemplate": "test://other/{x}", "name": "o", "text": "{x}"}),
        )
        created = await create_token(catalog, SYSTEM, other, TokenIn.model_validate({"admin": True}))
        fixture.tokens["other-admin"] = created.token
        return fixture
    finally:
        await engine.dispose()


@dataclass
class Served:
    base_url: str
    app: Any
    fixture: Fixture
    loop: asyncio.AbstractEventLoop | None = None
    database_url: str = ""
    stop: Callable[[], float] = lambda: 0.0

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    @property
    def catalog(self) -> Catalog:
        return self.app.state.catalog

    def token(self, name: str) -> str:
        return self.fixture.tokens[name]

    def client(self, mode: str = MODERN, token: str | None = None, **kwargs: Any) -> Client:
        """An SDK client (TTL cache off) over real HTTP, with a bearer token if named."""
        headers = {"Authorization": f"Bearer {self.token(token)}"} if token else {}
        transport = streamable_http_client(
            self.mcp_url, http_client=httpx2.AsyncClient(headers=headers, timeout=30)
        )
        return Client(transport, mode=mode, cache=None, **kwargs)


@contextlib.asynccontextmanager
async def acting_catalog(srv: Served) -> AsyncIterator[Catalog]:
    """The served database's catalogue on an engine of this test's loop, to change it as the admin
    API would."""
    settings = srv.app.state.settings
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


def mcp_settings(database_url: str, home: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        **through_pooler(database_url),
        "home": home,
        "admin_token": "cat_test-platform-admin-token",
        "secret_key": "test-secret-key-0123456789abcdef",
        "public_tenant": "demo",
        "rate_limit_per_minute": 0,  # tests of other things must not trip it (tests/db/test_edge.py does)
    }
    return Settings(**{**values, **overrides})


@contextlib.asynccontextmanager
async def module_database(postgres_server: Any, template_database: str) -> AsyncIterator[str]:
    """A migrated database for a whole test module (the per-test ``database_url`` is function-scoped)."""
    name = f"catalog_m_{uuid.uuid4().hex[:12]}"
    await _admin(postgres_server, f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    try:
        yield postgres_server.url_for(name)
    finally:
        await _admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def serve(app: Any) -> Iterator[tuple[str, asyncio.AbstractEventLoop, Callable[[], float]]]:
    """Serve ``app`` with uvicorn in a thread; shutdown closes MCP streams first, as ``catalog serve``.
    Yields the base URL, the server's event loop and a ``stop()`` returning how long shutdown took."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = CatalogServer(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    loops: list[asyncio.AbstractEventLoop] = []

    def run() -> None:
        async def main() -> None:
            loops.append(asyncio.get_running_loop())
            await server.serve()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready = threading.Event()
    while not server.started and thread.is_alive():
        ready.wait(0.02)
    if not server.started:
        raise RuntimeError("test server did not start")

    def stop() -> float:
        started = time.monotonic()
        server.should_exit = True
        thread.join(timeout=15)
        assert not thread.is_alive(), "the server did not shut down"
        return time.monotonic() - started

    try:
        yield f"http://127.0.0.1:{port}", loops[0], stop
    finally:
        if thread.is_alive():
            stop()


@contextlib.asynccontextmanager
async def served(settings: Settings) -> AsyncIterator[Served]:
    fixture = await seed(settings)
    app = create_app(settings)
    from catalog.events import events_lifespan

    if events_lifespan not in app.state.lifespan_hooks:
        app.state.lifespan_hooks.insert(0, events_lifespan)
    with serve(app) as (base_url, loop, stop):
        direct = settings.listen_database_url or settings.database_url or ""  # not through a pooler
        yield Served(base_url, app, fixture, loop, direct, stop)


async def all_pages(client: Client, method: str = "resources") -> tuple[list[Any], list[Any]]:
    """Every item of a listing, and every page result."""
    items: list[Any] = []
    pages: list[Any] = []
    cursor: str | None = None
    while True:
        if method == "resources":
            page = await client.list_resources(cursor=cursor)
            items += page.resources
        else:
            page = await client.list_resource_templates(cursor=cursor)
            items += page.resource_templates
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return items, pages


# -- raw HTTP -------------------------------------------------------------------------------------


def envelope(version: str = MODERN, caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": caps or {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
    }


def modern_headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    headers.update(extra)
    return headers


def raw(
    served: Served,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    caps: dict[str, Any] | None = None,
    id: Any = 1,
    token: str | None = None,
) -> httpx.Response:
    """One modern POST with correct headers (override or ``drop`` some to break them)."""
    body_params = {"_meta": envelope(caps=caps), **(params or {})}
    h = modern_headers(method, body_params.get("uri") if method == "resources/read" else None)
    if token:
        h["Authorization"] = f"Bearer {served.token(token)}"
    h.update(headers or {})
    for name in drop:
        h.pop(name, None)
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": body_params}
    return httpx.post(served.mcp_url, json=body, headers=h, timeout=30)


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]


def b64_header(value: str) -> str:
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


def accepting(purpose: str = "testing"):
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"accept": True, "purpose": purpose})

    return callback


def answering(action: str):
    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action=action)  # type: ignore[arg-type]

    return callback


class LegacyInbox:
    """A 2025-11-25 session's change notifications, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            await self.queue.put(ResourceUpdated(uri=message.params.uri))
        elif isinstance(message, types.ResourceListChangedNotification):
            await self.queue.put(ResourcesListChanged())

    async def next(self, within: float = 15) -> Any:
        return await asyncio.wait_for(self.queue.get(), within)

    async def next_update(self, within: float = 15) -> ResourceUpdated:
        while not isinstance(event := await self.next(within), ResourceUpdated):
            pass
        return event


class RawListen:
    """A ``subscriptions/listen`` over raw HTTP in the test's loop: the SSE ``data`` lines as sent
    (``lines``) and parsed (``messages``), each new one waited for with :meth:`next`.
    ``through_sdk`` adds a progress token to the envelope, which keeps the listen off the plain
    path (``catalog.mcp.fast_listen``) and on the SDK's."""

    def __init__(
        self,
        served: Served,
        notifications: dict[str, Any],
        *,
        id: Any = 1,
        token: str | None = None,
        bearer: str | None = None,
        through_sdk: bool = False,
    ) -> None:
        meta = {**envelope(), "progressToken": "to-the-sdk"} if through_sdk else envelope()
        self.body = {
            "jsonrpc": "2.0",
            "id": id,
            "method": "subscriptions/listen",
            "params": {"_meta": meta, "notifications": notifications},
        }
        self.headers = modern_headers("subscriptions/listen")
        if token is not None:
            bearer = served.token(token)
        if bearer is not None:
            self.headers["Authorization"] = f"Bearer {bearer}"
        self.url = served.mcp_url
        self.lines: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.ended = asyncio.Event()
        self._arrived = asyncio.Event()
        self._read = 0

    async def _pump(self, response: httpx.Response) -> None:
        try:
            async for line in response.aiter_lines():
                if line.startswith("data:") and line[5:].strip():
                    self.lines.append(line[5:].strip())
                    self.messages.append(json.loads(line[5:]))
                    self._arrived.set()
        except httpx.HTTPError:
            pass
        finally:
            self.ended.set()
            self._arrived.set()

    async def next(self, within: float = 10.0) -> dict[str, Any]:
        """The next message not yet taken, waiting for it."""
        async with asyncio.timeout(within):
            while self._read >= len(self.messages):
                if self.ended.is_set():
                    raise AssertionError(f"the stream ended after {self.messages}")
                self._arrived.clear()
                await self._arrived.wait()
        self._read += 1
        return self.messages[self._read - 1]

    async def wait_ended(self, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            await self.ended.wait()

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[RawListen]:
        """The stream, open (its response's status and headers read); closed on leaving."""
        async with (
            httpx.AsyncClient(timeout=30) as http,
            http.stream("POST", self.url, json=self.body, headers=self.headers) as response,
        ):
            self.status = response.status_code
            self.content_type = response.headers.get("content-type", "")
            if not self.content_type.startswith("text/event-stream"):  # an error answered as JSON
                self.messages.append(json.loads(await response.aread()))
            pump = asyncio.ensure_future(self._pump(response))
            try:
                yield self
            finally:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
