"""`catalog` commands as real processes: start, watch what they print, find their workers.

Shared by every test that runs the CLI as a user does (``catalog serve`` with one or several
workers, ``catalog migrate``, ``catalog import``): behaviour that depends on the process (sockets,
workers, signals, sessions) is tested here, not through an in-process app.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import psutil
import pytest

from catalog.mcp.shadow import MARKER as SHADOW_MARKER

from .conftest import free_port

START_TIMEOUT = 60


# Kept from this process's environment by :func:`catalog_env`: the executor under test (``.ci/run``
# runs the MCP tests with ``CATALOG_MCP_FAST_PATH=off`` and ``shadow``), so served processes use it.
KEPT_SETTINGS = ("CATALOG_MCP_FAST_PATH",)


def catalog_env(**overrides: str) -> dict[str, str]:
    """This process's environment without any ``CATALOG_*`` setting (but :data:`KEPT_SETTINGS`),
    plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") or k in KEPT_SETTINGS}
    env.update(overrides)
    return env


def run_catalog(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


class Served:
    """A running ``catalog serve``: its process, port and everything it printed."""

    def __init__(self, process: subprocess.Popen[str], port: int, host: str = "127.0.0.1") -> None:
        self.process = process
        self.port = port
        self.host = host
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self.pumped = threading.Event()  # all the process printed has been read
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)
        self.pumped.set()

    def wait_for(self, text: str, timeout: float = START_TIMEOUT) -> None:
        """Block until the server prints ``text`` (or fail with everything it printed)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no {text!r} within {timeout}s; output so far:\n{''.join(self.output)}")
            if line is None:
                pytest.fail(f"server exited ({self.process.wait()}) before {text!r}:\n{''.join(self.output)}")
            self.output.append(line)
            if text in line:
                return

    def printed(self) -> str:
        """Everything the server printed so far (for failure messages)."""
        with contextlib.suppress(queue.Empty):
            while (line := self.lines.get_nowait()) is not None:
                self.output.append(line)
        return "".join(self.output)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"


@contextlib.contextmanager
def serving(*args: str, env: dict[str, str], host: str = "127.0.0.1") -> Iterator[Served]:
    """``catalog serve`` on a free port of ``host`` (killed on exit if it is still running)."""
    port = free_port(host)
    process = subprocess.Popen(
        [sys.executable, "-m", "catalog", "serve", "--host", host, "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    served = Served(process, port, host)
    try:
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    if env.get("CATALOG_MCP_FAST_PATH", "").strip().lower() == "shadow":
        no_shadow_difference(served)


def no_shadow_difference(served: Served) -> None:
    """Fail the test if the server logged a difference between its fast path's answer and the SDK
    path's (``CATALOG_MCP_FAST_PATH=shadow``, ``catalog.mcp.shadow``): the process has ended, so
    everything it printed is read to its end."""
    served.pumped.wait(timeout=30)
    printed = served.printed()
    if SHADOW_MARKER in printed:
        lines = [line for line in printed.splitlines() if SHADOW_MARKER in line]
        pytest.fail("the fast path and the SDK path answered differently:\n" + "\n".join(lines))


def started(served: Served, workers: int = 1) -> Served:
    """Wait until every worker has finished its start-up."""
    for _ in range(workers):
        served.wait_for("Application startup complete")
    return served


def stop(served: Served, sig: int = signal.SIGTERM) -> int:
    served.process.send_signal(sig)
    return served.process.wait(timeout=30)


# -- which worker holds which connection ------------------------------------------------------------


def worker_processes(served: Served) -> list[psutil.Process]:
    """The processes that accept connections: the serve process's children holding the listening
    socket (``--workers N``), or the serve process itself (one worker)."""
    serve = psutil.Process(served.process.pid)

    def listens(process: psutil.Process) -> bool:
        with contextlib.suppress(psutil.Error):
            return any(
                c.status == psutil.CONN_LISTEN and c.laddr.port == served.port
                for c in process.net_connections("tcp")
            )
        return False

    return [child for child in serve.children() if listens(child)] or [serve]


def my_ports(served: Served) -> set[int]:
    """Local ports of this test process's open connections to the server."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == served.port and c.status == psutil.CONN_ESTABLISHED
    }


def server_side(served: Served, local_port: int) -> tuple[int, int]:
    """``(pid, fd)`` of the server-side socket of our connection from ``local_port``."""
    for worker in worker_processes(served):
        for c in worker.net_connections("tcp"):
            if (
                c.status == psutil.CONN_ESTABLISHED
                and c.laddr.port == served.port
                and c.raddr
                and c.raddr.port == local_port
            ):
                return worker.pid, c.fd
    raise AssertionError(f"no worker holds the connection from port {local_port}")


def worker_of(served: Served, local_port: int) -> int:
    """The pid of the worker process holding the server side of our connection from ``local_port``."""
    return server_side(served, local_port)[0]


_SYS_PIDFD_OPEN = 434
_SYS_PIDFD_GETFD = 438


def borrowed_socket(pid: int, fd: int) -> socket.socket:
    """A duplicate of another process's socket descriptor (Linux ``pidfd_getfd``), to read its
    options as that process set them. Skips the test where the kernel does not allow it."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(_SYS_PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        _skip_unless_supported(ctypes.get_errno())
    try:
        copy = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if copy < 0:
            _skip_unless_supported(ctypes.get_errno())
    finally:
        os.close(pidfd)
    return socket.socket(fileno=copy)


def _skip_unless_supported(code: int) -> None:
    if code in (errno.ENOSYS, errno.EPERM):
        pytest.skip(f"pidfd_getfd is not available here ({os.strerror(code)})")
    raise OSError(code, os.strerror(code))
