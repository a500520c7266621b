"""Bulk inserts as one ``INSERT ... SELECT FROM unnest(...)`` statement: one array per column.

An executemany of N rows costs SQLAlchemy per-row parameter processing and PostgreSQL a statement
with N x columns parameters to parse and plan; one array per column is a handful of parameters that
asyncpg encodes in C, and a plan that does not grow with N. Values go in as SQLAlchemy would write
them: JSON columns ``json.dumps``-encoded (None as JSON ``null``, as the JSON type stores it),
array columns as JSON arrays unpacked in SQL (``unnest`` would flatten an array of arrays).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Boolean, Integer, Table, Text, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.types import TypeEngine

_SCALAR_ARRAYS: tuple[type[TypeEngine[Any]], ...] = (BigInteger, Integer, Boolean, Text)


def _column_input(table: Table, name: str, values: list[Any]) -> tuple[list[Any], TypeEngine[Any], str]:
    """The array to bind for column ``name``, its type, and the SQL that turns an element into the
    column's value (``t.name`` is the element)."""
    column_type = table.c[name].type
    element = f't."{name}"'
    if isinstance(column_type, JSON | JSONB):
        encoded = ["null" if value is None else json.dumps(value) for value in values]
        return encoded, ARRAY(Text), f"{element}::jsonb"
    if isinstance(column_type, ARRAY):
        unpacked = f"ARRAY(SELECT jsonb_array_elements_text({element}::jsonb))"
        return [json.dumps(list(value or ())) for value in values], ARRAY(Text), unpacked
    for scalar in _SCALAR_ARRAYS:
        if isinstance(column_type, scalar):
            return values, ARRAY(scalar()), element
    raise TypeError(f"{table.name}.{name}: no bulk encoding for {column_type!r}")


async def insert_rows(
    conn: AsyncConnection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    skip_conflicts_on: Sequence[str] | None = None,
    returning: bool = False,
) -> list[Row[Any]]:
    """Insert ``rows`` (dicts with the same keys) into ``table`` in one statement; with
    ``skip_conflicts_on``, rows that collide on that unique key are left out (``ON CONFLICT DO
    NOTHING``); with ``returning``, the inserted rows come back with every column, typed."""
    if not rows:
        return []
    names = list(rows[0])
    params: dict[str, Any] = {}
    binds = []
    arrays: list[str] = []
    selected: list[str] = []
    for index, name in enumerate(names):
        values, array_type, expression = _column_input(table, name, [row[name] for row in rows])
        key = f"c{index}"
        params[key] = values
        binds.append(bindparam(key, type_=array_type))
        arrays.append(f":{key}")
        selected.append(expression)
    quoted = ", ".join(f'"{name}"' for name in names)
    sql = (
        f"INSERT INTO {table.name} ({quoted}) SELECT {', '.join(selected)}"
        f" FROM unnest({', '.join(arrays)}) AS t({quoted})"
    )
    if skip_conflicts_on:
        sql += f" ON CONFLICT ({', '.join(skip_conflicts_on)}) DO NOTHING"
    if returning:
        sql += " RETURNING " + ", ".join(f'"{column.name}"' for column in table.c)
    statement = text(sql).bindparams(*binds)
    if not returning:
        await conn.execute(statement, params)
        return []
    return list((await conn.execute(statement.columns(*table.c), params)).all())
