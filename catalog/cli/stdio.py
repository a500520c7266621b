"""``catalog stdio --tenant SLUG``: MCP on stdin/stdout for a local client (a desktop app that
launches its servers as commands), straight on the database.

The order matters:

1. stdout is set aside for the protocol before anything runs: file descriptor 1 is pointed at
   stderr, and only the MCP writer holds the real stdout, so a banner, a migration's message, a
   warning, or a child process (the embedded PostgreSQL's) can never put a byte on the wire;
2. the database: the configured one (refused unless at head, as for ``serve``) or the embedded one
   under ``CATALOG_HOME``, started and migrated for the duration;
3. the principal: ``CATALOG_TOKEN``, a token of the tenant named (no OAuth here: there is no HTTP);
   missing, invalid or of another tenant, one ``catalog: ...`` line on stderr and exit status 1;
4. the events (LISTEN/NOTIFY) and the MCP server HTTP serves (``catalog.mcp.stdio``), until the
   client closes stdin, the process is told to stop, or the token is revoked or expires (then
   one line and exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import signal
import sys
from typing import TYPE_CHECKING

from catalog.cli.common import EXIT_FAILED, Commands, err
from catalog.config_error import ConfigError

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog
    from catalog.core.principal import Principal
    from catalog.settings import Settings

TOKEN_VARIABLE = "CATALOG_TOKEN"


def add_commands(commands: Commands) -> None:
    stdio = commands.add_parser(
        "stdio",
        help="serve MCP on stdin/stdout to one local client, as the holder of $CATALOG_TOKEN",
        description=(
            "Serve one tenant's MCP resources on stdin/stdout (newline-delimited JSON-RPC), for a client"
            f" that launches its servers as commands. {TOKEN_VARIABLE} holds a token of that tenant"
            " (`catalog token create`): what it may read is what the client sees. Logs go to stderr."
        ),
    )
    stdio.add_argument("--tenant", required=True, metavar="SLUG", help="the tenant whose resources to serve")
    stdio.set_defaults(run=stdio_command)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def stdio_command(args: argparse.Namespace) -> int:
    wire = _set_aside_stdio()
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        raise ConfigError(
            f"{TOKEN_VARIABLE} is not set: stdio serves the holder of a token of tenant {args.tenant!r}"
            f" (`catalog token create --tenant {args.tenant} --scope ...`)"
        )
    from catalog.bootstrap import database, require_head
    from catalog.settings import get_settings

    settings = get_settings()
    _log_to_stderr(settings)
    signal.signal(signal.SIGTERM, _raise_exit)  # unwinds, so the embedded PostgreSQL is released
    with database(settings) as url:
        if settings.database_url is not None:
            require_head(url)
        # The embedded server's URL is known only now; the LISTEN connection needs it too.
        settings = settings.model_copy(update={"database_url": url})
        return asyncio.run(_serve(settings, url, args.tenant, token, wire))


class Wire:
    """The protocol's stdin and stdout, on descriptors of their own."""

    def __init__(self, reading: int, writing: io.TextIOWrapper) -> None:
        self.reading = reading
        self.writing = writing


def _set_aside_stdio() -> Wire:
    """The protocol's stdin and stdout, set aside; descriptor 1 (``print``, children, C libraries)
    then goes to stderr, and descriptor 0 reads nothing."""
    sys.stdout.flush()
    writing = io.TextIOWrapper(os.fdopen(os.dup(1), "wb"), encoding="utf-8")
    reading = os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return Wire(reading, writing)


class PipeLines:
    """The client's lines, read by the event loop rather than by a thread: a thread blocked in
    ``read()`` cannot be cancelled, and the process must stop when the token ends even though the
    client is still connected."""

    LIMIT = 64 * 1024 * 1024  # the longest line (one JSON-RPC message) read

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    @classmethod
    async def open(cls, fd: int) -> PipeLines | None:
        """None when ``fd`` is not a pipe, socket or terminal (a regular file): then read it the
        SDK's way, in a thread."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=cls.LIMIT)
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
        except ValueError:
            return None
        return cls(reader)

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


def _log_to_stderr(settings: Settings) -> None:
    import logging.config

    from catalog.observability.logs import logging_config

    log_format = settings.log_format or ("text" if sys.stderr.isatty() else "json")
    logging.config.dictConfig(logging_config(log_format, stream="stderr"))


async def _serve(settings: Settings, url: str, slug: str, token: str, wire: Wire) -> int:
    import anyio

    from catalog.bootstrap import COMMAND_POOL_SIZE, open_catalog
    from catalog.events import events_lifespan

    async with open_catalog(settings, url=url, pool_size=COMMAND_POOL_SIZE) as catalog:
        principal = await _principal(catalog, slug, token)
        stopping = anyio.Event()
        async with events_lifespan(catalog, stopping):
            try:
                return await _until_done(catalog, principal, wire)
            finally:
                stopping.set()


async def _principal(catalog: Catalog, slug: str, token: str) -> Principal:
    import hmac

    from catalog.core.direct.tokens import token_principal
    from catalog.core.tenants import find_tenant

    tenant = await find_tenant(catalog, slug)
    if tenant is None:
        raise ConfigError(f"--tenant {slug}: no such tenant")
    if hmac.compare_digest(token.encode(), catalog.platform_admin_token.encode()):
        raise ConfigError(
            f"{TOKEN_VARIABLE}: the platform admin token is no tenant's; give a token of tenant {slug!r}"
            f" (`catalog token create --tenant {slug} --admin` sees all of it)"
        )
    principal = await token_principal(catalog, token)
    if principal is None:
        raise ConfigError(f"{TOKEN_VARIABLE}: the token is invalid, expired or revoked")
    if principal.tenant_id != tenant.id:
        raise ConfigError(f"{TOKEN_VARIABLE}: the token is not one of tenant {slug!r}")
    return principal


async def _until_done(catalog: Catalog, principal: Principal, wire: Wire) -> int:
    """Serve until the client closes stdin (0), or the token is revoked or expires (1)."""
    import contextlib

    import anyio
    from mcp.server.stdio import stdio_server

    from catalog.mcp.stdio import serve_stdio

    credentials = catalog.credential_watch
    ended: list[str] = []
    holding = credentials.hold(principal) if credentials is not None else contextlib.nullcontext()
    with holding as hold:
        async with anyio.create_task_group() as tasks:
            if hold is not None:

                async def end_with_credential() -> None:
                    ended.append(await hold.ended())
                    tasks.cancel_scope.cancel()

                tasks.start_soon(end_with_credential)
            lines = await PipeLines.open(wire.reading)
            stdin = (
                lines
                if lines is not None
                else anyio.wrap_file(io.TextIOWrapper(os.fdopen(wire.reading, "rb")))
            )
            async with stdio_server(stdin=stdin, stdout=anyio.wrap_file(wire.writing)) as streams:  # type: ignore[arg-type]
                await serve_stdio(catalog, principal, streams)
            tasks.cancel_scope.cancel()
    if ended:
        err(f"catalog: {TOKEN_VARIABLE}: the token was {ended[0]}; stopping")
        return EXIT_FAILED
    return 0
