"""Resources as the admin API and the transfers take and give them: bodies, versions, blobs, the tree."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from catalog.core.schemas.base import (
    DIRECTORY_MIME_TYPE,
    MAX_TAGS,
    Annotations,
    Icon,
    LongText,
    Meta,
    MimeType,
    Model,
    ShortText,
    Tag,
    Uri,
)

MAX_TTL_MS = 2**31 - 1  # as CATALOG_READ_TTL_MS: an int32 in every client
# A resource's own cache hint: what its reads answer as ``ttlMs`` (0: not to be kept); unset or
# null, the server's ``CATALOG_READ_TTL_MS``. A JSON integer, never a string or a fraction.
TtlMs = Annotated[
    int,
    Field(
        strict=True,
        ge=0,
        le=MAX_TTL_MS,
        description="milliseconds a client may keep a read of this resource (0: not at all);"
        " null: the server's default",
    ),
]


class ResourceFields(Model):
    """What a curator says about a resource (everything but its content)."""

    uri: Uri
    name: ShortText
    title: ShortText | None = None
    description: LongText | None = None
    mime_type: MimeType | None = None
    icons: list[Icon] | None = Field(default=None, max_length=16)
    annotations: Annotations | None = None
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    consent_message: LongText | None = None
    ttl_ms: TtlMs | None = None
    meta: Meta | None = Field(default=None, alias="_meta")


class ResourceIn(ResourceFields):
    """A resource with at most one kind of content: ``text``, ``blob`` (base64) or ``blobSha256``."""

    text: str | None = None
    blob: str | None = None
    blob_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None

    @field_validator("blob")
    @classmethod
    def _base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("blob must be standard base64") from None
        return value

    @field_validator("text")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("text cannot contain NUL characters; store it as a blob")
        return value

    @model_validator(mode="after")
    def _one_content(self) -> ResourceIn:
        given = [name for name in ("text", "blob", "blob_sha256") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of text, blob, blobSha256 (got {', '.join(given)})")
        if self.mime_type == DIRECTORY_MIME_TYPE and given:
            raise ValueError("an inode/directory resource has no content")
        return self

    def blob_bytes(self) -> bytes | None:
        return base64.b64decode(self.blob) if self.blob is not None else None


class ResourcePatch(Model):
    """A partial update: only the fields present change; ``null`` clears an optional field."""

    uri: Uri | None = None
    name: ShortText | None = None
    title: ShortText | None = None
    description: LongText | None = None
    mime_type: MimeType | None = None
    icons: list[Icon] | None = Field(default=None, max_length=16)
    annotations: Annotations | None = None
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    consent_message: LongText | None = None
    ttl_ms: TtlMs | None = None
    meta: Meta | None = Field(default=None, alias="_meta")
    text: str | None = None
    blob: str | None = None
    blob_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None

    _check_blob = field_validator("blob")(ResourceIn._base64.__func__)  # type: ignore[attr-defined]
    _check_text = field_validator("text")(ResourceIn._text.__func__)  # type: ignore[attr-defined]

    @model_validator(mode="after")
    def _rules(self) -> ResourcePatch:
        given = [name for name in ("text", "blob", "blob_sha256") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of text, blob, blobSha256 (got {', '.join(given)})")
        for required in ("uri", "name"):
            if required in self.model_fields_set and getattr(self, required) is None:
                raise ValueError(f"{required} cannot be null")
        return self


class ResourceOut(Model):
    id: int
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    icons: list[Icon] | None = None
    annotations: Annotations | None = None
    tags: list[str] = Field(default_factory=list)
    consent_message: str | None = None
    ttl_ms: int | None = None
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    version: int
    created_at: datetime
    updated_at: datetime
    blob_sha256: str | None = None
    text: str | None = None
    blob: str | None = None


class ResourceVersionOut(Model):
    version: int
    uri: str
    changed_at: datetime
    changed_by: str
    resource: dict[str, Any]
    blob_sha256: str | None = None
    text_sha256: str | None = None


class ResourcePut(ResourceIn):
    """The body of ``PUT ?uri=``: a resource whose ``uri`` may be left out (the query names it)."""

    uri: Uri | None = None  # type: ignore[assignment]


class BlobOut(Model):
    sha256: str
    size: int
    mime_type: str | None = None


class TreeEntryOut(Model):
    """One entry of a folder of the URI tree: a sub-folder (``kind: folder``, ``prefix`` to open it)
    or a resource (``kind: resource``, the resource as the listing shows it). A folder whose
    directory resource (``inode/directory`` at the folder's URI without its '/') is shown carries
    it as ``resource``; that resource is not listed again."""

    kind: Literal["folder", "resource"]
    name: str = Field(description="the entry's name in its folder (a folder's ends with '/')")
    prefix: str | None = None
    resource: ResourceOut | None = Field(
        default=None,
        description="a resource entry's resource; on a folder, its directory resource when there is one",
    )


class ResourceVersionDetailOut(ResourceVersionOut):
    """One version with its text inlined (a blob stays named by ``blobSha256``)."""

    text: str | None = None
