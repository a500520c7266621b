"""The async engine, and transactions bound to a tenant for row-level security."""

from __future__ import annotations

import contextlib
import json
import weakref
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from catalog.db.scope import (
    APP_ROLE_PROBE,
    APPLICATION_NAME,
    COMMAND_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    TenantScope,
    app_role,
    scope_settings,
    session_settings,
    set_local,
)
from catalog.observability.metrics import observe_pool

NOTIFY_CHANNEL = "catalog_changes"
SESSIONS_CHANNEL = "catalog_sessions"  # between the processes serving 2025-11-25 sessions


def create_engine(
    url: str | URL,
    *,
    statement_timeout_ms: int = 15_000,
    pool_size: int = 30,
    max_overflow: int = 0,
    pool_timeout: float | None = None,
    app_role: str | None = None,
    transaction_pooler: bool = False,
) -> AsyncEngine:
    """An asyncpg engine; ``app_role`` (see ``probe_app_role``) makes RLS apply to a superuser too.

    A fixed pool of up to ``pool_size`` connections, opened on demand and kept: overflow
    connections are opened and closed per checkout, which under steady concurrency above the pool
    size costs a PostgreSQL connection start-up per request; waiting for a pooled one is cheaper.
    A checkout waits ``pool_timeout`` seconds at most, then raises ``sqlalchemy.exc.TimeoutError``
    (``pool_exhausted``), which both surfaces answer with 503 and ``Retry-After``.

    ``transaction_pooler``: ``url`` is PgBouncer in transaction mode, where consecutive
    transactions of one client connection run on different server sessions. So no state may
    outlive a transaction: no named prepared statements (asyncpg's statement cache off: every
    statement is an unnamed one that asyncpg parses again in the same message batch as each
    execution; SQLAlchemy's own cache of those statement objects stays on, which spares the
    separate prepare round trip of a repeated statement), and the role and the statement timeout,
    otherwise startup parameters of the session (which PgBouncer refuses), are set at the start of
    every transaction, transaction-locally (``_bind_session``).
    """
    server_settings = {"application_name": APPLICATION_NAME}
    connect_args: dict[str, object] = {"command_timeout": COMMAND_TIMEOUT_S, "timeout": CONNECT_TIMEOUT_S}
    if transaction_pooler:
        connect_args |= {"statement_cache_size": 0}
    else:
        server_settings["statement_timeout"] = str(statement_timeout_ms)
        if app_role:
            server_settings["role"] = app_role
    engine = create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        pool_timeout=POOL_TIMEOUT_S if pool_timeout is None else pool_timeout,
        connect_args={"server_settings": server_settings, **connect_args},
        json_deserializer=loads_json,
    )
    event.listen(engine.sync_engine, "checkout", _refuse_closed_connection)
    if transaction_pooler:
        session = {"role": app_role or "", "statement_timeout": str(statement_timeout_ms)}
        event.listen(engine.sync_engine, "begin", lambda conn: _bind_session(conn, session))
        _POOLER_SESSIONS[engine.sync_engine] = session
    observe_pool(engine)
    return engine


def loads_json(text: str | bytes) -> Any:
    """A JSONB value as Python: orjson (a listing page decodes hundreds of them; the standard
    library's decoder was a tenth of a page's CPU), the standard library for what orjson refuses
    (an integer beyond 64 bits, which PostgreSQL keeps)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


# The session settings each transaction binds behind a transaction pooler, by engine.
_POOLER_SESSIONS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def _bind_session(conn: Connection, session: dict[str, str]) -> None:
    """What a session would carry, for one transaction behind a transaction pooler (one round trip
    more per transaction; the first statement of the transaction, so everything after obeys it)."""
    settings = session_settings(session)
    conn.exec_driver_sql(set_local(settings), tuple(value for _, value in settings))


def _refuse_closed_connection(dbapi_connection: object, _record: object, _proxy: object) -> None:
    """Hand out only connections whose socket is still open; the pool replaces the others.

    Stands in for ``pool_pre_ping``, which costs three round trips (BEGIN, a query, ROLLBACK) on
    every checkout. A restarted or terminated server closes its sockets, and asyncpg notices that
    without a round trip; a connection that dies silently fails its first statement instead, which
    invalidates the pool (SQLAlchemy's disconnect handling) and answers that one request with 503.
    """
    if dbapi_connection.driver_connection.is_closed():  # type: ignore[attr-defined]
        raise sa_exc.DisconnectionError("the connection was closed by the server")


POOL_TIMEOUT_S = 10.0

# SQLSTATE classes that mean "the database cannot serve now", not "this request is wrong":
# 08 connection exception, 53 insufficient resources (too many connections), 57 operator
# intervention (admin shutdown, cannot connect now, query_canceled = statement_timeout).
_UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57")


# What a database failure can surface as, on either executor (a handler then asks
# ``database_unavailable`` whether it is an outage): the driver's own types live only here.
DATABASE_EXCEPTION_TYPES: tuple[type[Exception], ...] = (
    sa_exc.SQLAlchemyError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


def pool_exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` is a request that waited its limit for a pooled connection: every one busy
    (overload, or statements held up in the database), as opposed to the database being down."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, sa_exc.TimeoutError):
            return True
        if isinstance(current, BaseExceptionGroup):
            return bool(current.exceptions) and all(pool_exhausted(e) for e in current.exceptions)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` is the database being unreachable, shutting down or too slow (a 503 / retry),
    as opposed to a bug or bad input. The one classification both surfaces use."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            # A task group's failure (the SDK's, anyio's) is the database's only if all of it is.
            if current.exceptions and all(database_unavailable(e) for e in current.exceptions):
                return True
            continue
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(
            current,
            sa_exc.OperationalError
            | sa_exc.InterfaceError
            | sa_exc.TimeoutError
            | sa_exc.DisconnectionError
            | asyncpg.InterfaceError
            | asyncpg.PostgresConnectionError
            # A connection whose protocol an outage caught mid-operation (it is then discarded:
            # ``self_scoped_driver``); the next attempt gets another.
            | asyncpg.InternalClientError
            | ConnectionError
            | TimeoutError,
        ):
            return True
        if isinstance(current, OSError) and not isinstance(current, FileExistsError | PermissionError):
            return True
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES:
            return True
        todo.extend([getattr(current, "orig", None), current.__cause__, current.__context__])
    return False


async def probe_app_role(url: str | URL, *, transaction_pooler: bool = False) -> str | None:
    """The role to run as so that row-level security binds even a superuser login (``APP_ROLE_PROBE``)."""
    engine = create_engine(url, pool_size=1, max_overflow=0, transaction_pooler=transaction_pooler)
    try:
        async with engine.connect() as conn:
            probe = (await conn.exec_driver_sql(APP_ROLE_PROBE)).one()._mapping
    finally:
        await engine.dispose()
    return app_role(probe["is_superuser"], probe["role_exists"])


@dataclass
class _RequestConnection:
    engine: AsyncEngine
    # Checked out eagerly as a bare pool connection: a fast-path request's self-scoped statement needs
    # only its driver. Wrapped into ``conn`` (and owned by it) once a transaction needs SQLAlchemy.
    raw: PoolProxiedConnection | None = None
    conn: AsyncConnection | None = None  # checked out at first use, so a failure happens there
    busy: bool = False


# The connection a short request holds for all its statements (see ``request_connection``).
_request_connection: ContextVar[_RequestConnection | None] = ContextVar(
    "catalog_request_connection", default=None
)


class request_connection:
    """One pooled connection for the whole of a short request, like a session per request.

    The transactions (``transaction``) and self-scoped statements (``driver.self_scoped_driver``) the
    request runs on ``engine`` use it in turn instead of checking out a connection each; one that
    finds it busy (a concurrent task of the same request) checks out its own. Only for requests
    that end promptly: a stream must not hold a pooled connection for its lifetime.

    ``eager``: check it out now, so that an exhausted pool fails here, before the request is
    handed to code that would answer the failure inside a response (a JSON-RPC error with 200).
    It is checked out from the pool as a bare connection (no ``Connection`` or ``AsyncConnection``
    built around it until a transaction needs one): a fast-path request runs one self-scoped statement
    on its driver, and the wrappers and their greenlets were a tenth of such a request.

    A class rather than a generator: it wraps every short MCP request, and a generator-based
    context manager costs a generator and its frames each time.
    """

    __slots__ = ("_eager", "_held", "_token")

    def __init__(self, engine: AsyncEngine, *, eager: bool = False) -> None:
        self._held = _RequestConnection(engine)
        self._eager = eager

    async def __aenter__(self) -> None:
        held = self._held
        if self._eager:
            held.raw = await held.engine.raw_connection()
        self._token = _request_connection.set(held)

    async def __aexit__(self, *exc_info: object) -> None:
        _request_connection.reset(self._token)
        held = self._held
        if held.conn is not None:
            await held.conn.close()
        elif held.raw is not None:
            await greenlet_spawn(held.raw.close)


@contextlib.asynccontextmanager
async def _pooled_connection(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """The request's connection when it is idle (marked busy while in use), else one of its own."""
    held = _request_connection.get()
    if held is None or held.busy or held.engine is not engine:
        async with engine.connect() as conn:
            yield conn
        return
    held.busy = True  # before any await: no other task of the request can take it now
    try:
        if held.conn is not None and held.conn.invalidated:
            await held.conn.close()
            held.conn = None
        if held.conn is None or held.conn.closed:
            raw, held.raw = held.raw, None
            if raw is not None and raw.is_valid:
                # No I/O: the checked-out connection, now owned by the wrapper (its close checks it in).
                held.conn = AsyncConnection(engine, Connection(engine.sync_engine, connection=raw))
            else:
                if raw is not None:
                    await greenlet_spawn(raw.close)
                held.conn = await engine.connect()
        yield held.conn
    finally:
        held.busy = False


@contextlib.asynccontextmanager
async def transaction(engine: AsyncEngine, scope: TenantScope) -> AsyncIterator[AsyncConnection]:
    """A transaction whose row-level-security context is ``scope``; committed on clean exit."""
    async with _pooled_connection(engine) as conn, conn.begin():
        await bind_scope(conn, scope)
        yield conn


async def bind_scope(conn: AsyncConnection, scope: TenantScope) -> None:
    settings = scope_settings(scope)
    await conn.exec_driver_sql(set_local(settings), tuple(value for _, value in settings))
