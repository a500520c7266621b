"""``catalog import`` and ``catalog export``: thin over ``catalog.core.transfer``.

The source (a directory, a ``.jsonl`` file or stdin) is opened before the database is touched, so a
wrong PATH, prefix or ignore file fails fast; the summary goes to stdout, each problem to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from catalog.cli.common import EXIT_FAILED, Commands, command, err
from catalog.config_error import ConfigError

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog
    from catalog.core.transfer.items import Item, Problem


def add_commands(commands: Commands) -> None:
    load = commands.add_parser(
        "import",
        help="upsert resources from a directory tree or a .jsonl file of admin-API resource objects",
        description="PATH a directory: each file becomes a resource (text or blob by content, mime type"
        " guessed) at its relative path under --prefix (default file:///), each sub-directory an"
        " inode/directory resource; version-control folders (.git, .hg, .svn, .bzr, _darcs, CVS, .pijul,"
        " .jj) and __pycache__ are skipped, and so is whatever --ignore-file names. PATH a .jsonl file"
        " (or - for stdin): one admin-API resource object per line. Upserts by URI: re-running changes"
        " nothing.",
    )
    load.add_argument("--tenant", required=True, metavar="SLUG")
    load.add_argument("path", metavar="PATH")
    load.add_argument(
        "--prefix",
        metavar="URI",
        help="place the directory tree under URI (e.g. file:///projects/acme/): README.md becomes"
        " URI/README.md (default file:///)",
    )
    load.add_argument(
        "--ignore-file",
        type=Path,
        metavar="F",
        help="leave out what F names, in .gitignore syntax, relative to PATH (a line '!__pycache__/'"
        " re-includes a default)",
    )
    load.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="resources per transaction (500 for a directory). A .jsonl file is imported in one"
        " transaction, set-based, all or nothing (a bad line fails the import and nothing is written);"
        " with --batch-size it goes in batches instead, each on its own: bad lines are reported and"
        " the rest imported, and a URI given on several lines gets a version per line",
    )
    load.add_argument("--no-progress", action="store_true", help="no progress bar")
    load.set_defaults(run=import_command)

    dump = commands.add_parser("export", help="write the tenant's resources as JSONL to stdout")
    dump.add_argument("--tenant", required=True, metavar="SLUG")
    dump.set_defaults(run=command(_export))


# -- import -----------------------------------------------------------------------------------------


@dataclass
class _Source:
    items: Iterable[Item | Problem]
    total: int | None
    unit: str
    ignored: int = 0
    # A JSONL file, also as its raw lines: imported set-based, in one transaction (no --batch-size).
    stream: IO[bytes] | None = None
    name: str = ""


def _directory_options(args: argparse.Namespace) -> tuple[str, list[str]]:
    from catalog.core.transfer.directory import DEFAULT_BASE, import_base
    from catalog.core.uris import InvalidUri

    base = DEFAULT_BASE
    if args.prefix is not None:
        try:
            base = import_base(args.prefix)
        except InvalidUri as exc:
            raise ConfigError(f"--prefix: {exc.reason}") from None
    lines: list[str] = []
    if args.ignore_file is not None:
        try:
            lines = args.ignore_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise ConfigError(f"{args.ignore_file}: not UTF-8 text") from None
        except OSError as exc:
            raise ConfigError(f"{args.ignore_file}: {exc.strerror or exc}") from None
    return base, lines


def _open_source(args: argparse.Namespace, stack: contextlib.ExitStack) -> _Source:
    """What to import, found before the database is touched (a wrong PATH fails fast)."""
    from catalog.core.transfer.directory import DirectorySource, ignore_rules
    from catalog.core.transfer.jsonl import jsonl_items
    from catalog.settings import get_settings

    path = Path(args.path)
    if path.is_dir():
        base, lines = _directory_options(args)
        try:
            listed = DirectorySource(
                path, max_bytes=get_settings().max_blob_bytes, base=base, ignore=ignore_rules(lines)
            )
        except OSError as exc:  # the directory itself cannot be opened
            raise ConfigError(f"{path}: {exc.strerror or exc}") from None
        source = stack.enter_context(listed)
        return _Source(source, source.total, "entries", source.ignored)
    if args.prefix is not None or args.ignore_file is not None:
        raise ConfigError("--prefix and --ignore-file apply to a directory import only")
    max_bytes = get_settings().max_blob_bytes
    if args.path == "-":
        return _Source(
            jsonl_items(sys.stdin.buffer, "<stdin>", max_bytes),
            None,
            "B",
            stream=sys.stdin.buffer,
            name="<stdin>",
        )
    if path.is_file() and path.suffix.lower() == ".jsonl":
        stream = stack.enter_context(path.open("rb"))
        return _Source(
            jsonl_items(stream, str(path), max_bytes), path.stat().st_size, "B", stream=stream, name=str(path)
        )
    if path.exists():
        raise ConfigError(f"{path} is neither a directory nor a .jsonl file")
    raise ConfigError(f"{path}: no such file or directory")


def import_command(args: argparse.Namespace) -> int:
    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError("--batch-size must be at least 1")
    with contextlib.ExitStack() as stack:
        args.source = _open_source(args, stack)
        return command(_import)(args)


async def _import(catalog: Catalog, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from catalog.core.principal import Principal
    from catalog.core.tenants import get_tenant
    from catalog.core.transfer.importer import (
        BATCH_SIZE,
        PARALLEL_BYTES,
        PARSE_WORKERS,
        import_items,
        import_jsonl,
    )
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

        if source.stream is not None and args.batch_size is None:
            big = source.total is None or source.total >= PARALLEL_BYTES
            report = await import_jsonl(
                catalog,
                Principal.system("import"),
                tenant,
                source.stream,
                source.name,
                workers=PARSE_WORKERS if big else 0,
                on_problem=show,
                on_progress=bar.update,
            )
        else:
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
    if source.ignored:
        summary += f", {source.ignored} ignored"
    print(summary, flush=True)
    if report.failed and source.stream is not None and args.batch_size is None:
        err(
            f"catalog: nothing imported: {len(report.failed)} bad line(s); a .jsonl import is all or"
            " nothing (with --batch-size N the good lines go in)"
        )
    return EXIT_FAILED if report.failed else 0


# -- export -----------------------------------------------------------------------------------------


async def _export(catalog: Catalog, args: argparse.Namespace) -> int:
    from catalog.core.principal import Principal
    from catalog.core.tenants import get_tenant
    from catalog.core.transfer.exporter import export_lines

    tenant = await get_tenant(catalog, args.tenant)
    out = sys.stdout
    count = 0
    async for line in export_lines(catalog, Principal.system("export"), tenant):
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
        count += 1
    out.flush()
    err(f"catalog: exported {count} resources of tenant {tenant.slug}")
    return 0
