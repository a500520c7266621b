"""Every benchmark result is stamped with where it came from (bench/provenance.py), and the report
says when its tables mix commits. No benchmark is run: the writer and the report's part are
exercised on small payloads in a temporary directory."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import harness, provenance

WHEN = datetime(2026, 12, 6, 4, 30, 15, tzinfo=UTC)


def test_the_stamp_names_commit_date_mode_fast_path_and_cpus() -> None:
    stamp = provenance.stamp(
        environ={"CATALOG_BENCH_MODE": "quick", "CATALOG_MCP_FAST_PATH": " Shadow "},
        now=WHEN,
        commit="abc1234-dirty",
        argv=["bench/bench_read.py", "--seconds", "4"],
    )
    assert stamp == {
        "commit": "abc1234-dirty",
        "date": "2026-12-06T04:30:15Z",
        "mode": "quick",
        "fast_path": "shadow",
        "cpus": stamp["cpus"],
        "command": ["bench/bench_read.py", "--seconds", "4"],
    }
    assert isinstance(stamp["cpus"], int) and stamp["cpus"] >= 1


def test_a_benchmark_run_alone_is_standalone_on_the_default_executor() -> None:
    stamp = provenance.stamp(environ={"CATALOG_MCP_FAST_PATH": ""}, now=WHEN, commit="x")
    assert (stamp["mode"], stamp["fast_path"]) == ("standalone", "on")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_the_commit_is_dirty_for_changed_code_and_not_for_the_benchmarks_own_outputs(
    tmp_path: Path,
) -> None:
    for args in (["init", "-q"], ["config", "user.email", "b@example.org"], ["config", "user.name", "b"]):
        _git(tmp_path, *args)
    (tmp_path / "bench" / "results").mkdir(parents=True)
    for path in ("catalog.py", "BENCHMARKS.md", "bench/results/read.json"):
        (tmp_path / path).write_text("before\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    commit = _git(tmp_path, "describe", "--always")
    assert provenance.describe(tmp_path) == commit
    # A run's own results and tables leave the stamp clean, from the top or from a subfolder.
    (tmp_path / "BENCHMARKS.md").write_text("after\n")
    (tmp_path / "bench" / "results" / "read.json").write_text("after\n")
    assert provenance.describe(tmp_path) == commit
    assert provenance.describe(tmp_path / "bench") == commit
    (tmp_path / "catalog.py").write_text("after\n")  # the code that ran is not the commit's
    assert provenance.describe(tmp_path) == f"{commit}-dirty"
    assert provenance.describe(tmp_path / "bench") == f"{commit}-dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert provenance.describe(tmp_path) == "unknown"


def test_a_result_file_carries_its_stamp(tmp_path: Path) -> None:
    stamp = provenance.stamp(environ={}, now=WHEN, commit="c1")
    path = provenance.write(tmp_path, "read", {"ratio": 0.5}, provenance=stamp)
    assert path == tmp_path / "read.json"
    assert json.loads(path.read_text()) == {"ratio": 0.5, "provenance": stamp}


def test_each_section_of_a_shared_file_keeps_its_own_stamp(tmp_path: Path) -> None:
    """fanout.json holds the hub's section and the streams' section, written by two benchmarks,
    maybe at two commits: writing one keeps the other, stamp and all."""
    hub = provenance.stamp(environ={}, now=WHEN, commit="c1")
    streams = provenance.stamp(environ={"CATALOG_BENCH_MODE": "full"}, now=WHEN, commit="c2")
    provenance.write(tmp_path, "fanout", {"latency": [1]}, section="hub", provenance=hub)
    provenance.write(tmp_path, "fanout", {"rows": [2]}, section="streams", provenance=streams)
    document = json.loads((tmp_path / "fanout.json").read_text())
    assert document == {
        "hub": {"latency": [1], "provenance": hub},
        "streams": {"rows": [2], "provenance": streams},
    }
    assert provenance.stamps("fanout", document) == [("fanout.hub", hub), ("fanout.streams", streams)]


def test_the_harness_writes_every_result_through_the_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harness, "RESULTS", tmp_path / "results")
    monkeypatch.setenv("CATALOG_BENCH_MODE", "quick")
    monkeypatch.setenv("CATALOG_MCP_FAST_PATH", "off")
    path = harness.write_result("start", {"seconds": 1.5})
    written = json.loads(path.read_text())
    assert path == tmp_path / "results" / "start.json"
    assert written["seconds"] == 1.5
    assert (written["provenance"]["mode"], written["provenance"]["fast_path"]) == ("quick", "off")
    assert written["provenance"]["commit"] == provenance.describe()


def test_the_servers_a_benchmark_starts_run_the_recorded_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATALOG_MCP_FAST_PATH", "off")
    monkeypatch.setenv("CATALOG_SECRET_KEY", "from-the-shell")
    env = harness.catalog_env(CATALOG_HOME="/tmp/x")
    assert env["CATALOG_MCP_FAST_PATH"] == "off"
    assert "CATALOG_SECRET_KEY" not in env
    assert env["CATALOG_HOME"] == "/tmp/x"


def _result(commit: str, mode: str = "full") -> dict[str, object]:
    return {
        "x": 1,
        "provenance": provenance.stamp(environ={"CATALOG_BENCH_MODE": mode}, now=WHEN, commit=commit),
    }


def test_the_report_shows_each_stamp_and_no_warning_for_one_commit() -> None:
    part = provenance.render({"read": _result("c1"), "start": _result("c1", "quick"), "scale": None})
    assert "| `read` | `c1` | 2026-12-06T04:30:15Z | full | on |" in part
    assert "| `start` | `c1` | 2026-12-06T04:30:15Z | quick | on |" in part
    assert "`scale`" not in part
    assert "mix" not in part


def test_the_report_says_when_its_tables_mix_commits() -> None:
    part = provenance.render({"read": _result("c1"), "start": _result("c2"), "import": _result("c1")})
    assert "**These tables mix results of 2 different commits (`c1`, `c2`):**" in part


def test_a_result_without_a_stamp_counts_as_an_unknown_commit() -> None:
    part = provenance.render({"read": _result("c1"), "start": {"x": 1}})
    assert "| `start` | not recorded |" in part
    assert "2 different commits (`c1`, `unknown`)" in part
    only_old = provenance.render({"start": {"x": 1}})
    assert "their commit is not known" in only_old


def test_a_dirty_tree_is_pointed_out() -> None:
    assert "uncommitted changes" in provenance.render({"read": _result("c1-dirty")})


def test_nothing_to_show_renders_nothing() -> None:
    assert provenance.render({"read": None}) == ""
