"""Start-up: ``python -m catalog serve`` as a user starts it with no database configured (the
embedded PostgreSQL under ``CATALOG_HOME``), until every worker has started and /readyz answers 200:
cold (a fresh home: initdb, start, migrate) and warm (the same home again), against the embedded
PostgreSQL alone in the same run.

Each round: cold catalog, cold PostgreSQL alone (initdb + start in a fresh home), warm catalog,
warm PostgreSQL alone (start on that existing data directory); the ratios are per round. The
PostgreSQL-alone baseline is what no catalog code can make faster; the difference is catalog's own
(Python imports, migrations, the app's start-up, the LISTEN connection).

Commands (issue 27): ``python -m catalog`` as an operator runs it, each a fresh process, against a
migrated database on ``CATALOG_BENCH_DATABASE_URL``'s server (else an embedded one) with
``CATALOG_DATABASE_URL`` set: ``--help``, and ``token list`` of a tenant with three tokens (its quick
path: no SQLAlchemy, no pydantic), also with settings a container sets; then ``token list`` with no
database URL, on an embedded server already running under its home (``catalog serve`` in another
terminal). Beside each, the same ``token list`` through the full command (a setting name the quick
path leaves to the settings model, ``catalog_pool_size``, sends it there: what every run did
before). Baseline: ``python -c pass``, the interpreter's own start. The commands run interleaved,
round by round; medians.

    python -m bench.bench_start [--rounds 3] [--command-rounds 15] [--commands-only]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import ADMIN_TOKEN, bench_database, catalog_env, catalog_serve, write_result
from catalog.db.embedded import EmbeddedPostgres


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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds from starting ``argv`` to its exit, and its stdout (it must succeed)."""
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


TOKENS = (["--scope", "public", "--name", "reader"], ["--admin"], ["--scope", "a", "--scope", "b"])
# Settings a container sets routinely: the quick path vouches for each.
CONTAINER_SETTINGS = {
    "CATALOG_LOG_FORMAT": "json",
    "CATALOG_POOL_SIZE": "20",
    "CATALOG_POOL_WAIT_SECONDS": "2.5",
    "CATALOG_METRICS_ACCESS": "open",
    "CATALOG_STATEMENT_TIMEOUT_MS": "30000",
}
# The quick path leaves a name in another case to the settings model (which reads it as
# CATALOG_POOL_SIZE): the full command answers, as every run did before.
FULL_COMMAND = {"catalog_pool_size": "2"}
CATALOG = [sys.executable, "-m", "catalog"]
LISTING = [*CATALOG, "token", "list", "--tenant", "bench"]


def with_tokens(env: dict[str, str]) -> None:
    """Tenant ``bench`` and its three tokens, made by the full commands."""
    for argv in [["tenant", "create", "bench"]] + [
        ["token", "create", "--tenant", "bench", *t] for t in TOKENS
    ]:
        subprocess.run(CATALOG + argv, env=env, check=True, capture_output=True)


def command_samples(url: str, rounds: int) -> dict[str, list[float]]:
    """Each command's seconds per round: on the migrated database at ``url``, and on an embedded
    server already running under a home of its own (as ``catalog serve`` leaves it for another
    terminal: started here the way the CLI starts it, and migrated by the first command)."""
    env = catalog_env(
        CATALOG_DATABASE_URL=url, CATALOG_HOME=tempfile.mkdtemp(prefix="catalog-bench-commands-")
    )
    home = Path(tempfile.mkdtemp(prefix="catalog-bench-embedded-"))
    embedded_env = catalog_env(CATALOG_HOME=str(home))
    embedded = EmbeddedPostgres(home)
    embedded.start()
    try:
        with_tokens(env)
        with_tokens(embedded_env)
        cases = {
            "python_pass": ([sys.executable, "-c", "pass"], env),
            "help": ([*CATALOG, "--help"], env),
            "token_list": (LISTING, env),
            "token_list_container_settings": (LISTING, {**env, **CONTAINER_SETTINGS}),
            "token_list_full_command": (LISTING, {**env, **FULL_COMMAND}),
            "token_list_embedded": (LISTING, embedded_env),
            "token_list_embedded_full_command": (LISTING, {**embedded_env, **FULL_COMMAND}),
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        printed: dict[str, set[str]] = {name: set() for name in cases}
        for _ in range(rounds):
            for name, (argv, case_env) in cases.items():
                seconds, out = timed(argv, case_env)
                samples[name].append(seconds)
                printed[name].add(out)
    finally:
        embedded.release()
    # The listings on one database did the same work: three rows, the same bytes.
    external = ("token_list", "token_list_container_settings", "token_list_full_command")
    assert len({frozenset(printed[name]) for name in external}) == 1
    assert printed["token_list_embedded"] == printed["token_list_embedded_full_command"]
    for name in ("token_list", "token_list_embedded"):
        assert [len(out.splitlines()) for out in printed[name]] == [len(TOKENS)]
    return samples


def commands(rounds: int) -> dict[str, Any]:
    async def measure() -> dict[str, list[float]]:
        async with bench_database() as db:
            return await asyncio.to_thread(command_samples, db.url, rounds)

    samples = asyncio.run(measure())
    median = {name: statistics.median(values) for name, values in samples.items()}
    return {
        "rounds": rounds,
        "seconds": {name: {"median": median[name], "all": values} for name, values in samples.items()},
        "over_python_s": {
            name: median[name] - median["python_pass"] for name in samples if name != "python_pass"
        },
    }


def report(result: dict[str, Any]) -> None:
    s = result["seconds"]
    print(
        f"  cold start to /readyz {s['cold']['median']:.1f}s (PostgreSQL alone {s['cold_postgres']['median']:.1f}s,"
        f" {result['cold_vs_postgres_ratio']:.1f}x); warm {s['warm']['median']:.1f}s"
        f" (PostgreSQL alone {s['warm_postgres']['median']:.1f}s, {result['warm_vs_postgres_ratio']:.1f}x)"
    )


def report_commands(result: dict[str, Any]) -> None:
    s = result["seconds"]
    print(
        f"  python -c pass {s['python_pass']['median']:.3f}s; catalog --help {s['help']['median']:.3f}s;"
        f" token list {s['token_list']['median']:.3f}s (container settings"
        f" {s['token_list_container_settings']['median']:.3f}s, full command {s['token_list_full_command']['median']:.3f}s);"
        f" embedded {s['token_list_embedded']['median']:.3f}s (full command"
        f" {s['token_list_embedded_full_command']['median']:.3f}s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--command-rounds", type=int, default=15)
    parser.add_argument("--commands-only", action="store_true", help="the commands, not serve's start")
    args = parser.parse_args()
    started = commands(args.command_rounds)
    if args.commands_only:
        path = write_result("start", started, section="commands")
    else:
        result = run(args.rounds)
        path = write_result("start", {**result, "commands": started})
        print(f"start-up, {args.rounds} rounds -> {path}")
        report(result)
    print(f"command start, {args.command_rounds} rounds -> {path}")
    report_commands(started)


if __name__ == "__main__":
    main()
