"""A plain list page in one statement: catalog_plain_page.

A plain ``resources/list`` page took two statements: the principal and its grants
(``catalog_plain_read``), then the page (``catalog_visible_page``) with the selectors the caller
computed from those grants in Python (the one visibility rule, ``catalog.core.visibility``). This
function runs both in one statement, with selectors the caller supplies beforehand: those it
computed for the same credential last time.

It returns the principal and its current grants as a first row (exactly ``catalog_plain_read``'s
principal and grant columns; the listing columns NULL), then, when selectors were given
(``p_everything`` not NULL), the page those selectors show of the principal's own tenant
(``catalog_visible_page``'s rows, the principal and grant columns NULL). No row at all for an
unknown, revoked or expired token.

It decides nothing: the caller computes the visibility from the first row, as always, and uses the
page only when that visibility is the one whose selectors it sent; otherwise it discards the rows
and asks ``catalog_visible_page`` again with the right ones. Row-level security binds every read
(both functions set the statement's scope to the principal's tenant), so a stale guess can only
read rows of the credential's own tenant, which are then discarded unsent.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 13:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = "catalog_plain_page(bytea, bigint, text[], boolean, boolean, text[], text[], text[], text[], text, integer)"

UPGRADE_SQL = """
CREATE FUNCTION catalog_plain_page(
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
$$
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
