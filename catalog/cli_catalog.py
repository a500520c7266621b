"""Catalogue commands of the CLI: tenant, token, import, export.

Thin commands over the core (``catalog.core``; bulk logic in ``catalog.core.transfer``), against the
configured database or the embedded one (``catalog.cli.database``). What a script wants is on stdout
(a token, a JSONL dump, a summary); progress, problems and details go to stderr. An error the
operator can act on (an unknown tenant, a bad slug) is one ``catalog: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from catalog.settings import ConfigError, get_settings

if TYPE_CHECKING:
    from catalog.core.service import Catalog
    from catalog.core.transfer import Item, Problem

EXIT_FAILED = 1


def add_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tenant = commands.add_parser("tenant", help="create and list tenants")
    tenant_actions = tenant.add_subparsers(title="actions", metavar="ACTION")
    create = tenant_actions.add_parser("create", help="create a tenant")
    create.add_argument("slug", metavar="SLUG", help="1-63 characters: a-z, 0-9 and '-'")
    create.add_argument("--name", help="a display name (default: the slug)")
    create.set_defaults(run=_command(_tenant_create))
    tenant_actions.add_parser("list", help="list tenants: slug, name, created (tab-separated)").set_defaults(
        run=_command(_tenant_list)
    )
    tenant.set_defaults(run=lambda args: _usage(tenant))

    token = commands.add_parser("token", help="mint bearer tokens")
    token_actions = token.add_subparsers(title="actions", metavar="ACTION")
    mint = token_actions.add_parser(
        "create", help="mint a token for a tenant; prints it once (only the token, on stdout)"
    )
    mint.add_argument("--tenant", required=True, metavar="SLUG")
    mint.add_argument(
        "--scope",
        dest="scopes",
        action="extend",
        nargs="+",
        default=[],
        metavar="S",
        help="a scope the token holds (repeatable)",
    )
    mint.add_argument("--admin", action="store_true", help="administer the tenant (admin API)")
    mint.add_argument("--expires-in", type=float, metavar="DAYS", help="expire after DAYS days")
    mint.add_argument("--name", help="a label for the token")
    mint.set_defaults(run=_command(_token_create))
    token.set_defaults(run=lambda args: _usage(token))

    load = commands.add_parser(
        "import",
        help="upsert resources from a directory tree or a .jsonl file of admin-API resource objects",
        description="PATH a directory: each file becomes a file:/// resource (text or blob by content,"
        " mime type guessed), each sub-directory an inode/directory resource. PATH a .jsonl file (or -"
        " for stdin): one admin-API resource object per line. Upserts by URI: re-running changes nothing.",
    )
    load.add_argument("--tenant", required=True, metavar="SLUG")
    load.add_argument("path", metavar="PATH")
    load.add_argument("--batch-size", type=int, default=None, help="resources per transaction (500)")
    load.add_argument("--no-progress", action="store_true", help="no progress bar")
    load.set_defaults(run=_import_command)

    dump = commands.add_parser("export", help="write the tenant's resources as JSONL to stdout")
    dump.add_argument("--tenant", required=True, metavar="SLUG")
    dump.set_defaults(run=_command(_export))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- running a command against the catalogue --------------------------------------------------------


Body = Callable[["Catalog", argparse.Namespace], Awaitable[int]]


def _command(body: Body) -> Callable[[argparse.Namespace], int]:
    """Run ``body(catalog, args)`` on the database; core errors become one line and exit 1."""

    def run(args: argparse.Namespace) -> int:
        from sqlalchemy.exc import SQLAlchemyError

        from catalog.cli import database
        from catalog.core.errors import CatalogError, InvalidInput

        settings = get_settings()
        with database(settings) as url:
            try:
                return asyncio.run(_with_catalog(url, body, args))
            except CatalogError as exc:
                details = "; ".join(f"{e.pointer}: {e.detail}" for e in exc.errors)
                shown = details and isinstance(exc, InvalidInput)
                _err(f"catalog: {exc.detail}" + (f" ({details})" if shown else ""))
                return EXIT_FAILED
            except BrokenPipeError:  # `catalog export ... | head`: the reader is gone
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return EXIT_FAILED
            except (SQLAlchemyError, ConnectionError) as exc:
                orig = getattr(exc, "orig", None) or exc
                first = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
                raise ConfigError(f"database error: {first}") from None
            except OSError as exc:
                where = f"{exc.filename}: " if exc.filename else ""
                raise ConfigError(f"{where}{exc.strerror or exc}") from None

    return run


async def _with_catalog(url: str, body: Body, args: argparse.Namespace) -> int:
    async with _catalog(url) as catalog:
        return await body(catalog, args)


@contextlib.asynccontextmanager
async def _catalog(url: str) -> AsyncIterator[Catalog]:
    from catalog.core.service import Catalog
    from catalog.db.engine import create_engine, probe_app_role

    settings = get_settings()
    engine = create_engine(
        url,
        statement_timeout_ms=settings.statement_timeout_ms,
        pool_size=2,
        max_overflow=0,
        app_role=await probe_app_role(url),
    )
    try:
        yield Catalog(engine=engine, settings=settings)
    finally:
        await engine.dispose()


# -- tenant -----------------------------------------------------------------------------------------


async def _tenant_create(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.tenants import create_tenant

    tenant = await create_tenant(catalog, args.slug, args.name)
    print(f"created tenant {tenant.slug} ({tenant.name})")
    return 0


async def _tenant_list(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import list_tenants

    for tenant in await list_tenants(catalog, Principal.platform_admin()):
        print(f"{tenant.slug}\t{tenant.name}\t{_iso(tenant.created_at)}")
    return 0


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- token ------------------------------------------------------------------------------------------


async def _token_create(catalog: Catalog, args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from catalog.core.principal import Principal
    from catalog.core.schemas import TokenIn
    from catalog.core.tenants import get_tenant
    from catalog.core.tokens import create_token
    from catalog.core.transfer import validation_reason

    if args.expires_in is not None and not args.expires_in > 0:
        raise ConfigError("--expires-in must be a positive number of days")
    tenant = await get_tenant(catalog, args.tenant)
    try:
        expires_at = datetime.now(UTC) + timedelta(days=args.expires_in) if args.expires_in else None
        body = TokenIn(scopes=args.scopes, admin=args.admin, expires_at=expires_at, name=args.name)
    except (ValidationError, OverflowError) as exc:
        reason = validation_reason(exc) if isinstance(exc, ValidationError) else "--expires-in is too large"
        raise ConfigError(f"invalid token: {reason}") from None
    created = await create_token(catalog, Principal.system("cli"), tenant, body)
    print(created.token, flush=True)
    details = [
        f"scopes: {', '.join(created.scopes) or '(none)'}",
        f"admin: {'yes' if created.admin else 'no'}",
        f"expires: {_iso(created.expires_at) if created.expires_at else 'never'}",
    ]
    _err(
        f"catalog: token {created.id} for tenant {tenant.slug} ({'; '.join(details)}); shown once, keep it safe"
    )
    return 0


# -- import -----------------------------------------------------------------------------------------


@dataclass
class _Source:
    items: Iterable[Item | Problem]
    total: int | None
    unit: str


def _open_source(args: argparse.Namespace, stack: contextlib.ExitStack) -> _Source:
    """What to import, found before the database is touched (a wrong PATH fails fast)."""
    from catalog.core.transfer import DirectorySource, jsonl_items

    path = Path(args.path)
    if args.path == "-":
        return _Source(jsonl_items(sys.stdin.buffer, "<stdin>"), None, "B")
    if path.is_dir():
        source = DirectorySource(path, max_bytes=get_settings().max_blob_bytes)
        return _Source(source, source.total, "entries")
    if path.is_file() and path.suffix.lower() == ".jsonl":
        stream = stack.enter_context(path.open("rb"))
        return _Source(jsonl_items(stream, str(path)), path.stat().st_size, "B")
    if path.exists():
        raise ConfigError(f"{path} is neither a directory nor a .jsonl file")
    raise ConfigError(f"{path}: no such file or directory")


def _import_command(args: argparse.Namespace) -> int:
    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    with contextlib.ExitStack() as stack:
        args.source = _open_source(args, stack)
        return _command(_import)(args)


async def _import(catalog: Catalog, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from catalog.core.principal import Principal
    from catalog.core.tenants import get_tenant
    from catalog.core.transfer import BATCH_SIZE, import_items
    from catalog.runtime import settle_garbage_collector

    settle_garbage_collector()  # an import allocates and drops millions of objects
    tenant = await get_tenant(catalog, args.tenant)
    source: _Source = args.source
    with tqdm(
        total=source.total,
        unit=source.unit,
        unit_scale=source.unit == "B",
        file=sys.stderr,
        disable=True if args.no_progress else None,
        desc=f"import into {tenant.slug}",
        dynamic_ncols=True,
    ) as bar:

        def show(problem: Problem) -> None:
            tqdm.write(str(problem), file=sys.stderr)

        report = await import_items(
            catalog,
            Principal.system("import"),
            tenant,
            source.items,
            batch_size=args.batch_size or BATCH_SIZE,
            on_problem=show,
            on_progress=bar.update,
        )
    summary = f"{report.created} created, {report.updated} updated, {report.unchanged} unchanged"
    summary += f", {len(report.failed)} failed"
    if report.skipped:
        summary += f", {len(report.skipped)} skipped"
    print(summary, flush=True)
    return EXIT_FAILED if report.failed else 0


# -- export -----------------------------------------------------------------------------------------


async def _export(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import get_tenant
    from catalog.core.transfer import export_lines

    tenant = await get_tenant(catalog, args.tenant)
    out = sys.stdout
    count = 0
    async for line in export_lines(catalog, Principal.system("export"), tenant):
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
        count += 1
    out.flush()
    _err(f"catalog: exported {count} resources of tenant {tenant.slug}")
    return 0
