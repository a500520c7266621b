"""2025-11-25 MCP sessions in PostgreSQL, and credentials that end the streams they opened.

``mcp_sessions`` holds what a session is (who opened it, the negotiated version, the client's
capabilities, its resource subscriptions, when it was last used); ``mcp_session_requests`` holds
server-initiated requests (elicitation) waiting for the client's answer, which may arrive at another
worker. Both are tenant tables behind the same row-level-security wall as the rest.

A token's revocation, deletion (its tenant's too) or new expiry is announced on the
``catalog_credentials`` channel, so every process ends the streams that token holds open; the token
lookup also returns the token's expiry, at which its streams end.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 22:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("mcp_sessions", "mcp_session_requests")
_POLICY = (
    "current_setting('catalog.all_tenants', true) = 'on'"
    " OR tenant_id = nullif(current_setting('catalog.tenant_id', true), '')::bigint"
)
_GRANT_APP_ROLE = """
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON mcp_sessions, mcp_session_requests TO catalog_app;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot grant to role catalog_app';
END
$$
"""


CREDENTIALS_SQL = (
    """
    CREATE FUNCTION catalog_credential_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('catalog_credentials', json_build_object(
            't', OLD.tenant_id,
            'k', OLD.id,
            'o', CASE WHEN TG_OP = 'DELETE' OR NEW.revoked_at IS NOT NULL THEN 'revoked' ELSE 'changed' END
        )::text);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER tokens_credential_changed
    AFTER UPDATE OF revoked_at, expires_at OR DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION catalog_credential_changed()
    """,
    "DROP FUNCTION catalog_token_principal(bytea)",
    """
    CREATE FUNCTION catalog_token_principal(p_hash bytea)
    RETURNS TABLE (
        token_id bigint, tenant_id bigint, tenant_slug text, scopes text[], is_admin boolean,
        expires_at timestamptz
    )
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        v_scope text := current_setting('catalog.all_tenants', true);
    BEGIN
        PERFORM set_config('catalog.all_tenants', 'on', true);
        RETURN QUERY
            SELECT t.id, t.tenant_id, n.slug, t.scopes, t.is_admin, t.expires_at
            FROM tokens AS t JOIN tenants AS n ON n.id = t.tenant_id
            WHERE t.token_hash = p_hash
              AND t.revoked_at IS NULL
              AND (t.expires_at IS NULL OR t.expires_at > now());
        PERFORM set_config('catalog.all_tenants', coalesce(v_scope, ''), true);
    END
    $$
    """,
)


def upgrade() -> None:
    op.create_table(
        "mcp_sessions",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id_hash", sa.LargeBinary(), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("protocol_version", sa.Text(), nullable=False),
        sa.Column("client_params", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "subscriptions",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "last_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_mcp_sessions_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id_hash", name=op.f("pk_mcp_sessions")),
    )
    op.create_index("ix_mcp_sessions_last_seen_at", "mcp_sessions", ["last_seen_at"])
    op.create_table(
        "mcp_session_requests",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("session_hash", sa.LargeBinary(), nullable=False),
        sa.Column("request_id", sa.Text(), nullable=False),
        sa.Column("response", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "session_hash"],
            ["mcp_sessions.tenant_id", "mcp_sessions.id_hash"],
            name=op.f("fk_mcp_session_requests_tenant_id_mcp_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "session_hash", "request_id", name=op.f("pk_mcp_session_requests")
        ),
    )
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY tenant_wall ON {table} USING ({_POLICY}) WITH CHECK ({_POLICY})")
    op.execute(_GRANT_APP_ROLE)
    for statement in CREDENTIALS_SQL:
        op.execute(statement)


# 0002's lookup, restored on downgrade (a migration carries its own SQL: it must not change later).
PREVIOUS_TOKEN_PRINCIPAL_SQL = """
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


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS tokens_credential_changed ON tokens")
    op.execute("DROP FUNCTION IF EXISTS catalog_credential_changed()")
    op.execute("DROP FUNCTION IF EXISTS catalog_token_principal(bytea)")
    op.execute(PREVIOUS_TOKEN_PRINCIPAL_SQL)
    op.drop_table("mcp_session_requests")
    op.drop_index("ix_mcp_sessions_last_seen_at", table_name="mcp_sessions")
    op.drop_table("mcp_sessions")
