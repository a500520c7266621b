"""Structured logs from a real ``catalog serve``: one JSON line per request (JSON
because stdout is not a terminal) with the request id it echoed, the route template or MCP method
and era, tenant, principal id, status or JSON-RPC code and duration; never a secret; and no uvicorn
access line beside it. ``CATALOG_LOG_FORMAT=text`` gives the same fields as text."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from catalog.observability import logs
from tests.mcp_helpers import MODERN
from tests.processes import Served, catalog_env, serving, started, stop

pytestmark = pytest.mark.process

ADMIN = "cat_test-logs-platform-admin-token"
READ = "test://static-text"
MISSING = "test://no-such-resource"


def request_lines(
    served: Served, request_id: str, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The request lines carrying ``request_id``, once ``done(lines)`` (waiting for more as needed)."""
    marker = f'"request_id":"{request_id}"'  # lines are compact JSON (orjson)

    def printed() -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in served.output if marker in line]
        return [line for line in lines if line["logger"] == "catalog.request"]

    while not done(found := printed()):
        served.wait_for(marker, timeout=30)
    return found


def reads(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("mcp_method") == "resources/read"]


def sdk_client(served: Served, token: str, request_id: str, mode: str = MODERN) -> Client:
    headers = {"Authorization": f"Bearer {token}", "X-Request-Id": request_id}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return Client(streamable_http_client(served.mcp_url, http_client=http), mode=mode, cache=None)


async def read_twice(served: Served, token: str, request_id: str, mode: str) -> None:
    async with sdk_client(served, token, request_id, mode) as client:
        await client.read_resource(READ)
        with pytest.raises(MCPError):
            await client.read_resource(MISSING)


def test_one_json_line_per_request_with_its_id_principal_and_outcome(
    database_url: str, tmp_path: Path
) -> None:
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"), CATALOG_ADMIN_TOKEN=ADMIN
    )
    with serving("--demo", env=env) as served:
        started(served)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        created = httpx.post(
            f"{served.base_url}/admin/v1/tenants/demo/tokens",
            json={"scopes": ["public"]},
            headers={**admin, "X-Request-Id": "make-token"},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        assert created.headers["X-Request-Id"] == "make-token"
        token, token_id = created.json()["token"], created.json()["id"]

        listed = httpx.get(f"{served.base_url}/admin/v1/tenants", headers={**admin, "X-Request-Id": "list-1"})
        assert listed.headers["X-Request-Id"] == "list-1"
        generated = httpx.get(f"{served.base_url}/healthz", headers={"X-Request-Id": "not a sane id!"})
        assert (
            generated.headers["X-Request-Id"] != "not a sane id!"
            and len(generated.headers["X-Request-Id"]) == 32
        )

        [line] = request_lines(served, "list-1", bool)
        assert line["level"] == "info" and line["time"].endswith("+00:00")
        assert (line["method"], line["route"], line["status"]) == ("GET", "/admin/v1/tenants", 200)
        assert line["principal"] == "platform-admin" and line["duration_ms"] >= 0
        [made] = request_lines(served, "make-token", bool)
        assert (made["route"], made["status"], made.get("tenant")) == (
            "/admin/v1/tenants/{slug}/tokens",
            201,
            None,  # the platform admin belongs to no tenant
        )

        anyio.run(read_twice, served, token, "modern-reads", MODERN)
        modern = reads(request_lines(served, "modern-reads", lambda lines: len(reads(lines)) == 2))
        assert [(line["era"], line.get("rpc_code"), line["status"]) for line in modern] == [
            ("2026", None, 200),
            ("2026", -32602, 400),  # a 2026-07-28 error answer is 400
        ]
        for line in modern:
            assert (line["route"], line["tenant"], line["principal"]) == ("/mcp", "demo", f"token:{token_id}")

        anyio.run(read_twice, served, token, "legacy-reads", "legacy")
        legacy = request_lines(served, "legacy-reads", lambda lines: len(reads(lines)) == 2)
        assert ("initialize", "2025", None) in [
            (x.get("mcp_method"), x.get("era"), x.get("rpc_code")) for x in legacy
        ]
        assert [(x["era"], x.get("rpc_code"), x["principal"]) for x in reads(legacy)] == [
            ("2025", None, f"token:{token_id}"),
            ("2025", -32002, f"token:{token_id}"),
        ]

        assert stop(served) == 0
        printed = served.printed()
    assert ADMIN not in printed and token not in printed and token.split("_", 1)[-1] not in printed
    logged = [line for line in printed.splitlines() if line and not line.startswith("catalog: ")]
    records = [json.loads(line) for line in logged]  # every log line is one JSON object
    assert not [r for r in records if r["logger"] == "uvicorn.access"]
    assert not [line for line in logged if 'HTTP/1.1" 200' in line]  # uvicorn's access format
    assert "Application startup complete." in [r["message"] for r in records]


def test_text_lines_carry_the_same_fields(database_url: str, tmp_path: Path) -> None:
    env = catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_ADMIN_TOKEN=ADMIN,
        CATALOG_LOG_FORMAT="text",
    )
    with serving(env=env) as served:
        started(served)
        response = httpx.get(f"{served.base_url}/healthz", headers={"X-Request-Id": "text-1"}, timeout=30)
        assert response.headers["X-Request-Id"] == "text-1"
        served.wait_for("request_id=text-1")
        line = served.output[-1]
        assert "INFO    catalog.request: GET /healthz 200 request_id=text-1 method=GET route=/healthz" in line
        assert "status=200 duration_ms=" in line


# -- the request line without a log record ---------------------------------------------------------


@pytest.fixture
def shipped_logging() -> Any:
    """The server's logging configuration (``logging_config``) applied in this process, with the
    handler writing to a buffer; the previous configuration restored afterwards."""
    catalog_logger, uvicorn_logger, root = (logging.getLogger(n) for n in ("catalog", "uvicorn", ""))
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in (catalog_logger, uvicorn_logger, root)]
    logging.config.dictConfig(logs.logging_config("json"))
    handler = catalog_logger.handlers[0]
    buffer = io.StringIO()
    handler.setStream(buffer)  # type: ignore[attr-defined]
    try:
        yield handler, buffer
    finally:
        for lg, handlers, level, propagate in saved:
            lg.handlers[:] = handlers
            lg.setLevel(level)
            lg.propagate = propagate


def shipped_handler_only(handler: logging.Handler) -> None:
    """pytest adds its capture handlers to every non-propagating logger as each test starts."""
    logging.getLogger("catalog").handlers[:] = [handler]


FIELDS = {
    "request_id": "r-1",
    "method": "GET",
    "route": "/healthz",
    "status": 200,
    "tenant": None,
    "rpc_code": -1,
}


def test_a_request_line_written_directly_is_the_line_a_log_record_makes(shipped_logging: Any) -> None:
    """With the shipped configuration the request line skips the logging module's record; the line
    is the same object (bar its time) as the one the record path writes, and waits for the flusher,
    while a 5xx line (a warning) is written at once."""
    handler, buffer = shipped_logging
    shipped_handler_only(handler)
    assert logs._request_line_handler(logging.INFO) is handler
    logs.log_request(dict(FIELDS), 200)
    assert buffer.getvalue() == ""  # queued: the flusher writes it within FLUSH_SECONDS
    logging.getLogger("catalog.request").info("GET /healthz 200", extra={"catalog": dict(FIELDS)})
    logs.log_request({**FIELDS, "request_id": "r-2", "status": 503}, 503)
    direct, recorded, warning = (json.loads(line) for line in buffer.getvalue().splitlines())
    assert direct.pop("time") and recorded.pop("time")
    assert (
        direct
        == recorded
        == {
            "level": "info",
            "logger": "catalog.request",
            "message": "GET /healthz 200",
            **{key: value for key, value in FIELDS.items() if value is not None},
        }
    )
    assert warning["level"] == "warning" and warning["request_id"] == "r-2"


def test_a_filter_or_another_handler_sends_the_request_line_through_a_record(shipped_logging: Any) -> None:
    handler, buffer = shipped_logging
    shipped_handler_only(handler)
    seen: list[logging.LogRecord] = []

    def keep(record: logging.LogRecord) -> bool:
        seen.append(record)
        return True

    logs.REQUEST_LOGGER.addFilter(keep)
    try:
        assert logs._request_line_handler(logging.INFO) is None
        logs.log_request(dict(FIELDS), 200)
        assert [record.getMessage() for record in seen] == ["GET /healthz 200"]
    finally:
        logs.REQUEST_LOGGER.removeFilter(keep)
    logging.getLogger("catalog").addHandler(logging.NullHandler())
    assert logs._request_line_handler(logging.INFO) is None
    handler.flush()
    assert json.loads(buffer.getvalue())["request_id"] == "r-1"
