"""The URI tree: a folder's sub-folders and resources, a keyset page at a time (a skip scan)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.catalog import Catalog
from catalog.core.cursors import decode_cursor, encode_cursor
from catalog.core.principal import Principal
from catalog.core.resources import repository as rows
from catalog.core.resources.paging import DEFAULT_PAGE
from catalog.core.resources.record import ResourceRecord
from catalog.core.resources.repository import NO_FILTER, ListingFilter
from catalog.core.uris import uri_prefix_upper_bound
from catalog.core.visibility import Visibility, load_visibility
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


def directory_folder(record: ResourceRecord, prefix: str) -> str | None:
    """The folder of the tree at ``prefix`` that the ``inode/directory`` resource ``record`` names
    (its URI and a ``/``), or None when ``record`` is no directory or that is no folder there."""
    if not record.is_directory:
        return None
    folder = record.uri + "/"
    return folder if folder_of(folder, prefix) == folder else None


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a folder: a sub-folder (a URI prefix), a resource, or both: a directory
    resource (``inode/directory`` at ``…/api``) with something shown under its folder (``…/api/``)
    is one entry, the folder carrying the resource, at the resource's place in URI order."""

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
    carry_directories: bool = False,
) -> tuple[list[TreeEntry], str | None]:
    """One keyset page of the folder at ``prefix``: its sub-folders and its resources, in URI order.

    A skip scan: rows are read in URI order a batch at a time, and on meeting a folder the scan
    jumps past everything under it (to the folder's upper bound) with a one-row probe, so a page
    costs at most one index probe per folder shown, however many resources the folders hold, and
    a few batched reads for the resources shown. The same visibility rule and filters
    as the flat listing apply; a folder appears only if something visible is under it. ``listing``
    names the surface, so a cursor of one surface's tree is refused by another's.

    With ``carry_directories`` (the admin API's tree, so the console's), a directory resource and
    its folder are one entry (:class:`TreeEntry` with both), placed where
    the resource sorts: meeting a shown ``inode/directory`` resource costs one probe for something
    shown under its folder (else it stays a plain resource), and meeting a folder whose directory
    resource this call has not met costs one probe for that resource (shown already: the folder is
    skipped, not listed twice). So it holds across pages, whatever falls between ``…/api`` and
    ``…/api/`` in byte order (``…/api-v2``, ``…/api.md``) and wherever a page ends. Without it
    (the ``list_resources`` tool, whose page counts its resources and folders apart) the two are
    separate entries, each at its own place.
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
        carried: set[str] = set()  # folders already listed with their directory resource
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
                    named = directory_folder(record, prefix) if carry_directories else None
                    if named is not None and await _shows_under(conn, visibility, filters, named):
                        carried.add(named)
                        entries.append(TreeEntry(folder=named, record=record))
                    else:
                        entries.append(TreeEntry(record=record))
                    skip_under = None
                    after, inclusive = record.uri, False
                else:
                    if folder not in carried and not (
                        carry_directories
                        and await _shown_directory(conn, visibility, filters, folder, prefix)
                    ):
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
    if last.record is not None:
        # A resource, or a folder carried by its directory resource: at the resource's place.
        position_text = f"after:{last.record.uri}"
    else:
        assert last.folder is not None
        upper = uri_prefix_upper_bound(last.folder)
        if upper is None:
            return entries, None
        position_text = f"from:{upper}"
    next_cursor = encode_cursor(
        catalog.signing_key, after=position_text, listing=key, fingerprint=visibility.fingerprint
    )
    return entries, next_cursor


async def _shows_under(
    conn: AsyncConnection, visibility: Visibility, filters: ListingFilter, folder: str
) -> bool:
    """Whether something visible under ``folder`` passes the tree's filters (a one-row probe)."""
    under = ListingFilter(uri_prefix=folder, tag=filters.tag, mime_type=filters.mime_type)
    return bool(await rows.page_rows(conn, visibility, after=None, limit=1, filters=under))


async def _shown_directory(
    conn: AsyncConnection, visibility: Visibility, filters: ListingFilter, folder: str, prefix: str
) -> bool:
    """Whether the tree at ``prefix`` lists ``folder`` with its directory resource: that resource
    (``folder`` without its ``/``) is visible, passes the filters and is an ``inode/directory``."""
    record = await rows.visible_row(conn, visibility, folder[:-1], filters)
    return record is not None and directory_folder(record, prefix) == folder
