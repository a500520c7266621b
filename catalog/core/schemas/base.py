"""What every shape is built of: the base model, the storable-text and JSON rules, the field types
(URIs, media types, free text, times), ``Icon``, ``Annotations``, ``_meta``, and ``Page``."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
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

# A listing's filters as callers write them (the admin API's ``?q=`` and ``?mimeType=``, the MCP
# search tool's arguments): one rule for both.
MAX_SEARCH_LENGTH = 256
SEARCH_PATTERN = r"^[^\x00-\x1f\x7f]+$"
MEDIA_TYPE_FILTER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/(\*|[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)$"
SearchText = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_SEARCH_LENGTH, pattern=SEARCH_PATTERN)
]
MediaTypeFilter = Annotated[str, StringConstraints(max_length=255, pattern=MEDIA_TYPE_FILTER_PATTERN)]


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
            context = error.get("ctx") or {}
            if isinstance(context.get("pointer"), str):
                pointer += context["pointer"]
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


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    # ``nextCursor`` on the wire, by the alias generator as in ``Model`` (an explicit ``alias`` would
    # make it the only constructor keyword a type checker accepts).
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    items: list[T]
    next_cursor: str | None = None

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
