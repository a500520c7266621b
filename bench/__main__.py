"""``python -m bench``: every benchmark, then BENCHMARKS.md's tables and bench/results/depth.png.

Each benchmark runs as a process of its own (``python -m bench.bench_X``), writing its JSON to
bench/results/; one that fails is reported and the others still run. Every server benchmark starts
``python -m catalog serve`` itself, as a user does, and each of its baselines in a process of its
own. ``--quick`` uses a smaller catalogue and fewer, shorter runs (a few minutes on 2 cores); the
full run is the one the goals are judged on (10,000,000 resources, 100k imported).

    python -m bench [--quick] [--only scale,read,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import provenance, report
from bench.harness import write_result

HERE = Path(__file__).parent

PLANS = {
    "full": {
        "scale": ["--resources", "10000000", "--runs", "30"],
        "read": ["--seconds", "5", "--rounds", "7", "--concurrency", "16"],
        "import": ["--resources", "100000", "--rounds", "2"],
        "start": ["--rounds", "3"],
        "fanout": [],
        "streams": ["--sizes", "1,100,1000,10000", "--updates", "50"],
        "keepalive": ["--requests", "200"],
        "replica": ["--seconds", "5", "--rounds", "3"],
    },
    "quick": {
        "scale": ["--resources", "100000", "--runs", "8"],
        "read": ["--seconds", "4", "--rounds", "2", "--concurrency", "16"],
        "import": ["--resources", "20000", "--rounds", "1"],
        "start": ["--rounds", "1"],
        "fanout": ["--updates", "50"],
        "streams": ["--sizes", "1,100", "--updates", "20"],
        "keepalive": ["--requests", "40"],
        "replica": ["--seconds", "2", "--rounds", "2"],
    },
}
ORDER = ["scale", "read", "import", "start", "fanout", "streams", "keepalive", "replica"]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="smaller N, fewer runs (a few minutes)")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(ORDER)}")
    args = parser.parse_args()
    mode = "quick" if args.quick else "full"
    # Every result written from here on (the benchmarks' processes inherit it) records the mode.
    os.environ[provenance.MODE_VARIABLE] = mode
    plan = PLANS[mode]
    chosen = args.only.split(",") if args.only else ORDER
    began = time.perf_counter()
    outcomes: dict[str, dict[str, object]] = {}
    for name in chosen:
        module = HERE / f"bench_{name}.py"
        if not module.exists():
            print(f"== {name}: bench/{module.name} is not there; skipped", flush=True)
            outcomes[name] = {"status": "missing"}
            continue
        extra = plan.get(name) or []
        command = [sys.executable, "-m", f"bench.bench_{name}", *extra]
        print(f"== {name}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        code = subprocess.call(command)
        elapsed = time.perf_counter() - started
        outcomes[name] = {"status": "ok" if code == 0 else f"failed ({code})", "seconds": round(elapsed, 1)}
        print(f"== {name}: {outcomes[name]['status']} in {elapsed:.0f}s", flush=True)
    total = time.perf_counter() - began
    write_result(
        "run",
        {
            "mode": mode,
            "finished_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": round(total, 1),
            "benchmarks": outcomes,
        },
    )
    report.write(mode)
    print(f"== all done in {total:.0f}s ({mode}): {json.dumps(outcomes)}")
    return 0 if all(o["status"] in ("ok", "missing") for o in outcomes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
