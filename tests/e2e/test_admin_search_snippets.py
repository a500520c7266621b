"""A search's answers carry a snippet of what matched: metadata or text, the match marked."""

from __future__ import annotations

import httpx

from tests.admin_support import API, create_resource


async def test_a_text_match_has_a_snippet_of_the_words_around_it_with_the_words_marked(
    client: httpx.AsyncClient, tenant: str
) -> None:
    text = (
        "Minutes of the meeting. "
        + "filler words here " * 30
        + "The Quarterly budget was approved. "
        + "end " * 30
    )
    await create_resource(client, tenant, uri="file:///notes/minutes.txt", name="minutes", text=text)
    response = await client.get(f"{API}/tenants/{tenant}/resources", params={"q": "quarterly budget"})
    assert response.status_code == 200
    [item] = response.json()["items"]
    snippet = item["snippet"]
    assert snippet["field"] == "text"
    marked = [part["text"] for part in snippet["parts"] if part["match"]]
    assert marked == ["Quarterly", "budget"]
    shown = "".join(part["text"] for part in snippet["parts"])
    assert "The Quarterly budget was approved" in shown and len(shown) < len(text) / 4


async def test_a_metadata_match_has_a_snippet_of_the_field_that_contains_it(
    client: httpx.AsyncClient, tenant: str
) -> None:
    description = "A long description " + "x" * 80 + " mentioning Zanzibar in passing " + "y" * 80
    await create_resource(
        client, tenant, uri="file:///trip.md", name="trip", description=description, text="none"
    )
    [item] = (await client.get(f"{API}/tenants/{tenant}/resources", params={"q": "zanzibar"})).json()["items"]
    assert item["snippet"] == {
        "field": "description",
        "parts": [
            {"text": "…" + ("x" * 80 + " mentioning ")[-40:], "match": False},
            {"text": "Zanzibar", "match": True},
            {"text": (" in passing " + "y" * 80)[:40] + "…", "match": False},
        ],
    }
    named = await create_resource(client, tenant, uri="file:///b/zanzibar-map.png", name="zanzibar map")
    items = (await client.get(f"{API}/tenants/{tenant}/resources", params={"q": "Zanzibar M"})).json()[
        "items"
    ]
    assert [(i["id"], i["snippet"]) for i in items] == [
        (
            named.json()["id"],
            {
                "field": "name",
                "parts": [{"text": "zanzibar m", "match": True}, {"text": "ap", "match": False}],
            },
        )
    ]


async def test_curator_text_cannot_fake_a_mark_in_a_snippet(client: httpx.AsyncClient, tenant: str) -> None:
    hostile = "<b>bold</b> \ue000faked\ue001 <script>x()</script> needle here"
    await create_resource(client, tenant, uri="file:///h.html", name="h", mimeType="text/html", text=hostile)
    [item] = (await client.get(f"{API}/tenants/{tenant}/resources", params={"q": "needle"})).json()["items"]
    parts = item["snippet"]["parts"]
    assert [p["text"] for p in parts if p["match"]] == ["needle"]
    shown = "".join(p["text"] for p in parts)
    # ts_headline leaves tags out of a fragment; what is left is text (the console shows it so).
    assert "faked" in shown and "\ue000" not in shown and "\ue001" not in shown


async def test_a_listing_without_search_has_no_snippets(client: httpx.AsyncClient, tenant: str) -> None:
    await create_resource(client, tenant, uri="file:///plain.txt", name="plain", text="words")
    items = (await client.get(f"{API}/tenants/{tenant}/resources")).json()["items"]
    assert [i["uri"] for i in items] == ["file:///plain.txt"] and "snippet" not in items[0]


async def test_a_match_deep_in_a_long_text_has_its_snippet(client: httpx.AsyncClient, tenant: str) -> None:
    text = "lorem ipsum " * 20000 + "the hidden treasure is here " + "dolor " * 1000
    await create_resource(client, tenant, uri="file:///long.txt", name="long", text=text)
    [item] = (await client.get(f"{API}/tenants/{tenant}/resources", params={"q": "hidden treasure"})).json()[
        "items"
    ]
    parts = item["snippet"]["parts"]
    assert [p["text"] for p in parts if p["match"]] == ["hidden", "treasure"]
    assert len("".join(p["text"] for p in parts)) < 400
