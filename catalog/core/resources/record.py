"""A stored resource as the rest of the catalogue sees it (one row, mapped once)."""

from __future__ import annotations

import base64
import functools
import hashlib
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from catalog.core.audit import digest
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE
from catalog.core.schemas.resources import ResourceOut
from catalog.db.rows import from_row

# The columns a curator's body sets (everything but content, which is resolved apart).
METADATA_FIELDS = (
    "uri",
    "name",
    "title",
    "description",
    "mime_type",
    "icons",
    "annotations",
    "tags",
    "consent_message",
    "ttl_ms",
    "meta",
)


def effective_annotations(annotations: dict[str, Any] | None, content_changed_at: datetime) -> dict[str, Any]:
    """Annotations as served: ``lastModified`` defaults to the last content change."""
    if not annotations:  # most resources: a page of them builds this a hundred times
        return {"lastModified": _iso(content_changed_at)}
    served = dict(annotations)
    served.setdefault("lastModified", _iso(content_changed_at))
    return served


@dataclass(frozen=True)
class ListingEntry:
    """What a listing shows of a resource and nothing more (no content, no bookkeeping): a page
    builds a hundred of them (``direct.listing.visible_page_rows``)."""

    uri: str
    name: str
    title: str | None
    description: str | None
    mime_type: str | None
    size: int | None
    icons: list[dict[str, Any]] | None
    annotations: dict[str, Any] | None
    meta: dict[str, Any] | None
    content_changed_at: datetime

    def effective_annotations(self) -> dict[str, Any]:
        return effective_annotations(self.annotations, self.content_changed_at)


# A listing entry's values as a tuple in its fields' order: what the fast list path passes from
# the rows to the wire without building a ``ListingEntry`` for each (a page has a hundred).
ListingValues = tuple[Any, ...]
LISTING_ENTRY_FIELDS = tuple(entry_field.name for entry_field in fields(ListingEntry))
entry_values: Callable[[ListingEntry], ListingValues] = operator.attrgetter(*LISTING_ENTRY_FIELDS)


@dataclass(frozen=True)
class ResourceRecord(ListingEntry):
    """A stored resource: what a listing shows, the bookkeeping, and the content when read."""

    id: int
    tenant_id: int
    tags: tuple[str, ...]
    consent_message: str | None
    ttl_ms: int | None
    blob_sha256: str | None
    version: int
    created_at: datetime
    updated_at: datetime
    text: str | None = field(default=None, repr=False)  # only when the query read it

    @property
    def etag(self) -> str:
        return f'"{self.id}.{self.version}"'

    @property
    def is_directory(self) -> bool:
        return self.mime_type == DIRECTORY_MIME_TYPE

    def snapshot(self) -> dict[str, Any]:
        """Metadata in admin-API form (camelCase), as kept in the version history."""
        return snapshot_of(self.__dict__)

    def digest(self) -> str | None:
        """The audit digest: metadata and content (text by its sha256, a blob by its own)."""
        text = hashlib.sha256(self.text.encode()).hexdigest() if self.text is not None else None
        return content_digest(self.snapshot(), text, self.blob_sha256)

    def to_out(self, *, include_content: bool = False, blob: bytes | None = None) -> ResourceOut:
        out = ResourceOut.model_validate(
            {
                **self.snapshot(),
                "annotations": self.effective_annotations(),
                "id": self.id,
                "version": self.version,
                "createdAt": self.created_at,
                "updatedAt": self.updated_at,
                "blobSha256": self.blob_sha256,
            }
        )
        if include_content:
            out.text = self.text
            if blob is not None:
                out.blob = base64.b64encode(blob).decode()
        return out


def snapshot_of(columns: Mapping[str, Any]) -> dict[str, Any]:
    """A resource's metadata columns in admin-API form (camelCase), as kept in the version history:
    the one rule for a stored row and for an import's rows before they are stored."""
    data = {
        "uri": columns["uri"],
        "name": columns["name"],
        "title": columns["title"],
        "description": columns["description"],
        "mimeType": columns["mime_type"],
        "size": columns["size"],
        "icons": columns["icons"],
        "annotations": columns["annotations"],
        "tags": list(columns["tags"]),
        "consentMessage": columns["consent_message"],
        "ttlMs": columns["ttl_ms"],
        "_meta": columns["meta"],
    }
    return {k: v for k, v in data.items() if v is not None}


def content_digest(
    snapshot: Mapping[str, Any], text_sha256: str | None, blob_sha256: str | None
) -> str | None:
    """The audit digest of a resource from its snapshot and its content's sha256 (text or blob)."""
    return digest({"meta": snapshot, "text": text_sha256, "blob": blob_sha256})


@functools.lru_cache(maxsize=4096)
def _iso(value: datetime) -> str:
    # Cached: the resources one statement wrote (an import, a bulk upsert) share its timestamp,
    # and a page of them would format it a hundred times.
    return value.isoformat().replace("+00:00", "Z")


def record_from_row(row: Any) -> ResourceRecord:
    return from_row(ResourceRecord, row)
