"""Who a credential is and what it sees, from ``catalog_plain_read``'s principal and grants (the
SQL name is historical: renaming a function takes a migration), and the visibility each credential
had last, which its next fast statement guesses with."""

from __future__ import annotations

from typing import Any

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.tokens import hash_token, is_opaque_token
from catalog.core.visibility import Visibility, visibility_of_grants
from catalog.db.driver import self_scoped_driver

STANDING_READ = "SELECT * FROM catalog_plain_read($1, $2, $3, $4, $5)"
# Credentials whose last visibility is remembered (each entry a few hundred bytes).
GUESSED_CREDENTIALS = 4096


def standing_arguments(token: str | None, principal: Principal | None) -> tuple[object, ...] | None:
    """``catalog_plain_read``'s principal arguments (hash, tenant, scopes, admin) for an opaque
    ``token`` or an authenticated tenant ``principal``; None when there is neither."""
    if token is not None:
        return (hash_token(token), None, None, None) if is_opaque_token(token) else None
    if principal is not None and principal.tenant_id is not None:
        tenant_id = principal.tenant_id
        return (None, tenant_id, tuple(sorted(principal.scopes)), principal.administers(tenant_id))
    return None


def standing_of(row: Any, principal: Principal | None) -> tuple[Principal, Visibility] | None:
    """Who a ``catalog_plain_read`` row names (the token's principal, or ``principal`` as given) and
    what it sees (the one visibility rule, on the grants the row holds)."""
    if row is None or row["principal_tenant_id"] is None:
        return None
    tenant_id: int = row["principal_tenant_id"]
    if principal is None:
        principal = Principal(
            kind="token",
            tenant_id=tenant_id,
            tenant_slug=row["principal_tenant_slug"],
            scopes=frozenset(row["principal_scopes"]),
            is_admin=row["principal_is_admin"],
            token_id=row["principal_token_id"],
            expires_at=row["principal_expires_at"],
        )
    visibility = visibility_of_grants(
        principal,
        tenant_id,
        uris=row["grant_uris"] or (),
        prefixes=row["grant_prefixes"] or (),
        tags=row["grant_tags"] or (),
    )
    return principal, visibility


async def fast_standing(
    catalog: Catalog, key: str | None, token: str | None, principal: Principal | None
) -> tuple[Principal, Visibility, Any] | None:
    """``catalog_plain_read`` for an opaque ``token`` or an authenticated tenant ``principal``: who
    it is, what it sees (the one visibility rule, on the grants the statement returned) and the
    statement's row. No selectors are passed, so the row never holds a resource, whatever ``key``
    (``reading.fast_read`` passes them). None for an unknown, revoked or expired token, or a principal
    without a tenant."""
    arguments = standing_arguments(token, principal)
    if arguments is None:
        return None
    async with self_scoped_driver(catalog.engine) as driver:
        row = await driver.fetchrow(STANDING_READ, *arguments, key)
    standing = standing_of(row, principal)
    if standing is None:
        return None
    return *standing, row


def remember_visibility(catalog: Catalog, credential: tuple[object, ...], visibility: Visibility) -> None:
    """Keep ``visibility`` as the one the credential (its :func:`standing_arguments`) had last, for
    its next fast request to guess with (the oldest credential forgotten beyond
    :data:`GUESSED_CREDENTIALS`)."""
    remembered = catalog.page_visibilities
    if len(remembered) >= GUESSED_CREDENTIALS and credential not in remembered:
        remembered.pop(next(iter(remembered)))  # the oldest
    remembered[credential] = visibility
