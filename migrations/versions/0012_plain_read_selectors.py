"""Fast reads send content only for a row the caller may see: catalog_plain_read takes selectors.

``catalog_plain_read`` (0008) returned the row of ``p_uri`` with its text and blob bytes whatever the
caller's grants, and Python then decided whether the caller could see it: a hidden 16 MiB blob cost
16 MiB of transfer before "not found", a missing URI nothing, so the cost told a hidden resource
from a missing one.

Now it takes the selectors Python compiles from the principal's grants (``Visibility``:
``p_everything``, ``p_lows``/``p_highs``, ``p_tags``, ``p_uris``, as ``catalog_visible_page``
takes them) and reads the row only when they show it, and only while the principal still holds
every one of them (an admin for ``p_everything``, a grant for each URI, prefix and tag): selectors
remembered from before a grant was revoked show nothing. A hidden row answers exactly as a missing
one (the resource columns NULL). The selector parameters default to NULL (no row is read), so its
five-argument callers (``catalog_plain_page``, completion) are unchanged. The old five-parameter
function is dropped first: beside the new one a five-argument call would be ambiguous.

The text is frozen here; the current definition of every function is in
``catalog/db/sql/functions.sql``. Downgrade restores 0008's function.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 17:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_SIGNATURE = "catalog_plain_read(bytea, bigint, text[], boolean, text)"
NEW_SIGNATURE = (
    "catalog_plain_read(bytea, bigint, text[], boolean, text, boolean, text[], text[], text[], text[])"
)

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

# 0008's catalog_plain_read, for downgrade.
PLAIN_READ_0008_SQL = """
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
    """


def upgrade() -> None:
    op.execute(f"DROP FUNCTION {OLD_SIGNATURE}")
    op.execute(PLAIN_READ_SQL)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {NEW_SIGNATURE}")
    op.execute(PLAIN_READ_0008_SQL)
