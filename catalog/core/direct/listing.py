"""``resources/list`` pages on the driver: the credential's authentication, grants and page in
one statement (``catalog_plain_page``, a historical name), or a page alone (``catalog_visible_page``).
The page and its cursor are the core's (``catalog.core.resources.paging``), as the SQLAlchemy
executor's ``list_page`` makes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from catalog.core import reading
from catalog.core.catalog import Catalog
from catalog.core.cursors import InvalidCursor
from catalog.core.direct.standing import remember_visibility, standing_arguments, standing_of
from catalog.core.principal import Principal
from catalog.core.reading import RESOURCE_LISTING
from catalog.core.resources.paging import DEFAULT_PAGE, page_of, page_start
from catalog.core.resources.record import ListingEntry, ListingValues, entry_values
from catalog.core.visibility import Visibility
from catalog.db.driver import self_scoped_driver
from catalog.db.rows import from_rows

_FAST_PAGE = "SELECT * FROM catalog_plain_page($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
_NO_GUESS = (None, None, None, None, None, "", 0)
FAST_PAGE_LISTED = 9  # catalog_plain_page's first listing column (before it: the principal and its grants)
_VISIBLE_PAGE = "SELECT * FROM catalog_visible_page($1, $2, $3, $4, $5, $6, $7, $8)"


@dataclass(frozen=True)
class FastPage:
    """A ``resources/list`` page :func:`fast_resources_page` answered, and for whom."""

    principal: Principal
    entries: list[ListingValues]  # each entry's values (the wire entry is made from them directly)
    next_cursor: str | None


async def fast_resources_page(
    catalog: Catalog, cursor: str | None, *, token: str | None = None, principal: Principal | None = None
) -> FastPage | None:
    """``catalog.core.reading.resources_page`` for an opaque ``token`` or an authenticated tenant
    ``principal``; None when the full path must answer (an unknown, revoked or expired token; a
    cursor that is not this caller's, whose error is the full path's).

    One statement (``catalog_plain_page``, migration 0009): the credential's authentication and
    grants, and the page as the visibility this credential had on its last page would show it.
    That page is used only when the visibility computed from the grants just returned is that one;
    otherwise (the first page of a credential, its grants changed) the page is asked again with the
    right selectors (:func:`visible_page`)."""
    arguments = standing_arguments(token, principal)
    if arguments is None:
        return None
    guess = catalog.page_visibilities.get(arguments)
    selectors: tuple[object, ...] = _NO_GUESS
    if guess is not None and not guess.nothing:
        try:
            after = page_start(catalog, guess, listing=RESOURCE_LISTING, cursor=cursor)
        except InvalidCursor:
            guess = None  # the full path decides, with the visibility the statement finds
        else:
            selectors = (
                guess.everything,
                *guess.page_selectors(),
                after or "",
                reading.page_size(catalog) + 1,
            )
    async with self_scoped_driver(catalog.engine) as driver:
        found = await driver.fetch(_FAST_PAGE, *arguments, *selectors)
    standing = standing_of(found[0], principal) if found else None
    if standing is None:
        return None
    principal, visibility = standing
    if visibility != guess:
        remember_visibility(catalog, arguments, visibility)
    try:
        if visibility == guess and selectors is not _NO_GUESS:
            records, next_cursor = listed_page(
                catalog,
                visibility,
                found[1:],
                FAST_PAGE_LISTED,
                listing=RESOURCE_LISTING,
                limit=reading.page_size(catalog),
            )
        else:
            found_entries, next_cursor = await visible_page(
                catalog, visibility, listing=RESOURCE_LISTING, cursor=cursor, limit=reading.page_size(catalog)
            )
            records = [entry_values(entry) for entry in found_entries]
    except InvalidCursor:
        return None
    return FastPage(principal, records, next_cursor)


async def visible_page(
    catalog: Catalog, visibility: Visibility, *, listing: str, cursor: str | None, limit: int = DEFAULT_PAGE
) -> tuple[list[ListingEntry], str | None]:
    """``catalog.core.resources.listing.list_page`` without filters as one statement outside any
    transaction (:func:`visible_page_rows`): the same page and cursor."""
    after = page_start(catalog, visibility, listing=listing, cursor=cursor)
    if visibility.nothing:
        return [], None
    async with self_scoped_driver(catalog.engine) as driver:
        records = await visible_page_rows(driver, visibility, after=after, limit=limit + 1)
    return page_of(catalog, visibility, records, listing=listing, limit=limit)


def listed_page(
    catalog: Catalog, visibility: Visibility, found: Sequence[Any], first: int, *, listing: str, limit: int
) -> tuple[list[ListingValues], str | None]:
    """:func:`visible_page`'s answer, as each entry's values (``ListingValues``), from up to
    ``limit + 1`` rows a caller's own statement read with ``visibility``'s selectors
    (``catalog_plain_page``), their entry columns from ``first`` on."""
    return page_of(
        catalog, visibility, listing_values(found, first), listing=listing, limit=limit, uri_of=_first
    )


def _first(values: ListingValues) -> str:
    return str(values[0])  # an entry's URI: its first field


async def visible_page_rows(
    driver: asyncpg.Connection, visibility: Visibility, *, after: str | None, limit: int
) -> list[ListingEntry]:
    """``repository.page_rows`` without filters as one statement on a raw driver outside any transaction
    (``catalog_visible_page`` binds the tenant's scope for itself): the fast list path."""
    lows, highs, tags, uris = visibility.page_selectors()
    found = await driver.fetch(
        _VISIBLE_PAGE,
        visibility.tenant_id,
        visibility.everything,
        lows,
        highs,
        tags,
        uris,
        after or "",
        limit,
    )
    return from_rows(ListingEntry, found)


def listing_values(rows: Sequence[Any], first: int) -> list[ListingValues]:
    """Entries' values from rows whose columns from position ``first`` on are a listing entry's
    fields in order (``catalog_plain_page``'s page rows, after the principal's columns)."""
    return [row[first:] for row in rows]
