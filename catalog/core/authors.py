"""Who a recorded label names (a version's ``changed_by``, an audit entry's ``principal``), for a
reader: a token by its name, the platform admin, a system job, an OAuth subject."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.principal import Author, TokenName, author_of_label, token_id_of_label
from catalog.db.models import tokens


async def token_names(
    conn: AsyncConnection, tenant_id: int | None, token_ids: Iterable[int]
) -> dict[int, TokenName]:
    """Of ``token_ids``, the tokens whose rows exist (revoked ones too), to name them; of the
    tenant's tokens only, unless ``tenant_id`` is None (the platform log spans tenants; a token id
    is never reused, so ``token:N`` names one token wherever it was recorded)."""
    ids = sorted(set(token_ids))
    if not ids:
        return {}
    query = select(tokens.c.id, tokens.c.name, tokens.c.revoked_at).where(tokens.c.id.in_(ids))
    if tenant_id is not None:
        query = query.where(tokens.c.tenant_id == tenant_id)
    return {row.id: TokenName(row.name, row.revoked_at is not None) for row in await conn.execute(query)}


async def authors_of(
    conn: AsyncConnection, tenant_id: int | None, labels: Iterable[str]
) -> dict[str, Author]:
    """Each recorded label named (:func:`author_of_label`), its tokens looked up in one query."""
    distinct = set(labels)
    names = await token_names(conn, tenant_id, filter(None, map(token_id_of_label, distinct)))
    return {label: author_of_label(label, names) for label in distinct}
