"""Where a benchmark result came from: every file of bench/results/ carries a ``provenance`` stamp.

The stamp says which code ran (the commit, ``-dirty`` for uncommitted changes to the code), when (UTC), in which mode
(``quick`` or ``full`` under ``python -m bench``, which says so in ``CATALOG_BENCH_MODE``;
``standalone`` for a benchmark run on its own, whose arguments ``command`` keeps), with which MCP
executor (``CATALOG_MCP_FAST_PATH``, which the servers a benchmark starts inherit) and on how many
CPUs. :func:`write` is the one writer of result files, so every result is stamped the same way;
:func:`render` is what the report shows of them, saying so when its tables mix commits.

Deliberately free of the benchmarks' own imports (no database, no catalog), so it is cheap to test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEY = "provenance"
MODE_VARIABLE = "CATALOG_BENCH_MODE"
FAST_PATH_VARIABLE = "CATALOG_MCP_FAST_PATH"
UNKNOWN = "unknown"


# What the benchmarks write themselves: a change there says nothing about the code that ran (the
# first result of a run would otherwise make every later one "dirty").
OWN_OUTPUTS = ("bench/results", "BENCHMARKS.md")


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def describe(root: Path = ROOT) -> str:
    """The commit of ``root`` (``git describe --always``), ``-dirty`` when a tracked file other
    than the benchmarks' own outputs (:data:`OWN_OUTPUTS`) differs from it; ``unknown`` outside a
    git checkout."""
    commit = (_git(root, "describe", "--always") or "").strip()
    if not commit:
        return UNKNOWN
    excluded = [f":(exclude,top){path}" for path in OWN_OUTPUTS]
    changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ":/", *excluded)
    return f"{commit}-dirty" if changed else commit


def fast_path(environ: Mapping[str, str] = os.environ) -> str:
    """The MCP executor the benchmark's servers run, read as ``catalog.settings`` reads it (set
    but empty is the default, ``on``)."""
    return environ.get(FAST_PATH_VARIABLE, "").strip().lower() or "on"


def stamp(
    *,
    environ: Mapping[str, str] = os.environ,
    now: datetime | None = None,
    commit: str | None = None,
    argv: list[str] | None = None,
) -> dict[str, Any]:
    """The provenance of a result written now by this process."""
    moment = now or datetime.now(UTC)
    return {
        "commit": commit if commit is not None else describe(),
        "date": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mode": environ.get(MODE_VARIABLE, "").strip() or "standalone",
        "fast_path": fast_path(environ),
        "cpus": os.cpu_count(),
        "command": list(sys.argv if argv is None else argv),
    }


def write(
    directory: Path,
    name: str,
    payload: dict[str, Any],
    *,
    section: str | None = None,
    provenance: dict[str, Any] | None = None,
) -> Path:
    """Write ``payload`` as ``directory/name.json`` with its provenance; with ``section``, as that
    key of the file (other sections, written by other benchmarks, are kept with their own stamps)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    stamped = {**payload, KEY: provenance if provenance is not None else stamp()}
    if section is None:
        document = stamped
    else:
        document = json.loads(path.read_text()) if path.exists() else {}
        document[section] = stamped
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return path


def stamps(name: str, result: Mapping[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """The stamps of one result file: its own, or one per section (``fanout.hub``) when the
    sections carry them; None where a result was written before stamping."""
    own = result.get(KEY)
    if isinstance(own, dict):
        return [(name, own)]
    sections = [
        (f"{name}.{key}", value.get(KEY) if isinstance(value.get(KEY), dict) else None)
        for key, value in sorted(result.items())
        if isinstance(value, dict) and not key.startswith("_")
    ]
    stamped = [entry for entry in sections if entry[1] is not None]
    return stamped or [(name, None)]


def commits(results: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """The distinct commits the results were measured on, in order of appearance (``unknown`` for
    a result without a stamp)."""
    seen: dict[str, None] = {}
    for name, result in results.items():
        if result is None:
            continue
        for _, provenance in stamps(name, result):
            seen[str((provenance or {}).get("commit", UNKNOWN))] = None
    return list(seen)


def render(results: Mapping[str, Mapping[str, Any] | None]) -> str:
    """The report's provenance part: one row per result (or section), and a sentence when the
    tables mix results of different commits (or of unknown ones)."""
    rows: list[str] = []
    for name, result in results.items():
        if result is None:
            continue
        for label, provenance in stamps(name, result):
            if provenance is None:
                rows.append(f"| `{label}` | not recorded | | | | |")
                continue
            rows.append(
                f"| `{label}` | `{provenance.get('commit', UNKNOWN)}` | {provenance.get('date', '')}"
                f" | {provenance.get('mode', '')} | {provenance.get('fast_path', '')}"
                f" | {provenance.get('cpus', '')} |"
            )
    if not rows:
        return ""
    lines = [
        "### Provenance",
        "",
        "| result | commit | measured (UTC) | mode | CATALOG_MCP_FAST_PATH | CPUs |",
        "|---|---|---|---|---|---|",
        *rows,
    ]
    measured_on = commits(results)
    if len(measured_on) > 1:
        named = ", ".join(f"`{commit}`" for commit in measured_on)
        lines += [
            "",
            f"**These tables mix results of {len(measured_on)} different commits ({named}):** a"
            " figure and its baseline are always from one run, but figures of different rows may"
            " not be comparable. Re-run `python -m bench` for one commit throughout.",
        ]
    elif measured_on == [UNKNOWN]:
        lines += ["", "These results were written before results were stamped: their commit is not known."]
    elif measured_on and measured_on[0].endswith("-dirty"):
        lines += ["", f"Measured on `{measured_on[0]}`: a working tree with uncommitted changes."]
    return "\n".join(lines)
