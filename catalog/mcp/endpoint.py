"""The MCP endpoint at /mcp (installed into the one app)."""

from __future__ import annotations

from fastapi import FastAPI


def install(app: FastAPI) -> None:
    return None
