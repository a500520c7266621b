"""Plain reads and list pages in one statement each: catalog_plain_read and catalog_visible_page.

The read path cost four to six round trips (the token lookup; BEGIN, the scope, the grants, the
row, COMMIT). This function does the same work in one statement, as the caller (row-level security
applies to every table it reads):

1. The principal: with ``p_hash``, the live token's (``catalog_token_principal``, which widens the
   scope for its own lookup only); no row at all for an unknown, revoked or expired token. Without
   it, the principal the caller already authenticated (``p_tenant``, ``p_scopes``, ``p_admin``).
2. The scope of the statement becomes that tenant (``catalog.tenant_id``, transaction-local and
   restored before returning), so the policy of 0001 binds the next two reads.
3. The grants of that tenant that the principal's scopes hold, as three arrays (none for an admin).
4. The resource with exactly ``p_uri`` in that tenant, with its blob's bytes (NULL columns when
   there is none, or when ``p_uri`` is NULL: then the statement is the principal and its grants,
   what a ``resources/list`` page needs before its own query).

It decides nothing: the caller applies the visibility rule (``catalog.core.visibility``) to the
grants and the row, and takes the full read path for anything that is not a plain visible read
(no row, a directory, a consent message, a template).

``catalog_visible_page(tenant, everything, lows, highs, tags, uris, after, limit)`` is one page
of a tenant's resources in URI byte order (the columns a listing entry shows), under the policy with the
scope set to that tenant for the statement: everything after ``after``, or, for a principal with
grants, what the grants' URI ranges (``lows``/``highs``, disjoint), tags and URIs select, ordered
index range scans merged (the plan ``Visibility.sparse_page_uris`` describes; the visibility rule
that turns grants into these arrays stays in Python). Both the SQLAlchemy listing and the
plain list page use it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 05:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURES = (
    "catalog_plain_read(bytea, bigint, text[], boolean, text)",
    "catalog_visible_page(bigint, boolean, text[], text[], text[], text[], text, integer)",
)

UPGRADE_SQL = (
    """
    CREATE FUNCTION catalog_plain_read(
        p_hash bytea, p_tenant bigint, p_scopes text[], p_admin boolean, p_uri text
    )
    RETURNS TABLE (
        principal_token_id bigint, principal_tenant_id bigint, principal_tenant_slug text,
        principal_scopes text[], principal_is_admin boolean, principal_expires_at timestamptz,
        grant_uris text[], grant_prefixes text[], grant_tags text[],
        resource_uri text, resource_mime_type text, resource_tags text[],
        resource_consent_message text, resource_text text, resource_blob bytea,
        resource_has_blob boolean
    )
    LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
        v_scope text := current_setting('catalog.tenant_id', true);
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
        PERFORM set_config('catalog.tenant_id', principal_tenant_id::text, true);
        IF NOT principal_is_admin AND cardinality(principal_scopes) > 0 THEN
            SELECT array_agg(g.uri) FILTER (WHERE g.uri IS NOT NULL),
                   array_agg(g.uri_prefix) FILTER (WHERE g.uri_prefix IS NOT NULL),
                   array_agg(g.tag) FILTER (WHERE g.tag IS NOT NULL)
            INTO grant_uris, grant_prefixes, grant_tags
            FROM grants AS g
            WHERE g.tenant_id = principal_tenant_id AND g.scope = ANY(principal_scopes);
        END IF;
        SELECT r.uri, r.mime_type, r.tags, r.consent_message, r.text, b.data, r.blob_sha256 IS NOT NULL
        INTO resource_uri, resource_mime_type, resource_tags, resource_consent_message, resource_text,
             resource_blob, resource_has_blob
        FROM resources AS r
        LEFT JOIN blobs AS b ON b.tenant_id = r.tenant_id AND b.sha256 = r.blob_sha256
        WHERE r.tenant_id = principal_tenant_id AND r.uri = p_uri;
        PERFORM set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
        RETURN NEXT;
    END
    $$
    """,
    """
    CREATE FUNCTION catalog_visible_page(
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
                              AND (v_last IS NULL OR t.uri <= v_last)
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
        PERFORM set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
    END
    $$
    """,
)


def upgrade() -> None:
    for statement in UPGRADE_SQL:
        op.execute(statement)


def downgrade() -> None:
    for signature in SIGNATURES:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
