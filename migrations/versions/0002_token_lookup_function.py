"""A token lookup in one statement: catalog_token_principal(hash).

Every authenticated request looks its bearer token up before it knows the tenant. As a transaction
bound to all tenants that cost four round trips (BEGIN, set_config, SELECT, COMMIT); this function
widens the row-level-security scope for its own query only, so the lookup runs as one autocommit
statement. It restores the caller's setting before it returns, so calling it inside a tenant-bound
transaction leaves that transaction's scope as it was.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 13:20:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKEN_PRINCIPAL_SQL = """
CREATE FUNCTION catalog_token_principal(p_hash bytea)
RETURNS TABLE (token_id bigint, tenant_id bigint, tenant_slug text, scopes text[], is_admin boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_scope text := current_setting('catalog.all_tenants', true);
BEGIN
    PERFORM set_config('catalog.all_tenants', 'on', true);
    RETURN QUERY
        SELECT t.id, t.tenant_id, n.slug, t.scopes, t.is_admin
        FROM tokens AS t JOIN tenants AS n ON n.id = t.tenant_id
        WHERE t.token_hash = p_hash
          AND t.revoked_at IS NULL
          AND (t.expires_at IS NULL OR t.expires_at > now());
    PERFORM set_config('catalog.all_tenants', coalesce(v_scope, ''), true);
END
$$
"""


def upgrade() -> None:
    op.execute(TOKEN_PRINCIPAL_SQL)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS catalog_token_principal(bytea)")
