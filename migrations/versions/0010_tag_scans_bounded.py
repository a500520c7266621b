"""A sparse page's tag scans bounded by the index: catalog_visible_page, its tag part rewritten.

Each tag grant's scan read ``resource_tags`` in URI order with ``t.uri <= v_last`` (the page's last
URI from the prefix ranges, when they filled a page) written as ``(v_last IS NULL OR t.uri <=
v_last)``. That cannot be an index condition, so it was a filter: a tag whose resources all lie
past the page's last URI was read to its end, every entry removed by the filter (at 1,000,000
resources, five tag grants of 400 resources each: 2,000 index entries and heap fetches for a first
page, about a millisecond of its 2.5; a tag of a million resources would be read whole).

Now the page's query is written twice, chosen by ``IF v_last IS NULL`` (each branch a statement of
its own, with its own cached plan): without ``v_last`` each tag is read from the cursor on, with it
``t.uri <= v_last`` is an index condition. Either reads at most ``p_limit`` entries a tag, and none
past the page's last URI. (One statement with both scans as branches of a UNION, one gated by a
one-time filter, read the same entries, but a middle page took 2.6-3.1 ms to this form's 1.6-2.8.)
The rest of the function is 0008's, unchanged; downgrade restores 0008's. Both texts are frozen
here in full (this script once built them by splicing 0008's text; the texts are the same).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 17:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UPGRADE_SQL = """
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
    $$
    """

# 0008's catalog_visible_page, for downgrade.
DOWNGRADE_SQL = """
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
    """


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
