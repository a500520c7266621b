"""The change feed numbered at commit: a tenant's seqs follow the order its changes became visible.

``seq`` was taken from the tenant's sequence when a change was written, not when it committed. A
transaction that took N and committed after another took and committed N+1 was never delivered to a
follower that had read past N+1 (``/changes?after=``, ``/changes/stream``), though the feed held
both. Now:

* A change is written with a **provisional** number: negative, unique, from one global sequence
  (``catalog_change_provisional_seq``), in write order. Other sessions never see it (it is not
  committed); committed rows always carry their final, positive seq.
* The first unnumbered change of a tenant in a transaction queues one ``DEFERRABLE INITIALLY
  DEFERRED`` constraint-trigger event on ``change_feed`` (its ``WHEN`` lists the tenant in a
  transaction-local setting, so a million-row import queues one event, not a million). At commit
  ``catalog_number_changes`` runs: for each tenant listed (in tenant order, so two transactions never
  wait on each other crosswise) it takes the tenant's commit lock (a transaction-level advisory
  lock), takes a block of the tenant's sequence in one call, gives the transaction's rows their
  final numbers in write order, and sends the NOTIFY. The lock is released only once the commit is
  visible, so the tenant's next transaction numbers after it: a reader that sees seq N+1 sees every
  seq up to it, and a cursor ``after=N`` never skips a change.
* Writers of a tenant wait on each other only for the commit instant of another (its renumbering,
  one UPDATE of its own rows), never for a whole transaction; other tenants never wait at all.
* A rolled-back transaction takes no number: a tenant's feed is numbered 1, 2, 3, ... without gaps.
* NOTIFY moves to the commit too (it carries the final seq): a transaction with a few changes of a
  tenant sends each one's payload as ``catalog_emit_change`` did; with more, one ``bulk`` payload
  per kind naming the range of its seqs (the listener reads a small range back, a large one is a
  gap), as a statement of many rows did.

Existing rows keep their numbers and each tenant's sequence continues, so every ``after=`` a client
holds stays valid. The downgrade restores 0004's ``catalog_emit_change`` and 0006's
``catalog_emit_changes`` (numbers taken at write) and drops what this adds.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 09:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The advisory-lock class of a tenant's commit lock (two-int form: its own key space).
FEED_LOCK_CLASS = 1667788391
# A transaction with up to this many changes of a tenant announces each (as a single-row statement
# did); with more, one bulk payload per kind names their range (as a statement of many rows did).
NOTIFY_EACH = 16

UPGRADE_SQL = (
    # CACHE: a session takes provisional numbers without touching the sequence each time; they need
    # to be unique, and increasing within a transaction, only.
    "CREATE SEQUENCE catalog_change_provisional_seq CACHE 100",
    """
    DO $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
            GRANT USAGE, SELECT ON SEQUENCE catalog_change_provisional_seq TO catalog_app;
        END IF;
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE NOTICE 'cannot grant to role catalog_app';
    END
    $$
    """,
    # A block of p_count numbers of the tenant's sequence in one call; the first is returned. Only
    # contiguous because every caller holds the tenant's commit lock (catalog_number_changes).
    # SECURITY DEFINER for the reason of catalog_next_change_seq (0004).
    """
    CREATE FUNCTION catalog_take_change_seqs(p_tenant bigint, p_count bigint) RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DECLARE
        v_sequence regclass := ('catalog_change_seq_' || p_tenant)::regclass;
        v_first bigint := nextval(v_sequence);
    BEGIN
        IF p_count > 1 THEN
            PERFORM setval(v_sequence, v_first + p_count - 1);
        END IF;
        RETURN v_first;
    END
    $$
    """,
    # Whether this is the transaction's first unnumbered change of the tenant since its changes
    # were last numbered: the tenants are listed in a transaction-local setting (a rollback to a
    # savepoint restores it with the rows it covered), so one commit-time event is queued per
    # transaction and tenant, not one per row.
    """
    CREATE FUNCTION catalog_feed_first(p_tenant bigint) RETURNS boolean LANGUAGE sql VOLATILE AS $$
        SELECT CASE
            WHEN strpos(coalesce(current_setting('catalog.feed_tenants', true), ''), ',' || p_tenant || ',') > 0
            THEN false
            ELSE set_config(
                'catalog.feed_tenants',
                coalesce(nullif(current_setting('catalog.feed_tenants', true), ''), ',') || p_tenant || ',',
                true
            ) IS NOT NULL
        END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION catalog_emit_change(
        p_tenant bigint, p_kind text, p_uri text, p_op text, p_before text[], p_after text[]
    ) RETURNS void LANGUAGE sql AS $$
        INSERT INTO change_feed (tenant_id, seq, kind, uri, op, tags_before, tags_after)
        VALUES (p_tenant, -nextval('catalog_change_provisional_seq'), p_kind, p_uri, p_op, p_before, p_after)
    $$
    """,
    # 0006's function without numbers and NOTIFY (both at commit); rows in statement order.
    """
    CREATE OR REPLACE FUNCTION catalog_emit_changes(
        p_kind text, p_rows bigint, p_tenants bigint[], p_uris text[], p_ops text[],
        p_before text[], p_after text[]
    ) RETURNS void LANGUAGE plpgsql AS $$
    DECLARE
        v_tenant bigint;
    BEGIN
        IF p_tenants IS NULL THEN
            RETURN;
        END IF;
        FOR v_tenant IN SELECT DISTINCT t FROM unnest(p_tenants) AS t ORDER BY t LOOP
            INSERT INTO change_feed (tenant_id, seq, kind, uri, op, tags_before, tags_after)
            SELECT v_tenant, -nextval('catalog_change_provisional_seq'), p_kind, c.uri, c.op,
                   c.b::text[], c.a::text[]
            FROM unnest(p_tenants, p_uris, p_ops, p_before, p_after)
                 WITH ORDINALITY AS c(t, uri, op, b, a, ord)
            WHERE c.t = v_tenant;
        END LOOP;
    END
    $$
    """,
    # At commit: the final numbers and the NOTIFYs, for every tenant listed, in tenant order (two
    # transactions never wait on each other crosswise). all_tenants for its own duration: the rows
    # are found whatever scope the transaction ended in.
    f"""
    CREATE FUNCTION catalog_number_changes() RETURNS trigger LANGUAGE plpgsql
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
            PERFORM pg_advisory_xact_lock({FEED_LOCK_CLASS}, (v_tenant & 2147483647)::integer);
            SELECT count(*) INTO v_n FROM change_feed AS f WHERE f.tenant_id = v_tenant AND f.seq < 0;
            CONTINUE WHEN v_n = 0;  -- the tenant deleted meanwhile
            v_first := catalog_take_change_seqs(v_tenant, v_n);
            UPDATE change_feed AS f SET seq = v_first + m.rn - 1
            FROM (
                SELECT c.seq, row_number() OVER (ORDER BY c.seq DESC) AS rn
                FROM change_feed AS c WHERE c.tenant_id = v_tenant AND c.seq < 0
            ) AS m
            WHERE f.tenant_id = v_tenant AND f.seq = m.seq;
            IF v_n <= {NOTIFY_EACH} THEN
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
    """,
    """
    CREATE CONSTRAINT TRIGGER change_feed_number AFTER INSERT ON change_feed
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.seq < 0 AND catalog_feed_first(NEW.tenant_id))
    EXECUTE FUNCTION catalog_number_changes()
    """,
)

# -- downgrade: numbers taken at write (0004's catalog_emit_change, 0006's catalog_emit_changes) -----

DOWNGRADE_SQL = (
    """
    CREATE OR REPLACE FUNCTION catalog_emit_change(
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
            v_payload := json_build_object('t', p_tenant, 'k', p_kind, 'u', NULL, 'o', p_op, 's', v_seq)::text;
        END IF;
        PERFORM pg_notify('catalog_changes', v_payload);
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION catalog_emit_changes(
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
    "DROP TRIGGER IF EXISTS change_feed_number ON change_feed",
    "DROP FUNCTION IF EXISTS catalog_number_changes()",
    "DROP FUNCTION IF EXISTS catalog_feed_first(bigint)",
    "DROP FUNCTION IF EXISTS catalog_take_change_seqs(bigint, bigint)",
    "DROP SEQUENCE IF EXISTS catalog_change_provisional_seq",
)


def upgrade() -> None:
    for statement in UPGRADE_SQL:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE_SQL:
        op.execute(statement)
