"""``CATALOG_MCP_FAST_PATH``: ``on`` answers plain 2026-07-28 requests on the fast
path, ``off`` sends every request to the SDK's handlers, ``shadow`` answers on the fast path and
then runs the SDK path on the same request, logging and counting any difference
(``catalog.mcp.shadow``); a value that is none of these ends ``catalog serve`` with one line."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from catalog.mcp import fast
from catalog.mcp.shadow import MARKER, differences
from catalog.observability import metrics
from catalog.settings import Settings
from tests.conftest import free_port
from tests.mcp_helpers import Served, mcp_settings, module_database, raw, served
from tests.processes import Served as ServedProcess
from tests.processes import catalog_env, no_shadow_difference, run_catalog, serving, started, stop

pytestmark = pytest.mark.process

READ = "test://static-text"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, Path(tmp_path_factory.mktemp("home")))) as s,
    ):
        yield s


@pytest.fixture
def mode(srv: Served) -> Iterator[Any]:
    """Set the served app's fast path mode for one test (the edge reads it per request)."""
    settings = srv.app.state.mcp.settings
    kept = settings.mcp_fast_path

    def set_mode(value: str) -> None:
        settings.mcp_fast_path = value

    yield set_mode
    settings.mcp_fast_path = kept


def value(counter: Any) -> float:
    return counter._value.get()  # type: ignore[no-any-return]


def read_counters() -> tuple[Any, Any, Any]:
    return (
        metrics.MCP_PLAIN_ANSWERS.labels("resources/read"),
        metrics.MCP_REQUESTS.labels("resources/read", "2026", "result"),
        metrics.MCP_FAST_PATH_DIFFERENCES.labels("resources/read"),
    )


@pytest.mark.parametrize("bad", ["fast", "1", "shadowed"])
def test_a_bad_fast_path_setting_ends_serve_with_one_line_naming_it(
    bad: str, database_url: str, tmp_path: Path
) -> None:
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"), CATALOG_MCP_FAST_PATH=bad
    )
    result = run_catalog("serve", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("catalog: CATALOG_MCP_FAST_PATH: Input should be 'on', 'off' or 'shadow'"), (
        lines
    )


@pytest.mark.parametrize(("given", "read"), [(" Shadow ", "shadow"), ("OFF", "off"), ("", "on")])
def test_the_setting_is_read_as_operators_write_it(
    given: str, read: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CATALOG_MCP_FAST_PATH", given)
    assert Settings(home=tmp_path).mcp_fast_path == read


def test_the_default_is_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CATALOG_MCP_FAST_PATH", raising=False)
    assert Settings(home=tmp_path).mcp_fast_path == "on"


def test_off_sends_a_plain_read_to_the_sdk_with_the_same_answer(srv: Served, mode: Any) -> None:
    answered, requests, _ = read_counters()
    on = raw(srv, "resources/read", {"uri": READ}, token="staff")
    mode("off")
    before = value(answered), value(requests)
    off = raw(srv, "resources/read", {"uri": READ}, token="staff")
    assert (value(answered), value(requests)) == (before[0], before[1] + 1)  # the SDK's handler ran
    assert off.status_code == on.status_code == 200
    assert off.json() == on.json()


def test_shadow_answers_on_the_fast_path_and_counts_the_request_once(
    srv: Served, mode: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's second run is neither sent nor counted (its answer only compared)."""
    mode("shadow")
    answered, requests, different = read_counters()
    before = value(answered), value(requests), value(different)
    with caplog.at_level(logging.WARNING, logger="catalog.mcp.shadow"):
        response = raw(srv, "resources/read", {"uri": READ}, token="staff")
    assert response.status_code == 200
    assert response.json()["result"]["contents"][0]["uri"] == READ
    assert (value(answered), value(requests), value(different)) == (before[0] + 1, before[1] + 1, before[2])
    assert [r for r in caplog.records if MARKER in r.getMessage()] == []


@pytest.mark.shadow_differences_expected
def test_shadow_logs_and_counts_a_difference_with_its_method_and_where_it_is(
    srv: Served, mode: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    mode("shadow")
    shared = fast.cache_hints  # a fast path gone wrong: its own cache hints, not the shared ones
    monkeypatch.setattr(
        fast,
        "cache_hints",
        lambda method, principal, settings: {**shared(method, principal, settings), "ttlMs": 1},
    )
    _, _, different = read_counters()
    before = value(different)
    with caplog.at_level(logging.WARNING, logger="catalog.mcp.shadow"):
        response = raw(srv, "resources/read", {"uri": READ}, token="staff")
    assert response.json()["result"]["ttlMs"] == 1  # the fast path's answer is the one sent
    assert value(different) == before + 1
    [line] = [r.getMessage() for r in caplog.records if MARKER in r.getMessage()]
    assert line == f"{MARKER} resources/read: /body/result/ttlMs: fast 1 != sdk 10000"
    scraped = httpx.get(
        f"{srv.base_url}/metrics", headers={"Authorization": "Bearer cat_test-platform-admin-token"}
    )
    assert 'catalog_mcp_fast_path_differences_total{method="resources/read"}' in scraped.text


def test_a_difference_names_each_path_that_differs() -> None:
    fast = {"status": 200, "body": {"id": 1, "result": {"a": [1, 2], "b": "x", "c": 1}}}
    sdk = {"status": 400, "body": {"id": 1, "result": {"a": [1, 3], "b": "x", "d": None}}}
    assert differences(fast, sdk) == [
        "/body/result/a/1: fast 2 != sdk 3",
        "/body/result/c: only fast 1",
        "/body/result/d: only sdk null",
        "/status: fast 200 != sdk 400",
    ]
    assert differences(json.loads('{"a": 1.0}'), {"a": 1.0}) == []


def test_a_served_process_that_logged_a_difference_fails_the_test(tmp_path: Path) -> None:
    """``tests.processes.serving`` reads a served process's output to its end for the marker."""
    process = subprocess.Popen(
        [sys.executable, "-c", f"print('WARNING {MARKER} resources/list: /body: ...')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    process.wait(timeout=30)
    with pytest.raises(pytest.fail.Exception, match="answered differently"):
        no_shadow_difference(ServedProcess(process, 0))


@pytest.mark.fast_path
def test_catalog_serve_in_shadow_mode_serves_reads_lists_and_completions_without_difference(
    database_url: str, tmp_path: Path
) -> None:
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_METRICS_ACCESS="open",
        CATALOG_MCP_FAST_PATH="shadow",
    )
    with serving("--demo", env=env) as process:
        started(process)
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
        }
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        for method, params in [
            ("resources/read", {"uri": READ}),
            ("resources/list", {}),
            (
                "completion/complete",
                {
                    "ref": {"type": "ref/resource", "uri": "test://template/{id}/data"},
                    "argument": {"name": "id", "value": ""},
                },
            ),
        ]:
            extra = {"Mcp-Name": params["uri"]} if "uri" in params else {}
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta, **params}}
            response = httpx.post(
                process.mcp_url, json=body, headers={**headers, "Mcp-Method": method, **extra}, timeout=30
            )
            assert response.status_code == 200, response.text
            assert "result" in response.json()
        scraped = httpx.get(f"{process.base_url}/metrics", timeout=30).text
        assert 'catalog_mcp_plain_answers_total{method="resources/read"} 1.0' in scraped
        assert "catalog_mcp_fast_path_differences_total{" not in scraped
        assert stop(process) == 0
    assert MARKER not in process.printed()
