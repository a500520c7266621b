"""``catalog backup`` and ``catalog restore``."""

from __future__ import annotations

from catalog.cli.common import Commands


def add_commands(commands: Commands) -> None:
    pass
