"""The URI tree shows a directory once: the folder ``…/api/`` carries the ``inode/directory``
resource ``…/api`` (what ``catalog import`` stores for a folder) as its ``resource``, at the
resource's place in the order, and the resource is not listed again, on every page size (URIs such
as ``…/api-v2`` and ``…/api.md`` sort between ``…/api`` and ``…/api/`` in byte order, so a page
may end between them). A directory with nothing shown under it is a plain resource entry; the
tag and MIME filters decide both halves."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.admin_support import API, create_resource

DIRECTORY = "inode/directory"


async def walk_tree(client: httpx.AsyncClient, slug: str, **params: Any) -> list[dict[str, Any]]:
    """Every entry of one folder of the tree, page by page through nextCursor."""
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(50):
        response = await client.get(
            f"{API}/tenants/{slug}/tree", params={**params, **({"cursor": cursor} if cursor else {})}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["items"]
        cursor = page.get("nextCursor")
        if cursor is None:
            return items
    raise AssertionError("the tree did not end")


def shape(items: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(kind, name, the carried or listed resource's URI) of each entry."""
    return [(i["kind"], i["name"], (i.get("resource") or {}).get("uri")) for i in items]


async def seed_import(client: httpx.AsyncClient, slug: str) -> None:
    """A directory import's shape under file:///imp/: the directory ``api`` with two files and a
    sub-directory, look-alike neighbours on both sides of ``api/`` in byte order, an empty
    directory ``empty``, and one tagged file."""
    for uri in ("file:///imp/api", "file:///imp/api/sub", "file:///imp/empty"):
        await create_resource(client, slug, uri=uri, name=uri.rsplit("/", 1)[-1], mimeType=DIRECTORY)
    for uri in (
        "file:///imp/api/x.md",
        "file:///imp/api/sub/y.md",
        "file:///imp/api-v2",
        "file:///imp/api.md",
    ):
        await create_resource(client, slug, uri=uri, name="f", text=uri, mimeType="text/markdown")
    await create_resource(
        client, slug, uri="file:///imp/apix/z.md", name="z", text="z", mimeType="text/markdown", tags=["red"]
    )


EXPECTED = [
    ("folder", "api/", "file:///imp/api"),
    ("resource", "api-v2", "file:///imp/api-v2"),
    ("resource", "api.md", "file:///imp/api.md"),
    ("folder", "apix/", None),
    ("resource", "empty", "file:///imp/empty"),
]


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
async def test_a_directory_and_its_folder_are_one_entry_on_every_page_size(
    client: httpx.AsyncClient, tenant: str, limit: int
) -> None:
    """Whatever the page size, ``api`` appears once, as the folder ``api/`` carrying the directory
    resource; ``empty`` (no children) is a resource entry."""
    await seed_import(client, tenant)
    items = await walk_tree(client, tenant, prefix="file:///imp/", limit=limit)
    assert shape(items) == EXPECTED
    api = items[0]
    assert api["prefix"] == "file:///imp/api/"
    assert api["resource"]["mimeType"] == DIRECTORY and isinstance(api["resource"]["id"], int)


async def test_a_page_ending_between_the_directory_and_its_folder_does_not_list_it_again(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """The first page ends at ``api-v2`` (after the carried ``api/``); the next starts past it and
    reaches ``api/`` in byte order without listing it a second time."""
    await seed_import(client, tenant)
    first = (
        await client.get(f"{API}/tenants/{tenant}/tree", params={"prefix": "file:///imp/", "limit": 2})
    ).json()
    assert shape(first["items"]) == EXPECTED[:2]
    second = (
        await client.get(
            f"{API}/tenants/{tenant}/tree",
            params={"prefix": "file:///imp/", "limit": 2, "cursor": first["nextCursor"]},
        )
    ).json()
    assert shape(second["items"]) == EXPECTED[2:4]


async def test_a_directory_whose_children_are_deleted_is_shown_as_a_resource(
    client: httpx.AsyncClient, tenant: str
) -> None:
    await seed_import(client, tenant)
    for uri in ("file:///imp/api/x.md", "file:///imp/api/sub/y.md", "file:///imp/api/sub"):
        listed = (await client.get(f"{API}/tenants/{tenant}/resources", params={"uriPrefix": uri})).json()
        [row] = [r for r in listed["items"] if r["uri"] == uri]
        assert (await client.delete(f"{API}/tenants/{tenant}/resources/{row['id']}")).status_code == 204
    items = await walk_tree(client, tenant, prefix="file:///imp/", limit=1)
    assert shape(items)[0] == ("resource", "api", "file:///imp/api")
    assert "prefix" not in items[0]


async def test_filters_decide_the_folder_and_the_directory_it_carries(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """``mimeType=text/markdown``: the folder ``api/`` is shown (its files pass) without the
    directory resource (it does not pass), so at the folder's own place in byte order. ``mimeType=inode/directory``: ``api/`` carries ``api``
    (its sub-directory passes), ``empty`` is a resource. ``tag=red``: only ``apix/``."""
    await seed_import(client, tenant)
    markdown = await walk_tree(client, tenant, prefix="file:///imp/", mimeType="text/markdown", limit=1)
    assert shape(markdown) == [
        ("resource", "api-v2", "file:///imp/api-v2"),
        ("resource", "api.md", "file:///imp/api.md"),
        ("folder", "api/", None),
        ("folder", "apix/", None),
    ]
    directories = await walk_tree(client, tenant, prefix="file:///imp/", mimeType=DIRECTORY, limit=1)
    assert shape(directories) == [
        ("folder", "api/", "file:///imp/api"),
        ("resource", "empty", "file:///imp/empty"),
    ]
    red = await walk_tree(client, tenant, prefix="file:///imp/", tag="red")
    assert shape(red) == [("folder", "apix/", None)]


async def test_a_folder_without_a_directory_resource_carries_none(
    client: httpx.AsyncClient, tenant: str
) -> None:
    """A text resource at ``…/notes`` beside a folder ``…/notes/`` is no directory: two entries, as
    before."""
    await create_resource(client, tenant, uri="file:///n/notes", name="n", text="t", mimeType="text/plain")
    await create_resource(client, tenant, uri="file:///n/notes/a", name="a", text="t", mimeType="text/plain")
    items = await walk_tree(client, tenant, prefix="file:///n/")
    assert shape(items) == [("resource", "notes", "file:///n/notes"), ("folder", "notes/", None)]
