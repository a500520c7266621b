"""subscriptions/listen (SUB-1..13) and 2025-11-25 resources/subscribe (COMPAT-3), fed end to end:
a write through the core -> the database's NOTIFY -> the event hub -> the stream. Plus shutdown."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
import pytest_asyncio
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from catalog.core.catalog import Catalog
from catalog.core.grants import create_grant
from catalog.core.principal import Principal
from catalog.core.resources import ListingFilter, delete_resource, list_resources, upsert_resource
from catalog.core.schemas.grants import GrantIn
from catalog.core.schemas.resources import ResourceIn
from catalog.core.schemas.tokens import TokenIn
from catalog.core.tenants import Tenant
from catalog.core.tokens import create_token
from catalog.db.engine import create_engine
from catalog.events.hub import ChangeEvent
from tests.mcp_helpers import HIDDEN, Served, envelope, mcp_settings, modern_headers, module_database, served

pytestmark = pytest.mark.asyncio(loop_scope="session")

WATCHED = "test://watched-resource"
SYSTEM = Principal.system("tests")
WAIT = 10  # seconds any expected notification may take


@pytest_asyncio.fixture(loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path)) as s,
    ):
        yield s


@pytest_asyncio.fixture(loop_scope="session")
async def writer(srv: Served) -> AsyncIterator[Any]:
    """Writes through the core on the test's own engine, as a curator (any process) would."""
    settings = srv.app.state.settings
    engine = create_engine(
        settings.async_database_url(), pool_size=1, max_overflow=0, transaction_pooler=settings.behind_pooler
    )
    catalog = Catalog(engine=engine, settings=settings)
    tenant: Tenant = srv.fixture.tenant

    async def put(uri: str, text: str, **fields: Any) -> None:
        body = {
            "uri": uri,
            "name": uri.rsplit("/", 1)[-1] or "x",
            "mimeType": "text/plain",
            "text": text,
            **fields,
        }
        await upsert_resource(catalog, SYSTEM, tenant, ResourceIn.model_validate(body))

    put.catalog = catalog  # type: ignore[attr-defined]
    put.tenant = tenant  # type: ignore[attr-defined]
    try:
        yield put
    finally:
        await engine.dispose()


async def collect(sub: Any, until: Any) -> list[Any]:
    got: list[Any] = []
    with anyio.fail_after(WAIT):
        async for event in sub:
            got.append(event)
            if until(event):
                return got
    return got


async def test_ack_names_exactly_what_is_honoured_sub_2_sub_3(srv: Served) -> None:
    """RES-3, DISC-4 (docs/requirements.toml)."""
    async with (
        srv.client() as client,
        client.listen(
            resources_list_changed=True,
            resource_subscriptions=[WATCHED],  # a malformed one is refused (test_mcp_audit_fixes.py)
            tools_list_changed=True,
            prompts_list_changed=True,
        ) as sub,
    ):
        honoured = sub.honored
    assert honoured.resources_list_changed is True
    assert honoured.resource_subscriptions == [WATCHED]
    assert honoured.tools_list_changed is None and honoured.prompts_list_changed is None


async def test_updates_and_list_changes_fire_only_for_visible_uris_sub_4_sub_6(
    srv: Served, writer: Any
) -> None:
    """RES-3, RES-16 (docs/requirements.toml). The hidden writes fire nothing; the visible ones fire
    ``updated`` for the watched URI and ``list_changed``, in that order -- or, should the listener
    lose its connection meanwhile (a loaded machine), as the gap it then reports: ``list_changed``
    and every visible subscription ``updated`` (test_gap_means_list_changed_and_every_visible_...)."""
    wanted = [ResourceUpdated(uri=WATCHED), ResourcesListChanged()]
    async with (
        srv.client() as client,
        client.listen(resources_list_changed=True, resource_subscriptions=[WATCHED, HIDDEN]) as sub,
    ):
        await writer(HIDDEN, "changed, but hidden from anonymous callers")
        await writer("file:///private/new.txt", "created, hidden")
        await writer(WATCHED, "version 2")
        await writer("test://brand-new", "created, visible")
        got: list[Any] = []
        with anyio.fail_after(WAIT):
            async for event in sub:
                got.append(event)
                if all(one in got for one in wanted):
                    break
        assert got in (wanted, wanted[::-1]), got
        reread = await client.read_resource(WATCHED)
    assert reread.contents[0].text == "version 2"  # type: ignore[union-attr]


async def test_a_subscribed_directory_fires_for_its_descendants(srv: Served, writer: Any) -> None:
    """SUB-7 (docs/requirements.toml)."""
    async with srv.client() as client, client.listen(resource_subscriptions=["file:///project/src"]) as sub:
        await writer("file:///project/srcfoo", "a sibling, not a descendant")
        await writer("file:///project/src/app.py", "def greet(): ...")
        got = await collect(sub, lambda e: True)
    assert got == [ResourceUpdated(uri="file:///project/src/app.py")]


async def test_grant_changes_reach_token_streams_as_list_changed(srv: Served, writer: Any) -> None:
    """RES-5 (docs/requirements.toml)."""
    async with srv.client(token="src") as client, client.listen(resources_list_changed=True) as sub:
        catalog, tenant = writer.catalog, writer.tenant
        await create_grant(
            catalog, SYSTEM, tenant, GrantIn.model_validate({"scope": "src", "uri": "test://static-text"})
        )
        got = await collect(sub, lambda e: True)
        assert got == [ResourcesListChanged()]
        assert "test://static-text" in {r.uri for r in (await client.list_resources()).resources}


async def test_gap_means_list_changed_and_every_visible_subscription_updated(srv: Served) -> None:
    async with (
        srv.client() as client,
        client.listen(resources_list_changed=True, resource_subscriptions=[WATCHED, HIDDEN]) as sub,
    ):
        hub = srv.catalog.event_hub  # type: ignore[attr-defined]
        gap = ChangeEvent(srv.fixture.tenant.id, "gap", None, "reconnected")
        assert srv.loop is not None
        srv.loop.call_soon_threadsafe(hub.publish, gap)
        got = await collect(sub, lambda e: isinstance(e, ResourceUpdated))
    assert got == [ResourcesListChanged(), ResourceUpdated(uri=WATCHED)]


def _listen_frames(
    served: Served,
    request_id: Any,
    notifications: dict[str, Any],
    ready: threading.Event,
    notified: threading.Event,
    out: list[Any],
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "subscriptions/listen",
        "params": {"_meta": envelope(), "notifications": notifications},
    }
    with httpx.stream(
        "POST", served.mcp_url, json=body, headers=modern_headers("subscriptions/listen"), timeout=30
    ) as r:
        out.append(r.headers["content-type"])
        with contextlib.suppress(httpx.HTTPError):
            for line in r.iter_lines():
                if line.startswith("data:") and line[5:].strip():
                    out.append(json.loads(line[5:]))
                    ready.set()
                    if len(out) >= 3:
                        notified.set()


@contextlib.contextmanager
def raw_listen(
    served: Served, request_id: Any, notifications: dict[str, Any]
) -> Iterator[tuple[list[Any], threading.Event]]:
    frames: list[Any] = []
    ready = threading.Event()
    notified = threading.Event()  # ack + one notification seen
    thread = threading.Thread(
        target=_listen_frames, args=(served, request_id, notifications, ready, notified, frames), daemon=True
    )
    thread.start()
    assert ready.wait(WAIT), "no ack"
    yield frames, notified
    thread.join(timeout=WAIT)
    assert not thread.is_alive(), "the listen stream did not end"


async def test_raw_stream_is_sse_tagged_with_the_listen_id_and_ends_gracefully_on_shutdown_sub_5_sub_10_sub_13(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    """SUB-1, SUB-4 (docs/requirements.toml)."""
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, tmp_path)
        engine = create_engine(
            settings.async_database_url(),
            pool_size=1,
            max_overflow=0,
            transaction_pooler=settings.behind_pooler,
        )
        try:
            async with served(settings) as s:
                catalog = Catalog(engine=engine, settings=settings)
                with (
                    raw_listen(
                        s, "listen-7", {"resourceSubscriptions": [WATCHED], "promptsListChanged": True}
                    ) as (tagged, tagged_notified),
                    raw_listen(s, 8, {"toolsListChanged": True}) as (tools_only, _),
                ):
                    await upsert_resource(
                        catalog,
                        SYSTEM,
                        s.fixture.tenant,
                        ResourceIn.model_validate({"uri": WATCHED, "name": "w", "text": "v3"}),
                    )
                    with anyio.fail_after(WAIT):
                        assert await anyio.to_thread.run_sync(tagged_notified.wait, WAIT)
                    s.app.state.mcp.close_streams()  # what shutdown does first
        finally:
            await engine.dispose()
    assert tagged[0].startswith("text/event-stream")
    ack, updated, final = tagged[1:4]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-7"
    assert ack["params"]["notifications"] == {"resourceSubscriptions": [WATCHED]}
    assert updated["method"] == "notifications/resources/updated"
    assert updated["params"] == {
        "uri": WATCHED,
        "_meta": {"io.modelcontextprotocol/subscriptionId": "listen-7"},
    }
    assert final["id"] == "listen-7" and final["result"]["resultType"] == "complete"
    assert final["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-7"
    # a stream that asked only for tools got its ack (empty honoured set), nothing else, and its end
    assert [f.get("method") for f in tools_only[1:]] == ["notifications/subscriptions/acknowledged", None]
    assert tools_only[1]["params"]["notifications"] == {}
    assert tools_only[1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 8
    assert tools_only[2]["id"] == 8


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_server_shutdown_is_prompt_with_open_listen_and_legacy_streams_sub_10(
    postgres_server: Any, template_database: str, tmp_path: Path
) -> None:
    async with (
        module_database(postgres_server, template_database) as url,
        served(mcp_settings(url, tmp_path)) as s,
        contextlib.AsyncExitStack() as stack,
    ):
        stack.push_async_exit(lambda *exc: _swallow())  # clients of a stopped server may complain
        legacy = await stack.enter_async_context(s.client("legacy"))
        await legacy.subscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]
        modern = await stack.enter_async_context(s.client())
        sub = await stack.enter_async_context(modern.listen(resources_list_changed=True))
        took = await anyio.to_thread.run_sync(s.stop)
        assert took < 5
        with anyio.fail_after(WAIT):
            remaining = [event async for event in sub]  # the graceful end: iteration just stops
        assert remaining == []


async def _swallow() -> bool:
    return True


# -- 2025-11-25 sessions ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_legacy_subscribe_pushes_updates_and_list_changes_on_the_session_compat_3(
    srv: Served, writer: Any
) -> None:
    updated = anyio.Event()
    listed = anyio.Event()
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.set()
        if isinstance(message, types.ResourceListChangedNotification):
            listed.set()

    async with srv.client("legacy", message_handler=on_message) as client:
        await client.subscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]
        n = 0
        with anyio.fail_after(WAIT):
            while not updated.is_set():  # the GET stream opens asynchronously after initialize
                await writer(WATCHED, f"legacy {n}")
                n += 1
                with anyio.move_on_after(0.5):
                    await updated.wait()
        note = next(m for m in seen if isinstance(m, types.ResourceUpdatedNotification))
        assert note.params.uri == WATCHED and note.params.meta is None  # no subscriptionId at 2025
        await writer("test://legacy-new", "x")
        with anyio.fail_after(WAIT):
            await listed.wait()
        await client.unsubscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]


# -- visibility through tags drives events; hidden directories never fire ---------------------------

TAGGED = "file:///private/tag-me.txt"  # hidden from the public scope; the "staff" token sees tag staff
SENTINEL = "test://static-text"  # visible to everyone: a write to it marks "everything before arrived"
_SENTINELS = itertools.count()


async def _token(
    writer: Any, srv: Served, name: str, scopes: list[str], grants: list[dict[str, str]]
) -> None:
    catalog, tenant = writer.catalog, writer.tenant
    for grant in grants:
        await create_grant(catalog, SYSTEM, tenant, GrantIn.model_validate(grant))
    created = await create_token(catalog, SYSTEM, tenant, TokenIn.model_validate({"scopes": scopes}))
    srv.fixture.tokens[name] = created.token


async def _until_sentinel(sub: Any, writer: Any) -> list[Any]:
    """Everything the stream says up to the sentinel's update (events arrive in commit order), in
    a stable order (one batch's list_changed and updated come in the adapter's order)."""
    await writer(SENTINEL, f"sentinel {next(_SENTINELS)}")  # a new text each time: a real change
    got = await collect(sub, lambda e: e == ResourceUpdated(uri=SENTINEL))
    return sorted(got[:-1], key=repr)


async def test_adding_and_removing_a_tag_shows_and_hides_a_resource_to_a_tag_grant_res_16_sub_6(
    srv: Served, writer: Any
) -> None:
    await writer(TAGGED, "v1")  # exists, untagged: hidden from the staff token
    async with (
        srv.client(token="staff") as client,
        client.listen(resources_list_changed=True, resource_subscriptions=[TAGGED, SENTINEL]) as sub,
    ):
        await writer(TAGGED, "v2")  # still hidden: nothing
        assert await _until_sentinel(sub, writer) == []
        await writer(TAGGED, "v2", tags=["staff"])  # now visible through the tag
        assert await _until_sentinel(sub, writer) == sorted(
            [ResourceUpdated(uri=TAGGED), ResourcesListChanged()], key=repr
        )
        await writer(TAGGED, "v3", tags=["staff"])  # visible before and after: content only
        assert await _until_sentinel(sub, writer) == [ResourceUpdated(uri=TAGGED)]
        await writer(TAGGED, "v3", tags=["other"])  # hidden again: read again (it is gone for you)
        assert await _until_sentinel(sub, writer) == sorted(
            [ResourceUpdated(uri=TAGGED), ResourcesListChanged()], key=repr
        )
        await writer(TAGGED, "v4", tags=["other"])  # hidden throughout
        assert await _until_sentinel(sub, writer) == []


async def test_deleting_a_resource_visible_only_through_a_tag_fires_res_16_sub_6(
    srv: Served, writer: Any
) -> None:
    await writer(TAGGED, "tagged", tags=["staff"])
    async with (
        srv.client(token="staff") as client,
        client.listen(resources_list_changed=True, resource_subscriptions=[TAGGED, SENTINEL]) as sub,
    ):
        [record], _ = await list_resources(
            writer.catalog, SYSTEM, writer.tenant, listing="t", filters=ListingFilter(uri_prefix=TAGGED)
        )
        await delete_resource(writer.catalog, SYSTEM, writer.tenant, record.id)
        assert await _until_sentinel(sub, writer) == sorted(
            [ResourceUpdated(uri=TAGGED), ResourcesListChanged()], key=repr
        )


async def test_a_list_listener_hears_a_tag_making_a_resource_visible_without_subscribing(
    srv: Served, writer: Any
) -> None:
    await writer(TAGGED, "v1")
    async with srv.client(token="staff") as client, client.listen(resources_list_changed=True) as sub:
        await writer(TAGGED, "v1", tags=["staff"])
        got = await collect(sub, lambda e: True)
        assert got == [ResourcesListChanged()]
        assert TAGGED in {r.uri for r in (await client.list_resources()).resources}


async def test_a_subscription_to_a_hidden_directory_never_fires_sub_7(srv: Served, writer: Any) -> None:
    """Item 11: a token that sees file:///secret/key.txt but not the directory file:///secret.
    Also AUTH-12 (docs/requirements.toml)."""
    await writer("file:///secret/key.txt", "k1")
    await upsert_resource(
        writer.catalog,
        SYSTEM,
        writer.tenant,
        ResourceIn.model_validate({"uri": "file:///secret", "name": "secret", "mimeType": "inode/directory"}),
    )
    await _token(
        writer,
        srv,
        "key-only",
        ["key"],
        [{"scope": "key", "uri": "file:///secret/key.txt"}, {"scope": "key", "uri": SENTINEL}],
    )
    async with (
        srv.client(token="key-only") as client,
        client.listen(resource_subscriptions=["file:///secret", SENTINEL]) as sub,
    ):
        # A curator touches the hidden directory, then the visible file under it.
        await upsert_resource(
            writer.catalog,
            SYSTEM,
            writer.tenant,
            ResourceIn.model_validate(
                {"uri": "file:///secret", "name": "secret", "title": "touched", "mimeType": "inode/directory"}
            ),
        )
        await writer("file:///secret/key.txt", "k2")
        assert await _until_sentinel(sub, writer) == []
        # Once the directory is visible (a grant), its descendants fire as for any directory.
        await create_grant(
            writer.catalog,
            SYSTEM,
            writer.tenant,
            GrantIn.model_validate({"scope": "key", "uri": "file:///secret"}),
        )
        await writer("file:///secret/key.txt", "k3")
        got = await _until_sentinel(sub, writer)
        assert got[-1] == ResourceUpdated(uri="file:///secret/key.txt")
