"""Reads with one read replica: ``resources/read`` through ``catalog serve`` with
``CATALOG_READ_DATABASE_URL`` on a streaming hot standby, against the same server without it.

The benchmark builds its own cluster (``bench/replication.py``, the read-replica tests' too): a
PostgreSQL 15 primary and one ``pg_basebackup -R`` hot standby, the primary migrated to head and
loaded with one tenant of N small text resources (the standby replays all of it). Two
``python -m catalog serve`` processes, one worker each, configured alike but for one setting:

- ``replica``: ``CATALOG_READ_DATABASE_URL`` = the standby (MCP reads there, token lookups and
  writes on the primary: docs/scaling.md, "Read replicas");
- ``primary`` (baseline): no read replica, every statement on the primary.

Both are loaded by the same closed-loop generator (``bench.http``, as ``bench_read``), round by
round, in four shapes: ``load`` (C keep-alive clients, throughput) and ``serial`` (one client, one
request at a time: the latency of a read, where the replica's position check shows), each without
and with ``writes``: a writer on the primary updating another resource of the same tenant W times a
second, each update a change notification that the server's listener receives, so that the
consistency rule (no read older than a delivered notification) sends a read to the primary until
the primary's position after it is known and then only to a standby that has replayed it.

The read path's cost of the table ``serve --workers N`` shares between its workers (the WAL
positions each notified: ``catalog.core.replica_positions``) is measured in the same run, in
process, since it is microseconds against a read of milliseconds and would vanish in the servers'
noise: ``ReadReplicas.required_here`` (what every read asks before it chooses a replica) per call
with the table of 2 and of 8 workers' rows, against the same call without a table (a single
process's rule), interleaved round by round; the added time is also put against this run's median
``serial`` read through the replica.

The listener barrier's cost (docs/scaling.md, "Across hosts": before a read uses a replica, a NOTIFY
echoed through the process's own LISTEN connection proves its listener current) is measured in the
same run, in process, on the same cluster: ``on_replica`` reads (the tenant's resource by URI on
the standby, through the replica's engine) in a closed loop of 1 and of C concurrent readers, with
the barrier and without it, interleaved round by round (10 rounds of 1 s each): reads a second, median and p99 latency,
and NOTIFY rounds per read (the coalescing); and the barrier's wait alone (one round after
another, nothing else running), which is the latency it adds to a read, since the read's own
statements follow it unchanged. The servers above run with it (it is always on with a
replica), and their ``catalog_read_barrier_rounds_total`` is reported too.

Reported: where the reads ran (the ``replica`` server's ``catalog_read_replica_reads_total{target}``
and ``catalog_read_replica_skips_total{reason}``, and the standby's own ``xact_commit``), throughput
replica / primary per round, and the median latency of each shape with the replica on and off.
On a 2-core machine where both PostgreSQL servers, the catalog server and the generator share the
cores, a replica adds work (a second server replaying WAL, a second pool) and offloads nothing to
other hardware: no gain is expected here; the figures bound what the routing costs.

    python -m bench.bench_replica [--seconds 3] [--rounds 3] [--concurrency 16] [--writes 20]
        [--synchronous-commit on|off]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import tempfile
import time
from typing import Any

import asyncpg
import httpx
from sqlalchemy import text

from bench.harness import (
    Database,
    ServerProcess,
    admin_api_token,
    catalog_serve,
    seed_resources,
    server_env,
    write_result,
)
from bench.http import closed_loop, mcp_request
from bench.replication import replicated
from catalog.core import replica_positions
from catalog.core.catalog import Catalog
from catalog.core.replica_positions import SharedPositions
from catalog.core.replicas import ReadReplicas, Replica, on_replica
from catalog.db.engine import create_engine
from catalog.events import ChangeListener, EventHub, listener_dsn
from catalog.events.barrier import ListenerBarrier
from catalog.observability import metrics as metrics_module
from catalog.settings import Settings

URI = "file:///bench/hello.txt"
TEXT = "hello, world"
WRITTEN = "file:///bench/written.txt"
SERVERS = ("replica", "primary")
SHAPES = ("load", "serial", "load+writes", "serial+writes")
PRIMARY_SETTINGS = {"shared_buffers": "'256MB'", "max_connections": "200"}
# The section of bench/results/replica.json a run writes, by the primary's synchronous_commit.
SECTIONS = {"on": "synchronous_commit_on", "off": "synchronous_commit_off"}


def _uri(i: int) -> str:
    if i == 0:
        return URI
    if i == 1:
        return WRITTEN
    return f"file:///bench/other/{i:06d}.txt"


def metrics(server: ServerProcess) -> dict[str, float]:
    """The replica routing counters of ``/metrics`` (reads by target, skips by reason)."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=10).text
    found: dict[str, float] = {}
    pattern = r'^catalog_read_replica_(reads|skips)_total\{(?:target|reason)="(\w+)"[^}]*\} (\S+)$'
    for match in re.finditer(pattern, text, re.MULTILINE):
        key = f"{match.group(1)}.{match.group(2)}"
        found[key] = found.get(key, 0.0) + float(match.group(3))
    for match in re.finditer(r"^catalog_read_barrier_rounds_total(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE):
        found["barrier.rounds"] = found.get("barrier.rounds", 0.0) + float(match.group(1))
    return found


async def standby_commits(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()


async def caught_up(primary: str, standby: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    p = await asyncpg.connect(primary)
    s = await asyncpg.connect(standby)
    try:
        target = await p.fetchval("SELECT pg_current_wal_lsn()")
        while await s.fetchval("SELECT pg_last_wal_replay_lsn()") < target:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby did not replay the seeding within {within_s}s")
            await asyncio.sleep(0.05)
    finally:
        await p.close()
        await s.close()


ROUTING_ROWS = (2, 8)  # workers sharing the table
ROUTING_CALLS = 100_000
ROUTING_ROUNDS = 5
ROUTING_TENANTS = 1000  # tenant ids the calls cycle through (each with a published position)


async def routing_cost(rows: int) -> dict[str, float]:
    """ns per ``required_here`` call with a shared table of ``rows`` rows and without one (the
    median of :data:`ROUTING_ROUNDS` interleaved rounds of :data:`ROUTING_CALLS` calls each)."""
    engine = create_engine("postgresql://nobody@127.0.0.1:1/none", pool_size=1)  # never connected
    fd = replica_positions.create(rows)
    try:
        views = [SharedPositions.attach(fd, row) for row in range(rows)]
        for row, view in enumerate(views):
            for tenant_id in range(1, ROUTING_TENANTS + 1):
                view.publish(
                    replica_positions.slot_of(tenant_id), 1000 * tenant_id + row, still_pending=False
                )
        alone = ReadReplicas(engine, [], 0.0)
        shared = ReadReplicas(engine, [], 0.0, shared=views[0])
        tenants = [1 + i % ROUTING_TENANTS for i in range(ROUTING_CALLS)]

        def per_call(replicas: ReadReplicas) -> float:
            required = replicas.required_here
            started = time.perf_counter_ns()
            for tenant_id in tenants:
                required(tenant_id)
            return (time.perf_counter_ns() - started) / ROUTING_CALLS

        timings: dict[str, list[float]] = {"alone": [], "shared": []}
        for _ in range(ROUTING_ROUNDS):
            timings["alone"].append(per_call(alone))
            timings["shared"].append(per_call(shared))
        assert shared.required_here(7) == 7000 + rows - 1  # the highest row's position is read
        for view in views:
            view.close()
        shared.shared = None
    finally:
        os.close(fd)
    await engine.dispose()
    alone_ns = statistics.median(timings["alone"])
    shared_ns = statistics.median(timings["shared"])
    return {
        "rows": rows,
        "alone_ns": alone_ns,
        "shared_ns": shared_ns,
        "ratio": shared_ns / alone_ns,
        "added_us": (shared_ns - alone_ns) / 1000,
    }


BARRIER_CONCURRENCY = (1, 16)
BARRIER_WAITS = 500  # serial barrier waits a round, timed alone
# Short interleaved rounds, many of them: the machine's load drifts over seconds, and the difference
# sought is a fraction of a millisecond.
BARRIER_ROUNDS = 10
BARRIER_ROUND_S = 1.0


async def barrier_cost(
    primary: str, standby: str, seconds: float = BARRIER_ROUND_S, rounds: int = BARRIER_ROUNDS
) -> list[dict[str, Any]]:
    """Reads a second and latency of ``on_replica`` reads with the listener barrier and without it
    (interleaved rounds of ``seconds``), at each of :data:`BARRIER_CONCURRENCY` concurrent readers."""
    settings = Settings(database_url=primary, home=tempfile.mkdtemp(prefix="catalog-bench-barrier-"))
    primary_engine = create_engine(settings.async_database_url(), pool_size=20)
    standby_engine = create_engine(Settings(database_url=standby).async_database_url(), pool_size=20)
    catalog = Catalog(engine=primary_engine, settings=settings)
    replicas = ReadReplicas(
        primary_engine, [Replica("standby", Catalog(engine=standby_engine, settings=settings))], 0.0
    )
    catalog.read_replicas = replicas
    listener = ChangeListener(listener_dsn(primary), EventHub())
    listener.add_change_observer(replicas.changed)
    barrier = ListenerBarrier(listener)
    await barrier.start()
    if not await listener.start(wait=10):
        raise RuntimeError(f"the listener did not connect: {listener.status()}")
    query = text("SELECT text FROM resources WHERE uri = :uri")

    async def read(reader: Catalog) -> str:
        async with reader.engine.connect() as conn:
            return (await conn.execute(query, {"uri": URI})).scalar_one()

    async def closed(clients: int) -> dict[str, float]:
        latencies: list[float] = []
        on_replica_before = standby_reads()
        rounds_before = barrier.rounds
        stop_at = time.perf_counter() + seconds

        async def one() -> None:
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                assert await on_replica(catalog, read, tenant_id=1) == TEXT
                latencies.append((time.perf_counter() - started) * 1000)

        began = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(clients)))
        elapsed = time.perf_counter() - began
        latencies.sort()
        return {
            "rps": len(latencies) / elapsed,
            "median_ms": statistics.median(latencies),
            "p99_ms": latencies[int(len(latencies) * 0.99)],
            "reads": len(latencies),
            "on_replica": standby_reads() - on_replica_before,
            "barrier_rounds": barrier.rounds - rounds_before,
        }

    def standby_reads() -> float:
        return metrics_module.READ_REPLICA_READS.labels("replica")._value.get()

    async def waits() -> list[float]:
        """The barrier alone, one wait after another (each its own round): what a read waits."""
        took = []
        for _ in range(BARRIER_WAITS):
            started = time.perf_counter()
            assert await barrier.wait()
            took.append((time.perf_counter() - started) * 1000)
        return sorted(took)

    try:
        for _ in range(20):  # warm both pools and the statement caches
            await on_replica(catalog, read, tenant_id=1)
        results = []
        alone = [await waits() for _ in range(rounds)]
        for clients in BARRIER_CONCURRENCY:
            runs: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
            for _ in range(rounds):
                replicas.barrier = barrier.wait
                runs["with"].append(await closed(clients))
                replicas.barrier = None
                runs["without"].append(await closed(clients))
            pairs = list(zip(runs["with"], runs["without"], strict=True))
            results.append(
                {
                    "clients": clients,
                    **{
                        f"{key}_{case}": statistics.median(run[key] for run in runs[case])
                        for key in ("rps", "median_ms", "p99_ms")
                        for case in ("with", "without")
                    },
                    "rps_ratio": statistics.median(w["rps"] / o["rps"] for w, o in pairs),
                    "added_median_ms": statistics.median(w["median_ms"] - o["median_ms"] for w, o in pairs),
                    "reads_per_round": sum(r["reads"] for r in runs["with"])
                    / max(1, sum(r["barrier_rounds"] for r in runs["with"])),
                    "replica_share_with": sum(r["on_replica"] for r in runs["with"])
                    / sum(r["reads"] for r in runs["with"]),
                    "wait_median_ms": statistics.median(statistics.median(took) for took in alone),
                    "wait_p99_ms": statistics.median(took[int(len(took) * 0.99)] for took in alone),
                }
            )
        return results
    finally:
        replicas.barrier = None
        await barrier.stop()
        await listener.stop()
        await replicas.dispose()
        await primary_engine.dispose()


@contextlib.asynccontextmanager
async def writer(dsn: str, per_second: float) -> Any:
    """Updates ``WRITTEN`` ``per_second`` times a second on the primary while the block runs (each
    update fires catalog's triggers: a change-feed row and a NOTIFY). Yields a list whose length is
    the updates made."""
    done: list[float] = []
    conn = await asyncpg.connect(dsn)

    async def loop() -> None:
        interval = 1 / per_second
        n = 0
        next_at = time.perf_counter()
        while True:
            n += 1
            await conn.execute("UPDATE resources SET text = $1 WHERE uri = $2", f"written {n}", WRITTEN)
            done.append(time.perf_counter())
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))

    task = asyncio.create_task(loop())
    try:
        yield done
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await conn.close()


async def run(
    seconds: float, rounds: int, concurrency: int, writes: float, resources: int, synchronous_commit: str
) -> dict[str, Any]:
    with replicated({**PRIMARY_SETTINGS, "synchronous_commit": synchronous_commit}) as pair:
        from catalog.db import migrate

        await asyncio.to_thread(migrate.upgrade, pair.primary.url)
        database = Database(pair.primary.url)
        await seed_resources(
            database,
            "replica",
            resources,
            uri=_uri,
            tags=lambda i: [],
            text=lambda i: TEXT if i == 0 else None,
        )
        await caught_up(pair.primary.url, pair.standby.url)
        home = tempfile.mkdtemp(prefix="catalog-bench-home-")
        common = {"CATALOG_RATE_LIMIT_PER_MINUTE": "0", "CATALOG_METRICS_ACCESS": "open"}
        with contextlib.ExitStack() as stack:
            servers: dict[str, ServerProcess] = {
                "replica": stack.enter_context(
                    catalog_serve(
                        server_env(
                            pair.primary.url, home, CATALOG_READ_DATABASE_URL=pair.standby.url, **common
                        )
                    )
                ),
                "primary": stack.enter_context(catalog_serve(server_env(pair.primary.url, home, **common))),
            }
            tokens = [admin_api_token(servers["primary"], "replica", admin=True) for _ in range(concurrency)]
            await caught_up(pair.primary.url, pair.standby.url)
            host = "127.0.0.1"
            requests = {
                name: [
                    mcp_request(host, servers[name].port, "resources/read", {"uri": URI}, token=t)
                    for t in tokens
                ]
                for name in SERVERS
            }
            samples: dict[str, dict[str, list[dict[str, float]]]] = {
                shape: {name: [] for name in SERVERS} for shape in SHAPES
            }
            routing: dict[str, dict[str, float]] = {}
            standby_xacts: dict[str, float] = {}
            updates: dict[str, int] = {}
            for _ in range(rounds):
                for shape in SHAPES:
                    clients = concurrency if shape.startswith("load") else 1
                    for name in SERVERS:
                        server = servers[name]
                        before = metrics(server)
                        xacts_before = await standby_commits(pair.standby.url)
                        cpu_before = server.cpu_seconds()
                        async with contextlib.AsyncExitStack() as during:
                            made = (
                                await during.enter_async_context(writer(database.dsn, writes))
                                if shape.endswith("writes")
                                else []
                            )
                            result = await closed_loop(
                                host,
                                server.port,
                                requests[name][:clients],
                                concurrency=clients,
                                seconds=seconds,
                                check=TEXT.encode(),
                            )
                        cpu = server.cpu_seconds() - cpu_before
                        after = metrics(server)
                        key = f"{shape}/{name}"
                        for counter in set(before) | set(after):
                            delta = after.get(counter, 0.0) - before.get(counter, 0.0)
                            routing.setdefault(key, {})[counter] = (
                                routing.get(key, {}).get(counter, 0.0) + delta
                            )
                        standby_xacts[key] = standby_xacts.get(key, 0) + (
                            await standby_commits(pair.standby.url) - xacts_before
                        )
                        updates[key] = updates.get(key, 0) + len(made)
                        summary = result.summary()
                        summary["server_cpu_ms_per_request"] = cpu * 1000 / max(1, summary["requests"])
                        samples[shape][name].append(summary)
        # In process, once the servers are gone, on the same cluster.
        barrier = await barrier_cost(pair.primary.url, pair.standby.url)
    result = summarise(
        samples, routing, standby_xacts, updates, seconds, rounds, concurrency, writes, resources
    )
    serial_read_ms = result["shapes"]["serial"]["cases"]["replica"]["latency_median_ms"]
    shared_table = []
    for rows in ROUTING_ROWS:
        cost = await routing_cost(rows)
        cost["share_of_serial_read"] = cost["added_us"] / (serial_read_ms * 1000)
        shared_table.append(cost)
    return {
        **result,
        "synchronous_commit": synchronous_commit,
        "shared_positions": shared_table,
        "listener_barrier": barrier,
    }


def summarise(
    samples: dict[str, dict[str, list[dict[str, float]]]],
    routing: dict[str, dict[str, float]],
    standby_xacts: dict[str, float],
    updates: dict[str, int],
    seconds: float,
    rounds: int,
    concurrency: int,
    writes: float,
    resources: int,
) -> dict[str, Any]:
    shapes: dict[str, Any] = {}
    for shape, by_server in samples.items():
        cases = {}
        for name, runs in by_server.items():
            key = f"{shape}/{name}"
            reads = routing.get(key, {})
            on_replica = reads.get("reads.replica", 0.0)
            on_primary = reads.get("reads.primary", 0.0)
            answered = sum(s["requests"] for s in runs)
            cases[name] = {
                "rps_median": statistics.median(s["rps"] for s in runs),
                "rps_per_round": [s["rps"] for s in runs],
                "latency_median_ms": statistics.median(s["median_ms"] for s in runs),
                "latency_p99_ms": statistics.median(s["p99_ms"] for s in runs),
                "server_cpu_ms_per_request": statistics.median(s["server_cpu_ms_per_request"] for s in runs),
                "requests": answered,
                "errors": sum(s["errors"] for s in runs),
                "reads_on_replica": on_replica,
                "reads_on_primary": on_primary,
                "replica_share": on_replica / (on_replica + on_primary) if on_replica + on_primary else 0.0,
                "skips": {k.split(".", 1)[1]: v for k, v in reads.items() if k.startswith("skips.")},
                "standby_xact_commit": standby_xacts.get(key, 0),
                "updates": updates.get(key, 0),
            }
        pairs = list(zip(by_server["replica"], by_server["primary"], strict=True))
        shapes[shape] = {
            "cases": cases,
            # replica / primary alone, per round: throughput, and median latency (its excess in ms).
            "rps_ratio": statistics.median(r["rps"] / p["rps"] for r, p in pairs),
            "latency_ratio": statistics.median(r["median_ms"] / p["median_ms"] for r, p in pairs),
            "latency_extra_ms": statistics.median(r["median_ms"] - p["median_ms"] for r, p in pairs),
            "cpu_ratio": statistics.median(
                r["server_cpu_ms_per_request"] / p["server_cpu_ms_per_request"] for r, p in pairs
            ),
        }
    return {
        "seconds_per_case": seconds,
        "rounds": rounds,
        "concurrency": concurrency,
        "writes_per_second": writes,
        "resources": resources,
        "server": "python -m catalog serve (1 worker), CATALOG_RATE_LIMIT_PER_MINUTE=0, read replica on/off",
        "cluster": "PostgreSQL 15 primary + 1 pg_basebackup -R hot standby on the same machine",
        "shapes": shapes,
    }


def report(result: dict[str, Any]) -> None:
    for shape, data in result["shapes"].items():
        for name, case in data["cases"].items():
            print(
                f"  {shape:14s} {name:8s} {case['rps_median']:7.0f} req/s  median {case['latency_median_ms']:6.2f} ms"
                f"  p99 {case['latency_p99_ms']:6.2f} ms  cpu {case['server_cpu_ms_per_request']:.2f} ms/req"
                f"  on replica {case['replica_share']:.0%}  skips {case['skips']}"
                f"  standby xacts {case['standby_xact_commit']:.0f}  updates {case['updates']}  errors {case['errors']}"
            )
        print(
            f"  {shape:14s} replica / primary: {data['rps_ratio']:.2f}x req/s, latency {data['latency_ratio']:.2f}x"
            f" ({data['latency_extra_ms']:+.2f} ms), server CPU {data['cpu_ratio']:.2f}x"
        )


def report_routing(result: dict[str, Any]) -> None:
    for cost in result.get("shared_positions", []):
        print(
            f"  shared positions, {cost['rows']} workers' rows: required_here {cost['shared_ns']:.0f} ns"
            f" vs {cost['alone_ns']:.0f} ns alone ({cost['ratio']:.2f}x, +{cost['added_us']:.2f} us a read,"
            f" {cost['share_of_serial_read']:.2%} of the serial read through the replica)"
        )


def report_barrier(result: dict[str, Any]) -> None:
    for cost in result.get("listener_barrier", []):
        print(
            f"  listener barrier, {cost['clients']:2d} readers: {cost['rps_with']:.0f} vs {cost['rps_without']:.0f}"
            f" reads/s without ({cost['rps_ratio']:.2f}x), median {cost['median_ms_with']:.2f} vs"
            f" {cost['median_ms_without']:.2f} ms ({cost['added_median_ms']:+.2f} ms), p99 {cost['p99_ms_with']:.2f}"
            f" vs {cost['p99_ms_without']:.2f} ms, {cost['reads_per_round']:.1f} reads a NOTIFY round,"
            f" on the standby {cost['replica_share_with']:.0%}; a barrier wait alone: median"
            f" {cost['wait_median_ms']:.3f} ms, p99 {cost['wait_p99_ms']:.3f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--writes", type=float, default=20, help="updates a second in the +writes shapes")
    parser.add_argument("--resources", type=int, default=10_000)
    parser.add_argument(
        "--synchronous-commit",
        choices=sorted(SECTIONS),
        default="on",
        help="the primary's synchronous_commit (off: a commit's WAL reaches the standby only when the"
        " WAL writer flushes it, up to wal_writer_delay later); each writes its own section",
    )
    args = parser.parse_args()
    result = asyncio.run(
        run(args.seconds, args.rounds, args.concurrency, args.writes, args.resources, args.synchronous_commit)
    )
    path = write_result("replica", result, section=SECTIONS[args.synchronous_commit])
    print(
        f"read replica, synchronous_commit={args.synchronous_commit}, {args.concurrency} clients,"
        f" {args.rounds} rounds of {args.seconds}s -> {path} [{SECTIONS[args.synchronous_commit]}]"
    )
    report(result)
    report_routing(result)
    report_barrier(result)


if __name__ == "__main__":
    main()
