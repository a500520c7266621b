"""`catalog serve` bounds what a connection may cost before a request runs: the bytes of a request
head (``CATALOG_MAX_HEADER_BYTES``, 431), the time to send it (``CATALOG_HEADER_TIMEOUT_SECONDS``,
408), and the connections one client address holds open (``CATALOG_MAX_CONNECTIONS_PER_ADDRESS``,
503). Each refusal is counted in ``/metrics``.

Real processes and raw sockets: the limits live in the server's connection handling, below the app,
so nothing short of `catalog serve` and a socket that misbehaves on purpose shows them.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.processes import Served, catalog_env, run_catalog, serving, started

pytestmark = pytest.mark.process

ADMIN_TOKEN = "cat_serve-limits-platform-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
EVENT_WAIT_S = 30  # generous: the events below come in well under a second
MAX_HEADER_BYTES = 8192


def limited_env(database_url: str, tmp_path: Path, **limits: str) -> dict[str, str]:
    return catalog_env(
        CATALOG_DATABASE_URL=database_url,
        CATALOG_HOME=str(tmp_path / "home"),
        CATALOG_ADMIN_TOKEN=ADMIN_TOKEN,
        CATALOG_METRICS_ACCESS="open",
        **limits,
    )


@contextlib.contextmanager
def raw(served: Served, source: str = "127.0.0.1") -> Iterator[socket.socket]:
    """A plain TCP connection to the server from ``source`` (any 127.x.y.z is this machine)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(EVENT_WAIT_S)
        sock.bind((source, 0))
        sock.connect((served.host, served.port))
        yield sock
    finally:
        sock.close()


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails the test)."""
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def read_one_response(sock: socket.socket) -> bytes:
    """One whole response on a kept-alive connection: the head, then ``Content-Length`` bytes.

    The head and the body may arrive in separate segments, so a single ``recv`` can stop short.
    """
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-response: {received!r}"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length:\s*(\d+)\r?$", head + b"\r\n").group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-body: {received!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def refusals(served: Served) -> dict[str, float]:
    """``catalog_connections_refused_total`` by reason, as ``/metrics`` shows it."""
    text = httpx.get(f"{served.base_url}/metrics", timeout=10).text
    pattern = r'^catalog_connections_refused_total\{reason="([a-z_]+)"\} ([0-9.e+]+)$'
    return {reason: float(value) for reason, value in re.findall(pattern, text, re.MULTILINE)}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_head_over_the_limit_is_answered_431_and_closed(
    workers: int, database_url: str, tmp_path: Path
) -> None:
    env = limited_env(database_url, tmp_path, CATALOG_MAX_HEADER_BYTES=str(MAX_HEADER_BYTES))
    with serving("--workers", str(workers), env=env) as served:
        started(served, workers)
        head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
        with raw(served) as sock:
            sock.sendall(head + b"a" * (MAX_HEADER_BYTES + 1 - len(head)))  # one byte over, unfinished
            answer = read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer
        assert b"connection: close\r\n" in answer.lower()
        assert b"CATALOG_MAX_HEADER_BYTES" in answer
        # A head just under the limit is served as before.
        with raw(served) as sock:
            filler = b"a" * (MAX_HEADER_BYTES - len(head) - 100)
            sock.sendall(head + filler + b"\r\nConnection: close\r\n\r\n")
            assert read_until_closed(sock).startswith(b"HTTP/1.1 200 OK\r\n")
        assert refusals(served) == {"header_bytes": 1.0}


CLIENT_SEND_BUFFER = 64 * 1024


def most_a_closed_connection_took() -> int:
    """What a client can have sent over loopback once the server stops reading at the limit: the
    server's receive buffer at its largest (``tcp_rmem``'s maximum), our send buffer, and 1 MiB for
    the reads before the refusal."""
    receive_max = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    return receive_max + 2 * CLIENT_SEND_BUFFER + 1024 * 1024


def test_a_huge_head_is_cut_off_long_before_it_is_all_sent(database_url: str, tmp_path: Path) -> None:
    """A 300 MB head was once taken whole (the server's memory grew by its size): the server now
    stops at the limit, so a client gets no further than the sockets' buffers hold."""
    bound = most_a_closed_connection_took()
    huge = 4 * bound
    line = b"X-Filler: " + b"a" * 1000 + b"\r\n"  # many header lines: a server without a limit keeps them all
    chunk = line * 1024
    env = limited_env(database_url, tmp_path, CATALOG_MAX_HEADER_BYTES=str(MAX_HEADER_BYTES))
    with serving(env=env) as served:
        started(served)
        sent = 0
        with raw(served) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CLIENT_SEND_BUFFER)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            with contextlib.suppress(ConnectionError):  # the server closed: what we wanted
                while sent < huge:
                    sent += sock.send(chunk)
        assert sent < bound, f"the server took {sent} bytes of one request head"
        assert refusals(served) == {"header_bytes": 1.0}


def test_a_slow_head_is_closed_after_the_header_timeout_while_others_are_served(
    database_url: str, tmp_path: Path
) -> None:
    env = limited_env(database_url, tmp_path, CATALOG_HEADER_TIMEOUT_SECONDS="1")
    with serving(env=env) as served:
        started(served)
        with raw(served) as slow, raw(served) as silent:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")  # and nothing more
            with httpx.Client(base_url=served.base_url, timeout=10) as client:
                assert client.get("/healthz").json() == {"status": "ok"}
            answer = read_until_closed(slow)
            assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
            assert b"CATALOG_HEADER_TIMEOUT_SECONDS" in answer
            # A connection that never sent a byte is closed too, without an answer to nothing.
            assert read_until_closed(silent) == b""
        assert refusals(served) == {"header_timeout": 2.0}


def test_connections_beyond_the_per_address_cap_are_refused_while_another_address_gets_in(
    database_url: str, tmp_path: Path
) -> None:
    cap = 4
    env = limited_env(database_url, tmp_path, CATALOG_MAX_CONNECTIONS_PER_ADDRESS=str(cap))
    with serving(env=env) as served:
        started(served)
        with contextlib.ExitStack() as stack:
            held = [stack.enter_context(raw(served)) for _ in range(cap)]
            for sock in held:  # each one served, and kept open (keep-alive)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert read_one_response(sock).startswith(b"HTTP/1.1 200 OK\r\n")
            with raw(served) as excess:
                answer = read_until_closed(excess)
            assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert b"CATALOG_MAX_CONNECTIONS_PER_ADDRESS" in answer
            with raw(served, source="127.0.0.2") as other:
                other.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                assert read_until_closed(other).startswith(b"HTTP/1.1 200 OK\r\n")
            # A connection given back makes room: the server sees the close, then takes another.
            held[0].shutdown(socket.SHUT_WR)
            assert read_until_closed(held[0]) == b""
            counted = refusals(served)  # over a connection from 127.0.0.1: there is room again
        assert counted == {"per_address": 1.0}


def test_an_open_change_stream_outlives_the_header_timeout(database_url: str, tmp_path: Path) -> None:
    """The header timeout ends with the request head: a stream answered before it runs on. The slow
    connection opened after the stream is closed by the timeout (so the stream has been open for
    longer), and a change made then still arrives on the stream."""
    env = limited_env(database_url, tmp_path, CATALOG_HEADER_TIMEOUT_SECONDS="1")
    assert run_catalog("tenant", "create", "acme", env=env).returncode == 0
    with serving(env=env) as served:
        started(served)
        with (
            httpx.Client(
                base_url=f"{served.base_url}/admin/v1", headers=ADMIN, timeout=EVENT_WAIT_S
            ) as client,
            client.stream("GET", "/tenants/acme/changes/stream") as stream,
        ):
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(lines).startswith("retry: ")
            with raw(served) as slow:
                slow.sendall(b"GET /healthz HTTP/1.1\r\n")
                assert read_until_closed(slow).startswith(b"HTTP/1.1 408 ")
            created = client.post(
                "/tenants/acme/resources",
                json={"uri": "file:///after-the-timeout.txt", "name": "late", "text": "still here"},
            )
            assert created.status_code == 201, created.text
            data = next(line for line in lines if line.startswith("data: "))
            assert '"uri":"file:///after-the-timeout.txt"' in data
