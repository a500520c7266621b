"""Resource templates: bodies, the stored template, and the console's preview."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from catalog.core.schemas.base import (
    MAX_TAGS,
    Annotations,
    Icon,
    LongText,
    Meta,
    MimeType,
    Model,
    ShortText,
    Tag,
    TemplateBody,
)


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
