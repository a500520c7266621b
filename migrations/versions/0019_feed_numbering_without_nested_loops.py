"""The commit-time numbering of the change feed without nested loops.

``catalog_number_changes`` (0011) renumbers a transaction's unnumbered feed rows with one UPDATE
joined to a window subquery over the same rows. The feed's statistics know only committed, positive
numbers, so the planner expects one unnumbered row and chose a nested loop whose inner side, the
window subquery, ran again for every row: quadratic in the rows the transaction wrote (an import or
a COPY of 20,000 resources into a tenant whose feed had been analyzed committed for minutes; one of
1,000,000 did not finish). The function now runs with ``enable_nestloop = off``: a hash or merge
join, linear, and nothing more for the one row of a single write. Its body is unchanged.

The text is frozen here; the current definition of every function is in
``catalog/db/sql/functions.sql``. Downgrade restores 0011's definition.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 17:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NUMBER_CHANGES_SQL = """
CREATE OR REPLACE FUNCTION catalog_number_changes() RETURNS trigger LANGUAGE plpgsql
SET catalog.all_tenants = 'on' SET enable_nestloop = 'off' AS $$
DECLARE
    v_tenants text := current_setting('catalog.feed_tenants', true);
    v_tenant bigint;
    v_n bigint;
    v_first bigint;
    v_payload text;
    r record;
BEGIN
    IF coalesce(v_tenants, '') = '' THEN
        RETURN NULL;  -- numbered by the event of another tenant of this transaction
    END IF;
    PERFORM set_config('catalog.feed_tenants', '', true);
    FOR v_tenant IN
        SELECT t::bigint FROM unnest(string_to_array(trim(BOTH ',' FROM v_tenants), ',')) AS t
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(1667788391, (v_tenant & 2147483647)::integer);
        SELECT count(*) INTO v_n FROM change_feed AS f WHERE f.tenant_id = v_tenant AND f.seq < 0;
        CONTINUE WHEN v_n = 0;  -- the tenant deleted meanwhile
        v_first := catalog_take_change_seqs(v_tenant, v_n);
        UPDATE change_feed AS f SET seq = v_first + m.rn - 1
        FROM (
            SELECT c.seq, row_number() OVER (ORDER BY c.seq DESC) AS rn
            FROM change_feed AS c WHERE c.tenant_id = v_tenant AND c.seq < 0
        ) AS m
        WHERE f.tenant_id = v_tenant AND f.seq = m.seq;
        IF v_n <= 16 THEN
            FOR r IN
                SELECT f.* FROM change_feed AS f
                WHERE f.tenant_id = v_tenant AND f.seq BETWEEN v_first AND v_first + v_n - 1
                ORDER BY f.seq
            LOOP
                v_payload := NULL;
                IF octet_length(r.uri) <= 4000 THEN
                    v_payload := json_build_object(
                        't', v_tenant, 'k', r.kind, 'u', r.uri, 'o', r.op, 's', r.seq,
                        'b', r.tags_before, 'a', r.tags_after
                    )::text;
                END IF;
                IF v_payload IS NULL OR octet_length(v_payload) > 7900 THEN
                    -- NOTIFY payloads must stay below 8000 bytes: the listener reads the URI
                    -- and the tags from the feed by seq.
                    v_payload := json_build_object(
                        't', v_tenant, 'k', r.kind, 'u', NULL, 'o', r.op, 's', r.seq
                    )::text;
                END IF;
                PERFORM pg_notify('catalog_changes', v_payload);
            END LOOP;
        ELSE
            FOR r IN
                SELECT f.kind, min(f.seq) AS first, max(f.seq) AS last, count(*) AS n
                FROM change_feed AS f
                WHERE f.tenant_id = v_tenant AND f.seq BETWEEN v_first AND v_first + v_n - 1
                GROUP BY f.kind ORDER BY min(f.seq)
            LOOP
                PERFORM pg_notify('catalog_changes', json_build_object(
                    't', v_tenant, 'k', r.kind, 'u', NULL, 'o', 'bulk',
                    'f', r.first, 's', r.last, 'n', r.n)::text);
            END LOOP;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$
"""

PREVIOUS_NUMBER_CHANGES_SQL = """
CREATE OR REPLACE FUNCTION catalog_number_changes() RETURNS trigger LANGUAGE plpgsql
SET catalog.all_tenants = 'on' AS $$
DECLARE
    v_tenants text := current_setting('catalog.feed_tenants', true);
    v_tenant bigint;
    v_n bigint;
    v_first bigint;
    v_payload text;
    r record;
BEGIN
    IF coalesce(v_tenants, '') = '' THEN
        RETURN NULL;  -- numbered by the event of another tenant of this transaction
    END IF;
    PERFORM set_config('catalog.feed_tenants', '', true);
    FOR v_tenant IN
        SELECT t::bigint FROM unnest(string_to_array(trim(BOTH ',' FROM v_tenants), ',')) AS t
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(1667788391, (v_tenant & 2147483647)::integer);
        SELECT count(*) INTO v_n FROM change_feed AS f WHERE f.tenant_id = v_tenant AND f.seq < 0;
        CONTINUE WHEN v_n = 0;  -- the tenant deleted meanwhile
        v_first := catalog_take_change_seqs(v_tenant, v_n);
        UPDATE change_feed AS f SET seq = v_first + m.rn - 1
        FROM (
            SELECT c.seq, row_number() OVER (ORDER BY c.seq DESC) AS rn
            FROM change_feed AS c WHERE c.tenant_id = v_tenant AND c.seq < 0
        ) AS m
        WHERE f.tenant_id = v_tenant AND f.seq = m.seq;
        IF v_n <= 16 THEN
            FOR r IN
                SELECT f.* FROM change_feed AS f
                WHERE f.tenant_id = v_tenant AND f.seq BETWEEN v_first AND v_first + v_n - 1
                ORDER BY f.seq
            LOOP
                v_payload := NULL;
                IF octet_length(r.uri) <= 4000 THEN
                    v_payload := json_build_object(
                        't', v_tenant, 'k', r.kind, 'u', r.uri, 'o', r.op, 's', r.seq,
                        'b', r.tags_before, 'a', r.tags_after
                    )::text;
                END IF;
                IF v_payload IS NULL OR octet_length(v_payload) > 7900 THEN
                    -- NOTIFY payloads must stay below 8000 bytes: the listener reads the URI
                    -- and the tags from the feed by seq.
                    v_payload := json_build_object(
                        't', v_tenant, 'k', r.kind, 'u', NULL, 'o', r.op, 's', r.seq
                    )::text;
                END IF;
                PERFORM pg_notify('catalog_changes', v_payload);
            END LOOP;
        ELSE
            FOR r IN
                SELECT f.kind, min(f.seq) AS first, max(f.seq) AS last, count(*) AS n
                FROM change_feed AS f
                WHERE f.tenant_id = v_tenant AND f.seq BETWEEN v_first AND v_first + v_n - 1
                GROUP BY f.kind ORDER BY min(f.seq)
            LOOP
                PERFORM pg_notify('catalog_changes', json_build_object(
                    't', v_tenant, 'k', r.kind, 'u', NULL, 'o', 'bulk',
                    'f', r.first, 's', r.last, 'n', r.n)::text);
            END LOOP;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.execute(NUMBER_CHANGES_SQL)


def downgrade() -> None:
    op.execute(PREVIOUS_NUMBER_CHANGES_SQL)
