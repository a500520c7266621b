"""A ``uriPrefix`` grant ending in ``/`` also covers the directory resource it names.

A directory import stores a folder ``…/api`` as the ``inode/directory`` resource ``…/api`` and its
files as ``…/api/x.md``; a grant of the prefix ``…/api/`` covered the files and not the directory
itself. ``catalog_scope_grants`` (the one loader of grants, 0013) now yields, beside each such prefix
grant, the exact URI that is the prefix without its final ``/`` (among the URIs, not the prefixes),
so every consumer of the grants inherits the rule: ``load_visibility`` (listings, reads, templates,
completion, subscriptions, the admin scope preview, event fan-out) and ``catalog_plain_read``,
which hands the grants to ``catalog_plain_page`` and completion on the fast path and holds the
selectors Python compiled to them. A prefix of one character (``/``) yields nothing.

The text is frozen here; the current definition of every function is in
``catalog/db/sql/functions.sql``. Downgrade restores 0013's loader.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 17:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPE_GRANTS_SQL = """
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
$$
"""

SCOPE_GRANTS_0013_SQL = """
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


def upgrade() -> None:
    op.execute(SCOPE_GRANTS_SQL)


def downgrade() -> None:
    op.execute(SCOPE_GRANTS_0013_SQL)
