"""Opaque bearer tokens: ``cat_`` + 32 random bytes (urlsafe base64), stored only as a sha256 hash.

Tokens are checked against the database on every request (one indexed lookup), so a revocation or
an expiry takes effect at once on every worker and host.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.audit import AuditEntry, digest, record_audit
from catalog.core.catalog import Catalog
from catalog.core.errors import FieldError, InvalidInput, NotFound
from catalog.core.plain_sql import TENANT_TOKENS, TokenRecord
from catalog.core.principal import Principal
from catalog.core.schemas.tokens import TokenCreated, TokenIn, TokenOut
from catalog.core.tenants import Tenant
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import tokens
from catalog.db.rows import from_row

TOKEN_PREFIX = "cat_"


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def is_opaque_token(token: str) -> bool:
    """Whether ``token`` has the shape of one of these tokens (else no lookup is worth a round trip)."""
    return token.startswith(TOKEN_PREFIX) and len(token) <= 128


def hash_token(token: str) -> bytes:
    # The token carries 256 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(token.encode()).digest()


def _record(row: object) -> TokenRecord:
    return from_row(TokenRecord, row)


async def insert_token(
    conn: AsyncConnection,
    tenant_id: int,
    *,
    scopes: list[str],
    is_admin: bool,
    expires_at: datetime | None,
    name: str | None,
) -> tuple[str, TokenRecord]:
    token = generate_token()
    row = (
        await conn.execute(
            insert(tokens)
            .values(
                tenant_id=tenant_id,
                token_hash=hash_token(token),
                scopes=sorted(set(scopes)),
                is_admin=is_admin,
                expires_at=expires_at,
                name=name,
            )
            .returning(*tokens.c)
        )
    ).one()
    return token, _record(row)


async def live_tokens(catalog: Catalog, token_ids: Iterable[int]) -> dict[int, datetime | None]:
    """Of ``token_ids``, those still live (not revoked, not expired, tenant not deleted), each with
    its expiry: what a process holding streams re-checks when it may have missed a revocation."""
    ids = sorted(set(token_ids))
    if not ids:
        return {}
    async with transaction(catalog.engine, TenantScope.platform()) as conn:
        rows = await conn.execute(
            select(tokens.c.id, tokens.c.expires_at).where(
                tokens.c.id.in_(ids),
                tokens.c.revoked_at.is_(None),
                or_(tokens.c.expires_at.is_(None), tokens.c.expires_at > func.now()),
            )
        )
        return {row.id: row.expires_at for row in rows}


async def list_token_records(conn: AsyncConnection, tenant_id: int) -> list[TokenRecord]:
    rows = (await conn.exec_driver_sql(TENANT_TOKENS, (tenant_id,))).all()
    return [_record(row) for row in rows]


async def revoke_token(conn: AsyncConnection, tenant_id: int, token_id: int) -> TokenRecord | None:
    row = (
        await conn.execute(
            update(tokens)
            .where(tokens.c.tenant_id == tenant_id, tokens.c.id == token_id, tokens.c.revoked_at.is_(None))
            .values(revoked_at=datetime.now(UTC))
            .returning(*tokens.c)
        )
    ).one_or_none()
    return _record(row) if row else None


def token_out(record: TokenRecord) -> TokenOut:
    return TokenOut.model_validate(record, from_attributes=True)


def _digest(record: TokenRecord) -> str | None:
    """The audit digest of a token's standing (never of its secret or its hash)."""
    return digest(token_out(record).model_dump(mode="json", by_alias=True, exclude={"id", "created_at"}))


async def create_token(catalog: Catalog, principal: Principal, tenant: Tenant, body: TokenIn) -> TokenCreated:
    """Mint a token for ``tenant``; the returned ``token`` is the only time it is ever shown."""
    if body.expires_at is not None and body.expires_at <= datetime.now(UTC):
        raise InvalidInput(
            "the expiry is in the past", errors=[FieldError("/expiresAt", "must be in the future")]
        )
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        token, record = await insert_token(
            conn,
            tenant.id,
            scopes=body.scopes,
            is_admin=body.admin,
            expires_at=body.expires_at,
            name=body.name,
        )
        await record_audit(
            conn,
            tenant.id,
            principal,
            AuditEntry(
                action="token.create",
                target_kind="token",
                target_id=record.id,
                after=_digest(record),
                detail={"scopes": list(record.scopes), "admin": record.is_admin},
            ),
        )
    return TokenCreated(**token_out(record).model_dump(), token=token)


async def list_tokens(catalog: Catalog, tenant: Tenant) -> list[TokenOut]:
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        return [token_out(record) for record in await list_token_records(conn, tenant.id)]


async def delete_token(catalog: Catalog, principal: Principal, tenant: Tenant, token_id: int) -> None:
    """Revoke a token: refused from the next request on, on every worker (tokens are never cached)."""
    async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
        record = await revoke_token(conn, tenant.id, token_id)
        if record is None:
            raise NotFound(f"no live token {token_id}")
        before = replace(record, revoked_at=None)  # the only column a revocation changes
        await record_audit(
            conn,
            tenant.id,
            principal,
            AuditEntry(
                action="token.revoke",
                target_kind="token",
                target_id=record.id,
                before=_digest(before),
                after=_digest(record),
            ),
        )
