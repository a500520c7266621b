"""Search under the row-level-security wall: the indexes of ``q`` become usable.

The admin listing's ``q`` matches the metadata with ``LIKE`` (trigram index of 0001) and the text
with ``@@`` (full-text index of 0005). Neither operator is leakproof, so under row-level security
PostgreSQL evaluates them only after the policy, row by row, and never through their indexes: a
word found in a few resources of a large tenant cost a scan of the whole tenant.

``catalog_search_candidates`` runs the indexed match on the owner's rights for one tenant, and only
for a tenant the calling transaction may see (the policy's own test: ``catalog.all_tenants`` on, or
``catalog.tenant_id`` naming it; nothing otherwise), and returns at most ``p_limit`` resource ids. It decides nothing about visibility: the listing still applies the
visibility rule and the policy to every candidate. Callers use it only to narrow a rare match
(``catalog.core.resources``); a common one keeps the plain scan in URI order, which stops early.
Execution is granted to the app role only.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 03:30:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The two match expressions must stay identical to the indexed ones (0001's trigram index, 0005's
# full-text index) and to catalog.core.resources.repository's RESOURCE_SEARCH_TEXT and TEXT_VECTOR.
UPGRADE_SQL = (
    r"""
    CREATE FUNCTION catalog_search_candidates(p_tenant bigint, p_pattern text, p_words text, p_limit integer)
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
    $$
    """,
    "REVOKE ALL ON FUNCTION catalog_search_candidates(bigint, text, text, integer) FROM PUBLIC",
    """
    DO $$
    BEGIN
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_app') THEN
            GRANT EXECUTE ON FUNCTION catalog_search_candidates(bigint, text, text, integer) TO catalog_app;
        END IF;
    END
    $$
    """,
)


def upgrade() -> None:
    for statement in UPGRADE_SQL:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS catalog_search_candidates(bigint, text, text, integer)")
