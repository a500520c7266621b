"""Read throughput over HTTP at 2026-07-28: one small text resource, concurrent clients on loopback.

The server under test and each baseline are processes of their own, loaded in turn by the same
closed-loop generator (``bench.http``: C keep-alive connections, each sending its next request as
soon as the answer is in), the cases interleaved round by round:

- ``catalog``: ``python -m catalog serve`` as a user starts it (its CLI, one worker by default, its
  socket handling), ``resources/read`` on /mcp, each client an agent with its own tenant admin token made through
  the admin API. The rate limiter runs on every request, its limit per credential raised
  (``CATALOG_RATE_LIMIT_PER_MINUTE``, :data:`FAIR_USE_PER_MINUTE`) so that no client reaches it:
  at the shipped 6,000 a minute one agent may read 100 times a second, and a closed-loop client on
  a fast machine asks several times that, so the default limit would measure its refusals
  (which were once counted as throughput)
  (authentication against the database, the visibility rule under row-level security, the row,
  the SDK's JSON-RPC and era handling, cache hints, catalog's request log line and metrics);
- ``floor`` (baseline): a bare Starlette app on raw asyncpg (``bench.servers.floor_app``) answering
  the same POST with ``SELECT uri, text FROM <plain copy> WHERE uri = $1``: no SQLAlchemy, no
  authentication, no row-level security, no middleware, no SDK;
- ``sdk`` (baseline): the ``mcp`` SDK's own high-level ``MCPServer`` holding the same resource in
  memory: what the protocol costs with no database at all;
- ``nolimit`` (extra column, the rate limiter's cost): the same ``catalog serve`` with
  ``CATALOG_RATE_LIMIT_PER_MINUTE=0`` (the limiter off); nothing else departs from the defaults;
- ``inapp`` (extra column, explains the gap): a bare FastAPI route inside catalog's own app
  (``bench.servers.catalog_app`` under uvicorn, a separate process): the same engine, the same RLS
  transaction, the same single-row query and byte-for-byte the same JSON-RPC body as catalog, but
  no authentication, no JSON-RPC parsing and no SDK.

Ratios are per round (catalog/floor, catalog/sdk, catalog/inapp, requests per second), their median
reported, with each server's own CPU time per request beside them (steadier than throughput on a
shared machine). On 2 cores the server, PostgreSQL and the load generator share the CPU: absolute
figures are low and noisy; the ratios are what to read.

    python -m bench.bench_read [--seconds 5] [--rounds 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import tempfile
from typing import Any
from urllib.parse import quote

from bench.harness import (
    ServerProcess,
    admin_api_token,
    bench_database,
    catalog_env,
    catalog_serve,
    plain_copy,
    seed_resources,
    server_env,
    uvicorn_process,
    write_result,
)
from bench.http import closed_loop, get_request, mcp_request

URI = "file:///bench/hello.txt"
TEXT = "hello, world"
CASES = ("catalog", "floor", "sdk", "nolimit", "inapp")
# Requests a minute per credential for the ``catalog`` case: the limiter on, no client near it.
FAIR_USE_PER_MINUTE = "6000000"


def _uri(i: int) -> str:
    return URI if i == 0 else f"file:///bench/other/{i:06d}.txt"


async def run(seconds: float, rounds: int, concurrency: int, profile: str | None = None) -> dict[str, Any]:
    async with bench_database() as database:
        tenant_id = await seed_resources(
            database, "read", 10_000, uri=_uri, tags=lambda i: [], text=lambda i: TEXT if i == 0 else None
        )
        await plain_copy(database, tenant_id)
        home = tempfile.mkdtemp(prefix="catalog-bench-home-")
        sdk_env = catalog_env(
            BENCH_SDK_RESOURCES=json.dumps(
                [{"uri": URI, "name": "resource 0", "mimeType": "text/plain", "text": TEXT}]
            )
        )
        with contextlib.ExitStack() as stack:
            servers: dict[str, ServerProcess] = {
                "catalog": stack.enter_context(
                    catalog_serve(
                        server_env(database.url, home, CATALOG_RATE_LIMIT_PER_MINUTE=FAIR_USE_PER_MINUTE)
                    )
                ),
                "nolimit": stack.enter_context(
                    catalog_serve(server_env(database.url, home, CATALOG_RATE_LIMIT_PER_MINUTE="0"))
                ),
                "floor": stack.enter_context(
                    uvicorn_process("bench.servers:floor_app", catalog_env(BENCH_FLOOR_DSN=database.dsn))
                ),
                "sdk": stack.enter_context(
                    uvicorn_process("bench.servers:sdk_app", sdk_env, ready_path=None)
                ),
                "inapp": stack.enter_context(
                    uvicorn_process(
                        "bench.servers:catalog_app",
                        server_env(database.url, home, CATALOG_RATE_LIMIT_PER_MINUTE="0"),
                    )
                ),
            }
            tokens = [admin_api_token(servers["catalog"], "read", admin=True) for _ in range(concurrency)]
            host = "127.0.0.1"

            def agents(name: str) -> list[bytes]:
                port = servers[name].port
                return [mcp_request(host, port, "resources/read", {"uri": URI}, token=t) for t in tokens]

            requests: dict[str, bytes | list[bytes]] = {
                "catalog": agents("catalog"),
                "nolimit": agents("nolimit"),
                "floor": mcp_request(host, servers["floor"].port, "resources/read", {"uri": URI}),
                "sdk": mcp_request(host, servers["sdk"].port, "resources/read", {"uri": URI}),
                "inapp": get_request(
                    host, servers["inapp"].port, f"/bench/read?tenant={tenant_id}&uri={quote(URI, safe='')}"
                ),
            }
            bodies = await _first_bodies(host, servers, requests)
            samples: dict[str, list[dict[str, float]]] = {name: [] for name in CASES}
            for _ in range(rounds):
                for name in CASES:
                    server = servers[name]
                    spy = py_spy(server.process.pid, seconds, f"{profile}/{name}.txt") if profile else None
                    cpu_before = server.cpu_seconds()
                    result = await closed_loop(
                        host,
                        server.port,
                        requests[name],
                        concurrency=concurrency,
                        seconds=seconds,
                        check=TEXT.encode(),
                    )
                    cpu = server.cpu_seconds() - cpu_before
                    summary = result.summary()
                    summary["server_cpu_ms_per_request"] = cpu * 1000 / max(1, summary["requests"])
                    samples[name].append(summary)
                    if spy is not None:
                        spy.wait()
    rps = {name: [s["rps"] for s in runs] for name, runs in samples.items()}
    cpu = {name: [s["server_cpu_ms_per_request"] for s in runs] for name, runs in samples.items()}

    def ratio(values: dict[str, list[float]], baseline: str, *, inverse: bool = False) -> float:
        pairs = zip(values["catalog"], values[baseline], strict=True)
        return statistics.median((b / c) if inverse else (c / b) for c, b in pairs)

    return {
        "seconds_per_case": seconds,
        "rounds": rounds,
        "concurrency": concurrency,
        "server": "python -m catalog serve (1 worker, the CLI's defaults)",
        "bodies": bodies,
        "same_json_as_inapp": bodies["catalog"] == bodies["inapp"],
        "same_contents_as_floor": _contents(bodies["catalog"]) == _contents(bodies["floor"]),
        "cases": {
            name: {
                "rps_median": statistics.median(values),
                "rps_per_round": values,
                "latency_median_ms": statistics.median(s["median_ms"] for s in samples[name]),
                "latency_p99_ms": statistics.median(s["p99_ms"] for s in samples[name]),
                "errors": sum(s["errors"] for s in samples[name]),
                "server_cpu_ms_per_request": statistics.median(cpu[name]),
            }
            for name, values in rps.items()
        },
        # Throughput, catalog / baseline, per round; and the server's own CPU time per request,
        # baseline / catalog: steadier on a shared 2-core machine, where PostgreSQL and the load
        # generator take their share of the CPU too.
        "catalog_vs_floor_ratio": ratio(rps, "floor"),
        "catalog_vs_floor_cpu_ratio": ratio(cpu, "floor", inverse=True),
        "catalog_vs_sdk_ratio": ratio(rps, "sdk"),
        "catalog_vs_sdk_cpu_ratio": ratio(cpu, "sdk", inverse=True),
        "catalog_vs_nolimit_ratio": ratio(rps, "nolimit"),
        "catalog_vs_nolimit_cpu_ratio": ratio(cpu, "nolimit", inverse=True),
        "catalog_vs_inapp_ratio": ratio(rps, "inapp"),
        "catalog_vs_inapp_cpu_ratio": ratio(cpu, "inapp", inverse=True),
    }


def _contents(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["uri"], c["text"]) for c in body["result"]["contents"]]


async def _first_bodies(
    host: str, servers: dict[str, ServerProcess], requests: dict[str, bytes | list[bytes]]
) -> dict[str, Any]:
    from bench.http import Connection

    bodies = {}
    for name, each in requests.items():
        request = each if isinstance(each, bytes) else each[0]
        conn = await Connection.open(host, servers[name].port)
        try:
            status, body = await conn.send(request)
        finally:
            await conn.close()
        if status != 200:
            raise RuntimeError(f"{name}: HTTP {status}: {body[:500]!r}")
        bodies[name] = json.loads(body)
    return bodies


def py_spy(pid: int, seconds: float, output: str) -> subprocess.Popen[bytes]:
    """Sample ``pid`` for ``seconds`` with py-spy (pip install py-spy): collapsed stacks to ``output``."""
    command = [
        "py-spy",
        "record",
        "--subprocesses",
        "-p",
        str(pid),
        "-d",
        str(max(1, int(seconds))),
        "-f",
        "raw",
        "-o",
        output,
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report(result: dict[str, Any]) -> None:
    for name, case in result["cases"].items():
        print(
            f"  {name:8s} {case['rps_median']:8.0f} req/s   median {case['latency_median_ms']:6.1f} ms"
            f"   p99 {case['latency_p99_ms']:6.1f} ms   server CPU {case['server_cpu_ms_per_request']:.2f} ms/req"
            f"   errors {case['errors']}"
        )
    for baseline, goal in (
        ("floor", " (goal >= 0.5x)"),
        ("sdk", " (goal >= 0.5x)"),
        ("nolimit", ""),
        ("inapp", ""),
    ):
        print(
            f"  catalog / {baseline}: {result[f'catalog_vs_{baseline}_ratio']:.2f}x req/s{goal},"
            f" {result[f'catalog_vs_{baseline}_cpu_ratio']:.2f}x by server CPU per request"
        )
    if not result["same_json_as_inapp"]:
        print(f"  note: catalog's and the in-app route's bodies differ: {result['bodies']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--profile", metavar="DIR", help="py-spy each server while it is loaded")
    args = parser.parse_args()
    result = asyncio.run(run(args.seconds, args.rounds, args.concurrency, args.profile))
    path = write_result("read", result)
    print(f"read throughput, {args.concurrency} clients, {args.rounds} rounds of {args.seconds}s -> {path}")
    report(result)


if __name__ == "__main__":
    main()
