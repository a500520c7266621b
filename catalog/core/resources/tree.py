"""The URI tree: a folder's sub-folders and resources, a keyset page at a time (a skip scan)."""

from __future__ import annotations

from dataclasses import dataclass

from catalog.core.catalog import Catalog
from catalog.core.cursors import decode_cursor, encode_cursor
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.paging import DEFAULT_PAGE
from catalog.core.resources.record import ResourceRecord
from catalog.core.resources.repository import NO_FILTER, ListingFilter
from catalog.core.uris import uri_prefix_upper_bound
from catalog.core.visibility import load_visibility
from catalog.db.engine import TenantScope, transaction


def folder_of(uri: str, prefix: str) -> str | None:
    """The folder of the tree at ``prefix`` that holds ``uri``, or None when ``uri`` is a leaf there.

    A folder is a prefix ending in ``/``, one path segment below ``prefix``. At the root (no prefix)
    the first level is ``scheme://authority/``, so ``file:///a/b`` is under ``file:///`` and
    ``https://h/x`` under ``https://h/``, and ``test://static-text`` is a leaf.
    """
    start = len(prefix)
    if not prefix:
        scheme_end = uri.find("://")
        if scheme_end < 0:
            return None
        start = scheme_end + 3
    slash = uri.find("/", start)
    return uri[: slash + 1] if slash >= 0 else None


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a folder: a sub-folder (a URI prefix) or a resource."""

    folder: str | None = None
    record: ResourceRecord | None = None


TREE_BATCH = 200  # rows per read in a run of resources
TREE_FIRST_BATCH = 16


async def tree_page(
    catalog: Catalog,
    principal: Principal,
    tenant_id: int,
    *,
    prefix: str,
    cursor: str | None,
    limit: int = DEFAULT_PAGE,
    filters: ListingFilter = NO_FILTER,
    listing: str = "admin.tree",
) -> tuple[list[TreeEntry], str | None]:
    """One keyset page of the folder at ``prefix``: its sub-folders and its resources, in URI order.

    A skip scan: rows are read in URI order a batch at a time, and on meeting a folder the scan
    jumps past everything under it (to the folder's upper bound) with a one-row probe, so a page
    costs at most one index probe per folder shown, however many resources the folders hold, and
    a few batched reads for the resources shown. The same visibility rule and filters
    as the flat listing apply; a folder appears only if something visible is under it. ``listing``
    names the surface, so a cursor of one surface's tree is refused by another's.
    """
    listing = f"{listing}:{prefix}"
    filters = ListingFilter(uri_prefix=prefix or None, tag=filters.tag, mime_type=filters.mime_type)
    key = f"{listing}:{filters.key}"
    after, inclusive = None, False
    async with transaction(catalog.engine, TenantScope.tenant(tenant_id)) as conn:
        visibility = await load_visibility(conn, principal, tenant_id)
        if cursor:
            position = decode_cursor(
                catalog.signing_key, cursor, listing=key, fingerprint=visibility.fingerprint
            )
            mode, _, bound = str(position.after).partition(":")
            after, inclusive = bound, mode == "from"
        entries: list[TreeEntry] = []
        if visibility.nothing:
            return entries, None
        done = False
        size = TREE_FIRST_BATCH
        while not done and len(entries) <= limit:
            batch = await rows.page_rows(
                conn, visibility, after=after, limit=size, filters=filters, inclusive=inclusive
            )
            done = len(batch) < size
            skip_under: str | None = None
            for record in batch:
                if skip_under is not None and record.uri.startswith(skip_under):
                    continue
                folder = folder_of(record.uri, prefix)
                if folder is None:
                    entries.append(TreeEntry(record=record))
                    skip_under = None
                    after, inclusive = record.uri, False
                else:
                    entries.append(TreeEntry(folder=folder))
                    skip_under = folder
                    upper = uri_prefix_upper_bound(folder)
                    if upper is None:
                        done = True
                        break
                    after, inclusive = upper, True
                if len(entries) > limit:
                    break
            if skip_under is not None and not done:
                # The batch ended inside a folder: continue after it, not through it, with a probe
                # of one row (the next entry may be another folder: reading more would be waste).
                upper = uri_prefix_upper_bound(skip_under)
                if upper is None:
                    done = True
                else:
                    after, inclusive = upper, True
                size = 1
            else:
                # A run of resources: read more of them at a time.
                size = min(TREE_BATCH, max(size * 4, TREE_FIRST_BATCH))
    if len(entries) <= limit:
        return entries, None
    entries = entries[:limit]
    last = entries[-1]
    if last.folder is not None:
        upper = uri_prefix_upper_bound(last.folder)
        if upper is None:
            return entries, None
        position_text = f"from:{upper}"
    else:
        assert last.record is not None
        position_text = f"after:{last.record.uri}"
    next_cursor = encode_cursor(
        catalog.signing_key, after=position_text, listing=key, fingerprint=visibility.fingerprint
    )
    return entries, next_cursor
