"""Shared pieces of the benchmarks: a database to run on, bulk seeding with COPY, timing helpers.

Every figure a benchmark reports is paired with a baseline measured in the same run, interleaved,
so the ratio holds on a noisy machine even when absolute times drift.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres

RESULTS = Path(__file__).parent / "results"


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
            rows = [
                (tenant_id, uri(i), f"resource {i}", "text/plain", 12, tags(i), f"content {i:05d}")
                for i in range(start, min(start + batch, count))
            ]
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
