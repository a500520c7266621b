"""Search pages: a listing filtered by a query, ranked in two tiers (metadata, then text), each a
keyset scan in URI order; the cursor names the tier and the last URI.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.catalog import Catalog
from catalog.core.errors import InvalidInput
from catalog.core.resources import repository as rows
from catalog.core.resources.paging import cursor_after
from catalog.core.resources.record import ResourceRecord
from catalog.core.resources.repository import ListingFilter
from catalog.core.visibility import Visibility

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
