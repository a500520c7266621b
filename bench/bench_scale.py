"""Millions of resources (10,000,000 in the full run): deep pages, sparse visibility and completion.

One catalogue, COPY-loaded (``bench.bench_listing.seed_catalogue``: N resources in tenant ``bench``,
``file:///repo/dNNNNN/fNNNNNNN.txt``, 400 per directory; 20 prefix grants and 5 tag grants to scope
``sparse`` that together show 1%: each grant one directory at 1,000,000, ten at 10,000,000), measured twice:

- core: ``bench.bench_listing`` (``list_page`` keyset vs an OFFSET query, sparse vs admin);
- HTTP: ``python -m catalog serve`` as a user starts it (one worker, the CLI's defaults), 2026-07-28
  POSTs to /mcp with real bearer tokens made through its admin API (a tenant admin token, and a
  token holding scope ``sparse``), one request at a time on a keep-alive connection per server, the
  cases interleaved:
  - depth: ``resources/list`` at a cursor d% of the way through (the cursor is minted with the
    server's key for the caller, as the server's own ``nextCursor`` would be), against
    - the floor (baseline, ``bench.servers.floor_app``, its own process): a bare Starlette route
      on raw asyncpg answering the same POST with the same 100 rows by keyset (``WHERE uri > $1
      ORDER BY uri LIMIT 100`` on a plain copy of the tenant's rows, no triggers, no RLS);
    - OFFSET (extra column, explains why keyset): the same page by OFFSET from a bare route inside
      catalog's app (``bench.servers.catalog_app``, its own uvicorn process) answering the same JSON;
  - sparse: the sparse token's first page and a page in the middle of what it sees, against the
    admin token's page at the same place;
  - completion: ``completion/complete`` of template ``file:///repo/{dir}/{file}`` (argument ``dir``
    with partial ``d0``, ``d012`` and nothing; argument ``file`` with ``dir`` known), against the
    admin token's first ``resources/list`` page.

    python -m bench.bench_scale [--resources 1000000] [--runs 30] [--page-size 100]

``--page-size N`` starts ``catalog serve`` (and the in-app OFFSET route's process) with
``CATALOG_PAGE_SIZE=N``, gives the floor the same ``LIMIT N`` (``BENCH_FLOOR_PAGE``) and the core level
the same page, so every comparison stays page for page; ``--result``/``--section`` write it elsewhere
than ``bench/results/scale.json`` (``--result scale_pagesize --section page1000``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from typing import Any

import httpx

from bench import bench_listing
from bench.bench_listing import PAGE, resource_uri
from bench.harness import (
    ADMIN_TOKEN,
    ServerProcess,
    admin_api_token,
    bench_database,
    catalog_env,
    catalog_serve,
    core_catalog,
    interleaved,
    paired_ratio,
    plain_copy,
    server_env,
    summary,
    uvicorn_process,
    write_result,
)
from bench.http import Connection, get_request, mcp_request

DEPTHS = [0, 10, 25, 50, 75, 90]
TEMPLATE = "file:///repo/{dir}/{file}"
# A completion answer slower than this is far off any goal; it is timed once, not ``runs`` times.
SLOW_COMPLETION_S = 1.0


async def run(count: int, runs: int, page: int = PAGE) -> dict[str, Any]:
    async with bench_database() as database:
        started = time.perf_counter()
        tenant_id = await bench_listing.seed_catalogue(database, count)
        seeded = time.perf_counter() - started
        await plain_copy(database, tenant_id)
        core = await bench_listing.run_on(database, tenant_id, count, runs, page)
        # The CLI's default page unless asked otherwise, so a default run is configured as before.
        sized = {} if page == PAGE else {"CATALOG_PAGE_SIZE": str(page)}
        env = server_env(database.url, tempfile.mkdtemp(prefix="catalog-bench-"), **sized)
        with contextlib.ExitStack() as stack:
            servers = {
                "catalog": stack.enter_context(catalog_serve(env)),
                "floor": stack.enter_context(
                    uvicorn_process(
                        "bench.servers:floor_app",
                        catalog_env(BENCH_FLOOR_DSN=database.dsn, BENCH_FLOOR_PAGE=str(page)),
                    )
                ),
                "inapp": stack.enter_context(uvicorn_process("bench.servers:catalog_app", env)),
            }
            admin = admin_api_token(servers["catalog"], "bench", admin=True)
            sparse = admin_api_token(servers["catalog"], "bench", scopes=["sparse"])
            _template(servers["catalog"])
            async with core_catalog(database) as catalog:
                cursors = await _cursors(catalog, admin, sparse, count)
            http = await _measure_http(servers, tenant_id, count, runs, admin, sparse, cursors, page)
    return {
        "resources": count,
        "page": page,
        "runs": runs,
        "seed_seconds": seeded,
        "server": "python -m catalog serve (1 worker, the CLI's defaults)",
        "core": core,
        "http": http,
    }


def _template(server: ServerProcess) -> None:
    response = httpx.post(
        f"{server.base_url}/admin/v1/tenants/bench/templates",
        json={"uriTemplate": TEMPLATE, "name": "repository file", "mimeType": "text/plain"},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    )
    response.raise_for_status()


async def _cursors(catalog: Any, admin: str, sparse: str, count: int) -> dict[str, str | None]:
    """Cursors as the server would mint them for each token: at each depth (admin), and in the
    middle of the sparse token's walk (for both)."""
    from sqlalchemy import select

    from catalog.auth import authenticate
    from catalog.core.reading import RESOURCE_LISTING
    from catalog.core.resources import cursor_after
    from catalog.core.visibility import load_visibility
    from catalog.db.engine import TenantScope, transaction
    from catalog.db.models import resources

    admin_principal = await authenticate(catalog, f"Bearer {admin}")
    sparse_principal = await authenticate(catalog, f"Bearer {sparse}")
    assert admin_principal is not None and sparse_principal is not None
    tenant_id = admin_principal.tenant_id
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        admin_view = await load_visibility(conn, admin_principal, tenant_id)
        sparse_view = await load_visibility(conn, sparse_principal, tenant_id)
        visible = list(
            (
                await conn.execute(
                    select(resources.c.uri)
                    .where(sparse_view.resources_clause(resources))
                    .order_by(resources.c.uri)
                )
            ).scalars()
        )
    middle = visible[len(visible) // 2]
    out: dict[str, str | None] = {}
    for depth in DEPTHS:
        index = count * depth // 100
        out[f"depth{depth}"] = (
            cursor_after(catalog, admin_view, resource_uri(index - 1), listing=RESOURCE_LISTING)
            if index
            else None
        )
    out["admin_middle"] = cursor_after(catalog, admin_view, middle, listing=RESOURCE_LISTING)
    out["sparse_middle"] = cursor_after(catalog, sparse_view, middle, listing=RESOURCE_LISTING)
    out["visible"] = str(len(visible))
    return out


async def _measure_http(
    servers: dict[str, ServerProcess],
    tenant_id: int,
    count: int,
    runs: int,
    admin: str,
    sparse: str,
    cursors: dict[str, str | None],
    page_size: int = PAGE,
) -> dict[str, Any]:
    host = "127.0.0.1"
    port = servers["catalog"].port
    conns = {name: await Connection.open(host, server.port) for name, server in servers.items()}
    conn = conns["catalog"]

    def call(request: bytes, expect: bytes, on: str = "catalog"):
        async def send() -> None:
            status, body = await conns[on].send(request)
            if status != 200 or expect not in body:
                raise RuntimeError(f"HTTP {status}: {body[:300]!r}")

        return send

    def page(token: str, cursor: str | None):
        params = {"cursor": cursor} if cursor else {}
        return call(mcp_request(host, port, "resources/list", params, token=token), b'"nextCursor"')

    def completion(argument: str, value: str, context: dict[str, str] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {
            "ref": {"type": "ref/resource", "uri": TEMPLATE},
            "argument": {"name": argument, "value": value},
        }
        if context:
            params["context"] = {"arguments": context}
        return params

    def complete(params: dict[str, Any]):
        return call(mcp_request(host, port, "completion/complete", params, token=admin), b'"values"')

    try:
        cases = []
        floor_port, inapp_port = servers["floor"].port, servers["inapp"].port
        # Page for page: catalog's first page and the floor's hold the same number of rows.
        for on, request in (
            ("catalog", mcp_request(host, port, "resources/list", {}, token=admin)),
            ("floor", mcp_request(host, floor_port, "resources/list", {})),
        ):
            _, body = await conns[on].send(request)
            shown = len(json.loads(body)["result"]["resources"])
            if shown != min(page_size, count):
                raise RuntimeError(f"{on}'s first page holds {shown} resources, not {page_size}")
        for depth in DEPTHS:
            offset = count * depth // 100
            cases.append((f"keyset@{depth}", page(admin, cursors[f"depth{depth}"])))
            # The floor's cursor is the last URI before the page, unsigned.
            floor_params = {"cursor": resource_uri(offset - 1)} if offset else {}
            floor = mcp_request(host, floor_port, "resources/list", floor_params)
            cases.append((f"floor@{depth}", call(floor, b'"nextCursor"', on="floor")))
            bare = get_request(
                host, inapp_port, f"/bench/offset?tenant={tenant_id}&offset={offset}&limit={page_size}"
            )
            cases.append((f"offset@{depth}", call(bare, b'"nextCursor"', on="inapp")))
        timings = await interleaved(runs, *cases)
        depth_curve = {
            "depth_percent": DEPTHS,
            "keyset_median_ms": [summary(timings[f"keyset@{d}"])["median_ms"] for d in DEPTHS],
            "floor_median_ms": [summary(timings[f"floor@{d}"])["median_ms"] for d in DEPTHS],
            "offset_median_ms": [summary(timings[f"offset@{d}"])["median_ms"] for d in DEPTHS],
            "keyset_90_vs_first_ratio": paired_ratio(timings["keyset@90"], timings["keyset@0"]),
            "floor_90_vs_first_ratio": paired_ratio(timings["floor@90"], timings["floor@0"]),
            "offset_90_vs_first_ratio": paired_ratio(timings["offset@90"], timings["offset@0"]),
            # Goal 2: catalog's first page against the floor's first page, pair by pair.
            "first_page_vs_floor_ratio": paired_ratio(timings["keyset@0"], timings["floor@0"]),
            **{name: summary(samples) for name, samples in timings.items()},
        }

        sparse_timings = await interleaved(
            runs,
            ("sparse@first", page(sparse, None)),
            ("admin@first", page(admin, None)),
            ("sparse@middle", page(sparse, cursors["sparse_middle"])),
            ("admin@middle", page(admin, cursors["admin_middle"])),
        )
        sparse_result = {
            "visible": int(cursors["visible"] or 0),
            "visible_fraction": int(cursors["visible"] or 0) / count,
            "first_page_ratio_sparse_vs_admin": paired_ratio(
                sparse_timings["sparse@first"], sparse_timings["admin@first"]
            ),
            "middle_page_ratio_sparse_vs_admin": paired_ratio(
                sparse_timings["sparse@middle"], sparse_timings["admin@middle"]
            ),
            **{name: summary(samples) for name, samples in sparse_timings.items()},
        }

        # The last directories' prefix: a completion whose values lie at the end of the tenant's
        # index range (the others start near its beginning), so a cost that grows with the position
        # in the range shows.
        deep = "d" + f"{(count - 1) // bench_listing.PER_DIRECTORY:05d}"[:3]
        completions = {
            "dir=d0": completion("dir", "d0"),
            "dir=d012": completion("dir", "d012"),
            "dir=(empty)": completion("dir", ""),
            f"dir={deep} (end of the range)": completion("dir", deep),
            "file=f0000 (dir known)": completion("file", "f0000", {"dir": "d00000"}),
        }
        # Each asked once first: its answer is recorded, and a case that fails (the server's statement
        # timeout, say) is reported as failed instead of being timed again and again, or ending the run.
        answers: dict[str, dict[str, Any]] = {}
        failed: dict[str, dict[str, Any]] = {}
        once: dict[str, float] = {}  # too slow to time again and again: the one answer's seconds
        for name, params in completions.items():
            started = time.perf_counter()
            _, body = await conn.send(mcp_request(host, port, "completion/complete", params, token=admin))
            elapsed = time.perf_counter() - started
            message = json.loads(body)
            if "result" not in message:
                failed[name] = {"error": message.get("error"), "seconds": elapsed}
                continue
            answer = message["result"]["completion"]
            answers[name] = {
                "values": len(answer["values"]),
                "first": answer["values"][:3],
                "total": answer.get("total"),
                "hasMore": answer.get("hasMore"),
            }
            if elapsed > SLOW_COMPLETION_S:
                once[name] = elapsed
        completion_timings = await interleaved(
            runs,
            ("first list page", page(admin, None)),
            *(
                (name, complete(params))
                for name, params in completions.items()
                if name not in failed and name not in once
            ),
        )
        first = completion_timings["first list page"]
        ratios = {
            name: once[name] / statistics.median(first)
            if name in once
            else paired_ratio(completion_timings[name], first)
            for name in answers
        }
        for name, seconds in once.items():
            completion_timings[name] = [seconds]
        completion_result = {
            "template": TEMPLATE,
            "ratios_vs_first_page": ratios,
            "answers": answers,
            "failed": failed,
            "timed_once": sorted(once),
            # None when a case failed: no ratio stands for it.
            "worst_ratio": None if failed else max(ratios.values()),
            **{name: summary(samples) for name, samples in completion_timings.items()},
        }
    finally:
        for each in conns.values():
            await each.close()
    return {"depth": depth_curve, "sparse": sparse_result, "completion": completion_result}


def report(result: dict[str, Any]) -> None:
    print(f"  {result['resources']} resources seeded (COPY) in {result['seed_seconds']:.0f}s")
    for level in ("core", "http"):
        depth = result[level]["depth"]
        print(f"  [{level}] depth:", end="")
        for d, k, o in zip(
            depth["depth_percent"], depth["keyset_median_ms"], depth["offset_median_ms"], strict=True
        ):
            print(f"  {d}%: {k:.1f}/{o:.1f} ms", end="")
        print(" (keyset/offset)")
        print(
            f"  [{level}] keyset 90%/first {depth['keyset_90_vs_first_ratio']:.2f}x (goal <= 1.3x);"
            f" offset {depth['offset_90_vs_first_ratio']:.1f}x"
        )
        if level == "http":
            print(
                f"  [http] first page vs the floor's (raw asyncpg keyset):"
                f" {depth['first_page_vs_floor_ratio']:.2f}x (goal <= 2x); floor by depth:"
                + "".join(
                    f" {d}%: {f:.1f}"
                    for d, f in zip(depth["depth_percent"], depth["floor_median_ms"], strict=True)
                )
                + " ms"
            )
        sparse = result[level]["sparse"]
        print(
            f"  [{level}] sparse ({100 * sparse['visible_fraction']:.2f}% visible) vs admin: first"
            f" {sparse['first_page_ratio_sparse_vs_admin']:.2f}x, middle"
            f" {sparse['middle_page_ratio_sparse_vs_admin']:.2f}x (goal <= 2x)"
        )
    completion = result["http"]["completion"]
    for name, ratio in completion["ratios_vs_first_page"].items():
        print(f"  [http] completion {name}: {completion[name]['median_ms']:.1f} ms, {ratio:.2f}x first page")
    for name, failure in completion["failed"].items():
        print(f"  [http] completion {name}: FAILED after {failure['seconds']:.1f}s: {failure['error']}")
    worst = completion["worst_ratio"]
    print(f"  [http] completion worst: {'a case failed' if worst is None else f'{worst:.2f}x'} (goal <= 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument(
        "--page-size", type=int, default=PAGE, help="CATALOG_PAGE_SIZE of the server, and the floor's LIMIT"
    )
    parser.add_argument("--result", default="scale", help="bench/results/RESULT.json (default scale)")
    parser.add_argument("--section", default=None, help="write into this section of the result file")
    args = parser.parse_args()
    if not 1 <= args.page_size <= 1000:
        parser.error("--page-size must be 1..1000 (CATALOG_PAGE_SIZE's range)")
    result = asyncio.run(run(args.resources, args.runs, args.page_size))
    path = write_result(args.result, result, section=args.section)
    print(f"scale: {args.resources} resources, page {args.page_size}, {args.runs} interleaved runs -> {path}")
    report(result)


if __name__ == "__main__":
    main()
