"""The console in a real browser: Chromium (Debian's ``chromium``) driven by Playwright, against
``catalog serve`` in a subprocess on real PostgreSQL, with a tenant of 10,000 resources.

Each test is a curator's task in the console (sign in, browse and search, edit through a conflict,
upload, restore, grant and watch an agent's view, tokens for an MCP client, live changes, tenant
isolation, keyboard only, offline docs). Screenshots go to ``$CATALOG_CONSOLE_ARTIFACTS`` (default:
a temporary directory); with ``CATALOG_CONSOLE_README_SHOTS=1`` the README's go to docs/console.
No assertion is on pixels.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import struct
import tempfile
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright  # the `test` extra installs it

from tests.mcp_helpers import MODERN, module_database
from tests.processes import Served, catalog_env, run_catalog, serving, started

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="the browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
    pytest.mark.asyncio(loop_scope="session"),
]

ROOT = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "cat_console-browser-test-platform-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
TENANT = "big"
RESOURCES = 10_000
PER_FOLDER = 200
# Made at import: creating directories is no work for the event loop of the tests.
ARTIFACTS = Path(
    os.environ.get("CATALOG_CONSOLE_ARTIFACTS") or Path(tempfile.gettempdir()) / "catalog-console"
)
README_SHOTS = ROOT / "docs" / "console"
ARTIFACTS.mkdir(parents=True, exist_ok=True)
if os.environ.get("CATALOG_CONSOLE_README_SHOTS"):
    README_SHOTS.mkdir(parents=True, exist_ok=True)
WAIT_MS = 10_000


def item_uri(i: int) -> str:
    return f"file:///data/d{i // PER_FOLDER:02d}/item-{i:05d}.txt"


def png(width: int = 2, height: int = 2, pixels: Callable[[int], bytes] | None = None) -> bytes:
    """A valid RGB PNG (no imaging library needed): a flat colour, or each row's ``pixels(width)``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = pixels or (lambda width: b"\xd0\x40\x20" * width)
    rows = b"".join(b"\x00" + row(width) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# -- the server, its data, the browser ------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def console_database(postgres_server: Any, template_database: str) -> AsyncIterator[str]:
    async with module_database(postgres_server, template_database) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
def server(console_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``catalog serve`` with tenant ``big``: 10,000 resources loaded by ``catalog import`` (the
    bulk path a curator would use), in 50 folders of 200."""
    home = tmp_path_factory.mktemp("console-home")
    env = catalog_env(
        CATALOG_DATABASE_URL=console_database, CATALOG_HOME=str(home), CATALOG_ADMIN_TOKEN=ADMIN_TOKEN
    )
    assert run_catalog("tenant", "create", TENANT, env=env).returncode == 0
    dump = home / "big.jsonl"
    with dump.open("w") as out:
        for i in range(RESOURCES):
            body = {
                "uri": item_uri(i),
                "name": f"item-{i:05d}.txt",
                "mimeType": "text/plain",
                "text": f"record {i}\nsearch token zebra{i:05d}\n",
            }
            out.write(json.dumps(body) + "\n")
    imported = run_catalog("import", "--tenant", TENANT, str(dump), env=env, timeout=600)
    assert imported.returncode == 0, imported.stderr
    with serving(env=env) as served:
        started(served)
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api(server: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"{server.base_url}/admin/v1", headers=ADMIN, timeout=30) as client:
        yield client


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser() -> AsyncIterator[Any]:
    async with async_playwright() as driver:
        chromium = await driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Any, server: Served, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A fresh tab (own sessionStorage); a screenshot of where it ended is kept as an artifact."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    tab = await context.new_page()
    tab.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
        assert errors == [], errors  # no script error on any page the test visited
    finally:
        await tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}-end.png"), full_page=True)
        await context.close()


async def shot(page: Any, name: str, *, readme: bool = False) -> None:
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    if readme and os.environ.get("CATALOG_CONSOLE_README_SHOTS"):
        await page.screenshot(path=str(README_SHOTS / f"{name}.png"))


async def sign_in(page: Any, server: Served, token: str = ADMIN_TOKEN) -> None:
    await page.goto(f"{server.base_url}/console")
    await page.fill("#token", token)
    await page.press("#token", "Enter")
    await page.wait_for_selector("#whoami")


async def open_hash(page: Any, server: Served, fragment: str) -> None:
    await page.goto(f"{server.base_url}/console#{fragment}")


async def resource_id(api: httpx.AsyncClient, uri: str) -> int:
    items = (await api.get(f"/tenants/{TENANT}/resources", params={"uriPrefix": uri, "limit": 1})).json()[
        "items"
    ]
    assert items and items[0]["uri"] == uri
    return int(items[0]["id"])


async def wait_until(page: Any, expression: str) -> None:
    """Until ``expression`` is true in the page. Playwright's ``wait_for_function`` evaluates a
    string in the page, which the console's CSP (no unsafe-eval) forbids; ``evaluate`` is not."""
    deadline = asyncio.get_running_loop().time() + WAIT_MS / 1000
    while not await page.evaluate(expression):
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"not true within {WAIT_MS} ms: {expression}")
        await asyncio.sleep(0.05)


async def listing_rows(page: Any) -> list[str]:
    return await page.locator("#listing tbody tr td:first-child a").all_inner_texts()


# -- the tests ------------------------------------------------------------------------------------


async def test_sign_in_and_find_a_resource_among_ten_thousand_by_tree_and_by_search(
    page: Any, server: Served
) -> None:
    await sign_in(page, server)
    assert await page.inner_text("#whoami") == "platform admin"
    await page.wait_for_selector(f"#tenants tr[data-slug='{TENANT}']")
    await shot(page, "tenants", readme=True)
    await page.click(f"#tenants tr[data-slug='{TENANT}'] >> text=Open")
    await page.wait_for_selector("#listing a.folder")
    assert await listing_rows(page) == ["file:///"]
    await page.click("#listing a.folder")
    await page.click("#listing a:text-is('data/')")
    await page.wait_for_selector("#listing a:text-is('d07/')")
    folders = await listing_rows(page)
    assert len(folders) == RESOURCES // PER_FOLDER and folders[0] == "d00/" and folders[-1] == "d49/"
    await page.click("#listing a:text-is('d07/')")
    await page.wait_for_selector("#listing a:text-is('item-01400.txt')")
    assert len(await listing_rows(page)) == 100 and await page.is_visible("#more")
    await shot(page, "browse", readme=True)
    await page.click("#more")  # the next keyset page of the folder
    await page.wait_for_selector("#listing a:text-is('item-01599.txt')")
    assert len(await listing_rows(page)) == PER_FOLDER and not await page.is_visible("#more")
    # A word that occurs only in one resource's text, not in any name or URI.
    await page.fill("#search", "zebra04321")
    await page.press("#search", "Enter")
    await page.wait_for_selector("#listing a.file")
    assert await page.inner_text("h1") == "Search: zebra04321"
    await wait_until(page, "document.querySelector('#listing-status').textContent.startsWith('1 matches')")
    assert await listing_rows(page) == [item_uri(4321)]
    await shot(page, "search", readme=True)
    await page.click("#listing a.file")
    await page.wait_for_selector("#content-text")
    assert "zebra04321" in await page.inner_text("#content-text")
    assert (await page.inner_text("#etag")).startswith('"')


async def test_create_edit_through_a_conflict_and_restore_an_old_version(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/new?prefix=file:///notes/")
    await page.fill("#new-uri", "file:///notes/plan.md")
    await page.fill("#new-name", "plan")
    await page.fill("#new-mime", "text/markdown")
    await page.fill("#new-text", "first draft")
    await page.click("#new-resource button[type=submit]")
    await page.wait_for_selector("h1:text-is('plan')")
    rid = await resource_id(api, "file:///notes/plan.md")
    assert await page.inner_text("#content-text") == "first draft"

    await page.click("#edit-link")
    await page.fill("#edit-text", "second draft")
    await page.click("#save")
    await page.wait_for_selector("#content-text:text-is('second draft')")
    assert (await api.get(f"/tenants/{TENANT}/resources/{rid}")).json()["version"] == 2

    # A concurrent write through the API while the curator edits: saving is a 412 that shows it.
    await page.click("#edit-link")
    await page.fill("#edit-text", "third draft, mine")
    other = await api.patch(f"/tenants/{TENANT}/resources/{rid}", json={"text": "written by a colleague"})
    assert other.status_code == 200
    await page.click("#save")
    conflict = await page.wait_for_selector("#conflict")
    assert "412" in await conflict.inner_text() and "written by a colleague" in await conflict.inner_text()
    await shot(page, "conflict", readme=True)
    await page.click("#conflict-overwrite")
    await page.wait_for_selector("#content-text:text-is('third draft, mine')")
    stored = (await api.get(f"/tenants/{TENANT}/resources/{rid}", params={"include": "content"})).json()
    assert (stored["version"], stored["text"]) == (4, "third draft, mine")

    await page.click("#history-link")
    await page.wait_for_selector("#versions tr[data-version='1']")
    await page.check("#versions tr[data-version='1'] input[name=side-a]")
    await page.check("#versions tr[data-version='4'] input[name=side-b]")
    await page.click("#compare")
    await page.wait_for_selector("#diff .del:text-is('- first draft')")
    assert await page.is_visible("#diff .add:text-is('+ third draft, mine')")
    await shot(page, "history", readme=True)
    restore = page.locator("#versions tr[data-version='1'] button")
    await restore.click()
    assert await restore.inner_text() == "Confirm restore of v1"
    await restore.click()
    await page.wait_for_selector("#content-text:text-is('first draft')")
    stored = (await api.get(f"/tenants/{TENANT}/resources/{rid}", params={"include": "content"})).json()
    assert (stored["version"], stored["text"]) == (5, "first draft")
    audit = (await api.get(f"/tenants/{TENANT}/audit", params={"limit": 1})).json()["items"][0]
    assert (audit["action"], audit["principal"]) == ("resource.restore", "platform-admin")


async def test_upload_several_files_and_see_the_png_preview(
    page: Any, server: Served, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    picture = tmp_path / "pixel.png"
    picture.write_bytes(png(3, 2))
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/upload")
    await page.fill("#upload-prefix", "file:///uploads/")
    await page.set_input_files("#upload-files", str(picture))
    await page.wait_for_selector("#upload-list li[data-file='pixel.png'] >> text=done")
    # Two more at once by drag and drop.
    transfer = await page.evaluate_handle(
        """() => { const t = new DataTransfer();
                   t.items.add(new File(['alpha'], 'a.txt', {type: 'text/plain'}));
                   t.items.add(new File(['{"b": 1}'], 'b.json', {type: 'application/json'}));
                   return t; }"""
    )
    await page.dispatch_event("#drop-zone", "drop", {"dataTransfer": transfer})
    await page.wait_for_selector("#upload-list li[data-file='a.txt'] >> text=done")
    await page.wait_for_selector("#upload-list li[data-file='b.json'] >> text=done")
    assert await page.eval_on_selector_all("#upload-list progress", "bars => bars.map(b => b.value)") == [
        1,
        1,
        1,
    ]
    uploaded = (
        await api.get(f"/tenants/{TENANT}/resources", params={"uriPrefix": "file:///uploads/"})
    ).json()["items"]
    assert {(r["uri"], r["mimeType"], r["size"]) for r in uploaded} == {
        ("file:///uploads/pixel.png", "image/png", len(picture.read_bytes())),
        ("file:///uploads/a.txt", "text/plain", 5),
        ("file:///uploads/b.json", "application/json", 8),
    }
    await page.click("#upload-list li[data-file='pixel.png'] a")
    image = await page.wait_for_selector("#image-preview")
    await wait_until(page, "document.querySelector('#image-preview').complete")
    # Decoded by the browser from the blob the console fetched with the token: 3 x 2 pixels.
    assert await image.evaluate("img => [img.naturalWidth, img.naturalHeight]") == [3, 2]
    await shot(page, "resource-png", readme=True)


async def test_a_grant_changes_the_scope_preview_and_a_new_token_reads_it_over_mcp(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/grants")
    await page.fill("#preview-scope", "agents")
    await page.click("#preview-form button")
    await page.wait_for_selector("#scope-count:text-is('Scope “agents” sees 0 resources.')")
    await page.fill("#grant-scope", "agents")
    await page.select_option("#grant-kind", "uriPrefix")
    await page.fill("#grant-value", "file:///data/d01/")
    await page.click("#grant-form button")
    await page.wait_for_selector("#scope-count:has-text('sees 200 resources; first 100:')")
    assert await page.locator("#scope-preview li").count() == 100
    await shot(page, "grants", readme=True)

    await open_hash(page, server, f"/t/{TENANT}/tokens")
    await page.fill("#token-name", "agent")
    await page.fill("#token-scopes", "agents")
    await page.click("#token-form button[type=submit]")
    secret = await (await page.wait_for_selector("#token-secret")).inner_text()
    assert secret.startswith("cat_")
    await shot(page, "token", readme=True)
    await page.wait_for_selector("#tokens td:text-is('agent')")

    async def agent_sees() -> list[str]:
        transport = streamable_http_client(
            server.mcp_url,
            http_client=httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30),
        )
        uris: list[str] = []
        async with Client(transport, mode=MODERN, cache=None) as client:
            cursor = None
            while True:
                listed = await client.list_resources(cursor=cursor)
                uris += [str(r.uri) for r in listed.resources]
                cursor = listed.next_cursor
                if cursor is None:
                    return uris

    seen = await agent_sees()
    assert seen == [item_uri(i) for i in range(PER_FOLDER, 2 * PER_FOLDER)]


async def test_a_change_made_through_the_api_appears_live(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/activity")
    await page.wait_for_selector("#audit tbody tr")
    # The stream is open once the page has loaded; the write comes from another client.
    await page.wait_for_selector("body[data-live='on']")
    created = await api.post(
        f"/tenants/{TENANT}/resources", json={"uri": "file:///live/hello.txt", "name": "hello", "text": "hi"}
    )
    assert created.status_code == 201
    await page.wait_for_selector("#live .event:has-text('resource created: file:///live/hello.txt')")
    await page.wait_for_selector("#changes-body tr:has-text('file:///live/hello.txt')")
    await page.select_option("#changes-kind", "grant")
    assert not await page.is_visible("#changes-body tr:has-text('file:///live/hello.txt')")
    await page.select_option("#changes-kind", "resource")
    await shot(page, "activity", readme=True)


async def test_a_tenant_admin_cannot_reach_another_tenants_pages(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    assert (await api.post("/tenants", json={"slug": "small"})).status_code == 201
    token = (await api.post("/tenants/small/tokens", json={"admin": True, "scopes": []})).json()["token"]
    await sign_in(page, server, token)
    assert await page.inner_text("#whoami") == "admin of small"
    await page.wait_for_selector("#listing")
    for section in ("browse", "tokens", "grants", "activity"):
        await open_hash(page, server, f"/t/{TENANT}/{section}")
        problem = await page.wait_for_selector(".problem[data-status='403']")
        assert "403" in await problem.inner_text()
        content = await page.inner_text("main")
        assert "item-" not in content and "file:///data" not in content and "cat_" not in content
    await open_hash(page, server, f"/t/{TENANT}/r/{(await resource_id(api, item_uri(1)))}")
    await page.wait_for_selector(".problem[data-status='403']")
    assert "zebra" not in await page.inner_text("main")
    # Its tenant list names only its own tenant.
    mine = (await api.get("/tenants", headers={"Authorization": f"Bearer {token}"})).json()["items"]
    assert [t["slug"] for t in mine] == ["small"]


async def tab_to(page: Any, selector: str, limit: int = 80) -> None:
    """Press Tab until the element matching ``selector`` (a Playwright selector) has the focus."""
    target = page.locator(selector)
    await target.wait_for()
    for _ in range(limit):
        if await target.evaluate("element => element === document.activeElement"):
            return
        await page.keyboard.press("Tab")
    pytest.fail(f"Tab never reached {selector}")


async def test_keyboard_only_sign_in_browse_and_edit(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await page.goto(f"{server.base_url}/console")
    await page.wait_for_selector("#token:focus")
    await page.keyboard.type(ADMIN_TOKEN)
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#tenants")
    await tab_to(page, f"#tenants tr[data-slug='{TENANT}'] a")
    await page.keyboard.press("Enter")
    for folder in ("file:///", "data/", "d03/"):
        await page.wait_for_selector(f"#listing a:text-is('{folder}')")
        await tab_to(page, f"#listing a:text-is('{folder}')")
        # The focused element shows it: a visible outline (CSS, not pixels).
        assert await page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
        await page.keyboard.press("Enter")
    await page.wait_for_selector("#listing a:text-is('item-00600.txt')")
    await tab_to(page, "#listing a:text-is('item-00600.txt')")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#edit-link")
    await tab_to(page, "#edit-link")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#edit-title")
    await tab_to(page, "#edit-title")
    await page.keyboard.type("Reached by keyboard")
    await tab_to(page, "#save")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#meta dd:text-is('Reached by keyboard')")
    stored = (await api.get(f"/tenants/{TENANT}/resources/{(await resource_id(api, item_uri(600)))}")).json()
    assert stored["title"] == "Reached by keyboard"
    await tab_to(page, "#signout")
    await page.keyboard.press("Enter")
    await page.wait_for_selector("#token")
    assert await page.evaluate("sessionStorage.length") == 0


async def test_curator_text_is_never_run_as_html(page: Any, server: Served, api: httpx.AsyncClient) -> None:
    hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    created = await api.post(
        f"/tenants/{TENANT}/resources",
        json={"uri": "file:///hostile.html", "name": hostile, "mimeType": "text/html", "text": hostile},
    )
    assert created.status_code == 201
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/r/{created.json()['id']}")
    await page.wait_for_selector("#content-text")
    assert await page.inner_text("h1") == hostile
    assert await page.inner_text("#content-text") == hostile
    assert await page.evaluate("window.__pwned") is None
    response = await api.get(f"{server.base_url}/console")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy


async def test_docs_and_redoc_work_without_internet(page: Any, server: Served) -> None:
    outside: list[str] = []

    async def only_this_server(route: Any) -> None:
        if route.request.url.startswith(server.base_url):
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    await page.route("**/*", only_this_server)
    await page.goto(f"{server.base_url}/docs")
    await page.wait_for_selector(".swagger-ui .info")
    assert await page.is_visible(".swagger-ui .btn.authorize")  # the bearer scheme is declared
    await page.goto(f"{server.base_url}/redoc")
    await page.wait_for_selector("h1:has-text('catalog')", timeout=20_000)
    assert outside == []


async def test_a_template_is_previewed_live_while_written(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/templates")
    await page.click("#new-template")
    await page.fill("#tpl-uri", "file:///users/{id}.json")
    await page.fill("#tpl-name", "user")
    await page.fill("#tpl-mime", "application/json")
    await page.fill("#tpl-text", '{"user": "{id}"}')
    await page.fill("#tpl-arg-id", 'ann"e')
    # Rendered as resources/read would: the value escaped for JSON, the URI percent-encoded.
    await page.wait_for_selector('#tpl-preview-text:text-is(\'{"user": "ann\\\\"e"}\')')
    assert await page.inner_text("#tpl-preview-uri") == "file:///users/ann%22e.json"
    await shot(page, "templates", readme=True)
    await page.click("#tpl-save")
    await page.wait_for_selector("#templates code:text-is('file:///users/{id}.json')")
    stored = (await api.get(f"/tenants/{TENANT}/templates")).json()["items"]
    assert [(t["uriTemplate"], t["text"]) for t in stored] == [
        ("file:///users/{id}.json", '{"user": "{id}"}')
    ]


async def test_a_pdf_is_previewed_in_a_frame_from_its_blob(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    pdf = (
        b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj 2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>"
        b"endobj 3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 100]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n"
    )
    created = await api.post(
        f"/tenants/{TENANT}/resources",
        json={
            "uri": "file:///docs/one.pdf",
            "name": "one.pdf",
            "mimeType": "application/pdf",
            "blob": base64.b64encode(pdf).decode(),
        },
    )
    assert created.status_code == 201, created.text
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/r/{created.json()['id']}")
    frame = await page.wait_for_selector("#pdf-preview")
    # The console fetched the bytes with its token and framed them from a blob: URL of its own.
    assert (await frame.get_attribute("src")).startswith("blob:")
    assert await page.inner_text("#meta") and "application/pdf" in await page.inner_text("#meta")


ACTIVE_BLOBS = [
    (
        "file:///hostile/page.html",
        "text/html",
        b"<html><body><script>window.__pwned = 1; document.title = 'pwned'</script></body></html>",
    ),
    (
        "file:///hostile/picture.svg",
        "image/svg+xml",
        b'<svg xmlns="http://www.w3.org/2000/svg" width="2" height="2">'
        b"<script>window.__pwned = 1; document.title = 'pwned'</script></svg>",
    ),
]


@pytest.mark.parametrize(("uri", "mime_type", "data"), ACTIVE_BLOBS)
async def test_a_download_link_opened_directly_runs_no_script_from_the_blob(
    page: Any, server: Served, api: httpx.AsyncClient, uri: str, mime_type: str, data: bytes
) -> None:
    """The console's Download link is a blob: URL in the console's own origin (the bytes were
    fetched with the token). Typed as the curator's HTML or SVG it would render there, script and
    all, when opened in a tab of its own; it is typed application/octet-stream, so it downloads."""
    created = await api.put(
        f"/tenants/{TENANT}/resources",
        params={"uri": uri},
        json={"name": uri.rsplit("/", 1)[1], "mimeType": mime_type, "blob": base64.b64encode(data).decode()},
    )
    assert created.status_code in (200, 201), created.text
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/r/{created.json()['id']}")
    link = await page.wait_for_selector("#preview a[download]")
    href = await link.get_attribute("href")
    assert href is not None and href.startswith(f"blob:{server.base_url}/")
    assert await page.query_selector("#image-preview") is None  # an SVG is not rendered, even in <img>
    opened = await page.context.new_page()
    try:
        downloads: asyncio.Queue[Any] = asyncio.Queue()
        opened.on("download", downloads.put_nowait)
        with contextlib.suppress(PlaywrightError):  # the navigation is aborted: it became a download
            await opened.goto(href)
        assert await opened.evaluate("[window.__pwned ?? null, document.title]") == [None, ""]
        download = await asyncio.wait_for(downloads.get(), WAIT_MS / 1000)
        assert download.url == href
        assert (await download.path()).read_bytes() == data  # the bytes, saved, not rendered
    finally:
        await opened.close()


async def test_a_curator_sets_a_resources_cache_hint_and_a_bad_one_is_named(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    uri = "file:///notes/often-changed.md"
    created = await api.put(
        f"/tenants/{TENANT}/resources", params={"uri": uri}, json={"name": "often", "text": "v1"}
    )
    rid = created.json()["id"]
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/r/{rid}")
    assert await page.inner_text("#ttl") == "server default"
    await page.click("#edit-link")
    await page.fill("#edit-ttl", "1.5")
    await page.click("#save")
    problem = await page.wait_for_selector("#save-result .problem")
    assert "422" in await problem.inner_text() and "/ttlMs" in await problem.inner_text()
    await page.fill("#edit-ttl", "2500")
    await page.click("#save")
    await page.wait_for_selector("#ttl:text-is('2500 ms')")
    assert (await api.get(f"/tenants/{TENANT}/resources/{rid}")).json()["ttlMs"] == 2500
    token = (await api.post(f"/tenants/{TENANT}/tokens", json={"admin": True})).json()["token"]
    transport = streamable_http_client(
        f"{server.base_url}/mcp", http_client=httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    )
    async with Client(transport, mode=MODERN, cache=None) as client:
        read = await client.read_resource(uri)
    assert read.ttl_ms == 2500  # what an agent's client is told to keep it for
    await page.click("#edit-link")
    await page.fill("#edit-ttl", "")
    await page.click("#save")
    await page.wait_for_selector("#ttl:text-is('server default')")
    assert "ttlMs" not in (await api.get(f"/tenants/{TENANT}/resources/{rid}")).json()
