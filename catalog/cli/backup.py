"""``catalog backup`` and ``catalog restore``: a whole tenant to one gzip file and back.

The format and what it holds are ``catalog.core.backup``'s; this module opens the file (``-`` for
stdout/stdin), compresses, and shows progress on stderr. A backup is written beside FILE and moved
into place only once complete, so FILE is never a half-written backup.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from catalog.cli.common import Commands, command, err

if TYPE_CHECKING:
    from catalog.core.catalog import Catalog

GZIP_MAGIC = b"\x1f\x8b"


def add_commands(commands: Commands) -> None:
    backup = commands.add_parser(
        "backup",
        help="write everything of a tenant to FILE (gzip; - for stdout)",
        description="Resources with their whole version history, blobs, templates, grants and token"
        " metadata (never a secret) of one tenant, from one consistent snapshot, streamed.",
    )
    backup.add_argument("--tenant", required=True, metavar="SLUG")
    backup.add_argument("file", metavar="FILE")
    backup.add_argument("--no-progress", action="store_true", help="no progress bar")
    backup.set_defaults(run=command(_backup))

    restore = commands.add_parser(
        "restore",
        help="rebuild a backup as a new tenant SLUG",
        description="Creates tenant SLUG (it must not exist) and restores FILE into it: ids are new;"
        " versions, history and timestamps are kept. Tokens come back revoked: mint new ones. On any"
        " error the new tenant is removed again.",
    )
    restore.add_argument("--tenant", required=True, metavar="SLUG", help="the new tenant's slug")
    restore.add_argument("file", metavar="FILE", help="a backup (gzip or plain); - for stdin")
    restore.add_argument("--no-progress", action="store_true", help="no progress bar")
    restore.set_defaults(run=command(_restore))


def _binary(stream: gzip.GzipFile) -> IO[bytes]:
    """A gzip stream as the binary file it is: typeshed declares ``GzipFile`` an ``io.BufferedIOBase``,
    which does not derive from ``typing.IO``, though it has every method of a binary file."""
    return cast(IO[bytes], stream)


@contextlib.contextmanager
def _output(file: str) -> Iterator[IO[bytes]]:
    """FILE's gzip stream, renamed into place only when the backup completed."""
    if file == "-":
        with gzip.GzipFile(fileobj=sys.stdout.buffer, mode="wb", filename="", mtime=0) as out:
            yield _binary(out)
        sys.stdout.buffer.flush()
        return
    target = Path(file)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with open(partial, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as out:
            yield _binary(out)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


async def _backup(catalog: Catalog, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from catalog.core.backup.dump import backup_size, write_backup
    from catalog.core.tenants import get_tenant

    tenant = await get_tenant(catalog, args.tenant)
    total = await backup_size(catalog, tenant)
    with (
        _output(args.file) as out,
        tqdm(
            total=total,
            unit="rows",
            file=sys.stderr,
            disable=True if args.no_progress else None,
            desc=f"backup of {tenant.slug}",
            dynamic_ncols=True,
        ) as bar,
    ):

        def progress(kind: str) -> None:
            if kind not in ("chunk", "catalog-backup", "end"):
                bar.update(1)

        counts = await write_backup(catalog, tenant, out, on_progress=progress)
    where = "stdout" if args.file == "-" else args.file
    err(f"catalog: backed up tenant {tenant.slug} to {where}: {counts}")
    return 0


@contextlib.contextmanager
def _input(file: str) -> Iterator[tuple[IO[bytes], IO[bytes], int | None]]:
    """(the decompressed stream, the raw one, the raw size): gzip or plain, told by its first bytes."""
    raw: IO[bytes]
    if file == "-":
        raw = sys.stdin.buffer
        compressed = raw.peek(2)[:2] == GZIP_MAGIC  # type: ignore[attr-defined]
        size = None
    else:
        raw = open(file, "rb")  # noqa: SIM115 - closed below
        compressed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        size = os.fstat(raw.fileno()).st_size
    try:
        if compressed:
            with gzip.GzipFile(fileobj=raw, mode="rb") as stream:
                yield _binary(stream), raw, size
        else:
            yield raw, raw, size
    finally:
        if raw is not sys.stdin.buffer:
            raw.close()


async def _restore(catalog: Catalog, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from catalog.core.backup.restore import restore_backup
    from catalog.core.principal import Principal

    with (
        _input(args.file) as (stream, raw, size),
        tqdm(
            total=size,
            unit="B",
            unit_scale=True,
            file=sys.stderr,
            disable=True if args.no_progress else None,
            desc=f"restore into {args.tenant}",
            dynamic_ncols=True,
        ) as bar,
    ):
        seekable = raw.seekable()

        def progress() -> None:
            if seekable:
                bar.update(raw.tell() - bar.n)

        name = "<stdin>" if args.file == "-" else args.file
        report = await restore_backup(
            catalog, Principal.system("restore"), args.tenant, stream, name=name, on_progress=progress
        )
    origin = report.source.get("slug", "?")
    err(f"catalog: restored tenant {origin} as {report.tenant.slug}: {report.counts}")
    if report.counts.tokens:
        err(
            f"catalog: its {report.counts.tokens} tokens are listed revoked (a backup holds no secrets):"
            f" mint new ones with `catalog token create --tenant {report.tenant.slug}`"
        )
    return 0
