"""The hot path of ``/mcp``: plain 2026-07-28 reads, list pages and completions, without the SDK's stack.

Most traffic is agents listing and reading what they may see. Through the SDK each such request
costs its stateless request machinery (a kernel, a dispatch context, the middleware chain, pydantic
models both ways) plus catalog's token lookup and a transaction: a read cost about 3 ms of CPU where
the database's share is a tenth of that. Here a request that is *plainly* valid is answered directly:

1. :func:`fast_request` accepts only what the SDK would accept and answer exactly so: a POST with
   a JSON body and a JSON ``Accept``, no routing header twice, the body one request for
   ``resources/read`` (only ``uri``), ``resources/list`` (at most a ``cursor``) or
   ``completion/complete`` (a resource template's argument, string values only) whose envelope,
   version, method and name pass the SDK's own ladder (``classify_inbound_request``) and its own
   check of the params (``validate_client_request``: a ``clientCapabilities`` that is not an
   object, say), no progress token or other envelope key the SDK would act on.
2. The core authenticates and loads the grants in one statement (for a read, the row too; for a
   list page or a completion of a credential seen before, the page or the scan's first statement
   too) and applies the one visibility rule (``fast_read``, ``fast_resources_page``,
   ``fast_completion``).
3. The answer is the SDK's wire shape for that result (the handlers' fields, cache hints,
   ``resultType``, the ``serverInfo`` stamp), as bytes.

Anything else, including every refusal and every error (a missing or hidden resource, a bad cursor,
a revoked token), goes to the SDK with the body replayed, so what a client is told then has one
author. ``CATALOG_MCP_FAST_PATH`` turns this path off or shadows it with the SDK's
(``catalog.mcp.shadow``); with tracing on it opens the MCP method's span as the SDK would.
``catalog_mcp_plain_answers_total{method}`` counts what was answered here
(``tests/e2e/mcp/test_mcp_fast_path.py`` proves the path is taken and agrees with the SDK).
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass
from typing import Any, TypeGuard

import mcp_types as types
import orjson
from mcp.server.streamable_http import CONTENT_TYPE_JSON, CONTENT_TYPE_SSE
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.methods import validate_client_request
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from catalog.core.catalog import Catalog
from catalog.core.direct.completion import fast_completion
from catalog.core.direct.listing import fast_resources_page
from catalog.core.direct.reading import fast_read
from catalog.core.direct.tokens import token_principal
from catalog.core.principal import Principal
from catalog.core.replicas import on_replica
from catalog.mcp.handlers import listing_fields
from catalog.mcp.results import cache_hints, completion_fields, content_fields, stamped
from catalog.observability import metrics, tracing
from catalog.observability.context import note_mcp, note_principal
from catalog.settings import Settings

READ = "resources/read"
LIST = "resources/list"
COMPLETE = "completion/complete"
LISTEN = "subscriptions/listen"  # a stream, served by ``catalog.mcp.fast_listen``
PARAMS = {
    READ: frozenset({"_meta", "uri"}),
    LIST: frozenset({"_meta", "cursor"}),
    COMPLETE: frozenset({"_meta", "ref", "argument", "context"}),
    LISTEN: frozenset({"_meta", "notifications"}),
}
# The envelope keys a plain request may carry. Trace context (W3C, spec 1.1) is among them: with
# tracing on, this path's method span follows it as the SDK's does (``tracing.mcp_method_span``).
ENVELOPE_KEYS = frozenset(
    {
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
        "io.modelcontextprotocol/clientInfo",
        "io.modelcontextprotocol/logLevel",
        "traceparent",
        "tracestate",
        "baggage",
    }
)
_RESPONSE_HEADERS = [(b"content-type", CONTENT_TYPE_JSON.encode())]


@dataclass(frozen=True)
class FastRequest:
    method: str
    request_id: str | int
    uri: str = ""  # resources/read; the template of completion/complete
    cursor: str | None = None  # resources/list
    argument: str = ""  # completion/complete: the argument, its partial value, the others known
    partial: str = ""
    context: dict[str, str] | None = None
    notifications: types.SubscriptionFilter | None = None  # subscriptions/listen
    meta: dict[str, Any] | None = None  # the envelope (``_meta``): its trace context, for the span


def names_fast_method(scope: Scope) -> bool:
    """A 2026-07-28 POST whose ``Mcp-Method`` header names a method this path may answer: worth
    reading the body for (the edge has already decided the request is 2026-07-28)."""
    return scope.get("method") == "POST" and Headers(scope=scope).get(MCP_METHOD_HEADER) in PARAMS


def _accepted(accept: str) -> tuple[bool, bool]:
    """Whether ``accept`` takes JSON, and SSE: the SDK's rule (``check_accept_headers``)."""
    media = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    wildcard = bool(media & {"*/*"})
    json_ok = wildcard or bool(media & {"application/*", CONTENT_TYPE_JSON})
    sse_ok = wildcard or bool(media & {"text/*", CONTENT_TYPE_SSE})
    return json_ok, sse_ok


def fast_request(scope: Scope, body: bytes) -> FastRequest | None:
    """What ``body`` asks for, if the request is one this path answers exactly as the SDK would;
    None sends it to the SDK."""
    headers = Headers(scope=scope)
    if headers.get("content-type", "").split(";")[0].strip().lower() != CONTENT_TYPE_JSON:
        return None
    accepts_json, accepts_sse = _accepted(headers.get("accept", ""))
    if not accepts_json:
        return None
    if find_duplicated_routing_header((name.decode("latin-1"), "") for name, _ in scope["headers"]):
        return None
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # the SDK's to refuse (or to read: orjson refuses what json may accept)
    if not isinstance(message, dict) or message.keys() != {"jsonrpc", "id", "method", "params"}:
        return None
    method, request_id, params = message["method"], message["id"], message["params"]
    if (
        message["jsonrpc"] != "2.0"
        or not isinstance(method, str)  # a list or an object is unhashable: the SDK refuses it
        or method not in PARAMS
        or isinstance(request_id, bool)
        or not isinstance(request_id, str | int)
        or not isinstance(params, dict)
        or "_meta" not in params
        or not params.keys() <= PARAMS[method]
    ):
        return None
    envelope = params["_meta"]
    if not isinstance(envelope, dict) or not envelope.keys() <= ENVELOPE_KEYS:
        return None  # a progress token or anything else: the SDK's to interpret
    if not isinstance(classify_inbound_request(message, headers=dict(headers)), InboundModernRoute):
        return None
    if not sdk_accepts(method, envelope[PROTOCOL_VERSION_META_KEY], params):
        return None
    if method == READ:
        uri = params.get("uri")
        return FastRequest(method, request_id, uri=uri, meta=envelope) if isinstance(uri, str) else None
    if method == LIST:
        cursor = params.get("cursor")
        if not isinstance(cursor, str | None):
            return None
        return FastRequest(method, request_id, cursor=cursor, meta=envelope)
    if method == LISTEN:
        return _listen_request(request_id, params) if accepts_sse else None
    return _completion_request(request_id, params)


_ACCEPTED_PARAMS: dict[bytes, bool] = {}
ACCEPTED_PARAMS_KEPT = 4096  # distinct (method, version, params) verdicts kept; then it starts again


def sdk_accepts(method: str, version: object, params: dict[str, Any]) -> bool:
    """The SDK's own check of the params for this method and version (its runner's first step):
    what it refuses, ``clientCapabilities: 5`` say, is refused by it, not answered here.

    Its verdict is a function of the three alone, so it is kept per canonical JSON of them (an
    agent reading the same URI again sends the same params with another id): the same verdict,
    without the model's validation each time."""
    try:
        key = orjson.dumps([method, version, params], option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits: asked every time
        key = None
    if key is not None and (verdict := _ACCEPTED_PARAMS.get(key)) is not None:
        return verdict
    try:
        validate_client_request(method, version, params)  # type: ignore[arg-type]
        verdict = True
    except (ValueError, KeyError, TypeError):  # a pydantic ValidationError is a ValueError
        verdict = False
    if key is not None:
        if len(_ACCEPTED_PARAMS) >= ACCEPTED_PARAMS_KEPT:
            _ACCEPTED_PARAMS.clear()
        _ACCEPTED_PARAMS[key] = verdict
    return verdict


def _strings(value: object, keys: frozenset[str] | None = None) -> TypeGuard[dict[str, str]]:
    """A JSON object of strings (with exactly ``keys``, if given)."""
    return (
        isinstance(value, dict)
        and (keys is None or value.keys() == keys)
        and all(isinstance(item, str) for item in value.values())
    )


_REF_KEYS = frozenset({"type", "uri"})
_ARGUMENT_KEYS = frozenset({"name", "value"})


def _completion_request(request_id: str | int, params: dict[str, Any]) -> FastRequest | None:
    """A completion of a resource template's argument, every part of the shape the SDK validates
    (anything else, a prompt reference included, is the SDK's)."""
    ref, argument, context = params.get("ref"), params.get("argument"), params.get("context", {})
    if (
        not _strings(ref, _REF_KEYS)
        or ref["type"] != "ref/resource"
        or not _strings(argument, _ARGUMENT_KEYS)
    ):
        return None
    if not isinstance(context, dict) or not context.keys() <= {"arguments"}:
        return None
    known = context.get("arguments", {})
    if not _strings(known):
        return None
    return FastRequest(
        COMPLETE,
        request_id,
        uri=ref["uri"],
        argument=argument["name"],
        partial=argument["value"],
        context=known,
        meta=params["_meta"],
    )


_FLAGS = ("resourcesListChanged", "toolsListChanged", "promptsListChanged")
_FILTER_KEYS = frozenset({*_FLAGS, "resourceSubscriptions"})


def _listen_request(request_id: str | int, params: dict[str, Any]) -> FastRequest | None:
    """A listen whose filter is the SDK model's fields with their own JSON types (an extension's
    key, a flag spelt as a string, anything else is the SDK's to read)."""
    requested = params.get("notifications")
    if not isinstance(requested, dict) or not requested.keys() <= _FILTER_KEYS:
        return None
    if not all(isinstance(requested.get(flag), bool | None) for flag in _FLAGS):
        return None
    uris = requested.get("resourceSubscriptions")
    if uris is not None and not (isinstance(uris, list) and all(isinstance(uri, str) for uri in uris)):
        return None
    return FastRequest(
        LISTEN,
        request_id,
        notifications=types.SubscriptionFilter.model_validate(requested),
        meta=params["_meta"],
    )


def response_body(
    request: FastRequest,
    result: dict[str, Any],
    principal: Principal,
    server_info: dict[str, Any],
    settings: Settings,
) -> bytes:
    """The JSON-RPC response the SDK sends for ``result`` after its serialisation (the handlers'
    cache hints, ``resultType``, the ``serverInfo`` stamp: ``catalog.mcp.results``)."""
    own = result.pop("ttlMs", None)  # a read's resource may set its own
    result.update(cache_hints(request.method, principal, settings))
    if own is not None:
        result["ttlMs"] = own
    response = {"jsonrpc": "2.0", "id": request.request_id, "result": stamped(result, server_info)}
    try:
        return orjson.dumps(response)  # a page of a hundred resources: several times json's speed
    except TypeError:  # an integer beyond 64 bits in some ``_meta``: the standard library writes it
        return json.dumps(response, separators=(",", ":")).encode()


async def fast_answer(
    catalog: Catalog, request: FastRequest, *, token: str | None, principal: Principal | None
) -> tuple[Principal, dict[str, Any]] | None:
    """The result of ``request`` for an opaque ``token`` or an authenticated ``principal``, and
    the principal it is for; None when the full path must answer.

    With read replicas the token is looked up on the primary first (a revocation is never outlived
    by a replica's lag), then the request is answered for its principal on a replica."""
    if catalog.read_replicas is None:
        return await _fast_answer(catalog, request, token=token, principal=principal)
    if token is not None:
        principal = await token_principal(catalog, token)
        if principal is None:
            return None  # unknown, revoked or expired: the full path refuses it
        token = None
    reader_principal = principal
    return await on_replica(
        catalog,
        lambda reader: _fast_answer(reader, request, token=None, principal=reader_principal),
        tenant_id=None if principal is None else principal.tenant_id,
    )


async def _fast_answer(
    catalog: Catalog, request: FastRequest, *, token: str | None, principal: Principal | None
) -> tuple[Principal, dict[str, Any]] | None:
    if request.method == READ:
        read = await fast_read(catalog, request.uri, token=token, principal=principal)
        if read is None:
            return None
        result = {"contents": [content_fields(read.content)]}
        if read.ttl_ms is not None:  # the resource's own, over the operator's (response_body)
            result["ttlMs"] = read.ttl_ms
        return read.principal, result
    if request.method == LIST:
        page = await fast_resources_page(catalog, request.cursor, token=token, principal=principal)
        if page is None:
            return None
        result: dict[str, Any] = {"resources": [listing_fields(*values) for values in page.entries]}
        if page.next_cursor is not None:
            result["nextCursor"] = page.next_cursor
        return page.principal, result
    completed = await fast_completion(
        catalog,
        request.uri,
        request.argument,
        request.partial,
        request.context,
        token=token,
        principal=principal,
    )
    if completed is None:
        return None
    completion = completed.completion
    return completed.principal, {
        "completion": completion_fields(completion.values, completion.has_more, completion.total)
    }


@functools.cache
def _method_metrics(method: str) -> tuple[Any, Any, Any]:
    """A method's metric children, looked up once (each ``labels`` call takes a lock)."""
    return (
        metrics.MCP_REQUESTS.labels(method, "2026", "result"),
        metrics.MCP_DURATION.labels(method, "2026"),
        metrics.MCP_PLAIN_ANSWERS.labels(method),
    )


async def answer_fast(
    scope: Scope,
    send: Send,
    catalog: Catalog,
    request: FastRequest,
    *,
    token: str | None,
    principal: Principal | None,
    server_info: dict[str, Any],
) -> Principal | None:
    """Answer ``request``; the principal it was answered for, or None (nothing sent) when the full
    path must answer."""
    started = time.perf_counter()
    with tracing.mcp_method_span(request.method, request.request_id, request.meta or {}):
        answered = await fast_answer(catalog, request, token=token, principal=principal)
    if answered is None:
        return None
    principal, result = answered
    body = response_body(request, result, principal, server_info, catalog.settings)
    note_principal(scope, principal)
    note_mcp(scope, request.method, "2026", None)
    requests, duration, plain = _method_metrics(request.method)
    requests.inc()
    duration.observe(time.perf_counter() - started)
    plain.inc()  # before the answer leaves: its reader may count
    headers = [*_RESPONSE_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return principal


async def received_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client went away first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the next app, the body already read handed over first."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
