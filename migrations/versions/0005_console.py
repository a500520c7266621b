"""Console: full-text search over resources' text content.

The admin listing's ``q`` matched only uri, name, title and description (trigram index of 0001).
The console's search box also finds a resource by a word of its text: a GIN index over a
``tsvector`` of the text, through an IMMUTABLE function so the index expression and the query are
the same call (``catalog_resource_text_vector``). The ``simple`` configuration: no stemming, no
stop words — curators search for identifiers and names as often as for prose, in any language.
Only the first 256 KiB of a text is indexed: ``tsvector`` has a 1 MB limit and a search box is
not a grep.

An index and a function, no table: row-level security is unchanged (the function reads nothing).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 03:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Must stay identical to catalog.core.resources.repository.TEXT_VECTOR (the index is used only
# when the query calls the same function).
UPGRADE_SQL = (
    """
    CREATE FUNCTION catalog_resource_text_vector(body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT to_tsvector('simple'::regconfig, left(body, 262144)) $$
    """,
    """
    CREATE INDEX ix_resources_text_search ON resources
    USING gin (catalog_resource_text_vector(text)) WHERE text IS NOT NULL
    """,
)

DOWNGRADE_SQL = (
    "DROP INDEX IF EXISTS ix_resources_text_search",
    "DROP FUNCTION IF EXISTS catalog_resource_text_vector(text)",
)


def upgrade() -> None:
    for statement in UPGRADE_SQL:
        op.execute(statement)


def downgrade() -> None:
    for statement in DOWNGRADE_SQL:
        op.execute(statement)
