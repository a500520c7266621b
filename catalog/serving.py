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
* **Observability**: uvicorn's access log is off (``catalog.observability`` writes one structured
  line per request instead) and its loggers use catalog's format (``CATALOG_LOG_FORMAT``). The
  supervisor gives its workers one fresh ``PROMETHEUS_MULTIPROC_DIR`` before they start, so
  ``/metrics`` on any worker is the sum of all, and drops a dead worker's live gauges.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from typing import Any

import uvicorn

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


def server_config(workers: int = 1, **overrides: Any) -> uvicorn.Config:
    """How every catalog worker is configured (`catalog serve`'s defaults)."""
    options: dict[str, Any] = {
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


def _worker_main(config: uvicorn.Config, sock: socket.socket) -> None:
    """A worker process: follow the supervisor, then serve (spawned, so nothing is inherited)."""
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
        self._processes: list[multiprocessing.process.BaseProcess] = []
        self._stop = threading.Event()

    def _start_worker(self) -> multiprocessing.process.BaseProcess:
        process = self._context.Process(
            target=_worker_main, args=(self.config, self.sock), name="catalog-worker"
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
        try:
            self._processes = [self._start_worker() for _ in range(self.workers)]
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
                        self._processes[index] = self._start_worker()
            self._stop_workers()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            metrics.remove_multiprocess_dir(metrics_dir)

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
