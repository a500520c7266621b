"""`catalog serve` sockets as they ship: no keep-alive penalty on any worker, IPv4 or IPv6.

Each response is written in two parts (headers, body). With Nagle's algorithm on, the second part of
every response after the first on a keep-alive connection waits for the client's delayed ACK
(about 40 ms on Linux). asyncio disables Nagle (``TCP_NODELAY``) on every TCP connection it accepts,
unless the listening socket it was given claims another family: uvicorn wraps a bare ``fd`` as
``AF_UNIX``, which is how `catalog serve` once handed its socket over.

The guard reads the option on the server's own side of real connections (``pidfd_getfd`` into the
worker that accepted each one), so it is deterministic: no latency is timed here (the latency itself
is a row of ``bench/``: keep-alive vs fresh-connection requests through `catalog serve`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

import httpx
import pytest

from tests.processes import (
    Served,
    borrowed_socket,
    catalog_env,
    my_ports,
    server_side,
    serving,
    started,
    worker_of,
    worker_processes,
)

pytestmark = pytest.mark.process

ROUTES = ("/healthz", "/readyz", "/openapi.json", "/admin/v1/tenants")
MAX_CONNECTIONS = 40  # fresh connections tried until every worker has accepted at least one


def server_nodelay(served: Served, local_port: int) -> tuple[int, int]:
    """``(worker pid, TCP_NODELAY)`` of the server side of our connection from ``local_port``."""
    pid, fd = server_side(served, local_port)
    with borrowed_socket(pid, fd) as sock:
        assert sock.family in (socket.AF_INET, socket.AF_INET6)
        return pid, sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest.mark.parametrize(("host", "workers"), [("127.0.0.1", 1), ("127.0.0.1", 2), ("::1", 1), ("::1", 2)])
def test_every_connection_a_worker_accepts_has_nagle_off(
    host: str, workers: int, database_url: str, tmp_path: Path
) -> None:
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    with serving("--workers", str(workers), env=env, host=host) as served:
        started(served, workers)
        seen: dict[int, int] = {}  # worker pid -> TCP_NODELAY of a connection it accepted
        for _ in range(MAX_CONNECTIONS):
            with httpx.Client(base_url=served.base_url, timeout=10) as client:
                # Keep-alive: every route over one connection, then inspect that connection.
                statuses = [client.get(route).status_code for route in ROUTES]
                assert statuses == [200, 200, 200, 401]
                (port,) = my_ports(served)
                pid, nodelay = server_nodelay(served, port)
                seen[pid] = nodelay
            if len(seen) == workers:
                break
        assert len(seen) == workers, f"only {len(seen)} of {workers} workers accepted a connection"
        assert all(seen.values()), f"TCP_NODELAY off on the server side: {seen}"


HELD_CONNECTIONS = 64  # open at once, as long-lived streams are
FAIR_SHARE_FLOOR = 12  # each of 2 workers holds at least this many: missed by chance ~1 in 10^6


def test_each_worker_listens_on_its_own_socket_and_connections_spread_evenly(
    database_url: str, tmp_path: Path
) -> None:
    """``--workers 2`` on Linux: each worker has a listening socket of its own on the port
    (``SO_REUSEPORT``), so the kernel spreads connections over the workers by their addresses. On
    one shared socket whichever worker woke first took them: 31 of 32 listen streams on one worker
    were seen."""
    env = catalog_env(CATALOG_DATABASE_URL=database_url, CATALOG_HOME=str(tmp_path / "home"))
    with serving("--workers", "2", env=env) as served:
        started(served, 2)
        listening = {}  # worker pid -> (device, inode) of its listening socket
        for worker in worker_processes(served):
            (fd,) = [c.fd for c in worker.net_connections("tcp") if c.status == "LISTEN"]
            with borrowed_socket(worker.pid, fd) as sock:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) == 1
                stat = os.fstat(sock.fileno())
                listening[worker.pid] = (stat.st_dev, stat.st_ino)
        assert len(listening) == 2 and len(set(listening.values())) == 2, listening

        with contextlib.ExitStack() as stack:
            held: dict[int, int] = dict.fromkeys(listening, 0)
            for _ in range(HELD_CONNECTIONS):
                before = my_ports(served)
                client = stack.enter_context(httpx.Client(base_url=served.base_url, timeout=10))
                assert client.get("/healthz").json()["status"] == "ok"
                (port,) = my_ports(served) - before
                held[worker_of(served, port)] += 1
            assert min(held.values()) >= FAIR_SHARE_FLOOR, held
