"""The catalogue itself: engine, settings, signing key, the live parts of this process; what every
operation is handed."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine

from catalog.db.engine import request_connection
from catalog.settings import Settings

if TYPE_CHECKING:
    from catalog.auth.jwt import JwtVerifier
    from catalog.core.replicas import ReadReplicas
    from catalog.core.visibility import Visibility
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
    # Verifies OAuth access tokens: built by ``catalog.auth.jwt.jwt_verifier`` on first use (auth is
    # the layer above; the core only keeps it, with its cache of signing keys, for the catalogue).
    jwt_verifier: JwtVerifier | None = None
    # The visibility each credential's last fast list page or completion had, by its
    # ``catalog_plain_read`` arguments: its next page or completion is read with that visibility in
    # the statement that authenticates it, and used only if the visibility is still that
    # (``direct.listing.fast_resources_page``, ``direct.completion.fast_completion``).
    page_visibilities: dict[Hashable, Visibility] = field(default_factory=dict)
    # The read replicas MCP reads run on (``catalog.core.replicas``; None: all on ``engine``). A
    # replica's own view of the catalogue has none.
    read_replicas: ReadReplicas | None = None

    @cached_property
    def signing_key(self) -> bytes:
        return self.settings.signing_key()

    @cached_property
    def platform_admin_token(self) -> str:
        return self.settings.platform_admin_token()[0]

    def request_connection(self, *, eager: bool = False) -> AbstractAsyncContextManager[None]:
        """One pooled connection for the whole of a short request (``catalog.db.engine.request_connection``)."""
        return request_connection(self.engine, eager=eager)
