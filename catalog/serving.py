"""How `catalog serve` runs the app: one uvicorn server per process, a small supervisor for several.

The serve entry owns everything process-wide (the app factory owns none of it):

* **The socket** is bound once by the CLI and handed to uvicorn as a socket object, never as a bare
  descriptor: uvicorn wraps a bare ``fd`` as ``AF_UNIX``, and asyncio then never sets
  ``TCP_NODELAY`` on the connections it accepts, so every response after the first on a keep-alive
  connection waited for the client's delayed ACK (about 40 ms).
* **Stopping** (:class:`CatalogServer`): on SIGTERM/SIGINT uvicorn stops accepting, waits for open
  connections, then runs the lifespan shutdown. Streams never end on their own, so the server first
  calls :func:`catalog.runtime.begin_shutdown`: the app's one shutdown signal, which the event hub
  and the MCP endpoint await to end their streams (each listen with its graceful result).
* **The garbage collector** is paused while a serving process starts (:func:`collector_paused`:
  start-up is imports), the imports are frozen as they are (:func:`import_app`), and the rest is
  settled once the server has started (:func:`settle_garbage_collector`).
* **Workers** (``--workers N``, :class:`Supervisor`): N spawned processes serve the port. On Linux
  each listens on a socket of its own (``SO_REUSEPORT``, :func:`listening_socket`) and the kernel
  spreads new connections evenly over them by their addresses; on one shared socket whichever
  worker woke first took most of them, so long-lived streams piled onto one process. The
  supervisor's socket keeps the port bound and never listens. Elsewhere the workers share it. Each
  follows its supervisor (``PR_SET_PDEATHSIG``: a supervisor killed outright takes its workers with
  it), a worker that dies is replaced, and SIGTERM/SIGINT stop them all gracefully.
* **Read replicas** (``CATALOG_READ_DATABASE_URL``): before the workers start, the supervisor
  creates the table in which they share the WAL positions of the changes each has notified
  (:mod:`catalog.core.replica_positions`), so that no worker reads from a replica older than a
  notification another one delivered. If it cannot, a log line says so and each worker keeps the
  rule for its own notifications only.
* **Observability**: uvicorn's access log is off (``catalog.observability`` writes one structured
  line per request instead) and its loggers use catalog's format (``CATALOG_LOG_FORMAT``). The
  supervisor gives its workers one fresh ``PROMETHEUS_MULTIPROC_DIR`` before they start, so
  ``/metrics`` on any worker is the sum of all, and drops a dead worker's live gauges.
* **What a connection may cost before a request runs** (:class:`GuardedHttpProtocol`, uvicorn's
  httptools protocol with three bounds uvicorn lacks): the bytes of a request head
  (``CATALOG_MAX_HEADER_BYTES``, 431), the time to send one (``CATALOG_HEADER_TIMEOUT_SECONDS``,
  408) and the connections one client address holds open (``CATALOG_MAX_CONNECTIONS_PER_ADDRESS``,
  503). An idle keep-alive connection is closed by uvicorn's own ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import http
import logging
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from catalog.auth.refusals import PROBLEM_MEDIA_TYPE, encode_problem, problem_body
from catalog.core import replica_positions
from catalog.observability import metrics
from catalog.observability.logs import logging_config
from catalog.runtime import (
    begin_shutdown,
    collector_paused,
    freeze_start_up_imports,
    settle_garbage_collector,
)
from catalog.settings import get_settings

logger = logging.getLogger("catalog.serving")

APP_FACTORY = "catalog.app:create_app"
SUPERVISOR_PID_VARIABLE = "CATALOG_SUPERVISOR_PID"
GRACEFUL_SHUTDOWN_S = 10
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class CatalogServer(uvicorn.Server):
    """uvicorn's server, telling the app it is stopping before it waits for open connections."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            settle_garbage_collector()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        begin_shutdown()
        await super().shutdown(sockets)


@dataclass(frozen=True)
class ConnectionLimits:
    """This process's bounds on a connection before its request runs (from the settings)."""

    max_header_bytes: int
    header_timeout_s: float
    per_address: int  # this process's share; 0: no cap


@functools.cache
def connection_limits() -> ConnectionLimits:
    """This process's limits, read once (a worker reads the settings it was started with)."""
    settings = get_settings()
    cap = settings.max_connections_per_address
    return ConnectionLimits(
        max_header_bytes=settings.max_header_bytes,
        header_timeout_s=settings.header_timeout_seconds,
        # The kernel spreads one address's connections over the workers (SO_REUSEPORT hashes their
        # ports too), so each takes its share, as with the other per-caller limits.
        per_address=math.ceil(cap / settings.workers) if cap else 0,
    )


# Open connections of this process by client address (the peer's IP, never its port).
_OPEN_BY_ADDRESS: Counter[str] = Counter()


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounding what a connection costs before its request runs.

    * **Head bytes**: counted as they arrive, before the parser sees them (httptools keeps a header
      it has not finished in memory, however large). Past ``max_header_bytes`` the connection is
      answered 431 and closed at once, so the rest is never read. A head that begins in the same
      read as the end of the request before it (pipelining) is counted from the next read: at most
      one read (256 KiB) beyond the limit.
    * **Head time**: a new connection has ``header_timeout_s`` from its connect, a kept-alive one
      from the first byte of its next request, to finish the head; then 408 (or a plain close if
      nothing came) and closed. Once a head is complete the clock stops: a request's body, its
      response and a stream of events run as long as they need. Between requests uvicorn's own
      ``timeout_keep_alive`` closes an idle connection.
    * **Connections per address**: beyond the process's share of the cap, a new connection is
      answered 503 with Retry-After and closed before anything is read.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = connection_limits()
        self._in_head = True  # until the head of the current request is complete
        self._head_bytes = 0
        self._head_started = False  # a byte of the current head has come
        self._head_timer: asyncio.TimerHandle | None = None
        self._counted_address: str | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None and self.limits.per_address:
            if _OPEN_BY_ADDRESS[address] >= self.limits.per_address:
                self._refuse(
                    503,
                    "per_address",
                    f"this address has {_OPEN_BY_ADDRESS[address]} connections open, the most one"
                    " address may hold (CATALOG_MAX_CONNECTIONS_PER_ADDRESS): close one first",
                    [(b"retry-after", b"1")],
                )
                return
            _OPEN_BY_ADDRESS[address] += 1
            self._counted_address = address
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._counted_address is not None:
            _OPEN_BY_ADDRESS[self._counted_address] -= 1
            if _OPEN_BY_ADDRESS[self._counted_address] <= 0:
                del _OPEN_BY_ADDRESS[self._counted_address]
            self._counted_address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            room = self.limits.max_header_bytes - self._head_bytes
            if len(data) > room:
                # Only what fits is parsed: the head may end within it (and a body follow).
                if room > 0:
                    self._head_bytes += room
                    super().data_received(data[:room])
                if self.transport.is_closing():
                    return  # the parser refused the request (400)
                if self._in_head:
                    self._refuse(
                        431,
                        "header_bytes",
                        f"the request head is larger than {self.limits.max_header_bytes} bytes"
                        " (CATALOG_MAX_HEADER_BYTES)",
                    )
                    return
                data = data[room:]
            else:
                self._head_bytes += len(data)
        super().data_received(data)

    # Parser callbacks: where a head begins and ends.
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._start_head_timer()  # a kept-alive connection's next request; a new one's runs on

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head, self._head_bytes, self._head_started = True, 0, False

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._in_head:
            return
        if self._head_started:
            self._refuse(
                408,
                "header_timeout",
                f"the request head was not complete within {self.limits.header_timeout_s:g} s"
                " (CATALOG_HEADER_TIMEOUT_SECONDS)",
            )
        else:  # nothing to answer: a connection that never sent a byte is just closed
            metrics.CONNECTIONS_REFUSED.labels("header_timeout").inc()
            logger.info("closed a connection from %s: no request within the header timeout", self._peer())
            self._refused = True
            self.transport.close()

    def _refuse(
        self, status: int, reason: str, detail: str, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        """Answer ``status`` as problem JSON, close the connection, and count the refusal."""
        metrics.CONNECTIONS_REFUSED.labels(reason).inc()
        logger.info("refused a connection from %s with %d: %s", self._peer(), status, detail)
        self._refused = True
        self._stop_head_timer()
        body = encode_problem(problem_body(status, http.HTTPStatus(status).phrase, detail))
        fields = [
            *self.server_state.default_headers,
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *(headers or []),
        ]
        head = b"".join(name + b": " + value + b"\r\n" for name, value in fields)
        self.transport.write(STATUS_LINE[status] + head + b"\r\n" + body)
        self.transport.close()

    def _peer(self) -> str:
        return self.client[0] if self.client else "an unknown address"


def server_config(workers: int = 1, **overrides: Any) -> uvicorn.Config:
    """How every catalog worker is configured (`catalog serve`'s defaults)."""
    options: dict[str, Any] = {
        "http": GuardedHttpProtocol,
        "factory": True,
        "workers": workers,
        "log_level": "info",
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
        "proxy_headers": False,
        "access_log": False,  # catalog.observability writes the request lines
        "log_config": logging_config(get_settings().log_format),
    }
    return uvicorn.Config(APP_FACTORY, **{**options, **overrides})


def serve(sock: socket.socket, workers: int) -> None:
    """Serve the app on the bound ``sock`` until SIGTERM/SIGINT, in this process or ``workers``."""
    config = server_config(workers)
    if workers > 1:
        Supervisor(config, sock, workers).run()
    else:
        CatalogServer(config).run(sockets=[sock])


def import_app() -> None:
    """Import what serving imports first -- the app factory's module (``APP_FACTORY``) and the
    surfaces ``create_app`` mounts -- and freeze it (:func:`catalog.runtime.freeze_start_up_imports`).

    ``catalog serve`` calls it while the embedded PostgreSQL starts, a worker before it serves;
    uvicorn then finds the module imported.
    """
    import catalog.admin.endpoints
    import catalog.app
    import catalog.console
    import catalog.mcp.endpoint  # noqa: F401

    freeze_start_up_imports()


def _worker_main(
    config: uvicorn.Config,
    sock: socket.socket,
    index: int,
    positions: replica_positions.TableHandle | None = None,
) -> None:
    """A worker process: follow the supervisor, then serve (spawned, so nothing is inherited).
    ``positions``: the table of notified positions the workers share, and ``index`` its row in it
    (a replacement takes the row of the worker it replaces), for the app to map."""
    if positions is not None:
        os.environ[replica_positions.FD_VARIABLE] = str(positions.fd)
        os.environ[replica_positions.INDEX_VARIABLE] = str(index)
    follow_supervisor()
    config.configure_logging()
    with contextlib.suppress(KeyboardInterrupt), collector_paused():  # until the server has started
        import_app()
        CatalogServer(config).run(sockets=[listening_socket(sock)])


def listening_socket(supervisors: socket.socket) -> socket.socket:
    """The socket this worker listens on: its own, bound to the supervisor's address, when the
    supervisor's socket allows that (``SO_REUSEPORT``, set by `catalog serve` on Linux for several
    workers), so the kernel balances connections between the workers; else the supervisor's."""
    if not getattr(socket, "SO_REUSEPORT", None) or not supervisors.getsockopt(
        socket.SOL_SOCKET, socket.SO_REUSEPORT
    ):
        return supervisors
    own = socket.socket(supervisors.family, socket.SOCK_STREAM)
    own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if supervisors.family == socket.AF_INET6:
        v6only = supervisors.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        own.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    own.bind(supervisors.getsockname())
    supervisors.close()  # this process's copy; the supervisor keeps the port bound
    return own


def follow_supervisor() -> None:
    """End with the supervisor, however it ends.

    A worker would outlive a supervisor that is killed outright (SIGKILL, OOM), holding the port,
    database connections and the LISTEN connection. On Linux the kernel then sends the worker
    SIGTERM (``PR_SET_PDEATHSIG``), and it shuts down as gracefully as on any SIGTERM.
    """
    supervisor = os.environ.get(SUPERVISOR_PID_VARIABLE)
    if supervisor is None or not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != int(supervisor):  # it died before we could ask to be told
        os.kill(os.getpid(), signal.SIGTERM)


class Supervisor:
    """Runs ``workers`` processes on one socket; replaces a worker that dies; stops them all on
    SIGTERM/SIGINT (each gets SIGTERM once and finishes its in-flight requests)."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket, workers: int) -> None:
        self.config = config
        self.sock = sock
        self.workers = workers
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[BaseProcess] = []
        self._stop = threading.Event()
        self._positions: replica_positions.TableHandle | None = None

    def _start_worker(self, index: int) -> BaseProcess:
        process = self._context.Process(
            target=_worker_main,
            args=(self.config, self.sock, index, self._positions),
            name="catalog-worker",
        )
        process.start()
        logger.info("started worker process [%s]", process.pid)
        return process

    def _on_signal(self, signum: int, frame: object) -> None:
        self._stop.set()

    def run(self) -> None:
        os.environ[SUPERVISOR_PID_VARIABLE] = str(os.getpid())  # inherited by the spawned workers
        os.environ["CATALOG_WORKERS"] = str(self.workers)  # each takes its share of per-caller limits
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _STOP_SIGNALS}
        metrics_dir = metrics.prepare_multiprocess_dir()  # before any worker imports prometheus_client
        self._positions = self._share_positions()
        try:
            self._processes = [self._start_worker(index) for index in range(self.workers)]
            while not self._stop.wait(0.5):
                for index, process in enumerate(self._processes):
                    if not process.is_alive() and not self._stop.is_set():
                        logger.warning(
                            "worker process [%s] ended (exit code %s); starting another",
                            process.pid,
                            process.exitcode,
                        )
                        if process.pid is not None:
                            metrics.worker_exited(process.pid)
                        self._processes[index] = self._start_worker(index)
            self._stop_workers()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            metrics.remove_multiprocess_dir(metrics_dir)
            if self._positions is not None:
                os.close(self._positions.fd)
                self._positions = None

    def _share_positions(self) -> replica_positions.TableHandle | None:
        """The workers' table of notified positions, when they read on replicas (handed to each as
        it starts); None, with a log line, when it cannot be created."""
        if not get_settings().read_database_url:
            return None
        try:
            fd = replica_positions.create(self.workers)
        except replica_positions.Unavailable as exc:
            logger.warning(
                "read replicas: no table of positions shared by the workers (%s); each worker keeps"
                " reads behind the notifications it delivered itself only",
                exc,
            )
            return None
        return replica_positions.TableHandle(fd)

    def _stop_workers(self) -> None:
        for process in self._processes:
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        for process in self._processes:
            process.join(GRACEFUL_SHUTDOWN_S + 5)
            if process.is_alive():
                logger.warning("worker process [%s] did not stop in time; killing it", process.pid)
                process.kill()
                process.join()
