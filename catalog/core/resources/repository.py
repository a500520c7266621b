"""The resource domain's queries: the reads of ``resources`` and ``resource_versions`` (what writes a
row is the writer's one statement, :mod:`catalog.core.resources.writer`), and deletion.

No rules live here (what may be written, when a write is a conflict, what a caller may see): the
rule modules (:mod:`.writes`, :mod:`.listing`, :mod:`.tree`, :mod:`.history`) decide and call
these; visibility comes in as a :class:`~catalog.core.visibility.Visibility` that turns itself into
SQL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Row,
    and_,
    any_,
    bindparam,
    func,
    literal,
    not_,
    select,
)
from sqlalchemy import delete as sql_delete
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.resources.record import ResourceRecord, record_from_row
from catalog.core.uris import uri_prefix_upper_bound
from catalog.core.visibility import Visibility
from catalog.db.models import resource_versions, resources

ROWS_PER_STATEMENT = 1000  # keeps a statement under PostgreSQL's 32767 parameters

# Must stay identical to the expression of index ix_resources_search_trgm (migration 0001).
RESOURCE_SEARCH_TEXT = func.lower(
    resources.c.uri
    + literal(" ")
    + resources.c.name
    + literal(" ")
    + func.coalesce(resources.c.title, "")
    + literal(" ")
    + func.coalesce(resources.c.description, "")
)

# Must stay identical to the expression of index ix_resources_text_search (migration 0005).
TEXT_VECTOR = func.catalog_resource_text_vector(resources.c.text)

# Columns a listing reads: never the content.
LISTING_COLUMNS = tuple(c for c in resources.c if c.name != "text")


@dataclass(frozen=True)
class ListingFilter:
    uri_prefix: str | None = None
    tag: str | None = None
    query: str | None = None
    # An exact media type, or ``type/*`` for every subtype.
    mime_type: str | None = None

    @property
    def key(self) -> str:
        return json.dumps([self.uri_prefix, self.tag, self.query, self.mime_type])


NO_FILTER = ListingFilter()


# -- single rows ----------------------------------------------------------------------------------


async def lock(
    conn: AsyncConnection, tenant_id: int, *, resource_id: int | None = None, uri: str | None = None
) -> ResourceRecord | None:
    """The row with this id (or URI), locked for the rest of the transaction."""
    query = select(resources).where(resources.c.tenant_id == tenant_id).with_for_update()
    query = (
        query.where(resources.c.id == resource_id)
        if resource_id is not None
        else query.where(resources.c.uri == uri)
    )
    row = (await conn.execute(query)).one_or_none()
    return record_from_row(row) if row else None


async def lock_uris(conn: AsyncConnection, tenant_id: int, uris: Sequence[str]) -> dict[str, ResourceRecord]:
    """The existing rows among ``uris``, locked, in URI order (so concurrent batches cannot deadlock)."""
    locked = await _lock_rows(conn, tenant_id, resources.c.uri, uris)
    return {record.uri: record for record in locked}


async def lock_ids(conn: AsyncConnection, tenant_id: int, ids: Sequence[int]) -> dict[int, ResourceRecord]:
    """The existing rows among ``ids``, locked, in id order (so concurrent batches cannot deadlock)."""
    locked = await _lock_rows(conn, tenant_id, resources.c.id, ids)
    return {record.id: record for record in locked}


async def _lock_rows(
    conn: AsyncConnection, tenant_id: int, key: ColumnElement[Any], values: Sequence[Any]
) -> list[ResourceRecord]:
    """The tenant's rows whose ``key`` is among ``values``, locked (``FOR UPDATE``) in ``key`` order,
    a statement per ``ROWS_PER_STATEMENT`` values."""
    found: list[ResourceRecord] = []
    ordered = sorted(set(values))
    for start in range(0, len(ordered), ROWS_PER_STATEMENT):
        rows = await conn.execute(
            select(resources)
            .where(resources.c.tenant_id == tenant_id, key.in_(ordered[start : start + ROWS_PER_STATEMENT]))
            .order_by(key)
            .with_for_update()
        )
        found.extend(record_from_row(row) for row in rows)
    return found


async def fetch(
    conn: AsyncConnection, tenant_id: int, resource_id: int, *, include_content: bool = False
) -> ResourceRecord | None:
    columns = list(resources.c) if include_content else list(LISTING_COLUMNS)
    row = (
        await conn.execute(
            select(*columns).where(resources.c.tenant_id == tenant_id, resources.c.id == resource_id)
        )
    ).one_or_none()
    return record_from_row(row) if row else None


async def exists(conn: AsyncConnection, tenant_id: int, resource_id: int) -> bool:
    found = await conn.execute(
        select(resources.c.id).where(resources.c.tenant_id == tenant_id, resources.c.id == resource_id)
    )
    return found.first() is not None


async def uri_taken(conn: AsyncConnection, tenant_id: int, uri: str) -> bool:
    taken = await conn.execute(
        select(resources.c.id).where(resources.c.tenant_id == tenant_id, resources.c.uri == uri)
    )
    return taken.first() is not None


async def delete_row(conn: AsyncConnection, tenant_id: int, resource_id: int) -> None:
    await conn.execute(
        sql_delete(resources).where(resources.c.tenant_id == tenant_id, resources.c.id == resource_id)
    )


# -- history --------------------------------------------------------------------------------------


async def versions(
    conn: AsyncConnection, tenant_id: int, resource_id: int, *, before: int | None = None, limit: int
) -> list[Row[Any]]:
    """Up to ``limit`` versions of the resource's history older than ``before``, newest first."""
    query = select(resource_versions).where(
        resource_versions.c.tenant_id == tenant_id, resource_versions.c.resource_id == resource_id
    )
    if before is not None:
        query = query.where(resource_versions.c.version < before)
    rows = await conn.execute(query.order_by(resource_versions.c.version.desc()).limit(limit))
    return list(rows.all())


async def version(conn: AsyncConnection, tenant_id: int, resource_id: int, number: int) -> Row[Any] | None:
    """One version of the resource's history, with its content."""
    row = await conn.execute(
        select(resource_versions).where(
            resource_versions.c.tenant_id == tenant_id,
            resource_versions.c.resource_id == resource_id,
            resource_versions.c.version == number,
        )
    )
    return row.one_or_none()


# -- listings -------------------------------------------------------------------------------------


def metadata_pattern(query: str) -> str:
    """The ``LIKE`` pattern (escape ``\\``) of ``query`` as a case-insensitive substring."""
    needle = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{needle}%"


def metadata_match(query: str) -> ColumnElement[bool]:
    """``query`` as a case-insensitive substring of uri, name, title or description (trigram index)."""
    return RESOURCE_SEARCH_TEXT.like(metadata_pattern(query), escape="\\")


async def search_candidates(
    conn: AsyncConnection, tenant_id: int, query: str, *, text: bool, limit: int
) -> list[int]:
    """Up to ``limit`` ids of the tenant's resources whose metadata (or, with ``text``, text)
    matches ``query``, found through the indexes (migration 0007): the policy keeps non-leakproof
    matches from using them. Visibility is not applied: a narrowing for :func:`listing_clause`."""
    pattern, words = (None, query) if text else (metadata_pattern(query), None)
    found = func.catalog_search_candidates(tenant_id, pattern, words, limit).table_valued("id")
    return list((await conn.execute(select(found.c.id))).scalars())


def text_match(query: str) -> ColumnElement[bool]:
    """Every word of ``query`` in the resource's text (full-text index of migration 0005)."""
    return and_(resources.c.text.is_not(None), TEXT_VECTOR.op("@@")(func.plainto_tsquery("simple", query)))


def listing_clause(
    visibility: Visibility,
    filters: ListingFilter = NO_FILTER,
    *,
    text_tier: bool = False,
    candidates: Sequence[int] | None = None,
) -> ColumnElement[bool]:
    """The rows a listing may show: the visibility rule, then the caller's filters.

    ``query`` matches the metadata; with ``text_tier`` it instead matches the text of resources
    whose metadata does not match (the second tier of a search, see ``listing.list_page``).
    ``candidates``, the ids :func:`search_candidates` found for that match, narrow the scan to
    them (the match itself is still applied)."""
    clauses = [visibility.resources_clause(resources)]
    if candidates is not None:
        clauses.append(
            resources.c.id == any_(bindparam("candidates", list(candidates), type_=ARRAY(BigInteger)))
        )
    if filters.uri_prefix:
        clauses.append(resources.c.uri >= filters.uri_prefix)
        upper = uri_prefix_upper_bound(filters.uri_prefix)
        if upper is not None:
            clauses.append(resources.c.uri < upper)
    if filters.tag:
        clauses.append(resources.c.tags.contains([filters.tag]))
    if filters.mime_type:
        if filters.mime_type.endswith("/*"):
            family = filters.mime_type[:-1].replace("%", "\\%").replace("_", "\\_")
            clauses.append(resources.c.mime_type.like(f"{family}%", escape="\\"))
        else:
            clauses.append(resources.c.mime_type == filters.mime_type)
    if filters.query:
        if text_tier:
            clauses.append(and_(text_match(filters.query), not_(metadata_match(filters.query))))
        else:
            clauses.append(metadata_match(filters.query))
    return and_(*clauses)


async def visible_row(
    conn: AsyncConnection, visibility: Visibility, uri: str, filters: ListingFilter = NO_FILTER
) -> ResourceRecord | None:
    """The row at exactly ``uri`` when a listing with these filters would show it (no content)."""
    query = select(*LISTING_COLUMNS).where(listing_clause(visibility, filters), resources.c.uri == uri)
    row = (await conn.execute(query)).one_or_none()
    return record_from_row(row) if row else None


async def page_rows(
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    after: str | None,
    limit: int,
    filters: ListingFilter = NO_FILTER,
    text_tier: bool = False,
    candidates: Sequence[int] | None = None,
    inclusive: bool = False,
) -> list[ResourceRecord]:
    """Up to ``limit`` visible rows after ``after`` (from it, if ``inclusive``) in URI byte order
    (no content).

    Without filters, sparse grants page as one index range scan per grant (see
    :meth:`Visibility.sparse_page_uris`); otherwise one scan filtered by the listing clause.
    """
    page_uris = visibility.sparse_page_uris(after=after, limit=limit) if filters == NO_FILTER else None
    if page_uris is not None:
        query = select(*LISTING_COLUMNS).where(
            resources.c.tenant_id == visibility.tenant_id, resources.c.uri.in_(page_uris)
        )
    else:
        query = select(*LISTING_COLUMNS).where(
            listing_clause(visibility, filters, text_tier=text_tier, candidates=candidates)
        )
        if after is not None:
            query = query.where(resources.c.uri >= after if inclusive else resources.c.uri > after)
    rows = (await conn.execute(query.order_by(resources.c.uri).limit(limit))).all()
    return [record_from_row(row) for row in rows]
