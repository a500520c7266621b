"""Alembic environment: async engine, models from catalog.db.models."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from catalog.db.models import metadata

# Indexes and objects managed by raw SQL in the migrations (expression and extension indexes that
# autogenerate cannot describe); `migrate check` leaves them alone.
RAW_SQL_OBJECTS = frozenset({"ix_resources_search_trgm", "ix_resources_text_search"})


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    return not (type_ == "index" and name in RAW_SQL_OBJECTS)


def _url() -> str:
    url = context.config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from catalog.settings import get_settings

    settings = get_settings()
    if settings.database_url is None:
        raise SystemExit("set CATALOG_DATABASE_URL, or use `catalog migrate` for the embedded database")
    return settings.async_database_url().render_as_string(hide_password=False)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=include_object,
        compare_type=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    # No named prepared statements (asyncpg's cache off): `catalog migrate` may run through a
    # transaction pooler, where a name left on a server session collides with the next client's.
    engine = create_async_engine(
        _url(),
        poolclass=NullPool,
        connect_args={"statement_cache_size": 0, "prepared_statement_cache_size": 0},
    )
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_configure)
            await conn.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    asyncio.run(_run_async())


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
