"""The async engine, and transactions bound to a tenant for row-level security."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

APP_ROLE = "catalog_app"
NOTIFY_CHANNEL = "catalog_changes"


@dataclass(frozen=True)
class TenantScope:
    """Which tenant's rows a transaction may touch: one tenant, or (platform work) all of them."""

    tenant_id: int | None = None
    all_tenants: bool = False

    @classmethod
    def tenant(cls, tenant_id: int) -> TenantScope:
        return cls(tenant_id=tenant_id)

    @classmethod
    def platform(cls) -> TenantScope:
        return cls(all_tenants=True)


def create_engine(
    url: str | URL,
    *,
    statement_timeout_ms: int = 15_000,
    pool_size: int = 10,
    max_overflow: int = 20,
    app_role: str | None = None,
) -> AsyncEngine:
    """An asyncpg engine; ``app_role`` (see ``probe_app_role``) makes RLS apply to a superuser too."""
    server_settings = {"application_name": "catalog", "statement_timeout": str(statement_timeout_ms)}
    if app_role:
        server_settings["role"] = app_role
    return create_async_engine(
        make_url(url).set(drivername="postgresql+asyncpg"),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        pool_recycle=1800,
        pool_timeout=POOL_TIMEOUT_S,
        connect_args={
            "server_settings": server_settings,
            "command_timeout": 60,
            "timeout": CONNECT_TIMEOUT_S,
        },
    )


# A request waits this long at most for a connection (a dead server refuses at once; a silent
# network or an exhausted pool must not hold a request for the library defaults of 60 s / 30 s).
CONNECT_TIMEOUT_S = 5.0
POOL_TIMEOUT_S = 10.0

# SQLSTATE classes that mean "the database cannot serve now", not "this request is wrong":
# 08 connection exception, 53 insufficient resources (too many connections), 57 operator
# intervention (admin shutdown, cannot connect now, query_canceled = statement_timeout).
_UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57")


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` is the database being unreachable, shutting down or too slow (a 503 / retry),
    as opposed to a bug or bad input. The one classification both surfaces use."""
    import asyncpg
    from sqlalchemy import exc as sa_exc

    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
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


async def probe_app_role(url: str | URL) -> str | None:
    """The role to run as so that row-level security binds even a superuser login.

    Superusers bypass RLS, even forced; ordinary table owners do not (the tables FORCE it). So we
    switch role only when logged in as a superuser and the migration could create the role.
    """
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT rolsuper, EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :role)"
                        " FROM pg_roles WHERE rolname = current_user"
                    ),
                    {"role": APP_ROLE},
                )
            ).one()
    finally:
        await engine.dispose()
    is_superuser, role_exists = row
    return APP_ROLE if is_superuser and role_exists else None


@contextlib.asynccontextmanager
async def transaction(engine: AsyncEngine, scope: TenantScope) -> AsyncIterator[AsyncConnection]:
    """A transaction whose row-level-security context is ``scope``; committed on clean exit."""
    async with engine.begin() as conn:
        await bind_scope(conn, scope)
        yield conn


async def bind_scope(conn: AsyncConnection, scope: TenantScope) -> None:
    await conn.execute(
        text(
            "SELECT set_config('catalog.tenant_id', :tenant_id, true),"
            " set_config('catalog.all_tenants', :all_tenants, true)"
        ),
        {
            "tenant_id": "" if scope.tenant_id is None else str(scope.tenant_id),
            "all_tenants": "on" if scope.all_tenants else "off",
        },
    )
