"""Read throughput over HTTP at 2026-07-28: one small text resource, concurrent clients on loopback.

Three servers, each a uvicorn process of its own (one worker), loaded in turn by the same closed-loop
generator (``bench.http``: C keep-alive connections, each sending its next request as soon as the
answer is in), the cases interleaved round by round:

- ``catalog``: ``resources/read`` on catalog's /mcp with a tenant admin token (authentication, the
  visibility rule, the row, the SDK's JSON-RPC and era handling, cache hints);
- ``bare``: a bare FastAPI route of the same app (same engine, same RLS transaction binding) that
  runs the same single-row query and answers the same JSON body — no SDK, no authentication;
- ``sdk``: the ``mcp`` SDK's own high-level ``MCPServer`` holding the same resource in memory.

The ratios are per round (catalog/bare, catalog/sdk, requests per second), their median reported.
On 2 cores the server, PostgreSQL and the load generator share the CPU: absolute figures are low
and noisy; the ratios are what to read.

    python -m bench.bench_read [--seconds 5] [--rounds 3] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.harness import (
    bench_database,
    catalog_env,
    core_catalog,
    seed_resources,
    server_env,
    tenant_token,
    uvicorn_process,
    write_result,
)
from bench.http import closed_loop, get_request, mcp_request

URI = "file:///bench/hello.txt"
TEXT = "hello, world"


def _uri(i: int) -> str:
    return URI if i == 0 else f"file:///bench/other/{i:06d}.txt"


async def run(seconds: float, rounds: int, concurrency: int, profile: str | None = None) -> dict[str, Any]:
    async with bench_database() as database:
        tenant_id = await seed_resources(
            database, "read", 10_000, uri=_uri, tags=lambda i: [], text=lambda i: TEXT if i == 0 else None
        )
        async with core_catalog(database) as catalog:
            token = await tenant_token(catalog, "read", admin=True)
        home = tempfile.mkdtemp(prefix="catalog-bench-home-")
        sdk_env = catalog_env(
            BENCH_SDK_RESOURCES=json.dumps(
                [{"uri": URI, "name": "resource 0", "mimeType": "text/plain", "text": TEXT}]
            )
        )
        with (
            uvicorn_process("bench.servers:catalog_app", server_env(database.url, home)) as catalog,
            uvicorn_process("bench.servers:sdk_app", sdk_env, ready_path=None) as sdk,
        ):
            host = "127.0.0.1"
            requests = {
                "catalog": (
                    catalog.port,
                    mcp_request(host, catalog.port, "resources/read", {"uri": URI}, token=token),
                ),
                "bare": (
                    catalog.port,
                    get_request(
                        host, catalog.port, f"/bench/read?tenant={tenant_id}&uri={quote(URI, safe='')}"
                    ),
                ),
                "sdk": (sdk.port, mcp_request(host, sdk.port, "resources/read", {"uri": URI})),
            }
            bodies = await _first_bodies(host, requests)
            samples: dict[str, list[dict[str, float]]] = {name: [] for name in requests}
            for _ in range(rounds):
                for name, (port, request) in requests.items():
                    pid = {"catalog": catalog, "bare": catalog, "sdk": sdk}[name].process.pid
                    spy = py_spy(pid, seconds, f"{profile}/{name}.txt") if profile else None
                    cpu_before = process_cpu_seconds(pid)
                    result = await closed_loop(
                        host, port, request, concurrency=concurrency, seconds=seconds, check=TEXT.encode()
                    )
                    cpu = process_cpu_seconds(pid) - cpu_before
                    summary = result.summary()
                    summary["server_cpu_ms_per_request"] = cpu * 1000 / max(1, summary["requests"])
                    samples[name].append(summary)
                    if spy is not None:
                        spy.wait()
    rps = {name: [s["rps"] for s in runs] for name, runs in samples.items()}
    cpu = {name: [s["server_cpu_ms_per_request"] for s in runs] for name, runs in samples.items()}
    return {
        "seconds_per_case": seconds,
        "rounds": rounds,
        "concurrency": concurrency,
        "bodies": bodies,
        "same_json_as_bare": bodies["catalog"] == bodies["bare"],
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
        "catalog_vs_bare_ratio": statistics.median(
            c / b for c, b in zip(rps["catalog"], rps["bare"], strict=True)
        ),
        # The server process's own CPU time per request, bare / catalog: steadier than throughput on a
        # shared 2-core machine (PostgreSQL and the load generator take their share of the CPU too).
        "catalog_vs_bare_cpu_ratio": statistics.median(
            b / c for c, b in zip(cpu["catalog"], cpu["bare"], strict=True)
        ),
        "catalog_vs_sdk_ratio": statistics.median(
            c / s for c, s in zip(rps["catalog"], rps["sdk"], strict=True)
        ),
    }


async def _first_bodies(host: str, requests: dict[str, tuple[int, bytes]]) -> dict[str, Any]:
    from bench.http import Connection

    bodies = {}
    for name, (port, request) in requests.items():
        conn = await Connection.open(host, port)
        try:
            status, body = await conn.send(request)
        finally:
            await conn.close()
        if status != 200:
            raise RuntimeError(f"{name}: HTTP {status}: {body[:500]!r}")
        bodies[name] = json.loads(body)
    return bodies


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def py_spy(pid: int, seconds: float, output: str) -> subprocess.Popen[bytes]:
    """Sample ``pid`` for ``seconds`` with py-spy (pip install py-spy): collapsed stacks to ``output``."""
    command = ["py-spy", "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-f", "raw", "-o", output]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report(result: dict[str, Any]) -> None:
    for name, case in result["cases"].items():
        print(
            f"  {name:8s} {case['rps_median']:8.0f} req/s   median {case['latency_median_ms']:6.1f} ms"
            f"   p99 {case['latency_p99_ms']:6.1f} ms   server CPU {case['server_cpu_ms_per_request']:.2f} ms/req"
            f"   errors {case['errors']}"
        )
    print(f"  catalog / bare: {result['catalog_vs_bare_ratio']:.2f}x (goal >= 0.6x)")
    print(f"  server CPU per request, bare / catalog: {result['catalog_vs_bare_cpu_ratio']:.2f}x")
    print(f"  catalog / sdk in-memory: {result['catalog_vs_sdk_ratio']:.2f}x")
    if not result["same_json_as_bare"]:
        print(f"  note: bodies differ: {result['bodies']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--profile", metavar="DIR", help="py-spy each server while it is loaded")
    args = parser.parse_args()
    result = asyncio.run(run(args.seconds, args.rounds, args.concurrency, args.profile))
    path = write_result("read", result)
    print(f"read throughput, {args.concurrency} clients, {args.rounds} rounds of {args.seconds}s -> {path}")
    report(result)


if __name__ == "__main__":
    main()
