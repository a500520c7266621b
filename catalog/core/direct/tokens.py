"""A bearer token's principal, looked up on the driver on every authenticated request (what a
token is and how it is stored: :mod:`catalog.core.tokens`)."""

from __future__ import annotations

import asyncpg

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.tokens import hash_token, is_opaque_token
from catalog.db.driver import self_scoped_driver

_TOKEN_PRINCIPAL = (
    "SELECT token_id, tenant_id, tenant_slug, scopes, is_admin, expires_at FROM catalog_token_principal($1)"
)


async def principal_for_token(driver: asyncpg.Connection, token: str) -> Principal | None:
    """The principal a live token stands for; None for an unknown, revoked or expired one.

    Runs on every authenticated request, before the tenant is known: ``catalog_token_principal``
    (migration 0002) widens the row-level-security scope for its own lookup only, so this is one
    statement outside any transaction (see ``self_scoped_driver``), one round trip.
    """
    if not is_opaque_token(token):
        return None
    row = await driver.fetchrow(_TOKEN_PRINCIPAL, hash_token(token))
    if row is None:
        return None
    return Principal(
        kind="token",
        tenant_id=row["tenant_id"],
        tenant_slug=row["tenant_slug"],
        scopes=frozenset(row["scopes"]),
        is_admin=row["is_admin"],
        token_id=row["token_id"],
        expires_at=row["expires_at"],
    )


async def token_principal(catalog: Catalog, token: str) -> Principal | None:
    """:func:`principal_for_token` on a pooled connection of ``catalog`` (none is taken for a string
    that cannot be a token)."""
    if not is_opaque_token(token):
        return None
    async with self_scoped_driver(catalog.engine) as driver:
        return await principal_for_token(driver, token)
