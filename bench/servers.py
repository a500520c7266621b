"""The apps the HTTP benchmarks serve, each run by uvicorn in a process of its own.

- ``catalog_app``: catalog's own app (``catalog.app.create_app``, as ``catalog serve`` runs it) plus
  two bare FastAPI routes that share its engine and its row-level-security transaction binding:
  ``GET /bench/read`` runs the same single-row query as ``resources/read`` and answers the same
  JSON-RPC body; ``GET /bench/offset`` answers a ``resources/list`` body for an OFFSET page (the
  baseline keyset pagination is compared with). Neither authenticates, parses JSON-RPC or goes
  through the SDK: that is the cost they leave out.
- ``sdk_app``: the ``mcp`` SDK's own high-level server (``MCPServer``) holding the same resources in
  memory (``BENCH_SDK_RESOURCES``: a JSON list of ``{uri, name, mimeType, text}``), stateless.

    uvicorn --factory bench.servers:catalog_app   (configured by CATALOG_* as catalog serve is)
"""

from __future__ import annotations

import json
import os
from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse
from sqlalchemy import select

from catalog.app import create_app
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import resources
from catalog.settings import get_settings


def _rpc(result: dict[str, Any]) -> JSONResponse:
    return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": result})


def catalog_app() -> FastAPI:
    import mcp_types as types

    from catalog.core.resources import LISTING_COLUMNS, record_from_row
    from catalog.mcp.context import LIST_TTL_MS, READ_TTL_MS, SERVER_NAME, SERVER_VERSION
    from catalog.mcp.handlers import to_resource

    app = create_app(get_settings())
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
                "ttlMs": READ_TTL_MS,
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
            ttl_ms=LIST_TTL_MS,
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
