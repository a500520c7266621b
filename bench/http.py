"""A minimal HTTP/1.1 keep-alive client and a closed-loop load generator, for loopback benchmarks.

Cheaper per request than a full client library (the request bytes are built once; a response is
read by its Content-Length, or its chunks), so on a 2-core machine the load generator takes as
little CPU as it can from the servers it measures. Servers run in their own processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MODERN = "2026-07-28"


def envelope() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "catalog-bench", "version": "0"},
    }


def mcp_request(
    host: str, port: int, method: str, params: dict[str, Any], *, token: str | None = None, path: str = "/mcp"
) -> bytes:
    """The bytes of one stateless 2026-07-28 POST (envelope in ``_meta``, routing headers)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": envelope(), **params}},
        separators=(",", ":"),
    ).encode()
    headers = {
        "Host": f"{host}:{port}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if method == "resources/read":
        headers["Mcp-Name"] = params["uri"]
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return _request("POST", path, headers, body)


def get_request(host: str, port: int, path: str, *, token: str | None = None) -> bytes:
    headers = {"Host": f"{host}:{port}", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return _request("GET", path, headers, b"")


def _request(method: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Connection:
    """One keep-alive connection; ``send(request_bytes)`` -> (status, body).

    A server closes a keep-alive connection left idle past its timeout (uvicorn: 5 s), which an
    interleaved benchmark does while another case runs a slow query; as any HTTP client does, the
    request is then sent again once on a new connection (every request here is safe to repeat).
    """

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: tuple[str, int]
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.address = address

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, (host, port))

    async def send(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                raise
            await self.close()  # closed by the server while idle: nothing of an answer came
            self.reader, self.writer = await asyncio.open_connection(*self.address)
            self.writer.write(request)
            head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = -1
        chunked = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        if length >= 0:
            return status, await self.reader.readexactly(length)
        if not chunked:
            raise RuntimeError("a response without Content-Length or chunks")
        parts = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return status, b"".join(parts)
            parts.append(data[:-2])

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


@dataclass
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def rps(self) -> float:
        """Answers a second that were what was asked for: a refusal is quick, not throughput."""
        return (self.requests - self.errors) / self.seconds

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies) or [0.0]
        return {
            "requests": self.requests,
            "errors": self.errors,
            "seconds": self.seconds,
            "rps": self.rps,
            "median_ms": ordered[len(ordered) // 2] * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000,
        }


async def closed_loop(
    host: str,
    port: int,
    request: bytes | Sequence[bytes],
    *,
    concurrency: int,
    seconds: float,
    check: bytes | None = None,
) -> LoadResult:
    """``concurrency`` clients, each sending its request again as soon as its answer is in, for
    ``seconds``. ``request`` is one request for every client or one per client (each agent with its
    own credential, as rate limits per credential expect). An answer that is not 200 (or lacks
    ``check``) counts as an error."""
    per_client = [request] * concurrency if isinstance(request, bytes) else list(request)
    if len(per_client) != concurrency:
        raise ValueError(f"{len(per_client)} requests for {concurrency} clients")
    connections = [await Connection.open(host, port) for _ in range(concurrency)]
    latencies: list[float] = []
    errors = 0
    deadline = 0.0

    async def client(conn: Connection, request: bytes) -> None:
        nonlocal errors
        while True:
            started = time.perf_counter()
            if started >= deadline:
                return
            status, body = await conn.send(request)
            latencies.append(time.perf_counter() - started)
            if status != 200 or (check is not None and check not in body):
                errors += 1

    try:
        for conn, own in zip(connections, per_client, strict=True):  # warm each connection once
            await conn.send(own)
        begun = time.perf_counter()
        deadline = begun + seconds
        await asyncio.gather(*(client(conn, own) for conn, own in zip(connections, per_client, strict=True)))
        elapsed = time.perf_counter() - begun
    finally:
        for conn in connections:
            await conn.close()
    return LoadResult(len(latencies), errors, elapsed, latencies)
