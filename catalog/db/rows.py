"""Rows to records, once: a frozen dataclass is filled from a row by its field names.

Each entity's record (``ResourceRecord``, ``TemplateRecord``, ``TokenRecord``, ``Tenant``) is a
dataclass whose fields are named after its table's columns; :func:`from_row` fills one from a
SQLAlchemy row (or any mapping) instead of a hand-written mapper per entity. A field missing from
the row (a listing that does not read ``text``) takes its default; a field declared as a tuple gets
the row's array as a tuple (records are immutable). Response models are built from records with
``from_attributes``.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

R = TypeVar("R")

_MISSING = dataclasses.MISSING


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, bool, bool], ...]:
    """(name, is a tuple field, has a default) for each init field of ``cls``."""
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        is_tuple = typing.get_origin(hints[field.name]) is tuple
        has_default = field.default is not _MISSING or field.default_factory is not _MISSING
        plan.append((field.name, is_tuple, has_default))
    return tuple(plan)


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How a row with given columns fills ``cls``: (name, position, is a tuple field) for each
    field it holds, and the defaults of those it does not."""

    fields: tuple[tuple[str, int, bool], ...]
    defaults: dict[str, Any]
    # Filled without running ``__init__`` (no ``__post_init__``, no slots): a frozen dataclass's
    # ``__init__`` sets each field through ``object.__setattr__``, a third of a page's record cost.
    direct: bool
    # Every column is a field and none needs a tuple: the row zips straight into the fields.
    exact: bool


@functools.lru_cache(maxsize=512)
def _layout(cls: type, columns: tuple[str, ...]) -> _Layout:
    position = {name: index for index, name in enumerate(columns)}
    fields = []
    defaults: dict[str, Any] = {}
    by_name = {field.name: field for field in dataclasses.fields(cls)}
    for name, is_tuple, has_default in _plan(cls):
        index = position.get(name)
        if index is not None:
            fields.append((name, index, is_tuple))
            continue
        if not has_default:
            raise KeyError(f"{cls.__name__}: the row has no column {name!r}")
        field = by_name[name]
        if field.default is _MISSING:
            defaults = {}  # a default factory: only __init__ may call it
            break
        defaults[name] = field.default
    direct = (
        not hasattr(cls, "__post_init__")
        and "__slots__" not in cls.__dict__
        and len(fields) + len(defaults) == len(_plan(cls))
    )
    exact = len(fields) == len(columns) and not any(is_tuple for _, _, is_tuple in fields)
    return _Layout(tuple(fields), defaults, direct, exact)


def from_row(cls: type[R], row: Any) -> R:
    """A ``cls`` (a dataclass) from ``row`` (a SQLAlchemy ``Row``, an asyncpg ``Record`` or a
    mapping of column names)."""
    if not isinstance(row, Mapping):
        # By position: a page builds a hundred records, and a lookup by name through the row's
        # mapping costs several times the positional one.
        columns = row._fields if hasattr(row, "_fields") else tuple(row.keys())
        layout = _layout(cls, columns)
        if layout.exact:
            values = dict(zip(columns, row, strict=True))
        else:
            values = {
                name: tuple(row[index] or ()) if is_tuple else row[index]
                for name, index, is_tuple in layout.fields
            }
        if not layout.direct:
            return cls(**values)
        instance = cls.__new__(cls)
        instance.__dict__.update(layout.defaults)
        instance.__dict__.update(values)
        return instance
    mapping: Mapping[str, Any] = row
    values: dict[str, Any] = {}
    for name, is_tuple, has_default in _plan(cls):
        if name not in mapping:
            if has_default:
                continue
            raise KeyError(f"{cls.__name__}: the row has no column {name!r}")
        value = mapping[name]
        values[name] = tuple(value or ()) if is_tuple else value
    return cls(**values)


def from_rows(cls: type[R], rows: Sequence[Any], columns: tuple[str, ...] | None = None) -> list[R]:
    """:func:`from_row` for each of ``rows`` (positional rows sharing their columns: one query's),
    the layout found once; rows whose columns are exactly a plain dataclass's fields go straight
    into each instance's ``__dict__`` (a page of a hundred, on the list path). ``columns`` names the
    values of plain tuples."""
    if not rows or isinstance(rows[0], Mapping):
        return [from_row(cls, row) for row in rows]
    if columns is None:
        first = rows[0]
        columns = tuple(first._fields) if hasattr(first, "_fields") else tuple(first.keys())
    layout = _layout(cls, columns)
    if not (layout.exact and layout.direct and not layout.defaults):
        if isinstance(rows[0], tuple) and not hasattr(rows[0], "_fields"):
            rows = [dict(zip(columns, row, strict=True)) for row in rows]
        return [from_row(cls, row) for row in rows]
    new = cls.__new__
    made = []
    for row in rows:
        instance = new(cls)
        instance.__dict__.update(zip(columns, row, strict=True))
        made.append(instance)
    return made
