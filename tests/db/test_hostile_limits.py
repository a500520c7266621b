"""Request bounds: body size and JSON nesting depth, on both surfaces.

``catalog.auth.edge.EdgeGuard`` refuses, before any route or JSON parser runs: a body over the
surface's limit (413; judged on Content-Length and on the bytes of a chunked body) and JSON nested
deeper than 64 levels (400). Admin errors are problem JSON; /mcp errors are JSON-RPC (-32600 with
HTTP 413, -32700 with HTTP 400). Blob uploads stay streamed and bounded by CATALOG_MAX_BLOB_BYTES.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from catalog.app import create_app
from catalog.auth.edge import MAX_JSON_DEPTH, MAX_MCP_BODY_BYTES, json_depth_exceeds, max_admin_json_bytes
from catalog.settings import Settings
from tests.admin_support import ADMIN, API, assert_problem, b64, running
from tests.mcp_helpers import MODERN, Served, envelope, mcp_settings, module_database, served

MAX_BLOB = 3 * 1024 * 1024


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- the scanner -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "too_deep"),
    [
        (nested(MAX_JSON_DEPTH), False),
        (nested(MAX_JSON_DEPTH + 1), True),
        ('{"a":' * MAX_JSON_DEPTH + "1" + "}" * MAX_JSON_DEPTH, False),
        ('{"a":' * (MAX_JSON_DEPTH + 1) + "1" + "}" * (MAX_JSON_DEPTH + 1), True),
        (json.dumps({"s": "[" * 10_000}), False),  # brackets inside a string are text
        (json.dumps({"s": '\\"[[[' * 1000}), False),  # escaped quotes do not end the string
        ("[" * 100_000, True),  # unbalanced: refused, never recursed into
        ("[]" * 10_000, False),  # many siblings, shallow
        ('"unterminated [[[[' + "[" * 100, True),  # malformed either way: refused early
    ],
)
def test_json_depth_scanner(body: str, too_deep: bool) -> None:
    assert json_depth_exceeds(body.encode()) is too_deep


def test_admin_json_limit_leaves_room_for_an_inline_blob_at_the_blob_limit() -> None:
    assert max_admin_json_bytes(MAX_BLOB) >= len(b64(b"x" * MAX_BLOB)) + 1024 * 1024


# -- /mcp over real HTTP ---------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(postgres_server: Any, template_database: str, tmp_path_factory: Any) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings_ = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings_) as s:
            yield s


@pytest.fixture(scope="module")
def http(srv: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.base_url, timeout=30) as client:
        yield client


HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "resources/read",
    "Mcp-Name": "test://static-text",
}


def read_body(**params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "resources/read",
        "params": {"_meta": envelope(), "uri": "test://static-text", **params},
    }


def assert_jsonrpc_error(response: httpx.Response, status: int, code: int) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == code, body
    assert "result" not in body


def test_mcp_body_nested_too_deep_is_400_32700(http: httpx.Client) -> None:
    body = json.dumps(read_body(extra=json.loads(nested(MAX_JSON_DEPTH + 1))))
    assert_jsonrpc_error(http.post("/mcp", content=body, headers=HEADERS), 400, -32700)
    # A raw, unbalanced opener flood (a classic parser stack bomb) as well.
    assert_jsonrpc_error(http.post("/mcp", content=b"[" * 1_000_000, headers=HEADERS), 400, -32700)


def test_mcp_body_within_the_depth_limit_is_served(http: httpx.Client) -> None:
    body = json.dumps(read_body(extra=json.loads(nested(MAX_JSON_DEPTH - 4))))
    response = http.post("/mcp", content=body, headers=HEADERS)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["contents"][0]["text"]


def test_mcp_body_too_large_is_413_32600_declared_or_chunked(http: httpx.Client) -> None:
    padding = "x" * (MAX_MCP_BODY_BYTES + 1)
    body = json.dumps(read_body(padding=padding)).encode()
    assert_jsonrpc_error(http.post("/mcp", content=body, headers=HEADERS), 413, -32600)

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    assert_jsonrpc_error(http.post("/mcp", content=chunks(), headers=HEADERS), 413, -32600)


def test_mcp_body_just_under_the_limit_reaches_the_protocol(http: httpx.Client) -> None:
    base = len(json.dumps(read_body(padding="")).encode())
    body = json.dumps(read_body(padding="x" * (MAX_MCP_BODY_BYTES - base))).encode()
    assert len(body) == MAX_MCP_BODY_BYTES
    response = http.post("/mcp", content=body, headers=HEADERS)
    assert response.status_code == 200, response.text[:300]
    assert response.json()["id"] == 7


def test_mcp_still_answers_after_refusals(http: httpx.Client) -> None:
    response = http.post("/mcp", json=read_body(), headers=HEADERS)
    assert response.status_code == 200 and response.json()["result"]["contents"]


# -- the admin API (in process) --------------------------------------------------------------------


@pytest.fixture
async def admin(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    application: FastAPI = create_app(settings.model_copy(update={"max_blob_bytes": MAX_BLOB}))
    async with running(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=ADMIN) as c:
            assert (await c.post(f"{API}/tenants", json={"slug": "acme"})).status_code == 201
            yield c


async def test_admin_json_nested_too_deep_is_400_problem(admin: httpx.AsyncClient) -> None:
    body = '{"uri":"test://a","name":"a","text":"x","annotations":' + nested(MAX_JSON_DEPTH + 1) + "}"
    for method in ("POST", "PUT"):
        response = await admin.request(
            method,
            f"{API}/tenants/acme/resources",
            params={"uri": "test://a"},
            content=body,
            headers={"Content-Type": "application/json"},
        )
        problem = assert_problem(response, 400)
        assert "nested deeper than 64" in problem["detail"]
    response = await admin.post(f"{API}/tenants", content=b"[" * 500_000)
    assert_problem(response, 400)
    assert (await admin.get(f"{API}/tenants/acme/resources")).json()["items"] == []


async def test_admin_json_body_too_large_is_413_problem(admin: httpx.AsyncClient) -> None:
    limit = max_admin_json_bytes(MAX_BLOB)
    body = json.dumps({"uri": "test://big", "name": "big", "text": "x" * limit}).encode()
    response = await admin.post(f"{API}/tenants/acme/resources", content=body)
    assert_problem(response, 413)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 256 * 1024):
            yield body[start : start + 256 * 1024]

    response = await admin.post(f"{API}/tenants/acme/resources", content=chunks())
    assert_problem(response, 413)
    assert (await admin.get(f"{API}/tenants/acme/resources")).json()["items"] == []


async def test_admin_inline_blob_at_the_blob_limit_is_accepted(admin: httpx.AsyncClient) -> None:
    data = bytes(range(256)) * (MAX_BLOB // 256)
    assert len(data) == MAX_BLOB
    body = {"uri": "file:///big.bin", "name": "big.bin", "mimeType": "application/octet-stream"}
    response = await admin.post(f"{API}/tenants/acme/resources", json={**body, "blob": b64(data)})
    assert response.status_code == 201, response.text[:300]
    assert response.json()["size"] == MAX_BLOB


async def test_raw_blob_uploads_stay_bounded_by_the_blob_limit_not_the_json_limit(
    admin: httpx.AsyncClient,
) -> None:
    ok = await admin.post(
        f"{API}/tenants/acme/blobs", content=b"\0" * MAX_BLOB, headers={"Content-Type": "image/png"}
    )
    assert ok.status_code == 201 and ok.json()["size"] == MAX_BLOB

    async def over() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"\1" * (MAX_BLOB // 3)

    assert_problem(await admin.post(f"{API}/tenants/acme/blobs", content=over()), 413)
