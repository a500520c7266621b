"""One loader of grants: catalog_scope_grants, used by catalog_plain_read and load_visibility.

The grants a principal's scopes hold were loaded twice, each with its own copy of the rule of who
has none to load: in Python (``load_visibility``: not for an admin of the tenant, a principal of
another tenant or one without scopes) and inside ``catalog_plain_read`` (``IF NOT principal_is_admin
AND cardinality(principal_scopes) > 0``). ``catalog_scope_grants(p_tenant, p_scopes)`` now returns
a tenant's grants for those scopes as three arrays (URIs, prefixes, tags) and decides nothing;
``catalog_plain_read`` calls it for every principal (so ``catalog_plain_page`` and completion get
their grants from it too), and ``load_visibility`` calls it over SQLAlchemy. What the grants mean
for an admin, another tenant's principal or one without scopes is only
``catalog.core.visibility.visibility_of_grants``'s rule.

It runs as the caller (row-level security applies to ``grants``), executable by PUBLIC as
``catalog_plain_read`` is: it shows a caller only the grants its scope already lets it read.

The text is frozen here; the current definition of every function is in
``catalog/db/sql/functions.sql``. Downgrade restores 0012's ``catalog_plain_read`` and drops the
loader.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 00:45:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE_GRANTS_SQL = """
CREATE OR REPLACE FUNCTION catalog_scope_grants(p_tenant bigint, p_scopes text[])
RETURNS TABLE (uris text[], prefixes text[], tags text[])
LANGUAGE sql STABLE AS $$
SELECT array_agg(g.uri) FILTER (WHERE g.uri IS NOT NULL),
       array_agg(g.uri_prefix) FILTER (WHERE g.uri_prefix IS NOT NULL),
       array_agg(g.tag) FILTER (WHERE g.tag IS NOT NULL)
FROM grants AS g
WHERE g.tenant_id = p_tenant AND g.scope = ANY(p_scopes)
$$
"""

PLAIN_READ_SQL = """
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
    resource_has_blob boolean
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_scope text := current_setting('catalog.tenant_id', true);
    v_held boolean;
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
    SELECT s.uris, s.prefixes, s.tags INTO grant_uris, grant_prefixes, grant_tags
    FROM catalog_scope_grants(principal_tenant_id, principal_scopes) AS s;
    -- Whether the principal holds every selector passed (NULL when none were).
    v_held := CASE
        WHEN p_everything THEN principal_is_admin
        WHEN NOT p_everything THEN coalesce(p_uris, '{}') <@ coalesce(grant_uris, '{}')
            AND coalesce(p_lows, '{}') <@ coalesce(grant_prefixes, '{}')
            AND coalesce(p_tags, '{}') <@ coalesce(grant_tags, '{}')
    END;
    IF p_uri IS NOT NULL AND v_held THEN
        SELECT r.uri, r.mime_type, r.tags, r.consent_message, r.text, b.data,
               r.blob_sha256 IS NOT NULL
        INTO resource_uri, resource_mime_type, resource_tags, resource_consent_message,
             resource_text, resource_blob, resource_has_blob
        FROM resources AS r
        LEFT JOIN blobs AS b ON b.tenant_id = r.tenant_id AND b.sha256 = r.blob_sha256
        WHERE r.tenant_id = principal_tenant_id AND r.uri = p_uri
          AND (p_everything OR r.uri = ANY(p_uris) OR r.tags && p_tags
               OR EXISTS (SELECT 1 FROM unnest(p_lows, p_highs) AS g(low, high)
                          WHERE r.uri >= g.low AND r.uri < g.high));
    END IF;
    PERFORM set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
    RETURN NEXT;
END
$$
"""

# 0012's catalog_plain_read, for downgrade.
PLAIN_READ_0012_SQL = """
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
    resource_has_blob boolean
)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_scope text := current_setting('catalog.tenant_id', true);
    v_held boolean;
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
    -- Whether the principal holds every selector passed (NULL when none were).
    v_held := CASE
        WHEN p_everything THEN principal_is_admin
        WHEN NOT p_everything THEN coalesce(p_uris, '{}') <@ coalesce(grant_uris, '{}')
            AND coalesce(p_lows, '{}') <@ coalesce(grant_prefixes, '{}')
            AND coalesce(p_tags, '{}') <@ coalesce(grant_tags, '{}')
    END;
    IF p_uri IS NOT NULL AND v_held THEN
        SELECT r.uri, r.mime_type, r.tags, r.consent_message, r.text, b.data,
               r.blob_sha256 IS NOT NULL
        INTO resource_uri, resource_mime_type, resource_tags, resource_consent_message,
             resource_text, resource_blob, resource_has_blob
        FROM resources AS r
        LEFT JOIN blobs AS b ON b.tenant_id = r.tenant_id AND b.sha256 = r.blob_sha256
        WHERE r.tenant_id = principal_tenant_id AND r.uri = p_uri
          AND (p_everything OR r.uri = ANY(p_uris) OR r.tags && p_tags
               OR EXISTS (SELECT 1 FROM unnest(p_lows, p_highs) AS g(low, high)
                          WHERE r.uri >= g.low AND r.uri < g.high));
    END IF;
    PERFORM set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
    RETURN NEXT;
END
$$
"""


def upgrade() -> None:
    op.execute(SCOPE_GRANTS_SQL)
    op.execute(PLAIN_READ_SQL)


def downgrade() -> None:
    op.execute(PLAIN_READ_0012_SQL)
    op.execute("DROP FUNCTION catalog_scope_grants(bigint, text[])")
