"""Fan-out at the hub: one UPDATE, N subscriptions of its tenant on one hub fed by a real listener.

- latency: one tenant per size N (default 1, 100, 1000), each with N subscriptions whose consumers
  iterate them, all on one hub fed by a real ``ChangeListener``. One resource per tenant is updated
  (autocommit), the sizes interleaved (A B C A B C ...), one update at a time; measured from
  sending the UPDATE until every one of the N consumers has taken the event (and until the first
  has). Baselines from the same updates: the UPDATE's own round trip (commit acknowledged), and the
  1-subscription row (the fixed cost of NOTIFY delivery and the listener).
  Run twice: as is, and after ``gc.freeze()`` (a worker can freeze its start-up objects so the
  collector's full passes stop scanning them), to show how much those passes weigh in the p99.
- memory: Python objects per idle subscription (tracemalloc over 10,000), bare and with a consumer
  task waiting in ``async for`` (what a stream holds while nothing happens).

The writer, the listener and the consumers share one event loop, as in a worker. Results go to the
``hub`` section of bench/results/fanout.json (other sections, e.g. full MCP streams, are kept).

    python -m bench.bench_fanout [--sizes 1,100,1000] [--updates 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import platform
import time
import tracemalloc
from typing import Any

import asyncpg

from bench.harness import Database, bench_database, summary, write_result
from catalog.events import ChangeEvent, ChangeListener, EventHub, Subscription

URI = "test://bench/watched"
WARMUP = 5


async def measure_latency(database: Database, sizes: list[int], updates: int) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(database.dsn)
    tenants: dict[int, int] = {}
    for size in sizes:
        slug = f"bench-{size}-{time.monotonic_ns() % 10**9}"
        tenants[size] = await conn.fetchval(
            "INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id", slug
        )
        await conn.execute(
            "INSERT INTO resources (tenant_id, uri, name) VALUES ($1, $2, 'w')", tenants[size], URI
        )
    await conn.close()

    hub = EventHub()
    listener = ChangeListener(database.dsn, hub, application_name="catalog-bench-listener")
    assert await listener.start(wait=10), listener.status()
    writer = await asyncpg.connect(database.dsn)
    loop = asyncio.get_running_loop()
    state: dict[str, Any] = {"count": 0, "first": 0.0, "target": 0, "done": loop.create_future()}

    async def consume(sub: Subscription) -> None:
        async for batch in sub:
            for event in batch:
                if event.uri == URI:
                    now = time.perf_counter()
                    state["count"] += 1
                    if state["count"] == 1:
                        state["first"] = now
                    if state["count"] == state["target"]:
                        state["done"].set_result(now)

    subs = [hub.subscribe(tenants[size]) for size in sizes for _ in range(size)]
    tasks = [asyncio.create_task(consume(sub)) for sub in subs]
    await asyncio.sleep(0.1)  # setup only: let every consumer reach its first wait

    samples = {size: {"all": [], "first": [], "commit": []} for size in sizes}
    gc_before = [stat["collections"] for stat in gc.get_stats()]
    for i in range(WARMUP + updates):
        for size in sizes:
            state.update(count=0, target=size, done=loop.create_future())
            started = time.perf_counter()
            await writer.execute(
                "UPDATE resources SET name = $3 WHERE tenant_id = $1 AND uri = $2",
                tenants[size],
                URI,
                f"v{i}",
            )
            committed = time.perf_counter()
            finished = await asyncio.wait_for(state["done"], 10)
            if i >= WARMUP:
                samples[size]["all"].append(finished - started)
                samples[size]["first"].append(state["first"] - started)
                samples[size]["commit"].append(committed - started)
    gc_runs = [stat["collections"] - before for stat, before in zip(gc.get_stats(), gc_before, strict=True)]

    hub.close_all()
    await asyncio.gather(*tasks)
    await listener.stop()
    await writer.close()
    return [
        {
            "subscriptions": size,
            "update_to_all": summary(samples[size]["all"]),
            "update_to_first": summary(samples[size]["first"]),
            "baseline_commit_ack": summary(samples[size]["commit"]),
            "gc_collections_per_generation_whole_run": gc_runs,
        }
        for size in sizes
    ]


async def measure_memory(count: int) -> dict[str, float]:
    hub = EventHub()
    holder: list[Subscription] = []
    holder_tasks: list[asyncio.Task[None]] = []

    async def consume(sub: Subscription) -> None:
        async for _ in sub:
            pass

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        holder.extend(hub.subscribe(1 + i % 10) for i in range(count))
        bare = tracemalloc.get_traced_memory()[0] - base
        holder_tasks.extend(asyncio.create_task(consume(sub)) for sub in holder)
        await asyncio.sleep(0)  # each task now waits on its subscription
        waiting = tracemalloc.get_traced_memory()[0] - base
        for tenant in range(1, 11):  # one event each, taken: a used subscription is no bigger
            hub.publish(ChangeEvent(tenant, "resource", URI, "updated", 1))
        for _ in range(3):
            await asyncio.sleep(0)
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    hub.close_all()
    await asyncio.gather(*holder_tasks)
    # Includes the bench's own lists holding the subscriptions and tasks (8 bytes a slot each).
    return {
        "subscriptions": count,
        "bytes_per_idle_subscription": bare / count,
        "bytes_per_idle_subscription_with_waiting_consumer_task": waiting / count,
        "bytes_per_subscription_after_one_event": used / count,
    }


def table(label: str, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        a, f, c = row["update_to_all"], row["update_to_first"], row["baseline_commit_ack"]
        print(
            f"{label:>10} {row['subscriptions']:>5} {a['median_ms']:>8.2f} {a['p99_ms']:>8.2f}"
            f" {f['median_ms']:>9.2f} {c['median_ms']:>10.2f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="1,100,1000")
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    async with bench_database() as database:
        latency = await measure_latency(database, sizes, args.updates)
        gc.collect()
        gc.freeze()
        frozen = await measure_latency(database, sizes, args.updates)
        gc.unfreeze()
    memory = await measure_memory(10_000)

    path = write_result(
        "fanout",
        {
            "latency": latency,
            "latency_after_gc_freeze": frozen,
            "memory": memory,
            "updates_per_size": args.updates,
            "python": platform.python_version(),
            "note": "one process, one event loop (writer, listener, consumers); one hub holding every "
            "size's subscriptions (a tenant per size), updates interleaved across sizes; milliseconds "
            "from sending the UPDATE (autocommit)",
        },
        section="hub",
    )

    print(f"{'':>10} {'subs':>5} {'all med':>8} {'all p99':>8} {'first med':>9} {'commit med':>10}")
    table("default", latency)
    table("gc.freeze", frozen)
    print("(milliseconds from sending the UPDATE until all / the first subscriber have it)")
    print(
        f"memory per idle subscription: {memory['bytes_per_idle_subscription']:.0f} B bare, "
        f"{memory['bytes_per_idle_subscription_with_waiting_consumer_task']:.0f} B with a waiting "
        f"consumer task, {memory['bytes_per_subscription_after_one_event']:.0f} B after one event"
    )
    print(f"written to {path}")


if __name__ == "__main__":
    asyncio.run(main())
