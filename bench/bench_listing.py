"""Listing at scale: keyset pages at depth vs the first page (and vs OFFSET), sparse visibility.

The catalogue: N resources in one tenant (``file:///repo/dNNNN/fNNNNNNN.txt``, 400 per directory),
loaded with COPY. Measured through the core's one listing path (``resources.list_page``), which
every surface uses; the MCP and admin layers add a constant per page on top.

- depth: the page at a cursor d% of the way through, for d in 0..90, keyset and OFFSET.
- sparse: a principal who sees 1% of the tenant through 20 prefix grants and 5 tag grants, paging
  through what it sees, against the admin principal paging at the same depth.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
from typing import Any

import asyncpg
from sqlalchemy import select

from bench.harness import (
    Database,
    bench_database,
    interleaved,
    paired_ratio,
    seed_resources,
    summary,
    write_result,
)
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import LISTING_COLUMNS, cursor_after, list_page
from catalog.core.visibility import load_visibility
from catalog.db.engine import TenantScope, create_engine, probe_app_role, transaction
from catalog.db.models import resources
from catalog.settings import Settings

PER_DIRECTORY = 400
PAGE = 100
SPARSE_TAGS = [f"t{k}" for k in range(5)]


def resource_uri(i: int) -> str:
    return f"file:///repo/d{i // PER_DIRECTORY:05d}/f{i:07d}.txt"


def resource_tags(i: int) -> list[str]:
    residue = i % 2500
    return [f"t{(residue - 7) // 500}"] if residue in (7, 507, 1007, 1507, 2007) else []


def sparse_prefixes(directories: int) -> list[str]:
    """20 prefix grants that, with the tags' 0.2%, show 1% of ``directories`` directories: each a
    directory at 1,000,000 resources, ten at 10,000,000 (``file:///repo/d0012`` is d00120-d00129)."""
    wanted = max(20, directories * 8 // 1000)  # 0.8% of the directories
    span = 10 ** max(0, round(math.log10(wanted / 20)))
    step = max(span, directories // 20 // span * span)
    digits = len(str(span)) - 1
    return [
        f"file:///repo/d{d:05d}/" if span == 1 else f"file:///repo/d{d:05d}"[:-digits]
        for d in range(0, directories, step)
    ][:20]


async def seed_grants(database: Database, tenant_id: int, directories: int) -> list[str]:
    prefixes = sparse_prefixes(directories)
    conn = await asyncpg.connect(database.dsn)
    try:
        for prefix in prefixes:
            await conn.execute(
                "INSERT INTO grants (tenant_id, scope, uri_prefix) VALUES ($1, 'sparse', $2)",
                tenant_id,
                prefix,
            )
        for tag in SPARSE_TAGS:
            await conn.execute(
                "INSERT INTO grants (tenant_id, scope, tag) VALUES ($1, 'sparse', $2)", tenant_id, tag
            )
    finally:
        await conn.close()
    return prefixes


async def seed_catalogue(database: Database, count: int) -> int:
    """``count`` resources in tenant ``bench`` (COPY) and the sparse grants; returns the tenant id."""
    tenant_id = await seed_resources(database, "bench", count, uri=resource_uri, tags=resource_tags)
    directories = (count + PER_DIRECTORY - 1) // PER_DIRECTORY
    await seed_grants(database, tenant_id, directories)
    return tenant_id


SPARSE = Principal(kind="token", tenant_id=0, tenant_slug="bench", scopes=frozenset({"sparse"}), token_id=1)


async def run_on(
    database: Database, tenant_id: int, count: int, runs: int, page: int = PAGE
) -> dict[str, Any]:
    """The core-level measurements on a catalogue seeded by :func:`seed_catalogue`, ``page`` rows a page."""
    settings = Settings(
        database_url=database.url, secret_key="bench-secret-key-0123456789", admin_token="cat_b"
    )
    url = settings.async_database_url()
    engine = create_engine(url, app_role=await probe_app_role(url))
    catalog = Catalog(engine=engine, settings=settings)
    admin = Principal.platform_admin()
    sparse = dataclasses.replace(SPARSE, tenant_id=tenant_id)
    try:
        return await _measure(catalog, tenant_id, count, admin, sparse, runs, page)
    finally:
        await engine.dispose()


async def run(count: int, runs: int) -> dict[str, Any]:
    async with bench_database() as database:
        tenant_id = await seed_catalogue(database, count)
        return await run_on(database, tenant_id, count, runs)


async def _measure(
    catalog: Catalog,
    tenant_id: int,
    count: int,
    admin: Principal,
    sparse: Principal,
    runs: int,
    page: int = PAGE,
) -> dict[str, Any]:
    scope = TenantScope.tenant(tenant_id)

    async def keyset_page(principal: Principal, after: str | None) -> int:
        async with transaction(catalog.engine, scope) as conn:
            visibility = await load_visibility(conn, principal, tenant_id)
            cursor = cursor_after(catalog, visibility, after, listing="bench") if after else None
            items, _ = await list_page(catalog, conn, visibility, listing="bench", cursor=cursor, limit=page)
            return len(items)

    async def offset_page(offset: int) -> int:
        async with transaction(catalog.engine, scope) as conn:
            rows = (
                await conn.execute(
                    select(*LISTING_COLUMNS)
                    .where(resources.c.tenant_id == tenant_id)
                    .order_by(resources.c.uri)
                    .offset(offset)
                    .limit(page + 1)
                )
            ).all()
            return len(rows)

    depths = [0, 10, 25, 50, 75, 90]
    cases = []
    for depth in depths:
        index = count * depth // 100
        after = resource_uri(index - 1) if index else None
        cases.append((f"keyset@{depth}", lambda after=after: keyset_page(admin, after)))
        cases.append((f"offset@{depth}", lambda index=index: offset_page(index)))
    timings = await interleaved(runs, *cases)
    depth_curve = {
        "depth_percent": depths,
        "keyset_median_ms": [summary(timings[f"keyset@{d}"])["median_ms"] for d in depths],
        "offset_median_ms": [summary(timings[f"offset@{d}"])["median_ms"] for d in depths],
        "keyset_90_vs_first_ratio": paired_ratio(timings["keyset@90"], timings["keyset@0"]),
        "offset_90_vs_first_ratio": paired_ratio(timings["offset@90"], timings["offset@0"]),
    }

    # Sparse: where the sparse principal is 50% through its own walk, and the admin at the same URI.
    async with transaction(catalog.engine, scope) as conn:
        visibility = await load_visibility(conn, sparse, tenant_id)
        visible = (
            (
                await conn.execute(
                    select(resources.c.uri)
                    .where(visibility.resources_clause(resources))
                    .order_by(resources.c.uri)
                )
            )
            .scalars()
            .all()
        )
    middle = visible[len(visible) // 2]
    sparse_timings = await interleaved(
        runs,
        ("sparse@first", lambda: keyset_page(sparse, None)),
        ("admin@first", lambda: keyset_page(admin, None)),
        ("sparse@middle", lambda: keyset_page(sparse, middle)),
        ("admin@middle", lambda: keyset_page(admin, middle)),
    )
    sparse_result = {
        "visible": len(visible),
        "visible_fraction": len(visible) / count,
        "first_page_ratio_sparse_vs_admin": paired_ratio(
            sparse_timings["sparse@first"], sparse_timings["admin@first"]
        ),
        "middle_page_ratio_sparse_vs_admin": paired_ratio(
            sparse_timings["sparse@middle"], sparse_timings["admin@middle"]
        ),
        **{name: summary(samples) for name, samples in sparse_timings.items()},
    }
    return {"resources": count, "page": page, "runs": runs, "depth": depth_curve, "sparse": sparse_result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    result = asyncio.run(run(args.resources, args.runs))
    path = write_result("listing", result)
    depth = result["depth"]
    print(f"{args.resources} resources; page {PAGE}; {args.runs} interleaved runs -> {path}")
    for d, k, o in zip(
        depth["depth_percent"], depth["keyset_median_ms"], depth["offset_median_ms"], strict=True
    ):
        print(f"  depth {d:3d}%  keyset {k:8.2f} ms   offset {o:8.2f} ms")
    print(f"  keyset page at 90% / first page: {depth['keyset_90_vs_first_ratio']:.2f}x (goal <= 1.3x)")
    print(f"  offset page at 90% / first page: {depth['offset_90_vs_first_ratio']:.2f}x")
    sparse = result["sparse"]
    print(
        f"  sparse principal ({sparse['visible']} visible, {100 * sparse['visible_fraction']:.2f}%) vs admin:"
        f" first page {sparse['first_page_ratio_sparse_vs_admin']:.2f}x,"
        f" middle {sparse['middle_page_ratio_sparse_vs_admin']:.2f}x (goal <= 2x)"
    )


if __name__ == "__main__":
    main()
