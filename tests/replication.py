"""A real PostgreSQL 15 primary and a streaming standby, for the read-replica tests.

Self-contained (whatever ``CATALOG_TEST_DATABASE_URL`` names): ``initdb`` a primary with
``wal_level=replica`` on a free port, ``pg_basebackup -R`` a standby from it, start it with
``hot_standby``, migrate the primary with catalog's migrations (the standby replays them). The
server refuses to run as root, so every server command runs as the ``postgres`` OS user when this
process is root, in directories under a temporary directory chowned to it. Skipped, with the
reason, only when the binaries are absent.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import free_port

PG_BIN = Path(os.environ.get("CATALOG_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
START_TIMEOUT_S = 60.0


def _as_server_user() -> list[str]:
    """The prefix that runs a command as the ``postgres`` OS user when this process is root."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _run(*argv: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [*_as_server_user(), *(str(part) for part in argv)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done


@dataclass
class Server:
    """One PostgreSQL server of the pair: its data directory and port."""

    data: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        _run(
            PG_BIN / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", str(int(START_TIMEOUT_S)), "start"
        )

    def stop(self) -> None:
        _run(PG_BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        return _run(PG_BIN / "pg_ctl", "-D", self.data, "status", check=False).returncode == 0


@dataclass
class Replication:
    primary: Server
    standby: Server


def _owned_tempdir() -> Path:
    root = Path(tempfile.mkdtemp(prefix="catalog-replication-"))
    if os.geteuid() == 0:
        server_user = pwd.getpwnam("postgres")
        os.chown(root, server_user.pw_uid, server_user.pw_gid)
    root.chmod(0o700)
    return root


def _configure_primary(data: Path) -> None:
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "wal_level": "replica",
        "max_wal_senders": "5",
        "wal_keep_size": "'256MB'",
        "hot_standby": "on",
        "fsync": "off",  # a test cluster: durability is not what is tested
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "unix_socket_directories": "''",  # TCP only: a socket in the data directory would be copied
    }
    _append(data / "postgresql.conf", "".join(f"{name} = {value}\n" for name, value in settings.items()))
    _append(data / "pg_hba.conf", "host replication postgres 127.0.0.1/32 trust\n")


def _append(path: Path, text: str) -> None:
    # Written by root into a file the server user owns: appending keeps its owner and mode.
    with path.open("a") as handle:
        handle.write(text)


def start_replication() -> tuple[Replication, Path]:
    """A running primary and standby (see the module docstring), and the directory holding both."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_basebackup").exists():
        pytest.skip(f"PostgreSQL server binaries (initdb, pg_basebackup) not found in {PG_BIN}")
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser to run the servers as the postgres OS user")
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres OS user to run the servers as")
    root = _owned_tempdir()
    primary = Server(root / "primary", free_port(), root / "primary.log")
    standby = Server(root / "standby", free_port(), root / "standby.log")
    _run(PG_BIN / "initdb", "-D", primary.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    _configure_primary(primary.data)
    _append(primary.data / "postgresql.conf", f"port = {primary.port}\n")
    primary.start()
    _run(
        PG_BIN / "pg_basebackup",
        "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
        "-D", standby.data, "-R", "-X", "stream", "--no-sync",
    )  # fmt: skip
    _append(standby.data / "postgresql.conf", f"port = {standby.port}\n")
    standby.start()
    return Replication(primary, standby), root


def stop_replication(replication: Replication, root: Path) -> None:
    for server in (replication.standby, replication.primary):
        if server.running():
            server.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def replication() -> Iterator[Replication]:
    """A primary migrated to catalog's head and its streaming standby, for the session."""
    from catalog.db import migrate

    pair, root = start_replication()
    try:
        migrate.upgrade(pair.primary.url)
        yield pair
    finally:
        stop_replication(pair, root)


def wait_until(condition: object, timeout: float = 30.0, what: str = "the condition") -> None:
    """Poll ``condition()`` until it is true (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not hold within {timeout}s")
        time.sleep(0.05)
