"""What every command shares: the database to use, running a body against the catalogue, output.

Output rules (every command): what a script wants is on stdout -- a token, a JSONL dump, a summary,
tab-separated lists (one row a line, no header) -- and progress, confirmations and details go to
stderr. An error the operator can act on (an unknown tenant, a bad slug, an unreachable database)
is one ``catalog: ...`` line on stderr and exit status 1; a usage error is argparse's, status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from catalog.settings import ConfigError, Settings, get_settings

if TYPE_CHECKING:
    from catalog.core.service import Catalog

EXIT_FAILED = 1
EXIT_USAGE = 2

Run = Callable[[argparse.Namespace], int]
Body = Callable[["Catalog", argparse.Namespace], Awaitable[int]]
Commands = argparse._SubParsersAction  # type: ignore[type-arg]


def err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def usage(parser: argparse.ArgumentParser) -> Run:
    """A command group run without an action: its help on stderr, status 2."""

    def run(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return run


def iso(value: datetime | None) -> str:
    """A timestamp as scripts read it: UTC, seconds, ``Z``; empty for none."""
    if value is None:
        return ""
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def row(*fields: object) -> str:
    """One tab-separated line; tabs and newlines inside a field become spaces (one row, one line)."""
    shown = ("" if field is None else str(field) for field in fields)
    return "\t".join(value.replace("\t", " ").replace("\n", " ") for value in shown)


# -- the database -----------------------------------------------------------------------------------


@contextlib.contextmanager
def database(settings: Settings, *, migrate_embedded: bool = True) -> Iterator[str]:
    """The database URL to use: the configured server, or the embedded one started for the duration."""
    if settings.database_url is not None:
        url = settings.async_database_url().render_as_string(hide_password=False)
        check_reachable(url)
        yield url
        return
    from catalog.db import migrate
    from catalog.db.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.ensure_home())
    url = embedded.start()
    try:
        if migrate_embedded:
            migrate.upgrade(url)
        yield url
    finally:
        embedded.release()


def check_reachable(url: str) -> None:
    from sqlalchemy.engine import make_url

    from catalog.db.migrate import current_revision

    try:
        asyncio.run(asyncio.wait_for(current_revision(url), timeout=10))
    except Exception as exc:
        target = make_url(url)
        where = f"{target.host or 'localhost'}:{target.port or 5432}/{target.database}"
        raise ConfigError(f"cannot reach the database at {where}: {first_line(exc)}") from None


def require_head(url: str) -> None:
    from catalog.db.migrate import current_revision, head_revision

    current = asyncio.run(current_revision(url))
    head = head_revision()
    if current != head:
        raise ConfigError(
            f"the database schema is at {current or 'an empty schema'}, not at head {head}:"
            " run `catalog migrate upgrade` first"
        )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- running a command against the catalogue --------------------------------------------------------


def command(body: Body) -> Run:
    """Run ``body(catalog, args)`` on the database; core errors become one line and exit 1."""

    def run(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import SQLAlchemyError

        from catalog.core.errors import CatalogError, InvalidInput

        settings = get_settings()
        with database(settings) as url:
            try:
                return asyncio.run(_with_catalog(settings, url, body, args))
            except CatalogError as exc:
                details = "; ".join(f"{e.pointer}: {e.detail}" for e in exc.errors)
                shown = details and isinstance(exc, InvalidInput)
                err(f"catalog: {exc.detail}" + (f" ({details})" if shown else ""))
                return EXIT_FAILED
            except BrokenPipeError:  # `catalog export ... | head`: the reader is gone
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return EXIT_FAILED
            except (SQLAlchemyError, ConnectionError) as exc:
                orig = getattr(exc, "orig", None) or exc
                raise ConfigError(f"database error: {first_line(orig)}") from None
            except OSError as exc:
                where = f"{exc.filename}: " if exc.filename else ""
                raise ConfigError(f"{where}{exc.strerror or exc}") from None

    return run


async def _with_catalog(settings: Settings, url: str, body: Body, args: argparse.Namespace) -> int:
    from catalog.bootstrap import COMMAND_POOL_SIZE, open_catalog

    async with open_catalog(settings, url=url, pool_size=COMMAND_POOL_SIZE) as catalog:
        return await body(catalog, args)


def confirm(question: str, *, assume_yes: bool) -> None:
    """Ask before something that cannot be undone; ``--yes`` answers for a script.

    The question goes to stderr and the answer is read from stdin (a terminal, or a pipe:
    ``echo y | catalog ...``); anything but ``y``/``yes``, end of input included, cancels.
    """
    if assume_yes:
        return
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not answer:
        print(file=sys.stderr)
    if answer.strip().lower() not in ("y", "yes"):
        raise ConfigError("cancelled, nothing changed (pass --yes to confirm without a prompt)")
