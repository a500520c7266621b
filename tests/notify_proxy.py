"""A TCP proxy in front of PostgreSQL that can hold back the notifications one connection receives.

For the read-replica tests of ``serve --workers 2`` and of two ``serve`` processes (two hosts), and
the listener barrier's tests: each worker's LISTEN connection goes through
the proxy (``CATALOG_LISTEN_DATABASE_URL``), and the test holds back the ``NotificationResponse``
messages of one worker's connection, as a listener that has not processed a NOTIFY yet. Everything
else passes: the listener's keepalive queries are answered, so it does not reconnect (a reconnection
would be a gap, which the listener's own rule already covers). Releasing a connection forwards what
was held, in order.

The proxy parses the server's side of the protocol (one type byte and a 32-bit length per message),
so the connection must not negotiate TLS: the URL it is given carries ``sslmode=disable``. It runs
on its own event loop in a thread, so that blocking calls of the test never stall the listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

NOTIFICATION = b"A"  # the server's NotificationResponse


@dataclass(eq=False)
class Proxied:
    """One client connection through the proxy, named by the client's port."""

    client_port: int
    writer: asyncio.StreamWriter
    holding: bool = False
    held: list[bytes] = field(default_factory=list)
    forwarded_notifications: int = 0


class NotifyProxy:
    """Listens on 127.0.0.1:``port`` and forwards to ``target_host``:``target_port`` (a host that
    is a directory: the server's Unix socket in it, as libpq reads it)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections: dict[int, Proxied] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="notify-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for proxied in list(self.connections.values()):
                proxied.writer.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def hold(self, client_port: int) -> None:
        """From now on, keep the notifications for ``client_port``'s connection."""

        def hold() -> None:
            self.connections[client_port].holding = True

        self._call(hold)

    def release(self, client_port: int) -> None:
        """Forward what was held for ``client_port``'s connection, and hold nothing more."""

        def release() -> None:
            proxied = self.connections[client_port]
            proxied.holding = False
            for message in proxied.held:
                proxied.writer.write(message)
            proxied.forwarded_notifications += len(proxied.held)
            proxied.held.clear()

        self._call(release)

    def client_ports(self) -> set[int]:
        """The client ports of the connections open through the proxy now."""
        return self._call(
            lambda: {port for port, proxied in self.connections.items() if not proxied.writer.is_closing()}
        )

    def held(self, client_port: int) -> int:
        """How many notifications are held for ``client_port``'s connection now."""
        return self._call(lambda: len(self.connections[client_port].held))

    def _call(self, function: Callable[[], T]) -> T:
        """``function()`` on the proxy's loop (its state is only ever touched there)."""

        async def run() -> T:
            return function()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        client_port = client_writer.get_extra_info("peername")[1]
        try:
            host, port = self.target
            if host.startswith("/"):  # a socket directory, as libpq reads a host: .s.PGSQL.PORT in it
                server_reader, server_writer = await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
            else:
                server_reader, server_writer = await asyncio.open_connection(host, port)
        except OSError:
            client_writer.close()
            return
        proxied = Proxied(client_port, client_writer)
        self.connections[client_port] = proxied
        upstream = asyncio.create_task(self._copy(client_reader, server_writer))
        try:
            await self._messages(server_reader, proxied)
        finally:
            upstream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await upstream
            for writer in (client_writer, server_writer):
                writer.close()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    @staticmethod
    async def _messages(reader: asyncio.StreamReader, proxied: Proxied) -> None:
        """The server's messages to the client, one by one; notifications held while asked to."""
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readexactly(5)
                (length,) = struct.unpack("!I", head[1:])
                message = head + await reader.readexactly(length - 4)
                if head[:1] == NOTIFICATION and proxied.holding:
                    proxied.held.append(message)
                    continue
                proxied.forwarded_notifications += head[:1] == NOTIFICATION
                proxied.writer.write(message)
                await proxied.writer.drain()


@contextlib.contextmanager
def notify_proxy(target_host: str, target_port: int) -> Iterator[NotifyProxy]:
    proxy = NotifyProxy(target_host, target_port)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
