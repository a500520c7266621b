"""The first hour of an operator, through the ``catalog`` command as a process: the warnings, the
questions and the one-line errors it promises, and probes a container's health check can reach."""

from __future__ import annotations

import gzip
import json
import os
import pty
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import asyncpg
import httpx
import pytest

from catalog.core.schemas.grants import GrantIn
from tests.conftest import free_port
from tests.processes import catalog_env, run_catalog, serving, started, stop

pytestmark = pytest.mark.process

Sql = Callable[..., list[asyncpg.Record]]

SECRET = "test-secret-key-0123456789abcdef"


def env_for(database_url: str, tmp_path: Path, **more: str) -> dict[str, str]:
    return catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_SECRET_KEY=SECRET,
        **more,
    )


def test_grant_add_prints_the_admin_apis_warning_for_a_prefix_not_ending_at_a_delimiter(
    database_url: str, tmp_path: Path
) -> None:
    env = env_for(database_url, tmp_path)
    assert run_catalog("tenant", "create", "acme", env=env).returncode == 0
    plain = run_catalog(
        "grant", "add", "--tenant", "acme", "--scope", "s", "--uri-prefix", "file:///a", env=env
    )
    expected = GrantIn.model_validate({"scope": "s", "uriPrefix": "file:///a"}).warnings()
    assert plain.returncode == 0 and plain.stdout.strip().isdigit()
    assert [line for line in plain.stderr.splitlines() if "warning" in line] == [
        f"catalog: warning: {expected[0]}"
    ]
    subtree = run_catalog(
        "grant", "add", "--tenant", "acme", "--scope", "s", "--uri-prefix", "file:///b/", env=env
    )
    assert subtree.returncode == 0 and "warning" not in subtree.stderr


def test_migrate_downgrade_asks_and_without_an_answer_changes_nothing(
    database_url: str, tmp_path: Path
) -> None:
    env = env_for(database_url, tmp_path)
    head = run_catalog("migrate", "current", env=env).stdout.split()[0]
    refused = subprocess.run(
        [sys.executable, "-m", "catalog", "migrate", "downgrade", "base"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1 and refused.stdout == ""
    assert "downgrade the schema" in refused.stderr
    assert refused.stderr.splitlines()[-1] == (
        "catalog: cancelled, nothing changed (pass --yes to confirm without a prompt)"
    )
    assert run_catalog("migrate", "current", env=env).stdout.strip() == f"{head} (head)"
    answered = subprocess.run(
        [sys.executable, "-m", "catalog", "migrate", "downgrade", "base"],
        env=env,
        input="y\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (answered.returncode, answered.stdout) == (0, f"downgraded from {head} to an empty schema\n")
    assert run_catalog("migrate", "downgrade", "base", env=env).returncode == 0  # nothing left to ask about
    assert run_catalog("migrate", env=env).returncode == 0
    assert run_catalog("migrate", "downgrade", "base", "--yes", env=env).stdout == (
        f"downgraded from {head} to an empty schema\n"
    )


def test_restoring_a_truncated_gzip_backup_is_one_line_not_a_traceback(
    database_url: str, tmp_path: Path
) -> None:
    env = env_for(database_url, tmp_path)
    run_catalog("tenant", "create", "origin", env=env)
    lines = [json.dumps({"uri": f"test://r{i}", "name": "r", "text": f"{i}" * 200}) for i in range(50)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    assert run_catalog("import", "--tenant", "origin", str(tmp_path / "in.jsonl"), env=env).returncode == 0
    backup = tmp_path / "b.gz"
    assert run_catalog("backup", "--tenant", "origin", "--no-progress", str(backup), env=env).returncode == 0
    whole = backup.read_bytes()
    assert gzip.decompress(whole)  # a sound gzip file, cut below as a failed copy would
    for cut in (len(whole) // 2, len(whole) - 4, 12):
        truncated = tmp_path / f"t{cut}.gz"
        truncated.write_bytes(whole[:cut])
        result = run_catalog("restore", "--tenant", "copy", "--no-progress", str(truncated), env=env)
        assert result.returncode == 1 and result.stdout == "", result.stderr
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith(f"catalog: {truncated}:") and "the file is damaged" in result.stderr
    assert "copy" not in run_catalog("tenant", "list", env=env).stdout


def test_health_probes_answer_a_loopback_host_that_the_allowed_hosts_do_not_name(
    database_url: str, tmp_path: Path
) -> None:
    env = env_for(database_url, tmp_path, CATALOG_ALLOWED_HOSTS="catalog.example.com")
    with serving(env=env) as served:
        started(served)
        url = served.base_url
        for host in ("127.0.0.1", f"127.0.0.1:{served.port}", "localhost", "[::1]:8000"):
            assert httpx.get(f"{url}/healthz", headers={"Host": host}, timeout=10).json() == {"status": "ok"}
            assert httpx.get(f"{url}/readyz", headers={"Host": host}, timeout=10).status_code == 200
        listed = httpx.get(f"{url}/healthz", headers={"Host": "catalog.example.com"}, timeout=10)
        assert listed.status_code == 200
        # Every other route, and the probes under any other unlisted name, keep the Host check.
        assert (
            httpx.get(f"{url}/admin/v1/tenants", headers={"Host": "127.0.0.1"}, timeout=10).status_code == 421
        )
        assert httpx.post(f"{url}/mcp", headers={"Host": "localhost"}, json={}, timeout=10).status_code == 421
        assert httpx.get(f"{url}/healthz", headers={"Host": "rebound.example"}, timeout=10).status_code == 421
        assert stop(served) == 0


def test_a_generated_admin_token_stays_out_of_a_log_stream_and_the_banner_names_its_file(
    database_url: str, tmp_path: Path
) -> None:
    env = env_for(database_url, tmp_path)  # no CATALOG_ADMIN_TOKEN: serve generates one
    kept = tmp_path / "home" / "admin_token"
    with serving(env=env) as first:
        started(first)
        assert stop(first) == 0
    token = kept.read_text().strip()
    assert token.startswith("cat_") and kept.stat().st_mode & 0o777 == 0o600
    assert token not in first.printed()
    assert f"catalog: platform admin token generated and kept in {kept} " in first.printed()
    with serving(env=env) as again:
        started(again)
        assert stop(again) == 0
    assert (
        token not in again.printed() and f"catalog: platform admin token kept in {kept}\n" in again.printed()
    )


def test_a_generated_admin_token_is_shown_once_on_a_terminal(database_url: str, tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    port = free_port("127.0.0.1")
    command = [sys.executable, "-m", "catalog", "serve", "--port", str(port)]
    process = subprocess.Popen(
        command, env=env_for(database_url, tmp_path), stdout=secondary, stderr=secondary
    )
    os.close(secondary)
    shown = b""
    try:
        while b"Application startup complete" not in shown:
            ready, _, _ = select.select([primary], [], [], 60)
            assert ready, shown.decode(errors="replace")
            shown += os.read(primary, 65536)
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.close(primary)
    kept = tmp_path / "home" / "admin_token"
    line = f"catalog: platform admin token (shown once, kept in {kept}): {kept.read_text().strip()}"
    assert line in shown.decode().replace("\r\n", "\n").splitlines()


def test_help_and_token_list_import_no_server_machinery(database_url: str, tmp_path: Path) -> None:
    """``catalog --help`` loads neither the settings' pydantic nor the database layer, ``token list``
    neither of them but the bare driver, and a command on the database none of the web stack: what
    a command does not use is not imported."""
    env = env_for(database_url, tmp_path)
    assert run_catalog("tenant", "create", "acme", env=env).returncode == 0
    heavy = ("fastapi", "starlette", "mcp", "uvicorn", "alembic", "jwt", "httpx", "opentelemetry")
    for argv, also_absent in [
        (["--help"], ("pydantic", "pydantic_settings", "sqlalchemy", "asyncpg")),
        (["token", "list", "--tenant", "acme"], ("pydantic", "pydantic_settings", "sqlalchemy")),
    ]:
        code = (
            "import sys, contextlib, io\n"
            "from catalog.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            f"        code = main({argv!r})\n"
            "    except SystemExit as exc:\n"
            "        code = exc.code\n"
            "print(code, *sorted({name.split('.')[0] for name in sys.modules}))\n"
        )
        shown = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        status, *loaded = shown.stdout.split()
        assert status == "0", shown.stderr
        assert sorted(set(loaded) & {*heavy, *also_absent}) == [], argv


# What `catalog token list` must start without: its quick path reads the environment and the
# database on the bare driver (catalog.environment, catalog.core.direct.token_list).
HEAVY = ("sqlalchemy", "pydantic", "pydantic_settings", "alembic", "catalog.settings", "catalog.bootstrap")


# Settings a container sets routinely, each a value the quick reader vouches for.
CONTAINER_SETTINGS = {
    "CATALOG_LOG_FORMAT": "json",
    "CATALOG_POOL_SIZE": "20",
    "CATALOG_POOL_WAIT_SECONDS": "2.5",
    "CATALOG_MCP_FAST_PATH": "on",
    "CATALOG_METRICS_ACCESS": "open",
    "CATALOG_DATABASE_POOLER": "none",
    "CATALOG_STATEMENT_TIMEOUT_MS": "30000",
}
# A name in another case, which the model reads as CATALOG_POOL_SIZE and the quick reader leaves to
# it: the full command answers.
TO_THE_MODEL = {"catalog_pool_size": "2"}


def with_imports(*argv: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``catalog ARGV`` as a process, and every module it imported (``-X importtime``, whose lines
    are taken out of the stderr returned)."""
    shown = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "catalog", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = shown.stderr.splitlines(keepends=True)
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    shown.stderr = "".join(line for line in lines if not line.startswith("import time:"))
    return shown, imported


def test_token_list_prints_what_the_full_command_prints_without_importing_sqlalchemy_or_pydantic(
    database_url: str, tmp_path: Path, sql: Sql
) -> None:
    env = env_for(database_url, tmp_path)
    for slug in ("acme", "other"):
        assert run_catalog("tenant", "create", slug, env=env).returncode == 0
    minted = [
        ["--scope", "read", "--scope", "write", "--name", "agent one"],
        ["--admin", "--expires-in", "1", "--name", "tab\there"],
        ["--scope", "read"],
        [],
    ]
    for flags in minted:
        assert run_catalog("token", "create", "--tenant", "acme", *flags, env=env).returncode == 0
    assert run_catalog("token", "create", "--tenant", "other", "--admin", env=env).returncode == 0
    ids = [row["id"] for row in sql("SELECT id FROM tokens ORDER BY id")]
    assert run_catalog("token", "revoke", "--tenant", "acme", str(ids[0]), env=env).returncode == 0
    sql("UPDATE tokens SET expires_at = now() - interval '1 hour' WHERE id = $1", ids[2])

    quick, quick_imports = with_imports(
        "token", "list", "--tenant", "acme", env={**env, **CONTAINER_SETTINGS}
    )
    full, full_imports = with_imports("token", "list", "--tenant", "acme", env={**env, **TO_THE_MODEL})

    assert (quick.returncode, quick.stderr) == (0, "") and (full.returncode, full.stderr) == (0, "")
    assert quick.stdout == full.stdout
    assert sorted(name for name in quick_imports if name.split(".")[0] in HEAVY or name in HEAVY) == []
    assert "catalog.core.direct.token_list" in quick_imports
    assert {"sqlalchemy", "pydantic", "catalog.bootstrap"} <= full_imports  # the other path indeed
    rows = [line.split("\t") for line in quick.stdout.splitlines()]
    assert [(row[0], row[1], row[2], row[3], row[6]) for row in rows] == [
        (str(ids[0]), "revoked", "read,write", "no", "agent one"),
        (str(ids[1]), "live", "", "yes", "tab here"),
        (str(ids[2]), "expired", "read", "no", ""),
        (str(ids[3]), "live", "", "no", ""),
    ]
    assert rows[0][4] == "" and rows[1][4].endswith("Z") and all(row[5].endswith("Z") for row in rows)


def test_token_list_fails_with_the_full_commands_one_line_errors(database_url: str, tmp_path: Path) -> None:
    env = env_for(database_url, tmp_path)
    unknown, imported = with_imports("token", "list", "--tenant", "nope", env=env)
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (1, "", "catalog: no tenant 'nope'\n")
    assert "catalog.core.direct.token_list" in imported  # tried first, then the full command said it

    closed = env_for(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port('127.0.0.1')}/x", tmp_path)
    unreachable = run_catalog("token", "list", "--tenant", "acme", env=closed)
    assert (unreachable.returncode, unreachable.stdout) == (1, "")
    assert unreachable.stderr.startswith("catalog: cannot reach the database at 127.0.0.1:")
    assert len(unreachable.stderr.splitlines()) == 1

    bad = run_catalog("token", "list", "--tenant", "acme", env={**env, "CATALOG_MCP_FAST_PATH": "maybe"})
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr == "catalog: CATALOG_MCP_FAST_PATH: Input should be 'on', 'off' or 'shadow'\n"

    # A number the quick reader reads, out of the model's bounds: the model's words, not a listing.
    low = run_catalog("token", "list", "--tenant", "acme", env={**env, "CATALOG_POOL_SIZE": "0"})
    assert (low.returncode, low.stdout) == (1, "")
    assert low.stderr == "catalog: CATALOG_POOL_SIZE: Input should be greater than or equal to 1\n"


def test_token_list_attaches_to_a_running_embedded_server_and_prints_what_the_full_command_prints(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    env = catalog_env(CATALOG_HOME=str(home), CATALOG_SECRET_KEY=SECRET)
    with serving(env=env) as served:
        started(served)
        assert run_catalog("tenant", "create", "acme", env=env).returncode == 0
        for flags in (["--scope", "read", "--name", "agent one"], ["--admin", "--expires-in", "1"]):
            assert run_catalog("token", "create", "--tenant", "acme", *flags, env=env).returncode == 0

        quick, quick_imports = with_imports(
            "token", "list", "--tenant", "acme", env={**env, **CONTAINER_SETTINGS}
        )
        full, full_imports = with_imports("token", "list", "--tenant", "acme", env={**env, **TO_THE_MODEL})
        unknown, unknown_imports = with_imports("token", "list", "--tenant", "nope", env=env)

        assert (quick.returncode, quick.stderr) == (0, "") and (full.returncode, full.stderr) == (0, "")
        assert quick.stdout == full.stdout
        assert [line.split("\t")[1:4] for line in quick.stdout.splitlines()] == [
            ["live", "read", "no"],
            ["live", "", "yes"],
        ]
        assert sorted(name for name in quick_imports if name.split(".")[0] in HEAVY or name in HEAVY) == []
        assert {"sqlalchemy", "pydantic", "catalog.bootstrap"} <= full_imports
        # Tried on the running server, then said by the full command, which joined it.
        assert (unknown.returncode, unknown.stdout, unknown.stderr) == (1, "", "catalog: no tenant 'nope'\n")
        assert {"catalog.core.direct.token_list", "sqlalchemy"} <= unknown_imports
        assert stop(served) == 0, "".join(served.output)

    # Nothing running: the full command starts the server, answers the same, and stops it again.
    alone, alone_imports = with_imports("token", "list", "--tenant", "acme", env=env)
    assert (alone.returncode, alone.stdout) == (0, quick.stdout)
    assert "sqlalchemy" in alone_imports
    assert not (home / "pgdata" / "postmaster.pid").exists()
