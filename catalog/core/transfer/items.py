"""What the sources of an import yield (items to write, problems to report) and what an import
reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from catalog.core.schemas.resources import ResourceIn


@dataclass(frozen=True)
class Item:
    """A resource to write; ``location`` names where it came from (``file:line`` or a path)."""

    location: str
    body: ResourceIn
    weight: int = 1  # progress units this item stands for
    size: int = 0  # content bytes (to bound a batch's memory)


@dataclass(frozen=True)
class Problem:
    """An input that cannot be imported (``failed``) or is deliberately left out (``skipped``)."""

    location: str
    reason: str
    weight: int = 1
    skipped: bool = False

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)

    @property
    def written(self) -> int:
        return self.created + self.updated + self.unchanged


def validation_reason(exc: ValidationError) -> str:
    """A pydantic error as one line: ``/pointer: message; ...``."""
    parts = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        pointer = "/".join(str(p) for p in error["loc"])
        parts.append(f"/{pointer}: {message}" if pointer else message)
    return "; ".join(parts)
