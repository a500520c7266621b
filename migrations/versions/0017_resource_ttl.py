"""A resource's own ``ttlMs``: the cache hint its reads carry, set by a curator.

``resources.ttl_ms`` (NULL: the server's ``CATALOG_READ_TTL_MS``; 0: not to be kept) is what a
``resources/read`` of that resource answers as ``ttlMs``, on both executors: the SQLAlchemy read
takes it from the row, and ``catalog_plain_read`` (the fast path's one statement) returns it as
``resource_ttl_ms``. Its return type changes, so it is dropped and created again (``catalog_plain_page``
and completion select its columns by name and are unchanged).

The text is frozen here; the current definition of every function is in
``catalog/db/sql/functions.sql``. Downgrade restores 0016's ``catalog_plain_read`` and drops the column.

It follows 0016, which replaced the same function with its old return type.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 04:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PLAIN_READ_SIGNATURE = (
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
$$
"""

# 0016's catalog_plain_read, for downgrade.
PLAIN_READ_0016_SQL = """
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
    v_set := set_config('catalog.tenant_id', coalesce(v_scope, ''), true);
    RETURN NEXT;
END
$$
"""


def upgrade() -> None:
    op.execute(
        "ALTER TABLE resources ADD COLUMN ttl_ms integer CONSTRAINT ck_resources_ttl_ms_range CHECK (ttl_ms >= 0)"
    )
    op.execute(f"DROP FUNCTION {PLAIN_READ_SIGNATURE}")
    op.execute(PLAIN_READ_SQL)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {PLAIN_READ_SIGNATURE}")
    op.execute(PLAIN_READ_0016_SQL)
    op.execute("ALTER TABLE resources DROP COLUMN ttl_ms")
