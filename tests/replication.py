"""A real PostgreSQL 15 primary and a streaming standby, for the read-replica tests.

Self-contained (whatever ``CATALOG_TEST_DATABASE_URL`` names): the cluster is built by
``bench/replication.py`` (shared with ``bench_replica``): ``initdb`` a primary with
``wal_level=replica`` on a free port, ``pg_basebackup -R`` a standby from it, start it with
``hot_standby``; the fixture then migrates the primary with catalog's migrations (the standby
replays them). The server refuses to run as root, so every server command runs as the
``postgres`` OS user when this process is root. Skipped, with the reason, only when the binaries
are absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.replication import PG_BIN, Replication, Server, Unavailable, stop_replication
from bench.replication import start_replication as _start_replication

__all__ = [
    "PG_BIN",
    "Replication",
    "Server",
    "replication",
    "start_replication",
    "stop_replication",
    "wait_until",
]


def start_replication() -> tuple[Replication, Path]:
    """A running primary and standby, and the directory holding both; skipped when unavailable."""
    try:
        return _start_replication()
    except Unavailable as reason:
        pytest.skip(str(reason))


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
