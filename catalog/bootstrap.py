"""The one place that builds database engines and the :class:`Catalog` every operation is handed.

Every entry point -- the app's lifespan, each CLI command, ``serve --demo``'s seeding -- opens its
catalogue here, so every one of them gets the same engine: the configured statement timeout, and
the ``catalog_app`` role when the login is a superuser (``probe_app_role``), so row-level security
binds all of them alike. An engine built anywhere else would be one that forgot the role (the demo's
did, and seeded outside the tenant wall).

It also owns the database a process runs on: the configured server (checked reachable, and at the
schema's head for ``serve``) or the embedded one, and the migrations ``catalog migrate`` applies.

Layering: an entry module, above the surfaces (the import contract in pyproject.toml); it imports
``core`` and ``db``, and nothing below it imports it. Entry points import it lazily (the CLI's
``--help`` must not pay for SQLAlchemy).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from catalog.core.catalog import Catalog
from catalog.core.errors import database_unavailable
from catalog.core.replica_positions import SharedPositions
from catalog.core.replicas import ReadReplicas, Replica
from catalog.db import migrate as migrations  # also what `catalog migrate` drives
from catalog.db.embedded import EmbeddedPostgres
from catalog.db.engine import create_engine, probe_app_role
from catalog.settings import ConfigError, Settings, first_line

READYZ_TIMEOUT_S = 3.0  # a probe must answer promptly, whatever the database does
COMMAND_POOL_SIZE = 2  # a CLI command: two import batches in flight (catalog.core.transfer)


async def open_engine(
    settings: Settings, *, url: str | URL | None = None, pool_size: int | None = None
) -> AsyncEngine:
    """An engine on ``url`` (default: the configured database) that runs as the app role if needed;
    ``pool_size`` defaults to ``CATALOG_POOL_SIZE`` (an app process's)."""
    target = url if url is not None else settings.async_database_url()
    role = await probe_app_role(target, transaction_pooler=settings.behind_pooler)
    return _engine(settings, target, pool_size=pool_size, app_role=role)


def _engine(
    settings: Settings, target: str | URL, *, pool_size: int | None, app_role: str | None
) -> AsyncEngine:
    return create_engine(
        target,
        statement_timeout_ms=settings.statement_timeout_ms,
        pool_size=settings.pool_size if pool_size is None else pool_size,
        max_overflow=0,
        pool_timeout=settings.pool_wait_seconds,
        app_role=app_role,
        transaction_pooler=settings.behind_pooler,
    )


@contextlib.asynccontextmanager
async def open_catalog(
    settings: Settings, *, url: str | URL | None = None, pool_size: int | None = None
) -> AsyncIterator[Catalog]:
    """The catalogue on ``url`` (default: ``settings``' database, and its read replicas) for the
    duration; the engines' connections are closed on exit."""
    target = url if url is not None else settings.async_database_url()
    role = await probe_app_role(target, transaction_pooler=settings.behind_pooler)
    engine = _engine(settings, target, pool_size=pool_size, app_role=role)
    catalog = Catalog(engine=engine, settings=settings)
    try:
        if url is None and pool_size is None and settings.read_database_url:  # the app, not a command
            catalog.read_replicas = read_replicas(catalog, role)
        yield catalog
    finally:
        if catalog.read_replicas is not None:
            await catalog.read_replicas.dispose()
        await engine.dispose()


def read_replicas(catalog: Catalog, app_role: str | None) -> ReadReplicas:
    """Engines on the configured read replicas (``CATALOG_READ_DATABASE_URL``), each wrapped in a
    catalogue view for the reads run there.

    No connection is opened here: a replica down at start-up is skipped at its first read like one
    that went down later, and serving begins. The role is the primary's (a physical standby has
    the primary's roles; probing would connect). A worker of ``serve --workers N`` also maps the
    table of notified positions its supervisor shares with the other workers.
    """
    settings = catalog.settings
    replicas = []
    for url in settings.read_database_urls():
        engine = _engine(settings, url, pool_size=None, app_role=app_role)
        reader = Catalog(engine=engine, settings=settings, page_visibilities=catalog.page_visibilities)
        replicas.append(Replica(f"{url.host or 'localhost'}:{url.port or 5432}", reader))
    return ReadReplicas(
        catalog.engine, replicas, float(settings.read_max_lag_ms), shared=SharedPositions.from_environment()
    )


@functools.cache
def schema_head() -> str:
    """The migration this code expects the database at (read from the migration scripts once)."""
    return migrations.head_revision()


async def database_checks(catalog: Catalog) -> dict[str, str]:
    """``/readyz``'s ``database`` and ``schema`` checks: "ok", or what is wrong."""
    try:
        async with asyncio.timeout(READYZ_TIMEOUT_S), catalog.engine.connect() as conn:
            revision = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        return {"database": f"unreachable: {type(exc).__name__}", "schema": "unknown"}
    head = schema_head()
    return {"database": "ok", "schema": "ok" if revision == head else f"at {revision}, head is {head}"}


# -- the database a process runs on ------------------------------------------------------------


@contextlib.contextmanager
def database(
    settings: Settings, *, migrate_embedded: bool = True, meanwhile: Callable[[], object] | None = None
) -> Iterator[str]:
    """The database URL to use: the configured server, or the embedded one started for the duration.

    ``meanwhile`` runs in this thread while the embedded server starts in another (``serve`` imports
    the app then: the server's start is other processes' work, initdb and pg_ctl, which the imports
    need not wait for); the embedded database is then migrated, here, once both are done. With a
    configured server it runs once the server is found reachable.
    """
    if settings.database_url is not None:
        url = settings.async_database_url().render_as_string(hide_password=False)
        check_reachable(url)
        if meanwhile is not None:
            meanwhile()
        yield url
        return
    embedded = EmbeddedPostgres(settings.ensure_home())
    try:
        url = _alongside(embedded.start, meanwhile) if meanwhile is not None else embedded.start()
        if migrate_embedded:
            upgrade_unless_at_head(url)
        yield url
    finally:
        embedded.release()  # nothing to let go of unless it started


def _alongside(work: Callable[[], str], meanwhile: Callable[[], object]) -> str:
    """``work()`` in a thread of its own while ``meanwhile()`` runs in this one; ``work``'s result.

    Whatever stops this thread (an exception from ``meanwhile``, SIGTERM's SystemExit, Ctrl-C) waits
    for ``work`` to finish first, so what it started is never left behind unreleased.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as exc:  # handed to the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="catalog-database-start", daemon=True)
    thread.start()
    try:
        meanwhile()
    finally:
        _join(thread)
    if "error" in outcome:
        raise outcome["error"]
    return str(outcome["result"])


def _join(thread: threading.Thread) -> None:
    interrupted: BaseException | None = None
    while thread.is_alive():
        try:
            thread.join()
        except (SystemExit, KeyboardInterrupt) as exc:  # a signal while waiting: still wait
            interrupted = exc
    if interrupted is not None:
        raise interrupted


def upgrade_unless_at_head(url: str) -> None:
    """Migrate to head; a database already there (every start but the first) costs one query and
    no alembic (whose upgrade would find nothing to do)."""
    if asyncio.run(migrations.current_revision(url)) != schema_head():
        migrations.upgrade(url)


def check_reachable(url: str) -> None:
    try:
        asyncio.run(asyncio.wait_for(migrations.current_revision(url), timeout=10))
    except Exception as exc:
        target = make_url(url)
        where = f"{target.host or 'localhost'}:{target.port or 5432}/{target.database}"
        raise ConfigError(f"cannot reach the database at {where}: {first_line(exc)}") from None


def require_head(url: str) -> None:
    current = asyncio.run(migrations.current_revision(url))
    head = schema_head()
    if current != head:
        raise ConfigError(
            f"the database schema is at {current or 'an empty schema'}, not at head {head}:"
            " run `catalog migrate upgrade` first"
        )
