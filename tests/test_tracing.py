"""OpenTelemetry traces (issue 15 item 3): one ``resources/read`` over real HTTP with the official SDK
client is one trace: the HTTP request, the MCP method inside it (the SDK's span), the SQL
statements inside that, each with the tenant and principal, and no secret in any attribute.

The exporter is the OpenTelemetry SDK's in-memory one; skipped where ``catalog[otel]`` is not
installed (the ``test`` extra installs it, so CI runs this)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.instrumentation.asyncpg")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from catalog.observability import tracing
from tests.mcp_helpers import Served, mcp_settings, module_database, raw, served

pytestmark = pytest.mark.asyncio(loop_scope="session")

READ = "test://static-text"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracing.install(provider)
    try:
        yield exported
    finally:
        tracing.uninstall()
        provider.shutdown()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def srv(
    exporter: InMemorySpanExporter, postgres_server: Any, template_database: str, tmp_path_factory: Any
) -> AsyncIterator[Served]:
    async with module_database(postgres_server, template_database) as url:
        settings = mcp_settings(url, Path(tmp_path_factory.mktemp("home")))
        async with served(settings) as s:
            yield s


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[ReadableSpan]:
    chain = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        chain.append(span)
    return chain


async def test_one_resources_read_is_one_trace_request_then_mcp_method_then_sql(
    srv: Served, exporter: InMemorySpanExporter
) -> None:
    """A plain HTTP client (an agent that does not trace): the SDK client would put its own span's
    context in ``_meta`` when it shares this process's tracer, and the MCP span would follow that."""
    exporter.clear()
    response = await asyncio.to_thread(
        raw, srv, "resources/read", {"uri": READ}, token="staff", headers={"X-Request-Id": "trace-me"}
    )
    assert response.status_code == 200 and response.json()["result"]["contents"][0]["uri"] == READ
    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}

    [request] = [s for s in spans if s.name == "POST /mcp"]
    assert request.parent is None  # the root: nothing else of catalog's and no one else's
    assert request.attributes["http.route"] == "/mcp"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["mcp.method.name"] == "resources/read"
    assert request.attributes["catalog.request_id"] == "trace-me"

    [method] = [s for s in spans if s.name == "resources/read"]
    assert method.parent is not None and method.parent.span_id == request.context.span_id

    statements = [s for s in spans if s.attributes and "db.statement" in s.attributes]
    assert statements, [s.name for s in spans]
    assert all(request in ancestors(s, by_id) for s in statements)
    under_method = [s for s in statements if method in ancestors(s, by_id)]
    assert under_method, "the read's SQL runs inside the MCP method's span"
    assert {s.context.trace_id for s in spans} == {request.context.trace_id}

    traced = [request, method, *under_method]
    principals = {s.attributes.get("enduser.id") for s in traced}
    assert len(principals) == 1 and next(iter(principals)).startswith("token:")
    assert {s.attributes.get("catalog.tenant") for s in traced} == {"demo"}

    token = srv.token("staff")
    everything = repr([(s.name, dict(s.attributes or {})) for s in spans])
    assert token not in everything and token.split("_", 1)[-1] not in everything


async def test_a_callers_traceparent_makes_the_request_part_of_its_trace(
    srv: Served, exporter: InMemorySpanExporter
) -> None:
    exporter.clear()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = f"00-{trace_id}-00f067aa0ba902b7-01"
    response = await asyncio.to_thread(
        raw, srv, "resources/read", {"uri": READ}, token="staff", headers={"traceparent": parent}
    )
    assert response.status_code == 200
    [request] = [s for s in exporter.get_finished_spans() if s.name == "POST /mcp"]
    assert f"{request.context.trace_id:032x}" == trace_id
    assert request.parent is not None and f"{request.parent.span_id:016x}" == "00f067aa0ba902b7"


async def test_statements_outside_any_request_are_not_traced(
    srv: Served, exporter: InMemorySpanExporter
) -> None:
    """The LISTEN connection's keepalive (every two seconds) would otherwise be a trace of its own."""
    exporter.clear()
    listener = srv.catalog.event_listener
    future = asyncio.run_coroutine_threadsafe(listener._conn.fetchval("SELECT 1"), srv.loop)  # type: ignore[union-attr, arg-type]
    assert future.result(10) == 1
    assert [s for s in exporter.get_finished_spans() if s.name == "SELECT"] == []
