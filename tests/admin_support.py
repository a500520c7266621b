"""Helpers for the admin API tests (their fixtures -- ``app``, ``client``, ``anon``, ``tenant``, ``db`` --
are in conftest.py).

The app runs in-process over httpx's ASGITransport with its lifespan started, against this test's
own real PostgreSQL database. App exceptions are re-raised by the transport, so a 500 fails a test.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI

ADMIN_TOKEN = "cat_test-platform-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
API = "/admin/v1"


@contextlib.asynccontextmanager
async def running(application: FastAPI) -> AsyncIterator[FastAPI]:
    """Run the app's lifespan in a task of its own (the MCP session manager's task group must be
    entered and left in the same task, which a fixture's setup and teardown are not)."""
    started, stop = asyncio.Event(), asyncio.Event()

    async def lifespan() -> None:
        async with application.router.lifespan_context(application):
            started.set()
            await stop.wait()

    task = asyncio.create_task(lifespan())
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()  # startup failed: raise its error
    try:
        yield application
    finally:
        stop.set()
        await task


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def mint_token(
    client: httpx.AsyncClient,
    slug: str,
    *,
    admin: bool = False,
    scopes: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    response = await client.post(
        f"{API}/tenants/{slug}/tokens", json={"scopes": scopes or [], "admin": admin, **extra}
    )
    assert response.status_code == 201, response.text
    return response.json()


async def create_resource(client: httpx.AsyncClient, slug: str, **body: Any) -> httpx.Response:
    body.setdefault("name", body.get("uri", "x").rsplit("/", 1)[-1] or "x")
    response = await client.post(f"{API}/tenants/{slug}/resources", json=body)
    assert response.status_code == 201, response.text
    return response


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def assert_problem(response: httpx.Response, status: int, *pointers: str) -> dict[str, Any]:
    """An RFC 9457 problem with this status, and (if given) errors pointing at these fields."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    problem = response.json()
    assert problem["status"] == status
    assert problem["title"] and problem["type"] and isinstance(problem["detail"], str)
    found = [error["pointer"] for error in problem.get("errors", [])]
    for pointer in pointers:
        assert pointer in found, (pointer, problem)
    return problem
