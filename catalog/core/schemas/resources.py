"""Resources as the admin API and the transfers take and give them: bodies, versions, blobs, the tree."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator
from pydantic_core import PydanticCustomError

from catalog.core.schemas.audit import AuthorOut
from catalog.core.schemas.base import (
    DIRECTORY_MIME_TYPE,
    MAX_TAGS,
    Annotations,
    Icon,
    LongText,
    Meta,
    MimeType,
    Model,
    Scope,
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


class SnippetPartOut(Model):
    text: str
    match: bool = Field(description="whether this part is what matched the search")


class SnippetOut(Model):
    """What of a resource matched a search (only on a search's answers): some words of one field,
    in parts, the matched ones marked. Plain text: show it as text, never as markup."""

    field: Literal["name", "title", "description", "uri", "text"]
    parts: list[SnippetPartOut]


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
    snippet: SnippetOut | None = Field(
        default=None, description="only when searching (`q`): what of the resource matched"
    )


class ResourceVersionOut(Model):
    version: int
    uri: str
    changed_at: datetime
    changed_by: str = Field(description="the author's label as recorded (`token:1`, `platform-admin`, ...)")
    author: AuthorOut | None = Field(default=None, description="the author, named (see changedBy)")
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


# -- batches --------------------------------------------------------------------------------------

MAX_BATCH = 500  # ids of one batch: one transaction holds their row locks until it ends
BatchId = Annotated[int, Field(ge=1, le=2**63 - 1)]
# What each action needs besides the ids; the others must be left out.
_BATCH_ARGUMENTS: dict[str, tuple[str, ...]] = {"delete": (), "tag": ("tag",), "grant": ("scope",)}


class ResourceBatchIn(Model):
    """One action over several resources, all or nothing: ``delete`` them, ``tag`` them (add
    ``tag`` to each), or ``grant`` each one's URI to ``scope`` (a ``{scope, uri}`` grant each)."""

    action: Literal["delete", "tag", "grant"]
    ids: list[BatchId] = Field(
        min_length=1, max_length=MAX_BATCH, description=f"the resources' ids (at most {MAX_BATCH})"
    )
    tag: Tag | None = Field(default=None, description="for `tag`: the tag to add")
    scope: Scope | None = Field(default=None, description="for `grant`: the scope to give sight to")

    @model_validator(mode="after")
    def _arguments(self) -> ResourceBatchIn:
        needed = _BATCH_ARGUMENTS[self.action]
        for name in ("tag", "scope"):
            given = getattr(self, name) is not None
            if given != (name in needed):
                reason = f"required by {self.action}" if not given else f"not taken by {self.action}"
                raise PydanticCustomError(
                    "batch_argument", "{reason}", {"reason": reason, "pointer": f"/{name}"}
                )
        return self


class ResourceBatchOut(Model):
    action: str
    ids: list[int] = Field(description="the resources acted on, each once, in the order given")
    changed: int = Field(
        description="how many changed: deleted, newly tagged, or given a new grant (an existing one is kept)"
    )
