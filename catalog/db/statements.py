"""SQLAlchemy statements run on a bare asyncpg driver (``driver.scoped_driver``).

A statement built with SQLAlchemy (the visibility predicate, the completion scans) is compiled
once for asyncpg's ``$n`` parameters; each execution then only orders its values. What this saves
over ``AsyncConnection.execute`` is SQLAlchemy's per-execution work (the compiled cache's lookup,
the execution context, result processing through a greenlet), about as much as the database's
own time for a short indexed query.

Only statements whose text does not depend on their values can be compiled once: no expanding
``IN`` lists (an array parameter with ``= ANY`` instead), no values rendered into the text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

_DIALECT = asyncpg_dialect()


@dataclass(frozen=True)
class DriverStatement:
    """A compiled statement: its text for asyncpg and how to order its values."""

    sql: str
    compiled: SQLCompiler
    names: tuple[str, ...]
    # Each parameter's type conversion, as SQLAlchemy applies it (an array's, for one).
    converters: tuple[Callable[[Any], Any] | None, ...]

    def arguments(self, values: Mapping[str, Any] | None = None) -> list[Any]:
        """The statement's parameters in order: ``values`` by name, the rest as it was built."""
        bound = self.compiled.construct_params(dict(values or {}), _check=True)
        return [
            bound[name] if convert is None or bound[name] is None else convert(bound[name])
            for name, convert in zip(self.names, self.converters, strict=True)
        ]


@functools.lru_cache(maxsize=1024)
def driver_statement(statement: ClauseElement) -> DriverStatement:
    """``statement`` compiled for a bare asyncpg driver (statements are cached by their callers, so
    by identity here too)."""
    compiled = statement.compile(dialect=_DIALECT)
    assert isinstance(compiled, SQLCompiler)
    if "POSTCOMPILE" in compiled.string:
        raise ValueError("a statement with an expanding IN list has no text of its own")
    names = tuple(compiled.positiontup or ())
    processors = compiled._bind_processors  # SQLAlchemy's own per-parameter conversions
    # A processor is one callable per parameter; SQLAlchemy types it as possibly a sequence of them,
    # which only a tuple-valued bind (``tuple_(...).in_(...)``) has, and none of these statements.
    converters = cast(tuple[Callable[[Any], Any] | None, ...], tuple(processors.get(name) for name in names))
    return DriverStatement(compiled.string, compiled, names, converters)
