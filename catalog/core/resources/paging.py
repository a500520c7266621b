"""Pages of a listing: where one starts (its cursor), where it ends, and the cursor after it."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TypeVar

from catalog.core.catalog import Catalog
from catalog.core.cursors import decode_cursor, encode_cursor
from catalog.core.resources.repository import NO_FILTER, ListingFilter
from catalog.core.visibility import Visibility

MAX_PAGE = 1000
DEFAULT_PAGE = 100

Entry = TypeVar("Entry")  # a ListingEntry, or a ListingValues tuple (``uri_of`` then says where its URI is)


def page_start(
    catalog: Catalog,
    visibility: Visibility,
    *,
    listing: str,
    cursor: str | None,
    filters: ListingFilter = NO_FILTER,
) -> str | None:
    """Where a page of this listing starts for this caller: after the position its cursor names
    (``InvalidCursor`` for one damaged, forged or minted for another listing or standing)."""
    if not cursor:
        return None
    position = decode_cursor(
        catalog.signing_key, cursor, listing=f"{listing}:{filters.key}", fingerprint=visibility.fingerprint
    )
    return str(position.after)


def page_of(
    catalog: Catalog,
    visibility: Visibility,
    records: list[Entry],
    *,
    listing: str,
    limit: int,
    filters: ListingFilter = NO_FILTER,
    uri_of: Callable[[Entry], str] = operator.attrgetter("uri"),
) -> tuple[list[Entry], str | None]:
    """A page from up to ``limit + 1`` records: the first ``limit``, and the cursor after them when
    there was one more."""
    if len(records) <= limit:
        return records, None
    records = records[:limit]
    return records, cursor_after(catalog, visibility, uri_of(records[-1]), listing=listing, filters=filters)


def cursor_after(
    catalog: Catalog,
    visibility: Visibility,
    uri: str,
    *,
    listing: str,
    filters: ListingFilter = NO_FILTER,
) -> str:
    """The cursor of the page that starts after ``uri`` in this listing, for this caller."""
    return encode_cursor(
        catalog.signing_key, after=uri, listing=f"{listing}:{filters.key}", fingerprint=visibility.fingerprint
    )
