"""How the edge says no: one builder for every refusal before a route or handler runs.

On ``/mcp`` a refusal is a JSON-RPC error repeating the request's id when it could be read
(:func:`request_id_of`, ERR-3), else ``id: null``; everywhere else it is RFC 9457 problem JSON, the admin API's error format. The admin API's
own errors use :func:`problem_body` too, so the two never drift.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import Receive

MCP_PATH = "/mcp"
PROBLEM_TYPE_BASE = "https://catalog.invalid/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

# JSON-RPC codes of edge refusals (documented in README and SECURITY.md).
INVALID_REQUEST = -32600
PARSE_ERROR = -32700
INTERNAL_ERROR = -32603
RATE_LIMITED = -31003  # application-defined, beside CONSENT_DECLINED and CREDENTIAL_ENDED

RequestId = str | int


def is_mcp_path(path: str) -> bool:
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


def problem_body(
    status: int, title: str, detail: str, errors: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + title.lower().replace(" ", "-"),
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors:
        body["errors"] = errors
    return body


def encode_problem(body: Mapping[str, Any]) -> bytes:
    # ASCII-escaped: a problem may quote the client's input, which can hold unpaired surrogates
    # that have no UTF-8 form (they are sent back as \\uXXXX escapes, not refused with a 500).
    return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def request_id_of(body: bytes) -> RequestId | None:
    """The JSON-RPC id of ``body`` when it is one JSON object whose ``id`` is a string or an integer;
    None otherwise (a batch, a notification, malformed or hostile JSON: ERR-3 allows ``null`` when
    the id cannot be read). Costs one parse of ``body``: bound the body before calling."""
    if body.lstrip()[:1] != b"{":
        return None  # not an object (a batch, a scalar, garbage): no single id to repeat
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # malformed, not UTF-8, or nested past the parser's stack
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return None  # ids are strings or integers (ERR-4); anything else is not echoed
    return request_id


async def bounded_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body if it is at most ``limit`` bytes; None when it is larger or the
    client went away first (then the rest is unread: answer with ``Connection: close``)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def refusal(
    path: str,
    status: int,
    title: str,
    detail: str,
    *,
    code: int = INVALID_REQUEST,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
    request_id: RequestId | None = None,
) -> Response:
    """The refusal for a request to ``path``, in that surface's error format (on ``/mcp``,
    ``request_id`` is the id it answers, see :func:`request_id_of`)."""
    if is_mcp_path(path):
        error: dict[str, Any] = {"code": code, "message": detail}
        if data is not None:
            error["data"] = data
        envelope = {"jsonrpc": "2.0", "id": request_id, "error": error}
        content = json.dumps(envelope, ensure_ascii=True, separators=(",", ":"))
        return Response(
            content, status_code=status, media_type="application/json", headers=dict(headers or {})
        )
    return Response(
        encode_problem(problem_body(status, title, detail)),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers or {}),
    )
