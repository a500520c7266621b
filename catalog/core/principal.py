"""Who is asking: every request on every surface is made by exactly one principal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

PrincipalKind = Literal["platform", "token", "anonymous", "jwt", "system"]
# Who wrote something, read back from the label it was recorded under (``unknown``: a label this
# version does not spell, kept as it is).
AuthorKind = Literal["platform", "token", "anonymous", "jwt", "system", "unknown"]


@dataclass(frozen=True)
class Principal:
    kind: PrincipalKind
    tenant_id: int | None = None
    tenant_slug: str | None = None
    scopes: frozenset[str] = field(default_factory=frozenset[str])
    # Admin of ``tenant_id`` (a tenant token with the admin flag). The platform admin is admin of all.
    is_admin: bool = False
    token_id: int | None = None
    subject: str | None = None
    # When the credential stops being valid (a token's expiresAt, a JWT's exp plus leeway): streams
    # it opened end then. Not part of who it is.
    expires_at: datetime | None = field(default=None, compare=False)

    @classmethod
    def platform_admin(cls) -> Principal:
        return cls(kind="platform", is_admin=True)

    @classmethod
    def system(cls, label: str) -> Principal:
        """Work the product does on its own behalf (demo seeding, imports from the CLI)."""
        return cls(kind="system", is_admin=True, subject=label)

    @classmethod
    def anonymous(cls, tenant_id: int, tenant_slug: str) -> Principal:
        return cls(
            kind="anonymous", tenant_id=tenant_id, tenant_slug=tenant_slug, scopes=frozenset({"public"})
        )

    @property
    def is_platform_admin(self) -> bool:
        return self.kind in ("platform", "system")

    def administers(self, tenant_id: int) -> bool:
        return self.is_platform_admin or (self.is_admin and self.tenant_id == tenant_id)

    def belongs_to(self, tenant_id: int) -> bool:
        return self.is_platform_admin or self.tenant_id == tenant_id

    @property
    def identity(self) -> str:
        """Who this is, as one stable string: what a 2025 session, a consent round trip's request
        state and a listing cursor are bound to (another credential cannot use them)."""
        return "|".join(
            [
                self.kind,
                str(self.tenant_id),
                str(self.token_id),
                self.subject or "",
                "admin" if self.is_admin else "",
                ",".join(sorted(self.scopes)),
            ]
        )

    @property
    def label(self) -> str:
        """How the audit log names this principal."""
        if self.kind == "platform":
            return "platform-admin"
        if self.kind == "system":
            return f"system:{self.subject or 'catalog'}"
        if self.kind == "anonymous":
            return "anonymous"
        if self.kind == "jwt":
            return f"jwt:{self.subject}"
        return f"token:{self.token_id}"


@dataclass(frozen=True)
class Author:
    """Who a recorded label (:attr:`Principal.label`, e.g. a version's ``changed_by``) names, and
    how to call them: a token by its name, the platform admin, a system job by its label."""

    kind: AuthorKind
    name: str
    token_id: int | None = None
    subject: str | None = None
    # A token revoked since (its row and name are kept); None when not a token.
    revoked: bool | None = None


@dataclass(frozen=True)
class TokenName:
    """What naming a token needs of its row."""

    name: str | None
    revoked: bool


def token_id_of_label(label: str) -> int | None:
    """The token id a ``token:N`` label names, else None."""
    kind, _, rest = label.partition(":")
    if kind == "token" and rest.isascii() and rest.isdigit() and len(rest) <= 19:
        return int(rest)
    return None


def author_of_label(label: str, tokens: Mapping[int, TokenName]) -> Author:
    """The inverse of :attr:`Principal.label`, with a display name: a token by its name (``token
    #N`` when it has none, ``deleted token #N`` when its row is gone: ``tokens`` holds the rows
    that exist), the platform admin, a system job (``import``) or an OAuth subject as recorded."""
    token_id = token_id_of_label(label)
    if token_id is not None:
        token = tokens.get(token_id)
        if token is None:
            return Author("token", f"deleted token #{token_id}", token_id=token_id)
        return Author("token", token.name or f"token #{token_id}", token_id=token_id, revoked=token.revoked)
    if label == "platform-admin":
        return Author("platform", "platform admin")
    if label == "anonymous":
        return Author("anonymous", "anonymous")
    kind, colon, rest = label.partition(":")
    if colon and kind == "system":
        return Author("system", rest or "catalog", subject=rest or None)
    if colon and kind == "jwt" and rest:
        return Author("jwt", rest, subject=rest)
    return Author("unknown", label)
