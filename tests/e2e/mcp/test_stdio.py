"""``catalog stdio``: MCP on stdin/stdout, launched by the SDK's stdio client as a desktop client
would (``python -m catalog stdio --tenant demo`` with ``CATALOG_TOKEN`` in its environment), on the
test database. Both eras (2026-07-28 requests, and the 2025-11-25 handshake), the token's
visibility, live changes made through the admin API arriving as notifications, and refusals of a
missing, invalid or other tenant's token (one stderr line, nothing on stdout)."""

from __future__ import annotations

import functools
import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError

from catalog.app import create_app
from tests.admin_support import ADMIN, API, mint_token, running
from tests.mcp_helpers import (
    BULK,
    ERAS,
    HIDDEN,
    LEGACY,
    MODERN,
    Fixture,
    LegacyInbox,
    mcp_settings,
    module_database,
    seed,
)
from tests.processes import catalog_env, run_catalog

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.process]

WATCHED = "test://watched-resource"
SRC = types.ResourceTemplateReference(type="ref/resource", uri="file:///project/src/{name}")
WAIT = 20  # seconds a notification may take (the process's LISTEN, then the pipe)
SECRET_KEY = "test-secret-key-0123456789abcdef"
ADMIN_TOKEN = "cat_test-platform-admin-token"


class Stdio:
    """The seeded database, and ``catalog stdio`` clients and admin API on it."""

    def __init__(self, url: str, home: Path, fixture: Fixture, admin: httpx.AsyncClient) -> None:
        self.url = url
        self.home = home
        self.fixture = fixture
        self.admin = admin  # the admin API of an in-process app on the same database

    def env(self, token: str | None) -> dict[str, str]:
        values = {
            "CATALOG_DATABASE_URL": self.url,
            "CATALOG_HOME": str(self.home),
            "CATALOG_SECRET_KEY": SECRET_KEY,
            "CATALOG_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        if token is not None:
            values["CATALOG_TOKEN"] = token
        return catalog_env(**values)

    def client(self, mode: str = MODERN, token: str = "staff", tenant: str = "demo", **kwargs: Any) -> Client:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "catalog", "stdio", "--tenant", tenant],
            env=self.env(self.fixture.tokens[token]),
        )
        return Client(params, mode=mode, cache=None, read_timeout_seconds=60, **kwargs)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def stdio(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Stdio]:
    home = tmp_path_factory.mktemp("stdio-home")
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, home)
        fixture = await seed(settings)
        async with running(create_app(settings)) as app:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1", headers=ADMIN
            ) as admin:
                yield Stdio(url, home, fixture, admin)


async def put_text(stdio: Stdio, uri: str, text: str) -> None:
    response = await stdio.admin.put(
        f"{API}/tenants/demo/resources",
        params={"uri": uri},
        json={"name": uri.rsplit("/", 1)[-1], "mimeType": "text/plain", "text": text},
    )
    assert response.status_code in (200, 201), response.text


async def all_resources(client: Client) -> list[str]:
    uris: list[str] = []
    cursor: str | None = None
    while True:
        page = await client.list_resources(cursor=cursor)
        uris.extend(str(r.uri) for r in page.resources)
        cursor = page.next_cursor
        if cursor is None:
            return uris


@pytest.mark.parametrize("mode", ERAS)
async def test_lists_reads_templates_and_completes_on_stdio_res_1_comp_2(stdio: Stdio, mode: str) -> None:
    async with stdio.client(mode) as client:
        uris = await all_resources(client)
        read = await client.read_resource(WATCHED)
        templates = await client.list_resource_templates()
        completion = await client.complete(SRC, {"name": "name", "value": ""})
    assert len([u for u in uris if u.startswith("test://bulk/")]) == BULK
    assert HIDDEN in uris  # the staff token's grants show it
    assert len(uris) == len(set(uris))  # the cursor walk neither repeats nor skips
    assert read.contents[0].uri == WATCHED and read.contents[0].text  # type: ignore[union-attr]
    assert {t.uri_template for t in templates.resource_templates} >= {"file:///project/src/{name}"}
    assert completion.completion.values == ["app.py", "main.py"]


@pytest.mark.parametrize("mode", ERAS)
async def test_the_tools_build_server_gives_are_served_on_stdio_too(stdio: Stdio, mode: str) -> None:
    async with stdio.client(mode, token="src") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        read = await client.call_tool("read_resource", {"uri": "file:///project/src/main.py"})
        hidden = await client.call_tool("read_resource", {"uri": HIDDEN})
    assert {"search_resources", "list_resources", "read_resource"} <= names
    assert not read.is_error and read.structured_content is not None
    assert read.structured_content["uri"] == "file:///project/src/main.py"
    assert hidden.is_error  # the token's grants, as for resources/read


async def test_results_carry_the_http_paths_cache_hints_cache_1(stdio: Stdio) -> None:
    async with stdio.client(MODERN) as client:
        page = await client.list_resources()
        read = await client.read_resource(WATCHED)
    assert (page.ttl_ms, page.cache_scope) == (10_000, "private")
    assert (read.ttl_ms, read.cache_scope) == (10_000, "private")


@pytest.mark.parametrize("mode", ERAS)
async def test_a_scoped_token_sees_only_what_its_grants_show_res_25(stdio: Stdio, mode: str) -> None:
    async with stdio.client(mode, token="src") as client:
        uris = await all_resources(client)
        with pytest.raises(MCPError) as refused:
            await client.read_resource(HIDDEN)
    assert uris and all(uri.startswith("file:///project/src") for uri in uris)
    expected = types.INVALID_PARAMS if mode == MODERN else -32002
    assert refused.value.error.code == expected


async def test_a_change_through_the_admin_api_arrives_on_a_listen_sub_4(stdio: Stdio) -> None:
    async with stdio.client(MODERN) as client:
        async with client.listen(resources_list_changed=True, resource_subscriptions=[WATCHED]) as sub:
            assert sub.honored.resource_subscriptions == [WATCHED]
            await put_text(stdio, WATCHED, "changed over the admin API")
            await put_text(stdio, "test://stdio/created-for-listen", "new")
            got: list[Any] = []
            with anyio.fail_after(WAIT):
                async for event in sub:
                    got.append(event)
                    if isinstance(event, ResourcesListChanged):
                        break
        reread = await client.read_resource(WATCHED)
    assert got == [ResourceUpdated(uri=WATCHED), ResourcesListChanged()]
    assert reread.contents[0].text == "changed over the admin API"  # type: ignore[union-attr]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_2025_session_is_told_of_its_subscriptions_and_list_changes_compat_3(stdio: Stdio) -> None:
    inbox = LegacyInbox()
    async with stdio.client("legacy", message_handler=inbox) as client:
        assert client.protocol_version == LEGACY
        assert client.server_capabilities.resources.subscribe is True  # type: ignore[union-attr]
        await client.session.subscribe_resource(WATCHED)  # pyright: ignore[reportDeprecated]
        await put_text(stdio, WATCHED, "changed for a 2025 session")
        assert await inbox.next_update(WAIT) == ResourceUpdated(uri=WATCHED)
        await put_text(stdio, "test://stdio/created-for-2025", "new")
        with anyio.fail_after(WAIT):
            while not isinstance(await inbox.next(WAIT), ResourcesListChanged):
                pass


async def test_a_change_it_may_not_see_is_not_told_sub_6(stdio: Stdio) -> None:
    async with stdio.client(MODERN, token="src") as client:
        async with client.listen(resources_list_changed=True) as sub:
            await put_text(stdio, "test://stdio/hidden-from-src", "not under src")
            await put_text(stdio, "file:///project/src/stdio.py", "print('seen')")
            with anyio.fail_after(WAIT):
                first = await anext(aiter(sub))
        page = await client.list_resources()
    assert first == ResourcesListChanged()
    assert "file:///project/src/stdio.py" in {str(r.uri) for r in page.resources}
    assert "test://stdio/hidden-from-src" not in {str(r.uri) for r in page.resources}


def launch(stdio: Stdio, token: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "catalog", "stdio", "--tenant", "demo"],
        env=stdio.env(token),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def request(id: int, method: str, params: dict[str, Any]) -> str:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": {**params, "_meta": meta}})


async def test_stdout_holds_nothing_but_protocol_and_stdin_closed_ends_it_with_0(stdio: Stdio) -> None:
    """STDIO-1: each stdout line one JSON-RPC message, nothing else; STDIO-4: stdin closed, the
    process ends, with 0."""
    process = launch(stdio, stdio.fixture.tokens["staff"])
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(
        request(1, "resources/list", {}) + "\n" + request(2, "resources/read", {"uri": WATCHED}) + "\n"
    )
    process.stdin.flush()
    # Each line one JSON-RPC message (answered concurrently, in whichever order they finish).
    answers = [json.loads(await anyio.to_thread.run_sync(process.stdout.readline)) for _ in range(2)]
    out, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=60))  # stdin closed
    assert (process.returncode, out) == (0, ""), err
    answers.sort(key=lambda m: m["id"])
    assert [m["id"] for m in answers] == [1, 2]
    assert all(m["jsonrpc"] == "2.0" and "result" in m for m in answers), answers
    assert answers[1]["result"]["contents"][0]["uri"] == WATCHED


async def test_a_revoked_token_ends_the_process_with_one_line(stdio: Stdio) -> None:
    minted = await mint_token(stdio.admin, "demo", scopes=["public"])
    process = launch(stdio, minted["token"])
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(request(1, "resources/list", {}) + "\n")
    process.stdin.flush()
    answer = await anyio.to_thread.run_sync(process.stdout.readline)
    assert json.loads(answer)["id"] == 1  # serving, with the token's events watched
    response = await stdio.admin.delete(f"{API}/tenants/demo/tokens/{minted['id']}")
    assert response.status_code == 204, response.text
    try:
        code = await anyio.to_thread.run_sync(lambda: process.wait(timeout=WAIT))
    finally:
        process.kill()  # a no-op once it has ended
        process.stdin.close()
        err = process.stderr.read() if process.stderr else ""
    assert code == 1
    assert "catalog: CATALOG_TOKEN: the token was revoked; stopping" in err.splitlines()


def refused(stdio: Stdio, token: str | None, tenant: str = "demo") -> tuple[int, str, str]:
    done = run_catalog("stdio", "--tenant", tenant, env=stdio.env(token), timeout=60)
    return done.returncode, done.stdout, done.stderr


async def test_a_missing_token_is_one_stderr_line_and_nothing_on_stdout(stdio: Stdio) -> None:
    code, out, err = refused(stdio, None)
    assert (code, out) == (1, "")
    assert err.strip().splitlines() == [err.strip()] and err.startswith("catalog: CATALOG_TOKEN is not set")


async def test_an_invalid_token_is_one_stderr_line_and_nothing_on_stdout(stdio: Stdio) -> None:
    code, out, err = refused(stdio, "cat_not-a-token-of-anyone")
    assert (code, out) == (1, "")
    assert err.strip() == "catalog: CATALOG_TOKEN: the token is invalid, expired or revoked"


async def test_another_tenants_token_is_refused(stdio: Stdio) -> None:
    code, out, err = refused(stdio, stdio.fixture.tokens["other-admin"])
    assert (code, out) == (1, "")
    assert err.strip() == "catalog: CATALOG_TOKEN: the token is not one of tenant 'demo'"


async def test_the_platform_admin_token_is_refused_naming_what_to_use(stdio: Stdio) -> None:
    code, out, err = refused(stdio, ADMIN_TOKEN)
    assert (code, out) == (1, "")
    assert err.startswith("catalog: CATALOG_TOKEN: the platform admin token is no tenant's")
    assert len(err.strip().splitlines()) == 1


async def test_an_unknown_tenant_is_refused(stdio: Stdio) -> None:
    code, out, err = refused(stdio, stdio.fixture.tokens["staff"], tenant="nosuch")
    assert (code, out) == (1, "")
    assert err.strip() == "catalog: --tenant nosuch: no such tenant"


class Lines:
    """A raw ``catalog stdio`` process: lines written to its stdin; its stdout read by a thread of
    its own into a queue, so that a wait for a line can time out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process, self.stdin = process, process.stdin
        self.seen: list[dict[str, Any]] = []
        self.lines: queue.Queue[str] = queue.Queue()
        stdout = process.stdout
        threading.Thread(target=lambda: [self.lines.put(line) for line in stdout], daemon=True).start()

    def send(self, message: str) -> None:
        self.stdin.write(message + "\n")
        self.stdin.flush()

    async def until(self, wanted: Any) -> dict[str, Any]:
        """Reads lines (each must be one JSON-RPC message) until one ``wanted(message)`` holds."""
        deadline = time.monotonic() + WAIT
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = await anyio.to_thread.run_sync(
                    functools.partial(self.lines.get, timeout=max(remaining, 0.01))
                )
            except queue.Empty:
                raise AssertionError(f"no such message within {WAIT} s; seen {self.seen}") from None
            message = json.loads(line)
            self.seen.append(message)
            if wanted(message):
                return message

    def rest(self) -> list[dict[str, Any]]:
        """The lines not read yet (after the process has ended)."""
        found = []
        while not self.lines.empty():
            found.append(json.loads(self.lines.get()))
        return found


def listen_request(id: str, uris: list[str]) -> str:
    meta = json.loads(request(0, "x", {}))["params"]["_meta"]
    params = {"_meta": meta, "notifications": {"resourceSubscriptions": uris}}
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params})


def subscription_of(message: dict[str, Any]) -> Any:
    return message.get("params", {}).get("_meta", {}).get("io.modelcontextprotocol/subscriptionId")


async def test_discover_first_then_a_cancelled_listen_is_sent_nothing_more_stdio_2_3_5(stdio: Stdio) -> None:
    """STDIO-5: ``server/discover`` as the very first line is answered, no handshake. STDIO-3 and
    SUB-11: after ``notifications/cancelled`` for listen "a", a change both listens watch reaches
    listen "b" only, and nothing more is sent for "a". ERR-5: the cancellation is not answered.
    SUB-14: both listens share stdout, each acknowledged before anything else is sent for it.
    STDIO-1/2: every stdout line is one JSON-RPC message, none of them a request."""
    lines = Lines(launch(stdio, stdio.fixture.tokens["staff"]))
    try:
        lines.send(request(1, "server/discover", {}))
        discovered = await lines.until(lambda m: m.get("id") == 1)
        assert MODERN in discovered["result"]["supportedVersions"], discovered
        lines.send(listen_request("a", [WATCHED]))
        lines.send(listen_request("b", [WATCHED]))
        acknowledged: set[str] = set()

        def both_acknowledged(message: dict[str, Any]) -> bool:
            if message.get("method") == "notifications/subscriptions/acknowledged":
                acknowledged.add(subscription_of(message))
            return acknowledged == {"a", "b"}

        await lines.until(both_acknowledged)
        cancelled_at = len(lines.seen)
        lines.send(
            json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "a"}})
        )
        await put_text(stdio, WATCHED, "changed while listen a is cancelled")
        updated = await lines.until(lambda m: m.get("method") == "notifications/resources/updated")
        assert (subscription_of(updated), updated["params"]["uri"]) == ("b", WATCHED)
        # A request answered after the delivery: anything still going to "a" would have come by now.
        lines.send(request(9, "resources/read", {"uri": WATCHED}))
        answer = await lines.until(lambda m: m.get("id") == 9)
        assert answer["result"]["contents"][0]["text"] == "changed while listen a is cancelled"
    finally:
        lines.stdin.close()
        code = await anyio.to_thread.run_sync(lambda: lines.process.wait(timeout=60))
    after_cancel = lines.seen[cancelled_at:] + lines.rest()
    assert [m for m in after_cancel if subscription_of(m) == "a" or m.get("id") == "a"] == [], after_cancel
    assert all(m["jsonrpc"] == "2.0" for m in lines.seen)
    assert [m for m in lines.seen if "method" in m and "id" in m] == []  # never a request
    for listen in ("a", "b"):  # SUB-14: on the shared stdout, each listen's acknowledgement first
        first = next(m for m in lines.seen if subscription_of(m) == listen)
        assert first["method"] == "notifications/subscriptions/acknowledged", first
    assert code == 0


async def test_a_discover_probe_then_initialize_switches_to_the_2025_era_compat_10(stdio: Stdio) -> None:
    """COMPAT-10: a dual-era client probes with ``server/discover``, answered before any
    ``initialize``; an ``initialize`` after it opens a 2025-11-25 session on the same process,
    whose requests carry no ``_meta`` envelope."""
    lines = Lines(launch(stdio, stdio.fixture.tokens["staff"]))
    try:
        lines.send(request(1, "server/discover", {}))
        discovered = await lines.until(lambda m: m.get("id") == 1)
        assert discovered["result"]["supportedVersions"] == [MODERN]
        hello = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        lines.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": hello}))
        initialized = await lines.until(lambda m: m.get("id") == 2)
        assert initialized["result"]["protocolVersion"] == LEGACY, initialized
        lines.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        lines.send(
            json.dumps({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": WATCHED}})
        )
        read = await lines.until(lambda m: m.get("id") == 3)
        assert read["result"]["contents"][0]["uri"] == WATCHED, read
    finally:
        lines.stdin.close()
        code = await anyio.to_thread.run_sync(lambda: lines.process.wait(timeout=60))
    assert code == 0
