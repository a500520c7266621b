"""Search and the URI tree at scale: the admin listing's ``q`` (metadata and text content) and
the tree's folder pages, on N resources of one tenant.

The catalogue: N resources (``file:///repo/dNNNN/fNNNNNNN.txt``, 400 per directory, loaded with
COPY), each text holding a word of its own (``wNNNNNNN``), every tenth also the word ``shared``.
Measured through the core's listing (``resources.list_resources``), which the admin route calls:

- ``q`` that matches one URI (metadata tier, trigram index) and one text (full-text index);
- ``q`` that matches 10% of the texts: the first page, and a page half-way through them;
- the tree: the root, a folder of folders (N/400 of them), a folder of 400 resources.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

from bench.harness import bench_database, interleaved, seed_resources, summary, write_result
from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.resources import ListingFilter, list_resources, tree_page
from catalog.core.tenants import Tenant
from catalog.db.engine import create_engine, probe_app_role
from catalog.settings import Settings

PER_DIRECTORY = 400
PAGE = 100


def resource_uri(i: int) -> str:
    return f"file:///repo/d{i // PER_DIRECTORY:05d}/f{i:07d}.txt"


def resource_text(i: int) -> str:
    return f"record {i} word w{i:07d}" + (" shared" if i % 10 == 0 else "")


async def run(count: int, runs: int) -> dict[str, Any]:
    async with bench_database() as database:
        tenant_id = await seed_resources(
            database, "bench", count, uri=resource_uri, tags=lambda i: [], text=resource_text
        )
        settings = Settings(
            database_url=database.url, secret_key="bench-secret-key-0123456789", admin_token="cat_b"
        )
        url = settings.async_database_url()
        engine = create_engine(url, app_role=await probe_app_role(url))
        catalog = Catalog(engine=engine, settings=settings)
        try:
            tenant = Tenant(id=tenant_id, slug="bench", name="bench", created_at=datetime.now(UTC))
            return await _measure(catalog, tenant, count, runs)
        finally:
            await engine.dispose()


async def _measure(catalog: Catalog, tenant: Tenant, count: int, runs: int) -> dict[str, Any]:
    admin = Principal.platform_admin()
    middle = count // 2

    async def search(q: str, cursor: str | None = None) -> tuple[int, str | None]:
        items, next_cursor = await list_resources(
            catalog, admin, tenant, listing="bench", cursor=cursor, limit=PAGE, filters=ListingFilter(query=q)
        )
        return len(items), next_cursor

    async def tree(prefix: str) -> int:
        entries, _ = await tree_page(catalog, admin, tenant, prefix=prefix, cursor=None, limit=PAGE)
        return len(entries)

    # A cursor half-way through the texts holding "shared" (walked once, not timed).
    cursor: str | None = None
    for _ in range(count // 10 // PAGE // 2):
        _, cursor = await search("shared", cursor)
    found = {
        "uri": (await search(f"f{middle:07d}"))[0],
        "text": (await search(f"w{middle:07d}"))[0],
        "shared": (await search("shared"))[0],
    }
    assert found == {"uri": 1, "text": 1, "shared": PAGE}, found
    timings = await interleaved(
        runs,
        ("q matches one URI", lambda: search(f"f{middle:07d}")),
        ("q matches one text", lambda: search(f"w{middle:07d}")),
        ("q in 10% of texts: first page", lambda: search("shared")),
        ("q in 10% of texts: page at 50%", lambda: search("shared", cursor)),
        ("tree: root", lambda: tree("")),
        ("tree: folder of folders", lambda: tree("file:///repo/")),
        ("tree: folder of 400", lambda: tree(f"file:///repo/d{middle // PER_DIRECTORY:05d}/")),
    )
    return {
        "resources": count,
        "page": PAGE,
        "runs": runs,
        "cases": {name: summary(samples) for name, samples in timings.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    result = asyncio.run(run(args.resources, args.runs))
    path = write_result("search", result)
    print(f"{args.resources} resources; page {PAGE}; {args.runs} interleaved runs -> {path}")
    for name, stats in result["cases"].items():
        print(f"  {name:34s} median {stats['median_ms']:8.2f} ms   p99 {stats['p99_ms']:8.2f} ms")


if __name__ == "__main__":
    main()
