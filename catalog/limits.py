"""Request bounds, enforced in one place: an ASGI middleware in front of the whole app.

* **Body size.** ``/mcp``: :data:`MAX_MCP_BODY_BYTES` (the SDK's own 4 MiB default, so nothing the
  SDK would take is refused). Admin JSON bodies: the base64 form of ``CATALOG_MAX_BLOB_BYTES`` (a
  resource body may carry its blob inline) plus :data:`JSON_OVERHEAD_BYTES`. Raw blob uploads
  (``POST /admin/v1/tenants/{slug}/blobs``) are not buffered here: that route streams and bounds
  them by ``CATALOG_MAX_BLOB_BYTES`` itself. Too large -> 413, judged on ``Content-Length`` at once
  and on the bytes actually received otherwise (chunked bodies), before the app sees any of it.
* **JSON nesting depth.** At most :data:`MAX_JSON_DEPTH` levels of arrays/objects, checked by a
  scan (no parsing, so no recursion) before any JSON parser runs: Python's ``json`` and pydantic
  would otherwise recurse into a hostile ``[[[[...`` body. Too deep -> 400.

Errors are in the surface's own form: RFC 9457 problem JSON for the admin API (and anything that is
not ``/mcp``), a JSON-RPC error for ``/mcp`` (``id: null``: the body was not parsed, so its id
could not be read) with ``-32600`` for a body too large (HTTP 413) and ``-32700`` for one nested too
deep (HTTP 400: the parser refused it).
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_MCP_BODY_BYTES = 4 * 1024 * 1024
JSON_OVERHEAD_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 64

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_BLOB_UPLOAD = re.compile(r"/admin/v1/tenants/[^/]+/blobs/?")
# A JSON string (skipped whole, escapes included) or one bracket; everything else is irrelevant.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def max_admin_json_bytes(max_blob_bytes: int) -> int:
    return 4 * -(-max_blob_bytes // 3) + JSON_OVERHEAD_BYTES


def json_depth_exceeds(body: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``body`` nests arrays/objects deeper than ``limit`` (brackets inside strings ignored).

    Not a validator: malformed JSON is left to the parser, which refuses it properly.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # cannot be deeper than the number of openers (the common, cheap case)
    depth = 0
    for match in _TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth = max(depth - 1, 0)
    return False


class RequestLimits:
    """Wrap the app: bound body size and JSON depth of every request that carries a body."""

    def __init__(self, app: ASGIApp, *, max_blob_bytes: int, mcp_path: str = "/mcp") -> None:
        self.app = app
        self.mcp_path = mcp_path
        self.max_admin_bytes = max_admin_json_bytes(max_blob_bytes)

    def _is_mcp(self, path: str) -> bool:
        return path == self.mcp_path or path.startswith(self.mcp_path + "/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        mcp = self._is_mcp(path)
        if not mcp and _BLOB_UPLOAD.fullmatch(path):
            await self.app(scope, receive, send)  # streamed and bounded by the route itself
            return
        limit = MAX_MCP_BODY_BYTES if mcp else self.max_admin_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(mcp, limit, scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away before its body arrived: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(mcp, limit, scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if json_depth_exceeds(body):
            await _reject(
                mcp,
                400,
                PARSE_ERROR,
                "Bad request",
                f"the JSON body is nested deeper than {MAX_JSON_DEPTH} levels",
                scope,
                receive,
                send,
            )
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # afterwards: disconnects, as the app would have seen them

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _too_large(mcp: bool, limit: int, scope: Scope, receive: Receive, send: Send) -> None:
    detail = f"the request body is larger than the limit of {limit} bytes"
    await _reject(mcp, 413, INVALID_REQUEST, "Content too large", detail, scope, receive, send)


async def _reject(
    mcp: bool,
    status: int,
    code: int,
    title: str,
    detail: str,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    body: dict[str, Any]
    if mcp:
        message = "Request body too large" if status == 413 else "JSON nested too deeply"
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
        media_type = "application/json"
    else:
        from catalog.admin.problems import PROBLEM_MEDIA_TYPE, PROBLEM_TYPE_BASE

        body = {
            "type": PROBLEM_TYPE_BASE + title.lower().replace(" ", "-"),
            "title": title,
            "status": status,
            "detail": detail,
        }
        media_type = PROBLEM_MEDIA_TYPE
    payload = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", media_type.encode()),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
