"""OpenTelemetry traces, off unless asked for: ``pip install 'catalog[otel]'`` and the standard
``OTEL_*`` variables.

On when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``) or an OTLP endpoint is
set (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and not
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The exporter, its endpoint, headers,
protocol, the service name (default ``catalog``) and resource attributes come from the usual
variables, read by the OpenTelemetry SDK itself.

Spans: the HTTP request (``catalog.observability.middleware``), the MCP method (the ``mcp`` SDK's
own middleware opens it; catalog adds tenant and principal), and each database statement (the
asyncpg instrumentation: SQL text with placeholders, never the parameters). Every span started while
a request is served carries ``catalog.tenant`` and ``enduser.id`` (the principal's label, a token id
or a JWT subject, never a credential) once the request has authenticated.

Off, nothing of the SDK is imported and each request costs one ``is None`` test.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger("catalog.tracing")

_tracer: Any = None  # an opentelemetry Tracer once tracing is on


def tracer() -> Any:
    return _tracer


def wanted(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the standard variables ask for traces (read without importing anything)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_from_environment() -> bool:
    """Turn tracing on if the environment asks for it (once per process); whether it is on."""
    if _tracer is not None or not wanted():
        return _tracer is not None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_* asks for traces but OpenTelemetry is not installed: pip install 'catalog[otel]'"
        )
        return False
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "catalog"})
    provider = TracerProvider(resource=resource)
    for exporter in _exporters():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    return True


def _exporters() -> list[Any]:
    names = [
        n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()
    ]
    exporters: list[Any] = []
    for name in names:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = os.environ.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
            )
            if protocol == "grpc":
                # Not in the otel extra: an operator who asks for grpc installs its exporter.
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # pyright: ignore[reportMissingImports]
                    OTLPSpanExporter,
                )
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            exporters.append(OTLPSpanExporter())
        elif name != "none":
            logger.warning("OTEL_TRACES_EXPORTER %r is not one catalog knows (otlp, console); ignored", name)
    return exporters


def install(provider: Any) -> None:
    """Trace into ``provider`` (an SDK ``TracerProvider``): the global provider (the MCP SDK's spans
    use it), request attributes on every span, and each asyncpg statement."""
    global _tracer
    from opentelemetry import trace

    provider.sampler = _no_orphan_statements(provider.sampler)
    provider.add_span_processor(_request_attributes())
    trace.set_tracer_provider(provider)
    try:
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    except ImportError:
        logger.warning("opentelemetry-instrumentation-asyncpg is not installed: no database spans")
    else:
        AsyncPGInstrumentor().instrument(tracer_provider=provider)
    _tracer = provider.get_tracer("catalog")


def _request_attributes() -> Any:
    from opentelemetry.sdk.trace import SpanProcessor

    from catalog.observability.context import current_request

    class RequestAttributes(SpanProcessor):
        """Stamps each span started while a request is served with its tenant and principal."""

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            request = current_request.get()
            if request is not None:
                set_request_attributes(span, request)

    return RequestAttributes()


def _no_orphan_statements(sampler: Any) -> Any:
    """``sampler`` (the provider's, from ``OTEL_TRACES_SAMPLER``), but a statement outside any
    request is not traced: the LISTEN connection's keepalive would otherwise be a trace every two
    seconds per process, and start-up queries traces of their own."""
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
    from opentelemetry.trace import SpanKind, get_current_span

    class NoOrphanStatements(Sampler):
        def should_sample(
            self, parent_context: Any, trace_id: int, name: str, kind: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            attributes = args[0] if args else kwargs.get("attributes")
            if (
                kind is SpanKind.CLIENT
                and attributes
                and ("db.system" in attributes or "db.system.name" in attributes)
                and not get_current_span(parent_context).get_span_context().is_valid
            ):
                return SamplingResult(Decision.DROP)
            return sampler.should_sample(parent_context, trace_id, name, kind, *args, **kwargs)

        def get_description(self) -> str:
            return f"NoOrphanStatements({sampler.get_description()})"

    return NoOrphanStatements()


@contextlib.contextmanager
def mcp_method_span(method: str, request_id: str | int, meta: dict[str, Any]) -> Iterator[None]:
    """The MCP method's span for a request the fast path answers (``catalog.mcp.fast``): what the
    SDK's tracing middleware opens for the requests it handles (its name, kind, attributes, and the
    caller's trace context from ``_meta``), so a trace looks the same on either path. Nothing while
    tracing is off."""
    if _tracer is None:
        yield
        return
    from opentelemetry.propagate import extract
    from opentelemetry.trace import SpanKind, get_current_span

    context = None
    with contextlib.suppress(ValueError, TypeError):
        extracted = extract(meta)
        if get_current_span(extracted).get_span_context().is_valid:
            context = extracted
    attributes: dict[str, Any] = {"mcp.method.name": method, "jsonrpc.request.id": str(request_id)}
    version = meta.get("io.modelcontextprotocol/protocolVersion")
    if isinstance(version, str):
        attributes["mcp.protocol.version"] = version
    with _tracer.start_as_current_span(method, kind=SpanKind.SERVER, attributes=attributes, context=context):
        yield


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """Spans started inside are not recorded: the SDK path's second run of a request in
    ``CATALOG_MCP_FAST_PATH=shadow`` (``catalog.mcp.shadow``), which must not show in the request's
    trace as a second MCP method with its SQL. Their parent is an unsampled span of the current
    trace, so the sampler (parent-based, ``OTEL_TRACES_SAMPLER``'s default) drops each of them."""
    if _tracer is None:
        yield
        return
    import random

    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    current = trace.get_current_span().get_span_context()
    unsampled = SpanContext(
        current.trace_id if current.is_valid else random.getrandbits(128),
        random.getrandbits(64),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.DEFAULT),
    )
    with trace.use_span(NonRecordingSpan(unsampled), end_on_exit=False):
        yield


def set_request_attributes(span: Any, request: Any) -> None:
    span.set_attribute("catalog.request_id", request.request_id)
    if request.tenant is not None:
        span.set_attribute("catalog.tenant", request.tenant)
    if request.principal is not None:
        span.set_attribute("enduser.id", request.principal)


def uninstall() -> None:
    """Stop tracing (tests: the global provider stays, as OpenTelemetry allows setting it once)."""
    global _tracer
    if _tracer is None:
        return
    _tracer = None
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    AsyncPGInstrumentor().uninstrument()
