"""Curator-supplied ``_meta`` is checked on write (spec section 1.3, META-7,
META-11): reserved prefixes, malformed key names and invalid W3C trace values are 422 with a JSON
Pointer to the key; valid keys and values round-trip unchanged to the admin API and MCP."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from catalog.core.meta import (
    MAX_META_BYTES,
    baggage_problem,
    key_problem,
    traceparent_problem,
    tracestate_problem,
)
from tests.admin_support import API, assert_problem, create_resource

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

RESERVED = [
    "io.modelcontextprotocol/x",
    "io.modelcontextprotocol/subscriptionId",
    "dev.mcp/x",
    "org.modelcontextprotocol.api/x",
    "com.mcp.tools/x",
    "IO.MCP/x",  # labels are DNS names: any case
    "modelcontextprotocol.io/x",  # the 2025-06-18 rule (sessions of that era are served too)
    "mcp.dev/x",
]
MALFORMED = [
    "-bad-",
    "bad-",
    "_x",
    "a b",
    "com.example/-x",
    "com..example/x",
    "1com.example/x",
    "com.example-/x",
    "/x",
    "a/b/c",
    "com.example/x y",
    "ünïcode",
]
VALID_KEYS = [
    "k",
    "com.example/tenant",
    "com.example.mcp/ok",
    "a.b-c_d",
    "com.example/",
    "x1",
    "io.github.user/k",
]

BAD_VALUES: list[tuple[str, Any]] = [
    ("traceparent", "not-a-traceparent"),
    ("traceparent", TRACEPARENT.upper()),
    ("traceparent", "ff" + TRACEPARENT[2:]),
    ("traceparent", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"),
    ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01"),
    ("traceparent", TRACEPARENT + "-extra"),
    ("traceparent", 7),
    ("tracestate", "Upper=1"),
    ("tracestate", "k=v=w"),
    ("tracestate", "k=a,k=b"),
    ("tracestate", ",".join(f"k{i}=v" for i in range(33))),
    ("tracestate", "k="),  # a value has at least one character
    ("baggage", "no-equals"),
    ("baggage", "k=has space"),
    ("baggage", 'k="quoted"'),
    ("baggage", "k=v;bad prop=1"),
    ("baggage", ",".join(f"k{i}=v" for i in range(65))),
    ("baggage", "k=" + "v" * 8200),
    ("baggage", ["k=v"]),
]
GOOD_VALUES: dict[str, str] = {
    "traceparent": TRACEPARENT,
    "tracestate": "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE,tenant@vendor=x",
    "baggage": "userId=alice, serverNode=DF%2028 ; isProduction=false,k=;p",
}


def resources(slug: str) -> str:
    return f"{API}/tenants/{slug}/resources"


def _pointer(key: str) -> str:
    return "/_meta/" + key.replace("~", "~0").replace("/", "~1")


@pytest.mark.parametrize("key", RESERVED + MALFORMED)
async def test_reserved_and_malformed_keys_are_422_at_the_key_meta_7(
    client: httpx.AsyncClient, tenant: str, key: str
) -> None:
    body = {"uri": "test://m", "name": "m", "_meta": {"com.example/ok": 1, key: "v"}}
    for method, url in (("POST", resources(tenant)), ("PUT", resources(tenant) + "?uri=test://m")):
        problem = assert_problem(await client.request(method, url, json=body), 422, _pointer(key))
        assert problem["errors"][0]["detail"], problem
    template = {"uriTemplate": "test://t/{id}", "name": "t", "_meta": {key: 1}}
    assert_problem(await client.post(f"{API}/tenants/{tenant}/templates", json=template), 422, _pointer(key))
    assert (await client.get(resources(tenant))).json()["items"] == []


@pytest.mark.parametrize(
    ("key", "value"), BAD_VALUES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD_VALUES)]
)
async def test_invalid_w3c_trace_values_are_422_meta_11(
    client: httpx.AsyncClient, tenant: str, key: str, value: Any
) -> None:
    body = {"uri": "test://m", "name": "m", "_meta": {key: value}}
    assert_problem(await client.post(resources(tenant), json=body), 422, _pointer(key))


async def test_a_patch_is_checked_too(client: httpx.AsyncClient, tenant: str) -> None:
    created = (await create_resource(client, tenant, uri="test://m", text="x")).json()
    url = f"{resources(tenant)}/{created['id']}"
    assert_problem(await client.patch(url, json={"_meta": {"dev.mcp/x": 1}}), 422, "/_meta/dev.mcp~1x")
    template = (
        await client.post(
            f"{API}/tenants/{tenant}/templates", json={"uriTemplate": "test://t/{id}", "name": "t"}
        )
    ).json()
    assert_problem(
        await client.patch(f"{API}/tenants/{tenant}/templates/{template['id']}", json={"_meta": {"-x": 1}}),
        422,
        "/_meta/-x",
    )


async def test_oversized_meta_is_422(client: httpx.AsyncClient, tenant: str) -> None:
    body = {"uri": "test://m", "name": "m", "_meta": {"com.example/big": "x" * MAX_META_BYTES}}
    problem = assert_problem(await client.post(resources(tenant), json=body), 422, "/_meta")
    assert "at most" in problem["errors"][0]["detail"]


async def test_valid_keys_and_trace_values_round_trip(client: httpx.AsyncClient, tenant: str) -> None:
    meta = {**{key: {"n": i} for i, key in enumerate(VALID_KEYS)}, **GOOD_VALUES}
    out = (await create_resource(client, tenant, uri="test://m", text="x", _meta=meta)).json()
    assert out["_meta"] == meta


def test_the_rules_one_by_one() -> None:
    assert [key for key in RESERVED + MALFORMED if key_problem(key) is None] == []
    assert [key for key in VALID_KEYS if key_problem(key) is not None] == []
    assert traceparent_problem(TRACEPARENT) is None
    assert traceparent_problem("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future") is None
    assert tracestate_problem("") is None and tracestate_problem(" , ,a=b") is None
    assert baggage_problem(GOOD_VALUES["baggage"]) is None
