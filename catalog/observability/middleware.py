"""The outermost ASGI middleware: a request id, then one log line, metrics and a span per request.

Pure ASGI (not Starlette's ``BaseHTTPMiddleware``, which buffers through a task and memory stream
per request and breaks streaming): it only wraps ``send`` to learn the status and add
``X-Request-Id``, so an SSE stream's frames pass straight through. Outside the edge guard, so
refusals (421, 429, 413) are counted and logged like any answer.

The request id is the client's ``X-Request-Id`` when it is a sane token (letters, digits and
``.-_:``, at most 128 characters), else a new one; the response always carries it.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from typing import Any

from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog.observability import metrics, tracing
from catalog.observability.context import SCOPE_KEY, RequestRecord, current_request
from catalog.observability.logs import log_request

REQUEST_ID_HEADER = b"x-request-id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"


# A request id made here: this process's random prefix and a counter (unique without a system call
# per request; a worker's prefix differs from every other process's, forked or spawned).
_PROCESS_PREFIX = os.urandom(8).hex()
_REQUEST_COUNTER = itertools.count(1)


def _new_process_prefix() -> None:
    global _PROCESS_PREFIX, _REQUEST_COUNTER
    _PROCESS_PREFIX = os.urandom(8).hex()
    _REQUEST_COUNTER = itertools.count(1)


os.register_at_fork(after_in_child=_new_process_prefix)


def request_id_of(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER:
            text = value.decode("latin-1")
            if _REQUEST_ID.fullmatch(text):
                return text
            break
    return f"{_PROCESS_PREFIX}{next(_REQUEST_COUNTER):016x}"


class RouteTemplates:
    """A request's route template (``/admin/v1/tenants/{slug}``), never its path: the matched
    route's when the router got that far, else the template the path would have matched (a refusal
    at the edge, a route with no template of its own such as ``/mcp``), else ``unmatched``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._own: list[tuple[re.Pattern[str], str]] | None = None
        self._included: list[tuple[re.Pattern[str], str]] | None = None

    def __call__(self, scope: Scope) -> str:
        route = scope.get("route")
        if isinstance(getattr(route, "path", None), str):
            return _full_template(scope["path"], route)
        path = scope["path"]
        if self._own is None:  # at the first request: every route exists by then
            self._own = _compiled(
                {own for r in self.app.router.routes if (own := getattr(r, "path", None)) is not None}
            )
        template = _first_match(self._own, path)
        if template is None:
            if self._included is None:
                # The included routers' full templates, as documented; read only for a path that
                # is none of the app's own routes (a refusal at the edge): the schema takes a while.
                self._included = _compiled(set(self.app.openapi().get("paths", {})))
            template = _first_match(self._included, path)
        return template or UNMATCHED


def _first_match(table: list[tuple[re.Pattern[str], str]], path: str) -> str | None:
    return next((template for regex, template in table if regex.match(path)), None)


def _compiled(paths: set[str]) -> list[tuple[re.Pattern[str], str]]:
    # Fewer parameters first: a literal segment wins over a parameter that would also match.
    return sorted(((compile_path(p)[0], p) for p in paths), key=lambda entry: entry[1].count("{"))


def _full_template(path: str, route: Any) -> str:
    """The template of ``route`` as the app serves it. A route of an included router knows its
    path without the prefixes it was included under (``/tenants/{slug}``, served at
    ``/admin/v1/tenants/{slug}``): the prefix is the part of the path before the route matches."""
    regex = route.path_regex
    if regex.match(path):
        return route.path
    index = path.find("/", 1)
    while index != -1:
        if regex.match(path[index:]):
            return path[:index] + route.path
        index = path.find("/", index + 1)
    return UNMATCHED


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp, *, templates: RouteTemplates) -> None:
        self.app = app
        self.route_of = templates
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        record = RequestRecord(request_id_of(scope))
        scope[SCOPE_KEY] = record
        token = current_request.set(record)
        status = 0
        request_id_header = (REQUEST_ID_HEADER, record.request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), request_id_header]}
            await send(message)

        tracer = tracing.tracer()
        span: Any = None
        try:
            if tracer is None:
                await self.app(scope, receive, send_with_id)
            else:
                from opentelemetry.trace import use_span

                span = _start_request_span(tracer, scope)
                with use_span(span, end_on_exit=False):  # ended once its attributes are known
                    await self.app(scope, receive, send_with_id)
        except BaseException:
            status = status or 500  # uvicorn answers 500 for an app that failed before answering
            raise
        finally:
            current_request.reset(token)
            self._finish(scope, record, status, time.perf_counter() - started, span)

    def _finish(self, scope: Scope, record: RequestRecord, status: int, seconds: float, span: Any) -> None:
        route = self.route_of(scope)
        method = scope["method"] if scope["method"] in _METHODS else "OTHER"
        key = (route, method, status)
        children = self._children.get(key)
        if children is None:  # label lookups take a lock each: done once per label set
            children = self._children[key] = (
                metrics.HTTP_REQUESTS.labels(route, method, str(status)),
                metrics.HTTP_DURATION.labels(route, method),
            )
        children[0].inc()
        children[1].observe(seconds)
        fields = {
            "request_id": record.request_id,
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": round(seconds * 1000, 2),
            "mcp_method": record.mcp_method,
            "era": record.era,
            "rpc_code": record.rpc_code,
            "tenant": record.tenant,
            "principal": record.principal,
        }
        log_request(fields, status)
        if span is not None:
            _end_request_span(span, record, method, route, status)


def _start_request_span(tracer: Any, scope: Scope) -> Any:
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind

    carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())}
    method = scope["method"] if scope["method"] in _METHODS else "OTHER"
    return tracer.start_span(
        method,
        context=extract(carrier),  # a caller's traceparent makes this request part of its trace
        kind=SpanKind.SERVER,
        attributes={"http.request.method": method},
    )


def _end_request_span(span: Any, record: RequestRecord, method: str, route: str, status: int) -> None:
    from opentelemetry.trace import StatusCode

    span.update_name(f"{method} {route}")
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    tracing.set_request_attributes(span, record)
    if record.mcp_method is not None:
        span.set_attribute("mcp.method.name", record.mcp_method)
    if status >= 500:
        span.set_status(StatusCode.ERROR)
    span.end()
