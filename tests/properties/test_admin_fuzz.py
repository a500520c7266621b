"""No input a client can send yields a 500: random JSON bodies and random bytes to every write route.

Every answer must be below 500, and every error an RFC 9457 problem whose ``status`` matches.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.admin_support import API, create_resource

FIELDS = [
    "uri", "name", "title", "description", "mimeType", "icons", "annotations", "tags", "consentMessage",
    "_meta", "text", "blob", "blobSha256", "uriTemplate", "scope", "uriPrefix", "tag", "scopes", "admin",
    "expiresAt", "slug", "audience", "priority", "lastModified", "src", "sizes", "theme", "size", "id",
]  # fmt: skip
INTERESTING = st.sampled_from(
    [
        "test://a", "file:///x/../y", "file:///x/%2e%2e/y", "test://t/{x}", "test://{", "{x}", "{{x}}",
        "\x00", "a\x00b", "\ud800", "\udfff", "é", "inode/directory", "application/json", "text/plain",
        "2025-01-12T15:00:58Z", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "2025-01-12T15:00:58",
        "AAAA", "====", "a" * 64, "0" * 64, "https://x.example/i.png", "data:image/png;base64,AA==", "user",
        "x" * 3000, "", " ", "acme", "-", "NaN",
    ]
)  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**80)
    | st.floats()
    | st.text(max_size=20)
    | INTERESTING
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6) | INTERESTING, inner, max_size=4)
    ),
    max_leaves=12,
)
PLAUSIBLE = st.fixed_dictionaries({}, optional={field: JSON for field in FIELDS})
BODIES = PLAUSIBLE | JSON

# (method, path under /tenants/acme, query)
# What a URL can carry: percent-encoded UTF-8, so no unpaired surrogates.
URL_TEXT = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40) | INTERESTING.filter(
    lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)
)

WRITE_ROUTES = [
    ("POST", "", None),
    ("POST", "/resources", None),
    ("PUT", "/resources", "test://fuzz"),
    ("PATCH", "/resources/{rid}", None),
    ("POST", "/templates", None),
    ("PATCH", "/templates/{tid}", None),
    ("POST", "/grants", None),
    ("POST", "/tokens", None),
]
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_no_server_error(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json"), response.text
        problem = response.json()
        assert problem["status"] == response.status_code and problem["title"]


@pytest.fixture
async def targets(client: httpx.AsyncClient, tenant: str) -> dict[str, int]:
    rid = (await create_resource(client, tenant, uri="test://target", text="t")).json()["id"]
    tid = (
        await client.post(
            f"{API}/tenants/{tenant}/templates", json={"uriTemplate": "test://t/{x}", "name": "t"}
        )
    ).json()["id"]
    return {"rid": rid, "tid": tid}


def url(tenant: str, route_path: str, targets: dict[str, int]) -> str:
    if route_path == "":
        return f"{API}/tenants"
    return f"{API}/tenants/{tenant}" + route_path.format(**targets)


@FUZZ
@given(route=st.sampled_from(WRITE_ROUTES), body=BODIES)
async def test_random_json_bodies_never_cause_a_server_error(
    client: httpx.AsyncClient, tenant: str, targets: dict[str, int], route: tuple, body: object
) -> None:
    method, route_path, query = route
    response = await client.request(
        method,
        url(tenant, route_path, targets),
        params={"uri": query} if query else None,
        content=json.dumps(body, allow_nan=True).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert_no_server_error(response)


@FUZZ
@given(
    route=st.sampled_from([*WRITE_ROUTES, ("POST", "/blobs", None)]),
    raw=st.binary(max_size=300)
    | st.sampled_from([b"\xff\xfe", b'{"a": "\xff"}', b"[" * 5000, b"1" * 5000, b"{}"]),
    content_type=st.sampled_from(
        ["application/json", "text/plain", "", "application/x-www-form-urlencoded", "bad type"]
    ),
)
async def test_random_bytes_never_cause_a_server_error(
    client: httpx.AsyncClient,
    tenant: str,
    targets: dict[str, int],
    route: tuple,
    raw: bytes,
    content_type: str,
) -> None:
    method, route_path, query = route
    headers = {"Content-Type": content_type} if content_type else {}
    response = await client.request(
        method,
        url(tenant, route_path, targets),
        params={"uri": query} if query else None,
        content=raw,
        headers=headers,
    )
    assert_no_server_error(response)


@FUZZ
@given(uri=URL_TEXT, cursor=URL_TEXT, q=URL_TEXT, tag=URL_TEXT)
async def test_random_query_parameters_never_cause_a_server_error(
    client: httpx.AsyncClient, tenant: str, targets: dict[str, int], uri: str, cursor: str, q: str, tag: str
) -> None:
    base = f"{API}/tenants/{tenant}"
    for response in [
        await client.put(f"{base}/resources", params={"uri": uri}, json={"name": "n"}),
        await client.get(
            f"{base}/resources", params={"cursor": cursor, "q": q, "tag": tag, "uriPrefix": uri}
        ),
        await client.get(f"{base}/templates", params={"cursor": cursor}),
        await client.get(f"{base}/audit", params={"cursor": cursor}),
        await client.get(f"{base}/changes", params={"after": q}),
    ]:
        assert_no_server_error(response)
