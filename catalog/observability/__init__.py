"""Metrics, structured logs and traces: what an operator watches catalog with.

``metrics`` (Prometheus, multiprocess), ``logs`` (JSON or text lines), ``tracing`` (OpenTelemetry,
off unless the ``OTEL_*`` variables ask for it), ``middleware`` (the outermost ASGI layer: request
id, request line, HTTP metrics, the request span), ``mcp`` (the MCP method of each request),
``context`` (what a request told about itself), ``endpoint`` (``GET /metrics`` and installing it
all into the app). Imports nothing heavy: the database engine and the event hub import
``metrics`` at start-up.
"""
