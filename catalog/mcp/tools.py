"""The catalogue as read-only MCP tools, for agent hosts that act through tools
(``CATALOG_MCP_TOOLS``, default ``on``): ``search_resources``, ``list_resources`` and
``read_resource``.

Thin, as the resource handlers are: each tool is answered by the core function its resource method
(or the admin API) uses, under the same visibility, with the same cursors; a read is
``handlers.read_with_consent``, so a resource that asks for consent asks it here too, and the
accepted purpose goes to the audit log. Served by the SDK's handlers in both eras (the fast path
names only resource methods, ``catalog.mcp.fast.PARAMS``), behind the same edge (rate limits,
authentication). Results are encoded in ``catalog.mcp.results``: ``resource_link`` items (embedded
resources for a read) and the same answer as ``structuredContent``, per the tool's ``outputSchema``.

A refusal the caller can correct (a bad argument, a damaged cursor, a URI that is missing or that it
may not see: the same text for both) is a result with ``isError``; an unknown tool is ``-32602``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from catalog.core import reading
from catalog.core.cursors import InvalidCursor
from catalog.core.reading import InvalidReadParams, ResourceNotFound
from catalog.core.replicas import on_replica
from catalog.core.resources import ListingFilter, ResourceRecord
from catalog.core.schemas.base import (
    MAX_SEARCH_LENGTH,
    MEDIA_TYPE_FILTER_PATTERN,
    SEARCH_PATTERN,
    MediaTypeFilter,
    SearchText,
    Tag,
    UriPrefix,
)
from catalog.mcp import results
from catalog.mcp.context import CONSENT_DECLINED, Ctx, principal_of
from catalog.mcp.handlers import CatalogSource, read_with_consent, resource_fields

SEARCH = "search_resources"
LIST = "list_resources"
READ = "read_resource"

MAX_CURSOR_LENGTH = 8192
NOT_FOUND_TEXT = "Resource not found: {uri}"
INVALID_CURSOR_TEXT = "Invalid cursor: pass the nextCursor of the previous call with the same arguments"
DECLINED_TEXT = "Consent declined; nothing was read"

# -- schemas ----------------------------------------------------------------------------------------

_CURSOR = {
    "type": "string",
    "maxLength": MAX_CURSOR_LENGTH,
    "description": "nextCursor of the previous call with the same arguments (opaque)",
}
_URI_PREFIX = {
    "type": "string",
    "minLength": 1,
    "maxLength": 8192,
    "description": "only resources whose URI starts with this (e.g. file:///project/docs/)",
}
_RESOURCE = {
    "type": "object",
    "description": "A resource as resources/list lists it (no content)",
    "properties": {
        "uri": {"type": "string"},
        "name": {"type": "string"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "mimeType": {"type": "string"},
        "size": {"type": "integer"},
    },
    "required": ["uri", "name"],
}
_PAGE_OUTPUT = {
    "type": "object",
    "properties": {
        "resources": {"type": "array", "items": _RESOURCE},
        "nextCursor": {"type": "string", "description": "pass it as cursor for the next page"},
    },
    "required": ["resources"],
}
_CONTENT = {
    "type": "object",
    "description": "A content item as resources/read sends it: text, or a base64 blob",
    "properties": {
        "uri": {"type": "string"},
        "mimeType": {"type": "string"},
        "text": {"type": "string"},
        "blob": {"type": "string", "description": "the bytes, base64-encoded"},
    },
    "required": ["uri"],
}
_ANNOTATIONS = types.ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

TOOLS: dict[str, types.Tool] = {
    SEARCH: types.Tool(
        name=SEARCH,
        title="Search resources",
        description=(
            "Search the catalogue: resources whose URI, name, title or description contain the query "
            "(case-insensitive) come first, then those whose text contains every word of it; each "
            "group in URI order. Optional filters narrow it; a page at a time (nextCursor)."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_SEARCH_LENGTH,
                    "pattern": SEARCH_PATTERN,
                    "description": "words to find",
                },
                "uriPrefix": _URI_PREFIX,
                "tag": {"type": "string", "minLength": 1, "description": "only resources with this tag"},
                "mimeType": {
                    "type": "string",
                    "pattern": MEDIA_TYPE_FILTER_PATTERN,
                    "description": "exactly this media type, or type/* (e.g. image/*)",
                },
                "cursor": _CURSOR,
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        output_schema=_PAGE_OUTPUT,
        annotations=_ANNOTATIONS.model_copy(update={"title": "Search resources"}),
    ),
    LIST: types.Tool(
        name=LIST,
        title="List resources",
        description=(
            "Browse the catalogue. By default one level of the URI tree at uriPrefix (the root when "
            "left out): the resources there and the folders (prefixes ending in '/') to open next. "
            "With recursive, every resource under uriPrefix, flat. In URI order, a page at a time."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "uriPrefix": {**_URI_PREFIX, "description": "the folder to open (e.g. file:///project/)"},
                "recursive": {
                    "type": "boolean",
                    "default": False,
                    "description": "every resource under uriPrefix instead of one level",
                },
                "cursor": _CURSOR,
            },
            "additionalProperties": False,
        },
        output_schema={
            **_PAGE_OUTPUT,
            "properties": {
                **_PAGE_OUTPUT["properties"],
                "folders": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "URI prefixes one level down, to pass as uriPrefix",
                },
            },
            "required": ["resources", "folders"],
        },
        annotations=_ANNOTATIONS.model_copy(update={"title": "List resources"}),
    ),
    READ: types.Tool(
        name=READ,
        title="Read a resource",
        description=(
            "Read a resource by URI: its text or blob; for a directory, the contents of the readable "
            "resources under it (bounded: truncated says when some were left out). A resource that "
            "asks for consent asks for it first."
        ),
        input_schema={
            "type": "object",
            "properties": {"uri": {"type": "string", "minLength": 1, "description": "the resource's URI"}},
            "required": ["uri"],
            "additionalProperties": False,
        },
        output_schema={
            "type": "object",
            "properties": {
                "uri": {"type": "string"},
                "contents": {"type": "array", "items": _CONTENT},
                "truncated": {"type": "boolean"},
            },
            "required": ["uri", "contents", "truncated"],
        },
        annotations=_ANNOTATIONS.model_copy(update={"title": "Read a resource"}),
    ),
}


def input_schema(name: str) -> dict[str, Any] | None:
    """A tool's input schema by name, for the SDK's ``Mcp-Param-*`` header check (so a call does
    not run ``tools/list`` to find it)."""
    tool = TOOLS.get(name)
    return tool.input_schema if tool is not None else None


# -- arguments ---------------------------------------------------------------------------------------


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class SearchArguments(_Arguments):
    query: SearchText
    uri_prefix: UriPrefix | None = Field(default=None, alias="uriPrefix")
    tag: Tag | None = None
    mime_type: MediaTypeFilter | None = Field(default=None, alias="mimeType")
    cursor: str | None = Field(default=None, max_length=MAX_CURSOR_LENGTH)


class ListArguments(_Arguments):
    uri_prefix: UriPrefix | None = Field(default=None, alias="uriPrefix")
    recursive: bool = False
    cursor: str | None = Field(default=None, max_length=MAX_CURSOR_LENGTH)


class ReadArguments(_Arguments):
    uri: str = Field(min_length=1)


class ToolRefusal(Exception):
    """A call the caller can correct: answered as a result with ``isError`` and this text."""


def _arguments(model: type[_Arguments], given: dict[str, Any] | None) -> Any:
    try:
        return model.model_validate(given or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        raise ToolRefusal(f"Invalid arguments: {where}: {first['msg']}") from None


# -- the tools -------------------------------------------------------------------------------------


def _page(records: list[ResourceRecord], next_cursor: str | None, **extra: Any) -> dict[str, Any]:
    entries = [resource_fields(record) for record in records]
    structured: dict[str, Any] = {"resources": entries, **extra}
    if next_cursor is not None:
        structured["nextCursor"] = next_cursor
    summary: dict[str, Any] = {"resources": len(entries), **extra}
    if next_cursor is not None:
        summary["nextCursor"] = next_cursor
    # The links for a host that shows resources; the summary (folders, the cursor) for the model.
    content = [results.resource_link(entry) for entry in entries]
    content.append(results.text_block(json.dumps(summary, ensure_ascii=False)))
    return results.tool_result(content, structured)


async def _search(endpoint: CatalogSource, ctx: Ctx, given: dict[str, Any] | None) -> dict[str, Any]:
    args: SearchArguments = _arguments(SearchArguments, given)
    filters = ListingFilter(
        uri_prefix=args.uri_prefix, tag=args.tag, query=args.query, mime_type=args.mime_type
    )
    principal = principal_of(ctx)
    records, next_cursor = await on_replica(
        endpoint.catalog,
        lambda reader: reading.filtered_page(
            reader, principal, filters, args.cursor, listing=reading.SEARCH_LISTING
        ),
        tenant_id=principal.tenant_id,
    )
    return _page(records, next_cursor)


async def _list(endpoint: CatalogSource, ctx: Ctx, given: dict[str, Any] | None) -> dict[str, Any]:
    args: ListArguments = _arguments(ListArguments, given)
    principal = principal_of(ctx)
    if args.recursive:
        records, next_cursor = await on_replica(
            endpoint.catalog,
            lambda reader: reading.filtered_page(
                reader,
                principal,
                ListingFilter(uri_prefix=args.uri_prefix),
                args.cursor,
                listing=reading.FLAT_LISTING,
            ),
            tenant_id=principal.tenant_id,
        )
        return _page(records, next_cursor, folders=[])
    entries, next_cursor = await on_replica(
        endpoint.catalog,
        lambda reader: reading.folder_page(reader, principal, args.uri_prefix or "", args.cursor),
        tenant_id=principal.tenant_id,
    )
    folders = [entry.folder for entry in entries if entry.folder is not None]
    records = [entry.record for entry in entries if entry.record is not None]
    return _page(records, next_cursor, folders=folders)


async def _read(endpoint: CatalogSource, ctx: Ctx, params: types.CallToolRequestParams) -> Any:
    args: ReadArguments = _arguments(ReadArguments, params.arguments)
    try:
        read = await read_with_consent(
            endpoint,
            ctx,
            args.uri,
            request_state=params.request_state,
            input_responses=params.input_responses,
        )
    except ResourceNotFound:
        # Missing and invisible alike: nothing tells one from the other.
        raise ToolRefusal(NOT_FOUND_TEXT.format(uri=args.uri)) from None
    except InvalidReadParams as exc:
        raise ToolRefusal(exc.detail) from None
    except MCPError as exc:
        if exc.error.code == CONSENT_DECLINED:
            raise ToolRefusal(DECLINED_TEXT) from None
        raise  # the client cannot be asked: its capability error, as resources/read answers
    if isinstance(read, types.InputRequiredResult):
        return read
    outcome = read.outcome
    structured = {
        "uri": args.uri,
        "contents": [results.content_fields(item) for item in outcome.contents],
        "truncated": outcome.truncated,
    }
    content = [results.embedded_resource(item) for item in outcome.contents]
    if outcome.truncated:
        content.append(results.text_block("Truncated: read the rest of the directory's resources one by one"))
    return results.tool_result(content, structured)


_Simple = Callable[[CatalogSource, Ctx, dict[str, Any] | None], Awaitable[dict[str, Any]]]
_SIMPLE: dict[str, _Simple] = {SEARCH: _search, LIST: _list}


def list_tools(endpoint: CatalogSource):
    async def handler(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS.values()))

    return handler


def call_tool(endpoint: CatalogSource):
    async def handler(
        ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if params.name not in TOOLS:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}", data={"name": params.name})
        try:
            if params.name == READ:
                answer = await _read(endpoint, ctx, params)
                if isinstance(answer, types.InputRequiredResult):
                    return answer
            else:
                answer = await _SIMPLE[params.name](endpoint, ctx, params.arguments)
        except InvalidCursor:
            answer = results.tool_error(INVALID_CURSOR_TEXT)
        except ToolRefusal as refusal:
            answer = results.tool_error(str(refusal))
        return types.CallToolResult.model_validate(answer)

    return handler
