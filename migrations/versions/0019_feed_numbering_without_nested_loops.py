"""The commit-time numbering of the change feed without nested loops.

``catalog_number_changes`` (0011) renumbers a transaction's unnumbered feed rows with one UPDATE
joined to a window subquery over the same rows. The feed's statistics know only committed, positive
numbers, so the planner expects one unnumbered row and chose a nested loop whose inner side, the
window subquery, ran again for every row: quadratic in the rows the transaction wrote (an import or
a COPY of 20,000 resources into a tenant whose feed had been analyzed committed for minutes; one of
1,000,000 did not finish). The function now runs with ``enable_nestloop = off``: a hash or merge
join, linear, and nothing more for the one row of a single write. Its body is unchanged.

The function's text is 0011's; only its settings change, by ``ALTER FUNCTION``. The current
definition of every function is in ``catalog/db/sql/functions.sql``. Downgrade resets the setting.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 17:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Only the function's settings change: its body stays 0011's (catalog/db/sql/functions.sql).
NO_NESTED_LOOPS_SQL = "ALTER FUNCTION catalog_number_changes() SET enable_nestloop = 'off'"
NESTED_LOOPS_AGAIN_SQL = "ALTER FUNCTION catalog_number_changes() RESET enable_nestloop"


def upgrade() -> None:
    op.execute(NO_NESTED_LOOPS_SQL)


def downgrade() -> None:
    op.execute(NESTED_LOOPS_AGAIN_SQL)
