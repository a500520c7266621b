"""The backup format (1): its constants, its counts, how a line is encoded, and the models every
line is checked by on the way back (the admin API's own, for what a line holds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import Field, ValidationError, model_validator

from catalog.core.errors import InvalidInput
from catalog.core.schemas.base import AwareDatetime, MimeType, Model, ShortText, Uri
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceFields, ResourceIn
from catalog.core.schemas.templates import TemplateIn
from catalog.core.schemas.tokens import TokenIn

FORMAT = 1
CHUNK = 256 * 1024  # blob bytes per chunk line (before base64)
SECTIONS = ("blob", "template", "grant", "token", "resource", "version")


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class BackupCounts:
    blobs: int = 0
    blob_bytes: int = 0
    templates: int = 0
    grants: int = 0
    tokens: int = 0
    resources: int = 0
    versions: int = 0

    def as_json(self) -> dict[str, int]:
        return {
            "blobs": self.blobs,
            "blobBytes": self.blob_bytes,
            "templates": self.templates,
            "grants": self.grants,
            "tokens": self.tokens,
            "resources": self.resources,
            "versions": self.versions,
        }

    def __str__(self) -> str:
        return (
            f"{self.resources} resources ({self.versions} versions), {self.blobs} blobs"
            f" ({self.blob_bytes} bytes), {self.templates} templates, {self.grants} grants,"
            f" {self.tokens} tokens"
        )


def encode_line(line: dict[str, Any]) -> bytes:
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


class BadBackup(InvalidInput):
    """The file is not a catalog backup this version can read, or it is damaged."""


class Damaged(BadBackup):
    """The bytes cannot be read back (a corrupt or truncated gzip)."""


# Numbers as the columns hold them (integer versions, bigint ids): a larger one is refused by the
# line's model, not by PostgreSQL in the middle of a restore.
_Version = Annotated[int, Field(ge=1, le=2**31 - 1)]
_RowId = Annotated[int, Field(ge=1, le=2**63 - 1)]
_Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class HeaderTenant(Model):
    slug: Annotated[str, Field(max_length=63)] | None = None
    name: ShortText | None = None
    created_at: AwareDatetime | None = None


class HeaderLine(Model):
    format: int
    created_at: AwareDatetime | None = None
    schema_revision: Annotated[str, Field(max_length=64)] | None = Field(default=None, alias="schema")
    tenant: HeaderTenant = Field(default_factory=HeaderTenant)


class BlobLine(Model):
    sha256: _Sha256
    size: Annotated[int, Field(ge=0, le=2**63 - 1)]
    mime_type: MimeType | None = None
    created_at: AwareDatetime


class TemplateLine(Model):
    id: _RowId
    version: _Version
    created_at: AwareDatetime
    updated_at: AwareDatetime
    template: TemplateIn


class GrantLine(Model):
    id: _RowId
    created_at: AwareDatetime
    grant: GrantIn


class TokenLine(Model):
    id: _RowId
    created_at: AwareDatetime
    revoked_at: AwareDatetime | None = None
    token: TokenIn  # the admin API's own rules for what a token holds


class ResourceLine(Model):
    id: _RowId
    version: _Version
    created_at: AwareDatetime
    updated_at: AwareDatetime
    content_changed_at: AwareDatetime
    resource: ResourceIn


class VersionLine(Model):
    resource_uri: Uri
    version: _Version
    uri: Uri
    snapshot: dict[str, Any]
    text: str | None = None
    blob_sha256: _Sha256 | None = None
    changed_by: ShortText
    changed_at: AwareDatetime

    @model_validator(mode="after")
    def _snapshot(self) -> VersionLine:
        """A version's metadata by the rules of a resource body (the history is what a write of
        it would have kept), naming the version's own URI; its size, when given, a size."""
        fields = {k: v for k, v in self.snapshot.items() if k != "size"}
        size = self.snapshot.get("size")
        if size is not None and (
            not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 2**63
        ):
            raise ValueError("snapshot/size must be a byte count")
        try:
            described = ResourceFields.model_validate(fields)
        except ValidationError as exc:
            from catalog.core.transfer.items import validation_reason

            raise ValueError(f"snapshot: {validation_reason(exc)}") from None
        if described.uri != self.uri:
            raise ValueError("snapshot/uri differs from the version's uri")
        if self.text is not None and self.blob_sha256 is not None:
            raise ValueError("give at most one of text, blobSha256")
        return self
