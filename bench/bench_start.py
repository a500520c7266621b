"""Start-up: ``python -m catalog serve`` as a user starts it with no database configured (the
embedded PostgreSQL under ``CATALOG_HOME``), until every worker has started and /readyz answers 200:
cold (a fresh home: initdb, start, migrate) and warm (the same home again), against the embedded
PostgreSQL alone in the same run.

Each round: cold catalog, cold PostgreSQL alone (initdb + start in a fresh home), warm catalog,
warm PostgreSQL alone (start on that existing data directory); the ratios are per round. The
PostgreSQL-alone baseline is what no catalog code can make faster; the difference is catalog's own
(Python imports, migrations, the app's start-up, the LISTEN connection).

    python -m bench.bench_start [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import ADMIN_TOKEN, catalog_env, catalog_serve, write_result


def serve_until_ready(home: Path) -> float:
    """Seconds from starting ``catalog serve`` on ``home`` until it is ready (then it is stopped)."""
    env = catalog_env(CATALOG_HOME=str(home), CATALOG_ADMIN_TOKEN=ADMIN_TOKEN)
    with catalog_serve(env, timeout=180) as server:
        return server.ready_seconds


def postgres_alone(home: Path) -> float:
    """initdb (if the home is new) and start of the embedded server, in a fresh process."""
    code = (
        "import sys, time; from pathlib import Path; t = time.perf_counter();"
        "from catalog.db.embedded import EmbeddedPostgres; pg = EmbeddedPostgres(Path(sys.argv[1]));"
        "pg.start(); print(time.perf_counter() - t); pg.release()"
    )
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(home)], check=True, capture_output=True)
    return time.perf_counter() - started


def run(rounds: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {"cold": [], "cold_postgres": [], "warm": [], "warm_postgres": []}
    for _ in range(rounds):
        home = Path(tempfile.mkdtemp(prefix="catalog-bench-start-"))
        pg_home = Path(tempfile.mkdtemp(prefix="catalog-bench-pgonly-"))
        samples["cold"].append(serve_until_ready(home))
        samples["cold_postgres"].append(postgres_alone(pg_home))
        samples["warm"].append(serve_until_ready(home))
        samples["warm_postgres"].append(postgres_alone(pg_home))
    return {
        "rounds": rounds,
        "seconds": {name: {"median": statistics.median(v), "all": v} for name, v in samples.items()},
        "cold_vs_postgres_ratio": statistics.median(
            a / b for a, b in zip(samples["cold"], samples["cold_postgres"], strict=True)
        ),
        "warm_vs_postgres_ratio": statistics.median(
            a / b for a, b in zip(samples["warm"], samples["warm_postgres"], strict=True)
        ),
        "catalog_overhead_cold_s": statistics.median(
            a - b for a, b in zip(samples["cold"], samples["cold_postgres"], strict=True)
        ),
        "catalog_overhead_warm_s": statistics.median(
            a - b for a, b in zip(samples["warm"], samples["warm_postgres"], strict=True)
        ),
    }


def report(result: dict[str, Any]) -> None:
    s = result["seconds"]
    print(
        f"  cold start to /readyz {s['cold']['median']:.1f}s (PostgreSQL alone {s['cold_postgres']['median']:.1f}s,"
        f" {result['cold_vs_postgres_ratio']:.1f}x); warm {s['warm']['median']:.1f}s"
        f" (PostgreSQL alone {s['warm_postgres']['median']:.1f}s, {result['warm_vs_postgres_ratio']:.1f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = run(args.rounds)
    path = write_result("start", result)
    print(f"start-up, {args.rounds} rounds -> {path}")
    report(result)


if __name__ == "__main__":
    main()
