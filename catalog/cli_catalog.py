"""Catalogue commands of the CLI: tenant, token, import, export."""

from __future__ import annotations

import argparse


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    return None
