"""Records and the queries that read them, as plain SQL both executors run as written.

The core runs these through SQLAlchemy (``exec_driver_sql``: the same text and ``$n``
parameters); ``catalog token list`` runs them on one bare asyncpg connection
(:mod:`catalog.core.direct.token_list`) so that it need not import SQLAlchemy to start. A
query's columns are its record's fields, so a record and its query cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime


@dataclass(frozen=True)
class Tenant:
    id: int
    slug: str
    name: str
    created_at: datetime


@dataclass(frozen=True)
class TokenRecord:
    id: int
    tenant_id: int
    name: str | None
    scopes: tuple[str, ...]
    is_admin: bool
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime


def _columns(record: type) -> str:
    return ", ".join(field.name for field in fields(record))


# No tenant scope needed: the tenants table is the registry every scope is named from.
TENANT_BY_SLUG = f"SELECT {_columns(Tenant)} FROM tenants WHERE slug = $1"
# In a transaction bound to the tenant (row-level security), oldest first.
TENANT_TOKENS = f"SELECT {_columns(TokenRecord)} FROM tokens WHERE tenant_id = $1 ORDER BY id"
