"""A tenant's tokens on one bare asyncpg connection: ``catalog token list`` without SQLAlchemy.

The same statements the core runs (:mod:`catalog.core.plain_sql`, ``find_tenant`` and
``list_tokens``), with the connection the engine would give them: its session parameters, the app
role when the login is a superuser (``APP_ROLE_PROBE``) and a transaction bound to the tenant, so
row-level security reads exactly the rows it reads for the admin API. Whatever this cannot answer
(an unknown tenant, a failure of any kind) is None, and the command runs the full stack, which
answers it and names the failure as it always has.

The embedded database is read only when a server is already running on it (``catalog serve`` in
another terminal) and its schema is at the scripts' head: the full command would start it, or
migrate it first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg

from catalog.core.plain_sql import TENANT_BY_SLUG, TENANT_TOKENS, TokenRecord
from catalog.db import embedded_address
from catalog.db.rows import from_rows
from catalog.db.schema_head import REVISIONS, linear_head, scripts_location
from catalog.db.scope import (
    APP_ROLE_PROBE,
    APPLICATION_NAME,
    COMMAND_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    TenantScope,
    app_role,
    scope_settings,
    set_local,
)


async def embedded_tenant_tokens(
    home: Path, statement_timeout_ms: int, slug: str
) -> list[TokenRecord] | None:
    """:func:`tenant_tokens` on the embedded server under ``home``; None unless it is running and at
    head (the revision alembic would find by the scripts' straight line)."""
    if not embedded_address.serving(home):
        return None
    head = linear_head(scripts_location() / "versions")
    if head is None:
        return None
    return await tenant_tokens(
        embedded_address.connect_args(home), statement_timeout_ms, slug, at_revision=head
    )


async def tenant_tokens(
    connect_args: dict[str, str | int],
    statement_timeout_ms: int,
    slug: str,
    *,
    at_revision: str | None = None,
) -> list[TokenRecord] | None:
    """The tokens of tenant ``slug``, oldest first; None when it finds no such tenant or fails, or,
    with ``at_revision``, when the schema is at another revision."""
    options: dict[str, Any] = {
        **connect_args,  # host, port, user, password, database
        "server_settings": {
            "application_name": APPLICATION_NAME,
            "statement_timeout": str(statement_timeout_ms),
        },
        "command_timeout": COMMAND_TIMEOUT_S,
        "timeout": CONNECT_TIMEOUT_S,
    }
    try:
        driver = await asyncpg.connect(**options)
    except Exception:  # the full stack reports it (``cannot reach the database at ...``)
        return None
    try:
        if at_revision is not None and [row[0] for row in await driver.fetch(REVISIONS)] != [at_revision]:
            return None
        return await _read(driver, slug)
    except Exception:  # likewise: a schema not migrated, a statement timeout, ...
        return None
    finally:
        await driver.close()


async def _read(driver: asyncpg.Connection, slug: str) -> list[TokenRecord] | None:
    probe = await driver.fetchrow(APP_ROLE_PROBE)
    if probe is None:  # a login missing from pg_roles: the engine's probe refuses it too
        return None
    role = app_role(probe["is_superuser"], probe["role_exists"])
    async with driver.transaction():
        if role is not None:
            # The engine sets it for the session; one connection learns it only now.
            await driver.execute(set_local([("role", role)], literal=True))
        tenant = await driver.fetchrow(TENANT_BY_SLUG, slug)
        if tenant is None:
            return None
        await driver.execute(set_local(scope_settings(TenantScope.tenant(tenant["id"])), literal=True))
        rows = await driver.fetch(TENANT_TOKENS, tenant["id"])
    return from_rows(TokenRecord, rows)
