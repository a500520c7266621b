"""Prometheus metrics: what catalog counts, and ``GET /metrics`` in the text exposition format.

Multiprocess: ``catalog serve --workers N`` gives every worker the same ``PROMETHEUS_MULTIPROC_DIR``
(:func:`prepare_multiprocess_dir`, before the workers start); each writes its values there and
``/metrics``, whichever worker answers, sums them into one view. ``prometheus_client`` chooses its
value store when it is first imported, so the variable must be set before any worker imports this
module (spawned workers import everything afresh). Gauges of live things (connections in use, open
streams) are ``livesum``: the values of a worker that ended are removed (:func:`worker_exited`).

Labels are bounded: a route TEMPLATE (never the path), an HTTP method, a status, an MCP method from
the protocol's fixed set, an era, a JSON-RPC code. Never a URI, a token or other client input.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

MULTIPROC_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# Seconds: from a fast cached read to a slow import batch or a statement timeout.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

HTTP_REQUESTS = Counter(
    "catalog_http_requests", "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"],
)  # fmt: skip
HTTP_DURATION = Histogram(
    "catalog_http_request_duration_seconds",
    "HTTP request duration until the response ended (a stream: its whole life)",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
)
MCP_REQUESTS = Counter(
    "catalog_mcp_requests",
    "MCP requests handled, by method, protocol era (2026 or 2025) and outcome (result or an error code)",
    ["method", "era", "outcome"],
)
MCP_PLAIN_ANSWERS = Counter(
    "catalog_mcp_plain_answers",
    "2026-07-28 requests answered on the fast path (catalog.mcp.fast; the metric keeps its first name), by method",
    ["method"],
)
MCP_FAST_PATH_DIFFERENCES = Counter(
    "catalog_mcp_fast_path_differences",
    "CATALOG_MCP_FAST_PATH=shadow: requests whose fast-path answer differed from the SDK handlers'"
    " answer to the same request (each is logged at WARNING), by method",
    ["method"],
)
MCP_DURATION = Histogram(
    "catalog_mcp_request_duration_seconds",
    "MCP handler duration, by method and era",
    ["method", "era"],
    buckets=LATENCY_BUCKETS,
)
DB_POOL_IN_USE = Gauge(
    "catalog_db_pool_connections_in_use", "Pooled connections checked out now", multiprocess_mode="livesum"
)
DB_POOL_WAITING = Gauge(
    "catalog_db_pool_waiting", "Callers waiting for a pooled connection now", multiprocess_mode="livesum"
)
DB_POOL_CHECKOUT = Histogram(
    "catalog_db_pool_checkout_seconds",
    "Time to get a pooled connection (waiting for one, or opening one)",
    buckets=LATENCY_BUCKETS,
)
STREAMS_OPEN = Gauge(
    "catalog_mcp_streams_open",
    "Open MCP streams: kind listen (2026 subscriptions/listen) or session (a 2025 session's GET)",
    ["kind"],
    multiprocess_mode="livesum",
)
EVENTS_RECEIVED = Counter("catalog_events_received", "Change events received from PostgreSQL NOTIFY")
EVENTS_DELIVERED = Counter("catalog_events_delivered", "Change events handed to subscriptions' consumers")
EVENTS_COALESCED = Counter(
    "catalog_events_coalesced", "Change events merged into a pending one for the same URI and kind"
)
EVENTS_DROPPED = Counter(
    "catalog_events_dropped",
    "Change events a subscription never saw one by one: replaced by an overflow gap marker, or pending"
    " when it was closed as a slow consumer, or an unreadable NOTIFY payload",
    ["reason"],
)
EVENT_DELIVERY_DELAY = Histogram(
    "catalog_event_delivery_delay_seconds",
    "From the NOTIFY (sent at commit) reaching this process to its consumer taking the batch",
    buckets=LATENCY_BUCKETS,
)
READ_REPLICA_READS = Counter(
    "catalog_read_replica_reads",
    "MCP reads with read replicas configured (CATALOG_READ_DATABASE_URL), by where they ran: replica or primary",
    ["target"],
)
READ_REPLICA_SKIPS = Counter(
    "catalog_read_replica_skips",
    "Read replicas passed over for a read, by reason: down (refused or failed), lagging (beyond"
    " CATALOG_READ_MAX_LAG_MS), behind (not yet past the position a notification told of) or"
    " barrier (the process's listener not proven current within the barrier's bound)",
    ["reason"],
)
READ_BARRIER_ROUNDS = Counter(
    "catalog_read_barrier_rounds",
    "Listener barrier rounds (a NOTIFY echoed to this process's listener) sent for reads on replicas;"
    " every read that arrived before a round's NOTIFY shares it",
)
LISTENER_RECONNECTS = Counter("catalog_listener_reconnects", "Reconnections of the LISTEN connection")
FEED_GAPS = Counter(
    "catalog_change_feed_gaps",
    "Gap markers (anything may have changed): reconnected and unresolved per process, overflow per"
    " subscription",
    ["reason"],
)
IMPORT_ROWS = Counter(
    "catalog_import_rows",
    "Imported items by result (created, updated, unchanged, failed, skipped)",
    ["result"],
)
IMPORT_DURATION = Histogram(
    "catalog_import_duration_seconds",
    "Duration of whole imports",
    buckets=(0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0),
)
REFUSALS = Counter(
    "catalog_rate_limited",
    "Requests refused with 429, by surface (mcp, admin) and limit (requests, streams, sessions)",
    ["surface", "limit"],
)
CONNECTIONS_REFUSED = Counter(
    "catalog_connections_refused",
    "Connections `catalog serve` answered and closed before a request ran, by reason (header_bytes:"
    " 431, header_timeout: 408 or closed, per_address: 503)",
    ["reason"],
)
SESSION_REFUSALS = Counter(
    "catalog_mcp_sessions_refused",
    "2025-11-25 initialize requests that opened no session, by reason: caller or tenant (its live"
    " sessions at CATALOG_MAX_SESSIONS_PER_CALLER/_PER_TENANT, 429), params (what the session would"
    " keep is over its byte cap or not storable, -32602)",
    ["reason"],
)

MCP_METHODS = frozenset(
    {
        "initialize", "ping", "server/discover", "resources/list", "resources/templates/list",
        "resources/read", "resources/subscribe", "resources/unsubscribe", "subscriptions/listen",
        "completion/complete", "tools/list", "tools/call", "prompts/list", "prompts/get",
        "logging/setLevel", "notifications/initialized", "notifications/cancelled",
    }
)  # fmt: skip


def method_label(method: str) -> str:
    """An MCP method as a label value: one of the protocol's, else ``other`` (client input)."""
    return method if method in MCP_METHODS else "other"


# -- the multiprocess directory ----------------------------------------------------------------------


def prepare_multiprocess_dir() -> Path | None:
    """Give the workers about to start one empty directory for their values (and return it, if it
    was made here, for :func:`remove_multiprocess_dir`). A directory the operator named is emptied:
    values from an earlier run would otherwise be counted again."""
    named = os.environ.get(MULTIPROC_VARIABLE)
    if named:
        path = Path(named)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink(missing_ok=True)
        return None
    made = Path(tempfile.mkdtemp(prefix="catalog-metrics-"))
    os.environ[MULTIPROC_VARIABLE] = str(made)
    return made


def remove_multiprocess_dir(path: Path | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        if os.environ.get(MULTIPROC_VARIABLE) == str(path):
            del os.environ[MULTIPROC_VARIABLE]


def worker_exited(pid: int) -> None:
    """A worker ended: its live gauges no longer count (its counters do: what it did, happened)."""
    if os.environ.get(MULTIPROC_VARIABLE):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


# -- exposition -----------------------------------------------------------------------------------


class _Snapshot:
    """A collector of values read at scrape time (the same for every worker: e.g. from PostgreSQL)."""

    def __init__(self, families: list[Any]) -> None:
        self.families = families

    def collect(self) -> list[Any]:
        return self.families


def exposition(extra: Sequence[Any] = ()) -> tuple[bytes, str]:
    """The text format of every worker's metrics (one view), plus ``extra`` metric families."""
    if os.environ.get(MULTIPROC_VARIABLE):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(REGISTRY._collector_to_names):  # this process's metrics, and its defaults
            registry.register(collector)
    if extra:
        registry.register(_Snapshot(list(extra)))
    return generate_latest(registry), CONTENT_TYPE_LATEST


# -- the database pool ----------------------------------------------------------------------------


_observed_pools: dict[type, type] = {}


def observe_pool(engine: Any) -> None:
    """Count the engine's checkouts: in use, waiting, and how long getting a connection took.

    SQLAlchemy has events for checkout and checkin but none for the wait before a checkout, so the
    pool's class is swapped for a subclass timing ``_do_get``; ``recreate()`` (on ``dispose``) builds
    ``self.__class__``, so a recreated pool stays observed.
    """
    from sqlalchemy import event

    pool = engine.sync_engine.pool
    base = type(pool)
    observed = _observed_pools.get(base)
    if observed is None:
        observed = _observed_pools[base] = type(f"Observed{base.__name__}", (base,), {"_do_get": _timed_get})
    pool.__class__ = observed
    event.listen(engine.sync_engine, "checkout", _checked_out)
    event.listen(engine.sync_engine, "checkin", _checked_in)


def _timed_get(self: Any) -> Any:
    started = time.perf_counter()
    DB_POOL_WAITING.inc()
    try:
        # ``type(self)`` is the Observed subclass made above, so super() is the engine's own pool
        # class, which has ``_do_get``; the checker cannot follow a class made by type().
        return super(type(self), self)._do_get()  # pyright: ignore[reportAttributeAccessIssue]
    finally:
        DB_POOL_WAITING.dec()
        DB_POOL_CHECKOUT.observe(time.perf_counter() - started)


def _checked_out(dbapi_connection: object, record: Any, proxy: object) -> None:
    record.record_info["catalog_checked_out"] = True
    DB_POOL_IN_USE.inc()


def _checked_in(dbapi_connection: object, record: Any) -> None:
    # A connection invalidated while checked out is checked in too; count each checkout once
    # (``record_info`` outlives an invalidation, ``info`` does not).
    if record is not None and record.record_info.pop("catalog_checked_out", False):
        DB_POOL_IN_USE.dec()


@contextlib.contextmanager
def stream_open(is_2026: bool) -> Any:
    """Counts an open stream: a 2026-07-28 listen, or a 2025-11-25 session's GET stream."""
    gauge = STREAMS_OPEN.labels("listen" if is_2026 else "session")
    gauge.inc()
    try:
        yield
    finally:
        gauge.dec()


def record_import(tenant: str, report: Any, seconds: float) -> None:
    """A finished import: its rows by result, its duration, and one log line saying so. Counted in
    the process that ran it: ``catalog import`` run with the server's ``PROMETHEUS_MULTIPROC_DIR``
    adds to the server's view (a finished process's counters still count)."""
    import logging

    from catalog.observability.logs import log_event

    results = {
        "created": report.created,
        "updated": report.updated,
        "unchanged": report.unchanged,
        "failed": len(report.failed),
        "skipped": len(report.skipped),
    }
    for result, count in results.items():
        if count:
            IMPORT_ROWS.labels(result).inc(count)
    IMPORT_DURATION.observe(seconds)
    log_event(
        logging.getLogger("catalog.import"),
        "import finished",
        tenant=tenant,
        duration_ms=round(seconds * 1000, 2),
        **results,
    )
