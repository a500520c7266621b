"""The catalogue schema: tables, change-feed triggers with NOTIFY, row-level security.

Revision ID: 0001
Revises:
Create Date: 2026-12-03 07:57:20.440910
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TENANT_TABLES = (
    "blobs",
    "resources",
    "resource_tags",
    "resource_versions",
    "templates",
    "grants",
    "tokens",
    "audit_log",
    "change_feed",
)

# Substring search over uri/name/title/description. Trigram-indexed where pg_trgm can be created;
# the expression is repeated verbatim in catalog.core (RESOURCE_SEARCH_TEXT) so the index is used.
SEARCH_INDEX_SQL = """
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX ix_resources_search_trgm ON resources USING gin (
        lower(uri || ' ' || name || ' ' || coalesce(title, '') || ' ' || coalesce(description, ''))
        gin_trgm_ops
    );
EXCEPTION WHEN insufficient_privilege OR feature_not_supported OR undefined_file THEN
    RAISE NOTICE 'pg_trgm unavailable: resource search runs without a trigram index';
END
$$;
"""

# Every insert, update and delete of a resource, template or grant is written to the change feed
# and announced on channel catalog_changes, by the database itself: a change made by any process,
# host or plain SQL session reaches every listener. The payload is small and never holds content.
TRIGGERS_SQL = (
    """
    CREATE FUNCTION catalog_emit_change(p_tenant bigint, p_kind text, p_uri text, p_op text)
    RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        v_seq bigint;
    BEGIN
        INSERT INTO change_feed (tenant_id, kind, uri, op) VALUES (p_tenant, p_kind, p_uri, p_op)
        RETURNING seq INTO v_seq;
        -- NOTIFY payloads must stay below 8000 bytes: an oversized URI is sent as null, and the
        -- listener reads it from the feed by seq.
        PERFORM pg_notify('catalog_changes', json_build_object(
            't', p_tenant, 'k', p_kind,
            'u', CASE WHEN octet_length(p_uri) <= 4000 THEN p_uri END,
            'o', p_op, 's', v_seq)::text);
    END
    $$
    """,
    """
    CREATE FUNCTION catalog_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_kind text := TG_ARGV[0];
        v_old text;
        v_new text;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            -- A tenant being deleted takes its feed with it; there is no one left to tell.
            IF NOT EXISTS (SELECT 1 FROM tenants WHERE id = OLD.tenant_id) THEN
                RETURN NULL;
            END IF;
        END IF;
        -- One IF per table: PL/pgSQL resolves a record field only in the branch that runs.
        IF TG_TABLE_NAME = 'resources' THEN
            IF TG_OP <> 'INSERT' THEN v_old := OLD.uri; END IF;
            IF TG_OP <> 'DELETE' THEN v_new := NEW.uri; END IF;
        ELSIF TG_TABLE_NAME = 'templates' THEN
            IF TG_OP <> 'INSERT' THEN v_old := OLD.uri_template; END IF;
            IF TG_OP <> 'DELETE' THEN v_new := NEW.uri_template; END IF;
        ELSE
            IF TG_OP <> 'INSERT' THEN v_old := coalesce(OLD.uri, OLD.uri_prefix); END IF;
            IF TG_OP <> 'DELETE' THEN v_new := coalesce(NEW.uri, NEW.uri_prefix); END IF;
        END IF;
        IF TG_OP = 'INSERT' THEN
            PERFORM catalog_emit_change(NEW.tenant_id, v_kind, v_new, 'created');
        ELSIF TG_OP = 'DELETE' THEN
            PERFORM catalog_emit_change(OLD.tenant_id, v_kind, v_old, 'deleted');
        ELSIF v_old IS DISTINCT FROM v_new THEN
            -- A move is a deletion at the old URI and a creation at the new one.
            PERFORM catalog_emit_change(OLD.tenant_id, v_kind, v_old, 'deleted');
            PERFORM catalog_emit_change(NEW.tenant_id, v_kind, v_new, 'created');
        ELSE
            PERFORM catalog_emit_change(NEW.tenant_id, v_kind, v_new, 'updated');
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE FUNCTION catalog_sync_resource_tags() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            IF OLD.uri IS NOT DISTINCT FROM NEW.uri AND OLD.tags IS NOT DISTINCT FROM NEW.tags THEN
                RETURN NULL;
            END IF;
            DELETE FROM resource_tags WHERE tenant_id = OLD.tenant_id AND resource_id = OLD.id;
        END IF;
        INSERT INTO resource_tags (tenant_id, tag, uri, resource_id)
        SELECT DISTINCT NEW.tenant_id, tag, NEW.uri, NEW.id FROM unnest(NEW.tags) AS tag;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER resources_tags AFTER INSERT OR UPDATE OF uri, tags ON resources
    FOR EACH ROW EXECUTE FUNCTION catalog_sync_resource_tags()
    """,
    """
    CREATE TRIGGER resources_change AFTER INSERT OR UPDATE OR DELETE ON resources
    FOR EACH ROW EXECUTE FUNCTION catalog_record_change('resource')
    """,
    """
    CREATE TRIGGER templates_change AFTER INSERT OR UPDATE OR DELETE ON templates
    FOR EACH ROW EXECUTE FUNCTION catalog_record_change('template')
    """,
    """
    CREATE TRIGGER grants_change AFTER INSERT OR UPDATE OR DELETE ON grants
    FOR EACH ROW EXECUTE FUNCTION catalog_record_change('grant')
    """,
    """
    CREATE FUNCTION catalog_tenant_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('catalog_changes', json_build_object(
            't', OLD.id, 'k', 'tenant', 'u', NULL, 'o', 'deleted', 's', NULL)::text);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER tenants_deleted AFTER DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION catalog_tenant_deleted()
    """,
)

DROP_TRIGGERS_SQL = (
    "DROP TRIGGER IF EXISTS resources_tags ON resources",
    "DROP FUNCTION IF EXISTS catalog_sync_resource_tags()",
    "DROP TRIGGER IF EXISTS tenants_deleted ON tenants",
    "DROP TRIGGER IF EXISTS grants_change ON grants",
    "DROP TRIGGER IF EXISTS templates_change ON templates",
    "DROP TRIGGER IF EXISTS resources_change ON resources",
    "DROP FUNCTION IF EXISTS catalog_tenant_deleted()",
    "DROP FUNCTION IF EXISTS catalog_record_change()",
    "DROP FUNCTION IF EXISTS catalog_emit_change(bigint, text, text, text)",
)

# Row-level security as the second tenant wall. Every transaction of the app sets
# catalog.tenant_id (or catalog.all_tenants for platform work); a query that forgot its tenant
# filter still sees only that tenant. FORCE makes the policy bind the tables' owner too; for a
# superuser login the app switches to role catalog_app, created here when this login may.
_POLICY = (
    "current_setting('catalog.all_tenants', true) = 'on'"
    " OR tenant_id = nullif(current_setting('catalog.tenant_id', true), '')::bigint"
)
RLS_SQL = (
    """
    DO $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
            CREATE ROLE catalog_app NOLOGIN;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'cannot create role catalog_app: log in as a non-superuser for the RLS wall';
    END
    $$
    """,
    """
    DO $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
            GRANT USAGE ON SCHEMA public TO catalog_app;
            GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO catalog_app;
            GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO catalog_app;
            GRANT catalog_app TO CURRENT_USER;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'cannot grant to role catalog_app';
    END
    $$
    """,
    *(
        statement
        for table in TENANT_TABLES
        for statement in (
            f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY",
            f"CREATE POLICY tenant_wall ON {table} USING ({_POLICY}) WITH CHECK ({_POLICY})",
        )
    ),
)

DROP_RLS_SQL = tuple(
    statement
    for table in TENANT_TABLES
    for statement in (
        f"DROP POLICY IF EXISTS tenant_wall ON {table}",
        f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY",
        f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY",
    )
)


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("slug", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'", name=op.f("ck_tenants_slug_format")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tenants")),
        sa.UniqueConstraint("slug", name=op.f("uq_tenants_slug")),
    )
    op.create_table(
        "audit_log",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target_kind", sa.Text(), nullable=False),
        sa.Column("target_id", sa.BigInteger(), nullable=True),
        sa.Column("uri", sa.Text(collation="C"), nullable=True),
        sa.Column("before_digest", sa.Text(), nullable=True),
        sa.Column("after_digest", sa.Text(), nullable=True),
        sa.Column("detail", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_audit_log_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_audit_log")),
    )
    op.create_table(
        "blobs",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.Text(collation="C"), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("mime_type", sa.Text(), nullable=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("sha256 ~ '^[0-9a-f]{64}$'", name=op.f("ck_blobs_sha256_hex")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_blobs_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "sha256", name=op.f("pk_blobs")),
    )
    op.create_table(
        "change_feed",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("uri", sa.Text(collation="C"), nullable=True),
        sa.Column("op", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("kind IN ('resource', 'template', 'grant')", name=op.f("ck_change_feed_kind")),
        sa.CheckConstraint("op IN ('created', 'updated', 'deleted')", name=op.f("ck_change_feed_op")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_change_feed_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "seq", name=op.f("pk_change_feed")),
    )
    op.create_table(
        "grants",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("uri", sa.Text(collation="C"), nullable=True),
        sa.Column("uri_prefix", sa.Text(collation="C"), nullable=True),
        sa.Column("tag", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("num_nonnulls(uri, uri_prefix, tag) = 1", name=op.f("ck_grants_one_selector")),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_grants_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_grants")),
        sa.UniqueConstraint(
            "tenant_id",
            "scope",
            "uri",
            "uri_prefix",
            "tag",
            name=op.f("uq_grants_tenant_id_scope_uri_uri_prefix_tag"),
            postgresql_nulls_not_distinct=True,
        ),
    )
    op.create_table(
        "templates",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("uri_template", sa.Text(collation="C"), nullable=False),
        sa.Column("literal_prefix", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("mime_type", sa.Text(), nullable=True),
        sa.Column("icons", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("annotations", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("meta", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "tags", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False
        ),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_templates_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_templates")),
        sa.UniqueConstraint("tenant_id", "uri_template", name=op.f("uq_templates_tenant_id_uri_template")),
    )
    op.create_index(
        "ix_templates_tenant_id_literal_prefix", "templates", ["tenant_id", "literal_prefix"], unique=False
    )
    op.create_table(
        "tokens",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("token_hash", sa.LargeBinary(), nullable=False),
        sa.Column(
            "scopes", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False
        ),
        sa.Column("is_admin", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_tokens_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_tokens")),
    )
    op.create_index("ix_tokens_token_hash", "tokens", ["token_hash"], unique=True)
    op.create_table(
        "resources",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("uri", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("mime_type", sa.Text(), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("icons", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("annotations", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("meta", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "tags", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False
        ),
        sa.Column("consent_message", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("blob_sha256", sa.Text(collation="C"), nullable=True),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column(
            "content_changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.CheckConstraint("text IS NULL OR blob_sha256 IS NULL", name=op.f("ck_resources_one_content")),
        sa.ForeignKeyConstraint(
            ["tenant_id", "blob_sha256"],
            ["blobs.tenant_id", "blobs.sha256"],
            name=op.f("fk_resources_tenant_id_blob_sha256_blobs"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_resources_tenant_id_tenants"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_resources")),
        sa.UniqueConstraint("tenant_id", "uri", name=op.f("uq_resources_tenant_id_uri")),
    )
    op.create_index("ix_resources_tags", "resources", ["tags"], unique=False, postgresql_using="gin")
    op.create_table(
        "resource_tags",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("tag", sa.Text(), nullable=False),
        sa.Column("uri", sa.Text(collation="C"), nullable=False),
        sa.Column("resource_id", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "resource_id"],
            ["resources.tenant_id", "resources.id"],
            name=op.f("fk_resource_tags_tenant_id_resource_id_resources"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "tag", "uri", name=op.f("pk_resource_tags")),
    )
    op.create_index(
        "ix_resource_tags_tenant_id_resource_id", "resource_tags", ["tenant_id", "resource_id"], unique=False
    )
    op.create_table(
        "resource_versions",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("resource_id", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("uri", sa.Text(collation="C"), nullable=False),
        sa.Column("snapshot", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("blob_sha256", sa.Text(collation="C"), nullable=True),
        sa.Column("changed_by", sa.Text(), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "resource_id"],
            ["resources.tenant_id", "resources.id"],
            name=op.f("fk_resource_versions_tenant_id_resource_id_resources"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "resource_id", "version", name=op.f("pk_resource_versions")),
    )
    # Uncompressed out-of-line storage: blobs are mostly compressed already, and substring() then
    # reads only the chunks it needs, so downloads stream without detoasting the whole value.
    op.execute("ALTER TABLE blobs ALTER COLUMN data SET STORAGE EXTERNAL")
    op.execute(SEARCH_INDEX_SQL)
    for statement in TRIGGERS_SQL:
        op.execute(statement)
    for statement in RLS_SQL:
        op.execute(statement)


def downgrade() -> None:
    for statement in DROP_RLS_SQL:
        op.execute(statement)
    for statement in DROP_TRIGGERS_SQL:
        op.execute(statement)
    op.execute("DROP INDEX IF EXISTS ix_resources_search_trgm")
    op.drop_table("resource_versions")
    op.drop_index("ix_resource_tags_tenant_id_resource_id", table_name="resource_tags")
    op.drop_table("resource_tags")
    op.drop_index("ix_resources_tags", table_name="resources", postgresql_using="gin")
    op.drop_table("resources")
    op.drop_index("ix_tokens_token_hash", table_name="tokens")
    op.drop_table("tokens")
    op.drop_index("ix_templates_tenant_id_literal_prefix", table_name="templates")
    op.drop_table("templates")
    op.drop_table("grants")
    op.drop_table("change_feed")
    op.drop_table("blobs")
    op.drop_table("audit_log")
    op.drop_table("tenants")
