-- Every function and trigger of the catalog's schema, as it is in a database migrated to the head.
--
-- This file is the one place to read the SQL that runs: each definition below is the current one,
-- whichever migration created or last replaced it. Migrations carry frozen copies (they never read
-- this file, nor one another); a change is made here and copied into a new migration.
-- tests/db/test_sql_definitions.py holds the two to each other: on a migrated database it drops every
-- catalog function (and with them the triggers), runs this file, and compares pg_get_functiondef
-- and pg_get_triggerdef before and after, indentation aside; a function or trigger only one of
-- them has fails it too.
--
-- Row-level security binds every function except the SECURITY DEFINER ones (each says why); a
-- function that reads tenant rows sets the statement's scope itself and restores it.

-- == Credentials ===================================================================================

-- A token lookup in one statement (0002, 0003): the row-level-security scope widened for its own
-- query only, the caller's setting restored before it returns.
CREATE OR REPLACE FUNCTION catalog_token_principal(p_hash bytea)
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
$$;

-- Tells open streams that a credential was revoked or changed (0003).
CREATE OR REPLACE FUNCTION catalog_credential_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('catalog_credentials', json_build_object(
        't', OLD.tenant_id,
        'k', OLD.id,
        'o', CASE WHEN TG_OP = 'DELETE' OR NEW.revoked_at IS NOT NULL THEN 'revoked' ELSE 'changed' END
    )::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER tokens_credential_changed
AFTER UPDATE OF revoked_at, expires_at OR DELETE ON tokens
FOR EACH ROW EXECUTE FUNCTION catalog_credential_changed();

-- == The change feed ===============================================================================
--
-- Every insert, update and delete of a resource, template or grant is written to change_feed with
-- a provisional (negative) seq; at commit catalog_number_changes gives the transaction's rows their
-- tenant's next numbers and sends the NOTIFYs (0011). Tenants have a sequence each (0004).

-- SECURITY DEFINER: the app's role may neither create sequences nor use ones it does not own;
-- these functions do exactly one fixed thing each, named by a bigint.
-- catalog_next_change_seq and catalog_next_change_seqs number changes at write, as before 0011:
-- nothing calls them at the head; 0011's downgrade restores the functions that did.
CREATE OR REPLACE FUNCTION catalog_next_change_seq(p_tenant bigint) RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
SELECT nextval(('catalog_change_seq_' || p_tenant)::regclass)
$$;

CREATE OR REPLACE FUNCTION catalog_next_change_seqs(p_tenant bigint, p_count bigint) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    v_sequence regclass := ('catalog_change_seq_' || p_tenant)::regclass;  -- looked up once
BEGIN
    RETURN ARRAY(SELECT nextval(v_sequence) AS seq FROM generate_series(1, p_count) ORDER BY seq);
END
$$;

-- A block of p_count numbers of the tenant's sequence in one call; the first is returned. Only
-- contiguous because every caller holds the tenant's commit lock (catalog_number_changes).
CREATE OR REPLACE FUNCTION catalog_take_change_seqs(p_tenant bigint, p_count bigint) RETURNS bigint
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
$$;

CREATE OR REPLACE FUNCTION catalog_tenant_sequence() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        EXECUTE format('CREATE SEQUENCE IF NOT EXISTS %I', 'catalog_change_seq_' || NEW.id);
    ELSE
        EXECUTE format('DROP SEQUENCE IF EXISTS %I', 'catalog_change_seq_' || OLD.id);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tenants_change_seq AFTER INSERT OR DELETE ON tenants
FOR EACH ROW EXECUTE FUNCTION catalog_tenant_sequence();

-- Whether this is the transaction's first unnumbered change of the tenant since its changes were
-- last numbered: the tenants are listed in a transaction-local setting (a rollback to a savepoint
-- restores it with the rows it covered), so one commit-time event is queued per transaction and
-- tenant, not one per row.
CREATE OR REPLACE FUNCTION catalog_feed_first(p_tenant bigint) RETURNS boolean LANGUAGE sql VOLATILE AS $$
SELECT CASE
    WHEN strpos(coalesce(current_setting('catalog.feed_tenants', true), ''), ',' || p_tenant || ',') > 0
    THEN false
    ELSE set_config(
        'catalog.feed_tenants',
        coalesce(nullif(current_setting('catalog.feed_tenants', true), ''), ',') || p_tenant || ',',
        true
    ) IS NOT NULL
END
$$;

-- One change, unnumbered. The four-argument form is for changes without tags.
CREATE OR REPLACE FUNCTION catalog_emit_change(
    p_tenant bigint, p_kind text, p_uri text, p_op text, p_before text[], p_after text[]
) RETURNS void LANGUAGE sql AS $$
INSERT INTO change_feed (tenant_id, seq, kind, uri, op, tags_before, tags_after)
VALUES (p_tenant, -nextval('catalog_change_provisional_seq'), p_kind, p_uri, p_op, p_before, p_after)
$$;

CREATE OR REPLACE FUNCTION catalog_emit_change(p_tenant bigint, p_kind text, p_uri text, p_op text)
RETURNS void LANGUAGE sql AS $$
SELECT catalog_emit_change(p_tenant, p_kind, p_uri, p_op, NULL::text[], NULL::text[])
$$;

-- The changes of one statement, in statement order (tags as text: arrays of arrays must be
-- rectangular).
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
$$;

-- At commit: the final numbers and the NOTIFYs, for every tenant listed, in tenant order (two
-- transactions never wait on each other crosswise). all_tenants for its own duration: the rows are
-- found whatever scope the transaction ended in. No nested loops (0019): the feed's statistics
-- know only committed, positive numbers, so the planner expects one unnumbered row and joined the
-- renumbering's window subquery as the inner side of a nested loop, run again for every row:
-- quadratic in the rows a transaction wrote (a 20,000-row commit ran for minutes). A hash or
-- merge join is linear, and costs nothing more for the one row of a single write.
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
$$;

CREATE CONSTRAINT TRIGGER change_feed_number AFTER INSERT ON change_feed
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (NEW.seq < 0 AND catalog_feed_first(NEW.tenant_id))
EXECUTE FUNCTION catalog_number_changes();

-- Templates and grants: one change per row (0001, 0004).
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
$$;

CREATE TRIGGER templates_change AFTER INSERT OR UPDATE OR DELETE ON templates
FOR EACH ROW EXECUTE FUNCTION catalog_record_change('template');

CREATE TRIGGER grants_change AFTER INSERT OR UPDATE OR DELETE ON grants
FOR EACH ROW EXECUTE FUNCTION catalog_record_change('grant');

-- Resources: once per statement, with transition tables, so a bulk import is one pass (0006); it
-- also keeps resource_tags (the tag index of sparse pages) in step with resources.tags.
CREATE OR REPLACE FUNCTION catalog_resource_statement() RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;

CREATE TRIGGER resources_change_insert AFTER INSERT ON resources
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION catalog_resource_statement();

CREATE TRIGGER resources_change_update AFTER UPDATE ON resources
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION catalog_resource_statement();

CREATE TRIGGER resources_change_delete AFTER DELETE ON resources
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION catalog_resource_statement();

-- == Tenants =======================================================================================

-- A deleted tenant's listeners are told (its feed goes with it).
CREATE OR REPLACE FUNCTION catalog_tenant_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('catalog_changes', json_build_object(
        't', OLD.id, 'k', 'tenant', 'u', NULL, 'o', 'deleted', 's', NULL)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER tenants_deleted AFTER DELETE ON tenants
FOR EACH ROW EXECUTE FUNCTION catalog_tenant_deleted();

-- A deleted tenant's audit trail is kept in platform_audit_log (0004).
CREATE OR REPLACE FUNCTION catalog_archive_audit() RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;

CREATE TRIGGER tenants_archive_audit BEFORE DELETE ON tenants
FOR EACH ROW EXECUTE FUNCTION catalog_archive_audit();

-- The audit trail and the change feed hold to their tenant per statement, not per row (0020): no
-- foreign key to tenants (an import appends one of each per resource, and the key's check ran per
-- row). Each INSERT locks its distinct tenants FOR KEY SHARE, as the key's check did, once per
-- tenant: a tenant being deleted is waited for and then found missing; its delete, coming second,
-- waits for the writer. 23503 as the key's refusal was.
CREATE OR REPLACE FUNCTION catalog_rows_have_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;

-- A row's tenant never changes (the feed's renumbering changes only seq).
CREATE OR REPLACE FUNCTION catalog_tenant_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a row of % keeps its tenant (% -> %)', TG_TABLE_NAME, OLD.tenant_id, NEW.tenant_id
        USING ERRCODE = 'foreign_key_violation', TABLE = TG_TABLE_NAME;
END
$$;

-- A deleted tenant's feed and audit trail go with it, whatever session deletes it (the trail was
-- copied to platform_audit_log first, by catalog_archive_audit).
CREATE OR REPLACE FUNCTION catalog_tenant_forget() RETURNS trigger LANGUAGE plpgsql
SET catalog.all_tenants = 'on' AS $$
BEGIN
    DELETE FROM change_feed WHERE tenant_id = OLD.id;
    DELETE FROM audit_log WHERE tenant_id = OLD.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER audit_log_tenant_exists AFTER INSERT ON audit_log
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION catalog_rows_have_tenant();

CREATE TRIGGER audit_log_tenant_kept BEFORE UPDATE ON audit_log
FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
EXECUTE FUNCTION catalog_tenant_kept();

CREATE TRIGGER change_feed_tenant_exists AFTER INSERT ON change_feed
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION catalog_rows_have_tenant();

CREATE TRIGGER change_feed_tenant_kept BEFORE UPDATE ON change_feed
FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
EXECUTE FUNCTION catalog_tenant_kept();

CREATE TRIGGER tenants_forget AFTER DELETE ON tenants
FOR EACH ROW EXECUTE FUNCTION catalog_tenant_forget();

-- == Search ========================================================================================

-- Must stay identical to catalog.core.resources.repository.TEXT_VECTOR: the full-text index
-- (ix_resources_text_search, 0005) is used only when a query calls this same function.
CREATE OR REPLACE FUNCTION catalog_resource_text_vector(body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT to_tsvector('simple'::regconfig, left(body, 262144)) $$;

-- The indexed match of the admin listing's q, on the owner's rights for one tenant, and only for
-- a tenant the calling transaction may see (0007): at most p_limit resource ids, which the listing
-- then filters by the visibility rule and the policy. Execution is granted to the app role only.
-- The match expressions must stay identical to the indexed ones (0001's trigram index, 0005's
-- full-text index) and to catalog.core.resources.repository's RESOURCE_SEARCH_TEXT and TEXT_VECTOR.
CREATE OR REPLACE FUNCTION catalog_search_candidates(p_tenant bigint, p_pattern text, p_words text, p_limit integer)
RETURNS TABLE (id bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
BEGIN
    -- coalesce: an unset setting is NULL, and NOT (NULL OR false) would not refuse.
    IF NOT coalesce(current_setting('catalog.all_tenants', true) = 'on'
                    OR p_tenant = nullif(current_setting('catalog.tenant_id', true), '')::bigint,
                    false)
       OR p_limit IS NULL OR p_limit < 1 THEN
        RETURN;
    END IF;
    IF p_words IS NULL THEN
        RETURN QUERY
            SELECT r.id FROM resources AS r
            WHERE r.tenant_id = p_tenant
              AND lower(r.uri || ' ' || r.name || ' ' || coalesce(r.title, '') || ' '
                        || coalesce(r.description, '')) LIKE p_pattern ESCAPE '\'
            LIMIT p_limit;
    ELSE
        RETURN QUERY
            SELECT r.id FROM resources AS r
            WHERE r.tenant_id = p_tenant AND r.text IS NOT NULL
              AND catalog_resource_text_vector(r.text) @@ plainto_tsquery('simple', p_words)
            LIMIT p_limit;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION catalog_search_candidates(bigint, text, text, integer) FROM PUBLIC;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
        GRANT EXECUTE ON FUNCTION catalog_search_candidates(bigint, text, text, integer) TO catalog_app;
    END IF;
END
$$;

-- == Reads and pages in one statement (the fast path) ==============================================
--
-- Visibility is Python's (catalog.core.visibility): it compiles a principal's grants into
-- selectors (everything; URIs; prefixes as [low, high) URI ranges; tags) and these functions take
-- those selectors. They load the principal's grants only to hand them back, so that Python can
-- compile the selectors of its next statement.

-- The grants a tenant gives the scopes p_scopes, as three arrays (NULL where there are none): the
-- one loader of grants (0013), called by catalog.core.visibility.load_visibility and by
-- catalog_plain_read (so by catalog_plain_page and completion too). It decides nothing: what a
-- principal sees with them (everything for an admin, nothing for another tenant's principal or one
-- without scopes) is one rule, catalog.core.visibility.visibility_of_grants. It runs as the
-- caller, so row-level security applies: the caller's scope must include p_tenant.
-- A uriPrefix ending in '/' also covers the one URI that is the prefix without its '/' (the
-- directory resource of that folder, 0018): the loader yields that URI among the exact URIs, so
-- every consumer of the grants (Visibility, the fast path's functions, event fan-out) inherits it.
CREATE OR REPLACE FUNCTION catalog_scope_grants(p_tenant bigint, p_scopes text[])
RETURNS TABLE (uris text[], prefixes text[], tags text[])
LANGUAGE sql STABLE AS $$
SELECT array_agg(g.uri) FILTER (WHERE g.uri IS NOT NULL)
           || array_agg(left(g.uri_prefix, -1))
              FILTER (WHERE right(g.uri_prefix, 1) = '/' AND length(g.uri_prefix) > 1),
       array_agg(g.uri_prefix) FILTER (WHERE g.uri_prefix IS NOT NULL),
       array_agg(g.tag) FILTER (WHERE g.tag IS NOT NULL)
FROM grants AS g
WHERE g.tenant_id = p_tenant AND g.scope = ANY(p_scopes)
$$;

-- A fast resources/read in one statement (0008; content only for a visible row, 0012; the grants
-- loaded by catalog_scope_grants, 0013, not for an admin's everything, 0016;
-- the resource's ttl_ms, 0017), as the caller
-- (row-level security applies to every table it reads):
-- 1. The principal: with p_hash, the live token's (catalog_token_principal); no row at all for an
--    unknown, revoked or expired token. Without it, the principal the caller authenticated
--    (p_tenant, p_scopes, p_admin).
-- 2. The statement's scope becomes that tenant (restored before returning).
-- 3. The grants of that tenant that the principal's scopes hold (catalog_scope_grants, 0013;
--    whoever the principal is), except when the selectors passed are everything and the principal
--    is an admin (0016): the caller compiles its selectors from them.
-- 4. The resource with exactly p_uri in that tenant, with its blob's bytes, only when the
--    selectors passed show it (p_everything NULL: none passed, no row is read) and only while the
--    principal holds every one of them (an admin for p_everything; a grant for each URI, prefix
--    and tag), so selectors remembered from before a grant was revoked show nothing. A row the
--    caller may not see answers exactly as a missing one: the resource columns NULL, no content
--    sent. The caller takes the full read path for anything that is not a plain visible read.
-- The selector arguments default to NULL: called with five, it is the principal and its grants
-- (catalog_plain_page, completion).
CREATE OR REPLACE FUNCTION catalog_plain_read(
    p_hash bytea, p_tenant bigint, p_scopes text[], p_admin boolean, p_uri text,
    p_everything boolean DEFAULT NULL, p_lows text[] DEFAULT NULL, p_highs text[] DEFAULT NULL,
    p_tags text[] DEFAULT NULL, p_uris text[] DEFAULT NULL
)
RETURNS TABLE (
    principal_token_id bigint, principal_tenant_id bigint, principal_tenant_slug text,
    principal_scopes text[], principal_is_admin boolean, principal_expires_at timestamptz,
    grant_uris text[], grant_prefixes text[], grant_tags text[],
    resource_uri text, resource_mime_type text, resource_tags text[],
    resource_consent_message text, resource_text text, resource_blob bytea,
    resource_has_blob boolean, resource_ttl_ms integer
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_scope text := current_setting('catalog.tenant_id', true);
    v_held boolean;
    v_set text;  -- set_config's result, assigned: an expression, not a query as PERFORM is
BEGIN
    IF p_hash IS NOT NULL THEN
        SELECT p.token_id, p.tenant_id, p.tenant_slug, p.scopes, p.is_admin, p.expires_at
        INTO principal_token_id, principal_tenant_id, principal_tenant_slug, principal_scopes,
             principal_is_admin, principal_expires_at
        FROM catalog_token_principal(p_hash) AS p;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    ELSE
        principal_tenant_id := p_tenant;
        principal_scopes := coalesce(p_scopes, '{}');
        principal_is_admin := coalesce(p_admin, false);
    END IF;
    IF principal_tenant_id IS NULL THEN
        RETURN;
    END IF;
    v_set := set_config('catalog.tenant_id', principal_tenant_id::text, true);
    -- Whether the principal holds every selector passed (NULL when none were). Everything is held
    -- by an admin, and then no grant is loaded (0016): the caller sent everything because the one
    -- rule (visibility_of_grants) gave this credential everything last time, which it gives an
    -- admin whatever the grants. Any other call loads them (catalog_scope_grants) and returns them.
    IF p_everything AND principal_is_admin THEN
        v_held := true;
    ELSE
        SELECT s.uris, s.prefixes, s.tags INTO grant_uris, grant_prefixes, grant_tags
        FROM catalog_scope_grants(principal_tenant_id, principal_scopes) AS s;
        v_held := CASE
            WHEN p_everything THEN principal_is_admin
            WHEN NOT p_everything THEN coalesce(p_uris, '{}') <@ coalesce(grant_uris, '{}')
                AND coalesce(p_lows, '{}') <@ coalesce(grant_prefixes, '{}')
                AND coalesce(p_tags, '{}') <@ coalesce(grant_tags, '{}')
        END;
    END IF;
    IF p_uri IS NOT NULL AND v_held THEN
        SELECT r.uri, r.mime_type, r.tags, r.consent_message, r.text, b.data,
               r.blob_sha256 IS NOT NULL, r.ttl_ms
        INTO resource_uri, resource_mime_type, resource_tags, resource_consent_message,
             resource_text, resource_blob, resource_has_blob, resource_ttl_ms
        FROM resources AS r
        LEFT JOIN blobs AS b ON b.tenant_id = r.tenant_id AND b.sha256 = r.blob_sha256
        WHERE r.tenant_id = principal_tenant_id AND r.uri = p_uri
          AND (p_everything OR r.uri = ANY(p_uris) OR r.tags && p_tags
               OR EXISTS (SELECT 1 FROM unnest(p_lows, p_highs) AS g(low, high)
                          WHERE r.uri >= g.low AND r.uri < g.high));
    END IF;
    v_set := set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
    RETURN NEXT;
END
$$;

-- One page of a tenant's resources in URI byte order (the columns a listing entry shows): all
-- after p_after, or what the selectors show, as ordered index range scans merged (the plan
-- Visibility.sparse_page_uris describes). Both the SQLAlchemy listing and the fast list page use
-- it (0008; tag scans bounded by the page's end, 0010).
CREATE OR REPLACE FUNCTION catalog_visible_page(
    p_tenant bigint, p_everything boolean, p_lows text[], p_highs text[], p_tags text[],
    p_uris text[], p_after text, p_limit integer
)
RETURNS TABLE (
    uri text, name text, title text, description text, mime_type text, size bigint,
    icons jsonb, annotations jsonb, meta jsonb, content_changed_at timestamptz
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_scope text := current_setting('catalog.tenant_id', true);
    v_uris text[] := '{}';
    v_low text;
    v_high text;
    v_last text;
BEGIN
    PERFORM set_config('catalog.tenant_id', p_tenant::text, true);
    IF p_everything THEN
        RETURN QUERY
            SELECT r.uri, r.name, r.title, r.description, r.mime_type, r.size, r.icons,
                   r.annotations, r.meta, r.content_changed_at
            FROM resources AS r
            WHERE r.tenant_id = p_tenant AND r.uri > p_after
            ORDER BY r.uri LIMIT p_limit;
    ELSE
        -- The grants' prefix ranges are disjoint (a prefix inside another grant's is dropped
        -- by Visibility): read in order of their start, the first ones that fill a page hold
        -- its smallest URIs, so the rest are never read; tags and URIs are then read only up to
        -- that page's last URI. (2,525 index entries for a first page of 20 prefix and 5 tag
        -- grants before, about 200 now.)
        FOR v_low, v_high IN
            SELECT g.low, g.high FROM unnest(p_lows, p_highs) AS g(low, high)
            ORDER BY g.low COLLATE "C"
        LOOP
            EXIT WHEN cardinality(v_uris) >= p_limit;
            v_uris := v_uris || ARRAY(
                SELECT s.uri FROM resources AS s
                WHERE s.tenant_id = p_tenant AND s.uri >= v_low AND s.uri < v_high
                  AND s.uri > p_after
                ORDER BY s.uri LIMIT p_limit - cardinality(v_uris)
            );
        END LOOP;
        IF cardinality(v_uris) >= p_limit THEN
            v_last := v_uris[p_limit];
        END IF;
        IF v_last IS NULL THEN
            RETURN QUERY
                SELECT r.uri, r.name, r.title, r.description, r.mime_type, r.size, r.icons,
                       r.annotations, r.meta, r.content_changed_at
                FROM resources AS r
                WHERE r.tenant_id = p_tenant AND r.uri IN (
                    SELECT page.uri FROM (
                        SELECT ranged.uri COLLATE "C" AS uri FROM unnest(v_uris) AS ranged(uri)
                        UNION
                        SELECT scan.uri
                        FROM unnest(p_tags) AS g(tag)
                        CROSS JOIN LATERAL (
                            SELECT t.uri FROM resource_tags AS t
                            WHERE t.tenant_id = p_tenant AND t.tag = g.tag AND t.uri > p_after
                              AND TRUE
                            ORDER BY t.uri LIMIT p_limit
                        ) AS scan
                        UNION
                        SELECT s.uri FROM resources AS s
                        WHERE s.tenant_id = p_tenant AND s.uri = ANY(p_uris) AND s.uri > p_after
                          AND (v_last IS NULL OR s.uri <= v_last)
                    ) AS page
                    ORDER BY page.uri COLLATE "C" LIMIT p_limit
                )
                ORDER BY r.uri;
        ELSE
            RETURN QUERY
                SELECT r.uri, r.name, r.title, r.description, r.mime_type, r.size, r.icons,
                       r.annotations, r.meta, r.content_changed_at
                FROM resources AS r
                WHERE r.tenant_id = p_tenant AND r.uri IN (
                    SELECT page.uri FROM (
                        SELECT ranged.uri COLLATE "C" AS uri FROM unnest(v_uris) AS ranged(uri)
                        UNION
                        SELECT scan.uri
                        FROM unnest(p_tags) AS g(tag)
                        CROSS JOIN LATERAL (
                            SELECT t.uri FROM resource_tags AS t
                            WHERE t.tenant_id = p_tenant AND t.tag = g.tag AND t.uri > p_after
                              AND t.uri <= v_last
                            ORDER BY t.uri LIMIT p_limit
                        ) AS scan
                        UNION
                        SELECT s.uri FROM resources AS s
                        WHERE s.tenant_id = p_tenant AND s.uri = ANY(p_uris) AND s.uri > p_after
                          AND (v_last IS NULL OR s.uri <= v_last)
                    ) AS page
                    ORDER BY page.uri COLLATE "C" LIMIT p_limit
                )
                ORDER BY r.uri;
        END IF;
    END IF;
    PERFORM set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
END
$$;

-- A fast resources/list page (0009): the principal and its grants as a first row, then, when
-- selectors were given (p_everything not NULL), the page they show of the principal's own tenant.
-- The caller uses the page only when the selectors it compiles from the first row are the ones it
-- sent (a guess: those of the credential's last page); otherwise it asks catalog_visible_page.
CREATE OR REPLACE FUNCTION catalog_plain_page(
    p_hash bytea, p_tenant bigint, p_scopes text[], p_admin boolean,
    p_everything boolean, p_lows text[], p_highs text[], p_tags text[], p_uris text[],
    p_after text, p_limit integer
)
RETURNS TABLE (
    principal_token_id bigint, principal_tenant_id bigint, principal_tenant_slug text,
    principal_scopes text[], principal_is_admin boolean, principal_expires_at timestamptz,
    grant_uris text[], grant_prefixes text[], grant_tags text[],
    uri text, name text, title text, description text, mime_type text, size bigint,
    icons jsonb, annotations jsonb, meta jsonb, content_changed_at timestamptz
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_tenant bigint;
BEGIN
    SELECT s.principal_token_id, s.principal_tenant_id, s.principal_tenant_slug, s.principal_scopes,
           s.principal_is_admin, s.principal_expires_at, s.grant_uris, s.grant_prefixes, s.grant_tags
    INTO principal_token_id, principal_tenant_id, principal_tenant_slug, principal_scopes,
         principal_is_admin, principal_expires_at, grant_uris, grant_prefixes, grant_tags
    FROM catalog_plain_read(p_hash, p_tenant, p_scopes, p_admin, NULL) AS s;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN NEXT;
    IF p_everything IS NULL THEN
        RETURN;
    END IF;
    v_tenant := principal_tenant_id;
    RETURN QUERY
        SELECT NULL::bigint, NULL::bigint, NULL::text, NULL::text[], NULL::boolean,
               NULL::timestamptz, NULL::text[], NULL::text[], NULL::text[],
               v.uri, v.name, v.title, v.description, v.mime_type, v.size, v.icons, v.annotations,
               v.meta, v.content_changed_at
        FROM catalog_visible_page(
            v_tenant, p_everything, p_lows, p_highs, p_tags, p_uris, p_after, p_limit
        ) AS v;
END
$$;
