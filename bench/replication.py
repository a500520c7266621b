"""A real PostgreSQL 15 primary and a streaming hot standby: the read-replica tests' cluster
(``tests/replication.py``) and ``bench_replica``'s.

``initdb`` a primary with ``wal_level=replica`` on a free port, ``pg_basebackup -R`` a standby from
it, start it with ``hot_standby``. The server refuses to run as root, so every server command runs
as the ``postgres`` OS user when this process is root, in directories under a temporary directory
chowned to it. :class:`Unavailable` (with the reason) when the binaries, or that user, are absent.
Nothing here imports catalog or pytest.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_BIN = Path(os.environ.get("CATALOG_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
START_TIMEOUT_S = 60.0


class Unavailable(RuntimeError):
    """No cluster can be built on this machine (the reason is the message)."""


def free_port(host: str = "127.0.0.1") -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


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


def _configure_primary(data: Path, extra: dict[str, str]) -> None:
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "wal_level": "replica",
        "max_wal_senders": "5",
        "wal_keep_size": "'256MB'",
        "hot_standby": "on",
        "fsync": "off",  # a throwaway cluster: durability is not what is tested or measured
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "unix_socket_directories": "''",  # TCP only: a socket in the data directory would be copied
        **extra,
    }
    _append(data / "postgresql.conf", "".join(f"{name} = {value}\n" for name, value in settings.items()))
    _append(data / "pg_hba.conf", "host replication postgres 127.0.0.1/32 trust\n")


def _append(path: Path, text: str) -> None:
    # Written by root into a file the server user owns: appending keeps its owner and mode.
    with path.open("a") as handle:
        handle.write(text)


def check_available() -> None:
    """Raise :class:`Unavailable` when no cluster can be built here."""
    if not (PG_BIN / "initdb").exists() or not (PG_BIN / "pg_basebackup").exists():
        raise Unavailable(f"PostgreSQL server binaries (initdb, pg_basebackup) not found in {PG_BIN}")
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            raise Unavailable("running as root without runuser to run the servers as the postgres OS user")
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise Unavailable(
                "running as root and there is no postgres OS user to run the servers as"
            ) from None


def start_replication(settings: dict[str, str] | None = None) -> tuple[Replication, Path]:
    """A running primary and standby (see the module docstring), and the directory holding both.
    ``settings`` are added to the primary's postgresql.conf (the standby copies it)."""
    check_available()
    root = _owned_tempdir()
    primary = Server(root / "primary", free_port(), root / "primary.log")
    standby = Server(root / "standby", free_port(), root / "standby.log")
    _run(PG_BIN / "initdb", "-D", primary.data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    _configure_primary(primary.data, settings or {})
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


@contextlib.contextmanager
def replicated(settings: dict[str, str] | None = None) -> Iterator[Replication]:
    """:func:`start_replication` ... :func:`stop_replication`, as a context manager."""
    pair, root = start_replication(settings)
    try:
        yield pair
    finally:
        stop_replication(pair, root)
