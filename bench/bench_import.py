"""Import: ``catalog import`` of N resources from JSONL against a plain COPY of the same rows.

Each round: the CLI (``python -m catalog import --tenant T FILE --no-progress``, a process of its
own on the benchmark database, as an operator runs it: parse, validate, upsert in batches with
versions, audit and change-feed rows) into a fresh tenant, then a plain COPY of the same rows (uri,
name, mime type, text, size; the table's triggers on) into another fresh tenant. Speed ratio per
round: COPY time / import time (goal: at least 1/3).

    python -m bench.bench_import [--resources 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench.harness import Database, bench_database, catalog_env, write_result

SECRET = "bench-secret-key-0123456789abcdef"


def rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "uri": f"file:///import/d{i // 400:05d}/f{i:07d}.txt",
            "name": f"f{i:07d}.txt",
            "mimeType": "text/plain",
            "text": f"imported content {i:07d}",
        }
        for i in range(count)
    ]


async def _tenant(database: Database, slug: str) -> int:
    conn = await asyncpg.connect(database.dsn)
    try:
        return await conn.fetchval("INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id", slug)
    finally:
        await conn.close()


async def _copy(database: Database, tenant_id: int, items: list[dict[str, Any]]) -> float:
    records = [
        (tenant_id, item["uri"], item["name"], item["mimeType"], item["text"], len(item["text"].encode()))
        for item in items
    ]
    conn = await asyncpg.connect(database.dsn)
    try:
        started = time.perf_counter()
        await conn.copy_records_to_table(
            "resources", records=records, columns=["tenant_id", "uri", "name", "mime_type", "text", "size"]
        )
        return time.perf_counter() - started
    finally:
        await conn.close()


async def _import(database: Database, slug: str, path: Path, home: str) -> float:
    env = catalog_env(CATALOG_DATABASE_URL=database.url, CATALOG_SECRET_KEY=SECRET, CATALOG_HOME=home)
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "catalog", "import", "--tenant", slug, str(path), "--no-progress",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await process.communicate()
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"catalog import failed ({process.returncode}): {err.decode()[-2000:]}")
    return elapsed


async def _count(database: Database, tenant_id: int) -> int:
    conn = await asyncpg.connect(database.dsn)
    try:
        return await conn.fetchval("SELECT count(*) FROM resources WHERE tenant_id = $1", tenant_id)
    finally:
        await conn.close()


async def run(count: int, rounds: int) -> dict[str, Any]:
    items = rows(count)
    folder = Path(tempfile.mkdtemp(prefix="catalog-bench-import-"))
    path = folder / "resources.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    imports: list[float] = []
    copies: list[float] = []
    async with bench_database() as database:
        for r in range(rounds):
            slug = f"import-{r}"
            tenant_id = await _tenant(database, slug)
            imports.append(await _import(database, slug, path, str(folder / "home")))
            assert await _count(database, tenant_id) == count
            copies.append(await _copy(database, await _tenant(database, f"copy-{r}"), items))
    return {
        "resources": count,
        "rounds": rounds,
        "import_seconds": {"median": statistics.median(imports), "all": imports},
        "copy_seconds": {"median": statistics.median(copies), "all": copies},
        "import_rows_per_s": count / statistics.median(imports),
        "copy_rows_per_s": count / statistics.median(copies),
        "import_vs_copy_speed_ratio": statistics.median(c / i for c, i in zip(copies, imports, strict=True)),
    }


def report(result: dict[str, Any]) -> None:
    print(
        f"  catalog import {result['import_seconds']['median']:.1f}s ({result['import_rows_per_s']:.0f} rows/s);"
        f" COPY {result['copy_seconds']['median']:.2f}s ({result['copy_rows_per_s']:.0f} rows/s);"
        f" import speed / COPY speed {result['import_vs_copy_speed_ratio']:.2f} (goal >= 0.33)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    result = asyncio.run(run(args.resources, args.rounds))
    path = write_result("import", result)
    print(f"import of {args.resources} resources, {args.rounds} rounds -> {path}")
    report(result)


if __name__ == "__main__":
    main()
