"""Faults: a real ``catalog serve`` process on an embedded PostgreSQL we control.

* PostgreSQL stopped under load: /readyz answers 503 at once; admin requests get 503 problem JSON
  (``Retry-After``), MCP requests a JSON-RPC ``-32603`` (HTTP 503 whether the failure is met while
  authenticating the bearer token or inside a handler; a stream already begun keeps its 200); no
  500, no request outlives a bound. PostgreSQL started again: the
  same process becomes ready by itself, reads work, and the LISTEN connection is back.
* SIGKILL mid-upload (a slow streamed blob body) and mid-write (a resource transaction held just
  before its audit row): nothing partial is stored; after a restart the catalogue is consistent.
* ``CATALOG_STATEMENT_TIMEOUT_MS`` is applied on the app's own connections, and a query stuck on a
  lock is cancelled (503) while the process keeps answering other requests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text

from catalog.app import create_app
from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres
from catalog.db.engine import database_unavailable
from catalog.settings import Settings
from tests.admin_support import running
from tests.mcp_helpers import MODERN, envelope
from tests.processes import Served, catalog_env, serving

pytestmark = pytest.mark.process

ADMIN_TOKEN = "cat_faults-platform-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
API = "/admin/v1"
REQUEST_BOUND_S = 15.0  # connect timeout 5 s + pool timeout 10 s: no request may take longer
STATEMENT_TIMEOUT_MS = 500


def until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``condition`` until it is truthy (returning it) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    waiter = threading.Event()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        waiter.wait(interval)


@dataclass
class Postgres:
    embedded: EmbeddedPostgres

    def url(self, database: str) -> str:
        return self.embedded.url(database)

    def dsn(self, database: str) -> str:
        return self.embedded.dsn(database)

    def sql(self, database: str, query: str, *args: Any) -> Any:
        async def run() -> Any:
            conn = await asyncpg.connect(self.dsn(database))
            try:
                return await conn.fetch(query, *args)
            finally:
                await conn.close()

        return asyncio.run(run())


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    # Not under pytest's tmp dir: a concurrent pytest run resets that tree to mode 0700, which
    # would lock out the PostgreSQL system user when the tests run as root.
    home = Path(tempfile.mkdtemp(prefix="catalog-faults-pg-"))
    embedded = EmbeddedPostgres(home, extra_settings={"fsync": "off"})
    embedded.start()
    try:
        migrate.upgrade(embedded.url("catalog"))
        yield Postgres(embedded)
    finally:
        if not embedded._running():
            embedded.start()  # a test failed while it was stopped: start it so release() stops it
        embedded.release()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def database(postgres: Postgres) -> str:
    name = f"f_{uuid.uuid4().hex[:10]}"
    postgres.sql("postgres", f'CREATE DATABASE "{name}" TEMPLATE catalog')
    return name


def serve_env(postgres: Postgres, database: str, home: Path, **extra: str) -> dict[str, str]:
    return catalog_env(
        CATALOG_DATABASE_URL=postgres.url(database),
        CATALOG_HOME=str(home),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_SECRET_KEY="faults-secret-key-0123456789abcdef",
        CATALOG_PUBLIC_TENANT="acme",
        **extra,
    )


@contextlib.contextmanager
def catalog_serve(env: dict[str, str]) -> Iterator[tuple[Served, httpx.Client]]:
    with serving(env=env) as served:
        served.wait_for("Application startup complete")
        with httpx.Client(base_url=served.base_url, timeout=REQUEST_BOUND_S + 5) as http:
            yield served, http


def seed(http: httpx.Client) -> str:
    """Tenant acme: a public text resource, a grant, and a tenant token that can read it."""
    assert http.post(f"{API}/tenants", json={"slug": "acme"}, headers=ADMIN).status_code == 201
    body = {"uri": "test://doc", "name": "doc", "mimeType": "text/plain", "text": "hello", "tags": ["pub"]}
    assert http.post(f"{API}/tenants/acme/resources", json=body, headers=ADMIN).status_code == 201
    grant = {"scope": "public", "tag": "pub"}
    assert http.post(f"{API}/tenants/acme/grants", json=grant, headers=ADMIN).status_code == 201
    token = http.post(f"{API}/tenants/acme/tokens", json={"scopes": ["public"]}, headers=ADMIN)
    assert token.status_code == 201
    return token.json()["token"]


def mcp_read(http: httpx.Client, token: str | None, uri: str = "test://doc") -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "resources/read",
        "Mcp-Name": uri,
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {"_meta": envelope(), "uri": uri},
    }
    return http.post("/mcp", json=body, headers=headers)


# -- (a) PostgreSQL stopped under load -------------------------------------------------------------


@dataclass
class Outcome:
    surface: str
    status: int
    body: Any
    elapsed: float
    headers: dict[str, str]


def check_outcome(outcome: Outcome) -> str:
    """Classify one answer as 'ok' or 'unavailable'; fail on anything else."""
    if outcome.surface == "admin":
        if outcome.status == 200:
            return "ok"
        assert outcome.status == 503, outcome
        assert outcome.headers.get("content-type", "").startswith("application/problem+json"), outcome
        assert outcome.body["status"] == 503 and outcome.body["title"] == "Service unavailable", outcome
        assert outcome.headers.get("retry-after") == "1"
        return "unavailable"
    assert outcome.status in (200, 503), outcome
    if "result" in outcome.body:
        assert outcome.status == 200 and outcome.body["result"]["contents"][0]["text"] == "hello"
        return "ok"
    error = outcome.body["error"]
    assert error["code"] == -32603 and "unavailable" in error["message"].lower(), outcome
    return "unavailable"


class Load:
    """Threads that keep reading through both surfaces, recording every answer."""

    def __init__(self, base_url: str, token: str, threads: int = 6) -> None:
        self.base_url = base_url
        self.token = token
        self.stop = threading.Event()
        self.outcomes: list[Outcome] = []
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        surfaces = ("admin", "mcp-token", "mcp-anonymous")
        with httpx.Client(base_url=self.base_url, timeout=REQUEST_BOUND_S + 5) as http:
            while not self.stop.is_set():
                surface = surfaces[index % len(surfaces)]
                started = time.monotonic()
                response = None
                try:
                    if surface == "admin":
                        response = http.get(f"{API}/tenants/acme/resources", headers=ADMIN)
                    else:
                        response = mcp_read(http, self.token if surface == "mcp-token" else None)
                    body = response.json()
                except BaseException as exc:  # a hung or dropped request fails the test below
                    shown = f"HTTP {response.status_code} {response.text[:300]!r}" if response else ""
                    self.errors.append(AssertionError(f"{surface}: {exc!r} {shown}"))
                    return
                self.outcomes.append(
                    Outcome(
                        "admin" if surface == "admin" else "mcp",
                        response.status_code,
                        body,
                        time.monotonic() - started,
                        dict(response.headers),
                    )
                )

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=REQUEST_BOUND_S + 10)
            assert not thread.is_alive(), "a load thread is stuck in a request"

    def count(self) -> int:
        return len(self.outcomes)


def test_postgres_stopped_under_load_then_back_without_a_restart(
    postgres: Postgres, database: str, tmp_path: Path
) -> None:
    with catalog_serve(serve_env(postgres, database, tmp_path / "home")) as (served, http):
        token = seed(http)
        assert http.get("/readyz").status_code == 200
        with Load(served.base_url, token) as load:
            until(lambda: load.count() >= 30, 30, "load before the outage")

            postgres.embedded.stop()  # fast shutdown: every session is terminated
            started = time.monotonic()
            down = http.get("/readyz")
            assert time.monotonic() - started < 5
            assert down.status_code == 503
            assert down.json()["status"] == "not ready"
            assert down.json()["checks"]["database"].startswith("unreachable")

            admin = http.get(f"{API}/tenants/acme/resources", headers=ADMIN)
            kind = check_outcome(Outcome("admin", admin.status_code, admin.json(), 0, dict(admin.headers)))
            assert kind == "unavailable"
            mcp = mcp_read(http, token)  # the bearer token needs the database: HTTP 503, -32603
            assert mcp.status_code == 503 and mcp.json()["error"]["code"] == -32603
            assert mcp.json()["id"] == 1 and mcp.headers["retry-after"] == "1"  # ERR-3: the id was readable
            at_outage = load.count()
            until(lambda: load.count() >= at_outage + 30, 30, "load during the outage")

            postgres.embedded.start()
            ready = until(
                lambda: (r := http.get("/readyz")).status_code == 200 and r,
                45,
                "/readyz to come back by itself",
                interval=0.2,
            )
            assert ready.json() == {
                "status": "ready",
                "checks": {"database": "ok", "schema": "ok", "events": "ok"},
            }
            at_return = load.count()
            until(lambda: load.count() >= at_return + 30, 30, "load after the outage")
        errors = [line[-2000:] for line in served.printed().splitlines() if '"level":"error"' in line]
        assert not load.errors, (load.errors[:3], errors[:2])
        kinds = [check_outcome(outcome) for outcome in load.outcomes]
        assert "unavailable" in kinds and kinds[-1] == "ok"
        assert {o.surface for o in load.outcomes if check_outcome(o) == "unavailable"} == {"admin", "mcp"}
        assert max(o.elapsed for o in load.outcomes) < REQUEST_BOUND_S
        # Back to normal on every surface, and the process's LISTEN connection is there again.
        assert mcp_read(http, token).json()["result"]["contents"][0]["text"] == "hello"
        assert mcp_read(http, None).json()["result"]["contents"][0]["text"] == "hello"
        listeners = postgres.sql(
            database,
            "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'catalog-listener'"
            " AND datname = current_database()",
        )
        assert listeners[0]["n"] == 1
        assert served.process.poll() is None  # the same process throughout
    printed = "".join(served.output)
    assert "Traceback" not in printed, printed[-3000:]


# -- (b) SIGKILL in the middle of a write ----------------------------------------------------------


COUNTS = (
    "SELECT (SELECT count(*) FROM blobs) AS blobs, (SELECT count(*) FROM resources) AS resources,"
    " (SELECT count(*) FROM resource_versions) AS versions, (SELECT count(*) FROM audit_log) AS audit,"
    " (SELECT count(*) FROM change_feed) AS changes"
)


def counts(postgres: Postgres, database: str) -> dict[str, int]:
    return dict(postgres.sql(database, COUNTS)[0])


def catalog_backends(postgres: Postgres, database: str) -> list[dict[str, Any]]:
    rows = postgres.sql(
        database,
        "SELECT pid, state, wait_event_type, query FROM pg_stat_activity"
        " WHERE application_name = 'catalog' AND datname = current_database()",
    )
    return [dict(r) for r in rows]


def open_server_tempfiles(pid: int, directory: Path) -> list[str]:
    """The server's open, already unlinked files in ``directory``: its spool files."""
    fd_dir = Path(f"/proc/{pid}/fd")
    found = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith(str(directory)) and target.endswith(" (deleted)"):
                    found.append(target)
    return found


def leftover(entry: Path) -> str:
    """What a file left in the spool directory is, for the assertion's message."""
    info = entry.lstat()
    head = entry.read_bytes()[:32] if entry.is_file() else b""
    kind = "dir" if entry.is_dir() else "file"
    return f"{entry.name}: {kind}, {info.st_size} bytes, mode {oct(info.st_mode)}, starts {head!r}"


def test_sigkill_mid_blob_upload_and_mid_resource_write_leaves_nothing_partial(
    postgres: Postgres, database: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    env = serve_env(postgres, database, tmp_path / "home", TMPDIR=str(spool))
    with catalog_serve(env) as (served, http):
        seed(http)
    # seed() ran in a first process; the faults each get a process of their own.
    before = counts(postgres, database)

    # 1. A large blob streamed slowly: killed once the server is spooling it to disk (> 1 MiB in).
    with catalog_serve(env) as (served, http):
        release = threading.Event()
        upload_error: list[BaseException] = []

        def body() -> Iterator[bytes]:
            for _ in range(8):
                yield os.urandom(256 * 1024)  # 2 MiB: past the 1 MiB in-memory spool
            release.wait(60)  # then stall, mid-stream
            yield b"never sent"

        def upload() -> None:
            try:
                http.post(
                    f"{API}/tenants/acme/blobs",
                    content=body(),
                    headers={**ADMIN, "Content-Type": "application/octet-stream"},
                )
            except BaseException as exc:
                upload_error.append(exc)

        uploader = threading.Thread(target=upload, daemon=True)
        uploader.start()
        spooling = until(
            lambda: open_server_tempfiles(served.process.pid, spool), 30, "the server spooling the upload"
        )
        served.process.send_signal(signal.SIGKILL)
        assert served.process.wait(timeout=30) == -signal.SIGKILL
        release.set()
        uploader.join(timeout=30)
        assert upload_error, "the upload cannot have succeeded: its server was killed mid-stream"
    assert counts(postgres, database) == before
    # The spool was an unnamed temporary file: nothing left behind.
    assert [leftover(entry) for entry in spool.iterdir()] == [], spooling

    # 2. A resource write with an inline blob, killed while its transaction is open: the blob is
    # written, the one statement writing the resource, its version and its audit row waits on a lock
    # we hold on audit_log.
    blob = os.urandom(64 * 1024)
    write = {
        "uri": "file:///killed.bin",
        "name": "killed.bin",
        "mimeType": "application/octet-stream",
        "blob": base64.b64encode(blob).decode(),
    }

    async def kill_mid_write() -> None:
        lock = await asyncpg.connect(postgres.dsn(database))
        try:
            async with lock.transaction():
                await lock.execute("LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE")
                with catalog_serve(env) as (served, http):
                    writer = threading.Thread(
                        target=lambda: _swallow(
                            lambda: http.post(f"{API}/tenants/acme/resources", json=write, headers=ADMIN)
                        ),
                        daemon=True,
                    )
                    writer.start()

                    def waiting_on_audit() -> bool:
                        # By the lock, not the statement's text: pg_stat_activity cuts a query at
                        # track_activity_query_size, before the writer's audit_log part.
                        rows = postgres.sql(
                            database,
                            "SELECT count(*) AS waiting FROM pg_locks"
                            " WHERE relation = 'audit_log'::regclass AND NOT granted",
                        )
                        return rows[0]["waiting"] > 0

                    await asyncio.to_thread(until, waiting_on_audit, 30, "the write to reach its audit row")
                    # The transaction has written the blob row by now (uncommitted); its one write
                    # statement waits on audit_log.
                    served.process.send_signal(signal.SIGKILL)
                    assert served.process.wait(timeout=30) == -signal.SIGKILL
                    writer.join(timeout=30)
        finally:
            await lock.close()  # releases the lock: the orphaned backend finds its client gone

    asyncio.run(kill_mid_write())
    until(lambda: not catalog_backends(postgres, database), 30, "the killed process's sessions to end")
    assert counts(postgres, database) == before
    sha = hashlib.sha256(blob).hexdigest()
    assert postgres.sql(database, "SELECT count(*) AS n FROM blobs WHERE sha256 = $1", sha)[0]["n"] == 0

    # 3. Restarted: consistent, and the same writes go through in full.
    with catalog_serve(env) as (served, http):
        assert http.get("/readyz").status_code == 200
        listed = http.get(f"{API}/tenants/acme/resources", headers=ADMIN).json()["items"]
        assert [item["uri"] for item in listed] == ["test://doc"]
        assert http.get(f"{API}/tenants/acme/blobs/{sha}", headers=ADMIN).status_code == 404
        created = http.post(f"{API}/tenants/acme/resources", json=write, headers=ADMIN)
        assert created.status_code == 201, created.text
        versions = http.get(f"{API}/tenants/acme/resources/{created.json()['id']}/versions", headers=ADMIN)
        assert len(versions.json()["items"]) == 1
    after = counts(postgres, database)
    assert after["resources"] == before["resources"] + 1
    assert after["versions"] == before["versions"] + 1
    assert after["blobs"] == before["blobs"] + 1
    assert after["audit"] == before["audit"] + 1


def _swallow(call: Callable[[], Any]) -> None:
    with contextlib.suppress(httpx.HTTPError):
        call()


# -- (c) statement timeouts ------------------------------------------------------------------------


async def test_statement_timeout_is_applied_to_the_apps_connections(settings: Settings) -> None:
    app = create_app(settings.model_copy(update={"statement_timeout_ms": 300}))
    async with running(app):
        engine = app.state.catalog.engine
        async with engine.connect() as conn:
            assert (await conn.execute(text("SHOW statement_timeout"))).scalar() == "300ms"
        started = time.monotonic()
        with pytest.raises(Exception) as caught:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT pg_sleep(10)"))
        assert time.monotonic() - started < 5
        assert "statement timeout" in str(caught.value)
        assert database_unavailable(caught.value)  # so the surfaces answer 503 / -32603


def test_a_query_stuck_on_a_lock_is_cancelled_while_the_process_answers_others(
    postgres: Postgres, database: str, tmp_path: Path
) -> None:
    env = serve_env(
        postgres, database, tmp_path / "home", CATALOG_STATEMENT_TIMEOUT_MS=str(STATEMENT_TIMEOUT_MS)
    )
    with catalog_serve(env) as (served, http):
        token = seed(http)

        async def scenario() -> None:
            lock = await asyncpg.connect(postgres.dsn(database))
            try:
                async with lock.transaction():
                    await lock.execute("LOCK TABLE resources IN ACCESS EXCLUSIVE MODE")
                    async with httpx.AsyncClient(base_url=served.base_url, timeout=REQUEST_BOUND_S) as c:
                        # More stuck requests than the pool has connections (10 + 20 overflow).
                        stuck = [
                            asyncio.create_task(timed(c.get(f"{API}/tenants/acme/resources", headers=ADMIN)))
                            for _ in range(36)
                        ]
                        stuck_mcp = asyncio.create_task(timed(asyncio.to_thread(mcp_read, http, token)))
                        # Meanwhile (the lock still held) the process answers what does not need it.
                        others = [
                            await timed(c.get("/healthz")),
                            await timed(c.get(f"{API}/tenants", headers=ADMIN)),
                        ]
                        for response, _elapsed in others:
                            assert response.status_code == 200, response.text
                        assert "acme" in others[1][0].text
                        for response, elapsed in await asyncio.gather(*stuck):
                            assert response.status_code == 503, response.text
                            assert response.json()["title"] == "Service unavailable"
                            assert elapsed < REQUEST_BOUND_S
                        response, elapsed = await stuck_mcp
                        assert response.json()["error"]["code"] == -32603, response.text
            finally:
                await lock.close()

        asyncio.run(scenario())
        # The lock gone, the same process serves the same requests normally.
        assert http.get(f"{API}/tenants/acme/resources", headers=ADMIN).status_code == 200
        assert mcp_read(http, token).json()["result"]["contents"][0]["text"] == "hello"
        assert http.get("/readyz").status_code == 200


async def timed(awaitable: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await awaitable
    return response, time.monotonic() - started
