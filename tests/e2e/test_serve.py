"""`catalog serve` and `catalog migrate` as an operator runs them: real processes, real PostgreSQL."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import httpx
import psutil
import pytest

from catalog.db import migrate
from catalog.db.embedded import EmbeddedPostgres
from catalog.settings import Settings
from tests.conftest import free_port
from tests.processes import catalog_env, run_catalog, serving, stop

pytestmark = pytest.mark.process


def test_serve_on_an_external_database_answers_readyz(database_url: str, tmp_path: Path) -> None:
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    with serving(env=env) as served:
        served.wait_for("Application startup complete")
        ready = httpx.get(f"{served.base_url}/readyz", timeout=10)
        health = httpx.get(f"{served.base_url}/healthz", timeout=10)
        assert ready.status_code == 200
        checks = {"database": "ok", "schema": "ok", "events": "ok"}
        assert ready.json() == {"status": "ready", "checks": checks}
        assert health.json() == {"status": "ok"}
        assert stop(served) == 0, "".join(served.output)
    printed = "".join(served.output)
    assert f"http://127.0.0.1:{served.port}/mcp" in printed
    assert "platform admin token" in printed


def test_serve_refuses_a_database_that_is_not_at_head(empty_database_url: str, tmp_path: Path) -> None:
    env = catalog_env(CATALOG_DATABASE_URL=empty_database_url, CATALOG_HOME=str(tmp_path / "home"))
    result = run_catalog("serve", "--port", str(free_port()), env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"catalog: the database schema is at an empty schema, not at head {migrate.head_revision()}:"
        " run `catalog migrate upgrade` first"
    ]
    assert "Traceback" not in result.stderr


def test_migrate_commands_against_an_external_database(empty_database_url: str, tmp_path: Path) -> None:
    env = catalog_env(CATALOG_DATABASE_URL=empty_database_url, CATALOG_HOME=str(tmp_path / "home"))
    head = migrate.head_revision()
    assert run_catalog("migrate", "current", env=env).stdout.strip() == f"(empty) (head is {head})"
    assert run_catalog("migrate", "upgrade", env=env).returncode == 0
    assert run_catalog("migrate", "current", env=env).stdout.strip() == f"{head} (head)"
    check = run_catalog("migrate", "check", env=env)
    assert (check.returncode, check.stdout.strip().splitlines()[-1]) == (0, "models and migrations agree")
    assert run_catalog("migrate", "downgrade", "base", "--yes", env=env).returncode == 0
    assert run_catalog("migrate", "current", env=env).stdout.strip() == f"(empty) (head is {head})"


def postmaster_pid(home: Path) -> int:
    return int((home / "pgdata" / "postmaster.pid").read_text().splitlines()[0])


def test_serve_demo_on_embedded_postgres_and_sigterm_stops_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = catalog_env(CATALOG_HOME=str(home))
    with serving("--demo", env=env) as served:
        served.wait_for("Application startup complete")
        assert httpx.get(f"{served.base_url}/readyz", timeout=10).json()["status"] == "ready"
        pid = postmaster_pid(home)
        assert psutil.pid_exists(pid)
        # Another catalog process on the same home joins the same server and leaves it running.
        current = run_catalog("migrate", "current", env=env)
        assert current.stdout.strip().endswith("(head)")
        assert postmaster_pid(home) == pid and psutil.pid_exists(pid)
        assert httpx.get(f"{served.base_url}/readyz", timeout=10).status_code == 200
        assert stop(served) == 0, "".join(served.output)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (home / "pgdata" / "postmaster.pid").exists()
    printed = "".join(served.output)
    assert "demo tenant 'demo' is readable anonymously" in printed
    # The token was generated once and kept private.
    assert (home / "admin_token").stat().st_mode & 0o777 == 0o600
    assert (home / "secret_key").stat().st_mode & 0o777 == 0o600


def test_ctrl_c_stops_serve_and_its_embedded_postgres(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with serving(env=catalog_env(CATALOG_HOME=str(home))) as served:
        served.wait_for("Application startup complete")
        pid = postmaster_pid(home)
        assert stop(served, signal.SIGINT) == 0, "".join(served.output)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_embedded_postgres_recovers_from_a_stale_postmaster_pid(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = EmbeddedPostgres(home)
    first.start()
    first.release()
    # A leftover lock file whose PID now belongs to an unrelated live process (this test).
    (home / "pgdata" / "postmaster.pid").write_text(f"{os.getpid()}\n{home / 'pgdata'}\n0\n5432\n\n\n\n\n")
    second = EmbeddedPostgres(home)
    second.start()
    try:
        assert postmaster_pid(home) != os.getpid()
        assert psutil.Process(postmaster_pid(home)).name() == "postgres"
    finally:
        second.release()
    assert not (home / "pgdata" / "postmaster.pid").exists()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"CATALOG_DATABASE_URL": "not a url"},
            "catalog: CATALOG_DATABASE_URL: Value error, not a database URL",
        ),
        (
            {"CATALOG_DATABASE_URL": "mysql://root@localhost/db"},
            "catalog: CATALOG_DATABASE_URL: Value error, must be a postgresql URL",
        ),
        (
            {"CATALOG_DATABASE_URL": "postgresql+asyncpg://postgres@127.0.0.1:1/catalog"},
            "catalog: cannot reach the database at 127.0.0.1:1/catalog",
        ),
        (
            {"CATALOG_HOME": "/etc/hostname/catalog"},
            "catalog: CATALOG_HOME /etc/hostname/catalog is not writable",
        ),
        ({"CATALOG_MAX_BLOB_BYTES": "-5"}, "catalog: CATALOG_MAX_BLOB_BYTES: Input should be greater than 0"),
    ],
)
def test_bad_configuration_ends_with_one_clear_line(
    overrides: dict[str, str], expected: str, tmp_path: Path
) -> None:
    env = catalog_env(**{"CATALOG_HOME": str(tmp_path / "home"), **overrides})
    result = run_catalog("serve", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]


def test_a_port_in_use_ends_with_one_clear_line(database_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
        result = run_catalog("serve", "--port", str(port), env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"catalog: port {port} on 127.0.0.1 is in use"]


def test_workers_end_when_their_supervisor_is_killed_outright(database_url: str, tmp_path: Path) -> None:
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    with serving("--workers", "2", env=env) as served:
        served.wait_for("Application startup complete")
        served.wait_for("Application startup complete")
        workers = [
            child
            for child in psutil.Process(served.process.pid).children()
            if "spawn_main" in " ".join(child.cmdline())
        ]
        assert len(workers) == 2
        served.process.kill()  # SIGKILL: no chance to stop its workers itself
        served.process.wait(timeout=30)
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert alive == [], f"orphaned workers: {[p.pid for p in alive]}"
        assert len(gone) == 2


def test_a_started_server_freezes_its_start_up_heap_and_collects_young_objects_less_often(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fan-out tail was the cyclic collector walking every stream's objects (bench_streams:
    p99 434 -> 135 ms at 1000 streams); the serving process (``catalog.serving.CatalogServer``, not
    the app factory) settles the collector once its server has started."""
    import gc

    import catalog.runtime
    from catalog.app import create_app
    from catalog.runtime import GC_YOUNG_THRESHOLD
    from tests.conftest import run_live_server

    before = gc.get_threshold()
    gc.unfreeze()
    monkeypatch.setattr(catalog.runtime, "_settled", False)  # as in a fresh process
    freezes: list[int] = []
    freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), freeze())[1])
    try:
        with run_live_server(create_app(settings)) as served:
            assert httpx.get(f"{served.base_url}/healthz").status_code == 200
            assert gc.get_freeze_count() > 0 and freezes == [1]
            assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
        with run_live_server(create_app(settings)):  # a second start in the process: not again
            assert freezes == [1]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


LOOPBACK_ONLY = ["127.0.0.1", "localhost", "[::1]"]


def test_the_banner_never_shows_a_wildcard_address_and_leads_with_a_name_that_is_accepted() -> None:
    from catalog.cli.serve import banner_lines

    hosts = ["box", "192.0.2.7", "127.0.0.1"]
    default = banner_lines("0.0.0.0", 8000, LOOPBACK_ONLY, hosts)
    assert default == [
        "MCP endpoint   http://127.0.0.1:8000/mcp",
        "admin API docs http://127.0.0.1:8000/docs",
        "console        http://127.0.0.1:8000/console",
        "listening on every address (0.0.0.0): also http://box:8000/mcp, http://192.0.2.7:8000/mcp",
        "note: /mcp answers 421 to a Host that CATALOG_ALLOWED_HOSTS does not list"
        " (now 127.0.0.1, localhost, [::1]): add box, 192.0.2.7 to reach it by those names",
    ]
    named = banner_lines("0.0.0.0", 8000, ["box", "192.0.2.7:8000", "127.0.0.1"], hosts)
    assert named == [
        "MCP endpoint   http://box:8000/mcp",
        "admin API docs http://box:8000/docs",
        "console        http://box:8000/console",
        "listening on every address (0.0.0.0): also http://192.0.2.7:8000/mcp, http://127.0.0.1:8000/mcp",
    ]
    six = banner_lines("::", 8000, LOOPBACK_ONLY, ["box", "2001:db8::1", "::1"])
    assert six[0] == "MCP endpoint   http://[::1]:8000/mcp" and "http://[2001:db8::1]:8000/mcp" in six[3]
    assert banner_lines("127.0.0.1", 9000, LOOPBACK_ONLY) == [
        "MCP endpoint   http://127.0.0.1:9000/mcp",
        "admin API docs http://127.0.0.1:9000/docs",
        "console        http://127.0.0.1:9000/console",
    ]


def test_serve_on_every_address_prints_urls_that_answer(database_url: str, tmp_path: Path) -> None:
    import socket as sockets

    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    with serving(env=env, host="0.0.0.0") as served:
        served.wait_for("Application startup complete")
        printed = served.printed()
        banner = [line for line in printed.splitlines() if line.startswith("catalog: ")]
        urls = [word.rstrip(",") for line in banner for word in line.split() if word.startswith("http://")]
        assert urls and not [url for url in urls if "0.0.0.0" in url], banner
        first = urls[0]
        assert (
            first == f"http://127.0.0.1:{served.port}/mcp"
        )  # the loopback names are the default allowed ones
        assert httpx.get(first.replace("/mcp", "/healthz"), timeout=10).status_code == 200
        assert f"http://{sockets.gethostname()}:{served.port}/mcp" in urls
        assert "CATALOG_ALLOWED_HOSTS" in printed
        assert stop(served) == 0, "".join(served.output)
