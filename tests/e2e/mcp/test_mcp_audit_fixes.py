"""Findings of the spec audit and the red team on ``/mcp``, each proved over real HTTP against a real
PostgreSQL: a fault of the database answers the same JSON-RPC error on the plain path as on the
SDK's (RES-19), error answers repeat the request's id (ERR-3), one condition has one HTTP status,
a listen's filter is bounded and its malformed URIs are refused (SUB-3), and a grant change tells a
subscriber about the subscribed URIs it shows or hides (SUB-6).

A request is sent to the SDK on purpose by adding a progress token to its envelope (the plain path
leaves those to the SDK), so each fault is met on both paths and the answers compared byte for byte.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import pytest
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from catalog.auth.refusals import RATE_LIMITED
from catalog.core.grants import create_grant, delete_grant
from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tokens import create_token
from catalog.core.watching import MAX_LISTEN_URIS
from tests.mcp_helpers import (
    HIDDEN,
    LegacyInbox,
    RawListen,
    Served,
    acting_catalog,
    envelope,
    mcp_settings,
    raw,
    served,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

README = "file:///project/README.md"
TEMPLATE = "test://template/{id}/data"
SYSTEM = Principal.system("tests")
WAIT = 10  # seconds any expected notification may take
UNAVAILABLE = "Service unavailable: the database cannot be reached or is too slow; retry later"


def ask(srv: Served, method: str, *, through_sdk: bool, id: Any = 7) -> httpx.Response:
    """``method`` (a read, a list page, a completion) with request id ``id``, on the plain path or
    the SDK's."""
    meta = {**envelope(), "progressToken": "to-the-sdk"} if through_sdk else envelope()
    params: dict[str, Any] = {"_meta": meta}
    if method == "resources/read":
        params["uri"] = README
    elif method == "completion/complete":
        params["ref"] = {"type": "ref/resource", "uri": TEMPLATE}
        params["argument"] = {"name": "id", "value": ""}
    return raw(srv, method, params, id=id)


@contextlib.asynccontextmanager
async def superuser(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        yield conn
    finally:
        await conn.close()


PLAIN_METHODS = ["resources/read", "resources/list", "completion/complete"]


async def test_a_database_fault_is_the_same_json_rpc_error_on_the_plain_path_as_on_the_sdks(
    database_url: str, tmp_path: Path
) -> None:
    """RES-19 (internal failures are ``-32603``), ERR-3 (the error repeats the request's id): with
    the resources table gone from under a running server (a real fault of the database, not one it
    is unavailable for), a read, a list page, a completion and a listen on the plain path answer
    what the SDK answers, byte for byte and with the same status, never a bare ``500 text/plain``."""
    async with served(mcp_settings(database_url, tmp_path)) as srv, superuser(database_url) as db:
        await db.execute("ALTER TABLE resources RENAME TO resources_away")
        for method in PLAIN_METHODS:
            plain = ask(srv, method, through_sdk=False)
            sdk = ask(srv, method, through_sdk=True)
            assert plain.headers["content-type"] == "application/json", (method, plain.text)
            assert (plain.status_code, plain.content) == (sdk.status_code, sdk.content), method
            error = plain.json()
            assert error["id"] == 7 and error["error"]["code"] == -32603, error
        listens = [
            await refused_listen(srv, [README], through_sdk=through_sdk) for through_sdk in (False, True)
        ]
        assert listens[0] == listens[1]
        status, content_type, answer = listens[0]
        assert (status, content_type) == (200, "application/json"), listens[0]  # as the reads above
        assert answer["id"] == "listen-1" and answer["error"]["code"] == -32603, answer
        await db.execute("ALTER TABLE resources_away RENAME TO resources")
        assert ask(srv, "resources/read", through_sdk=False).json()["result"]["contents"][0]["uri"] == README


async def test_an_unavailable_database_is_one_503_with_the_requests_id_on_either_path(
    database_url: str, tmp_path: Path
) -> None:
    """ERR-3 and one status for one condition: a statement cancelled by the statement timeout (the
    resources table locked by another session) is the database being too slow, whether the plain
    path meets it before its answer or the SDK's handler meets it inside. Both answer HTTP 503 with
    ``Retry-After`` and the same retryable ``-32603`` body repeating the request's id (before: the
    plain path's ``id`` was null, and the handler's answer came with HTTP 200)."""
    settings = mcp_settings(database_url, tmp_path, statement_timeout_ms=200)
    async with served(settings) as srv, superuser(database_url) as db:
        async with db.transaction():
            await db.execute("LOCK TABLE resources IN ACCESS EXCLUSIVE MODE")
            answers = {
                (method, through_sdk): ask(srv, method, through_sdk=through_sdk, id=f"req-{method}")
                for method in PLAIN_METHODS
                for through_sdk in (False, True)
            }
            listens = [
                await refused_listen(srv, [README], through_sdk=through_sdk) for through_sdk in (False, True)
            ]
        for (method, through_sdk), response in answers.items():
            assert response.status_code == 503, (method, through_sdk, response.text)
            assert response.headers["retry-after"] == "1"
            assert response.json() == {
                "jsonrpc": "2.0",
                "id": f"req-{method}",
                "error": {"code": -32603, "message": UNAVAILABLE, "data": {"retryable": True}},
            }
            assert response.content == answers[(method, not through_sdk)].content
        # A listen whose watch cannot be opened is refused before its stream begins: the same.
        assert listens[0] == listens[1]
        status, content_type, answer = listens[0]
        assert (status, content_type) == (503, "application/json"), listens[0]
        assert answer == {
            "jsonrpc": "2.0",
            "id": "listen-1",
            "error": {"code": -32603, "message": UNAVAILABLE, "data": {"retryable": True}},
        }


async def test_a_refused_stream_repeats_the_listens_id(database_url: str, tmp_path: Path) -> None:
    """ERR-3: the 429 refusing a listen past the stream limits repeats the listen's id (it was
    readable: the body is complete before the limits are checked)."""
    async with served(mcp_settings(database_url, tmp_path, max_anonymous_streams=1)) as srv:
        async with RawListen(srv, {"resourcesListChanged": True}, id="first").opened() as first:
            assert (await first.next())["method"] == "notifications/subscriptions/acknowledged"
            async with RawListen(srv, {"resourcesListChanged": True}, id="second").opened() as second:
                assert second.status == 429, (second.messages, second.content_type)
                (refused,) = second.messages
        assert refused["id"] == "second" and refused["error"]["code"] == RATE_LIMITED, refused


async def refused_listen(
    srv: Served, uris: list[str], *, through_sdk: bool
) -> tuple[int, str, dict[str, Any]]:
    """A listen subscribing to ``uris`` that must be refused: its status, content type and answer."""
    listen = RawListen(srv, {"resourceSubscriptions": uris}, id="listen-1", through_sdk=through_sdk)
    async with listen.opened() as opened:
        answer = await opened.next()
    return opened.status, opened.content_type, answer


async def test_a_listen_past_the_subscription_limit_is_refused_naming_the_limit(
    database_url: str, tmp_path: Path
) -> None:
    """SUB-9 bounds, ERR-3: a listen naming more than ``MAX_LISTEN_URIS`` URIs (here 60,000, which
    was answered "the database cannot be reached") is refused with ``-32602`` naming the limit,
    identically on the plain path and the SDK's; one at the limit is acknowledged with every URI."""
    many = [f"test://many/{i}" for i in range(60_000)]
    async with served(mcp_settings(database_url, tmp_path)) as srv:
        plain = await refused_listen(srv, many, through_sdk=False)
        sdk = await refused_listen(srv, many, through_sdk=True)
        assert plain == sdk
        status, content_type, answer = plain
        assert (status, content_type) == (400, "application/json")
        assert answer["id"] == "listen-1" and answer["error"]["code"] == -32602, answer
        assert "at most 10000 URIs" in answer["error"]["message"]
        assert answer["error"]["data"] == {"limit": MAX_LISTEN_URIS, "count": 60_000}
        at_limit = many[:MAX_LISTEN_URIS]
        for through_sdk in (False, True):
            listen = RawListen(srv, {"resourceSubscriptions": at_limit}, through_sdk=through_sdk)
            async with listen.opened() as opened:
                ack = await opened.next(within=60)
            assert ack["method"] == "notifications/subscriptions/acknowledged", ack
            assert ack["params"]["notifications"]["resourceSubscriptions"] == at_limit


async def test_a_listen_naming_a_malformed_uri_is_refused_naming_it_on_both_paths(
    database_url: str, tmp_path: Path
) -> None:
    """SUB-3 (the ack names what is honoured) and SUB-7: a ``resourceSubscriptions`` entry that is
    not a valid URI is not silently left out of the acknowledgement (the client would wait for its
    notifications in vain): the listen is refused with ``-32602`` naming it, before anything is
    subscribed, the same answer on the plain path and the SDK's.
    Also RES-23 (docs/requirements.toml)."""
    uris = [README, "not a uri", "file:///project/../etc/passwd"]
    async with served(mcp_settings(database_url, tmp_path)) as srv:
        plain = await refused_listen(srv, uris, through_sdk=False)
        sdk = await refused_listen(srv, uris, through_sdk=True)
        assert plain == sdk
        status, content_type, answer = plain
        assert (status, content_type) == (400, "application/json")
        assert answer["id"] == "listen-1" and answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"] == {"invalidUris": uris[1:], "invalidCount": 2}
        assert "'not a uri'" in answer["error"]["message"]
        assert srv.app.state.mcp.fast_listens.groups == 0  # nothing was subscribed


# -- a grant change tells a subscriber about the subscribed URIs it shows or hides ------------------

SHOWN = "file:///project/README.md"  # shown to the "g" scope by a grant the test adds, then hidden
SENTINEL = "test://sentinel"  # always visible to the "g" scope: a write to it marks "all before arrived"
_sentinel_writes = itertools.count()


@contextlib.asynccontextmanager
async def grant_changer(srv: Served) -> AsyncIterator[Any]:
    """Adds or deletes grants of the fixture tenant and writes the sentinel, as the admin API would."""
    async with acting_catalog(srv) as catalog:
        tenant = srv.fixture.tenant

        async def grant(body: dict[str, str]) -> int:
            return (await create_grant(catalog, SYSTEM, tenant, GrantIn.model_validate(body))).id

        async def revoke(grant_id: int) -> None:
            await delete_grant(catalog, SYSTEM, tenant, grant_id)

        async def sentinel() -> None:
            body = {"uri": SENTINEL, "name": "sentinel", "text": f"mark {next(_sentinel_writes)}"}
            await upsert_resource(catalog, SYSTEM, tenant, ResourceIn.model_validate(body))

        await sentinel()
        await grant({"scope": "g", "uri": SENTINEL})
        created = await create_token(catalog, SYSTEM, tenant, TokenIn.model_validate({"scopes": ["g"]}))
        srv.fixture.tokens["g"] = created.token
        yield grant, revoke, sentinel


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` (state on the server's loop, read from here) is true."""
    with anyio.fail_after(WAIT):
        for _ in itertools.count():
            if condition():
                return
            await anyio.sleep(0.01)


async def until_sentinel(events: Any, sentinel: Any) -> list[Any]:
    """What a stream says up to the sentinel's update (events arrive in commit order), sorted."""
    await sentinel()
    got: list[Any] = []
    with anyio.fail_after(WAIT):
        while (event := await events()) != ResourceUpdated(uri=SENTINEL):
            got.append(event)
    return sorted(got, key=repr)


SHOWN_OR_HIDDEN = sorted([ResourceUpdated(uri=SHOWN), ResourcesListChanged()], key=repr)


async def grants_show_and_hide(events: Any, grant: Any, revoke: Any, sentinel: Any) -> None:
    """The steps both eras are held to (HIDDEN is subscribed too, and hidden throughout)."""
    shown = await grant({"scope": "g", "uriPrefix": "file:///project/"})
    assert await until_sentinel(events, sentinel) == SHOWN_OR_HIDDEN  # invisible -> visible
    await revoke(shown)
    assert await until_sentinel(events, sentinel) == SHOWN_OR_HIDDEN  # visible -> invisible
    await grant({"scope": "elsewhere", "uriPrefix": "file:///"})  # not the stream's scope
    assert await until_sentinel(events, sentinel) == [ResourcesListChanged()]  # nothing shown


async def test_a_grant_that_shows_or_hides_a_subscribed_uri_sends_it_updated_sub_6(
    database_url: str, tmp_path: Path
) -> None:
    """SUB-6, RES-16, "events follow the visible set": a grant added or removed that makes a
    subscribed URI visible or invisible to the stream's principal sends ``updated`` for it (read it
    again: it appeared, or it is gone for you), as a tag flip does; a subscribed URI hidden before
    and after is never named. At 2026-07-28 (a listen through the SDK client)."""
    async with (
        served(mcp_settings(database_url, tmp_path)) as srv,
        grant_changer(srv) as (grant, revoke, sentinel),
        srv.client(token="g") as client,
        client.listen(resources_list_changed=True, resource_subscriptions=[SHOWN, HIDDEN, SENTINEL]) as sub,
    ):
        stream = aiter(sub)
        await grants_show_and_hide(lambda: anext(stream), grant, revoke, sentinel)


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_grant_that_shows_or_hides_a_uri_a_2025_session_subscribed_sends_it_updated_sub_6(
    database_url: str, tmp_path: Path
) -> None:
    """The same in a 2025-11-25 session (``resources/subscribe``, COMPAT-3)."""
    inbox = LegacyInbox()
    async with (
        served(mcp_settings(database_url, tmp_path)) as srv,
        grant_changer(srv) as (grant, revoke, sentinel),
        srv.client("legacy", token="g", message_handler=inbox) as client,
    ):
        for uri in (SHOWN, HIDDEN, SENTINEL):
            await client.subscribe_resource(uri)  # pyright: ignore[reportDeprecated]
        # The session's GET stream opens after initialize: from its hub subscription on, every
        # change reaches it (nothing was written since the fixture's first sentinel).
        hub = srv.app.state.mcp.hub
        await until(lambda: bool(hub.subscriptions(srv.fixture.tenant.id)))
        assert await until_sentinel(inbox.next, sentinel) == []
        await grants_show_and_hide(inbox.next, grant, revoke, sentinel)
