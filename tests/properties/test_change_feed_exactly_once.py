"""The change feed delivers every committed change exactly once, in an order a follower resumes from.

A change's seq is its tenant's commit order (migration 0011): a transaction that wrote first but
commits last is numbered after the one that committed before it, so a poller or a stream follower
past one position can never be handed a lower one later.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from catalog.app import create_app
from catalog.events.listener import listener_dsn
from catalog.settings import Settings
from tests.admin_support import ADMIN, API, assert_problem, bearer, create_resource, mint_token
from tests.conftest import run_live_server


async def poll(client: httpx.AsyncClient, slug: str, after: int) -> tuple[list[dict], int]:
    """Everything after ``after`` as a poller reads it (pages followed), and its next position."""
    items: list[dict] = []
    while True:
        page = (
            await client.get(f"{API}/tenants/{slug}/changes", params={"after": after, "limit": 1000})
        ).json()
        items += page["items"]
        after = page["lastSeq"]
        if "nextCursor" not in page:
            return items, after


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    event_: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in event_:
                yield event_
            event_ = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            event_[name] = value.removeprefix(" ")


@pytest.fixture
async def live(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, object]]:
    """The platform admin's client of the app over real HTTP (streams), and the app."""
    app = create_app(settings)
    with run_live_server(app) as server:
        async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as client:
            assert (await client.post(f"{API}/tenants", json={"slug": "acme"})).status_code == 201
            yield client, app


async def test_a_change_committed_after_a_later_numbered_one_reaches_poller_and_stream(
    live: tuple[httpx.AsyncClient, object], database_url: str
) -> None:
    """A transaction that writes first and commits last is delivered, once, to a poller already
    past the other change and to a stream follower (the feed's order is its commit order)."""
    client, _app = live
    await create_resource(client, "acme", uri="test://held", text="0")
    baseline, position = await poll(client, "acme", 0)
    assert [c["uri"] for c in baseline] == ["test://held"]
    holder = await asyncpg.connect(listener_dsn(database_url))
    try:
        async with client.stream(
            "GET", f"{API}/tenants/acme/changes/stream", headers={"Last-Event-ID": str(position)}
        ) as response:
            assert response.status_code == 200
            events = sse_events(response)
            streamed: list[tuple[int, str, str]] = []

            async def take(n: int) -> None:
                for _ in range(n):
                    data = json.loads((await anext(events))["data"])
                    streamed.append((data["seq"], data["uri"], data["op"]))

            holding = holder.transaction()
            await holding.start()
            await holder.execute(
                "UPDATE resources SET text = 'held' WHERE uri = 'test://held'"
                " AND tenant_id = (SELECT id FROM tenants WHERE slug = 'acme')"
            )
            await create_resource(client, "acme", uri="test://later", text="1")
            first, position = await poll(client, "acme", position)
            await asyncio.wait_for(take(1), 10)
            await holding.commit()
            second, position = await poll(client, "acme", position)
            await asyncio.wait_for(take(1), 10)
    finally:
        await holder.close()
    polled = [(c["seq"], c["uri"], c["op"]) for c in first + second]
    assert [(uri, op) for _, uri, op in polled] == [("test://later", "created"), ("test://held", "updated")]
    assert streamed == polled
    everything, _ = await poll(client, "acme", 0)
    assert [(c["seq"], c["uri"], c["op"]) for c in everything] == [
        (baseline[0]["seq"], "test://held", "created"),
        *polled,
    ]
    assert [c["seq"] for c in everything] == [1, 2, 3]  # numbered in commit order, no gaps


# -- concurrent writers and a resuming follower --------------------------------------------------------

WRITERS = 3


@dataclass
class Follower:
    """A poller that remembers what it was handed, to resume from any of those positions."""

    after: int = 0
    delivered: list[tuple[int, str]] = field(default_factory=list)


STEP = st.one_of(
    st.tuples(st.just("write"), st.integers(0, WRITERS - 1)),
    st.tuples(st.just("commit"), st.integers(0, WRITERS - 1)),
    st.tuples(st.just("rollback"), st.integers(0, WRITERS - 1)),
    st.tuples(st.just("poll"), st.just(0)),
    st.tuples(st.just("resume"), st.integers(0, 10_000)),
)
SLUGS = itertools.count()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=1, max_size=30))
# The schedule that lost a change when seqs were taken at write: 0 writes, 1 writes and commits,
# the follower polls past 1's change, then 0 commits its lower number.
@example(steps=[("write", 0), ("write", 1), ("commit", 1), ("poll", 0), ("commit", 0), ("poll", 0)])
async def test_interleaved_writers_each_committed_change_is_followed_exactly_once(
    client: httpx.AsyncClient, database_url: str, steps: list[tuple[str, int]]
) -> None:
    """Writers begin, write, commit and roll back in any interleaving; a follower polls and resumes
    from any position it was handed. Every committed change is delivered exactly once, a resume
    repeats exactly what followed that position, and nothing of a rolled-back write appears."""
    slug = f"p{next(SLUGS)}"
    assert (await client.post(f"{API}/tenants", json={"slug": slug})).status_code == 201
    writers = [await asyncpg.connect(listener_dsn(database_url)) for _ in range(WRITERS)]
    open_txns: dict[int, asyncpg.transaction.Transaction] = {}
    pending: dict[int, list[str]] = {n: [] for n in range(WRITERS)}
    committed: list[str] = []
    rolled_back: list[str] = []
    uris = (f"test://w/{n}" for n in itertools.count())
    follower = Follower()
    tenant_id = await writers[0].fetchval("SELECT id FROM tenants WHERE slug = $1", slug)

    async def follow() -> None:
        items, follower.after = await poll(client, slug, follower.after)
        follower.delivered += [(c["seq"], c["uri"]) for c in items]

    try:
        for action, arg in steps:
            if action == "write":
                if arg not in open_txns:
                    open_txns[arg] = writers[arg].transaction()
                    await open_txns[arg].start()
                uri = next(uris)
                await writers[arg].execute(
                    "INSERT INTO resources (tenant_id, uri, name) VALUES ($1, $2, 'r')", tenant_id, uri
                )
                pending[arg].append(uri)
            elif action in ("commit", "rollback") and arg in open_txns:
                txn = open_txns.pop(arg)
                if action == "commit":
                    await txn.commit()
                    committed += pending[arg]
                else:
                    await txn.rollback()
                    rolled_back += pending[arg]
                pending[arg] = []
            elif action == "poll":
                await follow()
            elif action == "resume" and follower.delivered:
                # Back to a position handed out earlier: what follows it is what followed it then.
                index = arg % len(follower.delivered)
                again, _ = await poll(client, slug, follower.delivered[index][0])
                seen_after = follower.delivered[index + 1 :]
                assert [(c["seq"], c["uri"]) for c in again][: len(seen_after)] == seen_after
        for n, txn in list(open_txns.items()):
            await txn.commit()
            committed += pending[n]
        await follow()
    finally:
        for conn in writers:
            await conn.close()
    delivered_uris = [uri for _, uri in follower.delivered]
    assert sorted(delivered_uris) == sorted(committed)  # each committed change once, none missing
    assert len(set(delivered_uris)) == len(delivered_uris)
    assert not set(delivered_uris) & set(rolled_back)
    seqs = [seq for seq, _ in follower.delivered]
    assert seqs == sorted(seqs)


# -- change streams: quotas and one shared reader per tenant ----------------------------------------


@pytest.fixture
async def limited(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app over real HTTP with small stream limits: 2 per credential, 3 per tenant."""
    app = create_app(
        settings.model_copy(update={"max_streams_per_credential": 2, "max_streams_per_tenant": 3})
    )
    with run_live_server(app) as server:
        async with httpx.AsyncClient(base_url=server.base_url, headers=ADMIN, timeout=30) as client:
            assert (await client.post(f"{API}/tenants", json={"slug": "acme"})).status_code == 201
            yield client


async def open_stream(
    client: httpx.AsyncClient, stack: contextlib.AsyncExitStack, token: str
) -> AsyncIterator[str]:
    """A stream held open until ``stack`` closes, once its first line came (its lines returned:
    dropping the iterator would close the connection)."""
    response = await stack.enter_async_context(
        client.stream("GET", f"{API}/tenants/acme/changes/stream", headers=bearer(token))
    )
    assert response.status_code == 200
    lines = response.aiter_lines()
    assert (await asyncio.wait_for(anext(lines), 10)).startswith("retry:")
    return lines


async def test_change_streams_beyond_the_stream_limits_are_refused_with_429(
    limited: httpx.AsyncClient,
) -> None:
    """Admin change streams count against the MCP stream quotas (per credential, per tenant): one
    more is 429 problem JSON with Retry-After, and nothing is streamed."""
    client = limited
    one, two = (
        (await mint_token(client, "acme", admin=True))["token"],
        (await mint_token(client, "acme", admin=True))["token"],
    )
    stream = f"{API}/tenants/acme/changes/stream"
    async with contextlib.AsyncExitStack() as stack:
        held = [await open_stream(client, stack, one), await open_stream(client, stack, one)]
        refused = await asyncio.wait_for(client.get(stream, headers=bearer(one)), 10)
        assert_problem(refused, 429)
        assert refused.headers["retry-after"] == "5"
        assert "this credential has 2 streams open here, its limit" in refused.json()["detail"]
        held.append(await open_stream(client, stack, two))  # the tenant's third
        refused = await asyncio.wait_for(client.get(stream, headers=bearer(two)), 10)
        assert_problem(refused, 429)
        assert "the tenant has 3 streams open here, its limit" in refused.json()["detail"]
        assert len(held) == 3


async def test_streams_of_one_tenant_share_one_feed_query_per_wake_up(
    live: tuple[httpx.AsyncClient, object],
) -> None:
    """N streams of a tenant: each write wakes one shared reader that reads the feed once, and
    every stream gets the change (counted: feed queries, not N per write)."""
    client, app = live
    streams, writes = 12, 5
    feed_queries: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM change_feed" in statement:
            feed_queries.append(statement)

    engine = app.state.catalog.engine.sync_engine  # type: ignore[attr-defined]
    event.listen(engine, "before_cursor_execute", count)
    try:
        async with contextlib.AsyncExitStack() as stack:
            followers = []
            for _ in range(streams):
                response = await stack.enter_async_context(
                    client.stream("GET", f"{API}/tenants/acme/changes/stream")
                )
                assert response.status_code == 200
                followers.append(sse_events(response))

            async def everyone_gets(uri: str) -> None:
                for follower in followers:
                    data = json.loads((await asyncio.wait_for(anext(follower), 10))["data"])
                    assert data["uri"] == uri

            await create_resource(client, "acme", uri="test://warm", text="x")
            await everyone_gets("test://warm")  # every stream is following now
            feed_queries.clear()
            for n in range(writes):
                await create_resource(client, "acme", uri=f"test://w/{n}", text="x")
                await everyone_gets(f"test://w/{n}")
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(feed_queries) <= writes, feed_queries  # one per wake-up (old: one per stream per wake-up)
