"""Shared pieces of the benchmarks: a database to run on, bulk seeding with COPY, the servers
(``catalog serve`` as a user starts it, and the baselines, each a process of its own), timing helpers.

Every figure a benchmark reports is paired with a baseline measured in the same run, interleaved,
so the ratio holds on a noisy machine even when absolute times drift.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
from sqlalchemy.engine import make_url

from bench import provenance
from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres

RESULTS = Path(__file__).parent / "results"
SECRET = "bench-secret-key-0123456789abcdef"
ADMIN_TOKEN = "cat_bench-platform-admin-token"


@dataclass
class Database:
    url: str  # SQLAlchemy URL (asyncpg driver)

    @property
    def dsn(self) -> str:
        return make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)


@contextlib.asynccontextmanager
async def bench_database() -> AsyncIterator[Database]:
    """A fresh, migrated database: on CATALOG_BENCH_DATABASE_URL's server, else an embedded one."""
    configured = os.environ.get("CATALOG_BENCH_DATABASE_URL")
    embedded: EmbeddedPostgres | None = None
    if configured:
        server = make_url(configured).set(drivername="postgresql+asyncpg")
    else:
        embedded = EmbeddedPostgres(
            Path(tempfile.mkdtemp(prefix="catalog-bench-pg-")),
            extra_settings={"shared_buffers": "512MB", "max_wal_size": "4GB", "synchronous_commit": "off"},
        )
        server = make_url(embedded.start()).set(database="postgres")
    name = f"catalog_bench_{uuid.uuid4().hex[:8]}"
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(admin_dsn)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    url = server.set(database=name).render_as_string(hide_password=False)
    await asyncio.to_thread(migrate.upgrade, url)
    try:
        yield Database(url)
    finally:
        conn = await asyncpg.connect(admin_dsn)
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()
        if embedded is not None:
            embedded.release()


async def seed_resources(
    database: Database,
    tenant_slug: str,
    count: int,
    *,
    uri: Callable[[int], str],
    tags: Callable[[int], list[str]],
    text: Callable[[int], str | None] | None = None,
) -> int:
    """COPY ``count`` small text resources into a new tenant; returns the tenant id.

    Triggers are skipped (session_replication_role = replica) so seeding measures nothing but the
    load; the rows are the same as the core would write.
    """
    conn = await asyncpg.connect(database.dsn)
    try:
        tenant_id = await conn.fetchval(
            "INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id", tenant_slug
        )
        await conn.execute("SET session_replication_role = replica")
        batch = 50_000
        for start in range(0, count, batch):
            rows = []
            for i in range(start, min(start + batch, count)):
                body = (text(i) if text else None) or f"content {i:05d}"
                rows.append(
                    (tenant_id, uri(i), f"resource {i}", "text/plain", len(body.encode()), tags(i), body)
                )
            await conn.copy_records_to_table(
                "resources",
                records=rows,
                columns=["tenant_id", "uri", "name", "mime_type", "size", "tags", "text"],
            )
        await conn.execute("RESET session_replication_role")
        # What the skipped tag trigger would have written.
        await conn.execute(
            "INSERT INTO resource_tags (tenant_id, tag, uri, resource_id)"
            " SELECT tenant_id, unnest(tags), uri, id FROM resources WHERE tenant_id = $1 AND tags <> '{}'",
            tenant_id,
        )
        await conn.execute("ANALYZE resources")
        await conn.execute("ANALYZE resource_tags")
    finally:
        await conn.close()
    return tenant_id


PLAIN_TABLE = "bench_plain"


async def plain_copy(database: Database, tenant_id: int, table: str = PLAIN_TABLE) -> int:
    """A plain copy of one tenant's resources for the floor baselines: the same rows (uri, name, mime
    type, size, text) in a table with a "C"-collated primary key on the URI (the index a keyset page
    and a read by URI need) and nothing else: no tenant column, no triggers, no row-level security.
    Returns the number of rows."""
    conn = await asyncpg.connect(database.dsn)
    try:
        await conn.execute(
            f'CREATE TABLE {table} (uri text COLLATE "C" PRIMARY KEY, name text NOT NULL,'
            " mime_type text, size bigint, text text)"
        )
        status = await conn.execute(
            f"INSERT INTO {table} SELECT uri, name, mime_type, size, text FROM resources"
            " WHERE tenant_id = $1 ORDER BY uri",
            tenant_id,
        )
        await conn.execute(f"ANALYZE {table}")
        return int(status.split()[-1])
    finally:
        await conn.close()


def admin_api_token(server: ServerProcess, slug: str, **body: Any) -> str:
    """A bearer token of tenant ``slug``, created through the running server's admin API with the
    platform admin token (the public contract, so the benchmarks need none of the core's internals)."""
    response = httpx.post(
        f"{server.base_url}/admin/v1/tenants/{slug}/tokens",
        json={"name": "bench", **body},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    )
    response.raise_for_status()
    return response.json()["token"]


async def interleaved(
    runs: int, *cases: tuple[str, Callable[[], Awaitable[Any]]], warmup: int = 3
) -> dict[str, list[float]]:
    """Time each case ``runs`` times, A B C A B C ..., after a warm-up; seconds per call."""
    for _ in range(warmup):
        for _, call in cases:
            await call()
    timings: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(runs):
        for name, call in cases:
            started = time.perf_counter()
            await call()
            timings[name].append(time.perf_counter() - started)
    return timings


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": p99 * 1000,
        "min_ms": ordered[0] * 1000,
        "n": len(ordered),
    }


def paired_ratio(a: list[float], b: list[float]) -> float:
    """Median of the per-pair ratios a/b (pairs were measured back to back)."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def write_result(name: str, payload: dict[str, Any], *, section: str | None = None) -> Path:
    """``bench/results/NAME.json`` (or its ``section``), stamped with where it came from
    (:mod:`bench.provenance`): the one way a benchmark writes its result."""
    return provenance.write(RESULTS, name, payload, section=section)


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def catalog_env(**overrides: str) -> dict[str, str]:
    """The environment of a server process: this one's, less any CATALOG_* setting but the MCP
    executor (``CATALOG_MCP_FAST_PATH``, which each result's provenance records), plus ``overrides``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CATALOG_") or k == provenance.FAST_PATH_VARIABLE
    }
    env.update(overrides)
    return env


@dataclass
class ServerProcess:
    """A server the benchmark started: its process, port and log (stdout and stderr, in a file, so a
    chatty server never blocks on a full pipe and a failure can show what it printed)."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    host: str = "127.0.0.1"
    started_at: float = 0.0  # time.perf_counter() just before the process was started
    ready_seconds: float = 0.0  # from then until it was ready

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def printed(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def workers(self) -> list[psutil.Process]:
        """The processes that accept connections: the children holding the listening socket
        (``catalog serve --workers N``), or the process itself (one worker)."""
        top = psutil.Process(self.process.pid)

        def listens(process: psutil.Process) -> bool:
            with contextlib.suppress(psutil.Error):
                return any(
                    c.status == psutil.CONN_LISTEN and c.laddr.port == self.port
                    for c in process.net_connections("tcp")
                )
            return False

        return [child for child in top.children() if listens(child)] or [top]

    def worker_of(self, local_port: int) -> int | None:
        """The pid of the worker holding the server side of our connection from ``local_port``."""
        for worker in self.workers():
            with contextlib.suppress(psutil.Error):
                for c in worker.net_connections("tcp"):
                    if c.laddr.port == self.port and c.raddr and c.raddr.port == local_port:
                        return worker.pid
        return None

    def cpu_seconds(self) -> float:
        """User + system CPU time so far of the process and every live process under it (the
        workers of ``--workers N``; with one worker ``catalog serve`` serves in its own process)."""
        top = psutil.Process(self.process.pid)
        total = 0.0
        for process in [top, *top.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total


def _start(command: list[str], env: dict[str, str], port: int, prefix: str) -> ServerProcess:
    log = Path(tempfile.mkdtemp(prefix=f"catalog-bench-{prefix}-")) / "server.log"
    with log.open("wb") as out:
        started_at = time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    return ServerProcess(process, port, log, started_at=started_at)


@contextlib.contextmanager
def catalog_serve(
    env: dict[str, str], *, workers: int = 1, demo: bool = False, timeout: float = 60
) -> Iterator[ServerProcess]:
    """``python -m catalog serve --port P [--workers N] [--demo]``: the server under test, started
    exactly as a user starts it (its CLI, its defaults, its own socket handling and uvicorn set-up),
    configured only by ``env`` (see :func:`server_env`). Yields once every worker has finished its
    start-up and /readyz answers 200; stopped with SIGTERM, as an operator stops it."""
    port = free_port()
    command = [sys.executable, "-m", "catalog", "serve", "--port", str(port)]
    if workers != 1:  # the default stays the CLI's own
        command += ["--workers", str(workers)]
    if demo:
        command.append("--demo")
    served = _start(command, env, port, "serve")
    try:
        served.ready_seconds = wait_ready(served, "/readyz", timeout, startups=workers)
        yield served
    finally:
        _stop(served)


@contextlib.contextmanager
def uvicorn_process(
    factory: str, env: dict[str, str], *, ready_path: str | None = "/readyz", timeout: float = 60
) -> Iterator[ServerProcess]:
    """A baseline or an in-app variant: ``uvicorn --factory FACTORY`` in a process of its own (one
    worker; uvloop and httptools, as ``catalog serve`` picks them; no access log), waited for until
    ``ready_path`` answers 200 (None: until the port accepts); stopped with SIGTERM."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    served = _start(command, env, port, "uvicorn")
    try:
        served.ready_seconds = wait_ready(served, ready_path, timeout)
        yield served
    finally:
        _stop(served)


def _stop(served: ServerProcess) -> None:
    stop_process(served.process)
    # A failed start has already shown the log's tail in its error.
    shutil.rmtree(served.log.parent, ignore_errors=True)


def wait_ready(served: ServerProcess, path: str | None, timeout: float, *, startups: int = 0) -> float:
    """Poll until ``startups`` workers have logged uvicorn's "Application startup complete" and
    ``path`` answers 200 (None: until the port accepts); returns the seconds since the process started."""
    started = served.started_at
    while time.perf_counter() - started < timeout:
        if served.process.poll() is not None:
            raise RuntimeError(f"server exited ({served.process.returncode}):\n{served.printed()[-4000:]}")
        if startups and served.printed().count("Application startup complete") < startups:
            time.sleep(0.02)
            continue
        if path is None:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((served.host, served.port), timeout=1),
            ):
                return time.perf_counter() - started
        else:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(served.base_url + path, timeout=2).status_code == 200:
                    return time.perf_counter() - started
        time.sleep(0.02)
    raise RuntimeError(f"{served.base_url}{path} not ready within {timeout}s:\n{served.printed()[-4000:]}")


def stop_process(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def server_env(database_url: str, home: str, **extra: str) -> dict[str, str]:
    """What a catalog server process of a benchmark is configured with (as ``catalog serve`` is)."""
    return catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_SECRET_KEY=SECRET,
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_HOME=home,
        **extra,
    )


@contextlib.asynccontextmanager
async def core_catalog(database: Database) -> AsyncIterator[Any]:
    """A ``Catalog`` on the benchmark database with the servers' settings (same signing key)."""
    from catalog.core.catalog import Catalog
    from catalog.db.engine import create_engine, probe_app_role
    from catalog.settings import Settings

    settings = Settings(database_url=database.url, secret_key=SECRET, admin_token=ADMIN_TOKEN)
    url = settings.async_database_url()
    engine = create_engine(url, app_role=await probe_app_role(url))
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()
