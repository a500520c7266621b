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
The rest of the function is 0008's, unchanged; downgrade restores 0008's.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04 17:30:00.000000
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One tag grant's scan in 0008's text, with its bound on the page's last URI left open.
TAG_SCAN = """
                        SELECT scan.uri
                        FROM unnest(p_tags) AS g(tag)
                        CROSS JOIN LATERAL (
                            SELECT t.uri FROM resource_tags AS t
                            WHERE t.tenant_id = p_tenant AND t.tag = g.tag AND t.uri > p_after
                              AND {bound}
                            ORDER BY t.uri LIMIT p_limit
                        ) AS scan
"""
FILTERED_TAG_SCAN = TAG_SCAN.format(bound="(v_last IS NULL OR t.uri <= v_last)")  # 0008's


def _visible_page_0008() -> str:
    """0008's ``CREATE FUNCTION catalog_visible_page`` (read from that script: one text of it)."""
    path = Path(__file__).with_name("0008_plain_read.py")
    spec = importlib.util.spec_from_file_location("catalog_migration_0008", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (statement,) = [sql for sql in module.UPGRADE_SQL if "FUNCTION catalog_visible_page" in sql]
    return statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def split_on_page_end(statement: str) -> str:
    """0008's function with its sparse page query written twice, for ``v_last`` NULL or not."""
    where = statement.index("WHERE r.tenant_id = p_tenant AND r.uri IN (")
    start = statement.rindex("RETURN QUERY", 0, where)
    end = statement.index("ORDER BY r.uri;", where) + len("ORDER BY r.uri;")
    page = statement[start:end]
    assert page.count(FILTERED_TAG_SCAN) == 1, "0008's tag scan is not where 0010 expects it"
    from_cursor = page.replace(FILTERED_TAG_SCAN, TAG_SCAN.format(bound="TRUE"))
    to_page_end = page.replace(FILTERED_TAG_SCAN, TAG_SCAN.format(bound="t.uri <= v_last"))
    indent = " " * 12
    return (
        f"{statement[:start]}IF v_last IS NULL THEN\n{indent}{from_cursor}\n{indent}ELSE\n"
        f"{indent}{to_page_end}\n{indent}END IF;{statement[end:]}"
    )


def upgrade() -> None:
    op.execute(split_on_page_end(_visible_page_0008()))


def downgrade() -> None:
    op.execute(_visible_page_0008())
