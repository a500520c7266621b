"""Resources: the record (:mod:`.record`), the queries (:mod:`.repository`), the one statement
that writes rows (:mod:`.writer`), and the rules: writes (:mod:`.writes`, :mod:`.bulk` for an
import), listings (:mod:`.listing`, :mod:`.paging`, :mod:`.search`), the URI tree (:mod:`.tree`)
and history (:mod:`.history`). Callers import from here."""

from catalog.core.resources.history import get_version, list_versions, restore_version
from catalog.core.resources.listing import get_resource, list_page, list_resources, search_resources
from catalog.core.resources.paging import DEFAULT_PAGE, MAX_PAGE, cursor_after, page_start
from catalog.core.resources.record import (
    LISTING_ENTRY_FIELDS,
    METADATA_FIELDS,
    ListingEntry,
    ListingValues,
    ResourceRecord,
    effective_annotations,
    entry_values,
    record_from_row,
)
from catalog.core.resources.repository import (
    LISTING_COLUMNS,
    RESOURCE_SEARCH_TEXT,
    ListingFilter,
    listing_clause,
)
from catalog.core.resources.tree import TreeEntry, folder_of, tree_page
from catalog.core.resources.writes import (
    create_resource,
    delete_resource,
    patch_resource,
    upsert_many,
    upsert_resource,
)

__all__ = [
    "DEFAULT_PAGE",
    "LISTING_COLUMNS",
    "LISTING_ENTRY_FIELDS",
    "MAX_PAGE",
    "METADATA_FIELDS",
    "RESOURCE_SEARCH_TEXT",
    "ListingEntry",
    "ListingFilter",
    "ListingValues",
    "ResourceRecord",
    "TreeEntry",
    "create_resource",
    "cursor_after",
    "delete_resource",
    "effective_annotations",
    "entry_values",
    "folder_of",
    "get_resource",
    "get_version",
    "list_page",
    "list_resources",
    "list_versions",
    "listing_clause",
    "page_start",
    "patch_resource",
    "record_from_row",
    "restore_version",
    "search_resources",
    "tree_page",
    "upsert_many",
    "upsert_resource",
]
