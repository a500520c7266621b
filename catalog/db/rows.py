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
from collections.abc import Mapping
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


def from_row(cls: type[R], row: Any) -> R:
    """A ``cls`` (a dataclass) from ``row`` (a SQLAlchemy ``Row`` or a mapping of column names)."""
    mapping: Mapping[str, Any] = row if isinstance(row, Mapping) else row._mapping
    values: dict[str, Any] = {}
    for name, is_tuple, has_default in _plan(cls):
        if name not in mapping:
            if has_default:
                continue
            raise KeyError(f"{cls.__name__}: the row has no column {name!r}")
        value = mapping[name]
        values[name] = tuple(value or ()) if is_tuple else value
    return cls(**values)
