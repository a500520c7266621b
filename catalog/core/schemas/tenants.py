"""Tenants."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import StringConstraints

from catalog.core.schemas.base import Model, ShortText


class TenantIn(Model):
    slug: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    name: ShortText | None = None


class TenantOut(Model):
    slug: str
    name: str
    created_at: datetime
