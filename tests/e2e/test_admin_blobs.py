"""Blobs: streamed upload (hashed server-side, deduplicated per tenant, size-limited while
streaming) and streamed download with the right headers."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import httpx
import pytest

from catalog.settings import Settings
from tests.admin_support import API, assert_problem, b64

LIMIT = 1024


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"max_blob_bytes": LIMIT})


def blobs(slug: str, suffix: str = "") -> str:
    return f"{API}/tenants/{slug}/blobs{suffix}"


async def test_upload_answers_201_with_sha256_size_and_mime_type(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(500)
    response = await client.post(blobs(tenant), content=data, headers={"Content-Type": "image/png"})
    assert response.status_code == 201
    sha = hashlib.sha256(data).hexdigest()
    assert response.json() == {"sha256": sha, "size": len(data), "mimeType": "image/png"}
    assert response.headers["location"] == blobs(tenant, f"/{sha}")
    assert bytes(await db.fetchval("SELECT data FROM blobs WHERE sha256 = $1", sha)) == data


async def test_same_bytes_again_answer_200_and_are_stored_once(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    first = await client.post(blobs(tenant), content=b"same", headers={"Content-Type": "text/plain"})
    again = await client.post(blobs(tenant), content=b"same", headers={"Content-Type": "application/x-other"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()  # the blob as first stored, mime type included
    assert await db.fetchval("SELECT count(*) FROM blobs") == 1


async def test_dedup_is_per_tenant(client: httpx.AsyncClient, tenant: str, db) -> None:
    await client.post(f"{API}/tenants", json={"slug": "other"})
    assert (await client.post(blobs(tenant), content=b"shared")).status_code == 201
    assert (await client.post(blobs("other"), content=b"shared")).status_code == 201
    assert await db.fetchval("SELECT count(DISTINCT tenant_id) FROM blobs") == 2


async def test_missing_content_type_defaults_to_octet_stream(client: httpx.AsyncClient, tenant: str) -> None:
    response = await client.post(blobs(tenant), content=b"raw")
    assert response.json()["mimeType"] == "application/octet-stream"
    empty = await client.post(blobs(tenant), content=b"")
    assert empty.status_code == 201 and empty.json()["size"] == 0


async def test_invalid_content_type_is_422(client: httpx.AsyncClient, tenant: str, db) -> None:
    response = await client.post(blobs(tenant), content=b"x", headers={"Content-Type": "not a type"})
    assert_problem(response, 422, "#/header/content-type")
    assert await db.fetchval("SELECT count(*) FROM blobs") == 0


async def test_download_streams_bytes_with_content_type_and_length(
    client: httpx.AsyncClient, tenant: str
) -> None:
    data = bytes(range(256)) * 4  # exactly the limit
    sha = (await client.post(blobs(tenant), content=data, headers={"Content-Type": "text/csv"})).json()[
        "sha256"
    ]
    response = await client.get(blobs(tenant, f"/{sha}"))
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == "text/csv"  # as uploaded, no charset added
    assert response.headers["content-length"] == str(len(data))
    assert response.headers["etag"] == f'"{sha}"'


async def test_unknown_blob_is_404_and_malformed_sha_422(client: httpx.AsyncClient, tenant: str) -> None:
    assert_problem(await client.get(blobs(tenant, "/" + "0" * 64)), 404)
    assert_problem(await client.get(blobs(tenant, "/XYZ")), 422, "#/path/sha256")


async def test_blob_over_the_limit_is_413_while_streaming_and_nothing_is_stored(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):
            sent += 1
            yield b"x" * 512

    response = await client.post(blobs(tenant), content=body())  # chunked: no Content-Length
    problem = assert_problem(response, 413)
    assert str(LIMIT) in problem["detail"]
    assert sent < 64  # refused part-way, not after reading the whole body
    assert await db.fetchval("SELECT count(*) FROM blobs") == 0


async def test_declared_length_over_the_limit_is_413_before_reading(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    response = await client.post(blobs(tenant), content=b"y" * (LIMIT + 1))
    assert_problem(response, 413)
    assert await db.fetchval("SELECT count(*) FROM blobs") == 0


async def test_base64_blob_over_the_limit_in_a_resource_is_413_and_writes_nothing(
    client: httpx.AsyncClient, tenant: str, db
) -> None:
    response = await client.post(
        f"{API}/tenants/{tenant}/resources",
        json={"uri": "test://big", "name": "big", "blob": b64(bytes(LIMIT + 1))},
    )
    assert_problem(response, 413)
    for table in ("blobs", "resources", "resource_versions", "audit_log", "change_feed"):
        assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0, table


# -- safe downloads and one content limit ------------------------------------------------------------

ACTIVE_TYPES = [
    "text/html",
    "text/html; charset=utf-8",
    "image/svg+xml",
    "application/javascript",
    "text/javascript",
    "application/xhtml+xml",
    "text/xml",
    "application/pdf",
    "application/x-shockwave-flash",
    "TEXT/HTML",
]
PASSIVE_TYPES = ["image/png", "image/jpeg", "text/plain", "application/json", "application/octet-stream"]


async def _download(client: httpx.AsyncClient, tenant: str, mime_type: str, data: bytes) -> httpx.Response:
    uploaded = await client.post(blobs(tenant), content=data, headers={"Content-Type": mime_type})
    assert uploaded.status_code == 201, uploaded.text
    return await client.get(blobs(tenant, f"/{uploaded.json()['sha256']}"))


@pytest.mark.parametrize("mime_type", ACTIVE_TYPES)
async def test_active_content_downloads_as_an_attachment_that_cannot_run(
    client: httpx.AsyncClient, tenant: str, mime_type: str
) -> None:
    data = f"<script>alert(1)</script><!-- {mime_type} -->".encode()
    response = await _download(client, tenant, mime_type, data)
    assert response.content == data
    sha = hashlib.sha256(data).hexdigest()
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-disposition"] == f'attachment; filename="{sha}"'
    assert response.headers["content-security-policy"] == "default-src 'none'; sandbox"


@pytest.mark.parametrize("mime_type", PASSIVE_TYPES)
async def test_passive_content_downloads_inline_but_never_sniffed_or_scripted(
    client: httpx.AsyncClient, tenant: str, mime_type: str
) -> None:
    data = f"bytes of {mime_type}".encode()
    response = await _download(client, tenant, mime_type, data)
    assert response.headers["content-type"] == mime_type  # as uploaded
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-disposition"].startswith("inline")
    assert response.headers["content-security-policy"] == "default-src 'none'; sandbox"


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
async def test_text_over_the_blob_limit_is_413_like_a_blob_and_writes_nothing(
    client: httpx.AsyncClient, tenant: str, db, method: str
) -> None:
    url = f"{API}/tenants/{tenant}/resources"
    if method == "PATCH":
        created = await client.post(url, json={"uri": "test://t", "name": "t", "text": "small"})
        url = f"{url}/{created.json()['id']}"
    elif method == "PUT":
        url += "?uri=test://t"
    before = {
        t: await db.fetchval(f"SELECT count(*) FROM {t}") for t in ("resources", "audit_log", "change_feed")
    }
    over = "é" * (LIMIT // 2) + "x"  # LIMIT + 1 bytes of UTF-8, fewer characters
    response = await client.request(method, url, json={"uri": "test://t", "name": "t", "text": over})
    problem = assert_problem(response, 413, "/text")
    assert str(LIMIT) in problem["detail"]
    after = {
        t: await db.fetchval(f"SELECT count(*) FROM {t}") for t in ("resources", "audit_log", "change_feed")
    }
    assert after == before
    at_limit = await client.request(
        method, url, json={"uri": "test://t", "name": "t", "text": "é" * (LIMIT // 2)}
    )
    assert at_limit.status_code in (200, 201), at_limit.text
    assert at_limit.json()["size"] == LIMIT
