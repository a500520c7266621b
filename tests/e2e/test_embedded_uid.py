"""The embedded PostgreSQL for a user id with no passwd entry (``docker run --user 12345``,
OpenShift's random ids): ``catalog`` commands as a process of that id, on a fresh ``CATALOG_HOME``.

The process starts as root (the suite's user) and drops to the id itself: the interpreter may live
where another id cannot read (a pyenv under ``/root``), so what the command imports is imported
before the drop; everything it runs after it (initdb, the server, psql) runs as that id."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalog.db.embedded import _nss_wrapper, binaries_dir
from tests.processes import catalog_env

pytestmark = pytest.mark.process

UID = 12345

AS_UID = """
import os, sys
import catalog.cli, catalog.bootstrap, catalog.db.embedded, catalog.db.migrate
import importlib.readers, importlib.resources, importlib.metadata, logging.config, encodings.idna
import alembic.command, alembic.config, asyncpg, sqlalchemy.ext.asyncio
if sys.argv[1] == "user-namespace":
    catalog.db.embedded._nss_wrapper = lambda: None
os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))
sys.exit(catalog.cli.main(sys.argv[3:]))
"""


def no_passwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return True
    return False


def reachable_by_another_user(path: Path) -> bool:
    """Whether a user id that is neither the owner nor in the group can read ``path`` (every
    directory above it searchable by others, the file itself readable by them)."""
    if not path.stat().st_mode & 0o004:
        return False
    return all(parent.stat().st_mode & 0o001 for parent in path.resolve().parents)


def unreachable_code() -> str | None:
    """What the other user id could not read here: a checkout or virtualenv made by ``mktemp -d``
    (mode 0700, as CI's are) hides catalog's migrations or PostgreSQL's binaries from it."""
    for path in (
        Path(__file__).resolve().parents[2] / "migrations" / "__init__.py",
        binaries_dir() / "initdb",
    ):
        if not reachable_by_another_user(path):
            return f"{path} is not readable by another user id here (a 0700 directory above it)"
    return None


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory of the user id's own, where it can reach it (pytest's tmp_path is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="catalog-uid-"))
    os.chown(path, UID, UID)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user id needs root")
@pytest.mark.parametrize(
    "way",
    [
        pytest.param(
            "nss-wrapper",
            marks=pytest.mark.skipif(_nss_wrapper() is None, reason="libnss-wrapper is not installed"),
        ),
        "user-namespace",
    ],
)
def test_catalog_runs_its_embedded_postgres_as_a_user_id_with_no_passwd_entry(base: Path, way: str) -> None:
    assert no_passwd_entry(UID)
    unreachable = unreachable_code()
    if unreachable is not None:
        pytest.skip(unreachable)
    env = catalog_env(CATALOG_HOME=str(base / "home"), HOME=str(base))

    def as_uid(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", AS_UID, way, str(UID), *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            cwd=base,
        )

    migrated = as_uid("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.startswith("upgraded from an empty schema to ")
    created = as_uid("tenant", "create", "acme")
    assert created.returncode == 0, created.stderr
    assert as_uid("tenant", "list").stdout.split("\t")[0] == "acme"
    pgdata = base / "home" / "pgdata"
    assert pgdata.stat().st_uid == UID and (pgdata / "PG_VERSION").is_file()
    assert not (pgdata / "postmaster.pid").exists()  # the last command to let go stopped it
