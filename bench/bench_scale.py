"""A million resources: deep pages, sparse visibility and completion, at the core and over HTTP.

One catalogue, COPY-loaded (``bench.bench_listing.seed_catalogue``: N resources in tenant ``bench``,
``file:///repo/dNNNNN/fNNNNNNN.txt``, 400 per directory; 20 prefix grants and 5 tag grants to scope
``sparse`` that together show 1%), measured twice:

- core: ``bench.bench_listing`` (``list_page`` keyset vs an OFFSET query, sparse vs admin);
- HTTP: catalog's app served by uvicorn in its own process, 2026-07-28 POSTs to /mcp with real
  bearer tokens (a tenant admin token, and a token holding scope ``sparse``), one request at a
  time, the cases interleaved:
  - depth: ``resources/list`` at a cursor d% of the way through (the cursor is minted with the
    server's key for the caller, as the server's own ``nextCursor`` would be), and the same page by
    OFFSET from a bare route of the same app (``bench.servers``) answering the same JSON;
  - sparse: the sparse token's first page and a page in the middle of what it sees, against the
    admin token's page at the same place;
  - completion: ``completion/complete`` of template ``file:///repo/{dir}/{file}`` (argument ``dir``
    with partial ``d0``, ``d012`` and nothing; argument ``file`` with ``dir`` known), against the
    admin token's first ``resources/list`` page.

    python -m bench.bench_scale [--resources 1000000] [--runs 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from typing import Any

from bench import bench_listing
from bench.bench_listing import PAGE, resource_uri
from bench.harness import (
    bench_database,
    core_catalog,
    interleaved,
    paired_ratio,
    server_env,
    summary,
    tenant_token,
    uvicorn_process,
    write_result,
)
from bench.http import Connection, get_request, mcp_request

DEPTHS = [0, 10, 25, 50, 75, 90]
TEMPLATE = "file:///repo/{dir}/{file}"


async def run(count: int, runs: int) -> dict[str, Any]:
    async with bench_database() as database:
        started = time.perf_counter()
        tenant_id = await bench_listing.seed_catalogue(database, count)
        seeded = time.perf_counter() - started
        core = await bench_listing.run_on(database, tenant_id, count, runs)
        async with core_catalog(database) as catalog:
            admin = await tenant_token(catalog, "bench", admin=True)
            sparse = await tenant_token(catalog, "bench", scopes=["sparse"])
            await _template(catalog)
            cursors = await _cursors(catalog, admin, sparse, count)
        with uvicorn_process(
            "bench.servers:catalog_app", server_env(database.url, tempfile.mkdtemp(prefix="catalog-bench-"))
        ) as server:
            http = await _measure_http(server.port, tenant_id, count, runs, admin, sparse, cursors)
    return {
        "resources": count,
        "page": PAGE,
        "runs": runs,
        "seed_seconds": seeded,
        "core": core,
        "http": http,
    }


async def _template(catalog: Any) -> None:
    from catalog.core.principal import Principal
    from catalog.core.schemas import TemplateIn
    from catalog.core.templates import create_template
    from catalog.core.tenants import get_tenant

    body = TemplateIn.model_validate(
        {"uriTemplate": TEMPLATE, "name": "repository file", "mimeType": "text/plain"}
    )
    await create_template(catalog, Principal.system("bench"), await get_tenant(catalog, "bench"), body)


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
    port: int,
    tenant_id: int,
    count: int,
    runs: int,
    admin: str,
    sparse: str,
    cursors: dict[str, str | None],
) -> dict[str, Any]:
    host = "127.0.0.1"
    conn = await Connection.open(host, port)

    def call(request: bytes, expect: bytes):
        async def send() -> None:
            status, body = await conn.send(request)
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
        for depth in DEPTHS:
            offset = count * depth // 100
            cases.append((f"keyset@{depth}", page(admin, cursors[f"depth{depth}"])))
            bare = get_request(host, port, f"/bench/offset?tenant={tenant_id}&offset={offset}&limit={PAGE}")
            cases.append((f"offset@{depth}", call(bare, b'"nextCursor"')))
        timings = await interleaved(runs, *cases)
        depth_curve = {
            "depth_percent": DEPTHS,
            "keyset_median_ms": [summary(timings[f"keyset@{d}"])["median_ms"] for d in DEPTHS],
            "offset_median_ms": [summary(timings[f"offset@{d}"])["median_ms"] for d in DEPTHS],
            "keyset_90_vs_first_ratio": paired_ratio(timings["keyset@90"], timings["keyset@0"]),
            "offset_90_vs_first_ratio": paired_ratio(timings["offset@90"], timings["offset@0"]),
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

        completions = {
            "dir=d0": completion("dir", "d0"),
            "dir=d012": completion("dir", "d012"),
            "dir=(empty)": completion("dir", ""),
            "file=f0000 (dir known)": completion("file", "f0000", {"dir": "d00000"}),
        }
        completion_timings = await interleaved(
            runs,
            ("first list page", page(admin, None)),
            *((name, complete(params)) for name, params in completions.items()),
        )
        first = completion_timings["first list page"]
        answers = {}
        for name, params in completions.items():
            _, body = await conn.send(mcp_request(host, port, "completion/complete", params, token=admin))
            answer = json.loads(body)["result"]["completion"]
            answers[name] = {
                "values": len(answer["values"]),
                "first": answer["values"][:3],
                "total": answer.get("total"),
                "hasMore": answer.get("hasMore"),
            }
        completion_result = {
            "template": TEMPLATE,
            "ratios_vs_first_page": {
                name: paired_ratio(completion_timings[name], first) for name in completions
            },
            "answers": answers,
            **{name: summary(samples) for name, samples in completion_timings.items()},
        }
        completion_result["worst_ratio"] = max(completion_result["ratios_vs_first_page"].values())
    finally:
        await conn.close()
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
        sparse = result[level]["sparse"]
        print(
            f"  [{level}] sparse ({100 * sparse['visible_fraction']:.2f}% visible) vs admin: first"
            f" {sparse['first_page_ratio_sparse_vs_admin']:.2f}x, middle"
            f" {sparse['middle_page_ratio_sparse_vs_admin']:.2f}x (goal <= 2x)"
        )
    completion = result["http"]["completion"]
    for name, ratio in completion["ratios_vs_first_page"].items():
        print(f"  [http] completion {name}: {completion[name]['median_ms']:.1f} ms, {ratio:.2f}x first page")
    print(f"  [http] completion worst: {completion['worst_ratio']:.2f}x (goal <= 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--resources", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    result = asyncio.run(run(args.resources, args.runs))
    path = write_result("scale", result)
    print(f"scale: {args.resources} resources, {args.runs} interleaved runs -> {path}")
    report(result)


if __name__ == "__main__":
    main()
