"""Shared pieces of the benchmarks: a database to run on, bulk seeding with COPY, timing helpers.

Every figure a benchmark reports is paired with a baseline measured in the same run, interleaved,
so the ratio holds on a noisy machine even when absolute times drift.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
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
from sqlalchemy.engine import make_url

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


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def catalog_env(**overrides: str) -> dict[str, str]:
    """The environment of a server process: this one's, less any CATALOG_* setting, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(overrides)
    return env


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    host: str = "127.0.0.1"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextlib.contextmanager
def uvicorn_process(
    factory: str, env: dict[str, str], *, ready_path: str | None = "/readyz", timeout: float = 60
) -> Iterator[ServerProcess]:
    """``uvicorn --factory FACTORY`` in a process of its own (one worker, uvloop/httptools as catalog
    serve picks them), waited for until ``ready_path`` answers 200; stopped with SIGTERM."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    served = ServerProcess(process, port)
    try:
        wait_ready(served, ready_path, timeout)
        yield served
    finally:
        stop_process(process)


def wait_ready(served: ServerProcess, path: str | None, timeout: float) -> float:
    """Poll ``path`` until 200 (None: until the port accepts); returns the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if served.process.poll() is not None:
            err = served.process.stderr.read().decode(errors="replace") if served.process.stderr else ""
            raise RuntimeError(f"server exited ({served.process.returncode}):\n{err[-4000:]}")
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
    raise RuntimeError(f"{served.base_url}{path} not ready within {timeout}s")


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
    from catalog.core.service import Catalog
    from catalog.db.engine import create_engine, probe_app_role
    from catalog.settings import Settings

    settings = Settings(database_url=database.url, secret_key=SECRET, admin_token=ADMIN_TOKEN)
    url = settings.async_database_url()
    engine = create_engine(url, app_role=await probe_app_role(url))
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


async def tenant_token(catalog: Any, slug: str, **body: Any) -> str:
    """A bearer token of tenant ``slug``, minted through the core (as the admin API would)."""
    from catalog.core.principal import Principal
    from catalog.core.schemas import TokenIn
    from catalog.core.tenants import get_tenant
    from catalog.core.tokens import create_token

    tenant = await get_tenant(catalog, slug)
    created = await create_token(catalog, Principal.system("bench"), tenant, TokenIn.model_validate(body))
    return created.token
