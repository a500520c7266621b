"""The fields of an MCP result, one owner for both executors: the SDK's handlers
(``catalog.mcp.handlers``) and the fast path (``catalog.mcp.fast``) build a result's payload and its
cache hints here, so ``ttlMs``, ``cacheScope``, a content item and a completion cannot drift apart.

What the SDK adds to every 2026-07-28 result on its way out (``resultType`` and the ``serverInfo``
stamp in ``_meta``) is written by :func:`stamped` for the fast path, which the SDK does not see;
``tests/properties/test_mcp_fast_path_differential.py`` holds the two paths' bytes equal.
"""

from __future__ import annotations

import base64
from typing import Any

from catalog.core.principal import Principal
from catalog.core.reading import Content
from catalog.mcp.context import cache_scope
from catalog.settings import Settings

READ = "resources/read"
LIST = "resources/list"
TEMPLATES = "resources/templates/list"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


def ttl_ms(method: str, settings: Settings) -> int | None:
    """Each result's time to live (CACHE-*), as the operator set it (``CATALOG_READ_TTL_MS``,
    ``_LIST_``, ``_TEMPLATES_``); completion has none. A read that needed consent is never cached
    (``ttlMs: 0``, the handlers' ``finished``)."""
    if method == READ:
        return settings.read_ttl_ms
    if method == LIST:
        return settings.list_ttl_ms
    if method == TEMPLATES:
        return settings.templates_ttl_ms
    return None


def read_ttl_ms(own: int | None, settings: Settings) -> int:
    """A read's ``ttlMs``: the resource's own (a curator's ``ttlMs``), else the operator's."""
    return settings.read_ttl_ms if own is None else own


def cache_hints(method: str, principal: Principal, settings: Settings) -> dict[str, Any]:
    """``ttlMs`` and ``cacheScope`` of ``method``'s result for ``principal`` (none for completion)."""
    ttl = ttl_ms(method, settings)
    if ttl is None:
        return {}
    return {"ttlMs": ttl, "cacheScope": cache_scope(principal)}


def content_fields(content: Content) -> dict[str, Any]:
    """One ``resources/read`` content item on the wire: a blob base64-encoded, else its text (an
    empty text when the row has none)."""
    item: dict[str, Any] = {"uri": content.uri}
    if content.mime_type is not None:
        item["mimeType"] = content.mime_type
    if content.blob is not None:
        item["blob"] = base64.b64encode(content.blob).decode()
    else:
        item["text"] = content.text or ""
    return item


def completion_fields(values: list[str], has_more: bool, total: int | None) -> dict[str, Any]:
    """A ``completion/complete`` result's ``completion`` on the wire."""
    completion: dict[str, Any] = {"values": values, "hasMore": has_more}
    if total is not None:
        completion["total"] = total
    return completion


def stamped(result: dict[str, Any], server_info: dict[str, Any]) -> dict[str, Any]:
    """``result`` as the SDK sends every 2026-07-28 result: ``resultType`` and the ``serverInfo``
    stamp (the fast path's answers; the SDK stamps its handlers' results itself)."""
    result["resultType"] = "complete"
    result["_meta"] = {SERVER_INFO_KEY: server_info}
    return result


# -- the read-only tools' results (``catalog.mcp.tools``) -----------------------------------------


def resource_link(entry: dict[str, Any]) -> dict[str, Any]:
    """A listing entry (``handlers.resource_fields``: what ``resources/list`` sends for it) as a
    tool result's ``resource_link`` content item."""
    return {"type": "resource_link", **entry}


def embedded_resource(content: Content) -> dict[str, Any]:
    """A content item of a read (what ``resources/read`` sends for it) embedded in a tool result."""
    return {"type": "resource", "resource": content_fields(content)}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_result(content: list[dict[str, Any]], structured: dict[str, Any]) -> dict[str, Any]:
    """A tool's answer: its content items for the model, and the same answer as the structured
    content its ``outputSchema`` declares."""
    return {"content": content, "structuredContent": structured, "isError": False}


def tool_error(message: str) -> dict[str, Any]:
    """A tool's refusal the model can read and correct (a result with ``isError``, not a JSON-RPC
    error: the call itself was well-formed)."""
    return {"content": [text_block(message)], "isError": True}
