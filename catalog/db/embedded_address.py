"""Where the embedded PostgreSQL under a ``CATALOG_HOME`` listens, and as whom a process connects.

The one definition both ways in use: :class:`catalog.db.embedded.EmbeddedPostgres`, which starts
and joins the server (and whose URL every full command connects to), and ``catalog token list``,
which attaches to a server already running without importing SQLAlchemy, pydantic or psutil
(:func:`serving`). Nothing here starts, stops or changes anything.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

USER = "postgres"  # initdb's superuser; the socket accepts it on trust (the socket dir is the wall)
DATABASE = "catalog"
SOCKET_NAME = ".s.PGSQL.5432"
_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux; keep a margin
# postmaster.pid's lines (PostgreSQL's pidfile.h): the socket directory, and the server's status,
# "ready" once it accepts connections ("starting" and "stopping" before and after).
_PID_FILE_SOCKET_DIR = 4
_PID_FILE_STATUS = 7


def pgdata(home: Path) -> Path:
    return home / "pgdata"


def socket_dir(home: Path) -> Path:
    """The server's Unix socket directory: under ``home``, unless that path is too long for a socket."""
    preferred = home / "run"
    if len(str(preferred / SOCKET_NAME)) <= _MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"catalog-pg-{digest}"


def url(home: Path, database: str = DATABASE) -> str:
    """The server's SQLAlchemy URL (asyncpg driver)."""
    return f"postgresql+asyncpg://{USER}@/{database}?host={socket_dir(home)}"


def dsn(home: Path, database: str = DATABASE) -> str:
    """A libpq/asyncpg DSN (no SQLAlchemy driver name)."""
    return f"postgresql://{USER}@/{database}?host={socket_dir(home)}"


def connect_args(home: Path) -> dict[str, str | int]:
    """What SQLAlchemy's asyncpg dialect hands ``asyncpg.connect`` for :func:`url` (a test holds
    the two equal)."""
    return {"host": str(socket_dir(home)), "user": USER, "database": DATABASE}


def serving(home: Path) -> bool:
    """Whether a server on ``home``'s data directory says it is ready on ``home``'s socket.

    The cheap reading (no psutil): a stale postmaster.pid (a server killed) passes it, and then the
    connection is refused at once. Starting a server is ``EmbeddedPostgres.start``'s, which tells a
    stale file from a live server."""
    try:
        lines = (pgdata(home) / "postmaster.pid").read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    if len(lines) <= _PID_FILE_STATUS:
        return False
    return (
        lines[_PID_FILE_SOCKET_DIR] == str(socket_dir(home))
        and lines[_PID_FILE_STATUS].strip() == "ready"
        and (socket_dir(home) / SOCKET_NAME).exists()
    )
