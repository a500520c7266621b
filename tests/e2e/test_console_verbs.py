"""The console's curator verbs in a real browser (Chromium through Playwright, as
``test_console_browser.py``), against ``catalog serve`` in a subprocess on real PostgreSQL: delete a
resource from its page, act on a selection of the listing (delete, add a tag, grant), thumbnails of
small images, and a token's scopes leading to what each sees. Every outcome is checked over the
admin API too. The tenant is small: each test makes what it needs under its own folder.
"""

from __future__ import annotations

import base64
import random
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.e2e.test_console_browser import ARTIFACTS, CHROMIUM, WAIT_MS, browser, png, wait_until
from tests.mcp_helpers import module_database
from tests.processes import Served, catalog_env, run_catalog, serving, started

__all__ = ["browser"]  # a fixture, used by name

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="the browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
    pytest.mark.asyncio(loop_scope="session"),
]

ADMIN_TOKEN = "cat_console-verbs-test-platform-admin"
TENANT = "verbs"


def noisy_png(width: int, height: int) -> bytes:
    """A valid RGB PNG of random pixels: it does not compress, so its size is about 3 bytes a pixel."""
    noise = random.Random(width * height)
    return png(width, height, pixels=lambda width: noise.randbytes(3 * width))


# -- the server, the browser ----------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def verbs_database(postgres_server: Any, template_database: str) -> AsyncIterator[str]:
    async with module_database(postgres_server, template_database) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
def server(verbs_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("verbs-home")
    env = catalog_env(
        CATALOG_DATABASE_URL=verbs_database, CATALOG_HOME=str(home), CATALOG_ADMIN_TOKEN=ADMIN_TOKEN
    )
    assert run_catalog("tenant", "create", TENANT, env=env).returncode == 0
    with serving(env=env) as served:
        started(served)
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api(server: Served) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with httpx.AsyncClient(
        base_url=f"{server.base_url}/admin/v1", headers=headers, timeout=30
    ) as client:
        yield client


@pytest_asyncio.fixture(loop_scope="session")
async def page(browser: Any, server: Served, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """A fresh tab, signed in as the platform admin; no script error on any page it visited."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    tab = await context.new_page()
    tab.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        await tab.goto(f"{server.base_url}/console")
        await tab.fill("#token", ADMIN_TOKEN)
        await tab.press("#token", "Enter")
        await tab.wait_for_selector("#whoami")
        yield tab
        assert errors == [], errors
    finally:
        await tab.screenshot(path=str(ARTIFACTS / f"{request.node.name}-end.png"), full_page=True)
        await context.close()


async def open_hash(page: Any, server: Served, fragment: str) -> None:
    await page.goto(f"{server.base_url}/console#{fragment}")


async def put(api: httpx.AsyncClient, uri: str, **body: Any) -> dict[str, Any]:
    body.setdefault("name", uri.rsplit("/", 1)[-1])
    if "text" not in body and "blob" not in body:
        body["text"] = uri
    response = await api.post(f"/tenants/{TENANT}/resources", json={"uri": uri, **body})
    assert response.status_code == 201, response.text
    return response.json()


async def listed(api: httpx.AsyncClient, prefix: str) -> list[str]:
    items = (await api.get(f"/tenants/{TENANT}/resources", params={"uriPrefix": prefix, "limit": 100})).json()
    return [item["uri"] for item in items["items"]]


async def listing_names(page: Any) -> list[str]:
    return await page.locator("#listing tbody tr td:first-child a").all_inner_texts()


async def browse(page: Any, server: Served, prefix: str, first: str) -> None:
    """The folder ``prefix`` in the listing, once its entry ``first`` is shown."""
    await open_hash(page, server, f"/t/{TENANT}/browse?prefix={prefix}")
    await page.wait_for_selector(f"#listing a:text-is('{first}')")


# -- delete one -----------------------------------------------------------------------------------


async def test_deleting_from_a_resources_page_confirms_by_uri_then_returns_to_its_folder_without_it(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    doomed = await put(api, "file:///del/doomed.txt")
    await put(api, "file:///del/kept.txt")
    await open_hash(page, server, f"/t/{TENANT}/r/{doomed['id']}")
    await page.click("#delete-resource")
    dialog = await page.wait_for_selector("#delete-dialog")
    assert "Delete file:///del/doomed.txt?" in await dialog.inner_text()
    assert await page.inner_text("#delete-confirm") == "Delete file:///del/doomed.txt"
    # Cancelling deletes nothing.
    await page.click("#delete-cancel")
    assert await page.locator("#delete-dialog").count() == 0
    assert (await api.get(f"/tenants/{TENANT}/resources/{doomed['id']}")).status_code == 200

    await page.click("#delete-resource")
    await page.click("#delete-confirm")
    await page.wait_for_selector("#listing a:text-is('kept.txt')")
    assert "prefix=file%3A%2F%2F%2Fdel%2F" in page.url
    assert await listing_names(page) == ["kept.txt"]
    assert (await api.get(f"/tenants/{TENANT}/resources/{doomed['id']}")).status_code == 404
    assert await listed(api, "file:///del/") == ["file:///del/kept.txt"]
    audit = (await api.get(f"/tenants/{TENANT}/audit", params={"limit": 1})).json()["items"][0]
    assert (audit["action"], audit["uri"]) == ("resource.delete", "file:///del/doomed.txt")


async def test_deleting_a_resource_changed_since_the_page_loaded_is_412_then_reload_or_delete_anyway(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    target = await put(api, "file:///stale/target.txt")
    await open_hash(page, server, f"/t/{TENANT}/r/{target['id']}")
    await page.wait_for_selector("#etag")
    changed = await api.patch(
        f"/tenants/{TENANT}/resources/{target['id']}", json={"text": "changed by a colleague"}
    )
    assert changed.status_code == 200
    await page.click("#delete-resource")
    await page.click("#delete-confirm")
    conflict = await page.wait_for_selector("#delete-conflict")
    text = await conflict.inner_text()
    assert "412" in text and "nothing was deleted" in text and f"ETag {changed.headers['etag']}" in text
    stored = (
        await api.get(f"/tenants/{TENANT}/resources/{target['id']}", params={"include": "content"})
    ).json()
    assert (stored["version"], stored["text"]) == (2, "changed by a colleague")
    # Reload keeps it and shows the new version; deleting anyway acts on the version seen in the 412.
    await page.click("#delete-reload")
    await page.wait_for_selector(f"#etag:text-is('{changed.headers['etag']}')")
    await page.click("#delete-resource")
    changed = await api.patch(f"/tenants/{TENANT}/resources/{target['id']}", json={"text": "again"})
    await page.click("#delete-confirm")
    await page.wait_for_selector("#delete-conflict")
    await page.click("#delete-anyway")
    await page.wait_for_selector("#listing")
    assert (await api.get(f"/tenants/{TENANT}/resources/{target['id']}")).status_code == 404


# -- act on a selection ---------------------------------------------------------------------------


async def check(page: Any, uri: str) -> None:
    await page.check(f"#listing tr[data-uri='{uri}'] input.select")


async def test_selected_resources_are_tagged_granted_and_deleted_at_once(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    uris = [f"file:///sel/{n}.txt" for n in ("a", "b", "c", "d")]
    for uri in uris:
        await put(api, uri)
    await browse(page, server, "file:///sel/", "a.txt")
    assert not await page.is_visible("#selection-delete")
    for uri in uris[:3]:
        await check(page, uri)
    assert await page.inner_text("#selection-count") == "3 selected"

    await page.click("#selection-tag")
    await page.fill("#selection-tag-value", "reviewed")
    await page.click("#selection-tag-apply")
    done = await page.wait_for_selector("#selection-done")
    assert await done.inner_text() == "Tagged 3 of 3 with “reviewed” (the others had it)."
    tagged = (await api.get(f"/tenants/{TENANT}/resources", params={"tag": "reviewed"})).json()["items"]
    assert [r["uri"] for r in tagged] == uris[:3]
    await wait_until(page, "document.querySelectorAll('#listing input.select:checked').length === 0")

    await check(page, uris[1])
    await check(page, uris[3])
    await page.click("#selection-grant")
    await page.fill("#selection-scope", "sel-viewers")
    await page.click("#selection-grant-apply")
    done = await page.wait_for_selector("#selection-done:has-text('sel-viewers')")
    assert await done.inner_text() == "Scope “sel-viewers” got 2 new grants of 2 URIs. What it sees"
    grants = (await api.get(f"/tenants/{TENANT}/grants")).json()["items"]
    assert sorted(g["uri"] for g in grants if g["scope"] == "sel-viewers") == [uris[1], uris[3]]
    await page.click("#selection-preview")
    await page.wait_for_selector("#scope-count:text-is('Scope “sel-viewers” sees 2 resources; first 2:')")

    await browse(page, server, "file:///sel/", "a.txt")
    await page.check("#select-all")
    assert await page.inner_text("#selection-count") == "4 selected"
    await page.click("#selection-delete")
    await page.click("#selection-delete-confirm")
    done = await page.wait_for_selector("#selection-done")
    assert await done.inner_text() == "Deleted 4 resources."
    await wait_until(page, "document.querySelectorAll('#listing tbody tr').length === 0")
    assert await listed(api, "file:///sel/") == []


async def test_a_selection_that_cannot_all_be_done_names_the_resource_and_changes_none(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    kept = await put(api, "file:///half/kept.txt")
    gone = await put(api, "file:///half/gone.txt")
    await browse(page, server, "file:///half/", "gone.txt")
    await check(page, "file:///half/kept.txt")
    await check(page, "file:///half/gone.txt")
    # Deleted behind the console's back: the batch must refuse as a whole.
    assert (await api.delete(f"/tenants/{TENANT}/resources/{gone['id']}")).status_code == 204
    await page.click("#selection-tag")
    await page.fill("#selection-tag-value", "half")
    await page.click("#selection-tag-apply")
    problem = await page.wait_for_selector("#selection-result .problem[data-status='422']")
    text = await problem.inner_text()
    assert "file:///half/gone.txt" in text and "nothing was changed" in text
    stored = (await api.get(f"/tenants/{TENANT}/resources/{kept['id']}")).json()
    assert (stored["tags"], stored["version"]) == ([], 1)


# -- thumbnails -----------------------------------------------------------------------------------


async def test_small_images_get_thumbnails_when_scrolled_into_view_and_big_or_svg_ones_an_icon(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    small = base64.b64encode(png(3, 2)).decode()
    big = noisy_png(320, 320)
    assert len(big) > 256 * 1024
    await put(api, "file:///pics/a-top.png", blob=small, mimeType="image/png")
    for n in range(60):  # enough rows to push the last ones out of an 800-pixel viewport
        await put(api, f"file:///pics/m-{n:02d}.txt")
    await put(
        api,
        "file:///pics/x-vector.svg",
        text="<svg xmlns='http://www.w3.org/2000/svg'/>",
        mimeType="image/svg+xml",
    )
    await put(api, "file:///pics/y-big.png", blob=base64.b64encode(big).decode(), mimeType="image/png")
    await put(api, "file:///pics/z-bottom.png", blob=small, mimeType="image/png")
    await browse(page, server, "file:///pics/", "a-top.png")

    def thumb(name: str) -> str:
        return f"#listing tr[data-uri='file:///pics/{name}'] img.thumb"

    await page.wait_for_selector(f"{thumb('a-top.png')}[data-state='shown']")
    assert await page.eval_on_selector(thumb("a-top.png"), "i => [i.naturalWidth, i.naturalHeight]") == [3, 2]
    # The bottom one is not fetched while it is out of view (lazy), ...
    assert await page.get_attribute(thumb("z-bottom.png"), "data-state") == "waiting"
    assert await page.get_attribute(thumb("z-bottom.png"), "src") is None
    # ... a big image and an SVG get no thumbnail at all, only the file icon.
    for name in ("y-big.png", "x-vector.svg"):
        assert await page.locator(thumb(name)).count() == 0
        assert await page.locator(f"#listing tr[data-uri='file:///pics/{name}'] a.file").count() == 1
    assert await page.locator("#listing img.thumb").count() == 2
    await page.locator(thumb("z-bottom.png")).scroll_into_view_if_needed()
    await page.wait_for_selector(f"{thumb('z-bottom.png')}[data-state='shown']")
    assert await page.eval_on_selector(thumb("z-bottom.png"), "i => i.src.startsWith('blob:')")


# -- a token's sight ------------------------------------------------------------------------------


async def test_a_tokens_scopes_link_to_what_each_scope_sees(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await put(api, "file:///tok/one.txt")
    await put(api, "file:///tok/two.txt")
    granted = await api.post(
        f"/tenants/{TENANT}/grants", json={"scope": "tok-readers", "uriPrefix": "file:///tok/"}
    )
    assert granted.status_code == 201
    reader = (
        await api.post(
            f"/tenants/{TENANT}/tokens", json={"name": "reader", "scopes": ["tok-readers", "tok-none"]}
        )
    ).json()
    admin = (
        await api.post(f"/tenants/{TENANT}/tokens", json={"name": "boss", "admin": True, "scopes": []})
    ).json()
    await open_hash(page, server, f"/t/{TENANT}/tokens")
    row = f"#tokens tr[data-id='{reader['id']}']"
    await page.wait_for_selector(row)
    assert await page.locator(f"{row} a.scope-link").all_inner_texts() == [
        "tok-none",
        "tok-readers",
    ]  # as stored: sorted
    assert "sees everything" in await page.inner_text(f"#tokens tr[data-id='{admin['id']}']")
    await page.click(f"{row} a.scope-link:text-is('tok-readers')")
    await page.wait_for_selector("#scope-count:text-is('Scope “tok-readers” sees 2 resources; first 2:')")
    assert await page.locator("#scope-preview li").all_inner_texts() == [
        "file:///tok/one.txt",
        "file:///tok/two.txt",
    ]
    await page.go_back()
    await page.click(f"{row} a.scope-link:text-is('tok-none')")
    await page.wait_for_selector("#scope-count:text-is('Scope “tok-none” sees 0 resources.')")
