"""Search pages: a listing filtered by a query, ranked in two tiers (metadata, then text), each a
keyset scan in URI order; the cursor names the tier and the last URI.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.catalog import Catalog
from catalog.core.errors import InvalidInput
from catalog.core.resources import repository as rows
from catalog.core.resources.paging import cursor_after
from catalog.core.resources.record import ResourceRecord
from catalog.core.resources.repository import ListingFilter
from catalog.core.visibility import Visibility
from catalog.db.models import resources

_METADATA_TIER, _TEXT_TIER = "m", "t"

# Up to this many matches, a search tier scans only them (found through the indexes, see
# ``repository.search_candidates``); beyond it, the scan in URI order with the match as a filter
# finds a page sooner than gathering every match would.
RARE_MATCHES = 5000


async def _rare_matches(
    conn: AsyncConnection, visibility: Visibility, filters: ListingFilter, *, text: bool
) -> list[int] | None:
    """The ids matching the search, when they are few enough to scan only them; else None."""
    assert filters.query
    found = await rows.search_candidates(
        conn, visibility.tenant_id, filters.query, text=text, limit=RARE_MATCHES + 1
    )
    return found if len(found) <= RARE_MATCHES else None


async def search_page(
    catalog: Catalog,
    conn: AsyncConnection,
    visibility: Visibility,
    *,
    listing: str,
    after: str | None,
    limit: int,
    filters: ListingFilter,
) -> tuple[list[ResourceRecord], str | None]:
    tier, _, last_uri = (after or f"{_METADATA_TIER}:").partition(":")
    if tier not in (_METADATA_TIER, _TEXT_TIER):
        raise InvalidInput("the cursor is invalid, expired or not yours")
    records: list[tuple[str, ResourceRecord]] = []
    if tier == _METADATA_TIER:
        found = await rows.page_rows(
            conn,
            visibility,
            after=last_uri or None,
            limit=limit + 1,
            filters=filters,
            candidates=await _rare_matches(conn, visibility, filters, text=False),
        )
        records += [(_METADATA_TIER, r) for r in found]
        last_uri = ""
    if len(records) <= limit:
        found = await rows.page_rows(
            conn,
            visibility,
            after=last_uri or None,
            limit=limit + 1 - len(records),
            filters=filters,
            text_tier=True,
            candidates=await _rare_matches(conn, visibility, filters, text=True),
        )
        records += [(_TEXT_TIER, r) for r in found]
    next_cursor = None
    if len(records) > limit:
        records = records[:limit]
        tier, record = records[-1]
        next_cursor = cursor_after(
            catalog, visibility, f"{tier}:{record.uri}", listing=listing, filters=filters
        )
    return [record for _, record in records], next_cursor


# -- snippets: what of a found resource matched ---------------------------------------------------

# A snippet shows this many characters of a matching field either side of the match.
SNIPPET_CONTEXT = 40
# ts_headline marks the matched words with these; they are removed from the text first, so a
# curator's text cannot fake a mark (private-use characters, never shown).
_START, _STOP = "\ue000", "\ue001"
_HEADLINE_OPTIONS = f'StartSel="{_START}", StopSel="{_STOP}", MaxWords=24, MinWords=10, MaxFragments=1'
_WORDS = re.compile(r"\w+")
# How much of a text a snippet is cut from (see _text_window).
SNIPPET_WINDOW = 4000
# How much of a text the full-text match reads: catalog_resource_text_vector's left(body, N) in
# catalog/db/sql/functions.sql (an index expression: changed only by a migration that rebuilds the
# index). tests/db/test_sql_definitions.py holds the two equal.
SEARCHED_TEXT_CHARS = 262144
_MARKED = re.compile(f"{_START}(.*?){_STOP}", re.DOTALL)
# The fields a metadata match is looked for in, in the order a reader cares about.
SnippetField = Literal["name", "title", "description", "uri", "text"]
_SNIPPET_FIELDS: tuple[SnippetField, ...] = ("name", "title", "description", "uri")


@dataclass(frozen=True)
class Snippet:
    """What of a resource matched a search: a field and its words around the match, as parts that
    are matched or not (text, never markup: a surface shows them as text)."""

    field: SnippetField
    parts: tuple[tuple[str, bool], ...]


def metadata_snippet(record: ResourceRecord, query: str) -> Snippet | None:
    """The first of name, title, description or uri that contains ``query`` (case-insensitive),
    cut to the match and ``SNIPPET_CONTEXT`` characters either side; None when no one field does
    (the metadata match may straddle two fields)."""
    pattern = re.compile(re.escape(query), re.IGNORECASE)
    for name in _SNIPPET_FIELDS:
        value = getattr(record, name)
        found = pattern.search(value) if value else None
        if found is None:
            continue
        assert value is not None
        start, end = found.span()
        before = value[max(0, start - SNIPPET_CONTEXT) : start]
        after = value[end : end + SNIPPET_CONTEXT]
        parts = [
            ("…" if start > SNIPPET_CONTEXT else "") + before,
            value[start:end],
            after + ("…" if end + SNIPPET_CONTEXT < len(value) else ""),
        ]
        return Snippet(name, tuple((part, i == 1) for i, part in enumerate(parts) if part))
    return None


def headline_parts(headline: str) -> tuple[tuple[str, bool], ...]:
    """ts_headline's fragment, marked with ``_START``/``_STOP``, as parts matched or not."""
    parts: list[tuple[str, bool]] = []
    at = 0
    for found in _MARKED.finditer(headline):
        if found.start() > at:
            parts.append((headline[at : found.start()], False))
        parts.append((found.group(1), True))
        at = found.end()
    if at < len(headline):
        parts.append((headline[at:], False))
    return tuple(parts)


def _text_window(query: str) -> ColumnElement[str]:
    """The part of a resource's text a snippet is cut from: ``SNIPPET_WINDOW`` characters around
    the first occurrence of the query's first word in what the full-text match reads (the first
    256 KiB, as ``catalog_resource_text_vector``), so a page of long texts costs a page of windows,
    not of whole texts; the start of the text when the word is not found as written."""
    searched = func.left(resources.c.text, SEARCHED_TEXT_CHARS)
    words = _WORDS.findall(query.lower())
    if not words:
        return func.left(searched, SNIPPET_WINDOW)
    at = func.strpos(func.lower(searched), words[0])
    return case(
        (at > 0, func.substr(searched, func.greatest(1, at - SNIPPET_WINDOW // 2), SNIPPET_WINDOW)),
        else_=func.left(searched, SNIPPET_WINDOW),
    )


async def search_snippets(
    conn: AsyncConnection, tenant_id: int, records: Sequence[ResourceRecord], query: str
) -> dict[int, Snippet]:
    """A snippet for each of ``records`` (a page a search found) that shows what matched: the
    metadata field that contains the query, else the words of its text around the query's words
    (PostgreSQL's ``ts_headline`` over what the full-text match reads)."""
    found: dict[int, Snippet] = {}
    for record in records:
        snippet = metadata_snippet(record, query)
        if snippet is not None:
            found[record.id] = snippet
    by_text = [record.id for record in records if record.id not in found]
    if not by_text:
        return found
    body = func.replace(func.replace(_text_window(query), _START, ""), _STOP, "")
    headline = func.ts_headline(
        "simple", body, func.plainto_tsquery("simple", query), _HEADLINE_OPTIONS
    ).label("headline")
    rows = await conn.execute(
        select(resources.c.id, headline).where(
            resources.c.tenant_id == tenant_id, resources.c.id.in_(by_text), resources.c.text.is_not(None)
        )
    )
    for row in rows:
        parts = headline_parts(row.headline)
        if any(matched for _, matched in parts):
            found[row.id] = Snippet("text", parts)
    return found
