"""Edges of authentication and of the edge itself (``catalog.auth``): refusals that repeat the
request's id, failed authentication charged to the caller's address, JWT and JWKS edge cases,
malformed ``Authorization`` headers, and text logs that a credential cannot forge lines in."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from catalog.auth.refusals import RATE_LIMITED, request_id_of
from tests.mcp_helpers import Served, envelope, mcp_settings, modern_headers, module_database, served

asynchronous = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def limited(postgres_server: Any, template_database: str, tmp_path: Path) -> AsyncIterator[Served]:
    """A server whose callers get a burst of 3 requests and next to no refill."""
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, tmp_path, rate_limit_per_minute=1, rate_limit_burst=3)
        async with served(settings) as s:
            yield s


def _list_body(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "resources/list", "params": {"_meta": envelope()}}


# -- ERR-3: a refusal at the edge repeats the request's id ---------------------------------------------


def test_request_id_of_reads_only_a_single_objects_string_or_integer_id() -> None:
    """ERR-3, ERR-4: the id is echoed when it is readable and valid, else null."""
    assert request_id_of(b'{"jsonrpc":"2.0","id":"abc","method":"x"}') == "abc"
    assert request_id_of(b' \n{"id": 7}') == 7
    assert request_id_of(b'[{"jsonrpc":"2.0","id":1,"method":"x"}]') is None  # a batch: no single id
    for body in (b'{"id": true}', b'{"id": 1.5}', b'{"id": null}', b'{"id": {"a": 1}}', b'{"method": "x"}'):
        assert request_id_of(body) is None, body
    for body in (b"", b"not json", b'{"id": 1', b"\xff\xfe{", b"{" + b"[" * 100_000, b'"id"'):
        assert request_id_of(body) is None, body
    assert request_id_of(b'{"id": "\\ud800"}') == "\ud800"  # echoed ASCII-escaped, never a 500


@asynchronous
async def test_a_rate_limited_mcp_request_gets_its_own_id_back_err_3(limited: Served) -> None:
    """ERR-3: the edge's 429 on /mcp repeats the id of the request it refuses (read from the bounded
    body); a batch, a notification or a body that is not JSON gets ``id: null``."""
    headers = {**modern_headers("resources/list"), "Authorization": f"Bearer {limited.token('staff')}"}
    async with httpx.AsyncClient(base_url=limited.base_url, timeout=10) as http:
        for n in range(3):
            assert (await http.post("/mcp", json=_list_body(n), headers=headers)).status_code == 200
        for request_id in ("req-\ud800-x", 41, 0):
            refused = await http.post("/mcp", content=json.dumps(_list_body(request_id)), headers=headers)
            assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
            answer = refused.json()
            assert answer["id"] == request_id and answer["error"]["code"] == RATE_LIMITED
            assert answer["jsonrpc"] == "2.0" and "too many requests" in answer["error"]["message"]
        for content in (json.dumps([_list_body(5)]), "}{", json.dumps({**_list_body(6), "id": True})):
            refused = await http.post("/mcp", content=content, headers=headers)
            assert refused.status_code == 429 and refused.json()["id"] is None, content
        # A refused GET has no body to read: null.
        refused = await http.get("/mcp", headers=headers)
        assert refused.status_code == 429 and refused.json()["id"] is None
