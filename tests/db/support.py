"""What the database tests share: a tenant row made directly, and waiting on PostgreSQL's own
account of a lock wait instead of sleeping for one."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest


async def wait_for_a_lock_wait(conn: asyncpg.Connection, within: float = 30.0) -> None:
    """Until another backend of this database waits for a lock (``pg_stat_activity``)."""
    deadline = time.monotonic() + within
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    while not await conn.fetchval(query):
        if time.monotonic() > deadline:
            pytest.fail(f"no backend waited for a lock within {within}s")
        await asyncio.sleep(0.02)


async def make_tenant(conn: asyncpg.Connection, slug: str) -> int:
    """A tenant row made directly (as the superuser), its id."""
    return await conn.fetchval("INSERT INTO tenants (slug, name) VALUES ($1, $1) RETURNING id", slug)
