"""Test fixtures: real PostgreSQL only.

The server is ``CATALOG_TEST_DATABASE_URL`` when set, else an embedded PostgreSQL started for the
session. The schema is migrated once into a template database; each test gets its own clone
(``CREATE DATABASE ... TEMPLATE``), so tests are isolated and cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from catalog.app import create_app
from catalog.cli import main
from catalog.core.catalog import Catalog
from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres
from catalog.db.engine import create_engine
from catalog.events.listener import listener_dsn
from catalog.serving import CatalogServer
from catalog.settings import Settings, get_settings
from tests.admin_support import ADMIN, API, running
from tests.clones import Clones

pytest_plugins = ["pytester", "tests.failures", "tests.cpu_report"]


def _share_default_tls_contexts() -> None:
    """Every ``httpx``/``httpx2`` client made with the default ``verify=True`` builds a new TLS
    context and loads the whole CA bundle into it (20-40 ms of CPU), though the tests only speak
    plain HTTP to 127.0.0.1. The suite makes thousands of clients (each SDK client makes one): in the
    leak oracle a third of the test's CPU went there. One context per process serves them all;
    any other ``verify`` or a client certificate still gets a context of its own."""
    import functools

    import httpx._transports.default as httpx_transports
    import httpx2._transports.default as httpx2_transports

    for module in (httpx_transports, httpx2_transports):
        build = module.create_ssl_context
        shared = functools.cache(lambda trust_env, build=build: build(verify=True, trust_env=trust_env))

        def create_ssl_context(
            verify: Any = True,
            cert: Any = None,
            trust_env: bool = True,
            *,
            build: Any = build,
            shared: Any = shared,
        ) -> Any:
            if verify is True and cert is None:
                return shared(trust_env)
            return build(verify=verify, cert=cert, trust_env=trust_env)

        module.create_ssl_context = create_ssl_context  # type: ignore[assignment]


_share_default_tls_contexts()


# The MCP executor under test (``.ci/run`` runs the MCP tests with ``off`` and with ``shadow`` too);
# read as the settings read it.
FAST_PATH = os.environ.get("CATALOG_MCP_FAST_PATH", "").strip().lower() or "on"


class _Differences(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "shadow_differences_expected: the test makes the fast path and the SDK path differ on purpose",
    )
    config.addinivalue_line(
        "markers",
        "fast_path: the test proves the fast path answers (it counts its answers); skipped with"
        " CATALOG_MCP_FAST_PATH=off, where the SDK path answers everything",
    )


# Modules that prove the fast path itself (they count its answers): fast_path as a whole.
FAST_PATH_MODULES = frozenset({"test_mcp_fast_path.py", "test_fast_listen.py"})


def _distinct_node_ids(items: list[pytest.Item]) -> None:
    """schemathesis names its items ``test[GET /path]`` but, on pytest 9, their node ids are the
    bare ``test`` (pytest builds an id from ``originalname`` and a callspec they do not have); under
    pytest-xdist, which runs node ids, all but one of them would silently not run."""
    for item in items:
        original = getattr(item, "originalname", None)
        node_id = getattr(item, "_id", None)
        if (
            isinstance(item, pytest.Function)
            and original
            and item.name.startswith(original + "[")
            and node_id is not None
            and node_id.params is None
        ):
            item._id = node_id.with_params(item.name[len(original) + 1 : -1])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _distinct_node_ids(items)
    # The slow tests first (a stable sort: otherwise in collection order), so that under
    # pytest-xdist the longest are not the last to start, with one worker busy and the rest idle.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    if FAST_PATH != "off":
        return
    skip = pytest.mark.skip(reason="CATALOG_MCP_FAST_PATH=off: no request takes the fast path")
    for item in items:
        if item.get_closest_marker("fast_path") is not None or item.path.name in FAST_PATH_MODULES:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_shadow_difference(request: pytest.FixtureRequest) -> Iterator[None]:
    """With ``CATALOG_MCP_FAST_PATH=shadow``, fail a test during which an app in this process (an
    ``app`` fixture, a live server in a thread) logged a difference between the fast path's answer
    and the SDK path's (``catalog.mcp.shadow``); served processes are checked by
    ``tests.processes.serving``."""
    if FAST_PATH != "shadow" or request.node.get_closest_marker("shadow_differences_expected"):
        yield
        return
    handler = _Differences()
    shadow_log = logging.getLogger("catalog.mcp.shadow")
    level = shadow_log.level
    shadow_log.setLevel(logging.WARNING)  # whatever a test did to the loggers above it
    shadow_log.addHandler(handler)
    try:
        yield
    finally:
        shadow_log.removeHandler(handler)
        shadow_log.setLevel(level)
    assert handler.lines == [], "the fast path and the SDK path answered differently:\n" + "\n".join(
        handler.lines
    )


@dataclass(frozen=True)
class PostgresServer:
    """Where the test databases live: a URL template and an asyncpg DSN for maintenance work."""

    url: str  # SQLAlchemy URL of the maintenance database
    embedded: EmbeddedPostgres | None

    def url_for(self, database: str) -> str:
        return make_url(self.url).set(database=database).render_as_string(hide_password=False)

    def dsn_for(self, database: str) -> str:
        return (
            make_url(self.url_for(database))
            .set(drivername="postgresql")
            .render_as_string(hide_password=False)
        )


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    configured = os.environ.get("CATALOG_TEST_DATABASE_URL")
    if configured:
        yield PostgresServer(
            url=make_url(configured).set(drivername="postgresql+asyncpg").render_as_string(False),
            embedded=None,
        )
        return
    home = Path(tempfile.mkdtemp(prefix="catalog-test-pg-"))
    embedded = EmbeddedPostgres(
        home, extra_settings={"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
    )
    embedded.start()
    try:
        yield PostgresServer(url=embedded.url("postgres"), embedded=embedded)
    finally:
        embedded.release()


async def _admin(server: PostgresServer, sql: str) -> None:
    maintenance = make_url(server.url).database or "postgres"
    conn = await asyncpg.connect(server.dsn_for(maintenance))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_database(postgres_server: PostgresServer) -> Iterator[str]:
    name = f"catalog_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    asyncio.run(_admin(postgres_server, f'CREATE DATABASE "{name}"'))
    migrate.upgrade(postgres_server.url_for(name))
    try:
        yield name
    finally:
        asyncio.run(_admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def database_clones(postgres_server: PostgresServer, template_database: str) -> Iterator[Clones]:
    """Clones of the template made ahead and dropped behind (tests/clones.py)."""
    maintenance = make_url(postgres_server.url).database or "postgres"
    clones = Clones(postgres_server.dsn_for(maintenance), template_database)
    try:
        yield clones
    finally:
        clones.close()


@pytest.fixture
async def database_url(postgres_server: PostgresServer, database_clones: Clones) -> AsyncIterator[str]:
    """A fresh, migrated database of this test's own."""
    name = await asyncio.to_thread(database_clones.take)
    try:
        yield postgres_server.url_for(name)
    finally:
        database_clones.give_back(name)


@pytest.fixture
async def empty_database_url(postgres_server: PostgresServer) -> AsyncIterator[str]:
    """A database with no schema at all (for migration tests)."""
    name = f"catalog_e_{uuid.uuid4().hex[:12]}"
    await _admin(postgres_server, f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.url_for(name)
    finally:
        await _admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def through_pooler(database_url: str) -> dict[str, str]:
    """The settings that point the catalog at the test database ``database_url``: directly, or,
    with ``CATALOG_TEST_POOLER_URL`` set (a PgBouncer in transaction mode in front of the test
    server, with a ``*`` database entry: scripts/pgbouncer.sh), its queries through the pooler and
    its LISTEN connection straight to the server."""
    pooler = os.environ.get("CATALOG_TEST_POOLER_URL")
    if not pooler:
        return {"database_url": database_url}
    direct = make_url(database_url)
    via = make_url(pooler).set(drivername=direct.drivername, database=direct.database)
    return {
        "database_url": via.render_as_string(hide_password=False),
        "database_pooler": "pgbouncer",
        "listen_database_url": database_url,
    }


def through_pooler_env(database_url: str) -> dict[str, str]:
    """:func:`through_pooler` as ``CATALOG_*`` environment variables, for ``catalog`` processes."""
    return {f"CATALOG_{name.upper()}": value for name, value in through_pooler(database_url).items()}


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        **through_pooler(database_url),  # type: ignore[arg-type]
        home=tmp_path / "home",
        admin_token="cat_test-platform-admin-token",
        secret_key="test-secret-key-0123456789abcdef",
        public_tenant=None,
        rate_limit_per_minute=0,  # tests of other things must not trip it (tests/db/test_edge.py does)
    )


@pytest.fixture
async def catalog(settings: Settings) -> AsyncIterator[Catalog]:
    """The core on the test's database, as the app builds it (a small pool of its own)."""
    engine = create_engine(settings.async_database_url(), pool_size=2)
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class LiveServer:
    base_url: str
    app: object

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"


@contextlib.contextmanager
def run_live_server(app: object) -> Iterator[LiveServer]:
    """Serve ``app`` with uvicorn on a free loopback port in a thread, for real-HTTP clients."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")  # type: ignore[arg-type]
    server = CatalogServer(config)  # as `catalog serve` runs it (its shutdown ends the app's streams)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = threading.Event()

    def wait_started() -> None:
        while not server.started and thread.is_alive():
            started.wait(0.02)

    wait_started()
    if not server.started:
        raise RuntimeError("test server did not start")
    try:
        yield LiveServer(base_url=f"http://127.0.0.1:{port}", app=app)
    finally:
        server.should_exit = True
        thread.join(timeout=15)


# -- the CLI, in-process ------------------------------------------------------------------------------


@dataclass
class Result:
    code: int
    out: str
    err: str


Run = Callable[..., Result]


@pytest.fixture
def cli(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Run]:
    monkeypatch.setenv("CATALOG_DATABASE_URL", database_url)
    monkeypatch.setenv("CATALOG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CATALOG_SECRET_KEY", "test-secret-key-0123456789abcdef")
    monkeypatch.setenv("CATALOG_ADMIN_TOKEN", "cat_test-platform-admin-token")
    get_settings.cache_clear()

    def run(*argv: str) -> Result:
        capsys.readouterr()
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    yield run
    get_settings.cache_clear()


@pytest.fixture
def sql(database_url: str) -> Callable[..., list[asyncpg.Record]]:
    """Run one query on the test database (as the superuser: no row security in the way)."""
    dsn = listener_dsn(database_url)

    def query(statement: str, *args: Any) -> list[asyncpg.Record]:
        async def go() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(dsn)
            try:
                return await conn.fetch(statement, *args)
            finally:
                await conn.close()

        return asyncio.run(go())

    return query


# -- the admin API in-process (tests/admin_support.py has its helpers) -----------------------------


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    async with running(create_app(settings)) as application:
        yield application


@pytest.fixture
async def anon(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client that sends no credentials."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding the platform admin token."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=ADMIN) as c:
        yield c


@pytest.fixture
async def tenant(client: httpx.AsyncClient) -> str:
    response = await client.post(f"{API}/tenants", json={"slug": "acme", "name": "Acme"})
    assert response.status_code == 201, response.text
    return "acme"


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A direct connection (superuser: sees every tenant's rows) for asserting what was stored."""
    dsn = listener_dsn(database_url)
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()
