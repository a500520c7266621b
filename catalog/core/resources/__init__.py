"""Resources: the record (:mod:`.record`), the queries (:mod:`.repository`) and the rules
(:mod:`.service`). Callers import from here."""

from catalog.core.resources.record import METADATA_FIELDS, ListingEntry, ResourceRecord, record_from_row
from catalog.core.resources.repository import (
    LISTING_COLUMNS,
    RESOURCE_SEARCH_TEXT,
    ListingFilter,
    listing_clause,
)
from catalog.core.resources.service import (
    DEFAULT_PAGE,
    MAX_PAGE,
    TreeEntry,
    create_resource,
    cursor_after,
    delete_resource,
    folder_of,
    get_resource,
    get_version,
    list_page,
    list_resources,
    list_versions,
    patch_resource,
    restore_version,
    tree_page,
    upsert_many,
    upsert_resource,
    visible_page,
)

__all__ = [
    "DEFAULT_PAGE",
    "LISTING_COLUMNS",
    "MAX_PAGE",
    "METADATA_FIELDS",
    "RESOURCE_SEARCH_TEXT",
    "ListingEntry",
    "ListingFilter",
    "ResourceRecord",
    "TreeEntry",
    "create_resource",
    "cursor_after",
    "delete_resource",
    "folder_of",
    "get_resource",
    "get_version",
    "list_page",
    "list_resources",
    "list_versions",
    "listing_clause",
    "patch_resource",
    "record_from_row",
    "restore_version",
    "tree_page",
    "upsert_many",
    "upsert_resource",
    "visible_page",
]
