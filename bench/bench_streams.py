"""Fan-out through real listen streams: N ``subscriptions/listen`` SSE streams over loopback, spread
across the workers of one ``python -m catalog serve --workers 2 --demo`` process (started as a user
starts it), all watching one URI.

- latency: the URI is updated in SQL (autocommit), one update at a time once every stream has the
  previous one; measured from sending the UPDATE until every stream has read its
  ``notifications/resources/updated`` frame off the socket (and until the first, the median
  stream, and the commit's own acknowledgement, as baselines from the same updates). Sizes are
  reached by opening more streams (1, then 100, then 1000 by default), measuring at each.
- memory per idle stream: RSS (and USS) of the worker processes after the streams are open minus
  before any was, over the number of streams; the "before" follows a warm-up that opened and
  closed a few streams, so one-time costs (imports, first allocations) are not counted.

The streams are raw connections (an HTTP/1.1 POST, then the SSE body counted as bytes in the
protocol's ``data_received``, on uvloop), so one client process can hold ten thousand of them and
still read a delivery faster than the workers write it: with a reader task per stream the client,
not the server, was what 10,000 streams measured. Each is a real listen, anonymous, on the demo
tenant. The database is a fresh one on CATALOG_BENCH_DATABASE_URL's server, else an embedded one.
Results go to the ``streams`` section of bench/results/fanout.json (the ``hub`` section is kept).

    python -m bench.bench_streams [--sizes 1,100,1000] [--updates 100] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import psutil
import uvloop

from bench.harness import (
    Database,
    ServerProcess,
    bench_database,
    catalog_serve,
    server_env,
    summary,
    write_result,
)

URI = "test://watched-resource"  # a demo resource, visible to anonymous callers
UPDATED = b'"notifications/resources/updated"'
ACKED = b'"notifications/subscriptions/acknowledged"'
OPEN_CONCURRENCY = 50
WARMUP_UPDATES = 5
WAIT = 30.0


# -- the server ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def serve(database: Database, workers: int, streams: int) -> Iterator[ServerProcess]:
    """``python -m catalog serve --workers N --demo`` on the benchmark database, as a user starts it.

    Every stream here is an anonymous caller from one address on one tenant, so the fair-use limits
    that would refuse them by design (anonymous streams, default 100 per host; streams per tenant,
    5,000 shared by the workers; requests per caller; connections per address, 256) are raised for
    the run, as an operator serving that many anonymous agents would; nothing else departs from the
    defaults.
    """
    home = tempfile.mkdtemp(prefix="catalog-bench-home-")
    env = server_env(
        database.url,
        home,
        CATALOG_MAX_ANONYMOUS_STREAMS=str(2 * streams),
        CATALOG_MAX_STREAMS_PER_TENANT=str(2 * streams),
        CATALOG_MAX_STREAMS=str(max(10_000, 2 * streams)),
        CATALOG_RATE_LIMIT_PER_MINUTE="0",
        CATALOG_MAX_CONNECTIONS_PER_ADDRESS="0",
    )
    with catalog_serve(env, workers=workers, demo=True) as server:
        yield server


def streams_per_worker(server: ServerProcess) -> list[int]:
    return [
        sum(
            1
            for c in w.net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == server.port
        )
        for w in server.workers()
    ]


def worker_memory(server: ServerProcess) -> dict[str, int]:
    infos = [w.memory_full_info() for w in server.workers()]
    return {"rss": sum(i.rss for i in infos), "uss": sum(i.uss for i in infos)}


# -- raw listen streams -------------------------------------------------------------------------------


class Fanout:
    """What every stream's reader reports to: the update being awaited and who has it."""

    def __init__(self) -> None:
        self.target = 0
        self.remaining = 0
        self.arrivals: list[float] = []
        self.done: asyncio.Future[None] | None = None

    def expect(self, target: int, streams: int) -> asyncio.Future[None]:
        self.target, self.remaining, self.arrivals = target, streams, []
        self.done = asyncio.get_running_loop().create_future()
        return self.done

    def arrived(self, count: int, previous: int, now: float) -> None:
        if previous < self.target <= count:
            self.arrivals.append(now)
            self.remaining -= 1
            if self.remaining == 0 and self.done is not None and not self.done.done():
                self.done.set_result(None)


class RawStream(asyncio.Protocol):
    """One listen as a bare protocol: no task, no StreamReader. With 10,000 streams in one client
    process, a reader task per stream costs the client more than the server's delivery, and the
    benchmark would time the client; each socket's data is counted in ``data_received`` instead."""

    def __init__(self, fanout: Fanout, request_id: int) -> None:
        self.fanout = fanout
        self.id = request_id
        self.updates = 0
        loop = asyncio.get_running_loop()
        self.answered: asyncio.Future[bytes] = loop.create_future()  # the response's head
        self.acked: asyncio.Future[None] = loop.create_future()
        self._head = b""
        self._tail = b""
        self._transport: asyncio.Transport | None = None

    def request(self, port: int) -> bytes:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": self.id,
                "method": "subscriptions/listen",
                "params": {
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "bench-streams", "version": "0"},
                    },
                    "notifications": {"resourceSubscriptions": [URI]},
                },
            }
        ).encode()
        head = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: subscriptions/listen\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    async def open(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_connection(lambda: self, "127.0.0.1", port)
        self._transport = transport
        transport.write(self.request(port))
        status = await asyncio.wait_for(self.answered, WAIT)
        if not status.startswith(b"HTTP/1.1 200") or b"text/event-stream" not in status:
            raise RuntimeError(f"listen refused: {status[:300]!r}")
        await asyncio.wait_for(self.acked, WAIT)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if not self.answered.done():
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.answered.set_result(self._head[: end + 4])
            data = self._head[end + 4 :]
        keep = len(UPDATED) - 1  # shorter than either marker: a match is never counted twice
        buf = self._tail + data
        self._tail = buf[-keep:]
        if not self.acked.done() and ACKED in buf:
            self.acked.set_result(None)
        found = buf.count(UPDATED)
        if found:
            previous, self.updates = self.updates, self.updates + found
            self.fanout.arrived(self.updates, previous, now)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.answered, self.acked):
            if not future.done():
                future.set_exception(ConnectionError("the server closed the stream"))

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def open_streams(port: int, fanout: Fanout, first_id: int, count: int) -> list[RawStream]:
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    streams = [RawStream(fanout, first_id + i) for i in range(count)]

    async def one(stream: RawStream) -> None:
        async with gate:
            await stream.open(port)

    await asyncio.gather(*(one(s) for s in streams))
    return streams


async def settle(server: ServerProcess, expected: int) -> None:
    """Setup only: wait until the workers hold ``expected`` connections (closing is asynchronous)."""
    deadline = time.monotonic() + WAIT
    while sum(streams_per_worker(server)) != expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers hold {streams_per_worker(server)}, expected {expected}")
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # let the workers finish what the opening started


# -- measuring --------------------------------------------------------------------------------------


async def measure(
    server: ServerProcess, database: Database, sizes: list[int], updates: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    fanout = Fanout()
    writer = await asyncpg.connect(database.dsn)
    tenant = await writer.fetchval("SELECT id FROM tenants WHERE slug = 'demo'")
    version = 0

    async def update_all(streams: list[RawStream]) -> tuple[float, float, float, float]:
        nonlocal version
        version += 1
        done = fanout.expect(streams[0].updates + 1, len(streams))
        started = time.perf_counter()
        await writer.execute(
            "UPDATE resources SET name = $3 WHERE tenant_id = $1 AND uri = $2", tenant, URI, f"v{version}"
        )
        committed = time.perf_counter()
        await asyncio.wait_for(done, WAIT)
        arrivals = sorted(fanout.arrivals)
        return (
            arrivals[-1] - started,
            arrivals[0] - started,
            statistics.median(arrivals) - started,
            committed - started,
        )

    # Warm-up: open, use and close some streams on every worker before the memory baseline.
    warm = await open_streams(server.port, fanout, 1, 20)
    for _ in range(3):
        await update_all(warm)
    for stream in warm:
        await stream.close()
    await settle(server, 0)
    baseline = worker_memory(server)

    rows: list[dict[str, Any]] = []
    streams: list[RawStream] = []
    next_id = 1000
    for size in sizes:
        more = await open_streams(server.port, fanout, next_id, size - len(streams))
        next_id += len(more)
        streams += more
        await settle(server, len(streams))
        memory = worker_memory(server)
        per_worker = streams_per_worker(server)
        # every stream starts this size's round level (the new ones have seen no update yet)
        level = max(s.updates for s in streams)
        for s in streams:
            s.updates = level
        samples: dict[str, list[float]] = {"last": [], "first": [], "median": [], "commit": []}
        for i in range(WARMUP_UPDATES + updates):
            last, first, median, commit = await update_all(streams)
            if i >= WARMUP_UPDATES:
                samples["last"].append(last)
                samples["first"].append(first)
                samples["median"].append(median)
                samples["commit"].append(commit)
        rows.append(
            {
                "streams": size,
                "streams_per_worker": per_worker,
                "update_to_last_stream": summary(samples["last"]),
                "update_to_first_stream": summary(samples["first"]),
                "update_to_median_stream": summary(samples["median"]),
                "baseline_commit_ack": summary(samples["commit"]),
                "memory": {
                    "rss_bytes_per_idle_stream": (memory["rss"] - baseline["rss"]) / size,
                    "uss_bytes_per_idle_stream": (memory["uss"] - baseline["uss"]) / size,
                    "workers_rss_bytes": memory["rss"],
                },
            }
        )
        print_row(rows[-1], flush=True)
    for stream in streams:
        await stream.close()
    await writer.close()
    return rows, baseline


def print_header() -> None:
    print(
        f"{'streams':>7} {'per worker':>11} {'last med':>8} {'last p99':>8} {'first med':>9}"
        f" {'commit med':>10} {'RSS/stream':>10} {'USS/stream':>10}"
    )


def print_row(row: dict[str, Any], flush: bool = False) -> None:
    last, first, commit = (
        row["update_to_last_stream"],
        row["update_to_first_stream"],
        row["baseline_commit_ack"],
    )
    mem = row["memory"]
    print(
        f"{row['streams']:>7} {'/'.join(map(str, row['streams_per_worker'])):>11}"
        f" {last['median_ms']:>8.1f} {last['p99_ms']:>8.1f} {first['median_ms']:>9.1f}"
        f" {commit['median_ms']:>10.2f} {mem['rss_bytes_per_idle_stream'] / 1024:>8.1f}Ki"
        f" {mem['uss_bytes_per_idle_stream'] / 1024:>8.1f}Ki",
        flush=flush,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1,100,1000")
    parser.add_argument("--updates", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--label", default="", help="recorded with the results (e.g. 'before fix')")
    parser.add_argument("--no-write", action="store_true", help="print only; leave the results file alone")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * max(sizes) + 256)), hard))

    async with bench_database() as database:
        with serve(database, args.workers, max(sizes)) as server:
            print_header()
            rows, baseline = await measure(server, database, sizes, args.updates)

    section = {
        "latency_and_memory": rows,
        "workers": args.workers,
        "updates_per_size": args.updates,
        "workers_baseline_rss_bytes": baseline["rss"],
        "label": args.label,
        "python": platform.python_version(),
        "note": "catalog serve --workers N --demo as a subprocess; raw HTTP/1.1 listen streams over "
        "loopback from one client process (anonymous, all watching one URI); one SQL UPDATE "
        "(autocommit) at a time; milliseconds from sending the UPDATE until the last / first / "
        "median stream read its notifications/resources/updated frame; memory from the workers' "
        "RSS/USS before and after opening the streams, over the stream count. The client, the "
        "workers and PostgreSQL share the machine's CPUs: absolute numbers are noisy.",
    }
    if args.no_write:
        return
    path = write_result("fanout", section, section="streams")
    print("(milliseconds from sending the UPDATE; memory per idle stream from the workers' RSS/USS)")
    print(f"written to {path} ('streams')")


if __name__ == "__main__":
    uvloop.run(main())  # the client's loop as fast as the server's: it is not what is measured
