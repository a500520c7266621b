"""A stream never outlives its credential.

A ``subscriptions/listen`` stream ends with a JSON-RPC error (``-31002``, ``data.reason``) and a
2025-11-25 GET stream is closed when the token that opened it is revoked or deleted -- through any
process, here straight in SQL, as another host would -- or reaches its ``expiresAt``, or when a
JWT's ``exp`` (plus leeway) passes; a revocation announced while the process's LISTEN connection
was down is found when it reconnects. Nothing a dead stream's scope is granted afterwards reaches
it: the stream is gone.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from sqlalchemy.engine import make_url

from catalog.core.catalog import Catalog
from catalog.core.principal import Principal
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tokens import create_token
from catalog.db.engine import create_engine
from catalog.mcp.context import CREDENTIAL_ENDED
from tests.e2e.test_oauth import AUDIENCE, ISSUER, Issuer
from tests.mcp_helpers import Served, envelope, mcp_settings, modern_headers, module_database, served

pytestmark = pytest.mark.asyncio(loop_scope="session")

WATCHED = "test://watched-resource"
WAIT = 10.0


@pytest_asyncio.fixture(loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    issuer = Issuer(tmp_path)
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(
            url,
            tmp_path,
            oauth_issuer=ISSUER,
            oauth_audience=AUDIENCE,
            oauth_jwks=str(issuer.jwks_path),
            oauth_leeway_seconds=0,
        )
        async with served(settings) as s:
            s.issuer = issuer  # type: ignore[attr-defined]
            yield s


def dsn(srv: Served) -> str:
    return make_url(srv.database_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def sql(srv: Served, *statements: str, args: tuple[Any, ...] = ()) -> None:
    """Statements in one transaction of another connection (as another process or host would);
    ``args`` go to those that take parameters."""
    conn = await asyncpg.connect(dsn(srv))
    try:
        async with conn.transaction():
            await conn.execute("SELECT set_config('catalog.all_tenants', 'on', true)")
            for statement in statements:
                await conn.execute(statement, *(args if "$1" in statement else ()))
    finally:
        await conn.close()


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def new_token(srv: Served, **fields: Any) -> str:
    settings = srv.app.state.settings
    engine = create_engine(settings.async_database_url(), pool_size=1, max_overflow=0)
    try:
        catalog = Catalog(engine=engine, settings=settings)
        body = TokenIn.model_validate({"scopes": ["public"], **fields})
        created = await create_token(catalog, Principal.system("tests"), srv.fixture.tenant, body)
        return created.token
    finally:
        await engine.dispose()


def client_for(srv: Served, bearer: str, mode: str = "2026-07-28") -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=30)
    return Client(streamable_http_client(srv.mcp_url, http_client=http), mode=mode, cache=None)


async def ended_with(subscription: Any) -> tuple[int, dict[str, Any]]:
    """Drain a listen until it ends; the JSON-RPC error it ended with."""
    with anyio.fail_after(WAIT), pytest.raises(SubscriptionLost) as lost:
        async for _ in subscription:
            pass
    error = lost.value.__cause__
    assert isinstance(error, MCPError), lost.value
    return error.code, error.error.data


async def test_revoking_a_token_in_the_database_ends_its_listen_with_an_error(srv: Served) -> None:
    token = await new_token(srv)
    async with client_for(srv, token) as client, client.listen(resources_list_changed=True) as sub:
        await sql(
            srv, "UPDATE tokens SET revoked_at = now() WHERE token_hash = $1", args=(token_hash(token),)
        )
        assert await ended_with(sub) == (CREDENTIAL_ENDED, {"reason": "revoked"})
        # The scope is widened afterwards: nothing reaches the dead stream, and the token is refused.
        await sql(
            srv,
            "INSERT INTO grants (tenant_id, scope, uri_prefix) VALUES ($1, 'public', 'file:///private')",
            args=(srv.fixture.tenant.id,),
        )
    assert (await read_status(srv, token)) == 401


async def read_status(srv: Served, token: str) -> int:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {"_meta": envelope(), "uri": WATCHED},
    }
    headers = modern_headers("resources/read", WATCHED, Authorization=f"Bearer {token}")
    async with httpx.AsyncClient(timeout=WAIT) as http:
        return (await http.post(srv.mcp_url, json=body, headers=headers)).status_code


async def test_deleting_a_token_ends_its_listen(srv: Served) -> None:
    token = await new_token(srv)
    async with client_for(srv, token) as client, client.listen(resource_subscriptions=[WATCHED]) as sub:
        await sql(srv, "DELETE FROM tokens WHERE token_hash = $1", args=(token_hash(token),))
        assert await ended_with(sub) == (CREDENTIAL_ENDED, {"reason": "revoked"})


async def test_a_token_reaching_its_expiry_ends_its_listen(srv: Served) -> None:
    token = await new_token(srv, expiresAt=(datetime.now(UTC) + timedelta(seconds=2)).isoformat())
    async with client_for(srv, token) as client, client.listen(resources_list_changed=True) as sub:
        assert await ended_with(sub) == (CREDENTIAL_ENDED, {"reason": "expired"})


async def test_an_expiry_moved_earlier_ends_the_listen_then(srv: Served) -> None:
    token = await new_token(srv, expiresAt=(datetime.now(UTC) + timedelta(days=1)).isoformat())
    async with client_for(srv, token) as client, client.listen(resources_list_changed=True) as sub:
        await sql(
            srv,
            "UPDATE tokens SET expires_at = now() + interval '1 second' WHERE token_hash = $1",
            args=(token_hash(token),),
        )
        assert await ended_with(sub) == (CREDENTIAL_ENDED, {"reason": "expired"})


async def test_a_jwt_past_its_exp_ends_its_listen(srv: Served) -> None:
    issuer: Issuer = srv.issuer  # type: ignore[attr-defined]
    bearer = issuer.token(tenant="demo", scope="public", exp=int(datetime.now(UTC).timestamp()) + 2)
    async with client_for(srv, bearer) as client, client.listen(resources_list_changed=True) as sub:
        assert await ended_with(sub) == (CREDENTIAL_ENDED, {"reason": "expired"})


async def test_a_revocation_missed_while_the_listener_was_down_still_ends_the_stream(srv: Served) -> None:
    token = await new_token(srv)
    async with client_for(srv, token) as client, client.listen(resources_list_changed=True) as sub:
        # One transaction: the listener's connection is terminated, then the revocation commits
        # (and its notification is sent) while no LISTEN connection of the server is there.
        await sql(
            srv,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'catalog-listener'"
            " AND datname = current_database()",
            "UPDATE tokens SET revoked_at = now() WHERE token_hash = $1",
            args=(token_hash(token),),
        )
        assert await ended_with(sub) == (CREDENTIAL_ENDED, {"reason": "revoked"})


async def test_revoking_a_token_closes_its_2025_get_stream(srv: Served) -> None:
    token = await new_token(srv)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {token}",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    async with httpx.AsyncClient(timeout=WAIT) as http:
        opened = await http.post(srv.mcp_url, json=init, headers=headers)
        headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        async with http.stream("GET", srv.mcp_url, headers=headers) as stream:
            assert stream.status_code == 200
            await sql(
                srv, "UPDATE tokens SET revoked_at = now() WHERE token_hash = $1", args=(token_hash(token),)
            )
            with anyio.fail_after(WAIT):
                async for _ in stream.aiter_bytes():
                    pass  # ends when the server closes it
        assert (await http.get(srv.mcp_url, headers=headers)).status_code == 401


async def test_other_tokens_streams_are_left_alone(srv: Served) -> None:
    kept, revoked = await new_token(srv), await new_token(srv)
    async with (
        client_for(srv, kept) as keeper,
        keeper.listen(resource_subscriptions=[WATCHED]) as sub,
        client_for(srv, revoked) as other,
        other.listen(resources_list_changed=True) as doomed,
    ):
        await sql(
            srv, "UPDATE tokens SET revoked_at = now() WHERE token_hash = $1", args=(token_hash(revoked),)
        )
        assert await ended_with(doomed) == (CREDENTIAL_ENDED, {"reason": "revoked"})
        await sql(srv, "UPDATE resources SET name = 'touched' WHERE uri = $1", args=(WATCHED,))
        with anyio.fail_after(WAIT):
            event = await anext(aiter(sub))
        assert event.uri == WATCHED
    assert await read_status(srv, kept) == 200
