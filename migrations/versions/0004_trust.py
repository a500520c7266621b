"""Trust: per-tenant change-feed sequences, tags in change events, the platform audit log.

* **Per-tenant ``seq``** (issue 12 item 15). ``change_feed.seq`` was one identity for all tenants, so
  the gaps in one tenant's feed showed how busy the others were. Each tenant now numbers its own
  changes from a sequence of its own (``catalog_change_seq_<tenant id>``, created and dropped with
  the tenant by a trigger). A sequence, not a counter row: taking a number never waits for another
  transaction, so concurrent writers of one tenant (an import's two batches) do not serialize. Gaps
  remain only where the tenant's own transactions rolled back. Existing rows keep their numbers and
  each tenant continues after its highest, so every ``?after=`` a client holds stays valid.
* **Tags before and after** (items 10, 11). The feed row and the NOTIFY payload carry the changed
  row's tags before and after the change (``b``/``a``; null where the row did not exist), so a
  watcher decides visibility through tag grants for a deleted row, and for a tag being added or
  removed, without a query. A payload that would pass NOTIFY's 8000 bytes is sent without URI and
  tags; the listener reads them from the feed by ``seq``, as it did for long URIs.
* **The platform audit log** (item 14). ``platform_audit_log`` is readable only in the platform
  scope. It receives tenant creations and deletions, and, just before a tenant is deleted (a
  trigger, whatever deletes it), that tenant's whole audit trail: the platform admin's record of a
  tenant that no longer exists.

The upgrade works on a populated database (sequences start after each tenant's highest seq, old
feed rows have unknown tags: null) and the downgrade restores the global identity after the
highest seq of any tenant.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The migration reads every tenant's rows; the tables force row-level security on their owner too.
ALL_TENANTS = "SELECT set_config('catalog.all_tenants', 'on', true)"

SEQUENCES_SQL = (
    # SECURITY DEFINER: the app's role may neither create sequences nor use ones it does not own;
    # these two functions do exactly one fixed thing each, named by a bigint.
    """
    CREATE FUNCTION catalog_next_change_seq(p_tenant bigint) RETURNS bigint
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
        SELECT nextval(('catalog_change_seq_' || p_tenant)::regclass)
    $$
    """,
    """
    CREATE FUNCTION catalog_tenant_sequence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %I', 'catalog_change_seq_' || NEW.id);
        ELSE
            EXECUTE format('DROP SEQUENCE IF EXISTS %I', 'catalog_change_seq_' || OLD.id);
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER tenants_change_seq AFTER INSERT OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION catalog_tenant_sequence()
    """,
    # Existing tenants: a sequence each, continuing after the tenant's highest seq.
    """
    DO $$
    DECLARE
        r record;
    BEGIN
        PERFORM set_config('catalog.all_tenants', 'on', true);
        FOR r IN
            SELECT t.id, coalesce((SELECT max(f.seq) FROM change_feed AS f WHERE f.tenant_id = t.id), 0) AS last
            FROM tenants AS t
        LOOP
            EXECUTE format(
                'CREATE SEQUENCE IF NOT EXISTS %I START WITH %s', 'catalog_change_seq_' || r.id, r.last + 1
            );
        END LOOP;
    END
    $$
    """,
)

EMIT_SQL = (
    """
    CREATE FUNCTION catalog_emit_change(
        p_tenant bigint, p_kind text, p_uri text, p_op text, p_before text[], p_after text[]
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        v_seq bigint := catalog_next_change_seq(p_tenant);
        v_payload text;
    BEGIN
        INSERT INTO change_feed (tenant_id, seq, kind, uri, op, tags_before, tags_after)
        VALUES (p_tenant, v_seq, p_kind, p_uri, p_op, p_before, p_after);
        IF octet_length(p_uri) <= 4000 THEN
            v_payload := json_build_object(
                't', p_tenant, 'k', p_kind, 'u', p_uri, 'o', p_op, 's', v_seq, 'b', p_before, 'a', p_after
            )::text;
        END IF;
        IF v_payload IS NULL OR octet_length(v_payload) > 7900 THEN
            -- NOTIFY payloads must stay below 8000 bytes; no URI (a tag grant), or one too long, or
            -- too many tags: the listener reads the URI and the tags from the feed by seq.
            v_payload := json_build_object('t', p_tenant, 'k', p_kind, 'u', NULL, 'o', p_op, 's', v_seq)::text;
        END IF;
        PERFORM pg_notify('catalog_changes', v_payload);
    END
    $$
    """,
    # The four-argument form stays, for changes that have no tags (any other trigger calling it).
    """
    CREATE OR REPLACE FUNCTION catalog_emit_change(p_tenant bigint, p_kind text, p_uri text, p_op text)
    RETURNS void LANGUAGE sql AS $$
        SELECT catalog_emit_change(p_tenant, p_kind, p_uri, p_op, NULL::text[], NULL::text[])
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION catalog_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_kind text := TG_ARGV[0];
        v_old text;
        v_new text;
        v_old_tags text[];
        v_new_tags text[];
    BEGIN
        IF TG_OP = 'DELETE' THEN
            -- A tenant being deleted takes its feed with it; there is no one left to tell.
            IF NOT EXISTS (SELECT 1 FROM tenants WHERE id = OLD.tenant_id) THEN
                RETURN NULL;
            END IF;
        END IF;
        -- One IF per table: PL/pgSQL resolves a record field only in the branch that runs.
        IF TG_TABLE_NAME = 'resources' THEN
            IF TG_OP <> 'INSERT' THEN v_old := OLD.uri; v_old_tags := OLD.tags; END IF;
            IF TG_OP <> 'DELETE' THEN v_new := NEW.uri; v_new_tags := NEW.tags; END IF;
        ELSIF TG_TABLE_NAME = 'templates' THEN
            IF TG_OP <> 'INSERT' THEN v_old := OLD.uri_template; v_old_tags := OLD.tags; END IF;
            IF TG_OP <> 'DELETE' THEN v_new := NEW.uri_template; v_new_tags := NEW.tags; END IF;
        ELSE
            IF TG_OP <> 'INSERT' THEN v_old := coalesce(OLD.uri, OLD.uri_prefix); END IF;
            IF TG_OP <> 'DELETE' THEN v_new := coalesce(NEW.uri, NEW.uri_prefix); END IF;
        END IF;
        IF TG_OP = 'INSERT' THEN
            PERFORM catalog_emit_change(NEW.tenant_id, v_kind, v_new, 'created', NULL, v_new_tags);
        ELSIF TG_OP = 'DELETE' THEN
            PERFORM catalog_emit_change(OLD.tenant_id, v_kind, v_old, 'deleted', v_old_tags, NULL);
        ELSIF v_old IS DISTINCT FROM v_new THEN
            -- A move is a deletion at the old URI and a creation at the new one.
            PERFORM catalog_emit_change(OLD.tenant_id, v_kind, v_old, 'deleted', v_old_tags, NULL);
            PERFORM catalog_emit_change(NEW.tenant_id, v_kind, v_new, 'created', NULL, v_new_tags);
        ELSE
            PERFORM catalog_emit_change(NEW.tenant_id, v_kind, v_new, 'updated', v_old_tags, v_new_tags);
        END IF;
        RETURN NULL;
    END
    $$
    """,
)

ARCHIVE_SQL = (
    """
    CREATE FUNCTION catalog_archive_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- The tenant's trail, in its own order, before the cascade deletes it.
        INSERT INTO platform_audit_log (
            tenant_id, tenant_slug, at, principal, action, target_kind, target_id, uri,
            before_digest, after_digest, detail
        )
        SELECT a.tenant_id, OLD.slug, a.at, a.principal, a.action, a.target_kind, a.target_id, a.uri,
               a.before_digest, a.after_digest, a.detail
        FROM audit_log AS a WHERE a.tenant_id = OLD.id ORDER BY a.id;
        RETURN OLD;
    END
    $$
    """,
    """
    CREATE TRIGGER tenants_archive_audit BEFORE DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION catalog_archive_audit()
    """,
    "ALTER TABLE platform_audit_log ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE platform_audit_log FORCE ROW LEVEL SECURITY",
    # Platform work only: no tenant-bound transaction sees or writes a row of it.
    """
    CREATE POLICY platform_only ON platform_audit_log
    USING (current_setting('catalog.all_tenants', true) = 'on')
    WITH CHECK (current_setting('catalog.all_tenants', true) = 'on')
    """,
    """
    DO $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
            GRANT SELECT, INSERT ON platform_audit_log TO catalog_app;
            GRANT USAGE, SELECT ON SEQUENCE platform_audit_log_id_seq TO catalog_app;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'cannot grant to role catalog_app';
    END
    $$
    """,
)

# -- downgrade: the 0001 functions as they were -------------------------------------------------------

OLD_EMIT_SQL = """
    CREATE OR REPLACE FUNCTION catalog_emit_change(p_tenant bigint, p_kind text, p_uri text, p_op text)
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
"""

OLD_RECORD_SQL = """
    CREATE OR REPLACE FUNCTION catalog_record_change() RETURNS trigger LANGUAGE plpgsql AS $$
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
"""

RESTORE_IDENTITY_SQL = (
    "ALTER TABLE change_feed ALTER COLUMN seq ADD GENERATED BY DEFAULT AS IDENTITY",
    # One identity for all tenants again, after the highest seq of any tenant: (tenant_id, seq)
    # stays unique and every tenant's feed keeps growing.
    """
    SELECT setval(
        pg_get_serial_sequence('change_feed', 'seq'),
        coalesce((SELECT max(seq) FROM change_feed), 0) + 1,
        false
    )
    """,
    """
    DO $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
            EXECUTE format(
                'GRANT USAGE, SELECT ON SEQUENCE %s TO catalog_app', pg_get_serial_sequence('change_feed', 'seq')
            );
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'cannot grant to role catalog_app';
    END
    $$
    """,
)

DROP_SEQUENCES_SQL = """
    DO $$
    DECLARE
        r record;
    BEGIN
        FOR r IN SELECT c.relname FROM pg_class AS c
                 WHERE c.relkind = 'S' AND c.relname LIKE 'catalog\\_change\\_seq\\_%'
        LOOP
            EXECUTE format('DROP SEQUENCE IF EXISTS %I', r.relname);
        END LOOP;
    END
    $$
"""


def upgrade() -> None:
    op.execute(ALL_TENANTS)
    op.create_table(
        "platform_audit_log",
        sa.Column("tenant_id", sa.BigInteger(), nullable=False),
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_slug", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("target_kind", sa.Text(), nullable=False),
        sa.Column("target_id", sa.BigInteger(), nullable=True),
        sa.Column("uri", sa.Text(collation="C"), nullable=True),
        sa.Column("before_digest", sa.Text(), nullable=True),
        sa.Column("after_digest", sa.Text(), nullable=True),
        sa.Column("detail", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_platform_audit_log")),
    )
    op.create_index("ix_platform_audit_log_id", "platform_audit_log", ["id"], unique=False)
    for statement in ARCHIVE_SQL:
        op.execute(statement)

    op.add_column("change_feed", sa.Column("tags_before", postgresql.ARRAY(sa.Text()), nullable=True))
    op.add_column("change_feed", sa.Column("tags_after", postgresql.ARRAY(sa.Text()), nullable=True))
    op.execute("ALTER TABLE change_feed ALTER COLUMN seq DROP IDENTITY IF EXISTS")
    for statement in (*SEQUENCES_SQL, *EMIT_SQL):
        op.execute(statement)


def downgrade() -> None:
    op.execute(ALL_TENANTS)
    op.execute(OLD_EMIT_SQL)
    op.execute(OLD_RECORD_SQL)
    op.execute("DROP FUNCTION catalog_emit_change(bigint, text, text, text, text[], text[])")
    op.execute("DROP TRIGGER IF EXISTS tenants_change_seq ON tenants")
    op.execute("DROP FUNCTION IF EXISTS catalog_tenant_sequence()")
    op.execute("DROP FUNCTION IF EXISTS catalog_next_change_seq(bigint)")
    op.execute(DROP_SEQUENCES_SQL)
    for statement in RESTORE_IDENTITY_SQL:
        op.execute(statement)
    op.drop_column("change_feed", "tags_after")
    op.drop_column("change_feed", "tags_before")

    op.execute("DROP TRIGGER IF EXISTS tenants_archive_audit ON tenants")
    op.execute("DROP FUNCTION IF EXISTS catalog_archive_audit()")
    op.drop_index("ix_platform_audit_log_id", table_name="platform_audit_log")
    op.drop_table("platform_audit_log")
