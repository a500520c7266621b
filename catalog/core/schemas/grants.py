"""Grants: one selector per grant, the warning a plain prefix earns, and the console's preview."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, model_validator

from catalog.core.schemas.base import Model, Scope, Tag, Uri, UriPrefix

URI_PREFIX_DESCRIPTION = (
    "every URI that starts with this string, compared character by character: a plain string "
    "prefix, not a path. file:///a covers file:///a/x and also file:///ab; end the prefix with '/' "
    "(or another delimiter such as '#', '?' or ':') to grant exactly a subtree. A prefix ending in "
    "'/' also covers the one URI that is the prefix without its '/' (file:///a/ covers the directory "
    "resource file:///a, not file:///ab). A prefix that does not end at a delimiter is accepted, "
    "with a warning in the response."
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


class GrantPreviewItem(Model):
    id: int
    uri: str
    name: str


class GrantPreviewOut(Model):
    scope: str
    count: int = Field(description="how many resources a token with only this scope sees")
    items: list[GrantPreviewItem] = Field(description="the first of them, in URI order (at most 100)")
