"""Import: the feed and audit hold to their tenant per statement; a row knows the line it came from.

``audit_log`` and ``change_feed`` had a foreign key to ``tenants`` (``ON DELETE CASCADE``), checked
row by row: an import appends an audit row and a feed row per resource, and those two checks were
about a tenth of the database's work for each resource written (``BENCHMARKS.md``). The keys go;
what they guaranteed is kept by three triggers:

* **A row names a tenant that exists.** After each ``INSERT`` into either table, one
  statement-level trigger (``catalog_rows_have_tenant``, over the statement's transition table)
  locks the statement's distinct tenants ``FOR KEY SHARE`` -- what a foreign key's check takes, once
  per tenant instead of once per row -- and refuses the statement with ``foreign_key_violation``
  (23503, as the key did) if one is missing. A tenant being deleted meanwhile is waited for and
  then found missing; a delete that comes second waits for the writer's commit.
* **A row's tenant never changes** (``catalog_tenant_kept``, before each ``UPDATE`` that would
  change ``tenant_id``; the feed's commit-time renumbering changes only ``seq``).
* **A tenant's delete removes its rows** (``catalog_tenant_forget``, after the tenant's row is
  deleted, in the platform's scope: whatever session deletes it). Its audit trail was copied to
  ``platform_audit_log`` first, as before (0004).

And ``resources.import_line_sha256``: the fingerprint of the JSONL line (and of the rules that read
it) whose import last wrote the row, NULL once any other write changes it
(``catalog.core.resources.writer``). A re-import skips a line whose fingerprint its URI's row still
carries, without parsing it: the same bytes under the same rules make the same row.

The downgrade drops the column and the triggers, removes any row whose tenant is gone (none, while
the triggers held), and restores the keys.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 20:10:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("audit_log", "change_feed")

UPGRADE_SQL = (
    "ALTER TABLE resources ADD COLUMN import_line_sha256 bytea",
    *(f"ALTER TABLE {table} DROP CONSTRAINT fk_{table}_tenant_id_tenants" for table in TABLES),
    """
    CREATE FUNCTION catalog_rows_have_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_tenants bigint[];
        v_locked bigint;
        v_missing bigint;
    BEGIN
        SELECT array_agg(DISTINCT n.tenant_id ORDER BY n.tenant_id) INTO v_tenants FROM new_rows AS n;
        IF v_tenants IS NULL THEN
            RETURN NULL;
        END IF;
        -- Tenant order: two statements never wait on each other crosswise.
        SELECT count(*) INTO v_locked FROM (
            SELECT t.id FROM tenants AS t WHERE t.id = ANY (v_tenants) ORDER BY t.id FOR KEY SHARE OF t
        ) AS held;
        IF v_locked < cardinality(v_tenants) THEN
            SELECT min(m.id) INTO v_missing FROM unnest(v_tenants) AS m(id)
            WHERE NOT EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = m.id);
            RAISE EXCEPTION 'insert into % names tenant %, which does not exist', TG_TABLE_NAME, v_missing
                USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE FUNCTION catalog_tenant_kept() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'a row of % keeps its tenant (% -> %)', TG_TABLE_NAME, OLD.tenant_id, NEW.tenant_id
            USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME;
    END
    $$
    """,
    """
    CREATE FUNCTION catalog_tenant_forget() RETURNS trigger LANGUAGE plpgsql
    SET catalog.all_tenants = 'on' AS $$
    BEGIN
        DELETE FROM change_feed WHERE tenant_id = OLD.id;
        DELETE FROM audit_log WHERE tenant_id = OLD.id;
        RETURN NULL;
    END
    $$
    """,
    *(
        statement
        for table in TABLES
        for statement in (
            f"CREATE TRIGGER {table}_tenant_exists AFTER INSERT ON {table}"
            " REFERENCING NEW TABLE AS new_rows"
            " FOR EACH STATEMENT EXECUTE FUNCTION catalog_rows_have_tenant()",
            f"CREATE TRIGGER {table}_tenant_kept BEFORE UPDATE ON {table}"
            " FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)"
            " EXECUTE FUNCTION catalog_tenant_kept()",
        )
    ),
    "CREATE TRIGGER tenants_forget AFTER DELETE ON tenants"
    " FOR EACH ROW EXECUTE FUNCTION catalog_tenant_forget()",
)

DOWNGRADE_SQL = (
    "ALTER TABLE resources DROP COLUMN import_line_sha256",
    "DROP TRIGGER tenants_forget ON tenants",
    *(
        statement
        for table in TABLES
        for statement in (
            f"DROP TRIGGER {table}_tenant_exists ON {table}",
            f"DROP TRIGGER {table}_tenant_kept ON {table}",
        )
    ),
    "DROP FUNCTION catalog_tenant_forget()",
    "DROP FUNCTION catalog_tenant_kept()",
    "DROP FUNCTION catalog_rows_have_tenant()",
    # The tables force row-level security on their owner too: the cleanup reads every tenant's rows.
    "SELECT set_config('catalog.all_tenants', 'on', true)",
    *(
        statement
        for table in TABLES
        for statement in (
            f"DELETE FROM {table} AS x WHERE NOT EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = x.tenant_id)",
            f"ALTER TABLE {table} ADD CONSTRAINT fk_{table}_tenant_id_tenants FOREIGN KEY (tenant_id)"
            " REFERENCES tenants (id) ON DELETE CASCADE",
        )
    ),
)


def upgrade() -> None:
    for statement in UPGRADE_SQL:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE_SQL:
        op.execute(statement)
