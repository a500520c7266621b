"""Keep-alive vs fresh-connection request latency through ``catalog serve``, 1 and 2 workers.

``python -m catalog serve --port P [--workers N]`` is started as a user starts it (its CLI, its
socket handling), and two requests are timed one at a time, each of them two ways in the same run,
interleaved (keep-alive, fresh, fresh, keep-alive, ...):

- ``keep-alive``: the next request on an HTTP/1.1 connection that has already carried requests (one
  such connection held on each worker, taken in turn, so every worker's accepted sockets are
  measured);
- ``fresh`` (the baseline): a new TCP connection for the request (connect, send, read the answer,
  close), which the kernel hands to whichever worker it picks.

Requests: ``GET /healthz``, and ``POST /mcp`` ``resources/read`` of one small text resource as a
2026-07-28 client sends it (``MCP-Protocol-Version: 2026-07-28``, ``Mcp-Method: resources/read``,
``Mcp-Name: <uri>``, the ``_meta`` envelope in params; ``bench.http.mcp_request``) with a tenant
token (the rate limit off: one token sends every request back to back). The ratio reported is keep-alive / fresh (medians, and the median of per-pair ratios). A
healthy server answers a warm keep-alive request at least as fast as a fresh connection (it skips
the handshake), so the ratio is at or below 1; a server that leaves Nagle's algorithm on for its
accepted sockets makes every keep-alive response after the first wait for the client's delayed ACK
(about 40 ms on Linux), which shows as a ratio far above 1 (the stall fixed in dde4bcb).

``--catalog-path DIR`` runs ``catalog serve`` from another checkout (prepended to PYTHONPATH), for
a before/after of a change to the server; ``--label`` records what was run.

    python -m bench.bench_keepalive [--requests 200] [--workers 1,2] [--catalog-path DIR] [--label L]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

import httpx

from bench.harness import (
    ADMIN_TOKEN,
    ServerProcess,
    admin_api_token,
    bench_database,
    catalog_serve,
    paired_ratio,
    server_env,
    summary,
    write_result,
)
from bench.http import Connection, get_request, mcp_request

HOST = "127.0.0.1"
TENANT = "keepalive"
URI = "file:///bench/keepalive.txt"
TEXT = "kept alive"
WARMUP = 5
MAX_CONNECTIONS = 40  # connections tried until every worker holds a keep-alive one


def seed(server: ServerProcess) -> str:
    """A tenant, one text resource and a tenant admin token, through the admin API."""
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(base_url=server.base_url, headers=auth, timeout=30) as client:
        client.post("/admin/v1/tenants", json={"slug": TENANT, "name": TENANT}).raise_for_status()
        client.put(
            f"/admin/v1/tenants/{TENANT}/resources",
            params={"uri": URI},
            json={"name": "keepalive", "mimeType": "text/plain", "text": TEXT},
        ).raise_for_status()
    return admin_api_token(server, TENANT, admin=True)


async def one_per_worker(server: ServerProcess, request: bytes, workers: int) -> list[Connection]:
    """Keep-alive connections, one held by each worker (the kernel decides which worker accepts a
    connection, so connections are opened until every worker has one; the others are closed)."""
    held: dict[int, Connection] = {}
    for _ in range(MAX_CONNECTIONS):
        conn = await Connection.open(HOST, server.port)
        await conn.send(request)  # accepted and served once: the worker now holds it
        pid = server.worker_of(conn.writer.get_extra_info("sockname")[1])
        if pid is not None and pid not in held:
            held[pid] = conn
        else:
            await conn.close()
        if len(held) == workers:
            break
    if len(held) < workers:
        for conn in held.values():
            await conn.close()
        raise RuntimeError(f"only {len(held)} of {workers} workers accepted a connection")
    return list(held.values())


async def fresh(port: int, request: bytes) -> tuple[float, float, int, bytes]:
    """One request on a new connection: (seconds to the whole answer, seconds to connect, status, body)."""
    started = time.perf_counter()
    conn = await Connection.open(HOST, port)
    connected = time.perf_counter()
    try:
        status, body = await conn.send(request)
        return time.perf_counter() - started, connected - started, status, body
    finally:
        await conn.close()


async def measure(server: ServerProcess, workers: int, token: str, count: int) -> list[dict[str, Any]]:
    routes = {
        "GET /healthz": (get_request(HOST, server.port, "/healthz"), b'"ok"'),
        "POST /mcp resources/read": (
            mcp_request(HOST, server.port, "resources/read", {"uri": URI}, token=token),
            TEXT.encode(),
        ),
    }
    rows = []
    for route, (request, expect) in routes.items():
        rows.append(await measure_route(server, workers, route, request, expect, count))
        print_row(rows[-1])
    return rows


async def measure_route(
    server: ServerProcess, workers: int, route: str, request: bytes, expect: bytes, count: int
) -> dict[str, Any]:
    held = await one_per_worker(server, request, workers)
    kept: list[float] = []
    new: list[float] = []
    connects: list[float] = []

    def check(way: str, status: int, body: bytes) -> None:
        if status != 200 or expect not in body:
            raise RuntimeError(f"{route} ({way}): HTTP {status}: {body[:300]!r}")

    async def kept_alive(i: int, record: bool) -> None:
        conn = held[i % len(held)]
        started = time.perf_counter()
        status, body = await conn.send(request)
        elapsed = time.perf_counter() - started
        check("keep-alive", status, body)
        if record:
            kept.append(elapsed)

    async def fresh_connection(record: bool) -> None:
        elapsed, connect, status, body = await fresh(server.port, request)
        check("fresh", status, body)
        if record:
            new.append(elapsed)
            connects.append(connect)

    try:
        for i in range(WARMUP + count):
            record = i >= WARMUP
            # Alternate which goes first, so neither always follows the other.
            if i % 2 == 0:
                await kept_alive(i, record)
                await fresh_connection(record)
            else:
                await fresh_connection(record)
                await kept_alive(i, record)
    finally:
        for conn in held:
            await conn.close()
    return {
        "workers": workers,
        "route": route,
        "keepalive": summary(kept),
        "fresh": summary(new),
        "fresh_connect": summary(connects),
        "keepalive_vs_fresh_ratio": statistics.median(kept) / statistics.median(new),
        "keepalive_vs_fresh_paired_ratio": paired_ratio(kept, new),
        "keepalive_connections": len(held),
    }


def print_row(row: dict[str, Any]) -> None:
    print(
        f"  {row['workers']} worker(s)  {row['route']:26s}"
        f"  keep-alive {row['keepalive']['median_ms']:7.2f} ms"
        f" (p99 {row['keepalive']['p99_ms']:6.1f})   fresh {row['fresh']['median_ms']:7.2f} ms"
        f" (p99 {row['fresh']['p99_ms']:6.1f}; connect {row['fresh_connect']['median_ms']:.2f})"
        f"   keep-alive/fresh {row['keepalive_vs_fresh_ratio']:.2f}x",
        flush=True,
    )


async def run(count: int, workers_list: list[int], catalog_path: str | None) -> dict[str, Any]:
    # The per-credential rate limit is off: one token sends every timed request back to back, and a
    # server that answers faster than the limit's rate would otherwise measure its 429s.
    extra = {"CATALOG_RATE_LIMIT_PER_MINUTE": "0"}
    if catalog_path:
        extra["PYTHONPATH"] = os.pathsep.join(p for p in (catalog_path, os.environ.get("PYTHONPATH")) if p)
        # ``python -m`` puts the working directory first on sys.path (this checkout); not then.
        extra["PYTHONSAFEPATH"] = "1"
    rows: list[dict[str, Any]] = []
    token = ""
    async with bench_database() as database:
        env = server_env(database.url, tempfile.mkdtemp(prefix="catalog-bench-home-"), **extra)
        for workers in workers_list:
            with catalog_serve(env, workers=workers) as server:
                token = token or seed(server)
                rows += await measure(server, workers, token, count)
    return {
        "requests_per_case": count,
        "workers": workers_list,
        "catalog_path": catalog_path,
        "rows": rows,
        "worst_ratio": max(row["keepalive_vs_fresh_ratio"] for row in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--requests", type=int, default=200, help="timed requests per way, route and worker count"
    )
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--catalog-path", help="run catalog serve from this checkout (PYTHONPATH)")
    parser.add_argument("--label", default="", help="recorded with the results (e.g. 'before dde4bcb')")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the results file alone")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    print(f"keep-alive vs fresh connection through catalog serve, {args.requests} requests each way:")
    result = asyncio.run(run(args.requests, workers, args.catalog_path))
    result["label"] = args.label
    print(f"  worst keep-alive/fresh ratio: {result['worst_ratio']:.2f}x")
    if not args.no_write:
        print(f"  -> {write_result('keepalive', result)}")


if __name__ == "__main__":
    main()
