"""The catalogue's JSON shapes: camelCase, the same Resource, Annotations and Icon as MCP.

One set of models serves the admin API (bodies and responses), ``catalog import``/``export`` (JSONL
lines are admin-API resource objects) and the conversion to MCP results, so a field is validated
the same way wherever it enters.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from catalog.core.errors import FieldError, InvalidInput
from catalog.core.meta import meta_problem
from catalog.core.uris import InvalidUri, normalize_uri, validate_uri_prefix

# RFC 6838 type/subtype with optional parameters; around ";" only spaces and tabs (RFC 9110's OWS):
# a line break would let a stored type split the Content-Type header it is served in.
_TOKEN = r"[A-Za-z0-9!#$&^_.+-]{1,127}"
MIME_TYPE_PATTERN = re.compile(rf"^{_TOKEN}/{_TOKEN}([ \t]*;[ \t]*{_TOKEN}=(\"[^\"\\\r\n]*\"|{_TOKEN}))*$")
_SIZES_PATTERN = re.compile(r"^(any|[1-9][0-9]{0,4}x[1-9][0-9]{0,4})$")
DIRECTORY_MIME_TYPE = "inode/directory"
MAX_TAGS = 64


def _check_uri(value: str) -> str:
    try:
        return normalize_uri(value)
    except InvalidUri as exc:
        raise ValueError(exc.reason) from None


def _check_prefix(value: str) -> str:
    try:
        return validate_uri_prefix(value)
    except InvalidUri as exc:
        raise ValueError(exc.reason) from None


def _check_mime(value: str) -> str:
    if not MIME_TYPE_PATTERN.fullmatch(value):
        raise ValueError("not a media type (type/subtype, e.g. text/plain)")
    return value


def _check_icon_src(value: str) -> str:
    lowered = value[:8].lower()
    if lowered.startswith("https://"):
        _check_uri(value)
        return value
    if lowered.startswith("data:"):
        if not re.fullmatch(
            r"data:[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(;[^,]*)?,[^\s]*", value, re.DOTALL
        ):
            raise ValueError("a data: URI must look like data:image/png;base64,...")
        return value
    raise ValueError("an icon src must be an https URL or a data: URI")


# -- free text -------------------------------------------------------------------------------------
# One rule for every text a client gives (names, titles, descriptions, consent messages and
# purposes, token and tenant names, tags, template bodies): a size limit, and no NUL character or
# unpaired surrogate, which PostgreSQL cannot store (an insert would fail mid-transaction: a 500).
# Checked before pydantic's own string validation, so the reason is named plainly.

MAX_JSON_DEPTH = 32
MAX_SHORT_TEXT = 1024
MAX_LONG_TEXT = 65_536
MAX_TEMPLATE_BODY = 1_048_576
MAX_TAG_LENGTH = 128
MAX_CONSENT_PURPOSE_LENGTH = 1024


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as PostgreSQL text, or None."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an unpaired surrogate (not valid Unicode)"
    return None


def _storable_text(value: Any) -> Any:
    if isinstance(value, str):
        reason = text_problem(value)
        if reason is not None:
            raise ValueError(reason)
    return value


# Every free-text type carries this check (with its own StringConstraints for the size).
STORABLE = BeforeValidator(_storable_text)

ShortText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_SHORT_TEXT), STORABLE]
LongText = Annotated[str, StringConstraints(max_length=MAX_LONG_TEXT), STORABLE]
TemplateBody = Annotated[str, StringConstraints(max_length=MAX_TEMPLATE_BODY), STORABLE]
Tag = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_TAG_LENGTH, pattern=r"^[^\x00-\x1f\x7f]+$"), STORABLE
]
ConsentPurpose = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_CONSENT_PURPOSE_LENGTH), STORABLE
]
Scope = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")]
Uri = Annotated[str, StringConstraints(min_length=1, max_length=8192), AfterValidator(_check_uri)]
UriPrefix = Annotated[str, StringConstraints(min_length=1, max_length=8192), AfterValidator(_check_prefix)]
MimeType = Annotated[str, StringConstraints(max_length=255), AfterValidator(_check_mime)]


def _utc_representable(value: datetime | None) -> datetime | None:
    """A time must name its zone and exist in UTC within years 1..9999: PostgreSQL's driver sends
    times as UTC, and ``9999-12-31T23:59:59-01:00`` is year 10000 there (a 500 before)."""
    if value is None:
        return value
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("needs a time zone (e.g. 2030-01-01T00:00:00Z)")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is out of range (years 1 to 9999 in UTC)") from None
    return value


AwareDatetime = Annotated[datetime, AfterValidator(_utc_representable)]


def _escape_pointer(part: object) -> str:
    # An unpaired surrogate in a key is shown backslash-escaped: error messages must be UTF-8.
    text = str(part).encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("~", "~0").replace("/", "~1")


def storable_json_problem(value: object) -> tuple[str, str] | None:
    """Where ``value`` holds something PostgreSQL cannot store as text or JSONB, and why.

    JSON lets a client send NUL characters and unpaired surrogates (``\\u0000``, ``\\ud800``), and
    Python's parser accepts ``NaN`` and ``Infinity``; none of them can be stored. Walked iteratively
    (a deeply nested body cannot exhaust the stack) and bounded in depth.
    Returns (JSON pointer relative to ``value``, reason) or None.
    """
    stack: list[tuple[object, str, int]] = [(value, "", 0)]
    while stack:
        item, pointer, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            return pointer, f"nested deeper than {MAX_JSON_DEPTH} levels"
        if isinstance(item, str):
            reason = text_problem(item)
            if reason is not None:
                return pointer, reason
        elif isinstance(item, float):
            if not math.isfinite(item):
                return pointer, "must be a finite number"
        elif isinstance(item, dict):
            for key, child in item.items():
                child_pointer = f"{pointer}/{_escape_pointer(key)}"
                reason = text_problem(key) if isinstance(key, str) else None
                if reason is not None:
                    return child_pointer, f"the key {reason}"
                stack.append((child, child_pointer, depth + 1))
        elif isinstance(item, list | tuple):
            for index, child in enumerate(item):
                stack.append((child, f"{pointer}/{index}", depth + 1))
    return None


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", str_strip_whitespace=False
    )

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            problem = storable_json_problem(data)
            if problem is not None:
                pointer, reason = problem
                # ``pointer`` (relative to this model) lets the admin API point at the field.
                raise PydanticCustomError(
                    "unstorable_value", "{reason}", {"reason": reason, "pointer": pointer}
                )
        return data

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], detail: str, **values: Any) -> M:
    """``model`` built from ``values``, or :class:`InvalidInput` with a JSON Pointer per error: for
    core functions that callers reach without a validated body (the CLI, imports, other code)."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        errors = []
        for error in exc.errors():
            pointer = "".join(f"/{_escape_pointer(part)}" for part in error["loc"])
            if isinstance((error.get("ctx") or {}).get("pointer"), str):
                pointer += error["ctx"]["pointer"]
            errors.append(FieldError(pointer, str(error["msg"]).removeprefix("Value error, ")))
        raise InvalidInput(detail, errors=errors) from None


def column_values(body: BaseModel, fields: Sequence[str]) -> dict[str, Any]:
    """The named fields of a resource or template body as their database columns hold them."""
    values: dict[str, Any] = {}
    for name in fields:
        value = getattr(body, name)
        if name == "icons" and value is not None:
            value = [icon.dump() for icon in value]
        elif name == "annotations" and value is not None:
            value = value.dump() or None
        elif name == "tags":
            value = sorted(set(value or []))
        values[name] = value
    return values


class Icon(Model):
    src: Annotated[str, StringConstraints(min_length=1, max_length=65_536), AfterValidator(_check_icon_src)]
    mime_type: MimeType | None = None
    sizes: list[Annotated[str, StringConstraints(pattern=_SIZES_PATTERN.pattern)]] | None = Field(
        default=None, max_length=32
    )
    theme: Literal["light", "dark"] | None = None


class Annotations(Model):
    audience: list[Literal["user", "assistant"]] | None = Field(default=None, max_length=2)
    priority: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    last_modified: AwareDatetime | None = None


def _check_meta(value: dict[str, Any]) -> dict[str, Any]:
    problem = meta_problem(value)
    if problem is not None:
        key, reason = problem
        # ``pointer`` (relative to the _meta field) lets the admin API point at the key at fault.
        pointer = f"/{_escape_pointer(key)}" if key else ""
        raise PydanticCustomError("invalid_meta", "{reason}", {"reason": reason, "pointer": pointer})
    return value


# Curator-supplied ``_meta``: key names, reserved prefixes and W3C values (catalog.core.meta).
Meta = Annotated[dict[str, Any], AfterValidator(_check_meta)]


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


class AuditEntryOut(Model):
    id: int
    at: datetime
    principal: str = Field(description="who: platform-admin, token:<id>, system:<label>, ...")
    action: str = Field(description="what: resource.create, grant.delete, token.revoke, ...")
    target_kind: str
    target_id: int | None = None
    uri: str | None = None
    before_digest: str | None = Field(default=None, description="sha256 of the target before the change")
    after_digest: str | None = Field(default=None, description="sha256 of the target after the change")
    detail: dict[str, Any] | None = None


class PlatformAuditEntryOut(AuditEntryOut):
    """An entry of the platform log: tenant creations and deletions, and deleted tenants' trails."""

    tenant_id: int = Field(description="the tenant the entry is about (it may no longer exist)")
    tenant_slug: str = Field(description="the tenant's slug when the entry was made (slugs can be reused)")


class ChangeOut(Model):
    seq: int = Field(description="this tenant's own change number (one sequence per tenant)")
    kind: Literal["resource", "template", "grant"]
    uri: str | None = None
    op: Literal["created", "updated", "deleted"]
    at: datetime


class ChangesPage(Model):
    items: list[ChangeOut]
    next_cursor: str | None = Field(
        default=None, description="present when more changes are waiting: pass it as ?after= right away"
    )
    last_seq: int = Field(description="the seq to pass as ?after= on the next poll")


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    model_config = ConfigDict(populate_by_name=True)

    items: list[T]
    next_cursor: str | None = Field(default=None, alias="nextCursor")

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class TemplateIn(Model):
    uri_template: Annotated[str, StringConstraints(min_length=1, max_length=8192)]
    name: ShortText
    title: ShortText | None = None
    description: LongText | None = None
    mime_type: MimeType | None = None
    icons: list[Icon] | None = Field(default=None, max_length=16)
    annotations: Annotations | None = None
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    meta: Meta | None = Field(default=None, alias="_meta")
    text: TemplateBody | None = Field(
        default=None, description="a body rendered with the matched variables ({var} placeholders)"
    )


class TemplatePatch(Model):
    uri_template: Annotated[str, StringConstraints(min_length=1, max_length=8192)] | None = None
    name: ShortText | None = None
    title: ShortText | None = None
    description: LongText | None = None
    mime_type: MimeType | None = None
    icons: list[Icon] | None = Field(default=None, max_length=16)
    annotations: Annotations | None = None
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    meta: Meta | None = Field(default=None, alias="_meta")
    text: TemplateBody | None = None

    @model_validator(mode="after")
    def _required(self) -> TemplatePatch:
        for required in ("uri_template", "name"):
            if required in self.model_fields_set and getattr(self, required) is None:
                raise ValueError(f"{to_camel(required)} cannot be null")
        return self


class TemplateOut(Model):
    id: int
    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    icons: list[Icon] | None = None
    annotations: Annotations | None = None
    tags: list[str] = Field(default_factory=list)
    meta: dict[str, Any] | None = Field(default=None, alias="_meta")
    text: str | None = None
    version: int
    created_at: datetime
    updated_at: datetime


URI_PREFIX_DESCRIPTION = (
    "every URI that starts with this string, compared character by character: a plain string "
    "prefix, not a path. file:///a covers file:///a/x and also file:///ab; end the prefix with '/' "
    "(or another delimiter such as '#', '?' or ':') to grant exactly a subtree. A prefix that does "
    "not end at a delimiter is accepted, with a warning in the response."
)
# A prefix ending in one of these stops at a boundary of the URI's structure (RFC 3986 delimiters).
PREFIX_BOUNDARIES = frozenset("/#?:&=;")


class GrantIn(Model):
    """Exactly one selector: ``uri`` (one resource), ``uriPrefix`` (every URI starting with that
    string) or ``tag`` (everything carrying the tag)."""

    scope: Scope
    uri: Uri | None = Field(default=None, description="exactly this URI (canonical form)")
    uri_prefix: UriPrefix | None = Field(default=None, description=URI_PREFIX_DESCRIPTION)
    tag: Tag | None = Field(default=None, description="every resource and template carrying this tag")

    def warnings(self) -> list[str]:
        """What the curator may not have meant (the grant is valid either way)."""
        prefix = self.uri_prefix
        if prefix is None or prefix[-1] in PREFIX_BOUNDARIES:
            return []
        return [
            f"uriPrefix {prefix!r} is a plain string prefix: it also covers URIs such as "
            f"{prefix + 'x'!r}, not only those under {prefix + '/'!r}; end it with '/' to grant a subtree"
        ]

    @model_validator(mode="after")
    def _one_selector(self) -> GrantIn:
        given = [name for name in ("uri", "uri_prefix", "tag") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uri, uriPrefix, tag")
        return self


class GrantOut(Model):
    id: int
    scope: str
    uri: str | None = None
    uri_prefix: str | None = None
    tag: str | None = None
    created_at: datetime


class GrantCreated(GrantOut):
    warnings: list[str] | None = Field(
        default=None, description="present when the grant may cover more than meant (see uriPrefix)"
    )


class TokenIn(Model):
    scopes: list[Scope] = Field(default_factory=list, max_length=64)
    admin: bool = False
    expires_at: AwareDatetime | None = None
    name: ShortText | None = None


class TokenOut(Model):
    id: int
    name: str | None = None
    scopes: list[str]
    # From a record, the column's name (is_admin); on the wire, ``admin``.
    admin: bool = Field(validation_alias=AliasChoices("admin", "is_admin"))
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    created_at: datetime


class TokenCreated(TokenOut):
    token: str = Field(description="the bearer token; shown in this response only")


class TenantIn(Model):
    slug: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    name: ShortText | None = None


class TenantOut(Model):
    slug: str
    name: str
    created_at: datetime


# -- the console's views ----------------------------------------------------------------------------


class WhoAmIOut(Model):
    """Who the bearer is, as the admin API sees it."""

    kind: Literal["platform", "tenant"] = Field(
        description="platform: the platform admin (every tenant); tenant: an admin token of one tenant"
    )
    principal: str = Field(description="how the audit log names this caller")
    tenant: str | None = Field(default=None, description="the tenant's slug (tenant admins only)")
    admin: bool
    scopes: list[str] = Field(default_factory=list)
    expires_at: datetime | None = None


class TreeEntryOut(Model):
    """One entry of a folder of the URI tree: a sub-folder (``kind: folder``, ``prefix`` to open it)
    or a resource (``kind: resource``, the resource as the listing shows it)."""

    kind: Literal["folder", "resource"]
    name: str = Field(description="the entry's name in its folder (a folder's ends with '/')")
    prefix: str | None = None
    resource: ResourceOut | None = None


class ResourceVersionDetailOut(ResourceVersionOut):
    """One version with its text inlined (a blob stays named by ``blobSha256``)."""

    text: str | None = None


class TemplatePreviewIn(Model):
    uri_template: Annotated[str, StringConstraints(min_length=1, max_length=8192)]
    mime_type: MimeType | None = None
    text: TemplateBody | None = None
    arguments: dict[
        Annotated[str, StringConstraints(max_length=256)], Annotated[str, StringConstraints(max_length=8192)]
    ] = Field(default_factory=dict, max_length=64, description="sample values of the template's variables")


class TemplatePreviewOut(Model):
    uri: str = Field(description="the URI the template expands to with these arguments")
    variables: list[str] = Field(description="the template's variable names, in order")
    text: str | None = Field(default=None, description="the body rendered as resources/read would")


class GrantPreviewItem(Model):
    id: int
    uri: str
    name: str


class GrantPreviewOut(Model):
    scope: str
    count: int = Field(description="how many resources a token with only this scope sees")
    items: list[GrantPreviewItem] = Field(description="the first of them, in URI order (at most 100)")
