"""Bulk transfer: ``catalog import`` (a directory tree or a JSONL file) and ``catalog export``.

Sources turn files into :class:`ResourceIn` bodies (or into :class:`Problem` s, never exceptions);
:func:`import_items` writes them in batches through :func:`catalog.core.resources.upsert_many`, the
one write path, so an import makes versions, audit rows and change-feed rows like any other write and
a re-run that finds nothing new changes nothing. :func:`export_lines` pages through the keyset
listing and yields JSONL objects in the same ``ResourceIn`` shape, so ``export | import`` rebuilds an
identical catalogue.

Directory rules: every regular file becomes a resource whose URI is its path relative to the
imported directory (percent-encoded, then made canonical by :func:`normalize_uri`) under a base URI
(``file:///`` unless ``--prefix`` names another), named after the file; text when the bytes are UTF-8 without NUL, else a blob; the mime type is guessed from the
name (a fixed table, the same on every machine), falling back to ``text/plain`` or
``application/octet-stream``. Every sub-directory becomes an ``inode/directory`` resource. A symlink
is followed only when its target lies inside the imported directory (and is not one of the link's own
ancestors), resolved once, while the tree is listed; anything else that is not a regular file or a
directory is skipped. Reading never follows a link: each file is opened beneath the root's descriptor
one name at a time with ``O_NOFOLLOW`` and must be the very file the listing found (device and inode),
so a file or directory swapped for a link (or another file) after the listing is refused -- a failed
entry, named, while the rest is imported -- and nothing outside the tree is read. Entries matched by the ignore
rules (``.gitignore`` syntax: version-control folders and ``__pycache__`` by default, plus an
ignore file's lines) are left out silently and counted.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import dataclasses
import errno
import mimetypes
import multiprocessing
import os
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import quote

import pathspec
from pydantic import ValidationError
from sqlalchemy import select, text
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from catalog.core.catalog import Catalog
from catalog.core.errors import CatalogError
from catalog.core.jsonlines import BadJson, bounded_lines, max_line_bytes, parse_json, too_long
from catalog.core.principal import Principal
from catalog.core.resources import MAX_PAGE, ResourceRecord, list_page, upsert_many
from catalog.core.resources.bulk import BulkResult, Prepared, StartOver, prepare, upsert_all
from catalog.core.schemas.base import DIRECTORY_MIME_TYPE
from catalog.core.schemas.resources import ResourceIn
from catalog.core.tenants import Tenant
from catalog.core.uris import InvalidUri, normalize_uri
from catalog.core.visibility import load_visibility
from catalog.db.engine import TenantScope, transaction
from catalog.db.models import blobs, resources
from catalog.observability.metrics import record_import

_T = TypeVar("_T")

BATCH_SIZE = 500
IMPORT_WRITERS = 2  # batches written at once (each on a connection of its own)
FIRST_ANALYZE = 1000  # rows created before the first ANALYZE; then each time the count doubles
BATCH_BYTES = 64 * 1024 * 1024  # a batch is also cut when its content reaches this size
EXPORT_GROUP_BYTES = 32 * 1024 * 1024  # content bytes fetched per query while exporting

# Characters a path segment keeps as they are (RFC 3986 pchar minus the unreserved ones quote() keeps).
_SEGMENT_SAFE = "!$&'()*+,;=:@"


# -- what sources yield ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """A resource to write; ``location`` names where it came from (``file:line`` or a path)."""

    location: str
    body: ResourceIn
    weight: int = 1  # progress units this item stands for
    size: int = 0  # content bytes (to bound a batch's memory)


@dataclass(frozen=True)
class Problem:
    """An input that cannot be imported (``failed``) or is deliberately left out (``skipped``)."""

    location: str
    reason: str
    weight: int = 1
    skipped: bool = False

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}"


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[Problem] = field(default_factory=list)
    skipped: list[Problem] = field(default_factory=list)

    @property
    def written(self) -> int:
        return self.created + self.updated + self.unchanged


def validation_reason(exc: ValidationError) -> str:
    """A pydantic error as one line: ``/pointer: message; ...``."""
    parts = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        pointer = "/".join(str(p) for p in error["loc"])
        parts.append(f"/{pointer}: {message}" if pointer else message)
    return "; ".join(parts)


# -- JSONL ----------------------------------------------------------------------------------------


def jsonl_items(stream: IO[bytes], name: str, max_bytes: int) -> Iterator[Item | Problem]:
    """One item per non-blank line of admin-API resource objects; a bad line is a Problem.
    ``max_bytes``: CATALOG_MAX_BLOB_BYTES, which bounds a line (:func:`max_line_bytes`)."""
    for weight, lines in jsonl_chunks(stream, 1, max_line_bytes(max_bytes)):
        for number, raw in lines:
            item = jsonl_item(f"{name}:{number}", raw, max_bytes)
            yield dataclasses.replace(item, weight=weight)  # with the blank lines before it


def jsonl_chunks(
    stream: IO[bytes], size: int, limit: int
) -> Iterator[tuple[int, list[tuple[int, bytes | None]]]]:
    """The lines of ``stream`` as ``(number, raw)``, ``size`` non-blank ones at a time, each chunk
    with the bytes it covers (blank lines count towards the progress of the next line). A line
    longer than ``limit`` bytes is never held: its ``raw`` is None."""
    chunk: list[tuple[int, bytes | None]] = []
    weight = 0
    for number, raw, length in bounded_lines(stream, limit):
        weight += length
        if raw is not None and not raw.strip():
            continue
        chunk.append((number, raw))
        if len(chunk) >= size:
            yield weight, chunk
            chunk, weight = [], 0
    if chunk or weight:
        yield weight, chunk


def jsonl_item(location: str, raw: bytes | None, max_bytes: int) -> Item | Problem:
    """One line (None: one longer than the limit): an admin-API resource object, or the Problem."""
    if raw is None:
        return Problem(location, too_long(max_line_bytes(max_bytes)))
    weight = len(raw)
    try:
        data = parse_json(raw)
    except BadJson as exc:
        return Problem(location, str(exc), weight)
    if not isinstance(data, dict):
        return Problem(location, "a line must be a JSON object (an admin-API resource)", weight)
    try:
        body = ResourceIn.model_validate(data)
    except ValidationError as exc:
        return Problem(location, validation_reason(exc), weight)
    return Item(location, body, weight, size=len(raw))


# -- directories ----------------------------------------------------------------------------------

_MIME_TYPES = mimetypes.MimeTypes()  # Python's built-in table only: the same guess on every machine
for _suffix, _type in {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/x-rst",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
    ".toml": "application/toml",
    ".ts": "text/x-typescript",
    ".tsx": "text/x-typescript",
    ".jsx": "text/javascript",
    ".rs": "text/x-rust",
    ".go": "text/x-go",
    ".java": "text/x-java",
    ".rb": "text/x-ruby",
    ".sh": "text/x-shellscript",
    ".sql": "application/sql",
    ".ini": "text/plain",
    ".cfg": "text/plain",
    ".log": "text/plain",
    ".webp": "image/webp",
    ".wasm": "application/wasm",
}.items():
    _MIME_TYPES.add_type(_type, _suffix)
_ENCODING_TYPES = {
    "gzip": "application/gzip",
    "bzip2": "application/x-bzip2",
    "xz": "application/x-xz",
    "compress": "application/x-compress",
    "br": "application/x-brotli",
}


def guess_mime_type(name: str, *, is_text: bool) -> str:
    guessed, encoding = _MIME_TYPES.guess_type(name, strict=False)
    if encoding is not None:
        return _ENCODING_TYPES.get(encoding, "application/octet-stream")
    return guessed or ("text/plain" if is_text else "application/octet-stream")


DEFAULT_BASE = "file:///"

# Never imported unless an ignore file re-includes them (``!__pycache__/``): version-control
# metadata (``.git`` is a file in linked worktrees and submodules, hence no trailing slash) and
# Python's bytecode caches.
DEFAULT_IGNORES = (
    ".git",
    ".hg/",
    ".svn/",
    ".bzr/",
    "_darcs/",
    "CVS/",
    ".pijul/",
    ".jj/",
    "__pycache__/",
)


def ignore_rules(lines: Iterable[str] = ()) -> pathspec.GitIgnoreSpec:
    """The default ignores, then ``lines`` in ``.gitignore`` syntax (later lines win, ``!`` re-includes),
    matched against paths relative to the imported directory."""
    return pathspec.GitIgnoreSpec.from_lines([*DEFAULT_IGNORES, *lines])


def import_base(prefix: str) -> str:
    """The URI a directory tree is placed under (``--prefix``), canonical and ending in ``/``."""
    base = normalize_uri(prefix)
    return base if base.endswith("/") else base + "/"


def file_uri(parts: Iterable[str], base: str = DEFAULT_BASE) -> str:
    """The canonical URI of a relative path given as its segments, under ``base`` (see ``import_base``)."""
    return normalize_uri(base + "/".join(quote(part, safe=_SEGMENT_SAFE) for part in parts))


@dataclass(frozen=True)
class _Entry:
    path: Path  # as found under the root (links not resolved): what messages name
    parts: tuple[str, ...]  # relative to the root: what the URI is made of
    real: tuple[str, ...]  # relative to the root with every link resolved at listing: what is opened
    identity: tuple[int, int]  # (st_dev, st_ino) of what the listing found there
    is_dir: bool


# Every file and directory is opened beneath the root's descriptor one name at a time, never
# following a link (O_NOFOLLOW at each step): a name swapped for a link after the listing -- the
# file itself or any directory above it -- fails to open instead of leading out of the tree.
# O_NONBLOCK: a FIFO swapped in for a file must not block the open.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_SWAPPED = "changed after it was listed (a link or another file in its place), refused"


def _open_beneath(root_fd: int, parts: tuple[str, ...], *, directory: bool = False) -> int:
    """A descriptor of ``parts`` beneath the directory ``root_fd``, no link followed on the way."""
    fd = root_fd
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = _OPEN_FLAGS | (os.O_DIRECTORY if directory or not last else 0)
            opened = os.open(part, flags, dir_fd=fd)
            if fd != root_fd:
                os.close(fd)
            fd = opened
    except BaseException:
        if fd != root_fd:
            os.close(fd)
        raise
    return fd if parts else os.dup(root_fd)


class DirectorySource:
    """The entries of a directory tree, found up front (so progress has a total), read lazily.

    Holds the root's directory descriptor until :meth:`close` (or the ``with`` block ends): every
    listing and every read goes through it, so what is read is what was listed, inside the tree.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int,
        base: str = DEFAULT_BASE,
        ignore: pathspec.GitIgnoreSpec | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.base = base
        self.ignore = ignore if ignore is not None else ignore_rules()
        self.ignored = 0  # entries an ignore rule left out (a directory counts once, not its files)
        self._real_root = os.path.realpath(root)
        self.entries: list[_Entry] = []
        self.problems: list[Problem] = []
        # The root as the operator named it (links in PATH itself are the operator's choice).
        self._root_fd = os.open(self._real_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._walk(self._root_fd, (), (), ((),))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1

    def __enter__(self) -> DirectorySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def total(self) -> int:
        return len(self.entries) + len(self.problems)

    def _relative(self, real: str) -> tuple[str, ...] | None:
        """``real`` (a resolved path) as names beneath the root, or None when outside the tree."""
        if real == self._real_root:
            return ()
        if not real.startswith(self._real_root.rstrip(os.sep) + os.sep):
            return None
        return tuple(os.path.relpath(real, self._real_root).split(os.sep))

    def _walk(
        self,
        dir_fd: int,
        parts: tuple[str, ...],
        real: tuple[str, ...],
        ancestors: tuple[tuple[str, ...], ...],
    ) -> None:
        directory = self.root.joinpath(*parts)
        try:
            with os.scandir(dir_fd) as scan:
                found = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            self.problems.append(Problem(str(directory), f"cannot list: {exc.strerror or exc}"))
            return
        for entry in found:
            path = directory / entry.name
            here = (*parts, entry.name)
            if self._ignored(entry, here):
                self.ignored += 1
                continue
            opened: int | None = None
            try:
                if entry.is_symlink():
                    # Resolved here, once: the read opens the target's own names, never the link.
                    target = self._relative(os.path.realpath(path))
                    if target is None:
                        self.problems.append(
                            Problem(str(path), "symlink to outside the directory, skipped", skipped=True)
                        )
                        continue
                    if target in ancestors:
                        self.problems.append(
                            Problem(str(path), "symlink to one of its own parents, skipped", skipped=True)
                        )
                        continue
                    opened = _open_beneath(self._root_fd, target)
                    found_stat = os.fstat(opened)
                else:
                    target = (*real, entry.name)
                    found_stat = entry.stat(follow_symlinks=False)
            except OSError as exc:  # a broken link, a file that vanished
                self.problems.append(Problem(str(path), f"cannot stat: {exc.strerror or exc}", skipped=True))
                continue
            identity = (found_stat.st_dev, found_stat.st_ino)
            try:
                if stat.S_ISDIR(found_stat.st_mode):
                    self.entries.append(_Entry(path, here, target, identity, True))
                    if opened is None:
                        opened = self._open_listed(dir_fd, entry.name, identity, path)
                        if opened is None:
                            continue
                    self._walk(opened, here, target, (*ancestors, target))
                elif stat.S_ISREG(found_stat.st_mode):
                    self.entries.append(_Entry(path, here, target, identity, False))
                else:
                    self.problems.append(Problem(str(path), "not a regular file, skipped", skipped=True))
            finally:
                if opened is not None:
                    os.close(opened)

    def _open_listed(self, dir_fd: int, name: str, identity: tuple[int, int], path: Path) -> int | None:
        """The sub-directory ``name`` just listed, opened without following a link, or None (a
        problem recorded) when something else now stands there."""
        try:
            opened = _open_beneath(dir_fd, (name,), directory=True)
        except OSError as exc:
            self.problems.append(Problem(str(path), _open_reason(exc)))
            return None
        held = os.fstat(opened)
        if (held.st_dev, held.st_ino) != identity:
            os.close(opened)
            self.problems.append(Problem(str(path), _SWAPPED))
            return None
        return opened

    def _ignored(self, entry: os.DirEntry[str], parts: tuple[str, ...]) -> bool:
        """Whether an ignore rule names the entry; an ignored directory is not walked at all (as in
        git, a file inside it cannot be re-included)."""
        try:
            is_dir = entry.is_dir()  # follows a link: a link to a directory is matched as one
        except OSError:
            is_dir = False
        return self.ignore.match_file("/".join(parts) + ("/" if is_dir else ""))

    def __iter__(self) -> Iterator[Item | Problem]:
        yield from self.problems
        for entry in self.entries:
            yield self._item(entry)

    def _item(self, entry: _Entry) -> Item | Problem:
        location = str(entry.path)
        name = entry.parts[-1]
        try:
            name.encode("utf-8")
            uri = file_uri(entry.parts, self.base)
        except UnicodeEncodeError:
            return Problem(location, "the path is not valid UTF-8")
        except InvalidUri as exc:
            return Problem(location, f"no valid URI for this path: {exc.reason}")
        fields: dict[str, Any] = {"uri": uri, "name": name}
        size = 0
        if entry.is_dir:
            fields["mimeType"] = DIRECTORY_MIME_TYPE
        else:
            try:
                fd = _open_beneath(self._root_fd, entry.real)
            except OSError as exc:
                return Problem(location, _open_reason(exc))
            with open(fd, "rb") as handle:
                held = os.fstat(fd)
                # What was listed, still a regular file: not a FIFO or a device put in its place.
                if not stat.S_ISREG(held.st_mode) or (held.st_dev, held.st_ino) != entry.identity:
                    return Problem(location, _SWAPPED)
                try:
                    # Never ask for max_bytes at once: read() would allocate that much per file.
                    size = held.st_size
                    data = handle.read(min(size, self.max_bytes) + 1) if size <= self.max_bytes else b""
                except OSError as exc:
                    return Problem(location, f"cannot read: {exc.strerror or exc}")
            if size > self.max_bytes or len(data) > self.max_bytes:
                return Problem(location, f"larger than {self.max_bytes} bytes (CATALOG_MAX_BLOB_BYTES)")
            size = len(data)
            text = _as_text(data)
            fields["mimeType"] = guess_mime_type(name, is_text=text is not None)
            if text is not None:
                fields["text"] = text
            else:
                fields["blob"] = base64.b64encode(data).decode("ascii")
        try:
            return Item(location, ResourceIn.model_validate(fields), size=size)
        except ValidationError as exc:
            return Problem(location, validation_reason(exc))


def _open_reason(exc: OSError) -> str:
    # O_NOFOLLOW met a link (ELOOP), or a directory on the way is no longer one (ENOTDIR).
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return _SWAPPED
    return f"cannot read: {exc.strerror or exc}"


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# -- writing --------------------------------------------------------------------------------------


def _batches(
    items: Iterable[Item | Problem], batch_size: int, batch_bytes: int
) -> Iterator[list[Item | Problem]]:
    batch: list[Item | Problem] = []
    count = size = 0
    for item in items:
        batch.append(item)
        if isinstance(item, Item):
            count += 1
            size += item.size
        if count >= batch_size or size >= batch_bytes:
            yield batch
            batch, count, size = [], 0, 0
    if batch:
        yield batch


async def _read_ahead(batches: Iterator[_T]) -> AsyncIterator[_T]:
    """The batches, each read (files, JSON, validation) in a thread while the one before it is
    written: the database and the parsing work at the same time instead of taking turns."""
    upcoming = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
    try:
        while (batch := await upcoming) is not None:
            upcoming = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
            yield batch
    finally:
        if not upcoming.done():
            await asyncio.wait([upcoming])  # the generator must not be left running in its thread
        elif not upcoming.cancelled():
            upcoming.exception()  # retrieved: a failure after the last batch we used is not ours


# Errors that belong to one body (bad content, a blob too large, data PostgreSQL refuses): the
# batch is retried one body at a time so the others still go in. Anything else (the database is
# gone) ends the import.
_ITEM_ERRORS = (CatalogError, DataError, IntegrityError)


def _error_reason(exc: Exception) -> str:
    if isinstance(exc, CatalogError):
        return exc.one_line()
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0] if str(orig).strip() else type(exc).__name__


async def analyze_tables(catalog: Catalog) -> None:
    """Refresh the planner's statistics of the tables an import fills (PostgreSQL's advice after a
    bulk load). Without it, plans cached while a fresh database was empty -- the foreign-key checks
    on ``resources`` among them -- keep scanning a whole tenant per row, and an import into a new
    database slows quadratically wherever autovacuum is off or not yet round.

    Runs as the login role (the tables' owner, normally), not the row-security role: ``SET LOCAL
    ROLE NONE`` undoes, for this one transaction, the ``catalog_app`` role a superuser login runs as
    (``catalog.bootstrap``), and changes nothing for any other login. A role that may not analyze
    the tables gets a warning from PostgreSQL and nothing changes.
    """
    try:
        async with catalog.engine.begin() as conn:
            await conn.execute(text("SET LOCAL ROLE NONE"))
            await conn.execute(text(f"ANALYZE {resources.name}, {blobs.name}"))
    except DBAPIError:
        pass


async def import_items(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    items: Iterable[Item | Problem],
    *,
    batch_size: int = BATCH_SIZE,
    batch_bytes: int = BATCH_BYTES,
    analyze: bool = True,
    writers: int = IMPORT_WRITERS,
    on_problem: Callable[[Problem], None] = lambda problem: None,
    on_progress: Callable[[int], None] = lambda weight: None,
) -> ImportReport:
    """Upsert ``items`` in batches of ``batch_size`` (one transaction each); report what happened.

    Up to ``writers`` batches are written at once, on connections of their own, so that the
    database writes one batch while this process prepares the next. Batches that share a URI are
    never in flight together (the later one waits), so every URI's bodies still apply in input
    order; results, problems and progress are reported in input order too.
    """
    report = ImportReport()
    started = time.perf_counter()
    analyze_at = FIRST_ANALYZE
    in_flight: collections.deque[tuple[asyncio.Task[ImportReport], set[str], list[Item | Problem]]] = (
        collections.deque()
    )

    def problem(found: Problem) -> None:
        (report.skipped if found.skipped else report.failed).append(found)
        on_problem(found)

    async def settle_oldest() -> None:
        nonlocal analyze_at
        task, _, batch = in_flight.popleft()
        written = await task
        for found in batch:
            if isinstance(found, Problem):
                problem(found)
        for found in written.failed:
            problem(found)
        report.created += written.created
        report.updated += written.updated
        report.unchanged += written.unchanged
        if analyze and report.created >= analyze_at:
            await analyze_tables(catalog)
            analyze_at = report.created * 2
        on_progress(sum(item.weight for item in batch))

    try:
        async for batch in _read_ahead(_batches(items, batch_size, batch_bytes)):
            good = [item for item in batch if isinstance(item, Item)]
            uris = {item.body.uri for item in good}
            while in_flight and (
                len(in_flight) >= writers or any(not uris.isdisjoint(other) for _, other, _ in in_flight)
            ):
                await settle_oldest()
            task = asyncio.create_task(_write_batch(catalog, principal, tenant, good))
            in_flight.append((task, uris, batch))
        while in_flight:
            await settle_oldest()
    finally:
        for task, _, _ in in_flight:
            task.cancel()
        await asyncio.gather(*(task for task, _, _ in in_flight), return_exceptions=True)
    record_import(tenant.slug, report, time.perf_counter() - started)
    return report


CHUNK_SIZE = 5000  # lines parsed, checked and COPYed at a time by the set-based import
PARSE_WORKERS = 2  # processes parsing a large JSONL file while this one writes
PARALLEL_BYTES = 4 * 1024 * 1024  # a file this large is worth the worker processes' start
WRITE_EVERY = 25_000  # URIs staged before the database writes them (while later lines are parsed)


def prepare_lines(name: str, lines: list[tuple[int, bytes]], max_bytes: int) -> list[Prepared | Problem]:
    """Parse, validate and check numbered JSONL lines into staging rows (or Problems). A plain
    function of its arguments: it runs in a worker process as well as in this one."""
    out: list[Prepared | Problem] = []
    for number, raw in lines:
        item = jsonl_item(f"{name}:{number}", raw, max_bytes)
        if isinstance(item, Problem):
            out.append(item)
            continue
        try:
            out.append(prepare(item.location, number, item.body, max_bytes))
        except CatalogError as exc:
            out.append(Problem(item.location, exc.one_line(), item.weight))
    return out


async def _prepared(
    stream: IO[bytes], name: str, max_bytes: int, workers: int
) -> AsyncIterator[tuple[list[Prepared | Problem], int]]:
    """The file's chunks prepared, in order, with the bytes each covers. With ``workers``, parsing
    (JSON, validation, the URI rule: the import's CPU bound) runs in that many processes while this
    one COPYs and the database writes; without, in a thread one chunk ahead."""
    chunks = jsonl_chunks(stream, CHUNK_SIZE, max_line_bytes(max_bytes))
    if workers < 1:
        work = ((prepare_lines(name, lines, max_bytes), weight) for weight, lines in chunks)
        async for done in _read_ahead(work):
            yield done
        return
    loop = asyncio.get_running_loop()
    # fork: a worker starts in milliseconds with everything imported; it only runs prepare_lines.
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        pending: collections.deque[tuple[asyncio.Future[list[Prepared | Problem]], int]] = collections.deque()
        try:
            for weight, lines in chunks:
                pending.append((loop.run_in_executor(pool, prepare_lines, name, lines, max_bytes), weight))
                # A written batch's worth ahead: the workers parse the next while the database writes.
                if len(pending) > WRITE_EVERY // CHUNK_SIZE + workers:
                    future, done_weight = pending.popleft()
                    yield await future, done_weight
            while pending:
                future, done_weight = pending.popleft()
                yield await future, done_weight
        finally:
            for future, _ in pending:
                future.cancel()


async def import_jsonl(
    catalog: Catalog,
    principal: Principal,
    tenant: Tenant,
    stream: IO[bytes],
    name: str,
    *,
    workers: int = 0,
    on_problem: Callable[[Problem], None] = lambda problem: None,
    on_progress: Callable[[int], None] = lambda weight: None,
) -> ImportReport:
    """Upsert the JSONL ``stream`` set-based, in one transaction (:mod:`catalog.core.resources.bulk`):
    every line, or -- when any is bad -- none, every bad one reported. ``workers``: processes that
    parse while this one writes (0: a thread).

    From a file into a tenant with no resources yet, the staged rows are written every
    ``WRITE_EVERY`` URIs, so that the database works while the lines after them are parsed. Should
    a URI come again after its first body was written (or another writer add to the tenant
    meanwhile), the import starts over from where the stream began and writes once, at the end;
    progress already reported is not reported twice.
    """
    report = ImportReport()
    start = stream.tell() if stream.seekable() else None
    reported = 0  # progress reported so far (a second pass reports only what goes beyond it)

    async def chunks() -> AsyncIterator[list[Prepared | tuple[str, str]]]:
        nonlocal reported
        done = 0
        async for chunk, weight in _prepared(stream, name, catalog.settings.max_blob_bytes, workers):
            # Counted before the chunk is handed on: a consumer that stops after the last chunk
            # (its generator closed at the yield) must not leave that chunk's bytes uncounted.
            done += weight
            if done > reported:
                on_progress(done - reported)
                reported = done
            yield [(item.location, item.reason) if isinstance(item, Problem) else item for item in chunk]

    async def write(write_every: int | None) -> BulkResult:
        parsed = chunks()
        try:
            return await upsert_all(catalog, principal, tenant, parsed, write_every=write_every)
        finally:
            await parsed.aclose()  # a pass that started over: its workers stop before the next reads

    try:
        written = await write(WRITE_EVERY if start is not None else None)
    except StartOver:
        assert start is not None
        stream.seek(start)
        written = await write(None)
    for location, reason in written.failed:
        found = Problem(location, reason)
        report.failed.append(found)
        on_problem(found)
    if not written.failed:
        report.created, report.updated, report.unchanged = written.created, written.updated, written.unchanged
        if written.created:
            await analyze_tables(catalog)
    return report


# PostgreSQL's deadlock_detected: two batches storing the same blobs in different orders. The loser
# rolled back, so writing its batch again is safe (an upsert by URI).
_DEADLOCK = "40P01"
_DEADLOCK_RETRIES = 3


async def _write_batch(
    catalog: Catalog, principal: Principal, tenant: Tenant, good: list[Item]
) -> ImportReport:
    written = ImportReport()  # of one batch: failed holds its bad bodies
    if not good:
        return written
    for attempt in range(_DEADLOCK_RETRIES + 1):
        try:
            written.created, written.updated, written.unchanged = await upsert_many(
                catalog, principal, tenant, [item.body for item in good]
            )
            return written
        except _ITEM_ERRORS:
            break
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != _DEADLOCK or attempt == _DEADLOCK_RETRIES:
                raise
    for item in good:  # find the bad ones; the rest still go in
        try:
            created, updated, unchanged = await upsert_many(catalog, principal, tenant, [item.body])
        except _ITEM_ERRORS as exc:
            written.failed.append(Problem(item.location, _error_reason(exc), item.weight))
            continue
        written.created += created
        written.updated += updated
        written.unchanged += unchanged
    return written


# -- export ---------------------------------------------------------------------------------------


def export_object(record: ResourceRecord, *, text: str | None, blob: bytes | None) -> dict[str, Any]:
    """A resource as an admin-API body (``ResourceIn`` shape): stored metadata and inline content."""
    data = record.snapshot()
    data.pop("size", None)  # computed on the way in, never given
    if text is not None:
        data["text"] = text
    elif blob is not None:
        data["blob"] = base64.b64encode(blob).decode("ascii")
    return data


async def export_lines(
    catalog: Catalog, principal: Principal, tenant: Tenant
) -> AsyncIterator[dict[str, Any]]:
    """Every resource of ``tenant`` visible to ``principal``, in URI order, with its content.

    Each page is read in one transaction (listing and content agree); content is fetched a
    bounded group at a time, so memory stays flat however large the catalogue.
    """
    cursor: str | None = None
    while True:
        async with transaction(catalog.engine, TenantScope.tenant(tenant.id)) as conn:
            visibility = await load_visibility(conn, principal, tenant.id)
            records, cursor = await list_page(
                catalog, conn, visibility, listing="export", cursor=cursor, limit=MAX_PAGE
            )
            start = 0
            while start < len(records):  # content in groups of bounded size, one query per kind
                end, group_bytes = start, 0
                while end < len(records) and (end == start or group_bytes < EXPORT_GROUP_BYTES):
                    group_bytes += records[end].size or 0
                    end += 1
                group = records[start:end]
                texts, data = await _contents(conn, tenant, group)
                for record in group:
                    yield export_object(
                        record,
                        text=texts.get(record.id),
                        blob=data.get(record.blob_sha256) if record.blob_sha256 else None,
                    )
                start = end
        if cursor is None:
            return


async def _contents(
    conn: AsyncConnection, tenant: Tenant, records: list[ResourceRecord]
) -> tuple[dict[int, str], dict[str, bytes]]:
    """The text (by resource id) and blob bytes (by sha256) of ``records``."""
    texts: dict[int, str] = {}
    text_ids = [r.id for r in records if r.blob_sha256 is None]
    if text_ids:
        rows = await conn.execute(
            select(resources.c.id, resources.c.text).where(
                resources.c.tenant_id == tenant.id, resources.c.id.in_(text_ids)
            )
        )
        texts = {row.id: row.text for row in rows if row.text is not None}
    data: dict[str, bytes] = {}
    shas = sorted({r.blob_sha256 for r in records if r.blob_sha256})
    if shas:
        rows = await conn.execute(
            select(blobs.c.sha256, blobs.c.data).where(
                blobs.c.tenant_id == tenant.id, blobs.c.sha256.in_(shas)
            )
        )
        data = {row.sha256: bytes(row.data) for row in rows}
    return texts, data
