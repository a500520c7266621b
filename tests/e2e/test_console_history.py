"""The console in Chromium, part B: history that names its authors and pages, an activity feed
newest first that keeps the reader's place, notices that go (or stay, for errors) and never cover
the page's buttons, and search results with a snippet of what matched.

Same fixtures as ``test_console_browser.py`` (Chromium through Playwright, ``catalog serve`` as a
process on real PostgreSQL), on a small tenant of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.e2e.test_console_browser import (
    ADMIN_TOKEN,
    CHROMIUM,
    WAIT_MS,
    browser,
    console_database,
    open_hash,
    page,
    sign_in,
    wait_until,
)
from tests.processes import Served, catalog_env, run_catalog, serving, started

__all__ = ["browser", "console_database", "page"]  # fixtures, used by name

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="the browser tests need Debian's chromium"),
    pytest.mark.asyncio(loop_scope="session"),
]

TENANT = "hist"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PHONE = {"width": 390, "height": 844}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
def server(console_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``catalog serve`` with tenant ``hist``, whose first resources came from ``catalog import``."""
    home = tmp_path_factory.mktemp("console-history-home")
    env = catalog_env(
        CATALOG_DATABASE_URL=console_database, CATALOG_HOME=str(home), CATALOG_ADMIN_TOKEN=ADMIN_TOKEN
    )
    assert run_catalog("tenant", "create", TENANT, env=env).returncode == 0
    dump = home / "seed.jsonl"
    dump.write_text(
        "".join(
            json.dumps({"uri": f"file:///seed/s{i}.txt", "name": f"s{i}", "text": f"seed {i}"}) + "\n"
            for i in range(3)
        )
    )
    imported = run_catalog("import", "--tenant", TENANT, str(dump), env=env)
    assert imported.returncode == 0, imported.stderr
    with serving(env=env) as served:
        started(served)
        yield served


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api(server: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"{server.base_url}/admin/v1", headers=ADMIN, timeout=30) as client:
        yield client


async def put_resource(api: httpx.AsyncClient, uri: str, **body: Any) -> dict[str, Any]:
    body.setdefault("name", uri.rsplit("/", 1)[-1])
    response = await api.put(f"/tenants/{TENANT}/resources", params={"uri": uri}, json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


async def seed_id(api: httpx.AsyncClient, uri: str) -> int:
    items = (await api.get(f"/tenants/{TENANT}/resources", params={"uriPrefix": uri})).json()["items"]
    assert items[0]["uri"] == uri
    return int(items[0]["id"])


async def admin_token(api: httpx.AsyncClient, name: str | None = None) -> dict[str, Any]:
    created = await api.post(f"/tenants/{TENANT}/tokens", json={"admin": True, "name": name})
    assert created.status_code == 201, created.text
    return created.json()


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


async def assert_covers_none_of(page: Any, notice: Any, selectors: list[str]) -> None:
    """The notice covers none of these, wherever the page is scrolled to show each (at the top,
    the middle and the bottom of the window)."""
    assert await notice.is_visible()
    for selector in selectors:
        target = page.locator(selector).first
        for block in ("start", "center", "end"):
            await target.evaluate(f"(element) => element.scrollIntoView({{block: '{block}'}})")
            box, shown = await notice.bounding_box(), await target.bounding_box()
            assert box is not None and shown is not None, selector
            assert not overlaps(box, shown), f"the notice covers {selector} ({block}): {box} over {shown}"


# -- history --------------------------------------------------------------------------------------


async def test_history_names_token_import_and_admin_authors_and_pages_with_older(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    rid = await seed_id(api, "file:///seed/s0.txt")  # v1 by the import
    laptop = await admin_token(api, "Ada's laptop")
    retired = await admin_token(api, "old ci")
    as_laptop = {"Authorization": f"Bearer {laptop['token']}"}
    for n in range(2, 55):  # v2..v54 by the laptop
        changed = await api.patch(
            f"/tenants/{TENANT}/resources/{rid}", json={"text": f"v{n}"}, headers=as_laptop
        )
        assert changed.status_code == 200
    changed = await api.patch(
        f"/tenants/{TENANT}/resources/{rid}",
        json={"text": "v55"},
        headers={"Authorization": f"Bearer {retired['token']}"},
    )
    assert changed.status_code == 200
    assert (await api.patch(f"/tenants/{TENANT}/resources/{rid}", json={"text": "v56"})).status_code == 200
    assert (await api.delete(f"/tenants/{TENANT}/tokens/{retired['id']}")).status_code == 204

    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/r/{rid}/history")
    await page.wait_for_selector("#versions tr[data-version='56']")
    author = "#versions tr[data-version='{}'] td.author"
    assert await page.inner_text(author.format(56)) == "platform admin"
    assert await page.inner_text(author.format(55)) == "old ci (revoked)"
    assert await page.inner_text(author.format(54)) == "Ada's laptop"
    assert await page.get_attribute(author.format(54), "title") == f"token:{laptop['id']}"
    assert await page.locator("#versions tbody tr").count() == 50  # one page
    assert await page.query_selector("#versions tr[data-version='1']") is None
    assert await page.inner_text("#versions-status") == "50 versions shown; older ones on the next page"

    await page.click("#versions-older")
    await page.wait_for_selector("#versions tr[data-version='1']")
    versions = [
        int(v)
        for v in await page.locator("#versions tbody tr").evaluate_all(
            "rows => rows.map((row) => row.dataset.version)"
        )
    ]
    assert versions == list(range(56, 0, -1))  # every version once, newest first
    assert await page.inner_text(author.format(1)) == "import"
    assert not await page.is_visible("#versions-older")

    restore = page.locator("#versions tr[data-version='1'] button")
    await restore.click()
    await restore.click()
    notice = await page.wait_for_selector("#live .event[data-kind='success'] .notice-text")
    assert await notice.inner_text() == "Restored v1 as v57"
    await page.wait_for_selector("#content-text:text-is('seed 0')")


# -- activity -------------------------------------------------------------------------------------


async def shown_seqs(page: Any) -> list[int]:
    seqs = await page.locator("#changes-body tr").evaluate_all("rows => rows.map((row) => row.dataset.seq)")
    return [int(s) for s in seqs]


async def test_live_changes_arrive_on_top_newest_first_without_moving_what_the_reader_reads(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    for i in range(60):  # a feed longer than the window
        await put_resource(api, f"file:///feed/f{i:02d}.txt", text=str(i))
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/activity")
    await page.wait_for_selector("#changes-body tr")
    await page.wait_for_selector("body[data-live='on']")
    initial = await shown_seqs(page)
    assert initial == sorted(initial, reverse=True) and len(initial) >= 60

    # Scrolled down to read an older row: a live change goes on top, and the row stays put.
    reading = page.locator(f"#changes-body tr[data-seq='{initial[30]}']")
    await reading.scroll_into_view_if_needed()
    await page.evaluate("window.scrollBy(0, 200)")
    before = (await reading.bounding_box())["y"]
    scrolled = await page.evaluate("window.scrollY")
    assert scrolled > 0
    await put_resource(api, "file:///feed/while-reading.txt", text="new")
    await page.wait_for_selector("#changes-body tr:first-child:has-text('file:///feed/while-reading.txt')")
    after = await shown_seqs(page)
    assert after[0] > initial[0] and after[1:] == initial
    assert abs((await reading.bounding_box())["y"] - before) < 1
    assert await page.evaluate("window.scrollY") > scrolled

    # At the top, the reader sees it arrive.
    await page.evaluate("window.scrollTo(0, 0)")
    await put_resource(api, "file:///feed/at-top.txt", text="newer")
    newest = page.locator("#changes-body tr:first-child:has-text('file:///feed/at-top.txt')")
    await newest.wait_for()
    assert await page.evaluate("window.scrollY") == 0
    assert (await shown_seqs(page))[:2] == sorted((await shown_seqs(page))[:2], reverse=True)
    box = await newest.bounding_box()
    assert box is not None and 0 <= box["y"] < 800


async def test_the_audit_names_who_by_token_name_and_finds_entries_by_that_name(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    writer = await admin_token(api, "Grace's desk")
    made = await api.post(
        f"/tenants/{TENANT}/resources",
        json={"uri": "file:///audit/named.txt", "name": "named", "text": "x"},
        headers={"Authorization": f"Bearer {writer['token']}"},
    )
    assert made.status_code == 201, made.text
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/activity")
    row = page.locator("#audit tbody tr:has-text('file:///audit/named.txt')")
    await row.wait_for()
    who = row.locator("td.author")
    assert await who.inner_text() == "Grace's desk"
    assert await who.get_attribute("title") == f"token:{writer['id']}"  # the label as recorded
    minted = page.locator("#audit tbody tr:has-text('token.create') td.author").first
    assert await minted.inner_text() == "platform admin"

    await page.fill("#audit-filter", "grace's")
    await wait_until(page, "() => [...document.querySelectorAll('#audit tbody tr')].some((r) => r.hidden)")
    shown = await page.locator("#audit tbody tr:not([hidden]) td.author").all_inner_texts()
    assert shown and set(shown) == {"Grace's desk"}


# -- notices --------------------------------------------------------------------------------------


async def test_notices_go_after_seconds_errors_stay_until_dismissed_and_cover_no_button_on_a_phone(
    browser: Any, server: Served, api: httpx.AsyncClient
) -> None:
    context = await browser.new_context(viewport=PHONE)
    phone = await context.new_page()
    phone.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    phone.on("pageerror", lambda error: errors.append(str(error)))
    try:
        await phone.clock.install()  # the notices' timers run on a clock the test moves
        created = await put_resource(api, "file:///notices/doc.txt", text="one")
        rid = created["id"]
        assert (
            await api.patch(f"/tenants/{TENANT}/resources/{rid}", json={"text": "two"})
        ).status_code == 200
        await sign_in(phone, server)
        await open_hash(phone, server, f"/t/{TENANT}/r/{rid}?edit=1")
        await phone.wait_for_selector("#edit-text")
        await phone.wait_for_selector("body[data-live='on']")

        assert await phone.get_attribute("#live", "role") == "status"
        assert await phone.get_attribute("#live", "aria-live") == "polite"
        # A change from elsewhere is a notice; it covers neither the editor nor its buttons.
        assert (await api.patch(f"/tenants/{TENANT}/resources/{rid}", json={"title": "t"})).status_code == 200
        info = phone.locator("#live .event[data-kind='info']").first
        await info.wait_for()
        assert "resource updated: file:///notices/doc.txt" in await info.inner_text()
        await assert_covers_none_of(
            phone, info, ["#save", "#edit-text", "#edit-name", "#edit-link", "#history-link"]
        )
        await phone.click("#save")  # the live change made this a 412: the conflict's buttons
        await phone.wait_for_selector("#conflict-overwrite")
        await phone.click("#conflict-overwrite")
        saved = phone.locator("#live .event[data-kind='success']")
        await saved.wait_for()
        assert "(version 4)" in await saved.inner_text()
        await assert_covers_none_of(phone, saved, ["#edit-link", "#history-link"])
        await phone.screenshot(path="/tmp/notices-phone.png")

        # An error: restoring a version of a resource deleted meanwhile. It is an alert and stays.
        await open_hash(phone, server, f"/t/{TENANT}/r/{rid}/history")
        await phone.wait_for_selector("#versions tr[data-version='1']")
        assert (await api.delete(f"/tenants/{TENANT}/resources/{rid}")).status_code == 204
        restore = phone.locator("#versions tr[data-version='1'] button")
        await restore.click()
        await restore.click()
        error = phone.locator("#live .event[data-kind='error']")
        await error.wait_for()
        assert await error.get_attribute("role") == "alert"
        assert (await error.inner_text()).startswith("404")
        await assert_covers_none_of(phone, error, ["#compare", "#versions tr[data-version='2'] button"])

        await phone.clock.fast_forward(6000)
        await wait_until(
            phone, "document.querySelectorAll('#live .event:not([data-kind=error])').length === 0"
        )
        assert await error.is_visible()  # still there, seconds later
        await phone.click("#live .event[data-kind='error'] button.dismiss")
        await wait_until(phone, "document.querySelectorAll('#live .event').length === 0")
        assert errors == []
    finally:
        await context.close()


async def test_on_a_wide_screen_notices_stack_in_a_corner_clear_of_the_editor_buttons(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    created = await put_resource(api, "file:///notices/wide.txt", text="one")
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/r/{created['id']}?edit=1")
    await page.wait_for_selector("#edit-text")
    await page.wait_for_selector("body[data-live='on']")
    assert (
        await api.patch(f"/tenants/{TENANT}/resources/{created['id']}", json={"title": "x"})
    ).status_code == 200
    info = page.locator("#live .event[data-kind='info']").first
    await info.wait_for()
    assert await page.evaluate("getComputedStyle(document.getElementById('live')).position") == "fixed"
    await assert_covers_none_of(page, info, ["#save", "#edit-name", "#edit-link", "#history-link"])


# -- search ---------------------------------------------------------------------------------------


async def test_search_results_show_what_matched_highlighted_and_never_as_html(
    page: Any, server: Served, api: httpx.AsyncClient
) -> None:
    await put_resource(
        api,
        "file:///docs/report.txt",
        text="Opening words. " + "padding " * 40 + "the okapi census ended. " + "tail " * 40,
    )
    hostile = '<img src=x onerror="window.__pwned=1">okapi notes'
    await put_resource(api, "file:///docs/hostile.txt", name=hostile, text="nothing")
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/browse")
    await page.fill("#search", "okapi")
    await page.press("#search", "Enter")
    await page.wait_for_selector("#listing .snippet")
    by_text = page.locator("#listing tr[data-uri='file:///docs/report.txt'] .snippet")
    await by_text.wait_for()
    assert await by_text.get_attribute("data-field") == "text"
    assert await by_text.locator("mark").all_inner_texts() == ["okapi"]
    assert "the okapi census ended" in await by_text.inner_text()
    by_name = page.locator("#listing tr[data-uri='file:///docs/hostile.txt'] .snippet")
    assert await by_name.get_attribute("data-field") == "name"
    assert await by_name.locator("mark").all_inner_texts() == ["okapi"]
    assert await by_name.inner_text() == f"name: {hostile}"
    assert await by_name.locator("img").count() == 0
    assert await page.evaluate("window.__pwned ?? null") is None
