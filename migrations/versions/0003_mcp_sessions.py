"""2025-11-25 MCP sessions in PostgreSQL: any worker of any host serves any request of a session.

``mcp_sessions`` holds what a session is (who opened it, the negotiated version, the client's
capabilities, its resource subscriptions, when it was last used); ``mcp_session_requests`` holds
server-initiated requests (elicitation) waiting for the client's answer, which may arrive at another
worker. Both are tenant tables behind the same row-level-security wall as the rest.

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


def downgrade() -> None:
    op.drop_table("mcp_session_requests")
    op.drop_index("ix_mcp_sessions_last_seen_at", table_name="mcp_sessions")
    op.drop_table("mcp_sessions")
