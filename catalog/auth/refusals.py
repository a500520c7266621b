"""How the edge says no: one builder for every refusal before a route or handler runs.

On ``/mcp`` a refusal is a JSON-RPC error (``id: null``: the body was not read, so its id is not
known); everywhere else it is RFC 9457 problem JSON, the admin API's error format. The admin API's
own errors use :func:`problem_body` too, so the two never drift.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response

MCP_PATH = "/mcp"
PROBLEM_TYPE_BASE = "https://catalog.invalid/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"

# JSON-RPC codes of edge refusals (documented in README and SECURITY.md).
INVALID_REQUEST = -32600
PARSE_ERROR = -32700
INTERNAL_ERROR = -32603
RATE_LIMITED = -31003  # application-defined, beside CONSENT_DECLINED and CREDENTIAL_ENDED


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


def refusal(
    path: str,
    status: int,
    title: str,
    detail: str,
    *,
    code: int = INVALID_REQUEST,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The refusal for a request to ``path``, in that surface's error format."""
    if is_mcp_path(path):
        error: dict[str, Any] = {"code": code, "message": detail}
        if data is not None:
            error["data"] = data
        content = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}, separators=(",", ":"))
        return Response(
            content, status_code=status, media_type="application/json", headers=dict(headers or {})
        )
    return Response(
        encode_problem(problem_body(status, title, detail)),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers or {}),
    )
