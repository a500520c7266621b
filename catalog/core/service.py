"""The catalogue's shared context: engine, settings, signing key; what every operation is handed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from sqlalchemy.ext.asyncio import AsyncEngine

from catalog.settings import Settings


@dataclass
class Catalog:
    engine: AsyncEngine
    settings: Settings
    # name -> probe returning "ok" or what is wrong; /readyz reports each (the event listener adds one).
    readiness_probes: dict[str, Callable[[], str]] = field(default_factory=dict)

    @cached_property
    def signing_key(self) -> bytes:
        return self.settings.signing_key()

    @cached_property
    def platform_admin_token(self) -> str:
        return self.settings.platform_admin_token()[0]
