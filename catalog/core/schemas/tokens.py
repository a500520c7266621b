"""Tokens, and who a bearer is as the admin API sees it (the console's ``whoami``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AliasChoices, Field

from catalog.core.schemas.base import AwareDatetime, Model, Scope, ShortText


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
