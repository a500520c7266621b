"""OpenTelemetry traces: one ``resources/read`` over real HTTP with the official SDK
client is one trace: the HTTP request, the MCP method inside it (the SDK's span), the SQL
statements inside that, each with the tenant and principal, and no secret in any attribute.

The exporter is the OpenTelemetry SDK's in-memory one; skipped where ``catalog[otel]`` is not
installed (the ``test`` extra installs it, so CI runs this)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from catalog.observability import tracing
from tests.mcp_helpers import Served, mcp_settings, module_database, raw, served
from tests.processes import catalog_env

pytestmark = pytest.mark.process

try:
    import opentelemetry.instrumentation.asyncpg  # noqa: F401
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
except ImportError:  # catalog[otel] is not installed: only the "off" test runs
    HAVE_OTEL = False
else:
    HAVE_OTEL = True

needs_otel = pytest.mark.skipif(not HAVE_OTEL, reason="pip install 'catalog[otel]'")
on_session_loop = pytest.mark.asyncio(loop_scope="session")

OFF_PROBE = """
import sys
import threading
from catalog.app import create_app
from catalog.observability import tracing
from catalog.settings import Settings
create_app(Settings(database_url="postgresql://nobody@127.0.0.1/none", secret_key="k" * 32, home=sys.argv[1]))
loaded = sorted(name for name in sys.modules if name.startswith(("opentelemetry.sdk", "opentelemetry.instrumentation")))
print(tracing.tracer() is None, loaded)
"""


def test_off_by_default_nothing_of_the_opentelemetry_sdk_is_loaded(tmp_path: Path) -> None:
    env = {k: v for k, v in catalog_env().items() if not k.startswith("OTEL_")}
    probe = subprocess.run(
        [sys.executable, "-c", OFF_PROBE, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "True []"


READ = "test://static-text"


class Exported(InMemorySpanExporter if HAVE_OTEL else object):  # type: ignore[misc]
    """The in-memory exporter, telling when a request's span has ended: the middleware ends it
    after the response is sent, so the client can have its answer first."""

    def __init__(self) -> None:
        super().__init__()
        self.request_ended = threading.Event()

    def export(self, spans: Any) -> Any:
        result = super().export(spans)
        if any(span.name.startswith("POST /") for span in spans):
            self.request_ended.set()
        return result

    def clear(self) -> None:
        super().clear()
        self.request_ended.clear()

    def finished(self) -> Any:
        assert self.request_ended.wait(10), "the request's span never ended"
        return self.get_finished_spans()


@pytest.fixture(scope="module")
def exporter() -> Iterator[Exported]:
    if not HAVE_OTEL:
        pytest.skip("pip install 'catalog[otel]'")
    exported = Exported()
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
    exporter: Exported, postgres_server: Any, template_database: str, tmp_path_factory: Any
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


@needs_otel
@on_session_loop
async def test_one_resources_read_is_one_trace_request_then_mcp_method_then_sql(
    srv: Served, exporter: Exported
) -> None:
    """A plain HTTP client (an agent that does not trace): the SDK client would put its own span's
    context in ``_meta`` when it shares this process's tracer, and the MCP span would follow that."""
    exporter.clear()
    response = await asyncio.to_thread(
        raw, srv, "resources/read", {"uri": READ}, token="staff", headers={"X-Request-Id": "trace-me"}
    )
    assert response.status_code == 200 and response.json()["result"]["contents"][0]["uri"] == READ
    spans = exporter.finished()
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


@needs_otel
@on_session_loop
async def test_a_callers_traceparent_makes_the_request_part_of_its_trace(
    srv: Served, exporter: Exported
) -> None:
    """META-11 (docs/requirements.toml)."""
    exporter.clear()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = f"00-{trace_id}-00f067aa0ba902b7-01"
    response = await asyncio.to_thread(
        raw, srv, "resources/read", {"uri": READ}, token="staff", headers={"traceparent": parent}
    )
    assert response.status_code == 200
    [request] = [s for s in exporter.finished() if s.name == "POST /mcp"]
    assert f"{request.context.trace_id:032x}" == trace_id
    assert request.parent is not None and f"{request.parent.span_id:016x}" == "00f067aa0ba902b7"


@needs_otel
@on_session_loop
async def test_statements_outside_any_request_are_not_traced(srv: Served, exporter: Exported) -> None:
    """The LISTEN connection's keepalive (every two seconds) would otherwise be a trace of its own."""
    exporter.clear()
    listener = srv.catalog.event_listener
    future = asyncio.run_coroutine_threadsafe(listener._conn.fetchval("SELECT 1"), srv.loop)  # type: ignore[union-attr, arg-type]
    assert future.result(10) == 1
    assert [s for s in exporter.get_finished_spans() if s.name == "SELECT"] == []


@needs_otel
@on_session_loop
@pytest.mark.fast_path
async def test_tracing_on_keeps_a_plain_read_on_the_fast_path_with_the_sdks_span(
    srv: Served, exporter: Exported
) -> None:
    """Turning tracing on no longer moves traffic to the SDK path; the fast path
    opens the MCP method's span as the SDK's middleware does (name, kind, attributes)."""
    from opentelemetry.trace import SpanKind

    from catalog.observability import metrics

    exporter.clear()
    answered = metrics.MCP_PLAIN_ANSWERS.labels("resources/read")
    before = answered._value.get()  # type: ignore[attr-defined]
    response = await asyncio.to_thread(raw, srv, "resources/read", {"uri": READ}, token="staff", id="traced")
    assert response.status_code == 200 and response.json()["result"]["contents"][0]["uri"] == READ
    assert answered._value.get() == before + 1  # type: ignore[attr-defined]
    [method] = [s for s in exporter.finished() if s.name == "resources/read"]
    assert method.kind is SpanKind.SERVER
    assert method.attributes["mcp.method.name"] == "resources/read"
    assert method.attributes["mcp.protocol.version"] == "2026-07-28"
    assert method.attributes["jsonrpc.request.id"] == "traced"
    assert method.attributes["catalog.tenant"] == "demo"
