"""Soak: ``python -m catalog serve --workers 2 --demo`` (started as a user starts it, on a fresh
benchmark database) under readers, listers, writers and listen streams at once.

For a bounded time, on loopback only: anonymous readers (``resources/read``) and listers (walking
``resources/list`` pages by ``nextCursor``) of the demo tenant, curators writing through the admin
API (``PUT ?uri=``; every tenth write touches the resource the streams watch), and open
``subscriptions/listen`` streams. Reports throughput, errors (must be 0) and p99 latency per kind,
and how many updates the streams received; writes bench/results/soak.json.

    python -m bench.soak [--seconds 60] [--readers 8] [--listers 4] [--writers 2] [--streams 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from bench.bench_streams import URI, Fanout, open_streams, serve
from bench.harness import ADMIN_TOKEN, bench_database, summary, write_result
from bench.http import Connection, _request, mcp_request


class Tally:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def report(self, seconds: float) -> dict[str, Any]:
        done = len(self.latencies)
        return {
            "requests": done,
            "errors": len(self.errors),
            "first_errors": self.errors[:5],
            "rps": done / seconds,
            **(summary(self.latencies) if self.latencies else {}),
        }


async def timed(conn: Connection, request: bytes, tally: Tally, expect: bytes) -> bytes | None:
    started = time.perf_counter()
    try:
        status, body = await conn.send(request)
    except (ConnectionError, asyncio.IncompleteReadError) as exc:
        tally.errors.append(f"{type(exc).__name__}")
        return None
    tally.latencies.append(time.perf_counter() - started)
    if status >= 400 or expect not in body:
        tally.errors.append(f"{status}: {body[:200]!r}")
        return None
    return body


async def reader(port: int, deadline: float, tally: Tally) -> None:
    conn = await Connection.open("127.0.0.1", port)
    request = mcp_request("127.0.0.1", port, "resources/read", {"uri": "test://static-text"})
    while time.perf_counter() < deadline:
        await timed(conn, request, tally, b"static text resource")
    await conn.close()


async def lister(port: int, deadline: float, tally: Tally) -> None:
    conn = await Connection.open("127.0.0.1", port)
    cursor: str | None = None
    while time.perf_counter() < deadline:
        params = {"cursor": cursor} if cursor else {}
        body = await timed(
            conn, mcp_request("127.0.0.1", port, "resources/list", params), tally, b'"resources"'
        )
        cursor = json.loads(body)["result"].get("nextCursor") if body else None
    await conn.close()


async def writer(port: int, token: str, deadline: float, tally: Tally, number: int) -> None:
    conn = await Connection.open("127.0.0.1", port)
    count = 0
    while time.perf_counter() < deadline:
        count += 1
        uri = URI if count % 10 == 0 else f"test://soak/w{number}/r{count % 500}"
        body = json.dumps({"name": "soak", "mimeType": "text/plain", "text": f"write {count}"}).encode()
        headers = {
            "Host": f"127.0.0.1:{port}",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token}",
        }
        request = _request("PUT", f"/admin/v1/tenants/demo/resources?uri={uri}", headers, body)
        await timed(conn, request, tally, b'"version"')
    await conn.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with bench_database() as database:
        with serve(database, workers=2) as server:
            fanout = Fanout()
            streams = await open_streams(server.port, fanout, 1_000_000, args.streams)
            tallies = {kind: Tally() for kind in ("read", "list", "write")}
            started = time.perf_counter()
            deadline = started + args.seconds
            await asyncio.gather(
                *(reader(server.port, deadline, tallies["read"]) for _ in range(args.readers)),
                *(lister(server.port, deadline, tallies["list"]) for _ in range(args.listers)),
                *(
                    writer(server.port, ADMIN_TOKEN, deadline, tallies["write"], n)
                    for n in range(args.writers)
                ),
            )
            elapsed = time.perf_counter() - started
            alive = server.process.poll() is None
            received = [stream.updates for stream in streams]
            for stream in streams:
                await stream.close()
    result = {
        "seconds": elapsed,
        "workers": 2,
        "concurrency": {"readers": args.readers, "listers": args.listers, "writers": args.writers},
        **{kind: tally.report(elapsed) for kind, tally in tallies.items()},
        "streams": {
            "open": len(streams),
            "updates_received_min": min(received, default=0),
            "updates_received_max": max(received, default=0),
        },
        "server_alive_at_end": alive,
        "errors_total": sum(len(t.errors) for t in tallies.values()),
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--listers", type=int, default=4)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--streams", type=int, default=50)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    path = write_result("soak", result)
    print(f"soak: {result['seconds']:.0f}s on 2 workers -> {path}")
    for kind in ("read", "list", "write"):
        r = result[kind]
        print(
            f"  {kind:5s} {r['requests']:7d} requests  {r['rps']:7.1f}/s  p99 {r.get('p99_ms', 0):7.1f} ms"
            f"  errors {r['errors']}"
        )
    s = result["streams"]
    print(
        f"  streams {s['open']} open; updates received per stream {s['updates_received_min']}..{s['updates_received_max']}"
    )
    print(
        f"  errors total: {result['errors_total']}; server alive at the end: {result['server_alive_at_end']}"
    )
    raise SystemExit(0 if result["errors_total"] == 0 and result["server_alive_at_end"] else 1)


if __name__ == "__main__":
    main()
