"""What every command shares: the database to use, running a body against the catalogue, output.

Output rules (every command): what a script wants is on stdout -- a token, a JSONL dump, a summary,
tab-separated lists (one row a line, no header) -- and progress, confirmations and details go to
stderr. An error the operator can act on (an unknown tenant, a bad slug, an unreachable database)
is one ``catalog: ...`` line on stderr and exit status 1; a usage error is argparse's, status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from catalog.config_error import ConfigError, first_line

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog
    from catalog.settings import Settings

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


def reader_gone() -> int:
    """`catalog export ... | head`: the reader of stdout is gone. Nothing more is written (not even
    the interpreter's flush at exit, which would complain on stderr); status 1."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_FAILED


# -- running a command against the catalogue --------------------------------------------------------


def command(body: Body) -> Run:
    """Run ``body(catalog, args)`` on the database; core errors become one line and exit 1."""

    def run(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import SQLAlchemyError

        from catalog.bootstrap import database
        from catalog.core.errors import CatalogError, InvalidInput
        from catalog.settings import get_settings

        settings = get_settings()
        with database(settings) as url:
            try:
                return asyncio.run(_with_catalog(settings, url, body, args))
            except CatalogError as exc:
                details = "; ".join(f"{e.pointer}: {e.detail}" for e in exc.errors)
                shown = details and isinstance(exc, InvalidInput)
                err(f"catalog: {exc.detail}" + (f" ({details})" if shown else ""))
                return EXIT_FAILED
            except BrokenPipeError:
                return reader_gone()
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
