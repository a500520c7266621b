"""Set-based writes of resources: statement-level triggers with transition tables (issue 13 item 3).

The change feed and the tag rows of ``resources`` were written by row-level triggers: a statement
that wrote a million rows ran two PL/pgSQL functions a million times and sent a million NOTIFYs.
They are now statement-level triggers reading the statement's transition tables (``REFERENCING NEW
TABLE`` / ``OLD TABLE``), so a bulk ``INSERT ... SELECT ... ON CONFLICT`` writes its feed rows and tag
rows in a few set-based statements:

* **One feed row per changed resource**, as before (created, updated, deleted; a move is a deletion
  and a creation), numbered from the tenant's own sequence (``catalog_next_change_seqs``: a block of
  numbers in one call).
* **NOTIFY**: a statement that changed one row announces its change(s) exactly as the row trigger
  did (``catalog_emit_change``: the same feed row, the same payload). A statement that changed more
  rows sends **one** NOTIFY per tenant: ``{"t", "k", "u": null, "o": "bulk", "f": first seq, "s":
  last seq, "n": count}``; the listener (``catalog.events.listener``) reads a small range back from
  the feed as single events and turns a large one into a gap (subscribers re-read what they watch).
* **Tag rows** (``resource_tags``): inserted for new rows, replaced for rows whose URI or tags
  changed, as ``catalog_sync_resource_tags`` did row by row.

Templates and grants keep their row-level triggers (written one at a time). The downgrade restores
the row-level triggers of resources.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 03:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE_SQL = (
    "DROP TRIGGER IF EXISTS resources_change ON resources",
    "DROP TRIGGER IF EXISTS resources_tags ON resources",
    "DROP FUNCTION IF EXISTS catalog_sync_resource_tags()",
    # A block of the tenant's change numbers in one call (SECURITY DEFINER for the reason of
    # catalog_next_change_seq: the app's role may not use a sequence it does not own).
    """
    CREATE FUNCTION catalog_next_change_seqs(p_tenant bigint, p_count bigint) RETURNS bigint[]
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DECLARE
        v_sequence regclass := ('catalog_change_seq_' || p_tenant)::regclass;  -- looked up once
    BEGIN
        RETURN ARRAY(SELECT nextval(v_sequence) AS seq FROM generate_series(1, p_count) ORDER BY seq);
    END
    $$
    """,
    # The changes of one statement, in order (tags as text: arrays of arrays must be rectangular).
    # One row changed: exactly what the row trigger did, change by change. More: the feed rows in
    # one statement and one NOTIFY per tenant naming the range of seqs.
    """
    CREATE FUNCTION catalog_emit_changes(
        p_kind text, p_rows bigint, p_tenants bigint[], p_uris text[], p_ops text[],
        p_before text[], p_after text[]
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        v_tenant bigint;
        v_seqs bigint[];
        v_n bigint;
    BEGIN
        IF p_tenants IS NULL THEN
            RETURN;
        END IF;
        IF p_rows <= 1 THEN
            FOR i IN 1 .. array_length(p_tenants, 1) LOOP
                PERFORM catalog_emit_change(
                    p_tenants[i], p_kind, p_uris[i], p_ops[i], p_before[i]::text[], p_after[i]::text[]
                );
            END LOOP;
            RETURN;
        END IF;
        -- Tenant by tenant (a statement of the app writes one tenant's rows: one round), the
        -- tenant's changes numbered in statement order from one block of its sequence.
        FOR v_tenant IN SELECT DISTINCT t FROM unnest(p_tenants) AS t ORDER BY t LOOP
            IF p_tenants <@ ARRAY[v_tenant] THEN
                v_seqs := catalog_next_change_seqs(v_tenant, array_length(p_tenants, 1));
                INSERT INTO change_feed (tenant_id, seq, kind, uri, op, tags_before, tags_after)
                SELECT v_tenant, v_seqs[c.ord], p_kind, c.uri, c.op, c.b::text[], c.a::text[]
                FROM unnest(p_uris, p_ops, p_before, p_after) WITH ORDINALITY AS c(uri, op, b, a, ord);
            ELSE
                SELECT count(*) INTO v_n FROM unnest(p_tenants) AS t WHERE t = v_tenant;
                v_seqs := catalog_next_change_seqs(v_tenant, v_n);
                INSERT INTO change_feed (tenant_id, seq, kind, uri, op, tags_before, tags_after)
                SELECT v_tenant, v_seqs[row_number() OVER (ORDER BY c.ord)], p_kind, c.uri, c.op,
                       c.b::text[], c.a::text[]
                FROM unnest(p_tenants, p_uris, p_ops, p_before, p_after)
                     WITH ORDINALITY AS c(t, uri, op, b, a, ord)
                WHERE c.t = v_tenant;
            END IF;
            PERFORM pg_notify('catalog_changes', json_build_object(
                't', v_tenant, 'k', p_kind, 'u', NULL, 'o', 'bulk',
                'f', v_seqs[1], 's', v_seqs[array_length(v_seqs, 1)], 'n', array_length(v_seqs, 1))::text);
        END LOOP;
    END
    $$
    """,
    # One function for the three statement triggers of resources; each branch reads only the
    # transition tables its event has (PL/pgSQL plans a statement when it first runs it).
    """
    CREATE FUNCTION catalog_resource_statement() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        v_rows bigint;
        v_tenants bigint[];
        v_uris text[];
        v_ops text[];
        v_before text[];
        v_after text[];
    BEGIN
        IF TG_OP = 'INSERT' THEN
            SELECT count(*) INTO v_rows FROM new_rows;
            IF v_rows = 0 THEN
                RETURN NULL;
            END IF;
            SELECT array_agg(n.tenant_id), array_agg(n.uri), array_agg('created'::text),
                   array_agg(NULL::text), array_agg(n.tags::text)
            INTO v_tenants, v_uris, v_ops, v_before, v_after
            FROM (SELECT * FROM new_rows ORDER BY tenant_id, id) AS n;
            INSERT INTO resource_tags (tenant_id, tag, uri, resource_id)
            SELECT DISTINCT n.tenant_id, tag, n.uri, n.id
            FROM new_rows AS n CROSS JOIN LATERAL unnest(n.tags) AS tag
            WHERE cardinality(n.tags) > 0;
        ELSIF TG_OP = 'UPDATE' THEN
            SELECT count(*) INTO v_rows FROM new_rows;
            IF v_rows = 0 THEN
                RETURN NULL;
            END IF;
            -- A move is a deletion at the old URI and a creation at the new one.
            SELECT array_agg(c.tenant_id), array_agg(c.uri), array_agg(c.op),
                   array_agg(c.tags_before), array_agg(c.tags_after)
            INTO v_tenants, v_uris, v_ops, v_before, v_after
            FROM (
                SELECT x.* FROM (
                    SELECT n.tenant_id, n.id, 0 AS sub, o.uri, 'deleted' AS op,
                           o.tags::text AS tags_before, NULL::text AS tags_after
                    FROM old_rows AS o JOIN new_rows AS n ON n.tenant_id = o.tenant_id AND n.id = o.id
                    WHERE o.uri IS DISTINCT FROM n.uri
                    UNION ALL
                    SELECT n.tenant_id, n.id, 1 AS sub, n.uri,
                           CASE WHEN o.uri IS DISTINCT FROM n.uri THEN 'created' ELSE 'updated' END,
                           CASE WHEN o.uri IS DISTINCT FROM n.uri THEN NULL ELSE o.tags::text END,
                           n.tags::text
                    FROM old_rows AS o JOIN new_rows AS n ON n.tenant_id = o.tenant_id AND n.id = o.id
                ) AS x ORDER BY x.tenant_id, x.id, x.sub
            ) AS c;
            DELETE FROM resource_tags AS rt
            USING old_rows AS o JOIN new_rows AS n ON n.tenant_id = o.tenant_id AND n.id = o.id
            WHERE (o.uri IS DISTINCT FROM n.uri OR o.tags IS DISTINCT FROM n.tags)
              AND rt.tenant_id = o.tenant_id AND rt.resource_id = o.id;
            INSERT INTO resource_tags (tenant_id, tag, uri, resource_id)
            SELECT DISTINCT n.tenant_id, tag, n.uri, n.id
            FROM old_rows AS o JOIN new_rows AS n ON n.tenant_id = o.tenant_id AND n.id = o.id
                 CROSS JOIN LATERAL unnest(n.tags) AS tag
            WHERE o.uri IS DISTINCT FROM n.uri OR o.tags IS DISTINCT FROM n.tags;
        ELSE
            SELECT count(*) INTO v_rows FROM old_rows;
            -- A tenant being deleted takes its feed with it; there is no one left to tell.
            SELECT array_agg(o.tenant_id), array_agg(o.uri), array_agg('deleted'::text),
                   array_agg(o.tags::text), array_agg(NULL::text)
            INTO v_tenants, v_uris, v_ops, v_before, v_after
            FROM (
                SELECT * FROM old_rows AS d
                WHERE EXISTS (SELECT 1 FROM tenants AS t WHERE t.id = d.tenant_id)
                ORDER BY d.tenant_id, d.id
            ) AS o;
        END IF;
        PERFORM catalog_emit_changes('resource', v_rows, v_tenants, v_uris, v_ops, v_before, v_after);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER resources_change_insert AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_resource_statement()
    """,
    """
    CREATE TRIGGER resources_change_update AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_resource_statement()
    """,
    """
    CREATE TRIGGER resources_change_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION catalog_resource_statement()
    """,
)

# -- downgrade: the row-level triggers of 0001 (catalog_record_change as 0004 left it) -------------

DOWNGRADE_SQL = (
    "DROP TRIGGER IF EXISTS resources_change_insert ON resources",
    "DROP TRIGGER IF EXISTS resources_change_update ON resources",
    "DROP TRIGGER IF EXISTS resources_change_delete ON resources",
    "DROP FUNCTION IF EXISTS catalog_resource_statement()",
    "DROP FUNCTION IF EXISTS catalog_emit_changes(text, bigint, bigint[], text[], text[], text[], text[])",
    "DROP FUNCTION IF EXISTS catalog_next_change_seqs(bigint, bigint)",
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
)


def upgrade() -> None:
    for statement in UPGRADE_SQL:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE_SQL:
        op.execute(statement)
