"""The console's tree in Chromium shows an imported directory once: a folder imported by
``catalog import`` becomes the ``inode/directory`` resource ``…/api`` and the folder ``…/api/`` of
its files, and the tree lists one row for both; its name opens the folder, its ``directory`` link
opens the directory resource itself. The browser, tab and helpers are those of
``test_console_browser.py``; the server here holds only a small imported tree."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e import test_console_browser as console
from tests.e2e.test_console_browser import ADMIN_TOKEN, CHROMIUM, open_hash, shot, sign_in
from tests.mcp_helpers import module_database
from tests.processes import Served, catalog_env, run_catalog, serving, started

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="the browser tests need Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
    pytest.mark.asyncio(loop_scope="session"),
]

# The browser and the tab (fresh per test, no script error allowed) of the console's browser tests.
browser = console.browser
page = console.page

TENANT = "dirs"
FILES = {  # the folder a curator imports, under file:///imp/
    "api/x.md": "# x",
    "api/sub/y.md": "# y",
    "api-v2.txt": "v2",
    "api.md": "# api",
    "apix/z.md": "# z",
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def console_database(postgres_server: Any, template_database: str) -> AsyncIterator[str]:
    async with module_database(postgres_server, template_database) as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="session")
def server(console_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """``catalog serve`` with tenant ``dirs``: :data:`FILES` imported by ``catalog import`` of a
    folder under ``file:///imp/``."""
    home = tmp_path_factory.mktemp("console-dirs-home")
    env = catalog_env(
        CATALOG_DATABASE_URL=console_database, CATALOG_HOME=str(home), CATALOG_ADMIN_TOKEN=ADMIN_TOKEN
    )
    assert run_catalog("tenant", "create", TENANT, env=env).returncode == 0
    folder = tmp_path_factory.mktemp("imported")
    for name, text in FILES.items():
        path = Path(folder, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    imported = run_catalog(
        "import", "--tenant", TENANT, "--prefix", "file:///imp/", "--no-progress", str(folder), env=env
    )
    assert imported.returncode == 0, imported.stderr
    with serving(env=env) as served:
        started(served)
        yield served


async def row_names(page: Any) -> list[str]:
    """The name of each row of the listing (its folder or file link)."""
    return await page.locator("#listing tbody tr td:first-child :is(a.folder, a.file)").all_inner_texts()


async def test_an_imported_directory_is_one_row_that_opens_the_folder_and_the_resource(
    page: Any, server: Served
) -> None:
    await sign_in(page, server)
    await open_hash(page, server, f"/t/{TENANT}/browse?prefix=file%3A%2F%2F%2Fimp%2F")
    await page.wait_for_selector("#listing a.folder:text-is('api/')")
    assert await row_names(page) == ["api/", "api-v2.txt", "api.md", "apix/"]
    # One row for the directory: its folder link and the link to the directory resource itself.
    row = page.locator("#listing tbody tr[data-uri='file:///imp/api']")
    assert await row.count() == 1
    assert await row.locator("a.directory").get_attribute("title") == "file:///imp/api"
    assert await row.locator("td:nth-child(2)").inner_text() == "inode/directory"
    await shot(page, "tree-directory")

    await row.locator("a.directory").click()
    await page.wait_for_selector("#meta")
    assert await page.inner_text("h1") == "api"
    assert "inode/directory" in await page.inner_text("#meta")
    assert "file:///imp/api" in await page.inner_text("#meta")

    await page.go_back()
    await page.click("#listing a.folder:text-is('api/')")
    await page.wait_for_selector("#listing a:text-is('x.md')")
    assert await row_names(page) == ["sub/", "x.md"]
    sub = page.locator("#listing tbody tr[data-uri='file:///imp/api/sub']")
    assert await sub.locator("a.directory").count() == 1
