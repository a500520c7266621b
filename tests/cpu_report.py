"""Where the suite's CPU goes: with ``CATALOG_TEST_CPU_REPORT=FILE``, each test appends a JSON line
to FILE with its wall time, the CPU of the test process (the in-process servers included) and of
the child processes it waited for (``catalog serve``, ``catalog stdio``, node, pytest), setup and
teardown included. CI is CPU-bound on 2 cores: CPU, not wall time, is what a cheaper test saves.

    CATALOG_TEST_CPU_REPORT=/tmp/cpu.jsonl pytest -n auto
    python -m tests.cpu_report /tmp/cpu.jsonl     # the costliest modules and tests
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

REPORT = os.environ.get("CATALOG_TEST_CPU_REPORT")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


if REPORT:

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        wall, cpu, children = time.perf_counter(), time.process_time(), _children_cpu()
        yield
        line = {
            "test": item.nodeid,
            "wall": round(time.perf_counter() - wall, 3),
            "cpu": round(time.process_time() - cpu, 3),
            "children": round(_children_cpu() - children, 3),
        }
        with Path(REPORT).open("a") as out:  # one short line, one write: workers do not interleave
            out.write(json.dumps(line) + "\n")


def summarize(path: str, most: int = 25) -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for row in rows:
        total = by_module[row["test"].split("::", 1)[0]]
        total[0] += row["cpu"] + row["children"]
        total[1] += row["children"]
        total[2] += row["wall"]
        total[3] += 1
    cpu = sum(r["cpu"] + r["children"] for r in rows)
    print(
        f"{len(rows)} tests, {cpu:.0f} s of CPU (test processes and their children), "
        f"{sum(r['wall'] for r in rows):.0f} s of wall time summed"
    )
    print(f"\n{'cpu s':>8} {'children':>8} {'wall s':>8} {'tests':>5}  module")
    for module, (c, ch, w, n) in sorted(by_module.items(), key=lambda kv: -kv[1][0])[:most]:
        print(f"{c:8.1f} {ch:8.1f} {w:8.1f} {int(n):5d}  {module}")
    print(f"\n{'cpu s':>8} {'children':>8} {'wall s':>8}  test")
    for row in sorted(rows, key=lambda r: -(r["cpu"] + r["children"]))[:most]:
        print(f"{row['cpu'] + row['children']:8.1f} {row['children']:8.1f} {row['wall']:8.1f}  {row['test']}")


if __name__ == "__main__":
    summarize(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
