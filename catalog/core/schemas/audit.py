"""The audit log's entries and the change feed's pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from catalog.core.schemas.base import Model


class AuthorOut(Model):
    """Who a recorded label names, for a reader (the label as recorded stays beside it: a
    version's ``changedBy``, an audit entry's ``principal``)."""

    kind: Literal["platform", "token", "anonymous", "jwt", "system", "unknown"] = Field(
        description="platform: the platform admin; token: a token of the tenant; jwt: an OAuth "
        "subject; system: work the product did (import, restore, cli, demo); unknown: another label"
    )
    name: str = Field(
        description="a display name: the token's name (`token #N` if it has none, `deleted token #N` "
        "if it is gone), `platform admin`, the system job (`import`), or the OAuth subject as recorded"
    )
    token_id: int | None = None
    subject: str | None = None
    revoked: bool | None = Field(default=None, description="a token revoked since (present for tokens)")


class AuditEntryOut(Model):
    id: int
    at: datetime
    principal: str = Field(description="who, as recorded: platform-admin, token:<id>, system:<label>, ...")
    author: AuthorOut | None = Field(default=None, description="who, named (see principal)")
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
