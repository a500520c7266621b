"""The one place that builds database engines and the :class:`Catalog` every operation is handed.

Every entry point -- the app's lifespan, each CLI command, ``serve --demo``'s seeding -- opens its
catalogue here, so every one of them gets the same engine: the configured statement timeout, and
the ``catalog_app`` role when the login is a superuser (``probe_app_role``), so row-level security
binds all of them alike. An engine built anywhere else would be one that forgot the role (the demo's
did, and seeded outside the tenant wall).

Layering: an entry module, above the surfaces' shared needs; it imports ``core`` and ``db``, and
nothing below it imports it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from catalog.core.service import Catalog
from catalog.db.engine import create_engine, probe_app_role
from catalog.settings import Settings

COMMAND_POOL_SIZE = 2  # a CLI command: two import batches in flight (catalog.core.transfer)


async def open_engine(
    settings: Settings, *, url: str | URL | None = None, pool_size: int | None = None
) -> AsyncEngine:
    """An engine on ``url`` (default: the configured database) that runs as the app role if needed;
    ``pool_size`` defaults to ``CATALOG_POOL_SIZE`` (an app process's)."""
    target = url if url is not None else settings.async_database_url()
    pooler = settings.behind_pooler
    return create_engine(
        target,
        statement_timeout_ms=settings.statement_timeout_ms,
        pool_size=settings.pool_size if pool_size is None else pool_size,
        max_overflow=0,
        pool_timeout=settings.pool_wait_seconds,
        app_role=await probe_app_role(target, transaction_pooler=pooler),
        transaction_pooler=pooler,
    )


@contextlib.asynccontextmanager
async def open_catalog(
    settings: Settings, *, url: str | URL | None = None, pool_size: int | None = None
) -> AsyncIterator[Catalog]:
    """The catalogue on ``url`` (default: ``settings``' database) for the duration; the engine's
    connections are closed on exit."""
    engine = await open_engine(settings, url=url, pool_size=pool_size)
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()
