"""Who is asking: every request on every surface is made by exactly one principal."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

PrincipalKind = Literal["platform", "token", "anonymous", "jwt", "system"]


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
