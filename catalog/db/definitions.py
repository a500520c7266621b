"""The SQL of every function and trigger of the catalog's schema, as shipped with the package.

``catalog/db/sql/functions.sql`` holds the current definition of each (whichever migration made
it); migrations carry frozen copies and never read it. ``tests/db/test_sql_definitions.py`` holds a
migrated database to it.
"""

from __future__ import annotations

from importlib import resources

FUNCTIONS = "functions.sql"


def sql_text(name: str = FUNCTIONS) -> str:
    """The text of ``catalog/db/sql/<name>`` (package data: read from an installed wheel too)."""
    return resources.files("catalog.db").joinpath("sql", name).read_text(encoding="utf-8")


__all__ = ["FUNCTIONS", "sql_text"]
