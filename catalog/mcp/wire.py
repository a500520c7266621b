"""The bytes catalog writes itself: SSE frames and JSON-RPC error responses outside a handler."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

SSE_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
SSE_KEEPALIVE = b": ping\r\n\r\n"  # an SSE comment: keeps proxies from timing an idle stream out


def dumps(message: object) -> str:
    """Compact JSON of any JSON value (a message, or an id or string spliced into one)."""
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def sse_frame(message: Mapping[str, Any]) -> bytes:
    """One JSON-RPC message as one SSE ``message`` event (the framing every MCP SDK reads)."""
    return f"event: message\r\ndata: {dumps(message)}\r\n\r\n".encode()


def error_message(code: int, message: str, *, id: Any = None, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error object; ``id`` is null when the request's id could not be read."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": error}


def error_response(
    status: int,
    code: int,
    message: str,
    *,
    id: Any = None,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """An HTTP error carrying a JSON-RPC error body, for refusals before dispatch (``id`` null
    unless the request's id was read)."""
    return Response(
        dumps(error_message(code, message, id=id, data=data)),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )
