"""The baselines and in-app variants the server benchmarks compare ``catalog serve`` with, each run
by uvicorn in a process of its own (``bench.harness.uvicorn_process``), as the server under test is.
The server under test itself is never assembled here: it is ``python -m catalog serve``.

- ``floor_app`` (the floor): a bare Starlette app on raw asyncpg, nothing else: no SQLAlchemy, no
  authentication, no row-level security, no middleware, no SDK. ``POST /mcp`` parses the same
  JSON-RPC request catalog gets and answers ``resources/read`` with ``SELECT uri, text FROM <plain
  table> WHERE uri = $1`` and the first (or any) ``resources/list`` page with ``WHERE uri > $1 ORDER
  BY uri LIMIT 100`` (the cursor is the last URI, unsigned), on a plain copy of the same rows in the
  same database (``bench.harness.plain_copy``; ``BENCH_FLOOR_DSN``, ``BENCH_FLOOR_TABLE``).
  Statements are prepared once per connection (asyncpg's statement cache); JSON by ``json.dumps``.
- ``sdk_app``: the ``mcp`` SDK's own high-level server (``MCPServer``) holding the same resources in
  memory (``BENCH_SDK_RESOURCES``: a JSON list of ``{uri, name, mimeType, text}``), stateless.
- ``catalog_app`` (in-app variant, an extra column that explains a figure, never the figure itself):
  catalog's app plus two bare FastAPI routes that share its engine and its row-level-security
  transaction binding: ``GET /bench/read`` runs the same single-row query as ``resources/read`` and
  answers the same JSON-RPC body; ``GET /bench/offset`` answers a ``resources/list`` body for an
  OFFSET page (what keyset pagination is compared with). Neither authenticates, parses JSON-RPC or
  goes through the SDK. It imports catalog internals (the only module of bench/ that reaches into
  ``catalog.mcp``), so it is the one place to adapt when those move.

    uvicorn --factory bench.servers:floor_app     (BENCH_FLOOR_DSN, BENCH_FLOOR_TABLE, BENCH_FLOOR_PAGE)
    uvicorn --factory bench.servers:sdk_app       (BENCH_SDK_RESOURCES)
    uvicorn --factory bench.servers:catalog_app   (configured by CATALOG_* as catalog serve is)
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

# FastAPI resolves the in-app routes' annotations from this module's globals, so these stay here;
# catalog itself is imported inside catalog_app only (the floor and SDK processes never load it).
from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse
from starlette.applications import Starlette

# What catalog answers with by default (CATALOG_READ_TTL_MS / CATALOG_LIST_TTL_MS), so the floor's bodies
# are as long as catalog's; a constant here keeps the floor's process free of catalog imports.
FLOOR_TTL_MS = 10_000
FLOOR_PAGE = 100  # BENCH_FLOOR_PAGE overrides it, to match a server run with CATALOG_PAGE_SIZE
FLOOR_POOL = 30  # as catalog's fixed pool per process


def floor_app() -> Starlette:
    import asyncpg
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    dsn = os.environ["BENCH_FLOOR_DSN"]
    table = os.environ.get("BENCH_FLOOR_TABLE", "bench_plain")
    page = int(os.environ.get("BENCH_FLOOR_PAGE", FLOOR_PAGE))
    read_sql = f"SELECT uri, text FROM {table} WHERE uri = $1"
    list_sql = f"SELECT uri, name, mime_type, size FROM {table} WHERE uri > $1 ORDER BY uri LIMIT {page}"
    meta = {"io.modelcontextprotocol/serverInfo": {"name": "floor", "version": "0"}}
    pool: asyncpg.Pool | None = None

    def answer(payload: dict[str, Any]) -> Response:
        return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")

    async def mcp(request: Request) -> Response:
        assert pool is not None
        message = json.loads(await request.body())
        method, params, rid = message.get("method"), message.get("params") or {}, message.get("id")
        if method == "resources/read":
            row = await pool.fetchrow(read_sql, params["uri"])
            if row is None:
                error = {"code": -32602, "message": "Resource not found", "data": {"uri": params["uri"]}}
                return answer({"jsonrpc": "2.0", "id": rid, "error": error})
            result: dict[str, Any] = {"contents": [{"uri": row["uri"], "text": row["text"]}]}
        elif method == "resources/list":
            rows = await pool.fetch(list_sql, params.get("cursor") or "")
            result = {
                "resources": [
                    {"uri": r["uri"], "name": r["name"], "mimeType": r["mime_type"], "size": r["size"]}
                    for r in rows
                ]
            }
            if len(rows) == page:
                result["nextCursor"] = rows[-1]["uri"]
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            return answer({"jsonrpc": "2.0", "id": rid, "error": error})
        result.update(ttlMs=FLOOR_TTL_MS, cacheScope="private", resultType="complete", _meta=meta)
        return answer({"jsonrpc": "2.0", "id": rid, "result": result})

    async def readyz(request: Request) -> Response:
        assert pool is not None
        await pool.fetchval("SELECT 1")
        return answer({"status": "ready"})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        nonlocal pool
        pool = await asyncpg.create_pool(dsn, min_size=FLOOR_POOL, max_size=FLOOR_POOL)
        try:
            yield
        finally:
            await pool.close()

    return Starlette(
        routes=[Route("/mcp", mcp, methods=["POST"]), Route("/readyz", readyz)], lifespan=lifespan
    )


def _rpc(result: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": result})


def catalog_app() -> FastAPI:
    import mcp_types as types
    from sqlalchemy import select

    from catalog.app import create_app
    from catalog.core.resources import LISTING_COLUMNS, record_from_row
    from catalog.db.engine import TenantScope, transaction
    from catalog.db.models import resources
    from catalog.mcp.context import SERVER_NAME, SERVER_VERSION
    from catalog.mcp.handlers import to_resource
    from catalog.settings import get_settings

    settings = get_settings()
    app = create_app(settings)
    server_info = {
        "io.modelcontextprotocol/serverInfo": {
            "name": SERVER_NAME,
            "title": "Catalog",
            "version": SERVER_VERSION,
        }
    }

    @app.get("/bench/read", include_in_schema=False)
    async def bare_read(tenant: int = Query(...), uri: str = Query(...)) -> JSONResponse:
        async with transaction(app.state.catalog.engine, TenantScope.tenant(tenant)) as conn:
            row = (
                await conn.execute(
                    select(resources).where(resources.c.tenant_id == tenant, resources.c.uri == uri)
                )
            ).one()
        return _rpc(
            {
                "contents": [{"uri": row.uri, "mimeType": row.mime_type, "text": row.text}],
                "ttlMs": settings.read_ttl_ms,
                "cacheScope": "private",
                "resultType": "complete",
                "_meta": server_info,
            }
        )

    @app.get("/bench/offset", include_in_schema=False)
    async def offset_page(
        tenant: int = Query(...), offset: int = Query(0), limit: int = Query(100)
    ) -> JSONResponse:
        async with transaction(app.state.catalog.engine, TenantScope.tenant(tenant)) as conn:
            rows = (
                await conn.execute(
                    select(*LISTING_COLUMNS)
                    .where(resources.c.tenant_id == tenant)
                    .order_by(resources.c.uri)
                    .offset(offset)
                    .limit(limit + 1)
                )
            ).all()
        page = types.ListResourcesResult(
            resources=[to_resource(record_from_row(row)) for row in rows[:limit]],
            next_cursor=str(offset + limit) if len(rows) > limit else None,
            ttl_ms=settings.list_ttl_ms,
            cache_scope="private",
        )
        return _rpc({**page.model_dump(by_alias=True, exclude_none=True, mode="json"), "_meta": server_info})

    return app


def sdk_app() -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.resources import TextResource

    items = json.loads(os.environ.get("BENCH_SDK_RESOURCES", "[]"))
    server = MCPServer(
        "bench-sdk",
        resources=[
            TextResource(
                uri=item["uri"], name=item["name"], mime_type=item.get("mimeType"), text=item["text"]
            )
            for item in items
        ],
    )
    return server.streamable_http_app(stateless_http=True)
