"""Plain ``subscriptions/listen`` streams (``catalog.mcp.fast_listen``).

A plainly valid listen is served without the SDK's request machinery: streams told the same share
one hub subscription and one watch, and each stream's frames are written by its own connection's
task. What a client receives must be exactly what the SDK path sends (compared here byte for byte,
the SDK path forced by a progress token in the envelope): the ack (SUB-2, SUB-3), each
notification tagged with its listen's id (SUB-5), the result when the server stops (SUB-10), the
credential's error when it is revoked. The path's own rules are proven where they live: a stream
that falls too far behind ends, a quiet one is kept alive, an expiring credential ends its stream.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from mcp.client.subscriptions import ResourceUpdated

from catalog.core.principal import Principal
from catalog.core.resources import upsert_resource
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tokens import create_token, delete_token
from catalog.core.watching import Delivery
from catalog.events.credentials import CredentialHold
from catalog.mcp import streams
from catalog.mcp.context import CREDENTIAL_ENDED
from catalog.mcp.fast_listen import Ending, FastStream, delivery_templates
from catalog.mcp.wire import SSE_KEEPALIVE
from catalog.observability import metrics
from tests.mcp_helpers import RawListen, Served, acting_catalog, mcp_settings, module_database, served

pytestmark = pytest.mark.asyncio(loop_scope="session")

WATCHED = "test://watched-resource"
OTHER = "file:///project/README.md"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


@pytest_asyncio.fixture(loop_scope="session")
async def database(postgres_server: Any, template_database: str) -> AsyncIterator[str]:
    async with module_database(postgres_server, template_database) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="session")
async def srv(database: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with served(mcp_settings(database, tmp_path)) as s:
        yield s


async def change(srv: Served, uri: str, text: str) -> None:
    async with acting_catalog(srv) as catalog:
        body = {"uri": uri, "name": "changed", "mimeType": "text/plain", "text": text}
        await upsert_resource(
            catalog, Principal.system("tests"), srv.fixture.tenant, ResourceIn.model_validate(body)
        )


def plain_listens_answered() -> float:
    return metrics.MCP_PLAIN_ANSWERS.labels("subscriptions/listen")._value.get()  # type: ignore[attr-defined]


def on_server(srv: Served, call: Callable[[], Any]) -> None:
    """Run ``call`` on the server's loop (its streams' futures belong to it)."""
    assert srv.loop is not None
    srv.loop.call_soon_threadsafe(call)


async def until(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Wait until ``condition()`` (state on the server's loop, read from here) is true."""
    async with asyncio.timeout(within):
        for _ in itertools.count():
            if condition():
                return
            await asyncio.sleep(0.01)


async def test_a_plain_listen_writes_the_sdk_paths_bytes_sub_2_sub_5_sub_10(
    database: str, tmp_path: Path
) -> None:
    """Ack, update and the result at shutdown, from both paths for the same request: equal."""
    terms = {
        "resourceSubscriptions": [WATCHED],  # a malformed URI is refused: test_mcp_audit_fixes.py
        "resourcesListChanged": True,
        "toolsListChanged": True,
    }
    async with served(mcp_settings(database, tmp_path)) as s:
        before = plain_listens_answered()
        plain = RawListen(s, terms, id="listen-7")
        sdk = RawListen(s, terms, id="listen-7", through_sdk=True)
        async with plain.opened(), sdk.opened():
            assert plain_listens_answered() - before == 1  # the plain one, and only it
            for stream in (plain, sdk):
                assert stream.status == 200 and stream.content_type == "text/event-stream"
                ack = await stream.next()
                assert ack["params"]["notifications"] == {
                    "resourcesListChanged": True,
                    "resourceSubscriptions": [WATCHED],
                }
            await change(s, WATCHED, "v2")
            for stream in (plain, sdk):
                updated = await stream.next()
                assert updated["params"] == {"uri": WATCHED, "_meta": {SUBSCRIPTION_ID: "listen-7"}}
            on_server(s, s.app.state.mcp.close_streams)  # what shutdown does first
            await plain.wait_ended()
            await sdk.wait_ended()
        assert plain.lines == sdk.lines
        final = plain.messages[-1]
        assert final["id"] == "listen-7" and final["result"]["resultType"] == "complete"
        assert final["result"]["_meta"][SUBSCRIPTION_ID] == "listen-7"


async def test_the_sdk_clients_listen_takes_the_plain_path(srv: Served) -> None:
    before = plain_listens_answered()
    async with srv.client() as client, client.listen(resource_subscriptions=[WATCHED]) as sub:
        assert plain_listens_answered() - before == 1
        await change(srv, WATCHED, "from the sdk client's test")
        async with asyncio.timeout(10):
            event = await anext(aiter(sub))
    assert event == ResourceUpdated(uri=WATCHED)


async def test_streams_told_the_same_share_one_group_each_with_its_own_id(srv: Served) -> None:
    listens = srv.app.state.mcp.fast_listens
    hub = srv.app.state.catalog.event_hub
    tenant = srv.fixture.tenant.id
    first = RawListen(srv, {"resourceSubscriptions": [WATCHED]}, id=1)
    second = RawListen(srv, {"resourceSubscriptions": [WATCHED]}, id="second")
    both = RawListen(srv, {"resourceSubscriptions": [WATCHED, OTHER]}, id=3)
    async with first.opened(), second.opened(), both.opened():
        for stream in (first, second, both):
            await stream.next()  # the ack
        assert (len(listens), listens.groups, len(hub.subscriptions(tenant))) == (3, 2, 2)
        await change(srv, WATCHED, "shared")
        got = {stream.body["id"]: await stream.next() for stream in (first, second, both)}
    assert {id: message["params"]["_meta"][SUBSCRIPTION_ID] for id, message in got.items()} == {
        1: 1,
        "second": "second",
        3: 3,
    }
    assert all(message["params"]["uri"] == WATCHED for message in got.values())
    # Clients that went away leave their group, and the last one its hub subscription.
    await until(lambda: (len(listens), listens.groups, len(hub.subscriptions(tenant))) == (0, 0, 0))


async def test_a_revoked_token_ends_a_plain_listen_with_the_sdk_paths_error(srv: Served) -> None:
    async with acting_catalog(srv) as catalog:
        created = await create_token(
            catalog,
            Principal.system("tests"),
            srv.fixture.tenant,
            TokenIn.model_validate({"scopes": ["public"]}),
        )
    plain = RawListen(srv, {"resourcesListChanged": True}, id=9, bearer=created.token)
    sdk = RawListen(srv, {"resourcesListChanged": True}, id=9, bearer=created.token, through_sdk=True)
    async with plain.opened(), sdk.opened():
        await plain.next()
        await sdk.next()
        async with acting_catalog(srv) as catalog:
            await delete_token(catalog, Principal.system("tests"), srv.fixture.tenant, created.id)
        await plain.wait_ended()
        await sdk.wait_ended()
    assert plain.lines == sdk.lines
    error = plain.messages[-1]["error"]
    assert (error["code"], error["data"]) == (CREDENTIAL_ENDED, {"reason": "revoked"})


@pytest.mark.parametrize(
    ("terms", "answer"),
    [
        # A flag that is not a JSON boolean: the SDK's model reads "yes" as true.
        ({"resourcesListChanged": "yes"}, {"resourcesListChanged": True}),
        # An extension's key: the SDK's model keeps it, catalog honours what it knows.
        ({"resourceSubscriptions": [WATCHED], "taskIds": ["t"]}, {"resourceSubscriptions": [WATCHED]}),
        ({"resourceSubscriptions": WATCHED}, -32602),  # not a list: the SDK's invalid params
    ],
)
async def test_a_listen_the_plain_path_does_not_read_is_the_sdks(
    srv: Served, terms: dict[str, Any], answer: dict[str, Any] | int
) -> None:
    before = plain_listens_answered()
    stream = RawListen(srv, terms, id=5)
    async with stream.opened():
        first = await stream.next()
    assert plain_listens_answered() == before
    if isinstance(answer, int):
        assert first["error"]["code"] == answer
    else:
        assert first["method"] == "notifications/subscriptions/acknowledged"
        assert first["params"]["notifications"] == answer


# -- a stream's own rules, on the event loop ------------------------------------------------------------


class Connection:
    """What uvicorn gives an app: ``send`` records what is written, ``receive`` waits for a
    disconnect that :meth:`drop` makes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.wrote = asyncio.Event()
        self._gone = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.written.append(message.get("body", b""))
        self.wrote.set()

    async def receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    def drop(self) -> None:
        self._gone.set()


UPDATE = delivery_templates(Delivery(updated=(WATCHED,)))


async def test_a_stream_writes_each_delivery_with_its_own_subscription_id() -> None:
    connection = Connection()
    stream = FastStream("id-1")
    running = asyncio.ensure_future(stream.run(connection.receive, connection.send))
    stream.push(UPDATE)
    await asyncio.wait_for(connection.wrote.wait(), 5)
    connection.drop()
    assert await asyncio.wait_for(running, 5) is Ending.GONE
    assert connection.written == [
        b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/resources/updated",'
        b'"params":{"uri":"test://watched-resource","_meta":{"io.modelcontextprotocol/subscriptionId":"id-1"}}}'
        b"\r\n\r\n"
    ]


async def test_a_stream_that_falls_too_far_behind_ends() -> None:
    stream = FastStream(2)
    for _ in range(streams.MAX_BACKLOG):
        stream.push(UPDATE)
    assert stream.ending is None
    stream.push(UPDATE)  # one more than a stream may hold unsent
    assert stream.ending is Ending.CLOSED
    connection = Connection()
    assert await stream.run(connection.receive, connection.send) is Ending.CLOSED
    assert connection.written == []  # what it held is dropped, as a cancelled handler's


async def test_a_quiet_stream_is_kept_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """SUB-13 (docs/requirements.toml)."""
    monkeypatch.setattr(streams, "PING_INTERVAL_S", 0.05)
    connection = Connection()
    stream = FastStream(3)
    running = asyncio.ensure_future(stream.run(connection.receive, connection.send))
    await asyncio.wait_for(connection.wrote.wait(), 5)
    connection.drop()
    await asyncio.wait_for(running, 5)
    assert connection.written[0] == SSE_KEEPALIVE


async def test_a_stream_ends_when_its_credential_expires_and_not_before() -> None:
    connection = Connection()
    hold = CredentialHold(token_id=1, expires_at=datetime.now(UTC) + timedelta(seconds=0.2))
    stream = FastStream(4, hold)
    running = asyncio.ensure_future(stream.run(connection.receive, connection.send))
    stream.push(UPDATE)
    await asyncio.wait_for(connection.wrote.wait(), 5)
    assert not running.done()
    assert await asyncio.wait_for(running, 5) is Ending.EXPIRED
    assert hold.reason == "expired"


async def test_a_revocation_wakes_a_waiting_stream() -> None:
    connection = Connection()
    hold = CredentialHold(token_id=1, expires_at=None)
    stream = FastStream(5, hold)
    running = asyncio.ensure_future(stream.run(connection.receive, connection.send))
    stream.push(UPDATE)
    await asyncio.wait_for(connection.wrote.wait(), 5)  # written: now it waits for what comes next
    hold.end("revoked")
    assert await asyncio.wait_for(running, 5) is Ending.REVOKED
