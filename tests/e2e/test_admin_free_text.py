"""Free text and times from clients: every text field has a size limit and refuses
NUL characters and unpaired surrogates with a 422 pointing at it; a time must exist in UTC. One rule
(``catalog.core.schemas``), whichever surface the text comes through (admin API, CLI, core)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from catalog.core.catalog import Catalog
from catalog.core.errors import InvalidInput
from catalog.core.schemas.base import MAX_LONG_TEXT, MAX_SHORT_TEXT, MAX_TAG_LENGTH, MAX_TEMPLATE_BODY
from catalog.core.tenants import create_tenant
from catalog.db.engine import create_engine
from catalog.settings import Settings
from tests.admin_support import API, assert_problem

NUL = "a\x00b"
# A lone surrogate as JSON sends it (httpx would refuse to encode it): patched into the raw body.
SURROGATE = "@SURROGATE@"

# (route, a valid body, the free-text field as a JSON pointer, its limit)
FIELDS: list[tuple[str, dict[str, Any], str, int]] = [
    ("resources", {"uri": "test://a", "name": "a"}, "/name", MAX_SHORT_TEXT),
    ("resources", {"uri": "test://a", "name": "a"}, "/title", MAX_SHORT_TEXT),
    ("resources", {"uri": "test://a", "name": "a"}, "/description", MAX_LONG_TEXT),
    ("resources", {"uri": "test://a", "name": "a"}, "/consentMessage", MAX_LONG_TEXT),
    ("resources", {"uri": "test://a", "name": "a"}, "/tags/0", MAX_TAG_LENGTH),
    ("templates", {"uriTemplate": "test://t/{id}", "name": "t"}, "/name", MAX_SHORT_TEXT),
    ("templates", {"uriTemplate": "test://t/{id}", "name": "t"}, "/title", MAX_SHORT_TEXT),
    ("templates", {"uriTemplate": "test://t/{id}", "name": "t"}, "/description", MAX_LONG_TEXT),
    ("templates", {"uriTemplate": "test://t/{id}", "name": "t"}, "/text", MAX_TEMPLATE_BODY),
    ("tokens", {"scopes": ["s"]}, "/name", MAX_SHORT_TEXT),
    ("grants", {"scope": "s"}, "/tag", MAX_TAG_LENGTH),
]


def _with(body: dict[str, Any], pointer: str, value: str) -> dict[str, Any]:
    body = dict(body)
    if pointer == "/tags/0":
        body["tags"] = [value]
    else:
        body[pointer[1:]] = value
    return body


def _raw(body: dict[str, Any]) -> bytes:
    import json

    return json.dumps(body).replace(json.dumps(SURROGATE), '"x\\ud800y"').encode()


def _path(slug: str, route: str) -> str:
    return f"{API}/tenants/{slug}/{route}" if route != "tenants" else f"{API}/tenants"


@pytest.mark.parametrize(("route", "body", "pointer", "limit"), FIELDS)
async def test_every_free_text_field_refuses_nul_surrogates_and_oversize(
    client: httpx.AsyncClient, tenant: str, db, route: str, body: dict[str, Any], pointer: str, limit: int
) -> None:
    url = _path(tenant, route)
    headers = {"Content-Type": "application/json"}
    for value, reason in ((NUL, "NUL"), (SURROGATE, "surrogate"), ("x" * (limit + 1), "at most")):
        response = await client.post(url, content=_raw(_with(body, pointer, value)), headers=headers)
        problem = assert_problem(response, 422, pointer)
        assert any(reason in error["detail"] for error in problem["errors"]), problem
    # At the limit is fine.
    ok = await client.post(url, json=_with(body, pointer, "é" * limit))
    assert ok.status_code == 201, ok.text[:300]
    assert await db.fetchval("SELECT count(*) FROM audit_log WHERE detail::text LIKE '%\\\\u0000%'") == 0


async def test_a_tenant_name_refuses_nul_surrogates_and_oversize(client: httpx.AsyncClient) -> None:
    headers = {"Content-Type": "application/json"}
    for value in (NUL, SURROGATE, "x" * (MAX_SHORT_TEXT + 1)):
        body = _raw({"slug": "t", "name": value})
        assert_problem(await client.post(f"{API}/tenants", content=body, headers=headers), 422, "/name")


@pytest.mark.parametrize(
    "expires_at",
    ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999999-00:01"],
)
async def test_a_token_expiry_outside_utc_years_1_to_9999_is_422_not_500(
    client: httpx.AsyncClient, tenant: str, expires_at: str
) -> None:
    response = await client.post(f"{API}/tenants/{tenant}/tokens", json={"expiresAt": expires_at})
    problem = assert_problem(response, 422, "/expiresAt")
    assert "out of range" in problem["errors"][0]["detail"]


async def test_the_latest_utc_expiry_is_accepted(client: httpx.AsyncClient, tenant: str) -> None:
    for expires_at in ("9999-12-31T23:59:59Z", "9999-12-31T23:59:59+01:00"):
        response = await client.post(f"{API}/tenants/{tenant}/tokens", json={"expiresAt": expires_at})
        assert response.status_code == 201, response.text


async def test_a_last_modified_outside_utc_range_is_422(client: httpx.AsyncClient, tenant: str) -> None:
    body = {"uri": "test://a", "name": "a", "annotations": {"lastModified": "9999-12-31T23:59:59-01:00"}}
    assert_problem(
        await client.post(f"{API}/tenants/{tenant}/resources", json=body), 422, "/annotations/lastModified"
    )


async def test_the_core_refuses_an_unstorable_tenant_name_from_any_surface(settings: Settings) -> None:
    """The CLI's ``tenant create --name`` calls the core directly, past the admin API's models."""
    engine = create_engine(settings.async_database_url(), pool_size=1)
    catalog = Catalog(engine=engine, settings=settings)
    try:
        for name in ("a\x00b", "a\ud800b", "x" * (MAX_SHORT_TEXT + 1)):
            with pytest.raises(InvalidInput) as info:
                await create_tenant(catalog, "t", name)
            assert [error.pointer for error in info.value.errors] == ["/name"]
        assert (await create_tenant(catalog, "t", "Tee")).name == "Tee"
    finally:
        await engine.dispose()
