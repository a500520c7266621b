"""The bare asyncpg driver of a pooled connection, for the statements of the MCP fast path.

Only the driver executor (:mod:`catalog.core.direct`) uses it (an import-linter contract in
pyproject.toml): everything else reaches the database through SQLAlchemy (``engine.transaction``).
"""

from __future__ import annotations

from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from catalog.db.engine import _POOLER_SESSIONS, _pooled_connection, _request_connection
from catalog.db.scope import TenantScope, scope_settings, session_settings, set_local


def _driver_of(raw: PoolProxiedConnection) -> asyncpg.Connection:
    """The asyncpg connection under a pooled one (only a closed or invalidated one has none)."""
    driver = raw.driver_connection
    if driver is None:
        raise RuntimeError("a pooled connection without its driver connection")
    return driver


class _DriverStatements:
    """A pooled connection's asyncpg driver for a few statements on the per-request hot path,
    optionally inside a transaction opened by ``begin`` (one simple-query message) and committed on
    a clean exit. Built by ``self_scoped_driver`` and ``scoped_driver``.

    A driver error is not seen by SQLAlchemy's disconnect handling: a connection it closed is
    dropped at the next checkout (``_refuse_closed_connection``). After any error the connection is
    discarded, its transaction with it. A class for the reason ``request_connection`` is.
    """

    __slots__ = ("_begin", "_conn", "_driver", "_engine", "_held", "_pooled")

    def __init__(self, engine: AsyncEngine, begin: str | None) -> None:
        self._engine = engine
        self._begin = begin

    async def __aenter__(self) -> asyncpg.Connection:
        driver = await self._checkout()
        if self._begin is not None:
            try:
                await driver.execute(self._begin)  # no arguments: one simple-query message
            except BaseException as exc:
                await self._release(type(exc), exc, exc.__traceback__)
                raise
        self._driver = driver
        return driver

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if exc_type is None and self._begin is not None:
            try:
                await self._driver.execute("COMMIT")
            except BaseException as failed:
                await self._release(type(failed), failed, failed.__traceback__)
                raise
        await self._release(exc_type, exc, tb)

    async def _checkout(self) -> asyncpg.Connection:
        held = _request_connection.get()
        if held is not None and not held.busy and held.engine is self._engine and held.conn is None:
            raw = held.raw
            if raw is not None and raw.is_valid:
                held.busy = True  # the request's bare connection (``request_connection``)
                self._held = held
                return _driver_of(raw)
        self._held = None
        self._pooled = _pooled_connection(self._engine)
        self._conn = conn = await self._pooled.__aenter__()
        try:
            sync = conn.sync_connection
            if sync is not None and not sync.closed and not sync.invalidated:
                raw = sync.connection  # checked out and valid: no I/O, so no greenlet to spawn
            else:
                raw = await conn.get_raw_connection()
        except BaseException as exc:
            try:
                await conn.invalidate()
            finally:
                await self._pooled.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return _driver_of(raw)

    async def _release(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        # After a failed or cancelled statement the driver's protocol state is unknown (one caught
        # mid-operation refuses the next statement with InternalClientError): the connection is
        # discarded, never handed to another request.
        held = self._held
        if held is not None:
            try:
                if exc_type is not None and held.raw is not None:
                    await greenlet_spawn(held.raw.invalidate)
            finally:
                held.busy = False
            return
        try:
            if exc_type is not None:
                await self._conn.invalidate()
        finally:
            await self._pooled.__aexit__(exc_type, exc, tb)


def self_scoped_driver(engine: AsyncEngine) -> _DriverStatements:
    """A pooled connection's driver for one statement that binds its own scope (a ``catalog_*``
    function): no scope, so any other statement run on it sees no tenant's rows at all.

    Outside any transaction on a direct connection: no BEGIN and COMMIT round trips, and none of
    SQLAlchemy's per-statement work. Behind a transaction pooler the session's settings
    (``statement_timeout``, the role) hold only inside a transaction, so there the statement runs
    in one opened with them (the BEGIN in the same message, a COMMIT round trip more): without it
    a statement waiting on a lock would wait forever.
    """
    session = _POOLER_SESSIONS.get(engine.sync_engine)
    if session is None:
        return _DriverStatements(engine, None)
    return _DriverStatements(engine, "BEGIN; " + set_local(session_settings(session), literal=True))


def scoped_driver(engine: AsyncEngine, scope: TenantScope) -> _DriverStatements:
    """A pooled connection's asyncpg driver inside a transaction bound to ``scope`` (what
    ``transaction`` gives through SQLAlchemy), for a few statements on a per-request path
    (``catalog.db.statements``): BEGIN, behind a pooler the session's settings, and the scope go
    in one message, one round trip where SQLAlchemy takes two; COMMIT on a clean exit.
    """
    statements = ["BEGIN"]
    session = _POOLER_SESSIONS.get(engine.sync_engine)
    if session is not None:
        statements.append(set_local(session_settings(session), literal=True))
    statements.append(set_local(scope_settings(scope), literal=True))
    return _DriverStatements(engine, "; ".join(statements))
