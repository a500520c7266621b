"""catalog_plain_read loads no grants for an admin's everything; set_config assigned.

A read whose selectors are everything (``p_everything``: the credential's last visibility, from the
one rule ``catalog.core.visibility.visibility_of_grants``, was everything) by an admin holds them
without any grant, and the caller's rule gives an admin everything whatever its grants: the grants
are not loaded then (``catalog_scope_grants`` is still the one loader, called in every other case,
and the grant columns are NULL in that one). Before 0013 the function skipped the grants for every
admin by a rule of its own; now only when the caller's selectors make them unneeded. And the two
``set_config`` calls are assignments (an expression plpgsql evaluates itself) rather than
``PERFORM`` (a query through SPI). On a tenant admin's read: about 13% less of the backend's CPU
(``BENCHMARKS.md``, "The read's cost, again").

The text is frozen here; the current definition of every function is in
``catalog/db/sql/functions.sql``. Downgrade restores 0013's.

Revision ID: 0016
Revises: 0013
Create Date: 2026-12-06 05:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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

# 0013's catalog_plain_read, for downgrade.
PLAIN_READ_0013_SQL = """
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


def upgrade() -> None:
    op.execute(PLAIN_READ_SQL)


def downgrade() -> None:
    op.execute(PLAIN_READ_0013_SQL)
