"""The catalogue's shared context: engine, settings, signing key; what every operation is handed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine

from catalog.settings import Settings

if TYPE_CHECKING:
    from catalog.auth.jwt import JwtVerifier
    from catalog.events.credentials import CredentialWatch
    from catalog.events.hub import EventHub
    from catalog.events.listener import ChangeListener


@dataclass
class Catalog:
    engine: AsyncEngine
    settings: Settings
    # name -> probe returning "ok" or what is wrong; /readyz reports each (the event listener adds one).
    readiness_probes: dict[str, Callable[[], str]] = field(default_factory=dict)
    # Live changes of this process (catalog.events.events_lifespan sets it; None until then).
    event_hub: EventHub | None = None
    # The process's LISTEN connection (set with the hub): other channels (2025 sessions) ride on it.
    event_listener: ChangeListener | None = None
    # Ends streams whose credential is revoked or expires (set with the hub).
    credential_watch: CredentialWatch | None = None

    @cached_property
    def signing_key(self) -> bytes:
        return self.settings.signing_key()

    @cached_property
    def platform_admin_token(self) -> str:
        return self.settings.platform_admin_token()[0]

    @cached_property
    def jwt_verifier(self) -> JwtVerifier | None:
        if not self.settings.oauth_enabled:
            return None
        from catalog.auth.jwt import JwksSource, JwtVerifier

        assert self.settings.oauth_issuer and self.settings.oauth_audience and self.settings.oauth_jwks
        return JwtVerifier(
            issuer=self.settings.oauth_issuer,
            audience=self.settings.oauth_audience,
            jwks=JwksSource(self.settings.oauth_jwks),
            tenant_claim=self.settings.oauth_tenant_claim,
            admin_scope=self.settings.oauth_admin_scope,
            leeway_seconds=self.settings.oauth_leeway_seconds,
        )
